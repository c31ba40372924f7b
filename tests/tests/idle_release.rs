//! A repository idle for `repo_idle_release` is closed: the daemon no longer maps its
//! packs (on a big repository, most of its resident memory), and reopens it when work
//! comes (issue 20, "Memory").

mod support;

use std::path::PathBuf;
use std::time::Duration;
use support::*;

/// The files of the repository's object store that the daemon has mapped.
fn mapped_packs(g: &Grove) -> Vec<PathBuf> {
    let store = g.repo.join(".git/objects/pack");
    grove_sys::proc::mapped_files(g.daemon_pid() as u32)
        .expect("the daemon's maps")
        .into_iter()
        .filter(|path| path.starts_with(&store))
        .collect()
}

#[test]
fn an_idle_repository_is_closed_and_reopened_on_demand() {
    let g = Grove::new().with_env(&[("GROVE_REPO_IDLE_RELEASE", "1s"), ("GROVE_POOL_SIZE", "0")]);
    g.git(&["repack", "-adq"]);
    g.ok(&["daemon", "stop"]);
    let id = g.spawn(&[], "echo one > one.txt");
    assert_eq!(g.wait(&id)["outcome"], "succeeded");
    let mapped = mapped_packs(&g);
    assert!(
        mapped
            .iter()
            .any(|p| p.extension().is_some_and(|e| e == "idx")),
        "the repository's pack index is mapped while in use: {mapped:?}"
    );
    eventually(
        "the idle repository's packs are unmapped",
        Duration::from_secs(10),
        || mapped_packs(&g).is_empty(),
    );
    // Work after the release reopens the repository.
    let id = g.spawn(&[], "echo two > two.txt");
    assert_eq!(g.wait(&id)["outcome"], "succeeded");
    let diff = g.json(&["diff", &id]);
    assert!(diff.to_string().contains("two.txt"), "{diff}");
}
