//! Release announcements: one per service. On PostgreSQL a release is announced with
//! `pg_notify`, and one `LISTEN` on a dedicated connection (outside the pool, so waiters never
//! take pooled connections) fans the announcements out to the waiters of each key. Elsewhere the
//! bell is silent and waiters poll. The row stays the only source of truth: a lost announcement
//! only costs a waiter its poll interval.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use leasehold_core::LeaseKey;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// The PostgreSQL channel on which releases are announced.
const CHANNEL: &str = "leasehold_lock_released";

/// The `NOTIFY` channel and payload announcing that `key` (in `table`) was released: the table's
/// and namespace's lengths, then the three strings, so no name can be mistaken for another.
#[must_use]
pub fn release_channel(table: &str, key: &LeaseKey) -> (&'static str, String) {
    let (ns, name) = (key.namespace.as_str(), key.name.as_str());
    (
        CHANNEL,
        format!("{}:{}:{table}{ns}{name}", table.len(), ns.len()),
    )
}

/// The key a payload of [`release_channel`] names, if it is of `table`.
fn key_of(table: &str, payload: &str) -> Option<LeaseKey> {
    let (tlen, rest) = payload.split_once(':')?;
    let (nslen, rest) = rest.split_once(':')?;
    let (tlen, nslen): (usize, usize) = (tlen.parse().ok()?, nslen.parse().ok()?);
    let (t, rest) = (rest.get(..tlen)?, rest.get(tlen..)?);
    let (ns, name) = (rest.get(..nslen)?, rest.get(nslen..)?);
    (t == table).then(|| LeaseKey::parse(ns, name).ok())?
}

type Waiters = HashMap<String, Vec<mpsc::Sender<()>>>;

/// Where every announced key goes besides its waiters (the engine, to wake standby tasks).
type Sink = Arc<Mutex<Option<mpsc::UnboundedSender<LeaseKey>>>>;

/// The release bell of one service (see the module docs).
pub struct Bell {
    #[cfg(feature = "postgres")]
    pg: leasehold_storage::SeaOrmStore,
    table: String,
    waiters: Arc<Mutex<Waiters>>,
    sink: Sink,
    listening: Arc<Mutex<bool>>,
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    limit: Duration,
    stop: CancellationToken,
}

impl std::fmt::Debug for Bell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bell")
            .field("table", &self.table)
            .finish_non_exhaustive()
    }
}

impl Bell {
    /// The bell of a service over the SQL store `store`: `Some` on PostgreSQL (with the
    /// `postgres` feature), `None` elsewhere. Announcements are bounded by `limit`.
    #[must_use]
    pub fn for_store(
        store: Option<&leasehold_storage::SeaOrmStore>,
        limit: Duration,
    ) -> Option<Arc<Bell>> {
        #[cfg(feature = "postgres")]
        {
            let pg = store
                .filter(|s| s.backend() == leasehold_storage::Backend::Postgres)?
                .clone();
            Some(Arc::new(Bell {
                table: pg.table().to_owned(),
                pg,
                waiters: Arc::default(),
                sink: Arc::default(),
                listening: Arc::default(),
                limit,
                stop: CancellationToken::new(),
            }))
        }
        #[cfg(not(feature = "postgres"))]
        {
            let _ = (store, limit);
            None
        }
    }

    /// Announces that `key` was released (in a task of its own, bounded; best effort).
    pub fn ring(&self, key: &LeaseKey) {
        #[cfg(feature = "postgres")]
        {
            use sea_orm::{ConnectionTrait, DbBackend, Statement};
            let (channel, payload) = release_channel(&self.table, key);
            let stmt = Statement::from_sql_and_values(
                DbBackend::Postgres,
                "SELECT pg_notify($1, $2)",
                [channel.into(), payload.into()],
            );
            let (pg, limit, key) = (self.pg.clone(), self.limit, key.clone());
            tokio::spawn(async move {
                match tokio::time::timeout(limit, pg.connection().execute_raw(stmt)).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => log::debug!("{key}: pg_notify after release failed: {e}"),
                    Err(_) => log::debug!("{key}: pg_notify after release timed out"),
                }
            });
        }
        #[cfg(not(feature = "postgres"))]
        let _ = key;
    }

    /// Wake-ups when any process releases `key`; the listener starts on first use. Full means a
    /// wake-up is pending already. Dropping the receiver unsubscribes (at the next release).
    pub fn watch(&self, key: &LeaseKey) -> mpsc::Receiver<()> {
        let (tx, rx) = mpsc::channel(1);
        let (_, payload) = release_channel(&self.table, key);
        self.waiters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(payload)
            .or_default()
            .push(tx);
        self.listen();
        rx
    }

    /// Every key any process announces from now on goes to `sink` too (the engine wakes its
    /// standby tasks with it); starts the listener.
    pub fn watch_all(&self, sink: mpsc::UnboundedSender<LeaseKey>) {
        *self.sink.lock().unwrap_or_else(PoisonError::into_inner) = Some(sink);
        self.listen();
    }

    /// Stops the listener (at shutdown, inside the engine's runtime).
    pub fn stop(&self) {
        self.stop.cancel();
    }

    fn listen(&self) {
        let mut listening = self
            .listening
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if *listening {
            return;
        }
        *listening = true;
        #[cfg(feature = "postgres")]
        {
            let pool = self.pg.connection().get_postgres_connection_pool();
            let options = (*pool.connect_options()).clone();
            let (waiters, stop) = (Arc::clone(&self.waiters), self.stop.clone());
            let (sink, table) = (Arc::clone(&self.sink), self.table.clone());
            let flag = Arc::clone(&self.listening);
            tokio::spawn(async move {
                tokio::select! {
                    () = stop.cancelled() => {}
                    () = run_listener(options, waiters, sink, table) => {
                        // Failed: the next waiter starts a new listener.
                        *flag.lock().unwrap_or_else(PoisonError::into_inner) = false;
                    }
                }
            });
        }
    }
}

/// Listens on a connection of its own until it fails (waiters then poll only).
#[cfg(feature = "postgres")]
async fn run_listener(
    options: sea_orm::sqlx::postgres::PgConnectOptions,
    waiters: Arc<Mutex<Waiters>>,
    sink: Sink,
    table: String,
) {
    use sea_orm::sqlx::postgres::{PgListener, PgPoolOptions};
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .max_lifetime(None)
        .idle_timeout(None)
        .connect_lazy_with(options);
    let mut listener = match PgListener::connect_with(&pool).await {
        Ok(l) => l,
        Err(e) => {
            log::debug!("LISTEN unavailable, lock waiters poll only: {e}");
            return;
        }
    };
    if let Err(e) = listener.listen(CHANNEL).await {
        log::debug!("LISTEN failed, lock waiters poll only: {e}");
        return;
    }
    loop {
        match listener.recv().await {
            Ok(n) => {
                if let Some(tx) = sink.lock().unwrap_or_else(PoisonError::into_inner).as_ref()
                    && let Some(key) = key_of(&table, n.payload())
                {
                    let _ = tx.send(key);
                }
                let mut map = waiters.lock().unwrap_or_else(PoisonError::into_inner);
                if let Some(list) = map.get_mut(n.payload()) {
                    list.retain(|tx| !tx.is_closed());
                    for tx in list.iter() {
                        let _ = tx.try_send(());
                    }
                    if list.is_empty() {
                        map.remove(n.payload());
                    }
                }
            }
            Err(e) => {
                log::debug!("LISTEN ended, lock waiters poll only: {e}");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_names_exactly_its_key() {
        for (ns, name) in [("", "job"), ("a:b", "c:d"), ("ns", "émoji🦀")] {
            let key = LeaseKey::parse(ns, name).expect("key");
            let (_, payload) = release_channel("lease_info", &key);
            assert_eq!(key_of("lease_info", &payload), Some(key.clone()));
            assert_eq!(key_of("other_lease_info", &payload), None);
        }
        assert_eq!(key_of("t", "garbage"), None);
    }
}
