//! A tree's share of grove.db (`tree_max_db`): the bytes the agents of one tree (an
//! agent the user spawned and all its descendants) hold in the database, so that no
//! tree can fill the disk the user and the other trees share. A tree holds the
//! checkpoints its agents wrote (each [`ROW_BYTES`] plus its JSON and the snapshot
//! stored with it, forks' first checkpoints included) and the records of the agents
//! it spawned (its root's record is the user's). The count is read from the rows at
//! every start, so a restart gives nothing back; rows give their bytes back as they
//! go (compaction, unpin, session rm and GC). The user's writes never count.

use crate::error::Error;
use std::collections::HashMap;
use std::sync::Mutex;

/// What one stored row costs beyond its JSON: its other columns and its share of the
/// b-tree, so that a flood of tiny writes is not free.
pub const ROW_BYTES: u64 = 256;

/// Bytes each writer's stored checkpoints gained (or lost, negative).
pub type WriterBytes = HashMap<String, i64>;

/// One stored agent record, for the count at start: its id, its parent, its bytes.
pub type AgentRow = (String, Option<String>, u64);

#[derive(Debug)]
pub struct TreeDb {
    max: u64,
    usage: Mutex<Usage>,
    /// `None` until the count is read at start; then whether it could be.
    loaded: tokio::sync::watch::Sender<Option<bool>>,
}

#[derive(Debug, Default)]
struct Usage {
    by_tree: HashMap<String, u64>,
    /// Each agent writer's tree, so that rows that go are given back to it.
    root_of: HashMap<String, String>,
}

impl TreeDb {
    pub fn new(max: u64) -> TreeDb {
        TreeDb {
            max,
            usage: Mutex::default(),
            loaded: tokio::sync::watch::Sender::new(None),
        }
    }

    /// Waits until the count at start is read: a charge before it would be held to
    /// an empty count. Refuses if it could not be read.
    pub async fn loaded(&self) -> Result<(), Error> {
        let mut loaded = self.loaded.subscribe();
        match loaded.wait_for(Option::is_some).await.map(|l| *l) {
            Ok(Some(true)) => Ok(()),
            _ => Err(Error::Refused(
                "the daemon could not read what each tree of agents holds in grove.db \
                 (its log says why), so agents' requests that store are refused; restart \
                 it (`grove daemon restart`)"
                    .into(),
            )),
        }
    }

    /// [`charge`](Self::charge), once the count at start is read.
    pub async fn charge_loaded(&self, root: &str, agent: &str, bytes: u64) -> Result<(), Error> {
        self.loaded().await?;
        self.charge(root, agent, bytes)
    }

    /// The count could not be read at start: nothing is charged, every charge refused.
    pub fn unreadable(&self) {
        self.loaded.send_replace(Some(false));
    }

    fn usage(&self) -> std::sync::MutexGuard<'_, Usage> {
        self.usage.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sets the count from what is stored: the agents on record and the bytes of
    /// each writer's checkpoints.
    pub fn load(&self, agents: Vec<AgentRow>, writers: WriterBytes) {
        let parents: HashMap<&str, Option<&str>> = agents
            .iter()
            .map(|(id, parent, _)| (id.as_str(), parent.as_deref()))
            .collect();
        let mut usage = Usage::default();
        for (id, parent, bytes) in &agents {
            let root = root_of(&parents, id);
            if parent.is_some() {
                *usage.by_tree.entry(root.clone()).or_default() += bytes;
            }
            usage.root_of.insert(id.clone(), root);
        }
        for (writer, bytes) in &writers {
            if let Some(root) = usage.root_of.get(writer).cloned() {
                let used = usage.by_tree.entry(root).or_default();
                *used = used.saturating_add_signed(*bytes);
            }
        }
        *self.usage() = usage;
        self.loaded.send_replace(Some(true));
    }

    /// Counts `bytes` more for the tree of `root`, written by its agent `agent`; or,
    /// past the share, refuses with nothing counted.
    pub fn charge(&self, root: &str, agent: &str, bytes: u64) -> Result<(), Error> {
        let mut usage = self.usage();
        usage.root_of.insert(agent.to_string(), root.to_string());
        let used = usage.by_tree.entry(root.to_string()).or_default();
        if used.saturating_add(bytes) > self.max {
            let used = *used;
            drop(usage);
            crate::metrics::tree_db_refused();
            return Err(Error::TreeDbFull(format!(
                "the agents of agent {root}'s tree (it and its descendants) hold {used} bytes \
                 of grove.db and this request of agent {agent} would store {bytes} more, past \
                 the {} one tree may (tree_max_db); nothing of it was stored: finish or kill agents \
                 of the tree (`grove kill {root}`), have the user delete sessions they wrote \
                 (`grove session rm`), or raise tree_max_db",
                self.max
            )));
        }
        *used += bytes;
        Ok(())
    }

    /// Gives back a charge whose write was not stored after all.
    pub fn refund(&self, root: &str, bytes: u64) {
        if let Some(used) = self.usage().by_tree.get_mut(root) {
            *used = used.saturating_sub(bytes);
        }
    }

    /// Stored checkpoints changed by `delta` bytes per writer (compaction, removal).
    pub fn stored(&self, delta: &WriterBytes) {
        let mut usage = self.usage();
        for (writer, bytes) in delta {
            let Some(root) = usage.root_of.get(writer).cloned() else {
                continue;
            };
            let used = usage.by_tree.entry(root).or_default();
            *used = used.saturating_add_signed(*bytes);
        }
    }

    /// Bytes the tree of `root` holds.
    #[cfg(test)]
    pub fn used(&self, root: &str) -> u64 {
        self.usage().by_tree.get(root).copied().unwrap_or(0)
    }
}

/// The top of `id`'s tree: up its parents while they are on record (bounded: a cycle
/// or a missing parent stops the walk where it is).
fn root_of(parents: &HashMap<&str, Option<&str>>, id: &str) -> String {
    let mut root = id;
    for _ in 0..parents.len() {
        match parents.get(root).copied().flatten() {
            Some(parent) if parents.contains_key(parent) && parent != root => root = parent,
            _ => break,
        }
    }
    root.to_string()
}

/// `after - before`, per writer.
pub fn difference(before: &WriterBytes, after: &WriterBytes) -> WriterBytes {
    let mut delta = after.clone();
    for (writer, bytes) in before {
        *delta.entry(writer.clone()).or_default() -= bytes;
    }
    delta.retain(|_, bytes| *bytes != 0);
    delta
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_is_refused_past_its_share_and_others_are_not() {
        let budget = TreeDb::new(1000);
        budget.charge("root", "child", 900).expect("within");
        let why = budget.charge("root", "root", 200).expect_err("past");
        assert!(
            matches!(&why, Error::TreeDbFull(m) if m.contains("tree_max_db") && m.contains("grove kill")),
            "{why}"
        );
        assert_eq!(budget.used("root"), 900, "a refused write counts nothing");
        budget.charge("other", "other", 900).expect("another tree");
        budget.refund("root", 900);
        budget.charge("root", "root", 200).expect("given back");
    }

    #[test]
    fn the_count_at_start_follows_parents_to_the_root() {
        let budget = TreeDb::new(u64::MAX);
        let agents = vec![
            ("r".to_string(), None, 50),
            ("c".to_string(), Some("r".to_string()), 10),
            ("g".to_string(), Some("c".to_string()), 5),
        ];
        let writers = WriterBytes::from([("g".to_string(), 100), ("user".to_string(), 7)]);
        budget.load(agents, writers);
        // The root's record is the user's; its descendants' records and writes count.
        assert_eq!(budget.used("r"), 115);
        budget.stored(&WriterBytes::from([("g".to_string(), -100)]));
        assert_eq!(budget.used("r"), 15);
    }
}
