//! Locks on the engine: one-shot grants, releases (with a PostgreSQL `NOTIFY`), renewals,
//! prefix listings, release watches (PostgreSQL `LISTEN`) and fenced transactions.
//!
//! Every store call runs on the engine's runtime, where the store's connections live; the
//! `leasehold` facade sends these messages and awaits the answers.

use std::any::Any;
use std::sync::Arc;

use actix::prelude::*;
use leasehold_core::{
    AcquireOutcome, FencingToken, LeaseKey, LeaseRecord, Namespace, ReleaseOutcome, RenewOutcome,
    Term,
};
use leasehold_storage::{Backend, FencedTransaction, LeaseStore, SeaOrmStore, StoreError};
use sea_orm::{ConnectionTrait, DbBackend, Statement};
use tokio::sync::mpsc;

use crate::LeaseEngine;

/// The PostgreSQL channel on which lock releases are announced.
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

/// Grant `key` to the engine's holder for `ttl` as a **new tenure** (a new fencing token), if
/// it is free, released or expired. Answers the store's outcome.
///
/// The facade lets only one task of a process ask for one lock at a time, so a new tenure never
/// takes a lock from a task of the same process.
#[derive(Debug, Message)]
#[rtype(result = "Result<AcquireOutcome, StoreError>")]
pub struct AcquireLock {
    /// The lock.
    pub key: LeaseKey,
    /// How long the grant lasts, by the database's clock.
    pub ttl: Term,
}

/// Release the tenure `token` of `key`; with `keep_for`, instead shorten it to end `keep_for`
/// from now (a minimum hold), after which it lapses. On PostgreSQL a release is announced with
/// `pg_notify` right after the statement. `hold` is dropped only once the store has answered
/// (the facade passes its local queue permit, so the next local waiter starts after the
/// release).
#[derive(Message)]
#[rtype(result = "Result<ReleaseOutcome, StoreError>")]
pub struct ReleaseLock {
    /// The lock.
    pub key: LeaseKey,
    /// The tenure.
    pub token: FencingToken,
    /// End the tenure this long from now instead of at once.
    pub keep_for: Option<Term>,
    /// Kept alive until the store has answered.
    pub hold: Option<Box<dyn Any + Send>>,
}

impl std::fmt::Debug for ReleaseLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReleaseLock")
            .field("key", &self.key)
            .field("token", &self.token)
            .field("keep_for", &self.keep_for)
            .finish_non_exhaustive()
    }
}

/// Extend the tenure `token` of `key` to `ttl` from now.
#[derive(Debug, Message)]
#[rtype(result = "Result<RenewOutcome, StoreError>")]
pub struct RenewLock {
    /// The lock.
    pub key: LeaseKey,
    /// The tenure.
    pub token: FencingToken,
    /// The new grant's length.
    pub ttl: Term,
}

/// The held locks in `namespace` whose names start with `prefix`.
#[derive(Debug, Message)]
#[rtype(result = "Result<Vec<LeaseRecord>, StoreError>")]
pub struct ListLocks {
    /// The namespace.
    pub namespace: Namespace,
    /// The name prefix (wildcards match only themselves).
    pub prefix: String,
}

/// Watch for releases of `key` announced by any process (PostgreSQL `LISTEN`). Answers `None`
/// on other backends (waiters poll). The watch holds one pooled connection and ends when the
/// receiver is dropped.
#[derive(Debug, Message)]
#[rtype(result = "Option<mpsc::Receiver<()>>")]
pub struct WatchReleases {
    /// The lock.
    pub key: LeaseKey,
}

/// Open a [`FencedTransaction`] for the tenure `token` of `key` on the engine's store
/// (see [`SeaOrmStore::begin_fenced`]); an error when the store is not a [`SeaOrmStore`].
#[derive(Debug, Message)]
#[rtype(result = "Result<Option<FencedTransaction>, StoreError>")]
pub struct BeginFenced {
    /// The lock.
    pub key: LeaseKey,
    /// The tenure.
    pub token: FencingToken,
}

fn postgres(store: &Arc<dyn LeaseStore>) -> Option<SeaOrmStore> {
    store
        .sea_orm()
        .filter(|s| s.backend() == Backend::Postgres)
        .cloned()
}

async fn notify_release(store: &SeaOrmStore, key: &LeaseKey) {
    let (channel, payload) = release_channel(store.table(), key);
    let stmt = Statement::from_sql_and_values(
        DbBackend::Postgres,
        "SELECT pg_notify($1, $2)",
        [channel.into(), payload.into()],
    );
    // Waiters poll as well: a lost notification only delays them.
    if let Err(e) = store.connection().execute_raw(stmt).await {
        log::debug!("{key}: pg_notify after release failed: {e}");
    }
}

impl Handler<AcquireLock> for LeaseEngine {
    type Result = ResponseFuture<Result<AcquireOutcome, StoreError>>;

    fn handle(&mut self, msg: AcquireLock, _ctx: &mut Context<Self>) -> Self::Result {
        let (store, holder) = (Arc::clone(&self.store), self.holder.clone());
        Box::pin(async move { store.begin_tenure(&msg.key, &holder, msg.ttl).await })
    }
}

impl Handler<ReleaseLock> for LeaseEngine {
    type Result = ResponseFuture<Result<ReleaseOutcome, StoreError>>;

    fn handle(&mut self, msg: ReleaseLock, _ctx: &mut Context<Self>) -> Self::Result {
        let (store, holder) = (Arc::clone(&self.store), self.holder.clone());
        Box::pin(async move {
            let ReleaseLock {
                key,
                token,
                keep_for,
                hold,
            } = msg;
            let outcome = match keep_for {
                Some(rest) => {
                    let outcome = store.renew(&key, &holder, token, rest).await?;
                    if outcome == RenewOutcome::Renewed {
                        // Local waiters too wait for the minimum hold to pass.
                        actix::spawn(async move {
                            tokio::time::sleep(rest.duration()).await;
                            drop(hold);
                        });
                        return Ok(ReleaseOutcome::Released);
                    }
                    ReleaseOutcome::NotHeld
                }
                None => {
                    let outcome = store.release(&key, &holder, token).await?;
                    if outcome == ReleaseOutcome::Released
                        && let Some(pg) = postgres(&store)
                    {
                        notify_release(&pg, &key).await;
                    }
                    outcome
                }
            };
            drop(hold);
            Ok(outcome)
        })
    }
}

impl Handler<RenewLock> for LeaseEngine {
    type Result = ResponseFuture<Result<RenewOutcome, StoreError>>;

    fn handle(&mut self, msg: RenewLock, _ctx: &mut Context<Self>) -> Self::Result {
        let (store, holder) = (Arc::clone(&self.store), self.holder.clone());
        Box::pin(async move { store.renew(&msg.key, &holder, msg.token, msg.ttl).await })
    }
}

impl Handler<ListLocks> for LeaseEngine {
    type Result = ResponseFuture<Result<Vec<LeaseRecord>, StoreError>>;

    fn handle(&mut self, msg: ListLocks, _ctx: &mut Context<Self>) -> Self::Result {
        let store = Arc::clone(&self.store);
        Box::pin(async move { store.list_valid(Some(&msg.namespace), &msg.prefix).await })
    }
}

impl Handler<WatchReleases> for LeaseEngine {
    type Result = Option<mpsc::Receiver<()>>;

    fn handle(&mut self, msg: WatchReleases, _ctx: &mut Context<Self>) -> Self::Result {
        let pg = postgres(&self.store)?;
        let (tx, rx) = mpsc::channel(1);
        actix::spawn(async move {
            let (channel, payload) = release_channel(pg.table(), &msg.key);
            let pool = pg.connection().get_postgres_connection_pool();
            let mut listener = match sea_orm::sqlx::postgres::PgListener::connect_with(pool).await {
                Ok(l) => l,
                Err(e) => {
                    log::debug!("{}: LISTEN unavailable, polling only: {e}", msg.key);
                    return;
                }
            };
            if let Err(e) = listener.listen(channel).await {
                log::debug!("{}: LISTEN failed, polling only: {e}", msg.key);
                return;
            }
            loop {
                tokio::select! {
                    () = tx.closed() => return,
                    n = listener.recv() => match n {
                        Ok(n) if n.payload() == payload => {
                            // Full means a wake-up is pending already.
                            let _ = tx.try_send(());
                        }
                        Ok(_) => {}
                        Err(e) => {
                            log::debug!("{}: LISTEN ended, polling only: {e}", msg.key);
                            return;
                        }
                    },
                }
            }
        });
        Some(rx)
    }
}

impl Handler<BeginFenced> for LeaseEngine {
    type Result = ResponseFuture<Result<Option<FencedTransaction>, StoreError>>;

    fn handle(&mut self, msg: BeginFenced, _ctx: &mut Context<Self>) -> Self::Result {
        let store = self.store.sea_orm().cloned();
        let holder = self.holder.clone();
        Box::pin(async move {
            let Some(store) = store else {
                return Err(StoreError::Unexpected {
                    op: "begin_fenced",
                    detail: "the service's store is not a SeaOrmStore".to_owned(),
                });
            };
            store.begin_fenced(&msg.key, &holder, msg.token).await
        })
    }
}
