//! A table of values by key (an agent's id, a request's idempotency key), owned by
//! whoever holds it: the one way the daemon keeps a lock or a cache per key, instead of
//! a process-global table per use.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Values by key, each made (`Default`) on first use and shared by whoever asks for it
/// while it is in use.
pub struct Keyed<V>(Mutex<HashMap<String, Arc<V>>>);

impl<V> Default for Keyed<V> {
    fn default() -> Self {
        Keyed(Mutex::new(HashMap::new()))
    }
}

impl<V: Default> Keyed<V> {
    /// The value of `key`, kept until [`Keyed::forget`]: for what must outlive its
    /// users (a cache).
    pub fn get(&self, key: &str) -> Arc<V> {
        self.table().entry(key.to_string()).or_default().clone()
    }

    /// The value of `key`; values nobody holds any more go first: for locks, which
    /// are worth keeping only while someone holds or waits on them.
    pub fn get_pruning(&self, key: &str) -> Arc<V> {
        let mut table = self.table();
        table.retain(|_, value| Arc::strong_count(value) > 1);
        table.entry(key.to_string()).or_default().clone()
    }

    pub fn forget(&self, key: &str) {
        self.table().remove(key);
    }

    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<V>>> {
        // A value poisoned by a panic is still the value: its users decide.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::Keyed;
    use std::sync::Arc;

    #[test]
    fn a_value_is_shared_while_in_use_and_pruned_once_nobody_holds_it() {
        let table: Keyed<std::sync::Mutex<u32>> = Keyed::default();
        let held = table.get_pruning("a");
        *held.lock().expect("lock") = 7;
        assert!(Arc::ptr_eq(&held, &table.get_pruning("a")));
        drop(held);
        assert_eq!(*table.get_pruning("a").lock().expect("lock"), 0);
    }

    #[test]
    fn a_kept_value_outlives_its_users_until_forgotten() {
        let table: Keyed<std::sync::Mutex<u32>> = Keyed::default();
        *table.get("a").lock().expect("lock") = 7;
        assert_eq!(*table.get("a").lock().expect("lock"), 7);
        table.forget("a");
        assert_eq!(*table.get("a").lock().expect("lock"), 0);
    }
}
