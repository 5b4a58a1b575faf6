//! Schema migrations for leasehold's `lease_info` table, for applications that run their
//! migrations with `sea-orm-migration`.
//!
//! leasehold does not need this crate to run: the store applies the same steps itself, as plain
//! SQL (`leasehold_storage::ddl`, called by the connection builder unless told not to). Each step
//! here runs exactly that SQL, so there is one schema whichever way it is applied. Two ways in:
//! - [`Migrator`], a regular `sea-orm-migration` migrator for the default table name
//!   (`lease_info`);
//! - [`create_lease_table`] / [`drop_lease_table`], which apply the same steps to a table with
//!   any prefix, idempotently.
//!
//! Plain SQL for each backend, for people who manage schemas by hand, lives in `migrations/sql/`.
//!
//! Times are `BIGINT` milliseconds since the Unix epoch, computed by the database's own clock:
//! one representation on SQLite, PostgreSQL and MySQL, with no time-zone or precision surprises.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod m20261129_000001_create_lease_info;
mod m20261201_000002_lease_value_and_token_floor;
mod m20261201_000003_notify_lease_changes;
mod m20261201_000004_room_for_renewals;

use leasehold_storage::ddl;
pub use leasehold_storage::ddl::{
    CHANGES_CHANNEL, DEFAULT_TABLE, FILLFACTOR, VALUE_CHARS, floor_table, table_name,
};
pub use m20261129_000001_create_lease_info::{CreateLeaseInfo, LeaseInfo};
pub use m20261201_000002_lease_value_and_token_floor::AddLeaseValueAndTokenFloor;
pub use m20261201_000003_notify_lease_changes::NotifyLeaseChanges;
pub use m20261201_000004_room_for_renewals::RoomForRenewals;
pub use sea_orm_migration;
use sea_orm_migration::prelude::*;

/// The sea-orm-migration migrator for the default table name.
pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        // Step 3 (`NotifyLeaseChanges`, the optional change trigger) is not in the list: it
        // costs PostgreSQL its group commit under concurrent grants (see its docs); add it to
        // your own migrator, or call `ensure_change_notify`, to opt in.
        vec![
            Box::new(CreateLeaseInfo::new(DEFAULT_TABLE)),
            Box::new(AddLeaseValueAndTokenFloor::new(DEFAULT_TABLE)),
            Box::new(RoomForRenewals::new(DEFAULT_TABLE)),
        ]
    }
}

/// Brings the lease table `table` to the newest schema, idempotently
/// (`leasehold_storage::ddl::create_lease_table`): creates it (and its unique key) if it does
/// not exist, then runs every later step that is missing (step 2: the `lease_value` column and
/// the token floor table `{table}_floor`; step 4: on PostgreSQL, room on each page for
/// renewals, [`RoomForRenewals`]). A table made by an older version keeps its rows.
///
/// # Errors
/// The database's error if a statement fails (for example a read-only database).
pub async fn create_lease_table<'c, C>(conn: C, table: &str) -> Result<(), DbErr>
where
    C: sea_orm_migration::IntoSchemaManagerConnection<'c>,
{
    ddl::create_lease_table(SchemaManager::new(conn).get_connection(), table).await
}

/// Runs only the first step on `table` (the table as leasehold 0.1 made it), for tests of the
/// upgrade path.
///
/// # Errors
/// The database's error if the statement fails.
#[doc(hidden)]
pub async fn create_first_step_table<'c, C>(conn: C, table: &str) -> Result<(), DbErr>
where
    C: sea_orm_migration::IntoSchemaManagerConnection<'c>,
{
    ddl::create_first_step_table(SchemaManager::new(conn).get_connection(), table).await
}

/// Opts in to the change trigger (step 3, PostgreSQL; `leasehold_storage::ddl::ensure_change_notify`):
/// creates it on the existing lease table `table` if it is missing; answers whether it made it.
/// Nothing on the other backends.
///
/// # Errors
/// The database's error if a statement fails.
pub async fn ensure_change_notify<'c, C>(conn: C, table: &str) -> Result<bool, DbErr>
where
    C: sea_orm_migration::IntoSchemaManagerConnection<'c>,
{
    ddl::ensure_change_notify(SchemaManager::new(conn).get_connection(), table).await
}

/// Drops the lease table `table`, its token floor table and its change trigger, if they exist.
///
/// # Errors
/// The database's error if a statement fails.
pub async fn drop_lease_table<'c, C>(conn: C, table: &str) -> Result<(), DbErr>
where
    C: sea_orm_migration::IntoSchemaManagerConnection<'c>,
{
    ddl::drop_lease_table(SchemaManager::new(conn).get_connection(), table).await
}
