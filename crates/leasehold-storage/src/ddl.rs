//! The lease table's schema as plain SQL, applied by the store itself: the table (step 1), the
//! `lease_value` column and the token floor table (step 2), the optional change trigger (step 3,
//! PostgreSQL) and room on each page for renewals (step 4, PostgreSQL).
//!
//! This is the one source of the schema: [`StoreBuilder::connect`](crate::StoreBuilder::connect)
//! and [`SeaOrmStore::migrate_all`](crate::SeaOrmStore::migrate_all) call it, the
//! `leasehold-migration` crate wraps each step for applications that run their migrations with
//! `sea-orm-migration`, and `migrations/sql/` has the same statements to apply by hand. Every
//! function is idempotent and safe to run from several processes at once.
//!
//! Times are `BIGINT` milliseconds since the Unix epoch, computed by the database's own clock:
//! one representation on SQLite, PostgreSQL and MySQL, with no time-zone or precision surprises.
//!
//! # Examples
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), sea_orm::DbErr> {
//! use leasehold_storage::ddl;
//! let db = sea_orm::Database::connect("sqlite::memory:").await?;
//! ddl::create_lease_table(&db, "jobs_lease_info").await?;
//! ddl::create_lease_table(&db, "jobs_lease_info").await?; // a second run changes nothing
//! ddl::drop_lease_table(&db, "jobs_lease_info").await?;
//! # Ok(()) }
//! ```

use sea_orm::{ConnectionTrait, DbErr, Statement};

use crate::backend::{Dialect, protocol_dialect};

pub use crate::backend::postgres::notify::{
    CHANGES_CHANNEL, change_notify_installed, drop_change_notify, ensure_change_notify,
    install_change_notify,
};

/// The default table name (prefix empty).
pub const DEFAULT_TABLE: &str = "lease_info";

/// The longest lease value, in characters (the `lease_value` column's length).
pub const VALUE_CHARS: u32 = 1024;

/// The fillfactor step 4 gives the lease table on PostgreSQL: half of each page stays free, so
/// a renewal is a heap-only update (same page, no index entry).
pub const FILLFACTOR: u8 = 50;

/// The name of the lease table for a prefix: `{prefix}lease_info`.
#[must_use]
pub fn table_name(prefix: &str) -> String {
    format!("{prefix}{DEFAULT_TABLE}")
}

/// The token floor table of lease table `table`: `{table}_floor`.
#[must_use]
pub fn floor_table(table: &str) -> String {
    format!("{table}_floor")
}

async fn exec<C: ConnectionTrait>(conn: &C, sql: String) -> Result<(), DbErr> {
    conn.execute_raw(Statement::from_string(conn.get_database_backend(), sql))
        .await
        .map(|_| ())
}

/// The SQL of the database `conn` talks to.
fn dialect_of<C: ConnectionTrait>(conn: &C) -> &'static dyn Dialect {
    protocol_dialect(conn.get_database_backend())
}

/// Runs a `CREATE ... IF NOT EXISTS` of `table`'s schema, safe against a concurrent first run
/// ([`Dialect::serialised_create`]).
pub(crate) async fn exec_create<C: ConnectionTrait>(
    conn: &C,
    table: &str,
    sql: String,
) -> Result<(), DbErr> {
    if let Some(locked) = dialect_of(conn).serialised_create(table, &sql) {
        return conn.execute_unprepared(&locked).await.map(|_| ());
    }
    exec(conn, sql).await
}

/// Brings the lease table `table` to the newest schema, idempotently: creates it (and its
/// unique key) if it does not exist, then applies every later step that is missing (the
/// `lease_value` column and the token floor table; on PostgreSQL, room on each page for
/// renewals unless the operator set a fillfactor). A table made by an older version keeps its
/// rows. The change trigger is not made here: see [`ensure_change_notify`].
///
/// # Errors
/// The database's error if a statement fails (for example a read-only database).
pub async fn create_lease_table<C: ConnectionTrait>(conn: &C, table: &str) -> Result<(), DbErr> {
    create_first_step_table(conn, table).await?;
    add_value_and_floor(conn, table).await?;
    room_for_renewals(conn, table).await
}

/// Step 1 only: the table as leasehold 0.1 made it, unique on `(namespace, lease_name)`.
///
/// # Errors
/// The database's error if the statement fails.
pub async fn create_first_step_table<C: ConnectionTrait>(
    conn: &C,
    table: &str,
) -> Result<(), DbErr> {
    let dialect = dialect_of(conn);
    let id = dialect.id_column();
    // The unique key is part of CREATE TABLE, so concurrent first runs cannot race on a
    // separate CREATE INDEX.
    let columns = format!(
        "{id}, namespace VARCHAR(128) NOT NULL DEFAULT '', lease_name VARCHAR(255) NOT NULL, \
         holder VARCHAR(255) NOT NULL, lease_end_time BIGINT NOT NULL, status SMALLINT NOT NULL, \
         version BIGINT NOT NULL, gmt_create BIGINT NOT NULL, gmt_modified BIGINT NOT NULL"
    );
    let collation = exact_collation(conn).await?;
    let sql = dialect.create_table(table, &columns, collation);
    exec_create(conn, table, sql).await
}

/// The collation that keeps names exact on the server of `conn` ([`Dialect::exact_collation`];
/// empty where the default does).
pub(crate) async fn exact_collation<C: ConnectionTrait>(conn: &C) -> Result<&'static str, DbErr> {
    let dialect = dialect_of(conn);
    let Some(question) = dialect.collation_question() else {
        return Ok(dialect.exact_collation(None));
    };
    let answer = conn.query_one_raw(question).await?;
    Ok(dialect.exact_collation(answer.as_ref()))
}

/// Whether `table` has column `column`.
async fn has_column<C: ConnectionTrait>(
    conn: &C,
    table: &str,
    column: &str,
) -> Result<bool, DbErr> {
    let backend = conn.get_database_backend();
    let sql = dialect_of(conn).has_column();
    let values: Vec<sea_orm::Value> = vec![table.into(), column.into()];
    let row = conn
        .query_one_raw(Statement::from_sql_and_values(backend, sql, values))
        .await?;
    let n: i64 = row.map(|r| r.try_get("", "n")).transpose()?.unwrap_or(0);
    Ok(n > 0)
}

/// Step 2: the `lease_value` column, and the token floor table with its one row, whose version
/// is the largest token a purge ever removed, so that a name created again starts above it.
///
/// # Errors
/// The database's error if a statement fails.
pub async fn add_value_and_floor<C: ConnectionTrait>(conn: &C, table: &str) -> Result<(), DbErr> {
    if !has_column(conn, table, "lease_value").await? {
        let added = exec(
            conn,
            format!("ALTER TABLE {table} ADD COLUMN lease_value VARCHAR({VALUE_CHARS}) NULL"),
        )
        .await;
        // Two first runs at once: the other one may have added it.
        if let Err(e) = added
            && !has_column(conn, table, "lease_value").await?
        {
            return Err(e);
        }
    }
    let floor = floor_table(table);
    let (create, insert) = dialect_of(conn).floor_table_ddl(&floor);
    exec_create(conn, table, create).await?;
    exec(conn, insert).await
}

/// Step 4, PostgreSQL: the lease table keeps half of each page free (`fillfactor` =
/// [`FILLFACTOR`]), so a renewal — the most frequent statement by far — is a heap-only update:
/// the new row version goes on the same page and neither index is touched. Nothing on the other
/// backends (InnoDB and SQLite update a row in place). It applies to pages written afterwards;
/// `VACUUM FULL {table}` applies it to every page at once. A fillfactor the operator set is
/// kept, and a role that does not own the table leaves it as it is (the step is about speed,
/// not shape).
///
/// # Errors
/// The database's error if a statement fails.
pub async fn room_for_renewals<C: ConnectionTrait>(conn: &C, table: &str) -> Result<(), DbErr> {
    let Some((None, true)) = fillfactor_and_owner(conn, table).await? else {
        return Ok(());
    };
    // SHARE UPDATE EXCLUSIVE: grants and renewals go on meanwhile.
    exec(
        conn,
        format!("ALTER TABLE {table} SET (fillfactor = {FILLFACTOR})"),
    )
    .await
}

/// The fillfactor set on `table` (PostgreSQL; `None` elsewhere, for no table, or when none is
/// set).
///
/// # Errors
/// The database's error.
pub async fn fillfactor<C: ConnectionTrait>(conn: &C, table: &str) -> Result<Option<u8>, DbErr> {
    Ok(fillfactor_and_owner(conn, table)
        .await?
        .and_then(|(ff, _)| ff))
}

async fn fillfactor_and_owner<C: ConnectionTrait>(
    conn: &C,
    table: &str,
) -> Result<Option<(Option<u8>, bool)>, DbErr> {
    let Some(sql) = dialect_of(conn).fillfactor_and_owner() else {
        return Ok(None);
    };
    let row = conn
        .query_one_raw(Statement::from_sql_and_values(
            conn.get_database_backend(),
            sql,
            [table.into()],
        ))
        .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    let options: String = row.try_get("", "options")?;
    let owner: bool = row.try_get("", "owner")?;
    let fillfactor = options
        .split(',')
        .find_map(|o| o.strip_prefix("fillfactor="))
        .and_then(|v| v.parse().ok());
    Ok(Some((fillfactor, owner)))
}

/// Drops the lease table `table`, its token floor table and its change trigger, if they exist.
///
/// # Errors
/// The database's error if a statement fails.
pub async fn drop_lease_table<C: ConnectionTrait>(conn: &C, table: &str) -> Result<(), DbErr> {
    drop_change_notify(conn, table).await?;
    exec(conn, format!("DROP TABLE IF EXISTS {}", floor_table(table))).await?;
    exec(conn, format!("DROP TABLE IF EXISTS {table}")).await
}
