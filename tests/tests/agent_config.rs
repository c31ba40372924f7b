//! Nothing an agent sets configures grove: an agent never starts grove's daemon, which
//! would take its settings (`GROVE_JAIL_WRITE=/`, say) from the agent's environment.
//! Its `grove` waits for the user's next command to start one instead.

mod support;

use std::fs;
use std::path::Path;
use std::time::Duration;
use support::*;

fn read_when_there(path: &Path, what: &str) -> String {
    eventually(what, Duration::from_secs(60), || path.exists());
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn an_agent_waits_for_the_users_daemon_and_never_starts_one() {
    let g = Grove::new();
    let gates = g.make_dir("gates");
    let at = gates.display();
    let script = format!(
        r#"until [ -e {at}/go ]; do sleep 0.05; done
           GROVE_RETRY_FOR=0.3 "$GROVE_BIN" list > /dev/null 2> {at}/short.err
           echo $? > {at}/short.tmp; mv {at}/short.tmp {at}/short.rc
           "$GROVE_BIN" spawn -- true > {at}/inner.tmp 2> {at}/inner.err
           mv {at}/inner.tmp {at}/inner.id
           until [ -e {at}/done ]; do sleep 0.05; done"#
    );
    let outer = g.spawn(&["--env", &format!("GROVE_BIN={BIN}")], &script);
    g.crash_daemon();
    fs::write(gates.join("go"), "").expect("go");

    let rc = read_when_there(&gates.join("short.rc"), "the agent's short call");
    let err = fs::read_to_string(gates.join("short.err")).expect("short.err");
    assert_eq!(rc.trim(), "3", "{err}");
    assert!(err.contains("an agent never starts one"), "{err}");
    assert!(
        g.locked_daemon_pid().is_none_or(|pid| !process_exists(pid)),
        "the agent started a daemon"
    );

    // The user's next command starts the daemon; the agent's waiting call then goes on.
    g.ok(&["list"]);
    let inner = read_when_there(&gates.join("inner.id"), "the agent's spawn");
    let inner = inner.trim();
    assert_eq!(g.wait(inner)["outcome"], "succeeded");
    let daemon_cgroup = fs::read_to_string(format!("/proc/{}/cgroup", g.daemon_pid()))
        .expect("the daemon's cgroup");
    assert!(
        !daemon_cgroup.contains("/grove/"),
        "the daemon runs in an agent's cgroup: {daemon_cgroup}"
    );
    fs::write(gates.join("done"), "").expect("done");
    assert_eq!(g.wait(&outer)["outcome"], "succeeded");
}

#[test]
fn daemon_commands_are_refused_inside_an_agent_even_without_its_variables() {
    if writable_cgroup2().is_none() {
        return;
    }
    let g = Grove::new();
    let pid = g.daemon_pid();
    let files = g.make_dir("out");
    let at = files.display();
    // The agent drops every variable that says whose it is: its cgroup still does.
    let script = format!(
        r#"for c in run restart recover install; do
             env -u GROVE_AGENT_ID -u GROVE_TOKEN -u GROVE_SOCKET -u GROVE_SESSION \
               GROVE_JAIL_WRITE=/ "$GROVE_BIN" daemon $c > /dev/null 2>> {at}/err
             echo "$c $?" >> {at}/rcs
           done"#
    );
    let id = g.spawn(&["--env", &format!("GROVE_BIN={BIN}")], &script);
    assert_eq!(g.wait(&id)["outcome"], "succeeded");
    let rcs = fs::read_to_string(files.join("rcs")).expect("rcs");
    assert_eq!(rcs, "run 4\nrestart 4\nrecover 4\ninstall 4\n");
    let err = fs::read_to_string(files.join("err")).expect("err");
    assert_holds_all(
        &err,
        &["refused inside an agent", "run it from your own shell"],
    );
    assert_eq!(g.daemon_pid(), pid, "the daemon was replaced");

    // The control: the same restart from the user's shell takes the setting.
    g.run_env(&["daemon", "restart"], &[("GROVE_JAIL_WRITE", "/")])
        .assert_exit(0, &[]);
    assert_ne!(g.daemon_pid(), pid);
}
