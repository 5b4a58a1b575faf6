//! Schema migrations for leasehold's `lease_info` table.
//!
//! Two ways in:
//! - [`Migrator`], a regular `sea-orm-migration` migrator for the default table name
//!   (`lease_info`), for applications that already run their migrations with SeaORM;
//! - [`create_lease_table`] / [`drop_lease_table`], which apply the same migration to a table
//!   with any prefix, idempotently. `leasehold-storage`'s connection builder calls
//!   [`create_lease_table`] unless told not to.
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

pub use m20261129_000001_create_lease_info::{CreateLeaseInfo, LeaseInfo};
pub use m20261201_000002_lease_value_and_token_floor::{
    AddLeaseValueAndTokenFloor, VALUE_CHARS, floor_table,
};
pub use m20261201_000003_notify_lease_changes::{CHANGES_CHANNEL, NotifyLeaseChanges};
pub use m20261201_000004_room_for_renewals::{FILLFACTOR, RoomForRenewals};
pub use sea_orm_migration;
use sea_orm_migration::prelude::*;

/// The default table name (prefix empty).
pub const DEFAULT_TABLE: &str = "lease_info";

/// The name of the lease table for a prefix: `{prefix}lease_info`.
#[must_use]
pub fn table_name(prefix: &str) -> String {
    format!("{prefix}{DEFAULT_TABLE}")
}

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

/// Brings the lease table `table` to the newest schema, idempotently: creates it (and its
/// unique key) if it does not exist, then runs every later step that is missing (step 2: the
/// `lease_value` column and the token floor table `{table}_floor`; step 4: on PostgreSQL, room
/// on each page for renewals, [`RoomForRenewals`]). A table made by an older version keeps its
/// rows.
///
/// # Errors
/// The database's error if a statement fails (for example a read-only database).
pub async fn create_lease_table<'c, C>(conn: C, table: &str) -> Result<(), DbErr>
where
    C: sea_orm_migration::IntoSchemaManagerConnection<'c>,
{
    let manager = SchemaManager::new(conn);
    CreateLeaseInfo::new(table).up(&manager).await?;
    AddLeaseValueAndTokenFloor::new(table).up(&manager).await?;
    RoomForRenewals::new(table).up(&manager).await
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
    CreateLeaseInfo::new(table)
        .up(&SchemaManager::new(conn))
        .await
}

/// Opts in to the change trigger (step 3, PostgreSQL): creates it on the existing lease table
/// `table` if it is missing; answers whether it made it. Nothing on the other backends. Every
/// writer's grants and releases (the CLI's, other programs') are then pushed to observers,
/// at the cost described on [`NotifyLeaseChanges`]; without it, observers are told of grants
/// by the granting service's doorbell and poll the rest.
///
/// # Errors
/// The database's error if a statement fails.
pub async fn ensure_change_notify<'c, C>(conn: C, table: &str) -> Result<bool, DbErr>
where
    C: sea_orm_migration::IntoSchemaManagerConnection<'c>,
{
    let manager = SchemaManager::new(conn);
    let step = NotifyLeaseChanges::new(table);
    if step.is_installed(manager.get_connection()).await? {
        return Ok(false);
    }
    step.up(&manager).await?;
    Ok(true)
}

/// Drops the lease table `table` and its token floor table, if they exist (every step's
/// `down`, newest first: the change trigger, if any, too).
///
/// # Errors
/// The database's error if the statement fails.
pub async fn drop_lease_table<'c, C>(conn: C, table: &str) -> Result<(), DbErr>
where
    C: sea_orm_migration::IntoSchemaManagerConnection<'c>,
{
    let manager = SchemaManager::new(conn);
    NotifyLeaseChanges::new(table).down(&manager).await?;
    if manager.has_table(table).await? {
        AddLeaseValueAndTokenFloor::new(table)
            .down(&manager)
            .await?;
    } else {
        manager
            .drop_table(
                Table::drop()
                    .table(Alias::new(floor_table(table)))
                    .if_exists()
                    .to_owned(),
            )
            .await?;
    }
    CreateLeaseInfo::new(table).down(&manager).await
}
