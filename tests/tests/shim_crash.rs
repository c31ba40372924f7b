//! A shim killed with SIGKILL (issue 20): the daemon kills what is left of its agent
//! before salvaging, so nothing the agent started keeps running or writing, its work is
//! on its branch, and its cgroup is gone.

mod support;

use std::fs;
use std::path::PathBuf;
use std::time::Duration;
use support::*;

/// An agent whose writer (pid in `pidfile`) appends to out.txt in its worktree.
struct Writer {
    id: String,
    pid: i32,
    worktree: PathBuf,
}

impl Writer {
    /// Spawns `script` and waits until its writer has written a few lines.
    fn start(g: &Grove, script: &str, pidfile: &std::path::Path) -> Writer {
        let id = g.spawn(&[], script);
        eventually("the agent writes", Duration::from_secs(20), || {
            fs::read_to_string(pidfile).is_ok_and(|p| !p.trim().is_empty())
        });
        let pid: i32 = fs::read_to_string(pidfile)
            .expect("pid")
            .trim()
            .parse()
            .expect("pid");
        let worktree = PathBuf::from(g.record(&id)["worktree"].as_str().expect("wt"));
        eventually("some ticks", Duration::from_secs(20), || {
            fs::read_to_string(worktree.join("out.txt")).is_ok_and(|t| t.lines().count() >= 5)
        });
        Writer { id, pid, worktree }
    }

    /// Kills the agent's shim with SIGKILL, then checks that the agent is lost, its
    /// writer gone, its work up to the kill on its branch and its worktree removed.
    fn kill_the_shim(&self, g: &Grove) {
        let id = &self.id;
        let shim = g.record(id)["pid"].as_i64().expect("shim pid") as i32;
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(shim),
            nix::sys::signal::Signal::SIGKILL,
        )
        .expect("kill the shim");
        let record = g.wait(id);
        assert_eq!(record["status"], "lost", "{record}");
        // Nothing of the agent runs on, in its (deleted) worktree or anywhere else.
        eventually(
            "the agent's writer is gone",
            Duration::from_secs(10),
            || !process_exists(self.pid),
        );
        let saved = g.agent_file(id, "out.txt");
        assert!(saved.lines().count() >= 5, "{saved}");
        assert!(!self.worktree.exists(), "the worktree was kept");
    }
}

#[test]
fn a_killed_shims_agent_is_killed_before_its_work_is_saved() {
    let Some(mount) = cgroup2_mount() else {
        can_run("cgroup2", Some("no cgroup2 mount".into()));
        return;
    };
    let g = Grove::new();
    let pidfile = g.dir.path().join("writer.pid");
    let script = format!(
        "echo $$ > {}; while :; do echo tick >> out.txt; sleep 0.02; done",
        pidfile.display()
    );
    let writer = Writer::start(&g, &script, &pidfile);
    let cgroup = fs::read_to_string(format!("/proc/{}/cgroup", writer.pid))
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("0::"))
                .map(|p| mount.join(p.trim().trim_start_matches('/')))
        });
    writer.kill_the_shim(&g);
    if let Some(cgroup) = cgroup {
        eventually(
            "the agent's cgroup is gone",
            Duration::from_secs(10),
            || !cgroup.exists(),
        );
    }
}

/// Without a cgroup (GROVE_CGROUP=false) the killed shim's tree goes to init: the
/// daemon finds it by the agent's token in its environment and kills it before salvage.
#[test]
fn a_killed_shims_agent_without_a_cgroup_is_killed_too() {
    let g = Grove::new().with_env(&[("GROVE_CGROUP", "false")]);
    let pidfile = g.dir.path().join("writer.pid");
    // The writer runs in the background of its own session: it leaves the process
    // group of the agent's command, as a daemonizing tool would.
    let script = format!(
        "setsid sh -c 'echo $$ > {}; while :; do echo tick >> out.txt; sleep 0.02; done' & sleep 600",
        pidfile.display()
    );
    Writer::start(&g, &script, &pidfile).kill_the_shim(&g);
}
