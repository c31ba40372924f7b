//! Whose the commits grove makes for agents are, read back with plain git: the author
//! is the user's identity from the repository's config, the committer grove, the
//! subject names the agent and a `Grove-Agent` trailer leads back to its record.

mod support;

use support::*;

/// Author, committer, subject and trailers of `rev`, one per line (trailers last).
fn who(g: &Grove, rev: &str) -> Vec<String> {
    g.git(&["log", "-1", "--format=%an <%ae>%n%cn%n%s%n%(trailers)", rev])
        .lines()
        .map(str::to_string)
        .collect()
}

fn with_user_identity(g: &Grove) {
    g.git(&["config", "user.name", "Repo User"]);
    g.git(&["config", "user.email", "repo.user@example.invalid"]);
}

/// The salvage commit's `lines` (of `who`) are the user's, committed by grove, with
/// `name`'s subject and the agent `id`'s trailer.
fn assert_users_salvage(lines: &[String], name: &str, id: &str) {
    assert_eq!(
        lines[0], "Repo User <repo.user@example.invalid>",
        "{lines:?}"
    );
    assert_eq!(lines[1], "grove", "{lines:?}");
    assert_eq!(lines[2], format!("{name}: work left at exit"), "{lines:?}");
    assert!(lines.contains(&format!("Grove-Agent: {id}")), "{lines:?}");
}

/// Leaves `file` uncommitted and ends; the salvage commit carries it.
fn leave_work(g: &Grove, extra: &[&str], file: &str) -> (String, serde_json::Value) {
    let id = g.spawn(extra, &format!("echo work > {file}"));
    let record = g.wait(&id);
    assert_eq!(record["outcome"], "succeeded", "{record}");
    assert_eq!(record["salvaged"], true, "{record}");
    (id, record)
}

#[test]
fn the_salvage_commit_is_the_users_committed_by_grove_and_names_the_agent() {
    let g = Grove::new();
    with_user_identity(&g);
    let (id, record) = leave_work(&g, &["--name", "fixer"], "left.txt");
    let branch = record["branch"].as_str().expect("branch");
    let lines = who(&g, branch);
    assert_users_salvage(&lines, "fixer", &id);
    assert!(
        lines.contains(&"Grove-Command: sh -c echo work > left.txt".to_string()),
        "{lines:?}"
    );
}

#[test]
fn the_subject_is_the_first_line_of_the_agents_report() {
    let g = Grove::new();
    with_user_identity(&g);
    let id = g.spawn(
        &["--name", "reporter", "--env", &format!("GROVE_BIN={BIN}")],
        "echo x > r.txt && \"$GROVE_BIN\" report \"$(printf 'Fixed the \\033[2Jparser\\ndetails')\"",
    );
    let record = g.wait(&id);
    assert_eq!(record["outcome"], "succeeded", "{record}");
    let lines = who(&g, record["branch"].as_str().expect("branch"));
    // The escape character the agent sent is dropped; its second line is not there.
    assert_eq!(lines[2], "reporter: Fixed the [2Jparser", "{lines:?}");
}

#[test]
fn a_jailed_agents_salvage_has_the_same_authorship() {
    if !have_landlock() {
        return;
    }
    let g = Grove::new();
    with_user_identity(&g);
    // The agent's own repository names another identity: it must not be the author.
    let id = g.spawn(
        &["--jail", "--name", "jailed"],
        "git config user.name Mallory && git config user.email m@evil.invalid && echo j > j.txt",
    );
    let record = g.wait(&id);
    assert_eq!(record["outcome"], "succeeded", "{record}");
    let lines = who(&g, record["branch"].as_str().expect("branch"));
    assert_users_salvage(&lines, "jailed", &id);
}

#[test]
fn commit_author_grove_and_no_identity_fall_back_to_grove() {
    let g = Grove::new().with_env(&[("GROVE_COMMIT_AUTHOR", "grove")]);
    with_user_identity(&g);
    let (_, record) = leave_work(&g, &[], "a.txt");
    let lines = who(&g, record["branch"].as_str().expect("branch"));
    assert_eq!(lines[0], "grove <grove@localhost>", "{lines:?}");

    let g = Grove::new();
    let (id, record) = leave_work(&g, &[], "b.txt");
    let lines = who(&g, record["branch"].as_str().expect("branch"));
    assert_eq!(lines[0], "grove <grove@localhost>", "{lines:?}");
    // No name: the id names the agent.
    assert_eq!(lines[2], format!("{id}: work left at exit"), "{lines:?}");

    let bad = Grove::new().with_env(&[("GROVE_COMMIT_AUTHOR", "someone")]);
    bad.fails(&["list"], &["commit_author", "expected user or grove"]);
}

#[test]
fn merge_and_squash_commits_carry_the_agents_trailer() {
    let g = Grove::new();
    with_user_identity(&g);
    let (id, _) = leave_work(&g, &["--name", "merged"], "m.txt");
    g.ok(&["merge", &id]);
    let lines = who(&g, "main");
    assert_eq!(
        lines[2],
        format!("Merge branch 'grove/merged-{id}' into main (grove agent merged ({id}))"),
        "{lines:?}"
    );
    assert!(lines.contains(&format!("Grove-Agent: {id}")), "{lines:?}");

    let (id, _) = leave_work(&g, &["--name", "squashed"], "s.txt");
    g.ok(&["merge", "--squash", &id]);
    let lines = who(&g, "main");
    assert!(lines[2].starts_with("Squash-merge branch"), "{lines:?}");
    assert!(lines.contains(&format!("Grove-Agent: {id}")), "{lines:?}");
}
