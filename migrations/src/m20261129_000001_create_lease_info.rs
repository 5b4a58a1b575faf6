//! Step 1: the `lease_info` table, unique on (namespace, lease_name).

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::DbBackend;

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

/// The binary no-pad collation of the server: MariaDB's `utf8mb4_nopad_bin`, MySQL 8's
/// `utf8mb4_0900_bin`.
async fn mysql_exact_collation(manager: &SchemaManager<'_>) -> Result<&'static str, DbErr> {
    use sea_orm_migration::sea_orm::{ConnectionTrait, Statement};
    let row = manager
        .get_connection()
        .query_one_raw(Statement::from_string(
            DbBackend::MySql,
            "SELECT VERSION() AS v",
        ))
        .await?;
    let version: String = row
        .map(|r| r.try_get("", "v"))
        .transpose()?
        .unwrap_or_default();
    Ok(if version.to_ascii_lowercase().contains("mariadb") {
        "utf8mb4_nopad_bin"
    } else {
        "utf8mb4_0900_bin"
    })
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
        let mysql = manager.get_database_backend() == DbBackend::MySql;
        let text =
            |col: LeaseInfo, len: u32| ColumnDef::new(col).string_len(len).not_null().to_owned();
        let mut table = Table::create();
        table
            .table(Alias::new(&self.table))
            .if_not_exists()
            .col(
                ColumnDef::new(LeaseInfo::Id)
                    .big_integer()
                    .not_null()
                    .auto_increment()
                    .primary_key(),
            )
            .col(text(LeaseInfo::Namespace, 128).default(""))
            .col(text(LeaseInfo::LeaseName, 255))
            .col(text(LeaseInfo::Holder, 255))
            .col(
                ColumnDef::new(LeaseInfo::LeaseEndTime)
                    .big_integer()
                    .not_null(),
            )
            .col(ColumnDef::new(LeaseInfo::Status).small_integer().not_null())
            .col(ColumnDef::new(LeaseInfo::Version).big_integer().not_null())
            .col(
                ColumnDef::new(LeaseInfo::GmtCreate)
                    .big_integer()
                    .not_null(),
            )
            .col(
                ColumnDef::new(LeaseInfo::GmtModified)
                    .big_integer()
                    .not_null(),
            )
            // The unique key is part of CREATE TABLE, so concurrent first runs cannot race on a
            // separate CREATE INDEX (sea-query drops IF NOT EXISTS from it on MySQL).
            .index(
                Index::create()
                    .name(format!("uk_{}_ns_name", self.table))
                    .col(LeaseInfo::Namespace)
                    .col(LeaseInfo::LeaseName)
                    .unique(),
            );
        // On MySQL the default collations compare case-insensitively ("Job" = "job") and pad with
        // spaces ("job" = "job "): either would make two names one lease. A binary, no-pad
        // collation on the table (inherited by its columns) keeps names exact, as on PostgreSQL
        // and SQLite; utf8mb4 stores emoji.
        if mysql {
            let collation = mysql_exact_collation(manager).await?;
            table
                .engine("InnoDB")
                .character_set("utf8mb4")
                .collate(collation);
        }
        manager.create_table(table).await
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
