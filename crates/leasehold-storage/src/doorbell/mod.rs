//! Doorbells: a push wake-up from the process that ends a tenure to the processes waiting for
//! that key, so a waiter retries its grant at once instead of at its next poll.
//!
//! A ring carries no state. The row stays the only source of truth: a ring only makes a waiter
//! try its grant now, a spurious ring costs one refused grant, and a missed ring (a dropped
//! doorbell connection, a waiter beyond the connection bound, a holder without a doorbell)
//! costs at most the waiter's poll interval. No doorbell means no change in correctness.
//!
//! One [`Doorbell`] per service, made by [`for_store`]:
//!
//! | backend | ring | wait | connections / resources |
//! |---|---|---|---|
//! | PostgreSQL | `pg_notify` on the pool | one `LISTEN` | 1 dedicated connection |
//! | MySQL/MariaDB | `RELEASE_LOCK` of the key's named lock, held by the holder's service | `GET_LOCK` of it, one waited key per connection | 1 for the holder's named locks + at most [`mysql::MAX_WAITING`] for waits |
//! | SQLite (file), Unix | a datagram to every service of the same file | one Unix datagram socket | 1 socket, in the directory `<database file>-bell` |
//! | SQLite (file), other platforms | none: waiters poll at their retry interval | – | – |
//!
//! The owner calls [`Doorbell::held`] when a tenure begins (MySQL takes the key's named lock;
//! PostgreSQL and SQLite announce the grant to observers)
//! and [`Doorbell::ring`] after its release has committed, or when the tenure ended otherwise;
//! waiters call [`Doorbell::watch`] and keep the receiver while they wait. Every wait is bounded:
//! a waiter waits on the receiver *and* its own poll timer.
//!
//! A bell that is no tenure (a shard group's) is rung with [`Doorbell::broadcast`] and watched
//! with [`Doorbell::watch_broadcasts`]: the same ring everywhere but on MySQL, where only a
//! named lock's holder can wake its waiters (see [`mysql`]).
//!
//! Observers ([`crate::observe`]) subscribe with [`Doorbell::watch_changes`]: on PostgreSQL they
//! are also woken by the announcement of every grant ([`Doorbell::held`] sends it after the
//! commit) and by the optional change trigger's notifications, which lock waiters are not.
//!
//! A dropped doorbell connection or socket is reopened with a bounded back-off
//! ([`BACKOFF_MIN`] doubling to [`BACKOFF_MAX`]); meanwhile waiters poll.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use leasehold_core::LeaseKey;
use tokio::sync::mpsc;

use crate::SeaOrmStore;

// Each database's doorbell lives in its own folder (`backend/<database>/doorbell.rs`) beside
// its statements; these are their public paths. SQLite's rings over Unix datagram sockets, which
// exist on Unix only: elsewhere a SQLite service has no doorbell and its waiters poll, which the
// module's rule (a missed ring costs one poll interval) already allows.
#[cfg(feature = "mysql")]
pub use crate::backend::mysql::doorbell as mysql;
#[cfg(feature = "postgres")]
pub use crate::backend::postgres::doorbell as postgres;
#[cfg(all(feature = "sqlite", unix))]
pub use crate::backend::sqlite::doorbell as sqlite;

/// The first wait before a dropped doorbell connection is reopened.
pub const BACKOFF_MIN: Duration = Duration::from_millis(100);
/// The longest wait before a dropped doorbell connection is reopened.
pub const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// A service's doorbell (see the module docs). Every method returns at once: the IO runs in
/// tasks of the doorbell's own, bounded by the limit it was made with.
pub trait Doorbell: Send + Sync + std::fmt::Debug + 'static {
    /// This service's tenure of `key` began (on MySQL its named lock is taken, so that waiters
    /// elsewhere can block on it). Default: nothing.
    fn held(&self, key: &LeaseKey) {
        let _ = key;
    }

    /// Something observers show changed on this service's live tenure of `key` and has committed
    /// (its value, [`crate::LeaseStore::set_value`]): wake the observers of `key` only, where
    /// grants are pushed to them (PostgreSQL, SQLite files). Default: nothing (observers see it
    /// at their poll).
    fn changed(&self, key: &LeaseKey) {
        let _ = key;
    }

    /// This service's tenure of `key` ended and its release, if any, has committed: wake the
    /// waiters of `key` in every process (best effort).
    fn ring(&self, key: &LeaseKey);

    /// Whether a release that committed has already rung, from its own statement (PostgreSQL
    /// with [`crate::SeaOrmStore::notify_in_statements`]): then the service rings only for
    /// tenures that ended otherwise (a failed or lost release, a lapse). Default: `false`.
    fn rings_with_releases(&self) -> bool {
        false
    }

    /// Like [`Doorbell::ring`], answering once the ring has left (bounded): for a shutdown,
    /// whose runtime ends right after it. Default: `ring`, answered at once.
    fn ring_now(&self, key: &LeaseKey) -> futures::future::BoxFuture<'static, ()> {
        self.ring(key);
        Box::pin(async {})
    }

    /// Wakes the watchers of `key` in every process (best effort), for a key that is no tenure
    /// of this service: a bell many services ring, such as a shard group's (a membership
    /// granted, names given up). Its watchers subscribe with [`Doorbell::watch_broadcasts`].
    /// Default: [`Doorbell::ring`] (on PostgreSQL and SQLite files a ring reaches every watcher,
    /// whoever sends it).
    fn broadcast(&self, key: &LeaseKey) {
        self.ring(key);
    }

    /// Wake-ups when any process broadcasts (or rings) `key`, from now on, as for
    /// [`Doorbell::watch`]. Default: [`Doorbell::watch`].
    fn watch_broadcasts(&self, key: &LeaseKey) -> mpsc::Receiver<()> {
        self.watch(key)
    }

    /// Wake-ups when any process rings `key`, from now on. A full channel means a wake-up is
    /// pending already; dropping the receiver unsubscribes.
    fn watch(&self, key: &LeaseKey) -> mpsc::Receiver<()>;

    /// Wake-ups for an observer of `key` ([`crate::observe`]): every ring of `key`, and on
    /// backends that push them, every other change of its holder, token or status (PostgreSQL:
    /// the holders' grant announcements, and the optional change trigger). Default:
    /// [`Doorbell::watch`].
    fn watch_changes(&self, key: &LeaseKey) -> mpsc::Receiver<()> {
        self.watch(key)
    }

    /// Stops the doorbell's tasks and closes its connections (at shutdown).
    fn stop(&self);

    /// Whether rings reach this service now, or its waiters poll. Default:
    /// [`Wakeups::Pushed`].
    fn wakeups(&self) -> Wakeups {
        Wakeups::Pushed
    }
}

/// Whether a service's waiters are woken by rings or poll ([`Doorbell::wakeups`]). A waiter
/// never depends on a ring: it waits on its own poll timer too, so polling costs latency (up to
/// the poll interval per hand-over), never correctness.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Wakeups {
    /// No waiter has needed the doorbell yet (PostgreSQL listens on the first wait).
    Idle,
    /// Rings reach this service (on PostgreSQL: its `LISTEN` heard its own probe ring).
    Pushed,
    /// Rings do not reach this service; waiters poll.
    Polling {
        /// Why, and what would bring the rings back.
        reason: String,
    },
}

impl std::fmt::Display for Wakeups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Idle => f.write_str("idle"),
            Self::Pushed => f.write_str("pushed"),
            Self::Polling { reason } => write!(f, "polling: {reason}"),
        }
    }
}

/// The doorbell of a service on `store`, by its backend (with that backend's feature): `None`
/// for in-memory SQLite (no other process can wait) and on other platforms. Its statements are
/// bounded by `limit`.
#[must_use]
pub fn for_store(store: &SeaOrmStore, limit: Duration) -> Option<Arc<dyn Doorbell>> {
    store.sql.driver().doorbell(store, limit)
}

/// What names `key` of `table` on the wire: the table's and namespace's lengths, then the three
/// strings, so no name can be mistaken for another (the `NOTIFY` payload, the datagram, and the
/// input of the MySQL lock name).
#[must_use]
pub fn payload(table: &str, key: &LeaseKey) -> String {
    let (ns, name) = (key.namespace.as_str(), key.name.as_str());
    format!("{}:{}:{table}{ns}{name}", table.len(), ns.len())
}

/// The key a [`payload`] names, if it is of `table`.
#[must_use]
pub fn key_of(table: &str, payload: &str) -> Option<LeaseKey> {
    let (tlen, rest) = payload.split_once(':')?;
    let (nslen, rest) = rest.split_once(':')?;
    let (tlen, nslen): (usize, usize) = (tlen.parse().ok()?, nslen.parse().ok()?);
    let (t, rest) = (rest.get(..tlen)?, rest.get(tlen..)?);
    let (ns, name) = (rest.get(..nslen)?, rest.get(nslen..)?);
    (t == table).then(|| LeaseKey::from_stored(ns, name).ok())?
}

/// The local subscribers of each payload (shared by the backends that receive rings for every
/// key on one channel).
#[derive(Debug, Default, Clone)]
#[allow(dead_code)] // which parts are used depends on the backends compiled in
pub(crate) struct Subscribers(Arc<Mutex<HashMap<String, Vec<mpsc::Sender<()>>>>>);

#[allow(dead_code)] // which methods are used depends on the backends compiled in
impl Subscribers {
    /// A new subscription to `payload`.
    pub(crate) fn add(&self, payload: String) -> mpsc::Receiver<()> {
        let (tx, rx) = mpsc::channel(1);
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let list = map.entry(payload).or_default();
        list.retain(|tx| !tx.is_closed());
        list.push(tx);
        rx
    }

    /// Wakes the subscribers of `payload`; forgets the dropped ones.
    pub(crate) fn wake(&self, payload: &str) {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(list) = map.get_mut(payload) {
            list.retain(|tx| !tx.is_closed());
            for tx in list.iter() {
                let _ = tx.try_send(());
            }
            if list.is_empty() {
                map.remove(payload);
            }
        }
    }

    /// Wakes every subscriber (after a reconnect: rings may have been missed meanwhile).
    pub(crate) fn wake_all(&self) {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        map.retain(|_, list| {
            list.retain(|tx| !tx.is_closed());
            for tx in list.iter() {
                let _ = tx.try_send(());
            }
            !list.is_empty()
        });
    }

    /// Whether anyone subscribes to `payload`.
    pub(crate) fn has(&self, payload: &str) -> bool {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(list) = map.get_mut(payload) else {
            return false;
        };
        list.retain(|tx| !tx.is_closed());
        if list.is_empty() {
            map.remove(payload);
            return false;
        }
        true
    }

    /// Whether anyone listens at all.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        map.retain(|_, list| {
            list.retain(|tx| !tx.is_closed());
            !list.is_empty()
        });
        map.is_empty()
    }
}

/// Runs `fut` as a task of the current runtime; without one (an actor stopped while its runtime
/// is being dropped) it is dropped: a missed ring only costs a poll.
#[cfg_attr(
    not(any(feature = "sqlite", feature = "postgres", feature = "mysql")),
    allow(dead_code)
)]
pub(crate) fn spawn<F>(fut: F)
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        rt.spawn(fut);
    }
}

/// Runs `f` on the current runtime's blocking threads (as [`spawn`]: dropped without a
/// runtime); answers when it has run.
#[allow(dead_code)] // unused without SQLite
pub(crate) fn spawn_blocking(
    f: impl FnOnce() + Send + 'static,
) -> futures::future::BoxFuture<'static, ()> {
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => {
            let done = rt.spawn_blocking(f);
            Box::pin(async move {
                let _ = done.await;
            })
        }
        Err(_) => Box::pin(async {}),
    }
}

/// The next back-off after `d` (doubling, at most [`BACKOFF_MAX`]).
#[allow(dead_code)] // unused without a backend
pub(crate) fn next_backoff(d: Duration) -> Duration {
    (d * 2).clamp(BACKOFF_MIN, BACKOFF_MAX)
}

/// Rings (or announcements) queued while one sender is out: the first push onto an empty
/// outbox starts the sender, which takes batches until none is left, so the rings that arrive
/// meanwhile go out together and a lone ring waits for nothing.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
#[derive(Debug, Default)]
pub(crate) struct Outbox(Mutex<(Vec<String>, bool)>);

#[cfg(any(feature = "postgres", feature = "sqlite"))]
impl Outbox {
    /// Queues `item`; `true` when the caller must start the sender (none is out).
    pub(crate) fn push(&self, item: String) -> bool {
        let mut queued = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        queued.0.push(item);
        !std::mem::replace(&mut queued.1, true)
    }

    /// The caller told to start the sender could not (no runtime): what is queued is a missed
    /// ring, and the next push starts a sender again.
    pub(crate) fn abandon(&self) {
        let mut queued = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        queued.0.clear();
        queued.1 = false;
    }

    /// The sender's next batch, at most `max` items; `None` ends the sender (nothing is left,
    /// and the next push starts another).
    pub(crate) fn next_batch(&self, max: usize) -> Option<Vec<String>> {
        let mut queued = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if queued.0.is_empty() {
            queued.1 = false;
            return None;
        }
        let n = queued.0.len().min(max);
        Some(queued.0.drain(..n).collect())
    }
}

#[cfg(all(test, any(feature = "postgres", feature = "sqlite")))]
mod tests {
    use super::*;

    #[test]
    fn an_outbox_starts_one_sender_and_batches_what_arrives_meanwhile() {
        let outbox = Outbox::default();
        assert!(
            outbox.push("a".to_owned()),
            "the first push starts the sender"
        );
        assert!(!outbox.push("b".to_owned()), "one sender at a time");
        assert!(!outbox.push("c".to_owned()));
        assert_eq!(
            outbox.next_batch(2),
            Some(vec!["a".to_owned(), "b".to_owned()])
        );
        assert!(!outbox.push("d".to_owned()), "still sending");
        assert_eq!(
            outbox.next_batch(10),
            Some(vec!["c".to_owned(), "d".to_owned()])
        );
        assert_eq!(outbox.next_batch(10), None, "empty: the sender ends");
        assert!(
            outbox.push("e".to_owned()),
            "and the next push starts another"
        );
        outbox.abandon();
        assert!(
            outbox.push("f".to_owned()),
            "an abandoned start is started again"
        );
        assert_eq!(
            outbox.next_batch(10),
            Some(vec!["f".to_owned()]),
            "abandoned rings dropped"
        );
    }

    #[test]
    fn a_payload_names_exactly_its_key() {
        for (ns, name) in [("", "job"), ("a:b", "c:d"), ("ns", "émoji🦀")] {
            let key = LeaseKey::parse(ns, name).expect("key");
            let p = payload("lease_info", &key);
            assert_eq!(key_of("lease_info", &p), Some(key.clone()));
            assert_eq!(key_of("other_lease_info", &p), None);
        }
        assert_eq!(key_of("t", "garbage"), None);
    }

    #[tokio::test]
    async fn subscribers_are_woken_once_per_pending_ring_and_forgotten_when_dropped() {
        let subs = Subscribers::default();
        let mut a = subs.add("k".to_owned());
        let b = subs.add("k".to_owned());
        subs.wake("k");
        subs.wake("k");
        assert_eq!(a.try_recv(), Ok(()));
        assert!(a.try_recv().is_err(), "one pending wake-up, not two");
        drop(b);
        drop(a);
        assert!(subs.is_empty());
        assert_eq!(next_backoff(BACKOFF_MAX), BACKOFF_MAX);
        assert_eq!(next_backoff(Duration::ZERO), BACKOFF_MIN);
    }
}
