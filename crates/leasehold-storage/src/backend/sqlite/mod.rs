//! SQLite: its [`Driver`](super::Driver) (`driver.rs`), its [`Dialect`], the statements only it
//! sends (`statements.rs`: the purge), its group commit (`group.rs`), its doorbell
//! (`doorbell.rs`: datagram sockets beside the file), the gate that lets one writer of this
//! process at a time at a file (`gate.rs`) and the open of a file that another connection is
//! switching to WAL (`open.rs`).

use sea_orm::{DatabaseConnection, DbBackend, Value};

use super::Dialect;

#[cfg(all(feature = "sqlite", unix))]
pub mod doorbell;
mod driver;
pub(crate) mod gate;
mod group;
#[cfg(feature = "sqlite")]
pub(crate) mod open;
mod statements;

pub(crate) use driver::DRIVER;

/// SQLite's SQL.
#[derive(Debug)]
pub(crate) struct Sqlite;

impl Dialect for Sqlite {
    fn db_backend(&self) -> DbBackend {
        DbBackend::Sqlite
    }

    fn now(&self) -> &'static str {
        // 'now' is the same for every use within one statement, and read after the write
        // lock is taken (SQLite waits for it before the statement evaluates anything).
        "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)"
    }

    /// The fence: SQLite has no row locks; the transaction holds the database's write lock
    /// instead.
    fn fence_lock(&self) -> &'static str {
        ""
    }

    fn name_prefix(&self, prefix: &str, sql: &mut String, values: &mut Vec<Value>) {
        // SQLite's LIKE ignores ASCII case: compare the prefix exactly instead, bound twice.
        sql.push_str(" AND substr(lease_name, 1, length(?)) = ?");
        values.push(prefix.into());
        values.push(prefix.into());
    }

    fn catalog_unique_keys(&self) -> String {
        "SELECT (SELECT group_concat(name, ',') FROM (SELECT name FROM pragma_index_info(il.name) ORDER BY seqno)) AS cols \
         FROM pragma_index_list(?) il WHERE il.\"unique\" = 1 AND il.partial = 0"
            .to_owned()
    }

    fn catalog_columns(&self) -> String {
        "SELECT name, type, '' AS collation FROM pragma_table_info(?)".to_owned()
    }

    fn fence_upsert(&self, table: &str) -> (String, Option<String>) {
        let now = self.now();
        (
            format!(
                "INSERT INTO {table} (resource, token, updated_at) VALUES (?, ?, {now}) \
                 ON CONFLICT (resource) DO UPDATE SET \
                 token = max(token, excluded.token), \
                 updated_at = CASE WHEN token <= excluded.token THEN excluded.updated_at \
                 ELSE updated_at END \
                 RETURNING token"
            ),
            None,
        )
    }

    fn id_column(&self) -> &'static str {
        "id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT"
    }

    fn has_column(&self) -> &'static str {
        "SELECT count(*) AS n FROM pragma_table_info(?) WHERE name = ?"
    }
}

/// The canonical path of the file `db` opens, if it is a SQLite file (not an in-memory or
/// `file:` URI database): what the doorbell's directory and the write gate are keyed by.
#[cfg(feature = "sqlite")]
pub(crate) fn database_file(db: &DatabaseConnection) -> Option<std::path::PathBuf> {
    if db.get_database_backend() != DbBackend::Sqlite {
        return None;
    }
    let options = db.get_sqlite_connection_pool().connect_options();
    let file = options.get_filename();
    let text = file.to_string_lossy();
    if text.is_empty() || text.contains(":memory:") || text.starts_with("file:") {
        return None;
    }
    std::fs::canonicalize(file).ok()
}

#[cfg(not(feature = "sqlite"))]
pub(crate) fn database_file(_: &DatabaseConnection) -> Option<std::path::PathBuf> {
    None
}
