//! The torture log table, `leasehold_torture_log`: one row per work write a worker made (or was
//! refused), stamped by the database's clock.
//!
//! Columns: `id` (auto), `namespace`, `lease_name`, `holder`, `token`, `fenced` (0/1),
//! `accepted` (0/1), `grant_live` (0/1: whether, by the database's clock at the insert, the
//! lease row still named this holder and token with an unexpired grant), `db_time` (BIGINT ms by
//! the database clock at the insert: the same expressions as `leasehold-storage`'s `sql.rs`).

use leasehold_storage::{FencedTransaction, SeaOrmStore, StoreError, rewrite_placeholders};
use sea_orm::{ConnectionTrait, DbBackend as Backend, QueryResult, Statement, Value};

/// The log table's name.
pub const TABLE: &str = "leasehold_torture_log";

/// One logged write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// Auto-increment id: breaks `db_time` ties in insertion order.
    pub id: i64,
    /// Lease name the work was for.
    pub lease_name: String,
    /// Holder that wrote.
    pub holder: String,
    /// The fencing token the holder believed it held.
    pub token: i64,
    /// Written through `begin_fenced` (or a refusal of such a write).
    pub fenced: bool,
    /// The write took effect (false: the fence refused it; the row records the refusal).
    pub accepted: bool,
    /// The grant was live by the database clock when the row was inserted.
    pub grant_live: bool,
    /// Database time of the insert, in ms since the epoch.
    pub db_time: i64,
}

/// The kind of write a row records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A plain write, made because `has_lease` said so.
    Unfenced,
    /// A write inside a fenced transaction.
    FencedAccepted,
    /// A fenced write the fence refused, recorded outside the fence.
    FencedRefused,
}

fn db_err(op: &'static str, cause: sea_orm::DbErr) -> StoreError {
    StoreError::Database { op, cause }
}

/// Runs the parent's read `stmt`, again (up to five times, 50 ms apart) on SQLite's
/// `SQLITE_PROTOCOL` (code 15): with workers SIGKILLed and SIGSTOPped around the WAL index, a
/// reader can lose the WAL locking race, which SQLite documents as transient.
async fn read_retrying(
    store: &SeaOrmStore,
    stmt: Statement,
) -> Result<Vec<sea_orm::QueryResult>, StoreError> {
    let mut tries = 0;
    loop {
        match store.connection().query_all_raw(stmt.clone()).await {
            Err(e) if tries < 5 && e.to_string().contains("(code: 15)") => {
                tries += 1;
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            other => return other.map_err(|e| db_err("lease read", e)),
        }
    }
}

/// Creates the log table (and its index) if missing.
///
/// # Errors
/// The database's error.
pub async fn create_table(store: &SeaOrmStore) -> Result<(), StoreError> {
    let conn = store.connection();
    let statements: Vec<String> = match store.connection().get_database_backend() {
        Backend::Sqlite => vec![
            format!(
                "CREATE TABLE IF NOT EXISTS {TABLE} (id INTEGER PRIMARY KEY AUTOINCREMENT, \
                 namespace TEXT NOT NULL, lease_name TEXT NOT NULL, holder TEXT NOT NULL, \
                 token BIGINT NOT NULL, fenced SMALLINT NOT NULL, accepted SMALLINT NOT NULL, \
                 grant_live SMALLINT NOT NULL, db_time BIGINT NOT NULL)"
            ),
            format!("CREATE INDEX IF NOT EXISTS {TABLE}_ns ON {TABLE} (namespace)"),
        ],
        Backend::Postgres => vec![
            format!(
                "CREATE TABLE IF NOT EXISTS {TABLE} (id BIGSERIAL PRIMARY KEY, \
                 namespace VARCHAR(128) NOT NULL, lease_name VARCHAR(255) NOT NULL, \
                 holder VARCHAR(255) NOT NULL, token BIGINT NOT NULL, fenced SMALLINT NOT NULL, \
                 accepted SMALLINT NOT NULL, grant_live SMALLINT NOT NULL, db_time BIGINT NOT NULL)"
            ),
            format!("CREATE INDEX IF NOT EXISTS {TABLE}_ns ON {TABLE} (namespace)"),
        ],
        _ => vec![format!(
            "CREATE TABLE IF NOT EXISTS {TABLE} (id BIGINT AUTO_INCREMENT PRIMARY KEY, \
             namespace VARCHAR(128) NOT NULL, lease_name VARCHAR(255) NOT NULL, \
             holder VARCHAR(255) NOT NULL, token BIGINT NOT NULL, fenced SMALLINT NOT NULL, \
             accepted SMALLINT NOT NULL, grant_live SMALLINT NOT NULL, db_time BIGINT NOT NULL, \
             INDEX {TABLE}_ns (namespace)) CHARACTER SET utf8mb4"
        )],
    };
    for sql in statements {
        conn.execute_unprepared(&sql)
            .await
            .map_err(|e| db_err("create torture log", e))?;
    }
    Ok(())
}

/// Where a worker's writes go: the log table next to the lease table of `store`.
#[derive(Debug, Clone)]
pub struct LogWriter {
    store: SeaOrmStore,
    namespace: String,
    holder: String,
}

impl LogWriter {
    /// A writer for `holder` in `namespace`.
    pub fn new(store: SeaOrmStore, namespace: String, holder: String) -> Self {
        Self {
            store,
            namespace,
            holder,
        }
    }

    /// The store the writer uses (for `begin_fenced`).
    pub fn store(&self) -> &SeaOrmStore {
        &self.store
    }

    /// The insert: the database computes `db_time` and `grant_live` in the statement itself.
    fn insert(&self, name: &str, token: i64, kind: Kind) -> Statement {
        let backend = self.store.connection().get_database_backend();
        let (fenced, accepted) = match kind {
            Kind::Unfenced => (0, 1),
            Kind::FencedAccepted => (1, 1),
            Kind::FencedRefused => (1, 0),
        };
        let sql = format!(
            "INSERT INTO {TABLE} (namespace, lease_name, holder, token, fenced, accepted, grant_live, db_time) \
             SELECT ?, ?, ?, ?, {fenced}, {accepted}, \
             CASE WHEN EXISTS (SELECT 1 FROM {lease} l WHERE l.namespace = ? AND l.lease_name = ? \
               AND l.holder = ? AND l.version = ? AND l.status = 1 AND l.lease_end_time > n.ms) \
             THEN 1 ELSE 0 END, n.ms FROM (SELECT {now} AS ms) n",
            lease = self.store.table(),
            now = self.store.now_sql(),
        );
        let values: Vec<Value> = [
            self.namespace.as_str().into(),
            name.into(),
            self.holder.as_str().into(),
            token.into(),
        ]
        .into_iter()
        .cycle()
        .take(8)
        .collect();
        Statement::from_sql_and_values(
            self.store.connection().get_database_backend(),
            rewrite_placeholders(backend, &sql),
            values,
        )
    }

    /// Appends a row outside any transaction (an unfenced write, or a recorded refusal).
    ///
    /// # Errors
    /// The database's error.
    pub async fn append(&self, name: &str, token: i64, kind: Kind) -> Result<(), StoreError> {
        self.store
            .connection()
            .execute_raw(self.insert(name, token, kind))
            .await
            .map_err(|e| db_err("torture log insert", e))?;
        Ok(())
    }

    /// Appends an accepted fenced row inside `txn` (the caller commits).
    ///
    /// # Errors
    /// The database's error.
    pub async fn append_fenced(
        &self,
        txn: &FencedTransaction,
        name: &str,
        token: i64,
    ) -> Result<(), StoreError> {
        txn.execute_raw(self.insert(name, token, Kind::FencedAccepted))
            .await
            .map_err(|e| db_err("fenced torture log insert", e))?;
        Ok(())
    }
}

fn int(row: &QueryResult, col: &str) -> Result<i64, StoreError> {
    if let Ok(v) = row.try_get::<i64>("", col) {
        return Ok(v);
    }
    if let Ok(v) = row.try_get::<i32>("", col) {
        return Ok(i64::from(v));
    }
    row.try_get::<i16>("", col)
        .map(i64::from)
        .map_err(|e| db_err("torture log read", e))
}

/// Every row of `namespace`, ordered by name, database time and id.
///
/// # Errors
/// The database's error.
pub async fn read(store: &SeaOrmStore, namespace: &str) -> Result<Vec<Row>, StoreError> {
    let sql = format!(
        "SELECT id, lease_name, holder, token, fenced, accepted, grant_live, db_time FROM {TABLE} \
         WHERE namespace = ? ORDER BY lease_name, db_time, id"
    );
    let stmt = Statement::from_sql_and_values(
        store.connection().get_database_backend(),
        rewrite_placeholders(store.connection().get_database_backend(), &sql),
        [namespace.into()],
    );
    let rows = store
        .connection()
        .query_all_raw(stmt)
        .await
        .map_err(|e| db_err("torture log read", e))?;
    rows.iter()
        .map(|r| {
            Ok(Row {
                id: int(r, "id")?,
                lease_name: r
                    .try_get("", "lease_name")
                    .map_err(|e| db_err("torture log read", e))?,
                holder: r
                    .try_get("", "holder")
                    .map_err(|e| db_err("torture log read", e))?,
                token: int(r, "token")?,
                fenced: int(r, "fenced")? != 0,
                accepted: int(r, "accepted")? != 0,
                grant_live: int(r, "grant_live")? != 0,
                db_time: int(r, "db_time")?,
            })
        })
        .collect()
}

/// The holders of the held rows of `namespace` (live or lapsed but not yet taken over).
///
/// # Errors
/// The database's error.
pub async fn holders(store: &SeaOrmStore, namespace: &str) -> Result<Vec<String>, StoreError> {
    let backend = store.connection().get_database_backend();
    let sql = format!(
        "SELECT holder FROM {} WHERE namespace = ? AND status = 1",
        store.table()
    );
    let stmt = Statement::from_sql_and_values(
        backend,
        rewrite_placeholders(backend, &sql),
        [namespace.into()],
    );
    let rows = read_retrying(store, stmt).await?;
    rows.iter()
        .map(|r| r.try_get("", "holder").map_err(|e| db_err("lease read", e)))
        .collect()
}

/// The current fencing token of each name in `namespace` (the number of grants so far: tokens
/// start at 1 and grow by one per grant).
///
/// # Errors
/// The database's error.
pub async fn final_tokens(
    store: &SeaOrmStore,
    namespace: &str,
) -> Result<Vec<(String, i64)>, StoreError> {
    let sql = format!(
        "SELECT lease_name, version FROM {} WHERE namespace = ? ORDER BY lease_name",
        store.table()
    );
    let stmt = Statement::from_sql_and_values(
        store.connection().get_database_backend(),
        rewrite_placeholders(store.connection().get_database_backend(), &sql),
        [namespace.into()],
    );
    let rows = read_retrying(store, stmt).await?;
    rows.iter()
        .map(|r| {
            Ok((
                r.try_get("", "lease_name")
                    .map_err(|e| db_err("lease read", e))?,
                int(r, "version")?,
            ))
        })
        .collect()
}
