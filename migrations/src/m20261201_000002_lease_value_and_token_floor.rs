//! Step 2: the `lease_value` column (a tenure's value) and the token floor table
//! `{table}_floor`, whose one row keeps the largest token a purge ever removed so that a name
//! created again starts above it.

use leasehold_storage::ddl::floor_table;
use sea_orm_migration::prelude::*;

/// Adds (and on `down` drops) `lease_value` and the token floor table of a lease table.
pub struct AddLeaseValueAndTokenFloor {
    table: String,
}

impl AddLeaseValueAndTokenFloor {
    /// The migration for the lease table named `table`.
    #[must_use]
    pub fn new(table: &str) -> Self {
        Self {
            table: table.to_owned(),
        }
    }
}

impl MigrationName for AddLeaseValueAndTokenFloor {
    fn name(&self) -> &str {
        "m20261201_000002_lease_value_and_token_floor"
    }
}

// The trait's signature elides SchemaManager's lifetime; the impl must match it.
#[allow(elided_lifetimes_in_paths)]
#[async_trait::async_trait]
impl MigrationTrait for AddLeaseValueAndTokenFloor {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // The same SQL the store applies itself (one schema, however it is applied).
        leasehold_storage::ddl::add_value_and_floor(manager.get_connection(), &self.table).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(
                Table::drop()
                    .table(Alias::new(floor_table(&self.table)))
                    .if_exists()
                    .to_owned(),
            )
            .await?;
        if manager.has_column(&self.table, "lease_value").await? {
            manager
                .alter_table(
                    Table::alter()
                        .table(Alias::new(&self.table))
                        .drop_column(Alias::new("lease_value"))
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }
}
