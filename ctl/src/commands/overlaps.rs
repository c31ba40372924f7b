//! The overlap radar: files that more than one live or unmerged agent branch changes,
//! seen before anyone tries to merge. `merge` uses the same analysis for its suggested
//! merge order.

use crate::connect::{connect, dirs};
use crate::gitcli::{works, Changes, Git, Hunk, Work};
use crate::output::{print_json, safe, safe_path, table};
use anyhow::{Context, Result};
use grove_proto::types::AgentRecord;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

pub fn run(hunks: bool, json: bool) -> Result<ExitCode> {
    let mut client = connect(&dirs()?)?;
    let records = crate::connect::list_agents(&mut client, true)?;
    let mut cache = ChangeCache::open()?;
    let mut radar = Radar::new(candidates(records)?, &mut cache)?;
    cache.save(true);
    radar.with_live_changes(&mut client)?;
    let files = radar.shared_files(hunks);
    if json {
        print_json(&OverlapsJson { files })?;
        return Ok(ExitCode::SUCCESS);
    }
    if files.is_empty() {
        println!(
            "no overlaps: no file is changed by more than one of the {} live or unmerged agent branches",
            radar.works.len()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let many_repos = files.iter().any(|f| f.repo != files[0].repo);
    let mut header = vec!["FILE", "AGENT", "BRANCH", "BASE"];
    if many_repos {
        header.insert(0, "REPO");
    }
    if hunks {
        header.push("LINES");
    }
    let mut rows = Vec::new();
    for file in &files {
        for (i, agent) in file.agents.iter().enumerate() {
            let mut row = Vec::new();
            if many_repos {
                row.push(if i == 0 {
                    safe_path(&file.repo)
                } else {
                    String::new()
                });
            }
            row.push(match (i, file.lines_overlap) {
                (0, Some(true)) => format!("{} (same lines)", safe(&file.path)),
                (0, _) => safe(&file.path),
                _ => String::new(),
            });
            row.push(safe(&agent.id));
            row.push(safe(&agent.branch));
            row.push(if agent.base_changed {
                format!("{} changed it too", safe(&agent.base))
            } else {
                "-".into()
            });
            if let Some(hunks) = &agent.hunks {
                row.push(if hunks.is_empty() {
                    "-".into()
                } else {
                    hunks
                        .iter()
                        .map(|h| h.label())
                        .collect::<Vec<_>>()
                        .join(", ")
                });
            }
            rows.push(row);
        }
    }
    println!("{}", table(&header, rows));
    Ok(ExitCode::SUCCESS)
}

#[derive(Serialize)]
struct OverlapsJson {
    files: Vec<SharedFile>,
}

#[derive(Debug, Serialize)]
pub struct SharedFile {
    pub repo: PathBuf,
    pub path: String,
    /// The base changed the file since the branch point of at least one of the agents.
    pub base_changed: bool,
    /// Two agents' hunks overlap or touch: git will stop with a conflict there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lines_overlap: Option<bool>,
    pub agents: Vec<SharedBy>,
}

#[derive(Debug, Serialize)]
pub struct SharedBy {
    pub id: String,
    pub name: Option<String>,
    pub branch: String,
    pub base: String,
    pub state: &'static str,
    pub base_changed: bool,
    /// In the line numbers of the agent's branch point on its base.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hunks: Option<Vec<Hunk>>,
}

/// Branches that can still collide: live ones, and those their base does not contain.
pub fn candidates(records: Vec<AgentRecord>) -> Result<Vec<Work>> {
    Ok(works(records)?
        .into_iter()
        .filter(|w| w.live() || !w.merged())
        .collect())
}

/// What each candidate branch changed, and what its base changed since it forked.
pub struct Radar {
    pub works: Vec<Work>,
    own: Vec<Changes>,
    base: Vec<Changes>,
}

impl Radar {
    pub fn new(works: Vec<Work>, cache: &mut ChangeCache) -> Result<Radar> {
        let pairs = works.iter().flat_map(|w| {
            [
                (&w.git, w.merge_base.as_str(), w.tip.as_str()),
                (&w.git, w.merge_base.as_str(), w.base_tip.as_str()),
            ]
        });
        cache.prefetch(pairs.collect())?;
        let mut own = Vec::new();
        let mut base = Vec::new();
        for w in &works {
            own.push(cache.changes(&w.git, &w.merge_base, &w.tip)?);
            base.push(cache.changes(&w.git, &w.merge_base, &w.base_tip)?);
        }
        Ok(Radar { works, own, base })
    }

    /// Running agents' work as their worktrees hold it now (the daemon's `agent.diff`):
    /// uncommitted and untracked files collide too, and earliest is best to know. Their
    /// hunks carry git's context lines, so line overlaps are a little wider than exact.
    /// Asked over a few connections at once: each diff is a walk of one worktree, which
    /// the daemon runs on a thread of its own.
    pub fn with_live_changes(&mut self, client: &mut grove_proto::Client) -> Result<()> {
        let live: Vec<(usize, String)> = self
            .works
            .iter()
            .enumerate()
            .filter(|(_, w)| w.live())
            .map(|(i, w)| (i, w.record.id.clone()))
            .collect();
        let workers = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .clamp(1, 4)
            .min(live.len().saturating_sub(1));
        let next = std::sync::atomic::AtomicUsize::new(0);
        let found = std::sync::Mutex::new(Vec::new());
        let take = || live.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        let ask = |client: &mut grove_proto::Client, (i, id): &(usize, String)| {
            // An agent that ended meanwhile keeps what its branch says.
            if let Some(changes) = live_changes(client, id) {
                found
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((*i, changes));
            }
        };
        let dirs = dirs()?;
        std::thread::scope(|scope| {
            for _ in 0..workers {
                scope.spawn(|| {
                    let Ok(mut own) = crate::connect::connect_existing(&dirs) else {
                        return;
                    };
                    while let Some(job) = take() {
                        ask(&mut own, job);
                    }
                });
            }
            while let Some(job) = take() {
                ask(client, job);
            }
        });
        for (i, changes) in found.into_inner().unwrap_or_else(|e| e.into_inner()) {
            self.own[i] = changes;
        }
        Ok(())
    }

    /// Files changed by two or more branches of one repository, by repository and path.
    pub fn shared_files(&self, with_hunks: bool) -> Vec<SharedFile> {
        let mut by_file: BTreeMap<(&Path, &str), Vec<usize>> = BTreeMap::new();
        for (i, (w, changes)) in self.works.iter().zip(&self.own).enumerate() {
            for file in &changes.files {
                by_file
                    .entry((w.record.repo.as_path(), file.as_str()))
                    .or_default()
                    .push(i);
            }
        }
        by_file
            .into_iter()
            .filter(|(_, agents)| agents.len() > 1)
            .map(|((repo, path), agents)| {
                let hunks_of = |i: usize| self.own[i].hunks.get(path).cloned().unwrap_or_default();
                let agents: Vec<SharedBy> = agents
                    .into_iter()
                    .map(|i| {
                        let w = &self.works[i];
                        SharedBy {
                            id: w.record.id.clone(),
                            name: w.record.name.clone(),
                            branch: w.record.branch.clone(),
                            base: w.base_label(),
                            state: w.state(),
                            base_changed: self.base[i].files.iter().any(|f| f == path),
                            hunks: with_hunks.then(|| hunks_of(i)),
                        }
                    })
                    .collect();
                let lines_overlap = with_hunks.then(|| {
                    agents.iter().enumerate().any(|(i, a)| {
                        agents[i + 1..].iter().any(|b| {
                            let (a, b) = (a.hunks.as_deref(), b.hunks.as_deref());
                            let (a, b) = (a.unwrap_or_default(), b.unwrap_or_default());
                            a.iter().any(|x| b.iter().any(|y| x.collides(*y)))
                        })
                    })
                });
                SharedFile {
                    repo: repo.to_path_buf(),
                    path: path.to_string(),
                    base_changed: agents.iter().any(|a| a.base_changed),
                    lines_overlap,
                    agents,
                }
            })
            .collect()
    }

    /// Indexes of the branches in the order that merges them with the fewest conflicts:
    /// those sharing files with the fewest others first, then those whose base moved
    /// under the fewest of their files, then oldest first. Each with both counts.
    pub fn merge_order(&self) -> Vec<(usize, usize, usize)> {
        let files: Vec<BTreeSet<&str>> = self
            .own
            .iter()
            .map(|c| c.files.iter().map(String::as_str).collect())
            .collect();
        let mut order: Vec<(usize, usize, usize)> = (0..self.works.len())
            .map(|i| {
                let overlaps = (0..self.works.len())
                    .filter(|&j| {
                        j != i
                            && self.works[j].record.repo == self.works[i].record.repo
                            && !files[i].is_disjoint(&files[j])
                    })
                    .count();
                let moved = self.base[i]
                    .files
                    .iter()
                    .filter(|f| files[i].contains(f.as_str()))
                    .count();
                (i, overlaps, moved)
            })
            .collect();
        // Only work that is done and good is worth merging; overlaps still count every
        // branch that may collide.
        order.retain(|&(i, _, _)| {
            let r = &self.works[i].record;
            r.status.is_final() && r.outcome == Some(grove_proto::types::Outcome::Succeeded)
        });
        order.sort_by_key(|&(i, overlaps, moved)| {
            (overlaps, moved, self.works[i].record.created_at_ms)
        });
        order
    }
}

/// What a running agent's worktree holds now, or `None` when it cannot say (ended).
fn live_changes(client: &mut grove_proto::Client, id: &str) -> Option<Changes> {
    use grove_proto::methods::{Diff, DiffParams};
    let live = client
        .call::<Diff>(&DiffParams {
            id: id.to_string(),
            stat: false,
            paths: Vec::new(),
        })
        .ok()?;
    Some(crate::gitcli::changes_from_patch(&live.diff))
}

/// Diffs by commit pair, `<from>..<to>`, kept in a JSON file under the state dir. A
/// commit pair's diff never changes, so entries never go stale; a save after a look at
/// every branch keeps only the entries used, which bounds the file by the branches.
pub struct ChangeCache {
    path: PathBuf,
    stored: BTreeMap<String, Changes>,
    used: BTreeMap<String, Changes>,
}

#[derive(Serialize, Deserialize)]
struct CacheFile {
    version: u32,
    entries: BTreeMap<String, Changes>,
}

const CACHE_VERSION: u32 = 1;

impl ChangeCache {
    pub fn open() -> Result<ChangeCache> {
        let path = dirs()?.state_dir.join("overlaps-cache.json");
        // A missing, damaged or older cache only costs recomputation.
        let stored = fs::read(&path)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<CacheFile>(&bytes).ok())
            .filter(|file| file.version == CACHE_VERSION)
            .map(|file| file.entries)
            .unwrap_or_default();
        Ok(ChangeCache {
            path,
            stored,
            used: BTreeMap::new(),
        })
    }

    /// Diffs the pairs not cached yet, a few at once, so that [`ChangeCache::changes`]
    /// then finds every one.
    pub fn prefetch(&mut self, pairs: Vec<(&Git, &str, &str)>) -> Result<()> {
        let mut missing = BTreeMap::new();
        for (git, from, to) in pairs {
            let key = format!("{from}..{to}");
            if !self.used.contains_key(&key) && !self.stored.contains_key(&key) {
                missing.entry(key).or_insert((git, from, to));
            }
        }
        let diffed =
            crate::parallel::map(missing.into_iter().collect(), |(key, (git, from, to))| {
                let changes = git
                    .changes(from, to)
                    .with_context(|| format!("diffing {key} in {}", git.dir.display()));
                (key, changes)
            });
        for (key, changes) in diffed {
            self.used.insert(key, changes?);
        }
        Ok(())
    }

    pub fn changes(&mut self, git: &Git, from: &str, to: &str) -> Result<Changes> {
        let key = format!("{from}..{to}");
        if let Some(hit) = self.used.get(&key).or_else(|| self.stored.get(&key)) {
            let hit = hit.clone();
            self.used.insert(key, hit.clone());
            return Ok(hit);
        }
        let changes = git
            .changes(from, to)
            .with_context(|| format!("diffing {key} in {}", git.dir.display()))?;
        self.used.insert(key, changes.clone());
        Ok(changes)
    }

    /// Best effort: a cache that cannot be written only makes the next run slower.
    /// `complete`: this run looked at every candidate branch, so unused entries go.
    pub fn save(mut self, complete: bool) {
        if self.used.keys().eq(self.stored.keys())
            || (!complete && self.used.keys().all(|k| self.stored.contains_key(k)))
        {
            return;
        }
        let entries = if complete {
            self.used
        } else {
            self.stored.append(&mut self.used);
            self.stored
        };
        let file = CacheFile {
            version: CACHE_VERSION,
            entries,
        };
        let Ok(bytes) = serde_json::to_vec(&file) else {
            return;
        };
        let tmp = self
            .path
            .with_extension(format!("json.{}.tmp", std::process::id()));
        let written = self
            .path
            .parent()
            .map_or(Ok(()), fs::create_dir_all)
            .and_then(|()| fs::write(&tmp, bytes))
            .and_then(|()| fs::rename(&tmp, &self.path));
        if let Err(e) = written {
            let _ = fs::remove_file(&tmp);
            tracing::debug!("cannot write {}: {e}", self.path.display());
        }
    }
}
