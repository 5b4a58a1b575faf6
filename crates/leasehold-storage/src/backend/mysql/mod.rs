//! MySQL and MariaDB: their [`Driver`](super::Driver) (`driver.rs`, opened by `open.rs`),
//! their [`Dialect`], the statements only they send (`statements.rs`: the batches and purge by
//! row id, run by `batch.rs`; `session.rs`: a connection's settings), their group commit
//! (`group.rs`), Galera (`galera.rs`) and their doorbell (`doorbell.rs`, `named_locks.rs`: named
//! locks).

use sea_orm::{DbBackend, Value};

use super::{Dialect, GrantAnswer, GrantValues, Names};

mod batch;
#[cfg(feature = "mysql")]
pub mod doorbell;
mod driver;
mod galera;
mod group;
#[cfg(feature = "mysql")]
mod named_locks;
#[cfg(feature = "mysql")]
mod open;
pub(crate) mod session;
mod statements;

pub(crate) use driver::{MARIADB, MYSQL};

/// MySQL's and MariaDB's SQL.
#[derive(Debug)]
pub(crate) struct MySql {
    /// MariaDB 10.5+ (`INSERT … ON DUPLICATE KEY UPDATE … RETURNING`); Oracle MySQL lacks it
    /// and takes the grant in a transaction of two statements instead.
    returning: bool,
}

/// MariaDB 10.5+.
pub(crate) static MARIADB_SQL: MySql = MySql { returning: true };
/// Oracle MySQL 8.
pub(crate) static MYSQL_SQL: MySql = MySql { returning: false };

impl Dialect for MySql {
    fn db_backend(&self) -> DbBackend {
        DbBackend::MySql
    }

    fn now(&self) -> &'static str {
        // UTC_TIMESTAMP(6) is the statement's start; adding the time since then
        // (SYSDATE(6) - NOW(6), both in the session time zone, which sqlx sets to UTC) gives
        // the time the row is evaluated, after any lock wait. Pure UTC arithmetic: no DST
        // ambiguity from UNIX_TIMESTAMP.
        "((TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) \
         + GREATEST(0, TIMESTAMPDIFF(MICROSECOND, NOW(6), SYSDATE(6)))) DIV 1000)"
    }

    /// Galera certifies a transaction by the keys of the rows it writes, and a `FOR UPDATE`
    /// lock holds only on the node that took it: a grant on another node could commit in
    /// between and the fenced statements still commit after it. Writing the lease row puts its
    /// key in the fenced transaction, so certification refuses the commit (error 1213) when
    /// another transaction changed the row since; the later of the two writes loses. The end
    /// time and token stay as they are; `gmt_modified` moves forward (by at least a
    /// millisecond, so the row always changes and its key is always written). On one server the
    /// row is already locked by the fence, and the write changes nothing else.
    fn fence_write(&self, table: &str, now: &str) -> Option<String> {
        Some(format!(
            "UPDATE {table} SET gmt_modified = GREATEST({now}, gmt_modified + 1) \
             WHERE namespace = ? AND lease_name = ? AND holder = ? AND version = ?"
        ))
    }

    /// MySQL reads the floor with a locking read (the newest committed row, after waiting for a
    /// purge that holds it).
    fn fresh_version(&self, floor: &str) -> String {
        format!(
            "(COALESCE((SELECT f.version FROM {floor} f WHERE f.id = 1 LOCK IN SHARE MODE), 0) + 1)"
        )
    }

    fn acquire(&self, n: &Names<'_>, fresh: &str, _announce: &str) -> String {
        let (t, now) = (n.table, n.now);
        // MySQL assigns left to right, each expression seeing the earlier assignments: the
        // decision is made once, from the old row, into @leasehold_took, and every later
        // assignment follows it. The VALUES list sets it to 1 first (a plain insert is a
        // grant), so after the statement it says whether this statement granted. Times in
        // the update part are read after the row lock (see `now`), not from VALUES().
        let take = format!(
            "(status = 0 OR lease_end_time <= {now} OR (holder = VALUES(holder) AND version = ?))"
        );
        format!(
            "INSERT INTO {t} (namespace, lease_name, holder, lease_end_time, status, version, lease_value, gmt_create, gmt_modified) \
             VALUES (?, ?, ?, {now} + ?, (@leasehold_took := 1), {fresh}, ?, {now}, {now}) \
             ON DUPLICATE KEY UPDATE \
             version = IF((@leasehold_took := {take}), version + 1, version), \
             lease_value = IF(@leasehold_took, VALUES(lease_value), lease_value), \
             holder = IF(@leasehold_took, VALUES(holder), holder), \
             lease_end_time = IF(@leasehold_took, {now} + ?, lease_end_time), \
             status = IF(@leasehold_took, 1, status), \
             gmt_modified = IF(@leasehold_took, {now}, gmt_modified){}",
            if self.returning {
                " RETURNING holder, version, lease_end_time, CAST(@leasehold_took AS SIGNED) AS took"
            } else {
                ""
            }
        )
    }

    /// A locking read (`FOR UPDATE`; the upsert already holds the row's lock): under REPEATABLE
    /// READ a plain read answers from the transaction's snapshot, which in an all-or-nothing
    /// grant was taken at its first key, so a row another session inserted or changed and
    /// committed since would read as absent or as it was.
    fn grant_row(&self, t: &str) -> Option<String> {
        (!self.returning).then(|| {
            format!(
                "SELECT holder, version, lease_end_time, CAST(@leasehold_took AS SIGNED) AS took \
                 FROM {t} WHERE namespace = ? AND lease_name = ? FOR UPDATE"
            )
        })
    }

    fn grant_answer(&self) -> GrantAnswer {
        if self.returning {
            GrantAnswer::WithTook
        } else {
            GrantAnswer::ReadBack
        }
    }

    fn acquire_values(&self, v: GrantValues) -> Vec<Value> {
        let GrantValues {
            ns,
            name,
            holder,
            term,
            value,
            expected,
        } = v;
        vec![ns, name, holder, term.clone(), value, expected, term]
    }

    fn name_prefix(&self, prefix: &str, sql: &mut String, values: &mut Vec<Value>) {
        // MariaDB's LIKE misses names where a four-byte character follows a four-byte prefix
        // character (seen on 10.11 through the binary protocol): compare the prefix exactly
        // instead, bound twice.
        sql.push_str(" AND LEFT(lease_name, CHAR_LENGTH(?)) = ?");
        values.push(prefix.into());
        values.push(prefix.into());
    }

    fn catalog_unique_keys(&self) -> String {
        "SELECT CAST(GROUP_CONCAT(COLUMN_NAME ORDER BY SEQ_IN_INDEX) AS CHAR) AS cols \
         FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? \
         AND NON_UNIQUE = 0 GROUP BY INDEX_NAME"
            .to_owned()
    }

    fn catalog_columns(&self) -> String {
        "SELECT CAST(COLUMN_NAME AS CHAR) AS name, CAST(COLUMN_TYPE AS CHAR) AS type, \
         CAST(COALESCE(COLLATION_NAME, '') AS CHAR) AS collation \
         FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?"
            .to_owned()
    }

    fn needs_exact_collation(&self) -> bool {
        true
    }

    // MySQL assigns left to right, each expression seeing the earlier assignments: `updated_at`
    // is decided from the old token, before `token` changes. Without `RETURNING` the row is
    // read back `FOR UPDATE`: when the stored token is higher the upsert changes nothing, and a
    // plain read under REPEATABLE READ would answer from the caller's snapshot (its own older
    // token) instead of the newest committed row. The upsert already holds the row's lock.
    fn fence_upsert(&self, table: &str) -> (String, Option<String>) {
        let now = self.now();
        (
            format!(
                "INSERT INTO {table} (resource, token, updated_at) VALUES (?, ?, {now}) \
                 ON DUPLICATE KEY UPDATE \
                 updated_at = IF(token <= VALUES(token), VALUES(updated_at), updated_at), \
                 token = GREATEST(token, VALUES(token)){}",
                if self.returning {
                    " RETURNING token"
                } else {
                    ""
                }
            ),
            (!self.returning)
                .then(|| format!("SELECT token FROM {table} WHERE resource = ? FOR UPDATE")),
        )
    }

    fn id_column(&self) -> &'static str {
        "id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY"
    }

    fn collation_question(&self) -> Option<sea_orm::Statement> {
        Some(session::mysql_version())
    }

    /// The binary no-pad collation of the server: MariaDB's `utf8mb4_nopad_bin`, MySQL 8's
    /// `utf8mb4_0900_bin`.
    fn exact_collation(&self, answer: Option<&sea_orm::QueryResult>) -> &'static str {
        let version: String = answer
            .and_then(|r| r.try_get("", "v").ok())
            .unwrap_or_default();
        if session::is_mariadb(&version) {
            "utf8mb4_nopad_bin"
        } else {
            "utf8mb4_0900_bin"
        }
    }

    /// The default collations compare case-insensitively ("Job" = "job") and pad with spaces
    /// ("job" = "job "): either would make two names one lease. A binary, no-pad collation on
    /// the table (inherited by its columns) keeps names exact, as on PostgreSQL and SQLite.
    fn create_table(&self, table: &str, columns: &str, collation: &str) -> String {
        format!(
            "CREATE TABLE IF NOT EXISTS {table} ({columns}, \
             UNIQUE KEY uk_{table}_ns_name (namespace, lease_name)) \
             ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = {collation}"
        )
    }

    fn has_column(&self) -> &'static str {
        "SELECT CAST(count(*) AS SIGNED) AS n FROM information_schema.columns \
         WHERE table_schema = DATABASE() AND table_name = ? AND column_name = ?"
    }

    fn floor_table_ddl(&self, floor: &str) -> (String, String) {
        (
            format!(
                "CREATE TABLE IF NOT EXISTS {floor} (id INT NOT NULL PRIMARY KEY, \
                 version BIGINT NOT NULL) ENGINE = InnoDB"
            ),
            format!("INSERT IGNORE INTO {floor} (id, version) VALUES (1, 0)"),
        )
    }
}
