//! The agent table. Besides each row it keeps the record as `agent.list` sends it,
//! serialized once and shared: listing 1,000 agents then copies text out of the core
//! instead of cloning every record and serializing it again on every call (the clone
//! and the serialization were most of what a long `grove --json list` took).
//!
//! The kept text can never go stale: the only way to change a row is
//! [`AgentTable::get_mut`], which drops the text; the next listing writes it again.

use crate::db::agents::AgentRow;
use grove_proto::types::AgentRecord;
use std::collections::HashMap;
use std::sync::Arc;

/// A record ready to list: what ordering and filtering need, and its JSON.
#[derive(Debug)]
pub struct Listed {
    pub id: String,
    pub created_at_ms: u64,
    pub is_final: bool,
    pub json: Box<str>,
}

impl Listed {
    pub fn of(record: &AgentRecord) -> Listed {
        Listed {
            id: record.id.clone(),
            created_at_ms: record.created_at_ms,
            is_final: record.status.is_final(),
            // A record is plain data: strings, numbers, lists and maps with string keys.
            json: serde_json::to_string(record)
                .expect("an agent record always serializes")
                .into_boxed_str(),
        }
    }
}

struct Entry {
    row: AgentRow,
    listed: Option<Arc<Listed>>,
}

#[derive(Default)]
pub struct AgentTable {
    entries: HashMap<String, Entry>,
}

impl AgentTable {
    pub fn with_capacity(rows: usize) -> AgentTable {
        AgentTable {
            entries: HashMap::with_capacity(rows),
        }
    }

    pub fn get(&self, id: &str) -> Option<&AgentRow> {
        self.entries.get(id).map(|entry| &entry.row)
    }

    /// The row to change. Its listed text goes now, whatever the caller changes.
    pub fn get_mut(&mut self, id: &str) -> Option<&mut AgentRow> {
        let entry = self.entries.get_mut(id)?;
        entry.listed = None;
        Some(&mut entry.row)
    }

    pub fn contains_key(&self, id: &str) -> bool {
        self.entries.contains_key(id)
    }

    pub fn insert(&mut self, row: AgentRow) {
        let id = row.record.id.clone();
        self.entries.insert(id, Entry { row, listed: None });
    }

    pub fn remove(&mut self, id: &str) -> Option<AgentRow> {
        self.entries.remove(id).map(|entry| entry.row)
    }

    pub fn keys(&self) -> impl Iterator<Item = &String> {
        self.entries.keys()
    }

    pub fn values(&self) -> impl Iterator<Item = &AgentRow> {
        self.entries.values().map(|entry| &entry.row)
    }

    /// Every record ready to list, in no particular order. Serializes only the rows
    /// that changed since the last call.
    pub fn listed(&mut self) -> impl Iterator<Item = &Arc<Listed>> {
        self.entries.values_mut().map(|entry| {
            let Entry { row, listed } = entry;
            &*listed.get_or_insert_with(|| Arc::new(Listed::of(&row.record)))
        })
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

    fn listed_json(table: &mut AgentTable, id: &str) -> String {
        let listed = table.listed().find(|l| l.id == id).expect("listed");
        listed.json.to_string()
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
        assert!(table.listed().any(|l| l.id == "a" && l.is_final));
    }

    #[test]
    fn reading_a_row_keeps_its_text() {
        let mut table = table_of(["a"]);
        let first = Arc::clone(table.listed().next().expect("one"));
        let pid = table.get("a").expect("a").record.pid;
        assert_eq!(pid, Some(7));
        let second = Arc::clone(table.listed().next().expect("one"));
        assert!(Arc::ptr_eq(&first, &second), "a read served the same text");
    }
}
