//! The shim binary: each agent is held by `grove-shim` (here `grove-e2e-shim`), a small
//! binary of its own next to grove; without it grove falls back to `grove __shim`.

mod support;

use serde_json::Value;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
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
