//! SQLite's [`Driver`]: a pool on a file in WAL mode (or one in-memory connection), one writer
//! of this process at a time (`gate.rs`), batches and purge in one transaction under the
//! database's write lock (`group.rs`, `statements.rs`), its doorbell datagram sockets beside the
//! file (`doorbell.rs`).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use leasehold_core::{HolderId, LeaseKey, LeaseValue, Namespace, Term};
use sea_orm::{
    ConnectionTrait, DatabaseConnection, DbErr, SqliteTransactionMode, TransactionOptions,
};

use super::Sqlite;
use crate::backend::{Backend, Dialect, Driver};
use crate::connect::Opening;
use crate::doorbell::Doorbell;
use crate::group::{Decided, OP, RELEASE_OP};
use crate::purge::no_floor;
use crate::{BatchRenewal, SeaOrmStore, StoreError, TenureRef};

/// SQLite's driver.
#[derive(Debug)]
pub(crate) struct SqliteDriver;

/// The one SQLite driver.
pub(crate) static DRIVER: SqliteDriver = SqliteDriver;

#[async_trait]
impl Driver for SqliteDriver {
    fn backend(&self) -> Backend {
        Backend::Sqlite
    }

    fn dialect(&self) -> &'static dyn Dialect {
        &Sqlite
    }

    fn built(&self) -> bool {
        cfg!(feature = "sqlite")
    }

    fn claims_url(&self, url: &str) -> bool {
        url.starts_with("sqlite:")
    }

    async fn open(&self, plan: Opening) -> Result<SeaOrmStore, StoreError> {
        let hosts = plan.one_host(&plan.url)?;
        let lower = plan.url.to_ascii_lowercase();
        let memory = lower.contains(":memory:") || lower.contains("mode=memory");
        #[allow(unused_mut)]
        let (mut opt, _) = plan.pool_options(&plan.url, 4, memory);
        #[cfg(feature = "sqlite")]
        {
            let busy = plan
                .builder
                .busy_timeout
                .unwrap_or(plan.builder.server_timeout);
            opt.map_sqlx_sqlite_opts(move |o| {
                let o = o.busy_timeout(busy);
                if memory {
                    o
                } else {
                    o.journal_mode(sea_orm::sqlx::sqlite::SqliteJournalMode::Wal)
                        .synchronous(sea_orm::sqlx::sqlite::SqliteSynchronous::Normal)
                }
            });
            if !memory {
                // SQLite rolls a transaction back by itself on some errors (SQLITE_FULL from a
                // full disk, SQLITE_IOERR, SQLITE_NOMEM); the ROLLBACK sent when it is dropped
                // then fails and sqlx keeps counting the connection as in a transaction. Reused,
                // its next transaction would be a SAVEPOINT whose rollback leaves a real
                // transaction open, and every statement after it on that connection would be
                // answered but never committed. Such a connection is closed, not reused (an
                // in-memory database lives in its only connection, so it is kept).
                opt.map_sqlx_sqlite_pool_opts(|p| {
                    p.before_acquire(|conn, _meta| {
                        Box::pin(
                            async move { Ok(!sea_orm::sqlx::Connection::is_in_transaction(conn)) },
                        )
                    })
                });
            }
        }
        #[cfg(feature = "sqlite")]
        let db = if memory {
            plan.pool(opt, &plan.url, &hosts).await?
        } else {
            // A new file switched to WAL by another connection at this moment answers busy at
            // once (`open.rs`).
            let connected = super::open::connect(opt, plan.builder.connect_timeout).await;
            plan.opened(connected, &plan.url, &hosts).await?
        };
        #[cfg(not(feature = "sqlite"))]
        let db = plan.pool(opt, &plan.url, &hosts).await?;
        plan.store(db, &hosts).await
    }

    /// The fenced transaction takes the write lock at its start: SQLite has no row locks.
    fn fenced_transaction(&self) -> TransactionOptions {
        TransactionOptions {
            sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate),
            ..TransactionOptions::default()
        }
    }

    fn write_gate(&self, db: &DatabaseConnection) -> Option<Arc<super::gate::WriteGate>> {
        super::gate::WriteGate::of(db)
    }

    async fn grant_chunk(
        &self,
        store: &SeaOrmStore,
        holder: &HolderId,
        keys: &[LeaseKey],
        chunk: &[usize],
        term: Term,
        value: Option<&LeaseValue>,
    ) -> Result<Vec<(usize, Decided)>, StoreError> {
        let grant = store
            .sql
            .sqlite_grant_batch(holder, keys, chunk, term, value)?;
        let read = store.sql.sqlite_grant_read(keys, chunk)?;
        let decided = store
            .written(OP, || store.grant_sqlite((&grant, &read), keys, chunk))
            .await;
        store.settled(OP, decided).await
    }

    async fn release_chunk(
        &self,
        store: &SeaOrmStore,
        holder: &HolderId,
        items: &[TenureRef],
        chunk: &[usize],
    ) -> Result<Vec<usize>, StoreError> {
        let stmt = store.sql.sqlite_release_batch(holder, items, chunk)?;
        let released = store
            .written(RELEASE_OP, || store.released(&stmt, items, chunk))
            .await;
        store.settled(RELEASE_OP, released).await
    }

    fn batch_sees_every_row(&self) -> bool {
        true
    }

    async fn renew_round(
        &self,
        store: &SeaOrmStore,
        holder: &HolderId,
        items: &[TenureRef],
        term: Term,
    ) -> Result<Vec<BatchRenewal>, StoreError> {
        store
            .renew_in_one_statement(holder, items, term, false)
            .await
    }

    async fn purge(
        &self,
        store: &SeaOrmStore,
        namespace: Option<&Namespace>,
        age: Term,
    ) -> Result<u64, StoreError> {
        store
            .written("purge", || purge(store, namespace, age))
            .await
            .map_err(store.err("purge"))
    }

    fn doorbell(&self, store: &SeaOrmStore, limit: Duration) -> Option<Arc<dyn Doorbell>> {
        let _ = limit;
        #[cfg(all(feature = "sqlite", unix))]
        return super::doorbell::SqliteDoorbell::new(store)
            .map(|d| Arc::new(d) as Arc<dyn Doorbell>);
        #[cfg(not(all(feature = "sqlite", unix)))]
        {
            let _ = store;
            None
        }
    }
}

/// The purge in one transaction: the floor raised to the purgeable rows' largest token, then
/// the purgeable rows the floor covers deleted.
async fn purge(
    store: &SeaOrmStore,
    namespace: Option<&Namespace>,
    age: Term,
) -> Result<u64, DbErr> {
    let txn = store.begin_whole(TransactionOptions::default()).await?;
    let raised = txn
        .execute_raw(store.sql.sqlite_raise_floor(namespace, age))
        .await?
        .rows_affected();
    if raised != 1 {
        return Err(no_floor(store));
    }
    let n = txn
        .execute_raw(store.sql.sqlite_purge(namespace, age))
        .await?
        .rows_affected();
    txn.commit().await?;
    Ok(n)
}
