//! `purge` on the SeaORM store: deletes old rows and raises the token floor in the same
//! transaction, so a name created again starts above every token it ever had.
//!
//! The token floor is the one row of `{table}_floor`: the largest token any purge removed. A
//! grant that inserts a row gives it the floor plus one (`Sql::fresh`), in the grant's one
//! statement. A grant racing a purge must never read the floor from before the purge and insert
//! after the purge deleted the old row, so every backend orders the two:
//!
//! | backend | the purge | a grant |
//! |---|---|---|
//! | PostgreSQL | `LOCK TABLE floor IN ACCESS EXCLUSIVE MODE`, then one statement deletes (rows locked by others skipped) and raises the floor | its statement's lock on the floor table (`ACCESS SHARE`, taken before its snapshot) waits for the purge's commit, then reads the raised floor; a grant already running holds that lock, so the purge waits for it and then finds the row granted |
//! | MySQL/MariaDB | `SELECT … FOR UPDATE` of the floor row, then the purgeable rows locked `FOR UPDATE SKIP LOCKED`, the floor raised, the rows deleted by id | reads the floor with `LOCK IN SHARE MODE` (the newest committed row, after waiting for the purge); a grant whose share lock came first makes the purge wait, and the purge then sees the row granted |
//! | SQLite | one transaction: raise the floor to the purgeable rows' largest token, delete the purgeable rows the floor covers | one writer at a time |
//!
//! Renewals and releases never read the floor: a purge does not stop them. Grants wait at most
//! one purge chunk ([`PURGE_CHUNK`] rows), and the purge's own waits are bounded by the server's
//! statement and lock bounds.

use leasehold_core::{Namespace, Term};
use sea_orm::{ConnectionTrait, DbErr, TransactionOptions};

use crate::Backend;
use crate::{SeaOrmStore, StoreError};

/// Rows deleted per purge transaction: a grant waits for one chunk at most.
pub(crate) const PURGE_CHUNK: usize = 1_000;

const OP: &str = "purge";

impl SeaOrmStore {
    /// `purge`: see the module docs.
    pub(crate) async fn purge_rows(
        &self,
        namespace: Option<&Namespace>,
        age: Term,
    ) -> Result<u64, StoreError> {
        match self.sql.backend {
            Backend::Postgres => {
                let mut n = 0;
                loop {
                    let chunk = self
                        .written(OP, || self.purge_pg_chunk(namespace, age))
                        .await
                        .map_err(self.err(OP))?;
                    n += chunk;
                    if chunk < PURGE_CHUNK as u64 {
                        return Ok(n);
                    }
                }
            }
            Backend::Sqlite => self
                .written(OP, || self.purge_sqlite(namespace, age))
                .await
                .map_err(self.err(OP)),
            Backend::MySql | Backend::MariaDb => {
                // A read that locks nothing finds the candidates; each chunk is checked again
                // under its locks.
                let ids = self
                    .candidate_ids(OP, self.sql.mysql_purge_candidates(namespace, age))
                    .await?;
                let mut n = 0;
                for chunk in ids.chunks(PURGE_CHUNK) {
                    let purged = self
                        .written(OP, || self.purge_mysql_chunk(age, chunk))
                        .await;
                    n += self.settled(OP, purged).await?;
                }
                Ok(n)
            }
        }
    }

    async fn purge_pg_chunk(&self, namespace: Option<&Namespace>, age: Term) -> Result<u64, DbErr> {
        let txn = self.begin_whole(TransactionOptions::default()).await?;
        txn.execute_raw(self.sql.pg_lock_floor()).await?;
        let row = txn
            .query_one_raw(self.sql.pg_purge_chunk(namespace, age, PURGE_CHUNK))
            .await?
            .ok_or_else(|| DbErr::Custom("purge: no row".into()))?;
        let n: i64 = row.try_get("", "n")?;
        let floors: i64 = row.try_get("", "floors")?;
        if floors != 1 {
            // Without the floor row a purge would reset tokens: delete nothing.
            return Err(DbErr::Custom(format!(
                "the token floor table {} has no row 1: run `leasehold migrate`",
                self.sql.floor_table()
            )));
        }
        txn.commit().await?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    async fn purge_sqlite(&self, namespace: Option<&Namespace>, age: Term) -> Result<u64, DbErr> {
        let txn = self.begin_whole(TransactionOptions::default()).await?;
        let raised = txn
            .execute_raw(self.sql.sqlite_raise_floor(namespace, age))
            .await?
            .rows_affected();
        if raised != 1 {
            return Err(DbErr::Custom(format!(
                "the token floor table {} has no row 1: run `leasehold migrate`",
                self.sql.floor_table()
            )));
        }
        let n = txn
            .execute_raw(self.sql.sqlite_purge(namespace, age))
            .await?
            .rows_affected();
        txn.commit().await?;
        Ok(n)
    }

    async fn purge_mysql_chunk(&self, age: Term, ids: &[i64]) -> Result<u64, DbErr> {
        let txn = self.begin_whole(TransactionOptions::default()).await?;
        if txn
            .query_one_raw(self.sql.mysql_lock_floor())
            .await?
            .is_none()
        {
            return Err(DbErr::Custom(format!(
                "the token floor table {} has no row 1: run `leasehold migrate`",
                self.sql.floor_table()
            )));
        }
        let mut locked = Vec::with_capacity(ids.len());
        let mut top = 0_i64;
        for row in txn
            .query_all_raw(self.sql.mysql_lock_purgeable(age, ids))
            .await?
        {
            locked.push(row.try_get::<i64>("", "id")?);
            top = top.max(row.try_get::<i64>("", "version")?);
        }
        if locked.is_empty() {
            return Ok(0);
        }
        txn.execute_raw(self.sql.mysql_raise_floor(top)).await?;
        let n = txn
            .execute_raw(self.sql.mysql_delete_ids(&locked))
            .await?
            .rows_affected();
        txn.commit().await?;
        Ok(n)
    }
}
