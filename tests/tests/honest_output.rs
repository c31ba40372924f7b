//! What grove prints and what `grove merge` claims must be true, whatever an agent
//! wrote: escape sequences in reports, names, argv or paths never reach the user's
//! terminal raw, and a merge never overwrites or deletes an untracked or ignored file,
//! nor says "nothing was changed" without having checked.

mod support;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use support::*;

/// Window title, erase line, carriage-return overwrite, concealed text, and an 8-bit
/// CSI (U+009B) that some terminals honour; as printf(1) writes it.
const ATTACK: &str = r"\033]0;pwned\007\033[2K\rFAKE-OK\033[8mhidden\033[0m\302\2332J";

fn assert_no_raw_controls(what: &str, text: &str) {
    let raw: Vec<char> = text
        .chars()
        .filter(|c| (c.is_control() && *c != '\n') || ('\u{80}'..='\u{9f}').contains(c))
        .collect();
    assert!(raw.is_empty(), "{what} printed raw {raw:?}:\n{text}");
}

#[test]
fn escape_sequences_from_an_agent_never_reach_the_terminal() {
    let g = Grove::new();
    // The agent commits, reports, and spawns a child whose name and argv carry the
    // attack, as any agent may.
    let script = format!(
        r#"E=$(printf '{ATTACK}')
        echo x > x.txt && git add x.txt && git commit -qm "subject $E"
        "$GROVE_BIN" report "first line $E
second line $E"
        "$GROVE_BIN" spawn --name "$(printf 'evil\302\2332J')" -- sh -c 'exit 0' "argv $E""#
    );
    let id = g.spawn(&["--env", &format!("GROVE_BIN={BIN}")], &script);
    let record = g.wait(&id);
    assert_eq!(record["outcome"], "succeeded", "{record}");
    assert!(
        record["report"]
            .as_str()
            .is_some_and(|r| r.contains('\u{1b}')),
        "the attack is stored as sent: {record}"
    );
    let list = g.json(&["list", "--all"]);
    let child = each(&list, "agents")
        .find(|a| a["parent"] == id.as_str())
        .unwrap_or_else(|| panic!("no child in {list}"))["id"]
        .as_str()
        .expect("id")
        .to_string();
    g.wait(&child);

    for args in [
        vec!["show", id.as_str()],
        vec!["show", child.as_str()],
        vec!["wait", id.as_str()],
        vec!["review"],
        vec!["review", id.as_str()],
        vec!["list", "--all"],
        vec!["salvaged"],
        vec!["overlaps"],
    ] {
        let out = g.ok(&args);
        assert_no_raw_controls(&format!("grove {args:?}"), &out);
    }
    let show = g.ok(&["show", &id]);
    assert!(
        show.contains(r"first line \e]0;pwned\x07\e[2K\rFAKE-OK\e[8mhidden\e[0m\u{9b}2J"),
        "recognisable: {show}"
    );
    assert!(
        show.contains("\n             second line"),
        "a multi-line report keeps its lines, under its label: {show}"
    );
    let wait = g.ok(&["wait", &id]);
    assert!(
        wait.contains("\n            second line \\e]0;pwned"),
        "{wait}"
    );
    let child_show = g.ok(&["show", &child]);
    assert!(
        child_show.contains(r"argv \e]0;pwned\x07"),
        "argv: {child_show}"
    );
    assert!(child_show.contains(r"evil\u{9b}2J"), "name: {child_show}");
    let review = g.ok(&["review", &id]);
    assert!(review.contains(r"subject \e]0;pwned"), "{review}");
    let list = g.ok(&["list", "--all"]);
    assert_eq!(
        list.lines().count(),
        3,
        "a header and one row each:\n{list}"
    );
    assert!(list.contains(r"evil\u{9b}2J"), "{list}");

    // `--json` stays JSON: the report comes back exactly as the agent sent it.
    let report = g.json(&["show", &id])["report"].clone();
    assert!(
        report
            .as_str()
            .is_some_and(|r| r.contains("\u{1b}]0;pwned\u{7}")),
        "{report}"
    );
}

#[test]
fn logs_on_a_terminal_are_escaped_unless_raw() {
    let reason = (!Path::new("/usr/bin/script").exists() && !Path::new("/bin/script").exists())
        .then(|| "script(1) is needed to give grove logs a terminal".to_string());
    if !can_run("script", reason) {
        return;
    }
    let g = Grove::new();
    let id = g.spawn(&[], &format!("printf 'out: {ATTACK}\\nnext\\n'"));
    g.wait(&id);
    let in_terminal = |extra: &str| {
        let cmd = format!("'{}' logs {id} {extra}", g.bin.display());
        let out = std::process::Command::new("script")
            .args(["-qfec", &cmd, "/dev/null"])
            .envs(support::grove_env(&g))
            .current_dir(&g.repo)
            .output()
            .expect("script runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let escaped = in_terminal("");
    assert!(
        escaped.contains(r"out: \e]0;pwned\x07\e[2K\rFAKE-OK"),
        "{escaped:?}"
    );
    assert!(!escaped.contains('\u{1b}'), "{escaped:?}");
    let raw = in_terminal("--raw");
    assert!(raw.contains("\u{1b}]0;pwned\u{7}"), "{raw:?}");
    // On a pipe the bytes are the agent's, as before.
    assert!(g.ok(&["logs", &id]).contains("\u{1b}[2K\r"));
}

#[test]
fn a_repository_name_with_a_newline_keeps_one_row_per_agent() {
    let g = Grove::new();
    let odd = g.dir.path().join("re\npo\u{1b}[31m");
    init_repo(&odd);
    let odd_arg = odd.to_str().expect("utf-8");
    let ids: Vec<String> = (0..2)
        .map(|n| g.spawn(&["--repo", odd_arg], &format!("echo {n} > n.txt")))
        .collect();
    for id in &ids {
        g.wait(id);
    }
    let list = g.ok(&["list", "--all"]);
    assert_no_raw_controls("grove list", &list);
    assert_eq!(
        list.lines().count(),
        3,
        "a header and one row each:\n{list}"
    );
    for id in &ids {
        let row = list
            .lines()
            .find(|l| l.starts_with(id.as_str()))
            .unwrap_or_else(|| panic!("no row for {id}:\n{list}"));
        assert!(row.contains(r"re\npo\e[31m"), "{row}");
        let show = g.ok(&["show", id]);
        assert_no_raw_controls("grove show", &show);
        assert!(show.contains(r"re\npo\e[31m"), "{show}");
    }
}

/// The repo with `*.out` ignored, and an agent that committed `build.out` and
/// `notes.txt` (forced past the ignore rule, as an agent may).
fn agent_adding_build_out_and_notes(g: &Grove) -> (String, String) {
    fs::write(g.repo.join(".gitignore"), "*.ignored\n*.out\n").expect("write");
    g.git(&["commit", "-qam", "ignore build output"]);
    let id = g.spawn(
        &[],
        "printf 'agent build\\n' > build.out && printf 'agent notes\\n' > notes.txt && \
         git add -f build.out notes.txt && git commit -qm 'agent files'",
    );
    let record = g.wait(&id);
    assert_eq!(record["outcome"], "succeeded", "{record}");
    let branch = record["branch"].as_str().expect("branch").to_string();
    (id, branch)
}

fn tip(g: &Grove, rev: &str) -> String {
    g.git(&["rev-parse", rev]).trim().to_string()
}

/// Content, inode and mtime: "byte-identical" and "not rewritten".
fn fingerprint(path: &Path) -> (Vec<u8>, u64, i64, i64) {
    let meta = fs::symlink_metadata(path).expect("exists");
    (
        fs::read(path).expect("read"),
        meta.ino(),
        meta.mtime(),
        meta.mtime_nsec(),
    )
}

#[test]
fn merge_never_overwrites_an_untracked_or_ignored_file() {
    let g = Grove::new();
    let (id, branch) = agent_adding_build_out_and_notes(&g);
    fs::write(g.repo.join("build.out"), "the user's build\n").expect("write");
    fs::write(g.repo.join("notes.txt"), "the user's notes\n").expect("write");
    let files = ["build.out", "notes.txt"].map(|f| g.repo.join(f));
    let before = files.each_ref().map(|f| fingerprint(f));
    let head = tip(&g, "HEAD");
    let branch_tip = tip(&g, &branch);
    let status = g.git(&["status", "--porcelain", "--ignored"]);

    for mode in MERGE_MODES {
        merge_in(&g, &id, mode).assert_exit(
            2,
            &[
                "ignored: build.out",
                "untracked: notes.txt",
                "nothing was changed",
            ],
        );
        assert_eq!(files.each_ref().map(|f| fingerprint(f)), before, "{mode:?}");
        assert_eq!(tip(&g, "HEAD"), head);
        assert_eq!(tip(&g, &branch), branch_tip);
        assert_eq!(g.git(&["status", "--porcelain", "--ignored"]), status);
    }

    // A directory where the merge writes a file counts too, ignored contents and all.
    fs::remove_file(&files[0]).expect("rm");
    fs::create_dir(&files[0]).expect("mkdir");
    fs::write(files[0].join("cache"), "kept\n").expect("write");
    fs::remove_file(&files[1]).expect("rm");
    g.refused(&["merge", &id], "build.out");
    assert_eq!(
        fs::read_to_string(files[0].join("cache")).ok().as_deref(),
        Some("kept\n")
    );

    // Out of the way, the same merge goes through.
    fs::remove_dir_all(&files[0]).expect("rm");
    g.ok(&["merge", &id]);
    assert_eq!(
        fs::read_to_string(&files[1]).ok().as_deref(),
        Some("agent notes\n")
    );
}

#[test]
fn untracked_and_ignored_files_the_merge_does_not_touch_do_not_block_it() {
    let g = Grove::new();
    let id = g.spawn(&[], "echo x > x.txt && git add x.txt && git commit -qm x");
    g.wait(&id);
    fs::write(g.repo.join(".grove.toml"), "[worktree]\n").expect("write");
    fs::write(g.repo.join("cache.ignored"), "ignored\n").expect("write");
    fs::create_dir(g.repo.join("target.ignored")).expect("mkdir");
    fs::write(g.repo.join("target.ignored/obj"), "obj\n").expect("write");
    fs::write(
        g.repo.join("README.md"),
        "a change the merge does not touch\n",
    )
    .expect("write");
    let out = g.ok(&["merge", &id]);
    assert!(out.contains("merged"), "{out}");
    assert_eq!(
        fs::read_to_string(g.repo.join("x.txt")).ok().as_deref(),
        Some("x\n")
    );
    assert_eq!(
        g.git(&["status", "--porcelain", "--ignored"]),
        " M README.md\n?? .grove.toml\n!! cache.ignored\n!! target.ignored/\n"
    );
}

/// Two agents changing the same line: the second merge stops on a conflict.
fn conflicting_pair(g: &Grove) -> String {
    let left = g.spawn(
        &[],
        "printf 'one\\nLEFT\\nthree\\n' > src/lib.txt && git commit -qam left",
    );
    let right = g.spawn(
        &[],
        "printf 'one\\nRIGHT\\nthree\\n' > src/lib.txt && git commit -qam right",
    );
    g.wait(&left);
    g.wait(&right);
    g.ok(&["merge", &left]);
    right
}

#[test]
fn a_conflict_leaves_everything_as_it_was_ignored_files_included() {
    let g = Grove::new();
    let right = conflicting_pair(&g);
    fs::write(g.repo.join(".grove.toml"), "[worktree]\n").expect("write");
    fs::write(g.repo.join("cache.ignored"), "ignored\n").expect("write");
    fs::write(g.repo.join("README.md"), "uncommitted, untouched\n").expect("write");
    let kept = [".grove.toml", "cache.ignored", "README.md"].map(|f| g.repo.join(f));
    let before = kept.each_ref().map(|f| fingerprint(f));
    let head = tip(&g, "HEAD");
    let status = g.git(&["status", "--porcelain=v2", "--ignored"]);
    for mode in MERGE_MODES {
        merge_in(&g, &right, mode).assert_exit(1, &["src/lib.txt", "nothing was changed"]);
        assert_eq!(kept.each_ref().map(|f| fingerprint(f)), before, "{mode:?}");
        assert_eq!(tip(&g, "HEAD"), head);
        assert_eq!(g.git(&["status", "--porcelain=v2", "--ignored"]), status);
    }
}

#[test]
fn a_failed_merge_that_changed_something_says_what_instead_of_nothing() {
    let g = Grove::new();
    // The user's own merge driver leaves a file behind and reports a conflict; the
    // abort does not remove it, so "nothing was changed" would be a lie.
    fs::write(g.repo.join(".gitattributes"), "*.txt merge=leaves\n").expect("write");
    g.git(&["add", ".gitattributes"]);
    g.git(&["commit", "-qm", "attributes"]);
    g.git(&[
        "config",
        "merge.leaves.driver",
        "echo left-behind > left-behind.ignored; exit 1",
    ]);
    let right = conflicting_pair(&g);
    let out = g.run(&["merge", &right]);
    assert_ne!(out.code, 0, "{} {}", out.stdout, out.stderr);
    assert!(
        !out.stderr.contains("nothing was changed"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr
            .contains("left-behind.ignored: was clean or absent, is now ignored"),
        "says what: {}",
        out.stderr
    );
    assert!(g.repo.join("left-behind.ignored").exists());
}

/// Two branches that changed different files merge without a preview by git; these
/// are the cases where that would miss a path the merge writes, so the preview runs.
#[test]
fn a_change_git_would_carry_to_a_renamed_file_counts_too() {
    let g = Grove::new();
    fs::write(g.repo.join("a.txt"), "one\ntwo\nthree\nfour\n").expect("write");
    g.git(&["add", "a.txt"]);
    g.git(&["commit", "-qm", "a"]);
    let id = g.spawn(
        &[],
        "printf 'one\\ntwo\\nthree\\nFOUR\\n' > a.txt && git commit -qam four",
    );
    g.wait(&id);
    // The user renames the file; git's merge writes the agent's change into b.txt,
    // where the user has work of their own.
    g.git(&["mv", "a.txt", "b.txt"]);
    g.git(&["commit", "-qm", "rename"]);
    fs::write(g.repo.join("b.txt"), "one\ntwo\nthree\nfour\nmine\n").expect("write");
    g.refused_all(
        &["merge", &id],
        &["uncommitted changes: b.txt", "nothing was changed"],
    );
    assert_eq!(
        fs::read_to_string(g.repo.join("b.txt")).expect("read"),
        "one\ntwo\nthree\nfour\nmine\n"
    );
    // Without the user's edit, the same merge goes through, into the renamed file.
    g.git(&["checkout", "--", "b.txt"]);
    g.ok(&["merge", &id]);
    assert!(fs::read_to_string(g.repo.join("b.txt"))
        .expect("read")
        .contains("FOUR"));
}

#[test]
fn a_file_where_the_other_side_made_a_directory_is_left_to_git() {
    let g = Grove::new();
    let id = g.spawn(&[], "echo agent > lib && git add lib && git commit -qm lib");
    g.wait(&id);
    // The user made `lib` a directory meanwhile: no plain union of the two sides.
    fs::create_dir(g.repo.join("lib")).expect("mkdir");
    fs::write(g.repo.join("lib/x.txt"), "x\n").expect("write");
    g.git(&["add", "lib/x.txt"]);
    g.git(&["commit", "-qm", "lib dir"]);
    let head = g.git(&["rev-parse", "HEAD"]);
    let out = g.run(&["merge", &id]);
    assert_eq!(out.code, 1, "a conflict: {} {}", out.stdout, out.stderr);
    assert!(out.stderr.contains("conflicting files"), "{}", out.stderr);
    assert_eq!(g.git(&["rev-parse", "HEAD"]), head);
    assert_eq!(g.git(&["status", "--porcelain"]), "");
}

#[test]
fn a_file_git_would_move_into_a_renamed_directory_counts_too() {
    let g = Grove::new();
    fs::write(g.repo.join(".gitignore"), "*.ignored\n*.out\n").expect("write");
    fs::create_dir(g.repo.join("old")).expect("mkdir");
    fs::write(g.repo.join("old/a.txt"), "a\n").expect("write");
    g.git(&["add", "."]);
    g.git(&["commit", "-qm", "old"]);
    let id = g.spawn(
        &[],
        "echo agent > old/added.out && git add -f old/added.out && git commit -qm add",
    );
    g.wait(&id);
    // The user renames the directory; git's merge would carry the agent's new file
    // along, over the user's ignored file of that name, and delete it on abort.
    g.git(&["mv", "old", "new"]);
    g.git(&["commit", "-qm", "rename"]);
    let users = g.repo.join("new/added.out");
    fs::write(&users, "the user's\n").expect("write");
    let before = fingerprint(&users);
    g.refused(&["merge", &id], "ignored: new/added.out");
    assert_eq!(fingerprint(&users), before);
}
