//! PostgreSQL's [`Driver`]: opened by `open.rs`; its batches decided in one statement each
//! (`group.rs`); its purge one statement per chunk after a lock on the token floor table
//! (`statements.rs`); its doorbell `NOTIFY`/`LISTEN` (`doorbell.rs`).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use leasehold_core::{HolderId, LeaseKey, LeaseValue, Namespace, Term};
use sea_orm::{
    ConnectionTrait, DatabaseConnection, DbErr, QueryResult, Statement, TransactionOptions,
};

use super::Postgres;
use crate::backend::{Backend, Dialect, Driver};
use crate::connect::Opening;
use crate::doorbell::Doorbell;
use crate::group::{Decided, OP, RELEASE_OP};
use crate::purge::{PURGE_CHUNK, no_floor};
use crate::{BatchRenewal, SeaOrmStore, StoreError, TenureRef};

/// PostgreSQL's driver.
#[derive(Debug)]
pub(crate) struct PgDriver;

/// The one PostgreSQL driver.
pub(crate) static DRIVER: PgDriver = PgDriver;

#[async_trait]
impl Driver for PgDriver {
    fn backend(&self) -> Backend {
        Backend::Postgres
    }

    fn dialect(&self) -> &'static dyn Dialect {
        &Postgres
    }

    fn built(&self) -> bool {
        cfg!(feature = "postgres")
    }

    fn claims_url(&self, url: &str) -> bool {
        url.starts_with("postgres://") || url.starts_with("postgresql://")
    }

    async fn open(&self, plan: Opening) -> Result<SeaOrmStore, StoreError> {
        #[cfg(feature = "postgres")]
        return super::open::open(plan).await;
        #[cfg(not(feature = "postgres"))]
        return Err(StoreError::UnsupportedUrl {
            url: crate::redact::redact_url(&plan.url),
        });
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
        let stmt = store.sql.pg_grant_batch(holder, keys, chunk, term, value)?;
        let decided = store
            .written(OP, || store.grant_pg(&stmt, keys, chunk))
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
        let stmt = store.sql.pg_release_batch(holder, items, chunk)?;
        let released = store
            .written(RELEASE_OP, || store.released(&stmt, items, chunk))
            .await;
        store.settled(RELEASE_OP, released).await
    }

    async fn renew_round(
        &self,
        store: &SeaOrmStore,
        holder: &HolderId,
        items: &[TenureRef],
        term: Term,
    ) -> Result<Vec<BatchRenewal>, StoreError> {
        // The statement answers `renewed` 0 for a row another session held locked.
        store
            .renew_in_one_statement(holder, items, term, true)
            .await
    }

    async fn purge(
        &self,
        store: &SeaOrmStore,
        namespace: Option<&Namespace>,
        age: Term,
    ) -> Result<u64, StoreError> {
        let op = "purge";
        let mut n = 0;
        loop {
            let chunk = store
                .written(op, || purge_chunk(store, namespace, age))
                .await
                .map_err(store.err(op))?;
            n += chunk;
            if chunk < PURGE_CHUNK as u64 {
                return Ok(n);
            }
        }
    }

    async fn in_own_transaction(
        &self,
        db: &DatabaseConnection,
        prelude: &str,
        stmt: Statement,
    ) -> Result<(Vec<QueryResult>, u64), DbErr> {
        #[cfg(feature = "postgres")]
        return super::pooler::in_own_transaction(db.get_postgres_connection_pool(), prelude, stmt)
            .await;
        #[cfg(not(feature = "postgres"))]
        {
            let _ = (db, prelude, stmt);
            Err(DbErr::Custom("built without PostgreSQL".into()))
        }
    }

    fn doorbell(&self, store: &SeaOrmStore, limit: Duration) -> Option<Arc<dyn Doorbell>> {
        #[cfg(feature = "postgres")]
        return Some(Arc::new(super::doorbell::PgDoorbell::new(store, limit)));
        #[cfg(not(feature = "postgres"))]
        {
            let _ = (store, limit);
            None
        }
    }
}

/// One purge transaction: the floor table locked, then one statement deletes up to
/// [`PURGE_CHUNK`] rows and raises the floor.
async fn purge_chunk(
    store: &SeaOrmStore,
    namespace: Option<&Namespace>,
    age: Term,
) -> Result<u64, DbErr> {
    let txn = store.begin_whole(TransactionOptions::default()).await?;
    txn.execute_raw(store.sql.pg_lock_floor()).await?;
    let row = txn
        .query_one_raw(store.sql.pg_purge_chunk(namespace, age, PURGE_CHUNK))
        .await?
        .ok_or_else(|| DbErr::Custom("purge: no row".into()))?;
    let n: i64 = row.try_get("", "n")?;
    let floors: i64 = row.try_get("", "floors")?;
    if floors != 1 {
        // Without the floor row a purge would reset tokens: delete nothing.
        return Err(no_floor(store));
    }
    txn.commit().await?;
    Ok(u64::try_from(n).unwrap_or(0))
}
