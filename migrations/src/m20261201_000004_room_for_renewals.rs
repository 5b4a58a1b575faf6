//! Step 4: on PostgreSQL, the lease table keeps half of each page free (`fillfactor = 50`), so a
//! renewal — the most frequent statement by far — is a heap-only (HOT) update: the new row
//! version goes on the same page and neither index is touched. Nothing on the other backends
//! (InnoDB and SQLite update a row in place).
//!
//! **Why.** With the default fillfactor of 100 the pages are full from the first grants on, so
//! almost no update finds room on its page: each renewal writes its row version to another page
//! and a new entry into both indexes (the primary key and the unique key on namespace and name).
//! Measured with `leasehold-lab capacity` (10 processes × 10,000 leases, term 30 s, 1.2 million
//! renewals in 120 s, a throwaway PostgreSQL 15): 1 % of the updates were HOT at fillfactor 100,
//! 100 % at 50; server CPU per renewal 14.9 → 8.8 µs, WAL per renewal 463 → 180 bytes
//! (docs/benchmarks.md). A lease table is small (a row per name), so the doubled page count costs
//! little.
//!
//! The setting applies to pages written after it: a table filled before this step gets it as its
//! pages are rewritten. `VACUUM FULL {table}` (an exclusive lock for as long as it copies the
//! table, milliseconds for thousands of rows) applies it to every page at once. A fillfactor the
//! operator set on the table is kept, and a role that does not own the table leaves it as it is.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend, Statement};

/// Sets (and on `down` resets) the lease table's fillfactor on PostgreSQL.
pub struct RoomForRenewals {
    table: String,
}

impl RoomForRenewals {
    /// The step for the lease table named `table` (an identifier: letters, digits, `_`).
    #[must_use]
    pub fn new(table: &str) -> Self {
        Self {
            table: table.to_owned(),
        }
    }

    /// The table's fillfactor if one is set (PostgreSQL), `None` if it has the default or the
    /// table does not exist.
    ///
    /// # Errors
    /// The database's error if the catalog read fails.
    pub async fn fillfactor<C: ConnectionTrait>(&self, conn: &C) -> Result<Option<u8>, DbErr> {
        leasehold_storage::ddl::fillfactor(conn, &self.table).await
    }
}

impl MigrationName for RoomForRenewals {
    fn name(&self) -> &str {
        "m20261201_000004_room_for_renewals"
    }
}

// The trait's signature elides SchemaManager's lifetime; the impl must match it.
#[allow(elided_lifetimes_in_paths)]
#[async_trait::async_trait]
impl MigrationTrait for RoomForRenewals {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // The same SQL the store applies itself (one schema, however it is applied).
        leasehold_storage::ddl::room_for_renewals(manager.get_connection(), &self.table).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() != DbBackend::Postgres
            || !manager.has_table(&self.table).await?
        {
            return Ok(());
        }
        let sql = format!("ALTER TABLE {} RESET (fillfactor)", self.table);
        manager
            .get_connection()
            .execute_raw(Statement::from_string(DbBackend::Postgres, sql))
            .await?;
        Ok(())
    }
}
