//! Observers: a process that does not compete watches one name and sees its current state, then
//! every change (etcd's `Election.Observe`, without etcd #18163's missed changes and stalls).
//!
//! An observer is a driver (one task, spawned by whoever made the observer, on the runtime its
//! store belongs to) and a [`LeaseObserver`] handle reading what the driver publishes. The
//! driver reads the row with [`LeaseStore::get`] and publishes it when it differs from the last
//! state published (the whole [`LeaseRecord`] except `db_now`: holder, token, end, `held`, and
//! any column the record carries). Between reads it waits, every wait bounded, for the first of:
//!
//! - a ring of the service's [`Doorbell`] for the key ([`Doorbell::watch_changes`]): on
//!   PostgreSQL grants and releases by a holder with a doorbell (a `LeaseService`), and with
//!   the optional change trigger (`crate::ddl::ensure_change_notify`) every writer's;
//!   on SQLite files the same holders' grants and releases; on MySQL/MariaDB their releases;
//! - the end of the grant it last read (so a lapse without release is seen when it happens);
//! - the poll interval ([`ObserveOptions::poll`], default [`DEFAULT_POLL`]): every other
//!   change — a renewal (the end moving), a grant or release nothing pushes, a ring that was
//!   lost — is seen at most one poll interval plus one read after it committed.
//!
//! An observer sees states, not a log: changes committed between two reads collapse into the
//! later one (the fencing token, one more per tenure, tells how many tenures were missed).
//!
//! The handle keeps only the **latest** state (a `tokio::sync::watch` channel): a consumer that
//! lags sees the newest state, never a queue of old ones, and the driver never waits for it.
//! A read that fails or passes its bound ([`ObserveOptions::read_timeout`]) publishes
//! [`Observation::Unreachable`]; the driver then reads again with a back-off (100 ms doubling to
//! at most the poll interval) and, once a read succeeds, publishes the state it read **even if
//! it did not change**: after a gap the consumer is always told where things stand. The driver
//! ends when every handle is dropped.
//!
//! Resources: an observer opens no connection of its own. Its reads use the store's pool (one
//! statement per poll interval and per ring), its doorbell subscription a slot in the
//! service's one doorbell (PostgreSQL: the one `LISTEN` connection; MySQL/MariaDB: a waiting
//! task on at most [`crate::doorbell::mysql::MAX_WAITING`] connections for at most
//! [`crate::doorbell::mysql::MAX_WATCHED`] keys, the others poll; SQLite: the one socket).

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use leasehold_core::{LeaseKey, LeaseRecord};
use tokio::sync::{mpsc, watch};

use crate::doorbell::{BACKOFF_MIN, Doorbell};
use crate::{LeaseStore, StoreError};

/// The default poll interval of an observer: the bound on seeing a change nothing pushes.
pub const DEFAULT_POLL: Duration = Duration::from_secs(1);
/// The default bound of one read of an observer.
pub const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Read again this long after the end of the grant last read (so the lapse is past on the
/// database's clock too, give or take the clocks' offset; a read too early only costs a read).
const LAPSE_SLACK: Duration = Duration::from_millis(5);

/// What an observer saw.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Observation {
    /// The row as read: `Some` with `held` telling whether a tenure is live (holder, token,
    /// database-time end), `None` when there is no row (never granted, or purged).
    State(Option<LeaseRecord>),
    /// The last read failed (the store's error, as text). The observer keeps reading; the next
    /// state it reads is yielded whether or not it changed.
    Unreachable(String),
}

impl Observation {
    /// The live tenure, if the state read says one is held.
    #[must_use]
    pub fn holder(&self) -> Option<&LeaseRecord> {
        match self {
            Self::State(Some(r)) if r.held => Some(r),
            _ => None,
        }
    }
}

/// How an observer reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObserveOptions {
    poll: Duration,
    read_timeout: Duration,
}

impl Default for ObserveOptions {
    fn default() -> Self {
        Self {
            poll: DEFAULT_POLL,
            read_timeout: DEFAULT_READ_TIMEOUT,
        }
    }
}

impl ObserveOptions {
    /// The defaults: poll every [`DEFAULT_POLL`], reads bounded by [`DEFAULT_READ_TIMEOUT`].
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// The longest wait between two reads (default 1 s, at least 1 ms): a change nothing
    /// pushes (a renewal; a grant on MySQL/MariaDB and SQLite) is seen at most this long plus
    /// one read after it committed.
    #[must_use]
    pub fn poll(mut self, poll: Duration) -> Self {
        self.poll = poll.max(Duration::from_millis(1));
        self
    }

    /// The bound of one read (default 10 s, at least 1 ms); a read past it is
    /// [`Observation::Unreachable`].
    #[must_use]
    pub fn read_timeout(mut self, limit: Duration) -> Self {
        self.read_timeout = limit.max(Duration::from_millis(1));
        self
    }

    /// The poll interval.
    #[must_use]
    pub fn poll_interval(&self) -> Duration {
        self.poll
    }

    /// The bound of one read.
    #[must_use]
    pub fn read_bound(&self) -> Duration {
        self.read_timeout
    }
}

/// The handle of an observer: yields the state of one lease, then every change (see the module
/// docs). Cloning gives another handle on the same driver, starting from the latest state.
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use std::time::Duration;
/// use leasehold_storage::observe::{LeaseObserver, Observation, ObserveOptions};
/// use leasehold_storage::{Grant, HolderId, LeaseKey, LeaseStore, MemoryStore, Term};
///
/// let store = Arc::new(MemoryStore::new());
/// let key = LeaseKey::parse("jobs", "report")?;
/// let options = ObserveOptions::new().poll(Duration::from_millis(20));
/// let mut observer = LeaseObserver::spawn(store.clone(), None, key.clone(), options);
/// assert_eq!(observer.next().await, Some(Observation::State(None)), "nobody yet");
///
/// let me = HolderId::new("host-a")?;
/// store.begin_tenure(&key, &me, Grant::New, Term::new("term", Duration::from_secs(30))?, None).await?;
/// let seen = observer.next().await.expect("running");
/// assert_eq!(seen.holder().map(|r| &r.holder), Some(&me));
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct LeaseObserver {
    rx: watch::Receiver<Option<Observation>>,
    key: LeaseKey,
    first: bool,
}

impl LeaseObserver {
    /// An observer of `key` on `store`, woken by `bell` when given, and its driver: spawn the
    /// driver on the runtime `store`'s connections belong to. The driver ends when every
    /// handle is dropped.
    #[must_use]
    pub fn new(
        store: Arc<dyn LeaseStore>,
        bell: Option<Arc<dyn Doorbell>>,
        key: LeaseKey,
        options: ObserveOptions,
    ) -> (Self, BoxFuture<'static, ()>) {
        let (tx, rx) = watch::channel(None);
        // Subscribe before the first read, so no ring after it is missed.
        let rings = bell.as_ref().map(|b| b.watch_changes(&key));
        let driver = drive(store, bell, rings, key.clone(), options, tx);
        (
            Self {
                rx,
                key,
                first: true,
            },
            Box::pin(driver),
        )
    }

    /// [`LeaseObserver::new`] with its driver spawned on the current runtime.
    ///
    /// # Panics
    /// Outside a Tokio runtime.
    #[must_use]
    pub fn spawn(
        store: Arc<dyn LeaseStore>,
        bell: Option<Arc<dyn Doorbell>>,
        key: LeaseKey,
        options: ObserveOptions,
    ) -> Self {
        let (observer, driver) = Self::new(store, bell, key, options);
        tokio::spawn(driver);
        observer
    }

    /// The lease observed.
    #[must_use]
    pub fn key(&self) -> &LeaseKey {
        &self.key
    }

    /// The next observation: the first call answers the current state (after the first read),
    /// every later call the next change, or the latest state if several happened since the
    /// last call. Waits until there is one. `None` once the driver has stopped (its runtime
    /// ended, or the service that made it shut down): the observation is over.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped call loses nothing, the next one answers the latest state.
    pub async fn next(&mut self) -> Option<Observation> {
        if self.first
            && let Some(o) = self.rx.borrow_and_update().clone()
        {
            self.first = false;
            return Some(o);
        }
        loop {
            self.rx.changed().await.ok()?;
            if let Some(o) = self.rx.borrow_and_update().clone() {
                self.first = false;
                return Some(o);
            }
        }
    }

    /// The latest observation without waiting (`None` before the first read).
    #[must_use]
    pub fn latest(&self) -> Option<Observation> {
        self.rx.borrow().clone()
    }

    /// The observations as a stream, ending when the driver stops.
    pub fn into_stream(self) -> futures::stream::BoxStream<'static, Observation> {
        Box::pin(futures::stream::unfold(self, |mut o| async move {
            let next = o.next().await?;
            Some((next, o))
        }))
    }
}

impl Clone for LeaseObserver {
    fn clone(&self) -> Self {
        Self {
            rx: self.rx.clone(),
            key: self.key.clone(),
            first: true,
        }
    }
}

/// Whether two records are the same state: equal in everything but the time they were read.
fn same_state(a: Option<&LeaseRecord>, b: Option<&LeaseRecord>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => {
            let mut b = b.clone();
            b.db_now = a.db_now;
            *a == b
        }
        _ => false,
    }
}

/// The driver: reads, publishes changes, waits (see the module docs).
async fn drive(
    store: Arc<dyn LeaseStore>,
    bell: Option<Arc<dyn Doorbell>>,
    mut rings: Option<mpsc::Receiver<()>>,
    key: LeaseKey,
    options: ObserveOptions,
    tx: watch::Sender<Option<Observation>>,
) {
    // Keeps the doorbell (and so its subscription) alive while the driver runs.
    let _bell = bell;
    // The last state published; `None` before the first and after a failed read.
    let mut last: Option<Option<LeaseRecord>> = None;
    let mut backoff = BACKOFF_MIN.min(options.poll);
    loop {
        let read = tokio::time::timeout(options.read_timeout, store.get(&key)).await;
        let wait = match read {
            Ok(Ok(record)) => {
                backoff = BACKOFF_MIN.min(options.poll);
                let changed = last
                    .as_ref()
                    .is_none_or(|l| !same_state(l.as_ref(), record.as_ref()));
                let wait = match &record {
                    Some(r) if r.held => options.poll.min(r.time_left() + LAPSE_SLACK),
                    _ => options.poll,
                };
                if changed {
                    tx.send_replace(Some(Observation::State(record.clone())));
                }
                last = Some(record);
                wait
            }
            Ok(Err(e)) => {
                unreachable(&tx, &mut last, e.to_string());
                backoff_step(&mut backoff, options.poll)
            }
            Err(_) => {
                let e = StoreError::TimedOut {
                    op: "observe",
                    after: options.read_timeout,
                };
                unreachable(&tx, &mut last, e.to_string());
                backoff_step(&mut backoff, options.poll)
            }
        };
        tokio::select! {
            () = tx.closed() => return,
            () = tokio::time::sleep(wait) => {}
            rang = ring(&mut rings) => {
                if !rang {
                    // The doorbell stopped: poll from now on.
                    rings = None;
                }
            }
        }
    }
}

/// Publishes a failed read (once per gap) and forgets the last state, so the next state read
/// is published whatever it is.
fn unreachable(
    tx: &watch::Sender<Option<Observation>>,
    last: &mut Option<Option<LeaseRecord>>,
    error: String,
) {
    let already = matches!(*tx.borrow(), Some(Observation::Unreachable(_))) && last.is_none();
    if !already {
        tx.send_replace(Some(Observation::Unreachable(error)));
    }
    *last = None;
}

/// The wait after a failed read, and the next one.
fn backoff_step(backoff: &mut Duration, poll: Duration) -> Duration {
    let wait = *backoff;
    *backoff = (*backoff * 2).min(poll);
    wait
}

/// The next ring: `true` on a ring, `false` once the doorbell has gone; pending forever
/// without one.
async fn ring(rings: &mut Option<mpsc::Receiver<()>>) -> bool {
    match rings {
        Some(rx) => rx.recv().await.is_some(),
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Grant, MemoryStore};
    use leasehold_core::{HolderId, Term};

    fn term() -> Term {
        Term::new("term", Duration::from_secs(30)).expect("term")
    }

    #[tokio::test(start_paused = true)]
    async fn a_lagging_consumer_gets_the_latest_state_only() {
        let store = Arc::new(MemoryStore::new());
        let key = LeaseKey::parse("", "k").expect("key");
        let mut obs = LeaseObserver::spawn(
            store.clone(),
            None,
            key.clone(),
            ObserveOptions::new().poll(Duration::from_millis(10)),
        );
        assert_eq!(obs.next().await, Some(Observation::State(None)));
        let (a, b) = (
            HolderId::new("a").expect("id"),
            HolderId::new("b").expect("id"),
        );
        let AcquireOutcome::Acquired { token, .. } = store
            .begin_tenure(&key, &a, Grant::New, term(), None)
            .await
            .expect("grant")
        else {
            panic!("not granted");
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        store.release(&key, &a, token).await.expect("release");
        tokio::time::sleep(Duration::from_millis(50)).await;
        store
            .begin_tenure(&key, &b, Grant::New, term(), None)
            .await
            .expect("grant");
        tokio::time::sleep(Duration::from_millis(50)).await;
        let seen = obs.next().await.expect("running");
        assert_eq!(seen.holder().map(|r| r.holder.clone()), Some(b.clone()));
        let current = store.get(&key).await.expect("get");
        assert!(same_state(
            match &seen {
                Observation::State(s) => s.as_ref(),
                Observation::Unreachable(_) => None,
            },
            current.as_ref()
        ));
    }

    use leasehold_core::AcquireOutcome;

    #[tokio::test(start_paused = true)]
    async fn the_driver_ends_when_every_handle_is_dropped() {
        let store = Arc::new(MemoryStore::new());
        let key = LeaseKey::parse("", "k").expect("key");
        let (obs, driver) = LeaseObserver::new(store, None, key, ObserveOptions::new());
        let driver = tokio::spawn(driver);
        let second = obs.clone();
        drop(obs);
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(!driver.is_finished(), "a handle is left");
        drop(second);
        tokio::time::timeout(Duration::from_secs(5), driver)
            .await
            .expect("the driver ends")
            .expect("no panic");
    }
}
