//! Saving agent records: the in-memory table is the truth, written through to the
//! database; a save that fails is saved again until it lands, never dropped.

use super::{Core, Msg};
use crate::error::Error;

impl Core {
    /// Saves one agent's record; see [`Core::persist_all`].
    pub(super) async fn persist(&mut self, id: &str) -> Result<(), Error> {
        self.persist_all(&[id]).await
    }

    /// Saves the records of `ids` in one transaction. A save that fails is never
    /// dropped: the records are saved again until it lands (their latest state then),
    /// and the caller whose answer would say the change was made says it is not saved
    /// yet instead.
    pub(super) async fn persist_all(&mut self, ids: &[&str]) -> Result<(), Error> {
        let rows: Vec<_> = ids
            .iter()
            .filter_map(|id| self.agents.get(id).cloned())
            .collect();
        if rows.is_empty() {
            return Ok(());
        }
        let saved = self
            .db
            .call(move |conn| crate::db::agents::upsert_all(conn, &rows))
            .await;
        match saved {
            Ok(()) => {
                for id in ids {
                    self.unsaved.remove(*id);
                }
                Ok(())
            }
            Err(e) => {
                tracing::error!(agents = ?ids, error = %e, "cannot save agent records; saving them again later");
                self.save_later(ids);
                Err(Error::Unsaved {
                    id: ids.join(", "),
                    source: e,
                })
            }
        }
    }

    /// [`Core::persist`] where nobody is told of the change: a failed save is logged and
    /// retried, and that is all there is to do.
    pub(super) async fn save(&mut self, id: &str) {
        self.save_all(&[id]).await;
    }

    pub(super) async fn save_all(&mut self, ids: &[&str]) {
        let _retried = self.persist_all(ids).await;
    }

    fn save_later(&mut self, ids: &[&str]) {
        let first = self.unsaved.is_empty();
        self.unsaved.extend(ids.iter().map(|id| id.to_string()));
        if first {
            let (tx, pause) = (self.tx.clone(), self.unsaved_pause);
            tokio::spawn(async move {
                tokio::time::sleep(pause).await;
                let _ = tx.send(Msg::SaveUnsaved).await;
            });
        }
    }

    pub(super) async fn save_unsaved(&mut self) {
        let unsaved: Vec<String> = self.unsaved.drain().collect();
        let ids: Vec<&str> = unsaved.iter().map(String::as_str).collect();
        // Set before the save, which schedules the next try with it if it fails.
        self.unsaved_pause = (self.unsaved_pause * 2).min(SAVE_RETRY_LONGEST);
        if self.persist_all(&ids).await.is_ok() {
            self.unsaved_pause = SAVE_RETRY_FIRST;
        }
    }
}

/// The first pause before failed saves are tried again, and the longest.
pub(super) const SAVE_RETRY_FIRST: std::time::Duration = std::time::Duration::from_secs(1);
const SAVE_RETRY_LONGEST: std::time::Duration = std::time::Duration::from_secs(60);
