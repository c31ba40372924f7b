//! The connections served at once, capped by `max_connections` (per uid: only the
//! daemon's own is served). An eighth of them are kept for connections from outside
//! every agent, so that agents holding all they may still leave the user's own
//! commands room.

use std::sync::Arc;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

pub struct ConnectionSlots {
    anyone: Arc<Semaphore>,
    users_only: Arc<Semaphore>,
    max: usize,
}

/// One connection's place; given back when dropped.
pub struct Slot {
    _permit: OwnedSemaphorePermit,
    /// From the user's reserve: an agent found holding it is turned away.
    pub reserved: bool,
}

impl ConnectionSlots {
    pub fn new(max: usize) -> ConnectionSlots {
        let reserve = max / 8;
        ConnectionSlots {
            anyone: Arc::new(Semaphore::new(max - reserve)),
            users_only: Arc::new(Semaphore::new(reserve)),
            max,
        }
    }

    pub fn max(&self) -> usize {
        self.max
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.max - self.anyone.available_permits() - self.users_only.available_permits()
    }

    /// A place for one more connection: a shared one while there are, else one of the
    /// reserve (whose connection is checked to be the user's before it is served).
    pub fn take(&self) -> Option<Slot> {
        if let Ok(permit) = self.anyone.clone().try_acquire_owned() {
            return Some(Slot {
                _permit: permit,
                reserved: false,
            });
        }
        let permit = self.users_only.clone().try_acquire_owned().ok()?;
        Some(Slot {
            _permit: permit,
            reserved: true,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::ConnectionSlots;

    #[test]
    fn the_last_eighth_is_the_users_reserve_and_slots_come_back() {
        let slots = ConnectionSlots::new(16);
        let shared: Vec<_> = (0..14).map(|_| slots.take().expect("shared")).collect();
        assert!(shared.iter().all(|s| !s.reserved));
        let reserve: Vec<_> = (0..2).map(|_| slots.take().expect("reserve")).collect();
        assert!(reserve.iter().all(|s| s.reserved));
        assert!(slots.take().is_none());
        assert_eq!(slots.open(), 16);
        drop(shared);
        assert!(!slots.take().expect("shared again").reserved);
    }

    #[test]
    fn a_cap_too_small_for_a_reserve_shares_every_slot() {
        let slots = ConnectionSlots::new(3);
        assert!((0..3).all(|_| slots.take().is_some_and(|s| !s.reserved)));
    }
}
