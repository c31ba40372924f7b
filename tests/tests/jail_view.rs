//! Issue 28, tried as an attacker would: a jailed agent has its own view of the machine.
//! It reaches none of the user's Unix sockets (a real tmux server, ssh-agent, D-Bus
//! session bus, a socket under `$HOME`, an abstract socket), sees only its own
//! processes, and reads none of the user's secrets, while grove's own socket still
//! answers, also after a daemon restart. Every attack is run unjailed too, to show it
//! works there. Namespaces are Linux's: elsewhere a jail is refused (see `jail_spawn`).
#![cfg(target_os = "linux")]

mod support;

use std::fs;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use support::*;

/// Runs `script` as an agent (jailed or not) with `vars`, and returns its log.
fn run_agent(g: &Grove, jailed: bool, vars: &[(&str, String)], script: &str) -> String {
    let mut args: Vec<String> = vec![if jailed { "--jail" } else { "--no-jail" }.into()];
    for (k, v) in vars {
        args.push("--env".into());
        args.push(format!("{k}={v}"));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let id = g.spawn(&args, script);
    let record = g.wait(&id);
    let log = g.ok(&["logs", &id]);
    assert_eq!(record["outcome"], "succeeded", "{log}");
    log
}

/// A process of the user's, killed when dropped.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_for_socket(path: &Path) {
    eventually(
        &format!("a socket at {}", path.display()),
        Duration::from_secs(20),
        || path.exists(),
    );
}

/// The user's tmux server on `socket`, with one session; killed when dropped.
struct Tmux(PathBuf);

impl Tmux {
    fn start(socket: &Path) -> Tmux {
        let started = Command::new("tmux")
            .arg("-S")
            .arg(socket)
            .args(["-f", "/dev/null", "new-session", "-d", "-s", "user", "sh"])
            .env_remove("TMUX")
            .status()
            .expect("tmux");
        assert!(started.success(), "tmux new-session");
        wait_for_socket(socket);
        Tmux(socket.to_path_buf())
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .arg("-S")
            .arg(&self.0)
            .arg("kill-server")
            .status();
    }
}

/// A server of the user's that listens on `socket` once it runs.
fn serve(command: &mut Command, socket: &Path) -> Server {
    let child = command
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the user's server");
    wait_for_socket(socket);
    Server(child)
}

fn ssh_agent(socket: &Path) -> Server {
    serve(
        Command::new("ssh-agent").args(["-D", "-a"]).arg(socket),
        socket,
    )
}

fn dbus_session(socket: &Path) -> Server {
    serve(
        Command::new("dbus-daemon")
            .args(["--session", "--nofork", "--nopidfile"])
            .arg(format!("--address=unix:path={}", socket.display())),
        socket,
    )
}

const TRY_SOCKETS: &str = r#"
    try() { name=$1; shift; if "$@" >/dev/null 2>&1; then echo "reached: $name"; else echo "refused: $name"; fi; }
    try tmux tmux -S "$TMUX_SOCK" send-keys -t user "touch $PWNED" Enter
    # ssh-add -l: 0 keys listed, 1 no keys, 2 no agent.
    ssh-add -l >/dev/null 2>&1; [ $? -lt 2 ] && echo "reached: ssh-agent" || echo "refused: ssh-agent"
    try dbus dbus-send --bus="unix:path=$DBUS_SOCK" --print-reply --dest=org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus.ListNames
    try home-socket python3 -c 'import socket,sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])' "$HOME_SOCK"
    try abstract python3 -c 'import socket,sys; socket.socket(socket.AF_UNIX).connect("\0" + sys.argv[1])' "$ABSTRACT"
    "$GROVE_BIN" state get >/dev/null && echo "reached: grove"
    exit 0
"#;

const SOCKETS: [&str; 5] = ["tmux", "ssh-agent", "dbus", "home-socket", "abstract"];

#[test]
fn a_jailed_agent_reaches_none_of_the_users_sockets_but_groves() {
    if !(have_landlock()
        && have_program("tmux", &["-V"])
        && have_program("ssh-agent", &["-h"])
        && have_program("dbus-daemon", &["--version"])
        && have_python3())
    {
        return;
    }
    let g = Grove::new();
    // The user's servers: tmux and ssh-agent where they put their sockets (below /tmp),
    // the session bus under the runtime directory, one more under $HOME.
    let outside_home = tempfile::Builder::new()
        .prefix("gv")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let tmux_sock = outside_home.path().join("tmux-default");
    let ssh_sock = outside_home.path().join("ssh-agent.sock");
    let dbus_sock = g.make_dir("xdg/run").join("bus");
    let home_sock = g.make_dir(".app").join("app.sock");
    let _tmux = Tmux::start(&tmux_sock);
    let _ssh = ssh_agent(&ssh_sock);
    let _dbus = dbus_session(&dbus_sock);
    let _home_listener = UnixListener::bind(&home_sock).expect("bind under HOME");
    let abstract_name = format!("grove-view-test-{}", std::process::id());
    let _abstract = bind_abstract(&abstract_name);
    let pwned = outside_home.path().join("pwned");
    let vars = [
        ("TMUX_SOCK", tmux_sock.display().to_string()),
        ("SSH_AUTH_SOCK", ssh_sock.display().to_string()),
        ("DBUS_SOCK", dbus_sock.display().to_string()),
        ("HOME_SOCK", home_sock.display().to_string()),
        ("ABSTRACT", abstract_name.clone()),
        ("PWNED", pwned.display().to_string()),
        ("GROVE_BIN", BIN.to_string()),
    ];

    let unjailed = run_agent(&g, false, &vars, TRY_SOCKETS);
    for name in SOCKETS.iter().chain(&["grove"]) {
        assert!(
            unjailed.contains(&format!("reached: {name}")),
            "unjailed: {unjailed}"
        );
    }
    eventually(
        "the unjailed agent's keys typed by tmux",
        Duration::from_secs(10),
        || pwned.exists(),
    );
    fs::remove_file(&pwned).expect("rm");

    let jailed = run_agent(&g, true, &vars, TRY_SOCKETS);
    for name in SOCKETS {
        assert!(
            jailed.contains(&format!("refused: {name}")),
            "jailed: {jailed}"
        );
    }
    assert!(jailed.contains("reached: grove"), "jailed: {jailed}");
    // tmux would have run it by now had the keys arrived: the unjailed run's did above.
    let typed = Command::new("tmux")
        .arg("-S")
        .arg(&tmux_sock)
        .args(["capture-pane", "-p", "-t", "user"])
        .output()
        .expect("capture-pane");
    let screen = String::from_utf8_lossy(&typed.stdout);
    assert_eq!(
        screen.matches("touch").count(),
        1,
        "keys of the jailed agent reached tmux: {screen}"
    );
    assert!(
        !pwned.exists(),
        "the jailed agent's keys ran in the user's tmux"
    );
}

fn bind_abstract(name: &str) -> UnixListener {
    use std::os::linux::net::SocketAddrExt;
    let addr =
        std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).expect("abstract name");
    UnixListener::bind_addr(&addr).expect("bind abstract socket")
}

const TRY_PROCESSES: &str = r#"
    ps -e -o pid= -o comm= | sed 's/^/ps: /'
    if cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n' | grep -q "^USER_SECRET="; then
        echo "read: another process's environment"
    fi
    [ -e "/proc/$DAEMON_PID/environ" ] && echo "seen: the daemon"
    echo "own pid: $$"
    exit 0
"#;

#[test]
fn a_jailed_agent_sees_only_its_own_processes() {
    if !have_landlock() {
        return;
    }
    let g = Grove::new();
    // A process of the user's with a secret in its environment only.
    let user = Server(
        Command::new("sleep")
            .arg("300")
            .env("USER_SECRET", "hunter2")
            .spawn()
            .expect("sleep"),
    );
    g.ok(&["list"]);
    let daemon_pid = g.json(&["daemon", "status"])["pid"]
        .as_i64()
        .expect("pid")
        .to_string();
    let vars = [("DAEMON_PID", daemon_pid)];
    let unjailed = run_agent(&g, false, &vars, TRY_PROCESSES);
    assert!(
        unjailed.contains("read: another process's environment"),
        "{unjailed}"
    );
    assert!(unjailed.contains("seen: the daemon"), "{unjailed}");

    let jailed = run_agent(&g, true, &vars, TRY_PROCESSES);
    assert!(!jailed.contains("read:"), "{jailed}");
    assert!(!jailed.contains("seen:"), "{jailed}");
    let listed: Vec<&str> = jailed.lines().filter(|l| l.starts_with("ps: ")).collect();
    // grove's init, the agent's shell, ps and sed: nothing of the user's.
    assert!(listed.len() <= 5, "{jailed}");
    assert!(
        !listed
            .iter()
            .any(|l| l.contains("sleep") || l.contains("grove-e2e ")),
        "{jailed}"
    );
    assert!(jailed.contains("own pid: 2"), "{jailed}");
    drop(user);
}

const TRY_SECRETS: &str = r#"
    for f in "$HOME/.ssh/id_ed25519" "$HOME/.aws/credentials" "$HOME/.netrc" \
             "$HOME/.config/gh/hosts.yml" "$GROVE_HOME/grove.db" "$HOME/notes/todo.txt" \
             "$HOME/.cargo/env" "$HOME/shown/ok.txt" "$HOME/shown/hidden/key" \
             "$HOME/shown/token"; do
        # Read: its content, not the empty file a mask shows.
        if grep -q . "$f" 2>/dev/null; then echo "read: $f"; fi
        [ -e "$f" ] && echo "exists: $f"
    done
    ls "$HOME/.ssh" >/dev/null 2>&1 && echo "listed: .ssh"
    exit 0
"#;

#[test]
fn a_jailed_agent_reads_none_of_the_users_secrets_and_sees_what_is_shown() {
    if !have_landlock() {
        return;
    }
    let root = short_temp_dir("gs");
    let shown = root.path().join("shown");
    let hidden = shown.join("hidden");
    let show = shown.display().to_string();
    // A directory and a file, each inside a directory shown read-only.
    let hide = format!("{}:{}", hidden.display(), shown.join("token").display());
    let g = Grove::new().with_env(&[("GROVE_JAIL_SHOW", &show), ("GROVE_JAIL_HIDE", &hide)]);
    let home = g.dir.path();
    let write = |rel: &str, text: &str| {
        let path = home.join(rel);
        fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        fs::write(&path, text).expect("write");
        path
    };
    let secrets: Vec<PathBuf> = [
        ".ssh/id_ed25519",
        ".aws/credentials",
        ".netrc",
        ".config/gh/hosts.yml",
        "notes/todo.txt",
    ]
    .iter()
    .map(|rel| write(rel, "secret\n"))
    .collect();
    write(".cargo/env", "# toolchain\n");
    fs::create_dir_all(&hidden).expect("mkdir");
    fs::write(shown.join("ok.txt"), "shown\n").expect("write");
    fs::write(shown.join("token"), "secret\n").expect("write");
    fs::write(hidden.join("key"), "secret\n").expect("write");
    let vars: [(&str, String); 1] = [("HOME", home.display().to_string())];
    // The shown directory stands in $HOME's place for this test: the view shows it
    // through jail_show wherever it is.
    let script = TRY_SECRETS.replace("$HOME/shown", &show);

    let unjailed = run_agent(&g, false, &vars, &script);
    for secret in &secrets {
        assert!(
            unjailed.contains(&format!("read: {}", secret.display())),
            "unjailed: {unjailed}"
        );
    }
    assert!(unjailed.contains("grove.db"), "unjailed: {unjailed}");
    assert!(unjailed.contains("listed: .ssh"), "unjailed: {unjailed}");

    let jailed = run_agent(&g, true, &vars, &script);
    for secret in &secrets {
        assert!(
            !jailed.contains(&secret.display().to_string()),
            "jailed: {jailed}"
        );
    }
    assert!(!jailed.contains("grove.db"), "jailed: {jailed}");
    assert!(
        !jailed.contains("listed: .ssh"),
        "masked, not only unreadable: {jailed}"
    );
    assert!(!jailed.contains("hidden/key"), "jail_hide: {jailed}");
    assert!(
        !jailed.contains(&format!("read: {show}/token")),
        "jail_hide: {jailed}"
    );
    assert!(
        unjailed.contains(&format!("read: {show}/token")),
        "unjailed: {unjailed}"
    );
    assert!(
        jailed.contains(&format!("read: {show}/ok.txt")),
        "jail_show: {jailed}"
    );
    assert!(
        jailed.contains(&format!("read: {}/.cargo/env", home.display())),
        "toolchains stay: {jailed}"
    );
}

#[test]
fn a_jailed_agent_reaches_grove_again_after_a_daemon_restart() {
    if !have_landlock() {
        return;
    }
    let g = Grove::new();
    let gate = g.files().join("restarted");
    let script = r#"
        "$GROVE_BIN" report "before" && echo "reached before"
        while [ ! -e "$GATE" ]; do sleep 0.05; done
        "$GROVE_BIN" report "after" && echo "reached after"
        exit 0
    "#;
    let gate_env = format!("GATE={}", gate.display());
    let bin_env = format!("GROVE_BIN={BIN}");
    let id = g.spawn(&["--jail", "--env", &gate_env, "--env", &bin_env], script);
    eventually("the first report", Duration::from_secs(20), || {
        g.json(&["show", &id])["report"] == "before"
    });
    g.ok(&["daemon", "restart"]);
    fs::write(&gate, "").expect("gate");
    let record = g.wait(&id);
    let log = g.ok(&["logs", &id]);
    assert_eq!(record["outcome"], "succeeded", "{log}");
    assert!(log.contains("reached after"), "{log}");
    assert_eq!(g.json(&["show", &id])["report"], "after", "{log}");
}

/// An agent's setup.sh, run as setup: it tries the user's key, the token in the user's
/// git config, a process of the user's, ssh-agent, tmux and writes outside (`$OUTSIDE`, the user's objects and
/// hooks), and runs git, which must work.
const TRY_FROM_SETUP: &str = r#"
try() { name=$1; shift; if "$@" >/dev/null 2>&1; then echo "reached: $name"; else echo "refused: $name"; fi; }
grep -q PRIVATE "$HOME/.ssh/id_ed25519" 2>/dev/null && echo "read: the ssh key"
ls "$HOME/.ssh" >/dev/null 2>&1 && echo "seen: .ssh"
grep -q c2VjcmV0 "$USERS_GIT/config" 2>/dev/null && echo "read: the token in your git config"
tr '\0' '\n' < "/proc/$USER_PID/environ" 2>/dev/null | grep -q '^USER_SECRET=' && echo "read: the user's environment"
cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n' | grep -q '^USER_SECRET=' && echo "read: a process's environment"
ssh-add -l >/dev/null 2>&1; [ $? -lt 2 ] && echo "reached: ssh-agent" || echo "refused: ssh-agent"
try tmux tmux -S "$TMUX_SOCK" send-keys -t user "touch $PWNED" Enter
for f in "$OUTSIDE" "$USERS_GIT/objects/planted" "$USERS_GIT/hooks/post-checkout"; do
    (echo planted > "$f") 2>/dev/null && echo "wrote: $f"
done
echo "git: $(git rev-parse HEAD 2>&1)"
git status --porcelain >/dev/null 2>&1 && echo "git status: ok"
echo ran > setup-ran.txt
"#;

/// The user's servers and secrets a setup command attacks, and the variables that
/// name them; the servers stop when dropped.
struct Targets {
    vars: Vec<(&'static str, String)>,
    pwned: PathBuf,
    outside: Vec<PathBuf>,
    _servers: (Tmux, Server, Server, tempfile::TempDir),
}

impl Targets {
    fn plant(g: &Grove) -> Targets {
        let key = g.make_dir(".ssh").join("id_ed25519");
        fs::write(&key, "-----BEGIN OPENSSH PRIVATE KEY-----\n").expect("key");
        // As a CI checkout leaves one in the repository's config.
        g.git(&[
            "config",
            "http.https://example.invalid/.extraheader",
            "AUTHORIZATION: basic c2VjcmV0",
        ]);
        let sockets = tempfile::Builder::new()
            .prefix("gv")
            .tempdir_in("/tmp")
            .expect("tempdir");
        let tmux_sock = sockets.path().join("tmux-default");
        let ssh_sock = sockets.path().join("ssh-agent.sock");
        let tmux = Tmux::start(&tmux_sock);
        let ssh = ssh_agent(&ssh_sock);
        let user = Server(
            Command::new("sleep")
                .arg("300")
                .env("USER_SECRET", "hunter2")
                .spawn()
                .expect("sleep"),
        );
        let pwned = sockets.path().join("pwned");
        let users_git = g.repo.join(".git");
        let outside = vec![
            g.files().join("outside.txt"),
            users_git.join("objects/planted"),
            users_git.join("hooks/post-checkout"),
        ];
        let vars = vec![
            ("TMUX_SOCK", tmux_sock.display().to_string()),
            ("SSH_AUTH_SOCK", ssh_sock.display().to_string()),
            ("USER_PID", user.0.id().to_string()),
            ("PWNED", pwned.display().to_string()),
            ("OUTSIDE", outside[0].display().to_string()),
            ("USERS_GIT", users_git.display().to_string()),
            ("GROVE_BIN", BIN.to_string()),
        ];
        Targets {
            vars,
            pwned,
            outside,
            _servers: (tmux, ssh, user, sockets),
        }
    }

    fn env_args(&self) -> Vec<String> {
        self.vars
            .iter()
            .flat_map(|(k, v)| ["--env".to_string(), format!("{k}={v}")])
            .collect()
    }

    /// `log` is a setup's that ran in a jail with a view: every attack failed, git
    /// worked at `head`.
    fn assert_all_failed(&self, log: &str, head: &str) {
        assert_holds_all(
            log,
            &[
                "run jailed",
                "refused: ssh-agent",
                "refused: tmux",
                &format!("git: {head}"),
                "git status: ok",
            ],
        );
        for never in ["read:", "seen:", "wrote:", "reached:"] {
            assert!(!log.contains(never), "{never} {log}");
        }
        for path in &self.outside {
            assert!(!path.exists(), "{} written: {log}", path.display());
        }
        assert!(
            !self.pwned.exists(),
            "keys typed into the user's tmux: {log}"
        );
    }
}

/// The user approves `sh ./setup.sh`; a jailed agent commits `TRY_FROM_SETUP` as its
/// setup.sh and runs `then`. Returns the agent's id.
fn agent_commits_setup_attack(g: &Grove, targets: &Targets, then: &str) -> String {
    fs::write(
        g.repo.join(".grove.toml"),
        "[worktree]\nsetup = [\"sh ./setup.sh\"]\n",
    )
    .expect("write");
    fs::write(g.repo.join("setup.sh"), "echo ran > setup-ran.txt\n").expect("write");
    fs::write(g.repo.join(".gitignore"), "setup-ran.txt\n").expect("write");
    g.git(&["add", ".grove.toml", "setup.sh", ".gitignore"]);
    g.git(&["commit", "-qm", "setup"]);
    g.ok(&["trust"]);
    let script = format!(
        "cat > setup.sh <<'EOF'\n{TRY_FROM_SETUP}EOF\n\
         git add setup.sh && git commit -qm 'my setup' || exit 1\n{then}"
    );
    let mut args = targets.env_args();
    args.push("--jail".into());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let id = g.spawn(&args, &script);
    g.succeeded_log(&id);
    id
}

fn have_setup_targets() -> bool {
    have_landlock() && have_program("tmux", &["-V"]) && have_program("ssh-agent", &["-h"])
}

/// The user's own unjailed spawn on a jailed agent's branch runs the agent's setup.sh
/// jailed, in a view of its own: none of the user's secrets, processes or sockets,
/// no write outside, git working on the user's repository through it read-only. The
/// control: the same script, merged into the user's branch, runs as the user and
/// does all of it.
#[test]
fn setup_on_agents_content_runs_in_a_view_of_its_own() {
    if !have_setup_targets() {
        return;
    }
    let g = Grove::new();
    let targets = Targets::plant(&g);
    let agent = agent_commits_setup_attack(&g, &targets, "");
    let branch = format!("grove/{agent}");
    let head = g.git(&["rev-parse", &branch]).trim().to_string();
    let mut args = targets.env_args();
    args.extend(["--no-jail".into(), "--base".into(), branch.clone()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();

    let id = g.spawn(&args, "cat setup-ran.txt");
    let log = g.succeeded_log(&id);
    assert!(log.contains("is on no branch or tag of yours"), "{log}");
    targets.assert_all_failed(&log, &head);

    g.git(&["merge", "-q", "--ff-only", &branch]);
    let id = g.spawn(&args[..args.len() - 2], "cat setup-ran.txt");
    let log = g.succeeded_log(&id);
    assert!(!log.contains("run jailed"), "{log}");
    assert_holds_all(
        &log,
        &[
            "read: the ssh key",
            "seen: .ssh",
            "read: the token in your git config",
            "read: the user's environment",
            "read: a process's environment",
            "reached: ssh-agent",
            "reached: tmux",
            &format!("git: {head}"),
        ],
    );
    for path in &targets.outside {
        assert!(
            path.exists(),
            "the control did not write {}",
            path.display()
        );
    }
    eventually(
        "the control's keys typed by tmux",
        Duration::from_secs(10),
        || targets.pwned.exists(),
    );
}

/// A jailed agent's child runs the agent's setup.sh in the jail's view as well.
#[test]
fn a_jailed_agents_setup_runs_in_a_view_of_its_own() {
    if !have_setup_targets() {
        return;
    }
    let g = Grove::new();
    let targets = Targets::plant(&g);
    let agent = agent_commits_setup_attack(
        &g,
        &targets,
        r#"child=$("$GROVE_BIN" spawn -- true) || exit 1
           "$GROVE_BIN" wait "$child" > /dev/null
           echo "child=$child""#,
    );
    let log = g.ok(&["logs", &agent]);
    let child = log
        .lines()
        .find_map(|l| l.strip_prefix("child="))
        .unwrap_or_else(|| panic!("no child: {log}"))
        .trim()
        .to_string();
    let head = g.git(&["rev-parse", &format!("grove/{agent}")]);
    let child_log = g.ok(&["logs", &child]);
    assert!(child_log.contains("of a jailed agent"), "{child_log}");
    targets.assert_all_failed(&child_log, head.trim());
}
