//! Fencing at a resource outside the lease database: a second database, reached through any
//! SeaORM connection.
//!
//! [`SeaOrmStore::begin_fenced`](crate::SeaOrmStore::begin_fenced) fences writes to the lease
//! database itself. A write elsewhere cannot see the lease row, so the resource keeps its own
//! record instead: a fence table (`leasehold_fence` by default) holding, per resource, the
//! highest fencing token that wrote to it. [`Fence::admit`] runs inside the caller's own
//! transaction on that database, beside the write it guards, and moves the record up to the
//! caller's token, or refuses a token lower than the record. The upsert locks the record's row
//! until the transaction ends, so writers of one resource are serialised: a holder whose lease
//! was taken over and who wakes up late finds the new holder's higher token, is refused, and
//! rolls back.
//!
//! Each answer is read from the statement that changed the row: the upsert raises the token to
//! the greater of the stored one and the caller's and returns the result (`RETURNING` on
//! PostgreSQL, SQLite and MariaDB). The caller's token was admitted exactly when the row now
//! holds it. Oracle MySQL has no `RETURNING`, and its affected-rows count cannot tell an insert
//! from a row left as it was (sqlx connects with `CLIENT_FOUND_ROWS`, which counts both as 1),
//! so there the row is read back in the same transaction, under the lock the upsert took.

use std::sync::{Arc, OnceLock};

use leasehold_core::{FenceOutcome, FencingToken, ValidationError};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbErr, Statement, Value};

use crate::Backend;
use crate::error::DriverText;

/// The fence table's name without a prefix.
pub const DEFAULT_FENCE_TABLE: &str = "leasehold_fence";

/// Largest resource name, in UTF-8 bytes (the `resource` column is `VARCHAR(255)`).
pub const MAX_RESOURCE_BYTES: usize = 255;

/// Why a [`Fence`] call failed. A stale token is not here: it is [`FenceOutcome::Stale`].
///
/// As with [`StoreError`](crate::StoreError), the message carries the driver's text once and
/// the driver's error is a field, not the `source()`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FenceError {
    /// The table prefix or the resource name was refused before any statement was sent.
    #[error("invalid argument: {0}")]
    Invalid(ValidationError),
    /// A statement on the fence table failed (connection lost, missing table, lock timeout, …).
    #[error("database error during {op} on {table}: {}", DriverText(.cause))]
    Database {
        /// The fence operation.
        op: &'static str,
        /// The fence table.
        table: String,
        /// The driver's error (its text is in the message; it is not the error's `source()`).
        cause: DbErr,
    },
    /// The database answered something the fence cannot interpret (for example no row after
    /// the upsert).
    #[error("unexpected answer during {op} on {table}: {detail}")]
    Unexpected {
        /// The fence operation.
        op: &'static str,
        /// The fence table.
        table: String,
        /// What was unexpected.
        detail: String,
    },
}

impl From<ValidationError> for FenceError {
    fn from(e: ValidationError) -> Self {
        Self::Invalid(e)
    }
}

/// The fence table of one database: admits a write to a resource only with a fencing token at
/// least as high as every token admitted for it before.
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use leasehold_storage::{Fence, FenceOutcome, FencingToken};
/// use sea_orm::{ConnectionTrait, TransactionTrait};
///
/// // The resource's own database, not the lease database.
/// let db = sea_orm::Database::connect("sqlite::memory:").await?;
/// db.execute_unprepared("CREATE TABLE invoices (id INTEGER, total INTEGER)").await?;
/// let fence = Fence::new(db.clone());
/// fence.create_table().await?;
///
/// let token = FencingToken(7); // from AcquireOutcome::Acquired, or the lease's tenure
/// let txn = db.begin().await?;
/// match fence.admit(&txn, "invoices", token).await? {
///     FenceOutcome::Admitted => {
///         txn.execute_unprepared("INSERT INTO invoices VALUES (1, 100)").await?;
///         txn.commit().await?;
///     }
///     FenceOutcome::Stale { highest } => {
///         println!("token {highest} wrote here since: our tenure ended");
///         txn.rollback().await?;
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Fence {
    conn: DatabaseConnection,
    prefix: String,
    backend: Arc<OnceLock<Backend>>,
}

impl Fence {
    /// The fence of the database `conn` talks to, with the table `leasehold_fence`.
    #[must_use]
    pub fn new(conn: DatabaseConnection) -> Self {
        Self {
            conn,
            prefix: String::new(),
            backend: Arc::default(),
        }
    }

    /// Table name prefix (default empty: the table is `leasehold_fence`). ASCII letters,
    /// digits, `_`, at most 32 bytes, not starting with a digit; checked by each call.
    #[must_use]
    pub fn table_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Names the server's SQL flavour instead of asking a MySQL-family server its version on
    /// first use (PostgreSQL and SQLite need no question). [`Backend::MySql`] takes the path
    /// without `RETURNING`, which also runs on MariaDB.
    #[must_use]
    pub fn backend(self, backend: Backend) -> Self {
        Self {
            backend: Arc::new(OnceLock::from(backend)),
            ..self
        }
    }

    /// The fence table's name: `{prefix}leasehold_fence`.
    ///
    /// # Errors
    /// [`ValidationError`] if the prefix is not a plain identifier or is too long.
    pub fn table_name(&self) -> Result<String, ValidationError> {
        crate::connect::check_table_prefix(&self.prefix)?;
        Ok(format!("{}{DEFAULT_FENCE_TABLE}", self.prefix))
    }

    /// Creates the fence table if it does not exist; safe to run again and from several
    /// processes at once.
    ///
    /// # Errors
    /// [`FenceError::Invalid`] for a bad prefix; [`FenceError::Database`] if the statement fails
    /// (for example a read-only database or a missing privilege).
    pub async fn create_table(&self) -> Result<(), FenceError> {
        let op = "create fence table";
        let table = self.table_name()?;
        let db = |cause| FenceError::Database {
            op,
            table: table.clone(),
            cause,
        };
        let columns = "resource VARCHAR(255) NOT NULL PRIMARY KEY, token BIGINT NOT NULL, \
                       updated_at BIGINT NOT NULL";
        let dialect = self.backend_of(&self.conn).await.map_err(db)?.dialect();
        let sql = if dialect.needs_exact_collation() {
            // A binary, no-pad collation keeps resource names exact ("Ledger" is not "ledger"),
            // as they are on PostgreSQL and SQLite.
            let collation = crate::ddl::exact_collation(&self.conn).await.map_err(db)?;
            format!(
                "CREATE TABLE IF NOT EXISTS {table} ({columns}) \
                 ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = {collation}"
            )
        } else {
            format!("CREATE TABLE IF NOT EXISTS {table} ({columns})")
        };
        crate::ddl::exec_create(&self.conn, &table, sql)
            .await
            .map_err(db)
    }

    /// Admits a write to `resource` made with `token`: run it in the transaction that makes the
    /// write, before the write, and commit only on [`FenceOutcome::Admitted`].
    ///
    /// One upsert records `token` for `resource` unless a higher token is recorded, and locks
    /// the record until `txn` ends, so a lower token that arrives while this transaction is
    /// open waits, then finds this token and is refused. A token equal to the recorded one is
    /// admitted. On SQLite, where the lock is the database's write lock, open the transaction
    /// `IMMEDIATE` if it reads before this call (a deferred transaction that read an older
    /// snapshot cannot upgrade to a writer and fails with `SQLITE_BUSY`).
    ///
    /// # Examples
    /// See [`Fence`].
    ///
    /// # Errors
    /// [`FenceError::Invalid`] for a bad prefix or a resource name that is empty, longer than
    /// 255 bytes or holds a NUL character; [`FenceError::Database`] if a statement fails (the
    /// table is missing: run [`Fence::create_table`]; or the lock wait timed out);
    /// [`FenceError::Unexpected`] if the database answers no row. After an error the
    /// transaction must be rolled back.
    ///
    /// # Cancel safety
    /// Dropping the future leaves the statement's effect unknown: roll the transaction back.
    pub async fn admit<C: ConnectionTrait>(
        &self,
        txn: &C,
        resource: &str,
        token: FencingToken,
    ) -> Result<FenceOutcome, FenceError> {
        let op = "fence admit";
        let table = self.table_name()?;
        check_resource(resource)?;
        let db = |cause| FenceError::Database {
            op,
            table: table.clone(),
            cause,
        };
        let backend = self.backend_of(txn).await.map_err(db)?;
        let values = vec![Value::from(resource), Value::from(token.get())];
        let (upsert, read_back) = backend.dialect().fence_upsert(&table);
        let statement = Statement::from_sql_and_values(txn.get_database_backend(), upsert, values);
        let row = if let Some(read) = read_back {
            txn.execute_raw(statement).await.map_err(db)?;
            txn.query_one_raw(Statement::from_sql_and_values(
                txn.get_database_backend(),
                read,
                [Value::from(resource)],
            ))
            .await
            .map_err(db)?
        } else {
            txn.query_one_raw(statement).await.map_err(db)?
        };
        let Some(row) = row else {
            return Err(FenceError::Unexpected {
                op,
                table,
                detail: format!("no fence row for {resource:?} after the upsert"),
            });
        };
        let stored: i64 = row.try_get("", "token").map_err(db)?;
        match stored.cmp(&token.get()) {
            std::cmp::Ordering::Equal => Ok(FenceOutcome::Admitted),
            std::cmp::Ordering::Greater => Ok(FenceOutcome::Stale {
                highest: FencingToken(stored),
            }),
            std::cmp::Ordering::Less => Err(FenceError::Unexpected {
                op,
                table,
                detail: format!(
                    "fence row for {resource:?} holds {stored}, below the token {token} just admitted"
                ),
            }),
        }
    }

    /// The database, asked of the server once where its protocol does not tell
    /// ([`crate::backend::detect`], as a store does): whether the upsert can return the row.
    async fn backend_of<C: ConnectionTrait>(&self, conn: &C) -> Result<Backend, DbErr> {
        if let Some(b) = self.backend.get() {
            return Ok(*b);
        }
        let backend = crate::backend::detect(conn).await?;
        Ok(*self.backend.get_or_init(|| backend))
    }
}

/// Checks a resource name against the `resource` column: not empty, at most 255 bytes, no NUL
/// (PostgreSQL cannot store one in text).
fn check_resource(resource: &str) -> Result<(), ValidationError> {
    let field = "resource";
    if resource.is_empty() {
        return Err(ValidationError::Empty { field });
    }
    if resource.len() > MAX_RESOURCE_BYTES {
        return Err(ValidationError::TooLong {
            field,
            len: resource.len(),
            max: MAX_RESOURCE_BYTES,
        });
    }
    if resource.contains('\0') {
        return Err(ValidationError::ContainsNul { field });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_names_are_checked() {
        assert_eq!(
            check_resource(""),
            Err(ValidationError::Empty { field: "resource" })
        );
        assert!(check_resource(&"r".repeat(255)).is_ok());
        assert!(matches!(
            check_resource(&"r".repeat(256)),
            Err(ValidationError::TooLong { len: 256, .. })
        ));
        assert!(matches!(
            check_resource("a\0b"),
            Err(ValidationError::ContainsNul { .. })
        ));
    }

    #[test]
    fn prefixes_are_checked() {
        let conn = DatabaseConnection::default();
        assert_eq!(
            Fence::new(conn.clone())
                .table_prefix("app_")
                .table_name()
                .ok(),
            Some("app_leasehold_fence".to_owned())
        );
        assert!(
            Fence::new(conn.clone())
                .table_prefix("x; DROP TABLE t")
                .table_name()
                .is_err()
        );
        assert!(Fence::new(conn).table_prefix("1a").table_name().is_err());
    }
}
