//! The daemon's own life: auto-start, single instance, crash recovery, version checks.

mod support;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::fs;
use std::time::Duration;
use support::*;

#[test]
fn racing_commands_start_exactly_one_daemon() {
    let g = Grove::new();
    let racers: Vec<_> = (0..4)
        .map(|_| {
            g.command()
                .args(["--json", "list"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn grove")
        })
        .collect();
    for racer in racers {
        let out = racer.wait_with_output().expect("racer");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let log = g.daemon_log();
    assert_eq!(log.matches("grove daemon ready").count(), 1, "{log}");
    assert!(!log.contains("already runs"), "{log}");
    let pid = g.daemon_pid();
    assert!(process_exists(pid));
}

#[test]
fn a_second_daemon_is_refused_while_one_runs() {
    let g = Grove::new();
    let pid = g.daemon_pid();
    g.fails(
        &["daemon", "run"],
        &[&format!("another grove daemon (pid {pid}) already runs")],
    );
    assert_eq!(g.daemon_pid(), pid);
}

#[test]
fn sigkill_of_the_daemon_loses_no_agent() {
    let g = Grove::new();
    let gates = g.make_dir("gates");
    let wait_for = |gate: &str, out: &str| {
        format!(
            "while [ ! -e '{}/{gate}' ]; do sleep 0.02; done; echo {gate} > {out}",
            gates.display()
        )
    };
    let survivor = g.spawn(&[], &wait_for("a", "a.txt"));
    let finishes_while_down = g.spawn(&[], &wait_for("b", "b.txt"));
    let shim_pid = g.record(&survivor)["pid"].as_i64().expect("pid") as i32;
    let daemon = g.daemon_pid();

    kill(Pid::from_raw(daemon), Signal::SIGKILL).expect("kill -9 daemon");
    eventually("daemon gone", Duration::from_secs(10), || {
        !process_exists(daemon)
    });
    assert!(process_exists(shim_pid), "the agent died with the daemon");

    // One agent ends while no daemon watches: its shim still writes the exit record.
    fs::write(gates.join("b"), "").expect("gate b");
    let exit_record = g
        .home
        .join("agents")
        .join(&finishes_while_down)
        .join("exit.json");
    eventually("exit record of b", Duration::from_secs(10), || {
        exit_record.exists()
    });

    // The next command starts a new daemon, which adopts the survivor and collects b.
    let listed = g.json(&["list", "--all"]);
    assert_eq!(listed["agents"].as_array().map(Vec::len), Some(2));
    assert_ne!(g.daemon_pid(), daemon);
    assert_eq!(g.record(&survivor)["status"], "running");
    fs::write(gates.join("a"), "").expect("gate a");

    let done = g.json(&["wait", &survivor, &finishes_while_down]);
    for agent in done["agents"].as_array().expect("agents") {
        assert_eq!(agent["status"], "collected", "{agent}");
        assert_eq!(agent["outcome"], "succeeded", "{agent}");
    }
    assert_eq!(g.agent_file(&survivor, "a.txt"), "a\n");
    assert_eq!(g.agent_file(&finishes_while_down, "b.txt"), "b\n");
    g.assert_no_worktree_left();
}

#[test]
fn stop_leaves_agents_running_and_the_next_daemon_adopts_them() {
    let g = Grove::new();
    let (id, gate) = g.spawn_gated(&[], "", "echo done > done.txt");
    let shim = g.record(&id)["pid"].as_i64().expect("pid") as i32;
    let daemon = g.daemon_pid();
    assert!(g.ok(&["daemon", "stop"]).contains("stopped"));
    // "stopped" is said once the daemon's process is gone, not before (issue 29).
    assert!(!process_exists(daemon), "the daemon still runs after stop");
    assert!(process_exists(shim));
    assert_eq!(g.run(&["daemon", "status"]).code, 3);
    fs::write(&gate, "").expect("gate");
    assert_eq!(g.wait(&id)["outcome"], "succeeded");
    assert_eq!(g.agent_file(&id, "done.txt"), "done\n");
}

/// A finished agent's record this grove cannot read (a newer grove's, say): the daemon
/// runs its live agents, and every request that needs the finished ones is refused
/// with the agent named, nothing touched: its worktree would otherwise look like
/// nobody's to the start-up scan.
#[test]
fn an_unreadable_finished_record_is_refused_by_name_and_changes_nothing() {
    let g = Grove::new();
    let id = g.spawn(&["--keep"], "echo kept > kept.txt");
    g.wait(&id);
    let worktree = g.record(&id)["worktree"]
        .as_str()
        .expect("worktree")
        .to_string();
    let db = g.stopped_db();
    let record_text = |db: &rusqlite::Connection| -> String {
        db.query_row("SELECT record FROM agents WHERE id = ?1", [&id], |r| {
            r.get::<_, String>(0)
        })
        .expect("record")
    };
    let good = record_text(&db);
    let newer = good.replace(r#""status":"collected""#, r#""status":"archived""#);
    assert_ne!(good, newer, "{good}");
    db.execute("UPDATE agents SET record = ?1 WHERE id = ?2", [&newer, &id])
        .expect("write a newer record");

    for args in [&["list", "--all"][..], &["show", &id]] {
        g.fails(
            args,
            &[
                &format!("the record of agent {id} cannot be read"),
                "Nothing was changed",
                "grove daemon restart",
            ],
        );
    }
    assert_eq!(
        g.json(&["list"])["agents"],
        serde_json::json!([]),
        "the live agents are still served"
    );
    assert_eq!(record_text(&db), newer);
    assert_eq!(
        fs::read_to_string(std::path::Path::new(&worktree).join("kept.txt")).expect("kept"),
        "kept\n"
    );

    db.execute("UPDATE agents SET record = ?1 WHERE id = ?2", [&good, &id])
        .expect("put it back");
    g.ok(&["daemon", "restart"]);
    assert_eq!(g.record(&id)["status"], "collected");
}

#[test]
fn a_daemon_of_another_protocol_version_is_reported_with_the_way_out() {
    let g = Grove::new();
    let out = g.run_env(&["list"], &[("GROVE_TEST_PROTOCOL_VERSION", "99")]);
    out.assert_exit(
        3,
        &[
            "speaks protocol 99 but this client speaks 1",
            "grove daemon stop",
        ],
    );
    // The way out works: stop it, and the next command starts a matching daemon.
    g.ok(&["daemon", "stop"]);
    g.ok(&["list"]);
}

#[test]
fn daemon_logs_go_to_its_log_file() {
    let g = Grove::new();
    let id = g.spawn(&[], "true");
    g.wait(&id);
    let log = g.daemon_log();
    assert!(log.contains("agent running") && log.contains(&id), "{log}");
    assert!(log.contains("agent collected"), "{log}");
}

/// With its socket file deleted under it, a running daemon is unreachable but still
/// holds the lock: status says so, and stop (and restart) fall back to the lock's pid.
#[test]
fn a_daemon_whose_socket_was_deleted_is_still_stopped_by_its_lock() {
    let g = Grove::new();
    let pid = g.daemon_pid();
    let socket = std::path::PathBuf::from(
        g.json(&["daemon", "status"])["socket"]
            .as_str()
            .expect("socket"),
    );
    fs::remove_file(&socket).expect("remove the socket");
    let status = g.run(&["daemon", "status"]);
    assert_eq!(status.code, 3, "{}", status.stdout);
    assert!(
        status
            .stdout
            .contains(&format!("running (pid {pid}) but unreachable")),
        "{}",
        status.stdout
    );
    let stop = g.run(&["daemon", "stop"]);
    assert_eq!(stop.code, 0, "{}{}", stop.stdout, stop.stderr);
    assert!(
        stop.stdout.contains(&format!("stopped (pid {pid})")),
        "{}",
        stop.stdout
    );
    eventually("the old daemon is gone", Duration::from_secs(10), || {
        !process_exists(pid)
    });
    g.ok(&["list"]);
    assert_ne!(g.daemon_pid(), pid);
}
