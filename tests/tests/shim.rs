//! The shim binary: each agent is held by `grove-shim` (here `grove-e2e-shim`), a small
//! binary of its own next to grove; without it grove falls back to `grove __shim`.

mod support;

use serde_json::Value;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use support::*;

fn shim_pid(g: &Grove, id: &str) -> i32 {
    g.record(id)["pid"]
        .as_i64()
        .unwrap_or_else(|| panic!("{id} has no pid: {}", g.record(id))) as i32
}

fn exe_of(pid: i32) -> PathBuf {
    fs::read_link(format!("/proc/{pid}/exe")).expect("/proc/<pid>/exe")
}

fn args_of(pid: i32) -> Vec<String> {
    fs::read(format!("/proc/{pid}/cmdline"))
        .expect("/proc/<pid>/cmdline")
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

fn parent_of(pid: i32) -> Option<i32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn doctor_shim(g: &Grove) -> Value {
    doctor_check(&g.json(&["doctor"]), "shim")
}

#[test]
fn agents_are_held_by_the_separate_shim_binary() {
    let g = Grove::new();
    let id = g.spawn(&[], "sleep 30");
    let pid = shim_pid(&g, &id);
    let exe = exe_of(pid);
    assert!(
        exe.to_string_lossy().ends_with("/grove-e2e-shim"),
        "the shim runs {}",
        exe.display()
    );
    assert_eq!(exe, fs::canonicalize(SHIM_BIN).expect("shim binary"));
    assert_eq!(args_of(pid)[1..], ["__shim"]);
    assert!(
        g.daemon_log()
            .contains("agents are held by the shim binary"),
        "{}",
        g.daemon_log()
    );
    let doctor = doctor_shim(&g);
    assert_eq!(doctor["status"], "ok", "{doctor}");
    assert_eq!(doctor["data"]["separate"], true, "{doctor}");

    g.ok(&["kill", &id]);
    assert_eq!(g.wait(&id)["outcome"], "killed");
    assert!(!process_exists(pid));
    let done = g.spawn(&[], "echo held");
    assert_eq!(g.wait(&done)["outcome"], "succeeded");
}

/// `grove` copied somewhere on its own still runs agents, as `grove __shim`, and says
/// why; a shim binary put next to it later is used from the next spawn on.
#[test]
fn without_the_shim_binary_grove_itself_holds_the_agents() {
    let dir = tempfile::tempdir_in("/tmp").expect("temp dir");
    let alone = dir.path().join("grove-e2e");
    fs::copy(BIN, &alone).expect("copy grove");
    let g = Grove::new().with_bin(&alone);

    let doctor = doctor_shim(&g);
    assert_eq!(doctor["status"], "warn", "{doctor}");
    assert_eq!(doctor["data"]["separate"], false, "{doctor}");

    let id = g.spawn(&[], "sleep 30");
    let pid = shim_pid(&g, &id);
    assert_eq!(exe_of(pid), alone);
    assert_eq!(args_of(pid)[1..], ["__shim"]);
    let log = g.daemon_log();
    assert!(
        log.contains("no shim binary next to the grove executable"),
        "{log}"
    );
    g.ok(&["kill", &id]);
    assert_eq!(g.wait(&id)["outcome"], "killed");
    let done = g.spawn(&[], "echo held");
    assert_eq!(g.wait(&done)["outcome"], "succeeded");
    assert_eq!(g.record(&done)["exit_code"], 0);

    fs::copy(SHIM_BIN, dir.path().join("grove-e2e-shim")).expect("copy shim");
    let id = g.spawn(&[], "sleep 30");
    assert_eq!(exe_of(shim_pid(&g, &id)), dir.path().join("grove-e2e-shim"));
    g.ok(&["kill", &id]);
    assert_eq!(g.wait(&id)["outcome"], "killed");
}

/// A shim that ends up below another agent's shim (its daemon was started inside that
/// agent, then stopped) is grove's, not that agent's: the agent's end spares it.
#[test]
fn an_agents_end_spares_another_agents_shim_below_it() {
    let g = Grove::new();
    let gates = g.make_dir("gates");
    let gates_str = gates.display();
    let script = format!(
        r#"until [ -e {gates_str}/go ]; do sleep 0.05; done
           "$GROVE_BIN" spawn -- sleep 60 > {gates_str}/inner.tmp || exit 1
           mv {gates_str}/inner.tmp {gates_str}/inner.id
           until [ -e {gates_str}/done ]; do sleep 0.05; done"#
    );
    let outer = g.spawn(&["--env", &format!("GROVE_BIN={BIN}")], &script);
    let outer_shim = shim_pid(&g, &outer);
    // The next daemon starts inside the outer agent, below its shim (the subreaper).
    g.crash_daemon();
    fs::write(gates.join("go"), "").expect("go");
    let inner_id = gates.join("inner.id");
    eventually("the inner spawn", Duration::from_secs(30), || {
        inner_id.exists()
    });
    let inner = fs::read_to_string(&inner_id)
        .expect("inner id")
        .trim()
        .to_string();
    let inner_shim = shim_pid(&g, &inner);
    assert!(exe_of(inner_shim).ends_with("grove-e2e-shim"));
    // Without its daemon, the inner shim is the outer shim's child.
    g.ok(&["daemon", "stop"]);
    eventually("the inner shim reparented", Duration::from_secs(10), || {
        parent_of(inner_shim) == Some(outer_shim)
    });
    fs::write(gates.join("done"), "").expect("done");
    eventually("the outer shim gone", Duration::from_secs(20), || {
        !process_exists(outer_shim)
    });
    assert!(process_exists(inner_shim), "the inner shim was killed");
    assert_eq!(g.status(&inner), "running");
    assert_eq!(g.wait(&outer)["outcome"], "succeeded");
    g.ok(&["kill", &inner]);
    assert_eq!(g.wait(&inner)["outcome"], "killed");
}

#[test]
fn the_shim_binary_explains_itself_when_run_by_hand() {
    let out = Command::new(SHIM_BIN).output().expect("run the shim");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("not meant to be run by hand"), "{stderr}");

    let out = output_fed(Command::new(SHIM_BIN).arg("__shim"), b"{not a spec");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("invalid spec on stdin"), "{stderr}");
    assert!(Path::new(SHIM_BIN).is_file());
}
