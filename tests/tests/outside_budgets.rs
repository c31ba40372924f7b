//! Budgets for what an agent uses outside its cgroup: one agent must not hurt the
//! others' work through what grove keeps for it.

mod support;

use std::path::Path;
use std::time::Duration;
use support::*;

const MARKER_TAIL: &str = " bytes of older output dropped (log_max)]";

fn size(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

#[test]
fn an_agent_printing_without_end_keeps_only_its_newest_output_within_log_max() {
    let g = Grove::new().with_env(&[("GROVE_LOG_MAX", "64K")]);
    // 3 MB (whole lines) as fast as `yes` writes, then a last line: what a runaway agent leaves.
    let id = g.spawn(&[], "yes grove-budget | head -c 2999997; echo THE-END");
    let log = g.succeeded_log(&id);
    let dir = g.home.join("agents").join(&id);
    let on_disk = size(&dir.join("output.log")) + size(&dir.join("output.log.old"));
    assert!(
        on_disk <= (64 << 10) + 256,
        "{on_disk} bytes of log on disk, over log_max"
    );
    let (first, kept) = log.split_once('\n').expect("a marker line");
    let dropped: u64 = first
        .strip_prefix("[grove: ")
        .and_then(|rest| rest.strip_suffix(MARKER_TAIL))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no dropped marker first: {first:?}"));
    assert!(
        kept.ends_with("grove-budget\nTHE-END\n"),
        "newest output lost"
    );
    assert!(
        kept.len() as u64 >= 32 << 10,
        "less than half of log_max kept"
    );
    assert_eq!(
        dropped + kept.len() as u64,
        3_000_005,
        "dropped and kept bytes account for every byte written"
    );
}

#[test]
fn a_terminal_agents_log_keeps_its_budget_too() {
    let g = Grove::new().with_env(&[("GROVE_LOG_MAX", "64K")]);
    let id = g.spawn(
        &["--tty"],
        "yes grove-budget | head -c 999999; echo THE-END",
    );
    let log = g.succeeded_log(&id);
    let dir = g.home.join("agents").join(&id);
    let on_disk = size(&dir.join("output.log")) + size(&dir.join("output.log.old"));
    assert!(
        on_disk <= (64 << 10) + 256,
        "{on_disk} bytes of log on disk"
    );
    assert!(log.contains(MARKER_TAIL), "no dropped marker");
    assert!(log.trim_end().ends_with("THE-END"), "newest output lost");
}

/// Opens `count` connections (argv 3) and holds them until `release` (argv 2) exists;
/// writes how they went to argv 1.
const HOARDER: &str = r#"
import json, os, socket, sys, time
out, release, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
held, counts = [], {"served": 0, "refused": 0, "codes": [], "messages": []}
for _ in range(count):
    s = socket.socket(socket.AF_UNIX)
    s.connect(os.environ["GROVE_SOCKET"])
    s.sendall(b'{"jsonrpc":"2.0","id":1,"method":"hello","params":{"protocol":1}}\n'
              b'{"jsonrpc":"2.0","id":2,"method":"agent.list","params":{}}\n')
    for line in s.makefile("rb"):
        message = json.loads(line)
        if "error" in message:
            counts["refused"] += 1
            counts["codes"].append(message["error"]["code"])
            counts["messages"].append(message["error"]["message"])
            break
        if message.get("id") == 2:
            counts["served"] += 1
            break
    held.append(s)
with open(out + ".tmp", "w") as f:
    json.dump(counts, f)
os.rename(out + ".tmp", out)
while not os.path.exists(release):
    time.sleep(0.05)
"#;

#[test]
fn a_tree_of_agents_holding_connections_leaves_the_user_and_other_trees_served() {
    if !have_python3() {
        return;
    }
    let g = Grove::new().with_env(&[("GROVE_TREE_MAX_CONNECTIONS", "6")]);
    let hoarder = g.write_file("hoard.py", HOARDER);
    let files = g.files();
    let (root_out, child_out, release) = (
        files.join("root.json"),
        files.join("child.json"),
        files.join("release"),
    );
    // The root holds four; its child, another agent of the same tree, tries six more.
    let script = format!(
        r#"python3 {h} {ro} {rel} 4 &
while [ ! -e {ro} ]; do sleep 0.05; done
"$GROVE_BIN" spawn -- python3 {h} {co} {rel} 6
wait"#,
        h = hoarder.display(),
        ro = root_out.display(),
        co = child_out.display(),
        rel = release.display(),
    );
    let root = g.spawn(&["--env", &format!("GROVE_BIN={BIN}")], &script);
    eventually(
        "the child holds what it could",
        Duration::from_secs(30),
        || child_out.exists(),
    );
    let read = |p: &std::path::Path| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(p).expect("counts")).expect("json")
    };
    let (root_counts, child_counts) = (read(&root_out), read(&child_out));
    assert_eq!(root_counts["served"], 4, "{root_counts}");
    let served = child_counts["served"].as_u64().expect("served");
    let refused = child_counts["refused"].as_u64().expect("refused");
    assert!(served <= 2, "the tree held more than 6: {child_counts}");
    assert!(refused >= 4, "{child_counts}");
    for (code, message) in each(&child_counts, "codes").zip(each(&child_counts, "messages")) {
        assert_eq!(code, -32014, "{child_counts}");
        assert!(
            message
                .as_str()
                .is_some_and(|m| m.contains("tree_max_connections")),
            "{message}"
        );
    }
    // The user is served, and so is an agent of another tree.
    g.ok(&["list"]);
    let sibling = g.spawn(
        &["--env", &format!("GROVE_BIN={BIN}")],
        r#""$GROVE_BIN" list > /dev/null && echo SIBLING-SERVED"#,
    );
    assert!(g.succeeded_log(&sibling).contains("SIBLING-SERVED"));
    assert!(metric_sum(&g, "grove_connections_refused_tree_total") >= refused as f64);
    // The user's kill of the tree's root is never refused.
    g.ok(&["kill", &root]);
    assert_eq!(g.wait(&root)["outcome"], "killed");
    std::fs::write(&release, "").expect("release");
    let child = g
        .all_agents()
        .into_iter()
        .find(|a| a["parent"] == root.as_str())
        .expect("the child");
    let child_id = child["id"].as_str().expect("id").to_string();
    g.wait(&child_id);
}

#[test]
fn following_a_log_across_its_halves_shows_every_line_whole_or_says_what_it_skipped() {
    let g = Grove::new().with_env(&[("GROVE_LOG_MAX", "16K")]);
    let gate = g.files().join("go");
    let id = g.spawn(
        &[],
        &format!(
            "while [ ! -e {} ]; do sleep 0.05; done; yes grove-budget | head -c 999999; echo THE-END",
            gate.display()
        ),
    );
    let follow = g
        .command()
        .args(["logs", "-f", &id])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("grove logs -f");
    std::fs::write(&gate, "").expect("gate");
    let out = follow.wait_with_output().expect("follow");
    let text = String::from_utf8(out.stdout).expect("utf8");
    assert!(
        text.ends_with("THE-END\n"),
        "{}",
        &text[text.len().saturating_sub(200)..]
    );
    let is_marker = |line: &str| line.starts_with("[grove: ") && line.ends_with(MARKER_TAIL);
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        let whole = *line == "grove-budget" || *line == "THE-END";
        // Around a skip, a line may end or begin anywhere in it.
        let cut_before = lines.get(i + 1).is_some_and(|next| is_marker(next))
            && "grove-budget".starts_with(line);
        let cut_after = i > 0 && is_marker(lines[i - 1]) && "grove-budget".ends_with(line);
        assert!(
            whole || is_marker(line) || cut_before || cut_after,
            "a line came out mangled: {line:?}"
        );
    }
}
