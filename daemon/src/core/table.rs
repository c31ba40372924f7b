//! The agent table. Besides each row it keeps the record as `agent.list` sends it,
//! serialized once and shared: listing 1,000 agents then copies text out of the core
//! instead of cloning every record and serializing it again on every call (the clone
//! and the serialization were most of what a long `grove --json list` took).
//!
//! The kept text can never go stale: the only way to change a row is
//! [`AgentTable::get_mut`], which drops the text; the next listing writes it again.
//!
//! It also keeps the rows in listing order (oldest first), all of them and the live
//! ones apart, so a page costs what it holds: a page of 1,000 out of 100,000 records is
//! a walk of 1,000 keys from where the last page ended, not a sort of all of them, and
//! the live-only list never looks at a finished record.

use crate::db::agents::AgentRow;
use grove_proto::types::AgentRecord;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::ops::Bound;
use std::sync::Arc;

/// A record ready to list: its id and its JSON.
#[derive(Debug)]
pub struct Listed {
    pub id: String,
    pub json: Box<str>,
}

impl Listed {
    pub fn of(record: &AgentRecord) -> Listed {
        Listed {
            id: record.id.clone(),
            // A record is plain data: strings, numbers, lists and maps with string keys.
            json: serde_json::to_string(record)
                .expect("an agent record always serializes")
                .into_boxed_str(),
        }
    }
}

struct Entry {
    row: AgentRow,
    /// Where the row sits in [`AgentTable::order`]: its creation time as it was when
    /// it was filed there.
    filed_at_ms: u64,
}

/// A row's place in listing order.
type Key = (u64, String);

/// Which records one `agent.list` answer holds.
#[derive(Debug, Clone)]
pub struct ListPage {
    /// Finished records too, not only live ones.
    pub all: bool,
    /// Only the agents this one spawned, directly or not.
    pub within: Option<String>,
    /// The page starts after this agent.
    pub after: Option<String>,
    pub limit: usize,
}

/// `agent.list`'s `after` names no agent the caller may see.
#[derive(Debug)]
pub struct UnknownStart;

#[derive(Default)]
pub struct AgentTable {
    entries: HashMap<String, Entry>,
    /// Every row in listing order, with its listed text once written. A page walks
    /// this alone: looking each row up by id as well cost a third of a long list.
    order: BTreeMap<Key, Option<Arc<Listed>>>,
    live: BTreeSet<Key>,
    /// Rows handed out by `get_mut` since the last listing: their place among the live
    /// ones may have changed.
    changed: HashSet<String>,
    /// Agent ids by token: every call from inside an agent names its token, and a scan
    /// of 100,000 rows for it cost each call a fraction of a millisecond.
    by_token: HashMap<String, String>,
}

impl AgentTable {
    pub fn with_capacity(rows: usize) -> AgentTable {
        AgentTable {
            entries: HashMap::with_capacity(rows),
            ..AgentTable::default()
        }
    }

    pub fn get(&self, id: &str) -> Option<&AgentRow> {
        self.entries.get(id).map(|entry| &entry.row)
    }

    /// The row to change. Its listed text goes now, whatever the caller changes.
    pub fn get_mut(&mut self, id: &str) -> Option<&mut AgentRow> {
        let entry = self.entries.get_mut(id)?;
        if let Some(listed) = self.order.get_mut(&(entry.filed_at_ms, id.to_string())) {
            *listed = None;
        }
        self.changed.insert(id.to_string());
        Some(&mut entry.row)
    }

    /// The row whose agent holds `token` (a token is never changed through `get_mut`).
    pub fn by_token(&self, token: &str) -> Option<&AgentRow> {
        self.get(self.by_token.get(token)?)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn contains_key(&self, id: &str) -> bool {
        self.entries.contains_key(id)
    }

    pub fn insert(&mut self, row: AgentRow) {
        self.insert_listed(row, None);
    }

    /// [`AgentTable::insert`] with the row's listed text written already (by whoever
    /// read the row, off the core's turn).
    pub fn insert_listed(&mut self, row: AgentRow, listed: Option<Listed>) {
        let id = row.record.id.clone();
        let filed_at_ms = row.record.created_at_ms;
        self.by_token.insert(row.token.clone(), id.clone());
        if let Some(old) = self.entries.insert(id.clone(), Entry { row, filed_at_ms }) {
            self.unfile(&id, old.filed_at_ms);
            if old.row.token != self.entries[&id].row.token {
                self.by_token.remove(&old.row.token);
            }
        }
        self.file(&id, listed.map(Arc::new));
    }

    pub fn remove(&mut self, id: &str) -> Option<AgentRow> {
        let entry = self.entries.remove(id)?;
        self.by_token.remove(&entry.row.token);
        self.unfile(id, entry.filed_at_ms);
        self.changed.remove(id);
        Some(entry.row)
    }

    /// Puts the row of `id` in listing order, and among the live ones if it is live.
    fn file(&mut self, id: &str, listed: Option<Arc<Listed>>) {
        let Some(entry) = self.entries.get_mut(id) else {
            return;
        };
        entry.filed_at_ms = entry.row.record.created_at_ms;
        let key = (entry.filed_at_ms, id.to_string());
        if !entry.row.record.status.is_final() {
            self.live.insert(key.clone());
        }
        self.order.insert(key, listed);
    }

    /// Takes the row of `id` out of listing order; its listed text, if any, is given
    /// back.
    fn unfile(&mut self, id: &str, filed_at_ms: u64) -> Option<Arc<Listed>> {
        let key = (filed_at_ms, id.to_string());
        self.live.remove(&key);
        self.order.remove(&key).flatten()
    }

    /// Files again the rows changed since the last listing.
    fn refile_changed(&mut self) {
        for id in std::mem::take(&mut self.changed) {
            if let Some(filed_at_ms) = self.entries.get(&id).map(|e| e.filed_at_ms) {
                let listed = self.unfile(&id, filed_at_ms);
                self.file(&id, listed);
            }
        }
    }

    /// Up to `limit` records ready to list, oldest first, that `visible` lets through:
    /// every one or only the live ones, starting after the agent `after` (which must be
    /// a visible agent, live or not, so that a page boundary holds while agents end).
    pub fn page(
        &mut self,
        all: bool,
        after: Option<&str>,
        limit: usize,
        visible: impl Fn(&str) -> bool,
    ) -> Result<Vec<Arc<Listed>>, UnknownStart> {
        self.refile_changed();
        let start = match after {
            Some(id) => {
                let entry = self.entries.get(id).filter(|_| visible(id));
                let entry = entry.ok_or(UnknownStart)?;
                Bound::Excluded((entry.filed_at_ms, id.to_string()))
            }
            None => Bound::Unbounded,
        };
        let range = (start, Bound::Unbounded);
        let Self {
            entries,
            order,
            live,
            ..
        } = self;
        let mut page = Vec::with_capacity(limit.min(entries.len()));
        let mut take = |key: &Key, listed: &mut Option<Arc<Listed>>| {
            let listed = listed
                .get_or_insert_with(|| Arc::new(Listed::of(&entries[key.1.as_str()].row.record)));
            page.push(Arc::clone(listed));
        };
        if all {
            let rows = order.range_mut(range).filter(|(key, _)| visible(&key.1));
            rows.take(limit).for_each(|(key, listed)| take(key, listed));
        } else {
            let keys = live.range(range).filter(|key| visible(&key.1));
            for key in keys.take(limit) {
                if let Some(listed) = order.get_mut(key) {
                    take(key, listed);
                }
            }
        }
        Ok(page)
    }

    pub fn keys(&self) -> impl Iterator<Item = &String> {
        self.entries.keys()
    }

    pub fn values(&self) -> impl Iterator<Item = &AgentRow> {
        self.entries.values().map(|entry| &entry.row)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use grove_proto::types::AgentStatus;

    fn row(id: &str) -> AgentRow {
        let record: AgentRecord = serde_json::from_value(serde_json::json!({
            "id": id, "name": null, "session": "s", "repo": "/r", "base_ref": "main",
            "base_commit": "c", "branch": "grove/x", "worktree": "/w", "log_path": "/l",
            "argv": [], "env_names": [], "limits": {}, "timeout_ms": null, "keep": false,
            "status": "running", "outcome": null, "pid": 7, "created_at_ms": 1,
            "started_at_ms": null, "ended_at_ms": null, "collected_at_ms": null,
            "exit_code": null, "exit_signal": null, "head_commit": null,
            "files_changed": null, "insertions": null, "deletions": null,
            "branch_exists": true, "salvaged": false, "error": null
        }))
        .expect("a record");
        AgentRow {
            record,
            token: "t".into(),
            pid_start: None,
        }
    }

    fn table_of<const N: usize>(ids: [&str; N]) -> AgentTable {
        let mut table = AgentTable::with_capacity(N);
        for id in ids {
            table.insert(row(id));
        }
        table
    }

    fn everything(table: &mut AgentTable, all: bool) -> Vec<Arc<Listed>> {
        table.page(all, None, usize::MAX, |_| true).expect("a page")
    }

    fn listed_json(table: &mut AgentTable, id: &str) -> String {
        let page = everything(table, true);
        let listed = page.iter().find(|l| l.id == id).expect("listed");
        listed.json.to_string()
    }

    fn ids(page: &[Arc<Listed>]) -> Vec<&str> {
        page.iter().map(|l| l.id.as_str()).collect()
    }

    #[test]
    fn the_listed_text_follows_every_change_made_through_a_row() {
        let mut table = table_of(["a", "b"]);
        let before = listed_json(&mut table, "a");
        assert_eq!(
            before,
            serde_json::to_string(&table.get("a").expect("a").record).expect("json")
        );
        table.get_mut("a").expect("a").record.status = AgentStatus::Collected;
        let after = listed_json(&mut table, "a");
        assert_ne!(before, after);
        let record: AgentRecord = serde_json::from_str(&after).expect("record");
        assert_eq!(record.status, AgentStatus::Collected);
        assert_eq!(ids(&everything(&mut table, false)), ["b"]);
    }

    #[test]
    fn reading_a_row_keeps_its_text() {
        let mut table = table_of(["a"]);
        let first = Arc::clone(&everything(&mut table, true)[0]);
        let pid = table.get("a").expect("a").record.pid;
        assert_eq!(pid, Some(7));
        let second = Arc::clone(&everything(&mut table, true)[0]);
        assert!(Arc::ptr_eq(&first, &second), "a read served the same text");
    }

    #[test]
    fn a_token_finds_its_row_until_the_row_goes() {
        let mut table = table_of(["a", "b"]);
        let mut other = row("c");
        other.token = "secret-c".into();
        table.insert(other);
        assert_eq!(
            table.by_token("secret-c").map(|r| r.record.id.as_str()),
            Some("c")
        );
        assert_eq!(table.by_token("nope").map(|r| r.record.id.as_str()), None);
        table.remove("c");
        assert!(table.by_token("secret-c").is_none());
    }

    #[test]
    fn pages_come_oldest_first_and_go_on_after_the_last_one() {
        let mut table = AgentTable::default();
        for (id, created) in [("c", 3), ("a", 1), ("b2", 2), ("b1", 2)] {
            let mut row = row(id);
            row.record.created_at_ms = created;
            table.insert(row);
        }
        let first = table.page(true, None, 2, |_| true).expect("page");
        assert_eq!(ids(&first), ["a", "b1"]);
        let second = table.page(true, Some("b1"), 2, |_| true).expect("page");
        assert_eq!(ids(&second), ["b2", "c"]);
        let hidden = table.page(true, None, 10, |id| id != "b2").expect("page");
        assert_eq!(ids(&hidden), ["a", "b1", "c"]);
        assert!(
            table.page(true, Some("b2"), 10, |id| id != "b2").is_err(),
            "a start the caller may not see is refused"
        );
        assert!(table.page(true, Some("zz"), 10, |_| true).is_err());
    }

    #[test]
    fn the_live_list_follows_status_changes_and_removals() {
        let mut table = table_of(["a", "b", "c"]);
        assert_eq!(ids(&everything(&mut table, false)), ["a", "b", "c"]);
        table.get_mut("b").expect("b").record.status = AgentStatus::Collected;
        assert_eq!(ids(&everything(&mut table, false)), ["a", "c"]);
        assert_eq!(ids(&everything(&mut table, true)), ["a", "b", "c"]);
        // A page boundary at an agent that has since ended still holds.
        let rest = table.page(false, Some("b"), 10, |_| true).expect("page");
        assert_eq!(ids(&rest), ["c"]);
        table.remove("a");
        assert_eq!(ids(&everything(&mut table, true)), ["b", "c"]);
        table.get_mut("b").expect("b").record.status = AgentStatus::Running;
        assert_eq!(ids(&everything(&mut table, false)), ["b", "c"]);
    }
}
