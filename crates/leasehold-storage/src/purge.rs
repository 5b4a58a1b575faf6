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
use sea_orm::DbErr;

use crate::{SeaOrmStore, StoreError};

/// Rows deleted per purge transaction: a grant waits for one chunk at most.
pub(crate) const PURGE_CHUNK: usize = 1_000;

impl SeaOrmStore {
    /// `purge`: see the module docs; each database's transactions are its driver's.
    pub(crate) async fn purge_rows(
        &self,
        namespace: Option<&Namespace>,
        age: Term,
    ) -> Result<u64, StoreError> {
        self.sql.driver().purge(self, namespace, age).await
    }
}

/// The error of a purge that found no token floor row: without it a purge would reset tokens,
/// so it deletes nothing.
pub(crate) fn no_floor(store: &SeaOrmStore) -> DbErr {
    DbErr::Custom(format!(
        "the token floor table {} has no row 1: run `leasehold migrate`",
        store.sql.floor_table()
    ))
}
