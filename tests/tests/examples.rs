//! The examples under examples/ run against a real daemon.

mod support;

use support::*;

#[test]
fn the_python_parent_spawns_three_agents_and_reports_their_branches() {
    if !have_python3() {
        return;
    }
    let g = Grove::new();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/parent.py");
    let out = std::process::Command::new("python3")
        .arg(script)
        .arg(&g.repo)
        .envs(grove_env(&g))
        .env("GROVE_BIN", BIN)
        .current_dir(&g.repo)
        .output()
        .expect("python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for name in ["docs", "tests", "cleanup"] {
        assert!(stdout.contains(&format!("grove/{name}-")), "{stdout}");
    }
    assert_eq!(
        stdout.matches("event agent.collected").count(),
        3,
        "{stdout}"
    );
    assert_eq!(
        stdout.matches(" succeeded: branch grove/").count(),
        3,
        "{stdout}"
    );
    assert!(stdout.contains("1 files +1 -0"), "{stdout}");
}
