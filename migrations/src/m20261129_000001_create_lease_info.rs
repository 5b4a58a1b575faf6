//! Step 1: the `lease_info` table, unique on (namespace, lease_name).

use sea_orm_migration::prelude::*;

/// Columns of the lease table (see DESIGN.md §3).
#[derive(DeriveIden, Clone, Copy)]
pub enum LeaseInfo {
    /// Row id.
    Id,
    /// Namespace (the seeds' business `name`, Spring's region).
    Namespace,
    /// Lease name, unique within its namespace.
    LeaseName,
    /// Current or last holder.
    Holder,
    /// When the grant ends, database time in ms.
    LeaseEndTime,
    /// 1 held, 0 released.
    Status,
    /// Fencing token.
    Version,
    /// Created, database time in ms.
    GmtCreate,
    /// Last modified, database time in ms.
    GmtModified,
}

/// Creates (and on `down` drops) the lease table under a given name.
pub struct CreateLeaseInfo {
    table: String,
}

impl CreateLeaseInfo {
    /// The migration for the table named `table`.
    #[must_use]
    pub fn new(table: &str) -> Self {
        Self {
            table: table.to_owned(),
        }
    }
}

impl MigrationName for CreateLeaseInfo {
    fn name(&self) -> &str {
        "m20261129_000001_create_lease_info"
    }
}

// The trait's signature elides SchemaManager's lifetime; the impl must match it.
#[allow(elided_lifetimes_in_paths)]
#[async_trait::async_trait]
impl MigrationTrait for CreateLeaseInfo {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // The same SQL the store applies itself (one schema, however it is applied).
        leasehold_storage::ddl::create_first_step_table(manager.get_connection(), &self.table).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(
                Table::drop()
                    .table(Alias::new(&self.table))
                    .if_exists()
                    .to_owned(),
            )
            .await
    }
}
