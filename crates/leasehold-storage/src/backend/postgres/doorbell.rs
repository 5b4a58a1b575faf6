//! The PostgreSQL doorbell: a ring is `pg_notify` on the store's pool (after the release has
//! committed, so a woken waiter finds the row released; the rings that arrive while one
//! statement is out go together in the next); one `LISTEN` per service, on a
//! connection of its own outside the pool (waiters never take pooled connections), fans the
//! rings out to the local subscribers of each key.
//!
//! Grants are announced on a second channel, [`CHANGES`]: [`Doorbell::held`] (called by the
//! holder's engine after each grant) sends `pg_notify` on the pool off the grant's path,
//! batching the grants that arrive while one announcement is out. The `LISTEN` connection also
//! listens on it; its notifications wake only the observers ([`Doorbell::watch_changes`]).
//!
//! On a store with [`SeaOrmStore::notify_in_statements`] (opt-in: a service's
//! `notify_in_statements`) the statements that grant and release send these notifications
//! themselves, in their own transactions: the doorbell then announces no grant and rings only
//! for tenures that ended without a committed release ([`Doorbell::rings_with_releases`]). Half
//! the statements of a lock + unlock pair, but a notifying commit holds the server's
//! notification lock through its flush, so many sessions notifying at once queue behind each
//! other (figures in `docs/benchmarks.md`): off by default.
//!
//! Connections: 1 (the `LISTEN`), opened on the first [`Doorbell::watch`], to the store's URL or
//! to the doorbell's own ([`crate::StoreBuilder::doorbell_url`]: past a pooler). When it drops it
//! is reopened with a bounded back-off; subscribers poll meanwhile, and every subscriber is woken
//! once whenever the `LISTEN` starts (rings sent before it were lost).
//!
//! A `LISTEN` that hears nothing would leave every waiter polling without a word, so each new
//! `LISTEN` sends itself a ring through the pool ([`PROBE`]) and counts as listening only once it
//! heard it. One that does not hear it within the bound (a pooler that does not keep a client
//! on its server connection) is closed and tried again after [`DEAF_RETRY`]; meanwhile
//! [`Doorbell::wakeups`] reports polling and a warning is logged. Through transaction pooling
//! without a doorbell URL no `LISTEN` is tried at all: its registration would stay on a server
//! connection that the pooler then gives to other clients, whose statements would meet the
//! notifications.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use leasehold_core::LeaseKey;
use sea_orm::sqlx::postgres::{PgConnectOptions, PgListener, PgPool, PgPoolOptions};
use sea_orm::{DbBackend, Statement};
use tokio::sync::{Notify, mpsc};

use crate::SeaOrmStore;
use crate::doorbell::{BACKOFF_MIN, Doorbell, Subscribers, next_backoff, payload};

/// The channel on which rings are sent.
pub const CHANNEL: &str = super::RELEASED_CHANNEL;
/// The channel of grants, for observers: the holder's doorbell announces each grant on it once
/// the grant has committed ([`Doorbell::held`]), and so does the optional change trigger
/// ([`crate::ddl::ensure_change_notify`]) for every writer, with the row's key as
/// [`payload`]. Only observers listen to it (a lock waiter woken by a grant would only be
/// refused).
pub const CHANGES: &str = crate::ddl::CHANGES_CHANNEL;

/// See the module docs.
pub struct PgDoorbell {
    store: SeaOrmStore,
    limit: Duration,
    subscribers: Subscribers,
    observers: Subscribers,
    /// Grants to announce on [`CHANGES`] (payloads), and whether a sender is running.
    announce: Arc<crate::doorbell::Outbox>,
    /// Rings to send on [`CHANNEL`], likewise.
    rings: Arc<crate::doorbell::Outbox>,
    listening: Mutex<bool>,
    /// Whether rings reach this service ([`Doorbell::wakeups`]).
    wakeups: Arc<Mutex<crate::doorbell::Wakeups>>,
    /// The store's grants and releases notify in their own statements
    /// ([`SeaOrmStore::notify_in_statements`]): grants are not announced again, and committed
    /// releases need no ring.
    in_statements: bool,
    stop: Arc<Notify>,
    stopped: Arc<std::sync::atomic::AtomicBool>,
}

impl std::fmt::Debug for PgDoorbell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgDoorbell")
            .field("table", &self.store.table())
            .finish_non_exhaustive()
    }
}

impl PgDoorbell {
    /// The doorbell of a service on `store`; rings are bounded by `limit`.
    #[must_use]
    pub fn new(store: &SeaOrmStore, limit: Duration) -> Self {
        Self {
            store: store.clone(),
            limit,
            subscribers: Subscribers::default(),
            observers: Subscribers::default(),
            announce: Arc::default(),
            rings: Arc::default(),
            listening: Mutex::new(false),
            wakeups: Arc::new(Mutex::new(initial_wakeups(store))),
            in_statements: store.notifies_in_statements(),
            stop: Arc::new(Notify::new()),
            stopped: Arc::default(),
        }
    }

    /// Queues `key` for `channel` in `pending`, starting its sender unless one is running.
    fn queue(&self, pending: &Arc<crate::doorbell::Outbox>, channel: &'static str, key: &LeaseKey) {
        if self.stopped.load(std::sync::atomic::Ordering::SeqCst)
            || !pending.push(payload(self.store.table(), key))
        {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            pending.abandon();
            return;
        };
        let (store, limit) = (self.store.clone(), self.limit);
        rt.spawn(notify_all(store, limit, channel, Arc::clone(pending)));
    }

    fn listen(&self) {
        let mut listening = self
            .listening
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if *listening
            || self.stopped.load(std::sync::atomic::Ordering::SeqCst)
            || (self.store.transaction_pooling() && self.store.doorbell_url.is_none())
        {
            return;
        }
        *listening = true;
        // Read again at each reconnect: a store that follows the primary points its pool at the
        // new one (primary.rs), and a LISTEN on the old one would hear nothing.
        let pool = self
            .store
            .connection()
            .get_postgres_connection_pool()
            .clone();
        let subscribers = [self.subscribers.clone(), self.observers.clone()];
        let stop = Arc::clone(&self.stop);
        let bell = Bell {
            store: self.store.clone(),
            limit: self.limit,
            direct: self.store.doorbell_url.clone(),
            wakeups: Arc::clone(&self.wakeups),
        };
        crate::doorbell::spawn(async move {
            tokio::select! {
                () = stop.notified() => {}
                () = listen_forever(&pool, &subscribers, &bell) => {}
            }
        });
    }
}

impl Doorbell for PgDoorbell {
    /// Announces the grant to observers: `pg_notify` on [`CHANGES`], after the grant has
    /// committed, on the pool, off the grant's path. Grants that arrive while one announcement
    /// is out go together in the next statement (at most [`ANNOUNCE_BATCH`] per statement).
    fn changed(&self, key: &LeaseKey) {
        // An announcement wakes observers only, as for a grant.
        self.queue(&self.announce, CHANGES, key);
    }

    /// Nothing when the grant's own statement announced it
    /// ([`SeaOrmStore::notify_in_statements`]).
    fn held(&self, key: &LeaseKey) {
        if !self.in_statements {
            self.queue(&self.announce, CHANGES, key);
        }
    }

    fn rings_with_releases(&self) -> bool {
        self.in_statements
    }

    /// Queues the ring: `pg_notify` on [`CHANNEL`] on the pool, the rings that arrive while one
    /// statement is out going together in the next (at most [`ANNOUNCE_BATCH`] per statement),
    /// so the releases of a batch ring in one statement, not one each.
    fn ring(&self, key: &LeaseKey) {
        self.queue(&self.rings, CHANNEL, key);
    }

    fn ring_now(&self, key: &LeaseKey) -> futures::future::BoxFuture<'static, ()> {
        let stmt = Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT pg_notify($1, $2)",
            [CHANNEL.into(), payload(self.store.table(), key).into()],
        );
        let (store, limit, key) = (self.store.clone(), self.limit, key.clone());
        Box::pin(async move {
            match tokio::time::timeout(limit, crate::retry::watched(store.exec_raw(stmt))).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => tracing::debug!(%key, error = %e, "pg_notify failed"),
                Err(_) => tracing::debug!(%key, "pg_notify timed out"),
            }
        })
    }

    fn watch(&self, key: &LeaseKey) -> mpsc::Receiver<()> {
        let rx = self.subscribers.add(payload(self.store.table(), key));
        self.listen();
        rx
    }

    fn watch_changes(&self, key: &LeaseKey) -> mpsc::Receiver<()> {
        let rx = self.observers.add(payload(self.store.table(), key));
        self.listen();
        rx
    }

    fn stop(&self) {
        self.stopped
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.stop.notify_one();
    }

    fn wakeups(&self) -> crate::doorbell::Wakeups {
        self.wakeups
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// What the doorbell of `store` can do before it listened: through transaction pooling without
/// a doorbell URL, nothing (warned once, here).
fn initial_wakeups(store: &SeaOrmStore) -> crate::doorbell::Wakeups {
    if store.transaction_pooling() && store.doorbell_url.is_none() {
        let reason = "the store goes through transaction pooling and has no doorbell URL \
                      (StoreBuilder::doorbell_url): LISTEN cannot work there"
            .to_owned();
        tracing::warn!(%reason, "doorbell off, waiters poll");
        return crate::doorbell::Wakeups::Polling { reason };
    }
    crate::doorbell::Wakeups::Idle
}

/// The payload of the ring a new `LISTEN` sends itself: no key's payload starts with `:`.
pub const PROBE: &str = ":probe:";

/// How long a doorbell whose `LISTEN` heard nothing waits before it tries again.
pub const DEAF_RETRY: Duration = Duration::from_secs(30);

/// What a `LISTEN` needs besides its subscribers.
struct Bell {
    store: SeaOrmStore,
    limit: Duration,
    /// The doorbell's own URL, past a pooler.
    direct: Option<Arc<str>>,
    wakeups: Arc<Mutex<crate::doorbell::Wakeups>>,
}

impl Bell {
    fn set(&self, wakeups: crate::doorbell::Wakeups) {
        let mut now = self.wakeups.lock().unwrap_or_else(PoisonError::into_inner);
        if let (crate::doorbell::Wakeups::Polling { reason }, false) = (
            &wakeups,
            matches!(*now, crate::doorbell::Wakeups::Polling { .. }),
        ) {
            tracing::warn!(%reason, "doorbell deaf, waiters poll");
        }
        *now = wakeups;
    }
}

/// The most grants announced, or rings sent, by one statement.
pub const ANNOUNCE_BATCH: usize = 1_000;

/// Sends the pending notifications of `channel`, a batch per statement, until none is left.
async fn notify_all(
    store: SeaOrmStore,
    limit: Duration,
    channel: &'static str,
    outbox: Arc<crate::doorbell::Outbox>,
) {
    while let Some(batch) = outbox.next_batch(ANNOUNCE_BATCH) {
        let Ok(json) = serde_json::to_string(&batch) else {
            continue;
        };
        let stmt = Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT pg_notify($1, p) FROM json_array_elements_text($2::json) AS p",
            [channel.into(), json.into()],
        );
        match tokio::time::timeout(limit, crate::retry::watched(store.exec_raw(stmt))).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                tracing::debug!(count = batch.len(), %channel, error = %e, "notifications failed")
            }
            Err(_) => tracing::debug!(count = batch.len(), %channel, "notifications timed out"),
        }
    }
}

/// Listens, reconnecting with a bounded back-off whenever the connection fails.
/// `subscribers` are the lock waiters' and the observers'.
async fn listen_forever(pool: &PgPool, subscribers: &[Subscribers; 2], bell: &Bell) {
    let mut backoff = BACKOFF_MIN;
    loop {
        let options = match &bell.direct {
            Some(url) => match url.parse::<PgConnectOptions>() {
                Ok(o) => o,
                Err(e) => {
                    bell.set(crate::doorbell::Wakeups::Polling {
                        reason: format!("the doorbell's URL: {e}"),
                    });
                    return;
                }
            },
            None => (*pool.connect_options()).clone(),
        };
        match listen_once(&options, subscribers, bell).await {
            Ok(()) => backoff = BACKOFF_MIN,
            Err(Heard::Nothing) => {
                bell.set(crate::doorbell::Wakeups::Polling {
                    reason: format!(
                        "its LISTEN did not hear its own ring within {:?}: a pooler in \
                         transaction mode? give the doorbell a direct URL \
                         (StoreBuilder::doorbell_url)",
                        bell.limit
                    ),
                });
                tokio::time::sleep(DEAF_RETRY).await;
                continue;
            }
            Err(Heard::Failed(e)) => {
                tracing::debug!(error = %e, "doorbell LISTEN failed (waiters poll until it is back)");
                bell.set(crate::doorbell::Wakeups::Polling {
                    reason: format!("its LISTEN connection failed ({e}); reconnecting"),
                });
                backoff = next_backoff(backoff);
            }
        }
        tokio::time::sleep(backoff).await;
    }
}

/// Why a `LISTEN` ended.
enum Heard {
    /// It listened but did not hear its own ring.
    Nothing,
    /// The connection failed.
    Failed(String),
}

impl From<String> for Heard {
    fn from(e: String) -> Self {
        Self::Failed(e)
    }
}

/// One `LISTEN` connection, until it fails. Once it listens every subscriber is woken once: a
/// ring sent before (while connecting, or while the last connection was down) was lost.
async fn listen_once(
    options: &PgConnectOptions,
    subscribers: &[Subscribers; 2],
    bell: &Bell,
) -> Result<(), Heard> {
    let limit = bell.limit;
    let [waiters, observers] = subscribers;
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .max_lifetime(None)
        .idle_timeout(None)
        .acquire_timeout(limit)
        .connect_lazy_with(options.clone());
    let mut listener = tokio::time::timeout(limit, PgListener::connect_with(&pool))
        .await
        .map_err(|_| "connect timed out".to_owned())?
        .map_err(|e| e.to_string())?;
    // A lost connection ends this call (rings sent meanwhile are lost): the caller reconnects
    // with a back-off and wakes every subscriber once, instead of PgListener reconnecting
    // silently.
    listener.eager_reconnect(false);
    tokio::time::timeout(limit, listener.listen_all([CHANNEL, CHANGES]))
        .await
        .map_err(|_| "LISTEN timed out".to_owned())?
        .map_err(|e| e.to_string())?;
    // Its own ring, sent through the pool as every ring is, must come back.
    let probe = Statement::from_sql_and_values(
        DbBackend::Postgres,
        "SELECT pg_notify($1, $2)",
        [CHANNEL.into(), PROBE.into()],
    );
    let heard = tokio::time::timeout(limit, async {
        bell.store
            .exec_raw(probe)
            .await
            .map_err(|e| format!("its probe ring: {e}"))?;
        loop {
            match listener.try_recv().await {
                Ok(Some(n)) if n.payload() == PROBE => return Ok(true),
                Ok(Some(_)) => {}
                Ok(None) => return Err("connection lost".to_owned()),
                Err(e) => return Err(e.to_string()),
            }
        }
    })
    .await;
    match heard {
        Ok(Ok(_)) => bell.set(crate::doorbell::Wakeups::Pushed),
        Ok(Err(e)) => return Err(Heard::Failed(e)),
        Err(_) => {
            let _ = listener.unlisten_all().await;
            return Err(Heard::Nothing);
        }
    }
    waiters.wake_all();
    observers.wake_all();
    loop {
        // No bound needed on recv: it waits for a ring, and the task ends at stop.
        match listener.try_recv().await {
            Ok(Some(n)) => {
                if n.payload() == PROBE {
                    continue;
                }
                if n.channel() == CHANNEL {
                    waiters.wake(n.payload());
                }
                observers.wake(n.payload());
            }
            Ok(None) => return Err(Heard::Failed("connection lost".to_owned())),
            Err(e) => return Err(Heard::Failed(e.to_string())),
        }
    }
}
