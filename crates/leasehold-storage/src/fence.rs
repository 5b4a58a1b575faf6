//! Fencing: run your own statements only while a tenure is still live.
//!
//! A holder that paused (GC, SIGSTOP, a slow disk) past its lease may wake up believing it still
//! holds it. [`SeaOrmStore::begin_fenced`] opens a transaction on the lease database that first
//! checks, and locks, the lease row: this holder, this token, status held, end time after the
//! database's now. Statements run in that transaction commit only if the tenure was live when the
//! transaction began, and no other holder can take the lease over until it ends (the takeover's
//! upsert waits for the row lock). A stale holder gets `None` and writes nothing.
//!
//! On MySQL/MariaDB the fence also writes the row (its `gmt_modified`): on a Galera cluster a
//! row lock holds only on its own node, and the write is what makes certification refuse the
//! fenced commit when another node changed the row meanwhile.
//!
//! On SQLite there are no row locks: the fenced transaction begins `IMMEDIATE`, taking the
//! database's write lock before it checks the tenure, so a takeover by another process waits
//! (up to the busy timeout) until the fenced transaction ends, just as it waits for the row lock
//! on PostgreSQL and MySQL. A takeover by a store of the same process waits at the file's write
//! gate instead (`backend/sqlite/gate.rs`), as long and no longer.

use std::ops::Deref;

use leasehold_core::{FencingToken, HolderId, LeaseKey};
use sea_orm::{ConnectionTrait, DatabaseTransaction};

use crate::{SeaOrmStore, StoreError};

/// A transaction that began while the tenure it names was live. Run statements on it (it derefs
/// to SeaORM's [`DatabaseTransaction`]), then [`FencedTransaction::commit`]. Dropping it rolls
/// back.
#[derive(Debug)]
pub struct FencedTransaction {
    txn: DatabaseTransaction,
    token: FencingToken,
    /// On a SQLite file, the turn at its write gate (`backend/sqlite/gate.rs`): the fenced
    /// transaction holds the database's write lock, so this process's other writers wait at
    /// the gate, not in SQLite's busy handler. Declared after `txn`, so dropped after it.
    _turn: Option<crate::backend::sqlite::gate::Turn>,
}

impl FencedTransaction {
    /// The fencing token the transaction was opened with.
    #[must_use]
    pub fn token(&self) -> FencingToken {
        self.token
    }

    /// Commits the statements run in the transaction.
    ///
    /// # Errors
    /// The database's error.
    pub async fn commit(self) -> Result<(), StoreError> {
        self.txn.commit().await.map_err(|cause| {
            crate::retry::note_trouble();
            StoreError::db("fenced commit", "", cause)
        })
    }

    /// Rolls the transaction back.
    ///
    /// # Errors
    /// The database's error.
    pub async fn rollback(self) -> Result<(), StoreError> {
        self.txn
            .rollback()
            .await
            .map_err(|cause| StoreError::Database {
                op: "fenced rollback",
                cause,
            })
    }
}

impl Deref for FencedTransaction {
    type Target = DatabaseTransaction;
    fn deref(&self) -> &DatabaseTransaction {
        &self.txn
    }
}

impl SeaOrmStore {
    /// Opens a transaction that proceeds only if `holder` still holds `key` with `token` by the
    /// database's clock, locking the lease row until the transaction ends. `Ok(None)` means the
    /// tenure has ended (lapsed, released, or taken over): do not write.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use leasehold_storage::{AcquireOutcome, Grant, HolderId, LeaseKey, LeaseStore, StoreBuilder, Term};
    /// use sea_orm::ConnectionTrait;
    ///
    /// let store = StoreBuilder::new("sqlite::memory:").connect().await?;
    /// let key = LeaseKey::parse("jobs", "ledger")?;
    /// let me = HolderId::new("worker-1")?;
    /// let AcquireOutcome::Acquired { token, .. } =
    ///     store.begin_tenure(&key, &me, Grant::New, Term::new("term", Duration::from_secs(30))?, None).await?
    /// else { unreachable!() };
    /// store.connection().execute_unprepared("CREATE TABLE ledger (entry TEXT)").await?;
    ///
    /// if let Some(txn) = store.begin_fenced(&key, &me, token).await? {
    ///     txn.execute_unprepared("INSERT INTO ledger VALUES ('written under the lease')").await?;
    ///     txn.commit().await?;
    /// } else {
    ///     println!("our tenure ended: not writing");
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`StoreError`] when the database cannot be reached or refuses the transaction.
    pub async fn begin_fenced(
        &self,
        key: &LeaseKey,
        holder: &HolderId,
        token: FencingToken,
    ) -> Result<Option<FencedTransaction>, StoreError> {
        let op = "begin_fenced";
        let options = self.sql.driver().fenced_transaction();
        let turn = match &self.gate {
            Some(gate) => {
                let turn = gate.enter(self.server_timeout()).await;
                Some(self.settled(op, turn).await?)
            }
            None => None,
        };
        let txn = self.begin_whole(options).await;
        let txn = self.settled(op, txn).await?;
        let live = txn.query_one_raw(self.sql.fenced(key, holder, token)).await;
        let live = self.settled(op, live).await?.is_some();
        if live {
            if let Some(write) = self.sql.fence_write(key, holder, token) {
                let wrote = txn.execute_raw(write).await;
                self.settled(op, wrote).await?;
            }
            Ok(Some(FencedTransaction {
                txn,
                token,
                _turn: turn,
            }))
        } else {
            txn.rollback().await.map_err(|e| self.err(op)(e))?;
            Ok(None)
        }
    }
}
