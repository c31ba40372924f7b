//! Agents with a terminal (`grove spawn --tty`), driven the way people drive them:
//! `grove attach` inside real tmux sessions (send-keys, capture-pane), `grove send` and
//! `grove screen` from scripts, and an agent script that tries to type into another
//! agent's terminal.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};
use support::pty::{attach_on_pty, read_pty_until};
use support::{can_run, eventually, have_program, have_python3, output_fed, stdout_of, Grove};

const SCREEN_WAIT: Duration = Duration::from_secs(15);

/// A tmux server of the test's own (its socket in the test's directory), running
/// grove commands with the test's environment.
struct Tmux {
    socket: PathBuf,
    dir: PathBuf,
}

fn have_tmux() -> bool {
    have_program("tmux", &["-V"])
}

impl Tmux {
    fn new(g: &Grove) -> Tmux {
        let dir = g.make_dir("tmux");
        // The environment of grove's own commands, as a script tmux can run.
        let command = g.command();
        let mut script = String::from("#!/bin/sh\n");
        for (key, value) in command.get_envs() {
            let key = key.to_string_lossy();
            match value {
                Some(value) => script.push_str(&format!(
                    "export {key}='{}'\n",
                    value.to_string_lossy().replace('\'', "'\\''")
                )),
                None => script.push_str(&format!("unset {key}\n")),
            }
        }
        script.push_str(&format!(
            "cd '{}'\n\"{}\" \"$@\"\necho \"rc=$?\"\nexec sleep 600\n",
            g.repo.display(),
            g.bin.display()
        ));
        let path = dir.join("grove.sh");
        std::fs::write(&path, script).expect("script");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        Tmux {
            socket: dir.join("sock"),
            dir,
        }
    }

    fn tmux(&self, args: &[&str]) -> String {
        let mut tmux = Command::new("tmux");
        tmux.arg("-S")
            .arg(&self.socket)
            .arg("-f")
            .arg("/dev/null")
            .args(args);
        stdout_of(&mut tmux, &format!("tmux {args:?}"))
    }

    /// A new session (window `cols`x`rows`) running `grove <args>`.
    fn run(&self, session: &str, cols: u16, rows: u16, args: &[&str]) {
        let script = self.dir.join("grove.sh");
        let mut command = vec![script.display().to_string()];
        command.extend(args.iter().map(|a| a.to_string()));
        let (cols, rows) = (cols.to_string(), rows.to_string());
        let mut tmux_args = vec!["new-session", "-d", "-s", session, "-x", &cols, "-y", &rows];
        let joined = command.join(" ");
        tmux_args.push(&joined);
        self.tmux(&tmux_args);
        // Windows follow the size given, not the (absent) client's.
        self.tmux(&["set-option", "-t", session, "window-size", "manual"]);
    }

    fn keys(&self, session: &str, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", session];
        args.extend_from_slice(keys);
        self.tmux(&args);
    }

    fn screen(&self, session: &str) -> String {
        self.tmux(&["capture-pane", "-p", "-t", session])
    }

    fn resize(&self, session: &str, cols: u16, rows: u16) {
        let (cols, rows) = (cols.to_string(), rows.to_string());
        self.tmux(&["resize-window", "-t", session, "-x", &cols, "-y", &rows]);
    }

    /// Types `line` and Enter into `session`, then waits until it shows `text`; the
    /// screen.
    fn enter(&self, session: &str, line: &str, text: &str) -> String {
        self.keys(session, &[line, "Enter"]);
        self.wait_for(session, text)
    }

    fn wait_for(&self, session: &str, text: &str) -> String {
        await_screen(&format!("tmux session {session}"), text, || {
            self.screen(session)
        })
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .arg("kill-server")
            .output();
    }
}

fn spawn_tty(g: &Grove, argv: &[&str]) -> String {
    spawn_tty_with(g, &[], argv)
}

/// `grove spawn --tty OPTIONS -- ARGV`; the agent's id.
fn spawn_tty_with(g: &Grove, options: &[&str], argv: &[&str]) -> String {
    let mut args = vec!["spawn", "--tty"];
    args.extend_from_slice(options);
    args.push("--");
    args.extend_from_slice(argv);
    let id = g.ok(&args).trim().to_string();
    assert_eq!(id.len(), 8, "spawn printed {id:?}");
    id
}

const PROMPT: &str = "bash>";

/// An interactive bash with a prompt that does not depend on who runs the tests.
fn spawn_bash(g: &Grove, options: &[&str]) -> String {
    let mut options = options.to_vec();
    options.extend(["-e", "PS1=bash> "]);
    spawn_tty_with(g, &options, &["bash", "--norc", "--noprofile", "-i"])
}

/// A grove, its tmux and a `python3 -i` attached to in the tmux session "one"; none
/// where tmux or python3 is missing.
fn python_in_tmux() -> Option<(Grove, Tmux, String)> {
    if !have_tmux() || !have_python3() {
        return None;
    }
    let g = Grove::new();
    let tmux = Tmux::new(&g);
    let id = attached_python(&g, &tmux, "one");
    Some((g, tmux, id))
}

/// `python3 -i` with a terminal, attached to in tmux session `session`.
fn attached_python(g: &Grove, tmux: &Tmux, session: &str) -> String {
    let id = spawn_tty(g, &["python3", "-i"]);
    tmux.run(session, 100, 30, &["attach", &id]);
    tmux.wait_for(session, ">>>");
    id
}

fn screen_of(g: &Grove, id: &str) -> String {
    g.ok(&["screen", id])
}

fn wait_screen(g: &Grove, id: &str, text: &str) -> String {
    await_screen(&format!("agent {id}'s screen"), text, || screen_of(g, id))
}

/// Reads a screen (`whose`, for the failure message) until it shows `text`, for
/// `SCREEN_WAIT` at most; that screen.
fn await_screen(whose: &str, text: &str, read: impl Fn() -> String) -> String {
    let deadline = Instant::now() + SCREEN_WAIT;
    loop {
        let screen = read();
        if screen.contains(text) {
            return screen;
        }
        assert!(
            Instant::now() < deadline,
            "{whose} never showed {text:?}; it shows:\n{screen}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn keys_typed_in_attach_reach_python_and_a_reattach_shows_the_same_screen() {
    let Some((g, tmux, id)) = python_in_tmux() else {
        return;
    };
    tmux.enter("one", "6*7", "42");
    tmux.keys("one", &["C-]"]);
    let after = tmux.wait_for("one", "rc=0");
    assert!(after.contains("detached from"), "{after}");
    assert_eq!(g.status(&id), "running", "detach leaves the agent running");
    tmux.run("two", 100, 30, &["attach", &id]);
    let again = tmux.wait_for("two", "42");
    assert!(again.contains(">>> 6*7"), "the same screen again:\n{again}");
    let end = tmux.enter("two", "exit()", "rc=");
    assert!(
        end.contains("succeeded"),
        "attach prints the outcome:\n{end}"
    );
    assert!(end.contains("rc=0"), "{end}");
}

#[test]
fn a_resize_reaches_the_agent_and_two_viewers_see_the_same_output() {
    if !have_tmux() {
        return;
    }
    let g = Grove::new();
    let id = spawn_bash(&g, &[]);
    let tmux = Tmux::new(&g);
    tmux.run("typist", 100, 30, &["attach", &id]);
    tmux.wait_for("typist", PROMPT);
    tmux.run("watcher", 100, 30, &["attach", "--read-only", &id]);
    tmux.wait_for("watcher", PROMPT);
    tmux.enter("typist", "stty size", "30 100");
    tmux.wait_for("watcher", "30 100");
    tmux.resize("typist", 120, 40);
    // The typist's next key goes after the resize, on the same connection.
    tmux.enter("typist", "echo size; stty size", "40 120");
    tmux.wait_for("watcher", "40 120");
    // The watcher's keys reach nobody.
    tmux.keys("watcher", &["echo WATCHER-TYPED", "Enter"]);
    tmux.enter("typist", "echo typist-done", "typist-done\r\n".trim());
    assert!(!screen_of(&g, &id).contains("WATCHER-TYPED"));
    let end = tmux.enter("typist", "exit 3", "rc=");
    assert!(end.contains("failed (exit 3)"), "{end}");
    assert!(end.contains("rc=1"), "attach exits like wait: {end}");
    let watcher = tmux.wait_for("watcher", "rc=");
    assert!(watcher.contains("rc=1"), "{watcher}");
}

#[test]
fn a_full_screen_program_is_redrawn_on_attach() {
    if !have_tmux() || !have_program("less", &["--version"]) {
        return;
    }
    let g = Grove::new();
    let lines: String = (1..=500).map(|i| format!("line number {i}\n")).collect();
    std::fs::write(g.repo.join("long.txt"), lines).expect("file");
    support::git_in(&g.repo, &["add", "long.txt"]);
    support::git_in(&g.repo, &["commit", "-qm", "long"]);
    let id = spawn_tty(&g, &["less", "long.txt"]);
    wait_screen(&g, &id, "line number 1");
    let tmux = Tmux::new(&g);
    tmux.run("view", 80, 24, &["attach", &id]);
    tmux.wait_for("view", "line number 2");
    tmux.keys("view", &["G"]);
    tmux.wait_for("view", "line number 500");
    tmux.keys("view", &["C-]"]);
    tmux.wait_for("view", "rc=0");
    tmux.run("again", 80, 24, &["attach", &id]);
    let again = tmux.wait_for("again", "line number 500");
    assert!(!again.contains("line number 1\n"), "{again}");
    tmux.keys("again", &["q"]);
    tmux.wait_for("again", "rc=0");
}

#[test]
fn the_terminal_survives_a_daemon_kill_while_attached() {
    let Some((g, tmux, id)) = python_in_tmux() else {
        return;
    };
    tmux.enter("one", "'before' + '-kill'", "before-kill");
    g.crash_daemon();
    // The attached terminal goes on without the daemon: keys and output go between
    // `grove attach` and the agent's shim alone.
    tmux.enter("one", "'during' + '-restart'", "during-restart");
    // The next command starts a daemon, which adopts the agent and its terminal.
    assert_eq!(g.status(&id), "running");
    tmux.run("two", 100, 30, &["attach", &id]);
    tmux.wait_for("two", "before-kill");
    tmux.enter("two", "'after' + '-restart'", "after-restart");
    tmux.enter("two", "exit()", "rc=0");
}

#[test]
fn send_types_into_python_and_screen_reads_the_answer() {
    if !have_python3() {
        return;
    }
    let g = Grove::new();
    let id = spawn_tty(&g, &["python3", "-i"]);
    wait_screen(&g, &id, ">>>");
    g.ok(&["send", &id, "sum(range(1000))"]);
    let screen = wait_screen(&g, &id, "499500");
    assert!(screen.contains(">>> sum(range(1000))"), "{screen}");
    let json = g.json(&["screen", &id]);
    assert!(json["size"]["rows"].as_u64().is_some(), "{json}");
    // Nothing at all to send is refused, and types nothing.
    g.fails(&["send", "--no-enter", &id, ""], &["nothing to send"]);
    g.ok(&["send", "--no-enter", &id, "exit()"]);
    g.ok(&["send", &id]);
    let record = g.wait(&id);
    assert_eq!(record["outcome"], "succeeded", "{record}");
}

#[test]
fn a_read_is_waiting_within_three_seconds_and_working_once_input_arrives() {
    let g = Grove::new();
    let id = spawn_tty(
        &g,
        &[
            "sh",
            "-c",
            "echo ready; read answer; echo got $answer; sleep 30",
        ],
    );
    let started = Instant::now();
    let waited = g.json(&["wait", "--until", "waiting", &id]);
    assert_eq!(waited["agents"][0]["activity"], "waiting", "{waited}");
    assert!(
        started.elapsed() < Duration::from_secs(3) + Duration::from_millis(500),
        "waiting was reported after {:?}",
        started.elapsed()
    );
    assert!(g.ok(&["list"]).contains("waiting"));
    g.ok(&["send", &id, "yes"]);
    wait_screen(&g, &id, "got yes");
    eventually("working again", Duration::from_secs(5), || {
        g.record(&id).get("activity").is_none_or(|a| a.is_null())
    });
    // An agent may say it itself, too.
    let said = g.json(&["status", "--id", &id, "waiting"]);
    assert_eq!(said["activity"], "waiting");
    g.ok(&["kill", &id]);
}

/// A program whose main thread waits on a lock while another thread reads the terminal
/// (plainly, or in an epoll wait as tokio and node do) is waiting too: every thread of
/// the foreground process is looked at, not only the main one.
#[test]
fn a_thread_other_than_the_main_one_reading_the_terminal_is_waiting() {
    if !have_python3() {
        return;
    }
    let reader = "import threading, sys\n\
                  def read(): print('got', sys.stdin.readline().strip(), flush=True); done.set()\n\
                  done = threading.Event()\n\
                  threading.Thread(target=read).start()\n\
                  print('ready', flush=True)\n\
                  done.wait()\n";
    let epoll = "import threading, selectors, sys\n\
                 def read():\n\
                 \x20   sel = selectors.EpollSelector(); sel.register(sys.stdin, selectors.EVENT_READ)\n\
                 \x20   sel.select(); print('got', sys.stdin.readline().strip(), flush=True); done.set()\n\
                 done = threading.Event()\n\
                 threading.Thread(target=read).start()\n\
                 print('ready', flush=True)\n\
                 done.wait()\n";
    let g = Grove::new();
    for program in [reader, epoll] {
        let id = spawn_tty(&g, &["python3", "-c", program]);
        let waited = g.json(&["wait", "--until", "waiting", "--timeout", "20s", &id]);
        assert_eq!(waited["agents"][0]["activity"], "waiting", "{waited}");
        g.ok(&["send", &id, "yes"]);
        assert_eq!(g.wait(&id)["outcome"], "succeeded");
        assert!(g.ok(&["logs", &id]).contains("got yes"));
    }
}

/// `grove send TEXT` presses Enter as a key of its own, as a person does: a TUI that
/// takes an Enter within 120 ms of the last character as part of a paste (Codex does)
/// gets the line submitted. The program here decides the way Codex's composer does.
#[test]
fn send_presses_enter_apart_from_the_text_so_a_paste_detector_submits() {
    if !have_python3() {
        return;
    }
    let composer = "import os, sys, time, tty\n\
                    tty.setraw(0)\n\
                    os.write(1, b'composer ready\\r\\n')\n\
                    text, last = b'', 0.0\n\
                    while True:\n\
                    \x20   b = os.read(0, 1)\n\
                    \x20   now = time.monotonic()\n\
                    \x20   if b == b'\\r':\n\
                    \x20       verdict = b'pasted-newline' if now - last < 0.12 else b'submitted'\n\
                    \x20       os.write(1, verdict + b':' + text + b'\\r\\n'); break\n\
                    \x20   text, last = text + b, now\n";
    let g = Grove::new();
    let id = spawn_tty(&g, &["python3", "-c", composer]);
    wait_screen(&g, &id, "composer ready");
    g.ok(&["send", &id, "fix the tests"]);
    assert_eq!(g.wait(&id)["outcome"], "succeeded");
    let log = g.ok(&["logs", &id]);
    assert!(log.contains("submitted:fix the tests"), "{log}");
}

/// The raw mode for scripts: `send --stdin --no-enter` types the bytes it reads as
/// they are (control keys, escape sequences, a carriage return amid them), and nothing
/// more.
#[test]
fn send_stdin_types_raw_bytes_into_a_terminal_as_they_are() {
    if !have_python3() {
        return;
    }
    let shower = "import os, tty\n\
                  tty.setraw(0)\n\
                  os.write(1, b'raw ready\\r\\n')\n\
                  got = b''\n\
                  while not got.endswith(b'END'):\n\
                  \x20   got += os.read(0, 64)\n\
                  os.write(1, b'read:' + got.hex().encode() + b'\\r\\n')\n";
    let g = Grove::new();
    let id = spawn_tty(&g, &["python3", "-c", shower]);
    wait_screen(&g, &id, "raw ready");
    let raw = b"a\tb\x1b[A\x03\rEND";
    let sent = output_fed(
        g.command().args(["send", "--stdin", "--no-enter", &id]),
        raw,
    );
    assert!(
        sent.status.success(),
        "{}",
        String::from_utf8_lossy(&sent.stderr)
    );
    let hex: String = raw.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(g.wait(&id)["outcome"], "succeeded");
    let screen = screen_of(&g, &id);
    assert!(screen.contains(&format!("read:{hex}")), "{screen}");
}

#[test]
fn an_agent_without_a_terminal_takes_input_through_its_open_stdin() {
    let g = Grove::new();
    let id = g.spawn(&["--stdin"], "read a; read b; echo \"got $a and $b\"");
    g.ok(&["send", &id, "one"]);
    let sent = output_fed(g.command().args(["send", "--stdin", &id]), b"two\n");
    assert!(sent.status.success());
    let record = g.wait(&id);
    assert_eq!(record["outcome"], "succeeded", "{record}");
    assert!(g.ok(&["logs", &id]).contains("got one and two"));
}

/// The screen a tty agent ended on, often the one that says why, outlives its console:
/// `grove screen` shows it and `grove show` says it was kept.
#[test]
fn the_last_screen_of_a_tty_agent_is_kept_after_it_ends() {
    let g = Grove::new();
    let id = spawn_tty(
        &g,
        &[
            "sh",
            "-c",
            "printf '\\033[1mError:\\033[0m quota exceeded\\n'; exit 3",
        ],
    );
    assert_eq!(g.wait(&id)["outcome"], "failed");
    let screen = g.ok(&["screen", &id]);
    assert!(screen.contains("Error: quota exceeded"), "{screen}");
    let ansi = g.json(&["screen", "--ansi", &id]);
    assert!(
        ansi["text"]
            .as_str()
            .unwrap_or_default()
            .contains("\u{1b}["),
        "{ansi}"
    );
    let shown = g.ok(&["show", &id]);
    assert!(
        shown.contains(&format!("kept: `grove screen {id}` shows it")),
        "{shown}"
    );
    // An agent without a terminal still has no screen, ended or not.
    let plain = g.spawn(&[], "true");
    g.wait(&plain);
    g.refused(&["screen", &plain], "--tty");
}

#[test]
fn terminal_commands_refuse_what_cannot_be_and_say_why() {
    let g = Grove::new();
    let plain = g.spawn(&[], "sleep 30");
    g.refused(&["screen", &plain], "--tty");
    g.refused(&["send", &plain, "hello"], "--stdin");
    let attach = g.run(&["attach", &plain]);
    assert_eq!(attach.code, 2, "{}", attach.stderr);
    g.refused(&["attach", "--detach-key", "q", &plain], "detach key");
    let both = g.run(&["spawn", "--tty", "--stdin", "--", "true"]);
    assert_eq!(both.code, 2, "{}", both.stderr);
    let bad = g.run(&["status", "--id", &plain, "sleeping"]);
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    g.ok(&["kill", &plain]);
    g.refused(&["send", &plain, "late"], "not running");
}

/// The console socket is in the user's state directory and agents run as the user:
/// the shim itself must tell the daemon from an agent. A jailed and an unjailed agent
/// both dial another agent's console and type a command into it.
#[test]
fn an_agent_cannot_type_into_another_agents_terminal() {
    if !have_python3() {
        return;
    }
    let g = Grove::new();
    let victim = spawn_bash(&g, &[]);
    wait_screen(&g, &victim, PROMPT);
    let socket = g.home.join("agents").join(&victim).join("console.sock");
    assert!(socket.exists(), "{}", socket.display());
    let attacker = attack_script(&g);
    for jail in [false, true] {
        if jail && !jail_available(&g) {
            continue;
        }
        let mut args = vec!["spawn"];
        if jail {
            args.push("--jail");
        }
        let script = attacker.display().to_string();
        let target = socket.display().to_string();
        let grove = g.bin.display().to_string();
        args.extend(["--", "python3", &script, &target, &grove, &victim]);
        let id = g.ok(&args).trim().to_string();
        let record = g.wait(&id);
        let log = g.ok(&["logs", &id]);
        assert!(log.contains("attempted"), "the attack ran: {log} {record}");
        // Through the daemon: the victim is not the attacker's to see, and its own
        // terminal is not its to type into either.
        assert!(log.contains("send victim: 2"), "{log}");
        assert!(log.contains("send self: 4"), "{log}");
    }
    // The console still serves the daemon. The attacks' frames reached the console
    // before the first of these lines was sent, so input they had made it take would
    // be read no later than that line, and typed before the second: once the shell
    // has run the second, it would have run theirs.
    g.ok(&["send", &victim, "echo still-mine"]);
    wait_screen(&g, &victim, "still-mine");
    g.ok(&["send", &victim, "echo settled"]);
    let screen = wait_screen(&g, &victim, "settled");
    assert!(
        !screen.contains("PWNED"),
        "an agent typed into another:\n{screen}"
    );
    g.ok(&["kill", &victim]);
}

fn attack_script(g: &Grove) -> PathBuf {
    g.write_file(
        "attack.py",
        r#"
import socket, struct, sys, time
payload = b"echo PWNED\r"
frame = b"i" + struct.pack("<I", len(payload)) + payload
for _ in range(20):
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(sys.argv[1])
        s.sendall(frame)
        s.settimeout(0.2)
        try:
            print("answer:", s.recv(100))
        except Exception as e:
            print("no answer:", e)
        s.close()
    except Exception as e:
        print("refused:", e)
import os, subprocess
grove, victim = sys.argv[2], sys.argv[3]
r = subprocess.run([grove, "send", victim, "echo PWNED"], capture_output=True, text=True)
print("send victim:", r.returncode, r.stderr.strip())
r = subprocess.run([grove, "send", os.environ["GROVE_AGENT_ID"], "x"], capture_output=True, text=True)
print("send self:", r.returncode, r.stderr.strip())
print("attempted")
"#,
    )
}

fn jail_available(g: &Grove) -> bool {
    let probe = g.run(&["spawn", "--jail", "--wait", "--", "true"]);
    let missing = (probe.code != 0).then(|| format!("a jailed spawn failed: {}", probe.stderr));
    can_run("landlock", missing)
}

/// The same through a pseudo terminal the test holds itself (no tmux): a jailed agent
/// gets a working terminal too, and `grove attach` on a pty types into it.
/// `grove attach` hands its terminal to the agent's shim, which then holds it open. A
/// jailed agent looks for it among its shim's descriptors (/proc/$PPID/fd) to write to
/// the user's terminal behind the viewer's back (or, with TIOCSTI, type into the shell
/// it returns to): the jail denies it. The same script outside the jail, acting as
/// the user, does reach it, so the test would see a way through.
#[test]
fn a_jailed_agent_cannot_reach_its_viewers_terminal() {
    let g = Grove::new();
    if !jail_available(&g) {
        return;
    }
    let unjailed = attempt_on_viewers_terminal(&g, &[]);
    assert!(
        unjailed.contains("PWNED") && unjailed.contains("wrote-/dev/pts/"),
        "the attack found no terminal even without a jail: {unjailed}"
    );
    let jailed = attempt_on_viewers_terminal(&g, &["--jail"]);
    assert!(jailed.contains("scan-2-done"), "{jailed}");
    assert!(
        !jailed.contains("PWNED") && !jailed.contains("wrote-/dev/pts/"),
        "a jailed agent wrote to its viewer's terminal: {jailed}"
    );
}

/// What the viewer's terminal showed while a bash agent, spawned with `options` and
/// attached to on a pty, tried to write to it through its shim's descriptors.
fn attempt_on_viewers_terminal(g: &Grove, options: &[&str]) -> String {
    let id = spawn_bash(g, options);
    wait_screen(g, &id, PROMPT);
    let (mut master, mut attach) = attach_on_pty(g, &id, 33, 111);
    let mut seen = Vec::new();
    read_pty_until(&mut master, &mut seen, "attached to", SCREEN_WAIT);
    // Typed text is echoed: the payload is put together so that only a write that went
    // around the agent's own terminal shows the whole word.
    let attack = "for f in /proc/$PPID/fd/*; do t=$(readlink $f 2>/dev/null); \
        case \"$t\" in /dev/pts/*) [ \"$t\" = \"$(tty)\" ] || \
        { printf '%s%s' PW NED > $f 2>/dev/null && echo wrote-$t; } ;; esac; done; \
        echo scan-$((1+1))-done\r";
    use std::io::Write;
    master.write_all(attack.as_bytes()).expect("type");
    read_pty_until(&mut master, &mut seen, "scan-2-done", SCREEN_WAIT);
    master.write_all(b"exit\r").expect("type");
    read_pty_until(&mut master, &mut seen, "succeeded", SCREEN_WAIT);
    assert!(attach.wait().expect("attach").success());
    String::from_utf8_lossy(&seen).into_owned()
}

#[test]
fn attach_on_a_pty_drives_a_jailed_agent() {
    let g = Grove::new();
    if !jail_available(&g) {
        return;
    }
    let id = spawn_bash(&g, &["--jail"]);
    wait_screen(&g, &id, PROMPT);
    let (mut master, mut attach) = attach_on_pty(&g, &id, 33, 111);
    let mut seen = Vec::new();
    read_pty_until(&mut master, &mut seen, "attached to", SCREEN_WAIT);
    use std::io::Write;
    master
        .write_all(b"stty size; echo jailed-$((40+2))\r")
        .expect("type");
    read_pty_until(&mut master, &mut seen, "33 111", SCREEN_WAIT);
    read_pty_until(&mut master, &mut seen, "jailed-42", SCREEN_WAIT);
    master.write_all(b"exit\r").expect("type");
    read_pty_until(&mut master, &mut seen, "succeeded", SCREEN_WAIT);
    assert!(attach.wait().expect("attach").success());
}

#[test]
fn top_attaches_kills_after_a_yes_and_keeps_finished_agents_in_sight() {
    if !have_tmux() || !have_python3() {
        return;
    }
    let g = Grove::new();
    let talker = g
        .ok(&["spawn", "--tty", "--name", "talker", "--", "python3", "-i"])
        .trim()
        .to_string();
    let brief = g.spawn(&["--name", "brief"], "read line < /dev/null; sleep 2");
    let tmux = Tmux::new(&g);
    tmux.run("top", 160, 30, &["top"]);
    tmux.wait_for("top", "talker");
    tmux.keys("top", &["?"]);
    tmux.wait_for("top", "a attach");
    tmux.keys("top", &["Down"]);
    tmux.keys("top", &["a"]);
    // The banner is on the agent's screen, not in top's last-log-line column.
    tmux.wait_for("top", "Type \"help\"");
    tmux.enter("top", "40+2", "42");
    tmux.keys("top", &["C-]"]);
    tmux.wait_for("top", "grove top:");
    // `l` follows the log until Ctrl-C, which ends the follow and not top.
    tmux.keys("top", &["l"]);
    tmux.wait_for("top", "40+2");
    tmux.keys("top", &["C-c"]);
    tmux.wait_for("top", "grove top:");
    g.wait(&brief);
    let shown = tmux.wait_for("top", "succeeded");
    assert!(
        shown.contains("brief"),
        "a finished agent stays in sight:\n{shown}"
    );
    tmux.keys("top", &["k"]);
    tmux.wait_for("top", "y/N");
    tmux.keys("top", &["n"]);
    tmux.wait_for("top", "not killed");
    assert_eq!(g.status(&talker), "running");
    tmux.keys("top", &["k"]);
    tmux.wait_for("top", "y/N");
    tmux.keys("top", &["y"]);
    tmux.wait_for("top", "stopping");
    let record = g.wait(&talker);
    assert_eq!(record["outcome"], "killed", "{record}");
    tmux.keys("top", &["q"]);
    tmux.wait_for("top", "rc=0");
}

/// `s` in `top` opens the selected agent's screen on a page of its own and `d` its
/// diff, while it runs (its worktree now) and after it ended (the screen it kept, its
/// branch); Esc goes back to the table.
#[test]
fn top_previews_the_selected_agents_screen_and_diff() {
    if !have_tmux() {
        return;
    }
    let g = Grove::new();
    let paint = "echo 'drawn by the agent' > PAINTED.txt; \
                 printf '\\033[2J\\033[2;3Hthe first row of its screen\\033[6;3Hits last row'; \
                 read line";
    let id = spawn_tty_with(&g, &["--name", "painter"], &["sh", "-c", paint]);
    wait_screen(&g, &id, "its last row");
    let tmux = Tmux::new(&g);
    tmux.run("top", 160, 30, &["top"]);
    tmux.wait_for("top", "painter");
    // The table's last-line column holds only the screen's last row.
    let table = tmux.wait_for("top", "its last row");
    assert!(!table.contains("the first row"), "{table}");
    tmux.keys("top", &["Down"]);
    tmux.keys("top", &["s"]);
    let page = tmux.wait_for("top", &format!("screen of {id}"));
    assert!(page.contains("the first row of its screen"), "{page}");
    assert!(!page.contains("RUNTIME"), "the table is not shown:\n{page}");
    tmux.keys("top", &["d"]);
    tmux.wait_for("top", &format!("diff of {id}"));
    tmux.wait_for("top", "+drawn by the agent");
    tmux.keys("top", &["Escape"]);
    tmux.wait_for("top", "RUNTIME");

    g.ok(&["send", &id, "done"]);
    assert_eq!(g.wait(&id)["outcome"], "succeeded");
    tmux.wait_for("top", "succeeded");
    tmux.keys("top", &["s"]);
    let kept = tmux.wait_for("top", "the first row of its screen");
    assert!(kept.contains(&format!("screen of {id}")), "{kept}");
    tmux.keys("top", &["d"]);
    let branch = tmux.wait_for("top", "+drawn by the agent");
    assert!(branch.contains("PAINTED.txt"), "{branch}");
    tmux.keys("top", &["q"]);
    tmux.wait_for("top", "RUNTIME");
    tmux.keys("top", &["q"]);
    tmux.wait_for("top", "rc=0");
}

#[test]
fn input_piped_into_spawn_is_the_first_thing_a_terminal_agent_reads() {
    let g = Grove::new();
    let mut child = g
        .command()
        .args([
            "spawn",
            "--tty",
            "--",
            "sh",
            "-c",
            "read x; echo \"got $x\"; sleep 30",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(b"piped-words\n").expect("write");
    }
    let out = child.wait_with_output().expect("spawn");
    assert!(out.status.success());
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    wait_screen(&g, &id, "got piped-words");
    g.ok(&["kill", &id]);
}

/// Issue 30: an agent's terminal is grove's, so it sees one TERM with 256 colours
/// whatever the spawning shell had (here `dumb`), unless `--env TERM=` says otherwise.
#[test]
fn a_terminal_agent_sees_xterm_256color_unless_told_otherwise() {
    let g = Grove::new().with_env(&[("TERM", "dumb")]);
    let id = spawn_tty(&g, &["sh", "-c", "echo \"term=$TERM\""]);
    g.wait(&id);
    assert!(g.ok(&["logs", &id]).contains("term=xterm-256color"));
    let chosen = spawn_tty_with(
        &g,
        &["--env", "TERM=vt100"],
        &["sh", "-c", "echo \"term=$TERM\""],
    );
    g.wait(&chosen);
    assert!(g.ok(&["logs", &chosen]).contains("term=vt100"));
    let plain = g.spawn(&[], "echo \"term=$TERM\"");
    g.wait(&plain);
    assert!(g.ok(&["logs", &plain]).contains("term=dumb"));
}
