//! The MySQL/MariaDB doorbell: named locks (`GET_LOCK`), no table and no extra server.
//!
//! - **The holder's side.** While this service holds a tenure of a key it also holds the key's
//!   named lock (`lh:` and 60 hex digits of the SHA-256 of the key's [`payload`], computed by
//!   the server) on one dedicated connection for all its keys. [`Doorbell::held`] takes it
//!   (`GET_LOCK(…, 0)`); [`Doorbell::ring`], called after the release has committed, lets it go
//!   (`RELEASE_LOCK`). Calls that arrive together go in one statement, in order. If the
//!   connection drops, the server lets every named lock go (a spurious ring: waiters retry and
//!   are refused while the row is valid), and the connection is reopened with a bounded back-off
//!   and the locks of the keys still held are taken again. At most [`MAX_ARMED`] keys have a
//!   named lock; waiters of the others poll.
//! - **The waiter's side.** Each watched key has a task that, on a connection of a small pool of
//!   its own (at most [`MAX_WAITING`] connections, so at most that many keys are watched this way
//!   at a time; the others poll), runs one statement: if nobody holds the named lock the holder
//!   has not taken it (yet, or it runs without a doorbell) and the task looks again after a short
//!   pause growing to [`SLICE`]; otherwise it blocks in `GET_LOCK(…, SLICE)` and, when that
//!   succeeds, lets the lock go in the same statement and rings the key's subscribers. At most
//!   [`MAX_WATCHED`] keys have such a task; the waiters of others poll. The waiter holds the
//!   named lock only within that statement, so it never stands in for a holder.
//!
//! - **Bells.** [`Doorbell::broadcast`] of a key that is no tenure (a shard group's) takes its
//!   named lock, holds it [`BELL_HOLD`] and lets it go; its watchers
//!   ([`Doorbell::watch_broadcasts`]) look at it every [`BELL_LOOK`] while nobody holds it, so
//!   they are blocked on it when it is let go. That is a cheap poll of the server (no table) at
//!   that pace: MySQL has no way for a newcomer to wake a session that waits on nothing it holds.
//!
//! Connections per service: 1 (the holder's named locks, opened on the first `held`) + at most
//! [`MAX_WAITING`] (waits, opened on demand, closed after [`IDLE`] unused) + 1 for bells (the
//! same) — none of them from
//! the store's pool.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use leasehold_core::LeaseKey;
use sea_orm::sqlx::Row;
use sea_orm::sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};
use tokio::sync::{Notify, mpsc};

pub use super::named_locks::MAX_ARMED;
use super::named_locks::{Op, hold_forever};
use crate::SeaOrmStore;
use crate::doorbell::{BACKOFF_MIN, Doorbell, Subscribers, next_backoff, payload};

/// The most keys waited for at once through named locks (each blocks one connection).
pub const MAX_WAITING: u32 = 4;
/// The most keys with a waiting task (taking turns on the [`MAX_WAITING`] connections); the
/// waiters of further keys poll.
pub const MAX_WATCHED: usize = 64;
/// How long one `GET_LOCK` of a waiter blocks before it looks again.
pub const SLICE: Duration = Duration::from_secs(1);
/// A waiting connection unused this long is closed.
pub const IDLE: Duration = Duration::from_secs(30);
/// The first pause before looking again at a named lock nobody holds.
const UNARMED_PAUSE: Duration = Duration::from_millis(10);
/// How often a watcher of a bell ([`Doorbell::watch_broadcasts`]) looks at its named lock while
/// nobody holds it (and waits for a connection when all are busy).
pub const BELL_LOOK: Duration = Duration::from_millis(100);
/// How long a broadcast holds the bell's named lock before letting it go (the ring): longer
/// than a watcher's look, so that every watcher is blocked on it by then.
pub const BELL_HOLD: Duration = Duration::from_millis(300);

/// One waiter's statement: 2 = nobody holds the named lock, 1 = it was let go (a ring), 0 = still
/// held after the slice. Binds: the payload, the payload, the slice in seconds, the payload.
const WAIT_SQL: &str = "SELECT CASE \
     WHEN IS_USED_LOCK(CONCAT('lh:', LEFT(SHA2(?, 256), 60))) IS NULL THEN 2 \
     WHEN GET_LOCK(CONCAT('lh:', LEFT(SHA2(?, 256), 60)), ?) = 1 \
       THEN RELEASE_LOCK(CONCAT('lh:', LEFT(SHA2(?, 256), 60))) \
     ELSE 0 END AS rang";

/// See the module docs.
pub struct MySqlDoorbell {
    table: String,
    options: MySqlConnectOptions,
    limit: Duration,
    holder: Mutex<Option<mpsc::UnboundedSender<Op>>>,
    waiting: MySqlPool,
    /// The waits of bells ([`Doorbell::watch_broadcasts`]): one connection of their own, so
    /// that many waited keys never delay a bell.
    bells: MySqlPool,
    subscribers: Subscribers,
    /// Payloads with a waiting task.
    watched: Arc<Mutex<HashSet<String>>>,
    stop: Arc<Notify>,
    stopped: Arc<std::sync::atomic::AtomicBool>,
}

impl std::fmt::Debug for MySqlDoorbell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MySqlDoorbell")
            .field("table", &self.table)
            .finish_non_exhaustive()
    }
}

impl MySqlDoorbell {
    /// The doorbell of a service on `store`; its statements are bounded by `limit` (waits by
    /// [`SLICE`] plus `limit`).
    #[must_use]
    pub fn new(store: &SeaOrmStore, limit: Duration) -> Self {
        let pool = store.connection().get_mysql_connection_pool();
        let options = (*pool.connect_options()).clone();
        let waiting = MySqlPoolOptions::new()
            .min_connections(0)
            .max_connections(MAX_WAITING)
            .idle_timeout(IDLE)
            .acquire_timeout(limit)
            .test_before_acquire(false)
            .connect_lazy_with(options.clone());
        let bells = MySqlPoolOptions::new()
            .min_connections(0)
            .max_connections(1)
            .idle_timeout(IDLE)
            .acquire_timeout(limit)
            .test_before_acquire(false)
            .connect_lazy_with(options.clone());
        Self {
            table: store.table().to_owned(),
            options,
            limit,
            holder: Mutex::new(None),
            waiting,
            bells,
            subscribers: Subscribers::default(),
            watched: Arc::default(),
            stop: Arc::new(Notify::new()),
            stopped: Arc::default(),
        }
    }

    fn is_stopped(&self) -> bool {
        self.stopped.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Queues `op` for the holder's connection (starting its task on first use).
    fn send(&self, op: Op) {
        if self.is_stopped() {
            return;
        }
        let mut holder = self.holder.lock().unwrap_or_else(PoisonError::into_inner);
        let tx = holder.get_or_insert_with(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            let (options, limit, stop) = (self.options.clone(), self.limit, Arc::clone(&self.stop));
            crate::doorbell::spawn(async move {
                tokio::select! {
                    () = stop.notified() => {}
                    () = hold_forever(options, rx, limit) => {}
                }
            });
            tx
        });
        let _ = tx.send(op);
    }

    /// Subscribes to the rings of `key`, with a waiting task (one per key, at most
    /// [`MAX_WATCHED`]) that looks at least every `pace` while nobody holds its named lock.
    fn watch_every(&self, key: &LeaseKey, pace: Duration) -> mpsc::Receiver<()> {
        let pool = if pace < SLICE {
            self.bells.clone()
        } else {
            self.waiting.clone()
        };
        let ring = payload(&self.table, key);
        let mut watched = self.watched.lock().unwrap_or_else(PoisonError::into_inner);
        let rx = self.subscribers.add(ring.clone());
        if !self.is_stopped() && watched.len() < MAX_WATCHED && watched.insert(ring.clone()) {
            let subscribers = self.subscribers.clone();
            let (watched, stop, limit) = (
                Arc::clone(&self.watched),
                Arc::clone(&self.stop),
                self.limit,
            );
            let stopped = Arc::clone(&self.stopped);
            let waiting = Waiting {
                pool,
                ring,
                subscribers,
                watched,
                limit,
                pace,
                stopped,
            };
            crate::doorbell::spawn(async move {
                tokio::select! {
                    () = stop.notified() => {}
                    () = wait_for(waiting) => {}
                }
            });
        }
        rx
    }
}

impl Doorbell for MySqlDoorbell {
    fn held(&self, key: &LeaseKey) {
        self.send(Op::Arm(payload(&self.table, key)));
    }

    fn ring(&self, key: &LeaseKey) {
        // Only this service's own waiters would be rung with nothing to let go: they are
        // served by its local queue, so a key never armed sends nothing to the server.
        self.send(Op::Disarm(payload(&self.table, key)));
    }

    /// A waiter can only be woken by a named lock it blocks on: the broadcast takes the
    /// bell's named lock, holds it [`BELL_HOLD`] (its watchers, looking every [`BELL_LOOK`],
    /// block on it meanwhile) and lets it go. If another service holds the bell, its release
    /// (which comes after this call) wakes the same watchers.
    fn broadcast(&self, key: &LeaseKey) {
        let ring = payload(&self.table, key);
        self.send(Op::Arm(ring.clone()));
        let holder = self.holder.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(tx) = holder.as_ref().cloned() else {
            return;
        };
        drop(holder);
        crate::doorbell::spawn(async move {
            tokio::time::sleep(BELL_HOLD).await;
            let _ = tx.send(Op::Disarm(ring));
        });
    }

    fn watch_broadcasts(&self, key: &LeaseKey) -> mpsc::Receiver<()> {
        self.watch_every(key, BELL_LOOK)
    }

    fn watch(&self, key: &LeaseKey) -> mpsc::Receiver<()> {
        self.watch_every(key, SLICE)
    }

    fn stop(&self) {
        self.stopped
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.stop.notify_waiters();
        self.holder
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        // Outside a runtime (the engine's system already gone) the pool just drops.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let pools = [self.waiting.clone(), self.bells.clone()];
            rt.spawn(async move {
                for pool in pools {
                    pool.close().await;
                }
            });
        }
    }
}

/// What the waiting task of one payload works with.
struct Waiting {
    pool: MySqlPool,
    ring: String,
    subscribers: Subscribers,
    watched: Arc<Mutex<HashSet<String>>>,
    limit: Duration,
    /// The longest pause between looks at a named lock nobody holds, and the wait for a
    /// connection when all are busy.
    pace: Duration,
    stopped: Arc<std::sync::atomic::AtomicBool>,
}

/// The waiting task of one payload: runs until nobody subscribes to it any more.
async fn wait_for(waiting: Waiting) {
    let Waiting {
        pool,
        ring,
        subscribers,
        watched,
        limit,
        pace,
        stopped,
    } = waiting;
    let mut unarmed = UNARMED_PAUSE;
    let mut backoff = BACKOFF_MIN;
    let mut first = true;
    loop {
        {
            let mut w = watched.lock().unwrap_or_else(PoisonError::into_inner);
            if stopped.load(std::sync::atomic::Ordering::SeqCst) || !subscribers.has(&ring) {
                w.remove(&ring);
                return;
            }
        }
        // Beyond the bound of waiting connections this key is polled by its waiters.
        let conn = match pool.try_acquire() {
            Some(conn) => Some(conn),
            None if pool.size() < MAX_WAITING => tokio::time::timeout(limit, pool.acquire())
                .await
                .ok()
                .and_then(Result::ok),
            None => None,
        };
        let Some(mut conn) = conn else {
            tokio::time::sleep(pace).await;
            continue;
        };
        let query = sea_orm::sqlx::query(WAIT_SQL)
            .bind(&ring)
            .bind(&ring)
            .bind(SLICE.as_secs() as i64)
            .bind(&ring);
        let answer = tokio::time::timeout(
            SLICE + limit,
            crate::retry::watched(query.fetch_one(&mut *conn)),
        )
        .await;
        let rang = match answer {
            Ok(Ok(row)) => row.try_get::<Option<i64>, _>("rang").ok().flatten(),
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "doorbell wait failed (waiters poll meanwhile)");
                conn.close_on_drop();
                None
            }
            Err(_) => {
                conn.close_on_drop();
                None
            }
        };
        drop(conn);
        match rang {
            Some(1) => {
                first = false;
                subscribers.wake(&ring);
                unarmed = UNARMED_PAUSE;
                backoff = BACKOFF_MIN;
            }
            // Nobody holds the named lock. At the first look it may just have been let go
            // (a ring sent before this task waited): everyone tries once.
            Some(2) if std::mem::take(&mut first) => subscribers.wake(&ring),
            Some(2) => {
                tokio::time::sleep(unarmed).await;
                unarmed = (unarmed * 2).min(pace);
            }
            Some(_) => {
                first = false;
                unarmed = UNARMED_PAUSE;
                backoff = BACKOFF_MIN;
            }
            None => {
                tokio::time::sleep(backoff).await;
                backoff = next_backoff(backoff);
            }
        }
    }
}
