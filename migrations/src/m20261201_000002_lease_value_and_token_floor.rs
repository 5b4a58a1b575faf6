//! Step 2: the `lease_value` column (a tenure's value) and the token floor table
//! `{table}_floor`, whose one row keeps the largest token a purge ever removed so that a name
//! created again starts above it.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend, Statement};

/// The largest value, in UTF-8 bytes (`leasehold_core::MAX_VALUE_BYTES`).
pub const VALUE_CHARS: u32 = 1024;

/// The token floor table of the lease table `table`: `{table}_floor`.
#[must_use]
pub fn floor_table(table: &str) -> String {
    format!("{table}_floor")
}

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

#[derive(DeriveIden, Clone, Copy)]
enum Floor {
    Id,
    Version,
}

// The trait's signature elides SchemaManager's lifetime; the impl must match it.
#[allow(elided_lifetimes_in_paths)]
#[async_trait::async_trait]
impl MigrationTrait for AddLeaseValueAndTokenFloor {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let backend = manager.get_database_backend();
        if !manager.has_column(&self.table, "lease_value").await? {
            let added = manager
                .alter_table(
                    Table::alter()
                        .table(Alias::new(&self.table))
                        .add_column(
                            ColumnDef::new(Alias::new("lease_value"))
                                .string_len(VALUE_CHARS)
                                .null(),
                        )
                        .to_owned(),
                )
                .await;
            // Two first runs at once: the other one may have added it.
            if let Err(e) = added
                && !manager.has_column(&self.table, "lease_value").await?
            {
                return Err(e);
            }
        }
        let floor = floor_table(&self.table);
        let mut create = Table::create();
        create
            .table(Alias::new(&floor))
            .if_not_exists()
            .col(ColumnDef::new(Floor::Id).integer().not_null().primary_key())
            .col(ColumnDef::new(Floor::Version).big_integer().not_null());
        if backend == DbBackend::MySql {
            create.engine("InnoDB");
        }
        manager.create_table(create).await?;
        let insert = match backend {
            DbBackend::MySql => format!("INSERT IGNORE INTO {floor} (id, version) VALUES (1, 0)"),
            _ => format!(
                "INSERT INTO {floor} (id, version) VALUES (1, 0) ON CONFLICT (id) DO NOTHING"
            ),
        };
        manager
            .get_connection()
            .execute_raw(Statement::from_string(backend, insert))
            .await?;
        Ok(())
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
