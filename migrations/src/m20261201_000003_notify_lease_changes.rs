//! Step 3 (optional, opt in with `ensure_change_notify`): on PostgreSQL, a trigger that notifies
//! observers of every change of a lease's holder, token or status (grants, take-overs,
//! releases) by any writer, at commit. Nothing on the other backends.
//!
//! **Its cost**: a transaction that notifies takes PostgreSQL's database-wide notify lock at
//! commit and holds it through its commit record's flush, so concurrent notifying commits no
//! longer share a WAL flush (group commit). Measured with pgbench on this machine (PostgreSQL
//! 15, 8 clients, a grant-like upsert per transaction): about 2,100–2,200 transactions/s without
//! the trigger, 310–330 with it; one client: no difference (about 250/s, one flush each).
//! Renewals evaluate the `WHEN` clause and notify nothing. That is why leasehold does not
//! install it by default: the holder's doorbell announces its grants with a separate
//! `pg_notify` after the commit instead (a statement with no write, hence no flush under the
//! lock), batched, off the grant's path. Install the trigger when writers without a doorbell
//! (the CLI, other programs) must be pushed too and grants are not concurrent.
//!
//! The trigger `{table}_lh_changed` runs `pg_notify('leasehold_lease_changed', payload)` after an
//! `INSERT`, and after an `UPDATE` only when a column other than the end time and the audit
//! times changed (`OLD.c IS DISTINCT FROM NEW.c` for each): a renewal moves only the end time,
//! so renewals — by far the most frequent statement — evaluate the `WHEN` clause and notify
//! nothing. The columns compared are the table's at the time the step runs (holder, status,
//! version, and any later column such as a lease value); a step that adds a column re-runs
//! this one. The payload names the key as `leasehold_storage::doorbell::payload` does.
//!
//! A notification is sent at commit, never for a statement that rolled back, so an observer
//! never hears of a change the database did not keep.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::ConnectionTrait;

/// Creates (and on `down` drops) the change trigger of the lease table under a given name.
pub struct NotifyLeaseChanges {
    table: String,
}

impl NotifyLeaseChanges {
    /// The step for the table named `table` (an identifier: letters, digits, `_`).
    #[must_use]
    pub fn new(table: &str) -> Self {
        Self {
            table: table.to_owned(),
        }
    }

    /// Whether the trigger is there (PostgreSQL; `true` elsewhere, where there is none to make).
    ///
    /// # Errors
    /// The database's error.
    pub async fn is_installed<C: ConnectionTrait>(&self, conn: &C) -> Result<bool, DbErr> {
        leasehold_storage::ddl::change_notify_installed(conn, &self.table).await
    }
}

impl MigrationName for NotifyLeaseChanges {
    fn name(&self) -> &str {
        "m20261201_000003_notify_lease_changes"
    }
}

// The trait's signature elides SchemaManager's lifetime; the impl must match it.
#[allow(elided_lifetimes_in_paths)]
#[async_trait::async_trait]
impl MigrationTrait for NotifyLeaseChanges {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // The same SQL the store applies itself (one schema, however it is applied).
        leasehold_storage::ddl::install_change_notify(manager.get_connection(), &self.table).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        leasehold_storage::ddl::drop_change_notify(manager.get_connection(), &self.table).await
    }
}
