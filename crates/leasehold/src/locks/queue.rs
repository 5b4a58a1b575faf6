//! This process's fair queue per lock: tasks of one service waiting for one lock line up on a
//! local mutex, so only the one at its head talks to the database. The permit of a granted lock
//! stays with the lock's actor until its tenure has ended and settled (`KeepUntilStopped`), so
//! the next local waiter starts right after a release, never while a live guard holds it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use dashmap::DashMap;
use leasehold_core::LeaseKey;

use super::DEFAULT_LOCK_RETRY_INTERVAL;
use super::reentrant::Owners;

/// One lock's local queue: its permit is an owned guard of the mutex.
pub(crate) type Queue = Arc<tokio::sync::Mutex<()>>;

/// The local queues of one service (the engine's book has the locks themselves), and the
/// first wait between attempts of a waiting acquire.
#[derive(Debug)]
pub(crate) struct LockQueues {
    queues: DashMap<LeaseKey, Weak<tokio::sync::Mutex<()>>>,
    retry_millis: AtomicU64,
    /// Which owner holds which lock, for re-entry (`reentrant.rs`).
    owners: Owners,
}

impl Default for LockQueues {
    fn default() -> Self {
        Self {
            queues: DashMap::new(),
            retry_millis: AtomicU64::new(millis(DEFAULT_LOCK_RETRY_INTERVAL)),
            owners: Owners::default(),
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

impl LockQueues {
    /// The queue of `key`, made when nobody waits on it (queues nobody uses are dropped once
    /// more than 1,024 exist).
    pub(crate) fn queue(&self, key: &LeaseKey) -> Queue {
        if self.queues.len() > 1024 {
            self.queues.retain(|_, q| q.strong_count() > 0);
        }
        let mut entry = self.queues.entry(key.clone()).or_default();
        if let Some(q) = entry.upgrade() {
            return q;
        }
        let q = Arc::new(tokio::sync::Mutex::new(()));
        *entry = Arc::downgrade(&q);
        q
    }

    /// The first wait between attempts.
    pub(crate) fn retry(&self) -> Duration {
        Duration::from_millis(self.retry_millis.load(Ordering::Relaxed))
    }

    /// Which owner holds which lock of this service.
    pub(crate) fn owners(&self) -> &Owners {
        &self.owners
    }

    pub(crate) fn set_retry(&self, interval: Duration) {
        self.retry_millis.store(millis(interval), Ordering::Relaxed);
    }
}
