//! [`Driver`]: what one database does, as well as what it says. The store holds its driver once,
//! chosen at one registration point ([`super::DRIVERS`]), and never asks which database it
//! talks to: every place whose behaviour differs between databases is a method here, and each
//! database's `backend/<database>/driver.rs` implements it.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use leasehold_core::{HolderId, LeaseKey, LeaseValue, Namespace, Term};
use sea_orm::{DatabaseConnection, DbErr, QueryResult, Statement, TransactionOptions};

use super::{Backend, Dialect};
use crate::connect::Opening;
use crate::doorbell::Doorbell;
use crate::group::Decided;
use crate::{BatchRenewal, SeaOrmStore, StoreError, TenureRef};

/// One database's behaviour: how a URL and a connection are recognised, how its pool is opened
/// and hooked, how its batches, purge and catalog run, and its doorbell.
#[async_trait]
pub(crate) trait Driver: Send + Sync + std::fmt::Debug {
    /// The database it drives.
    fn backend(&self) -> Backend;

    /// Its SQL.
    fn dialect(&self) -> &'static dyn Dialect;

    /// Whether this build includes it (its cargo feature).
    fn built(&self) -> bool;

    /// Whether `url` (lower case) names one of its databases.
    fn claims_url(&self, url: &str) -> bool;

    /// The question whose answer tells this driver's database from another one that speaks the
    /// same protocol ([`Driver::identified`]); `None` when the protocol alone tells.
    fn identify(&self) -> Option<Statement> {
        None
    }

    /// The database the answer to [`Driver::identify`] names.
    fn identified(&self, _answer: Option<&QueryResult>) -> Backend {
        self.backend()
    }

    /// Opens a pool on `plan`'s URL with this database's hooks and settings, and the store on
    /// it (before its schema is checked).
    async fn open(&self, plan: Opening) -> Result<SeaOrmStore, StoreError>;

    /// Finishes a store made on a connection: what the server's answers set (a Galera node).
    ///
    /// # Errors
    /// A connection that lacks a setting the store's decisions rely on.
    async fn adopted(&self, _store: &mut SeaOrmStore) -> Result<(), StoreError> {
        Ok(())
    }

    /// The transaction options of a fenced transaction, which holds the lease row's lock.
    fn fenced_transaction(&self) -> TransactionOptions {
        TransactionOptions::default()
    }

    /// The gate its writers of this process pass one at a time (a SQLite file).
    fn write_gate(
        &self,
        _db: &DatabaseConnection,
    ) -> Option<Arc<crate::backend::sqlite::gate::WriteGate>> {
        None
    }

    /// One chunk of `begin_tenure_many` (indices into `keys`, each key once), a deadlock victim
    /// retried whole, committed before anything is answered.
    async fn grant_chunk(
        &self,
        store: &SeaOrmStore,
        holder: &HolderId,
        keys: &[LeaseKey],
        chunk: &[usize],
        term: Term,
        value: Option<&LeaseValue>,
    ) -> Result<Vec<(usize, Decided)>, StoreError>;

    /// One chunk of `release_batch`: the indices of the items it released.
    async fn release_chunk(
        &self,
        store: &SeaOrmStore,
        holder: &HolderId,
        items: &[TenureRef],
        chunk: &[usize],
    ) -> Result<Vec<usize>, StoreError>;

    /// Whether a batch sees every row it names (one writer at a time): an item a batched
    /// release did not release is then not held, and is not asked alone.
    fn batch_sees_every_row(&self) -> bool {
        false
    }

    /// One round of `renew_batch` (every key at most once): each item's answer, with
    /// [`BatchRenewal::Unknown`] for a row another session held locked.
    async fn renew_round(
        &self,
        store: &SeaOrmStore,
        holder: &HolderId,
        items: &[TenureRef],
        term: Term,
    ) -> Result<Vec<BatchRenewal>, StoreError>;

    /// `release_many` of at least one item: how many it released.
    async fn release_many(
        &self,
        store: &SeaOrmStore,
        holder: &HolderId,
        items: &[TenureRef],
    ) -> Result<u64, StoreError> {
        store
            .execute("release_many", store.sql.release_many(holder, items)?)
            .await
    }

    /// `release_all`: how many tenures it released.
    async fn release_all(&self, store: &SeaOrmStore, holder: &HolderId) -> Result<u64, StoreError> {
        store
            .execute("release_all", store.sql.release_all(holder))
            .await
    }

    /// `purge` (see `purge.rs`): how many rows it deleted.
    async fn purge(
        &self,
        store: &SeaOrmStore,
        namespace: Option<&Namespace>,
        age: Term,
    ) -> Result<u64, StoreError>;

    /// The rows of a catalog query about the lease table.
    async fn catalog(
        &self,
        store: &SeaOrmStore,
        stmt: Statement,
    ) -> Result<Vec<QueryResult>, DbErr> {
        store.all_raw(stmt).await
    }

    /// The doorbell of a service on `store`, its statements bounded by `limit`; `None` where no
    /// other process can wait (or this platform has none).
    fn doorbell(&self, store: &SeaOrmStore, limit: Duration) -> Option<Arc<dyn Doorbell>>;

    /// Sends `stmt` in a transaction of its own that `prelude` opens, committed before the rows
    /// and the count of changed rows are returned: every statement through transaction pooling
    /// (`backend/postgres/pooler.rs`), where a client keeps a server connection for one
    /// transaction only.
    async fn in_own_transaction(
        &self,
        db: &DatabaseConnection,
        prelude: &str,
        stmt: Statement,
    ) -> Result<(Vec<QueryResult>, u64), DbErr> {
        let _ = (db, prelude, stmt);
        Err(DbErr::Custom(format!(
            "transaction pooling is not supported on {:?}",
            self.backend()
        )))
    }
}
