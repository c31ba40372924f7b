//! What jailed setup commands in an unjailed agent's linked worktree see of the user's
//! repository: its git dir, read-only (git needs it to read the worktree at all), with
//! its config replaced by a copy of what git needs to read a repository (`core.*`,
//! `extensions.*`). The rest of a config can hold a token (`http.extraheader`, as CI
//! checkouts leave one; a URL with a password), and content an agent wrote must not
//! read it.

use grove_proto::shim::ViewEntry;
use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};

/// The sections of a config kept in the copy.
const KEPT: &[&str] = &["core", "extensions"];

/// The view's entries for the user's git dir `common` and the object directories it
/// borrows (`git clone --reference`), its config copied into `tmp` (removed with it).
pub fn entries(common: &Path, tmp: &Path) -> io::Result<Vec<ViewEntry>> {
    let copy = tmp.join("users-git-config");
    std::fs::write(&copy, kept_config(&common.join("config"))?)?;
    let read_only = |path: PathBuf| ViewEntry::Show {
        path,
        writable: false,
    };
    let mut entries = vec![
        read_only(common.to_path_buf()),
        ViewEntry::Bind {
            source: copy,
            path: common.join("config"),
        },
    ];
    let borrowed = super::jail_view::borrowed_objects(&common.join("objects"));
    entries.extend(borrowed.into_iter().map(read_only));
    Ok(entries)
}

/// The text of a config holding only the [`KEPT`] sections of `path`'s.
fn kept_config(path: &Path) -> io::Result<String> {
    let config = git2::Config::open(path).map_err(io::Error::other)?;
    let mut sections: Vec<(String, String)> = Vec::new();
    let mut entries = config.entries(None).map_err(io::Error::other)?;
    while let Some(entry) = entries.next() {
        let entry = entry.map_err(io::Error::other)?;
        let (Some(name), Some(value)) = (entry.name(), entry.value()) else {
            continue;
        };
        let Some((section, key)) = name.split_once('.') else {
            continue;
        };
        // A subsection (`core.x.y`) is none git needs to read a repository.
        if KEPT.contains(&section) && !key.contains('.') {
            sections.push((
                format!("[{section}]"),
                format!("\t{key} = {}", quoted(value)),
            ));
        }
    }
    let mut text = String::new();
    let mut current = String::new();
    for (section, line) in sections {
        if section != current {
            let _ = writeln!(text, "{section}");
            current = section;
        }
        let _ = writeln!(text, "{line}");
    }
    Ok(text)
}

fn quoted(value: &str) -> String {
    let escaped = value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n");
    format!("\"{escaped}\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shows_the_git_dir_and_what_it_borrows_read_only_with_its_config_copied() {
        let dir = tempfile::tempdir().expect("tempdir");
        let common = dir.path().join("repo/.git");
        std::fs::create_dir_all(common.join("objects/info")).expect("mkdir");
        std::fs::write(common.join("config"), "[core]\n\tbare = false\n").expect("write");
        std::fs::write(
            common.join("objects/info/alternates"),
            "/elsewhere/objects\n# a comment\n../../../shared/objects\n",
        )
        .expect("write");
        let tmp = dir.path().join("tmp");
        std::fs::create_dir_all(&tmp).expect("mkdir");
        let entries = entries(&common, &tmp).expect("entries");
        let shown: Vec<&Path> = entries
            .iter()
            .filter_map(|e| match e {
                ViewEntry::Show { path, writable } => {
                    assert!(!writable, "{}", path.display());
                    Some(path.as_path())
                }
                _ => None,
            })
            .collect();
        assert_eq!(shown[0], common);
        assert!(
            shown.contains(&Path::new("/elsewhere/objects")),
            "{shown:?}"
        );
        assert!(
            shown.contains(&dir.path().join("shared/objects").as_path()),
            "{shown:?}"
        );
        assert!(entries.contains(&ViewEntry::Bind {
            source: tmp.join("users-git-config"),
            path: common.join("config"),
        }));
    }

    #[test]
    fn keeps_what_git_reads_a_repository_with_and_drops_tokens() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config");
        std::fs::write(
            &path,
            "[core]\n\trepositoryformatversion = 1\n\tbare = false\n\
             [extensions]\n\tobjectformat = sha256\n\
             [http \"https://github.com/\"]\n\textraheader = AUTHORIZATION: basic c2VjcmV0\n\
             [remote \"origin\"]\n\turl = https://u:token@example.com/r.git\n\
             [core]\n\tsshCommand = \"ssh -i \\\"k\\\"\"\n",
        )
        .expect("write");
        let text = kept_config(&path).expect("kept");
        assert!(
            !text.contains("c2VjcmV0") && !text.contains("token"),
            "{text}"
        );
        let copy = dir.path().join("copy");
        std::fs::write(&copy, &text).expect("write");
        let reread = git2::Config::open(&copy).expect("parses");
        assert_eq!(reread.get_i32("core.repositoryformatversion").ok(), Some(1));
        assert_eq!(
            reread.get_string("extensions.objectformat").ok().as_deref(),
            Some("sha256")
        );
        assert_eq!(
            reread.get_string("core.sshcommand").ok().as_deref(),
            Some("ssh -i \"k\"")
        );
    }
}
