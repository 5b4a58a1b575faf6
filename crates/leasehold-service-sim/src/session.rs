//! Other sessions inside the SQL database: before the fault layer passes a call through, a
//! second connection (its own transaction) holds the row of a key the call touches locked, or
//! grants that key uncommitted, so the call stalls *inside the database* and may be given up by
//! the engine while its statement still runs (and commits) there.
//!
//! The sessions run on the world's runtime, which owns their connections; the call waits only
//! until the other session's transaction is open, then goes on beside it.

use std::time::Duration;

use leasehold::store::SeaOrmStore;
use leasehold::store::sea_orm::{
    ConnectionTrait, DatabaseTransaction, DbBackend, SqliteTransactionMode, Statement,
    TransactionOptions, TransactionTrait, Value,
};
use leasehold::{HolderId, LeaseKey};
use leasehold_storage::Backend;
use tokio::sync::oneshot;

/// The longest a call waits for another session's transaction to open; past it the call goes
/// through without waiting longer (the session, if it opens later, still stalls others).
const OPEN_WITHIN: Duration = Duration::from_secs(1);
/// The longest another session may take to open its transaction, and then to end it.
const OPEN_CAP: Duration = Duration::from_secs(3);
/// How long after its commit another session standing for the caller's own abandoned grant
/// releases it: the engine releases such a grant once its answer came back, a round trip or
/// two after the commit.
const RELEASE_AFTER: Duration = Duration::from_millis(10);
/// The holder id of a grant by another session that is not the calling service's.
pub(crate) const OTHER_HOLDER: &str = "sim-other-session";

/// What the other session does to the row.
#[derive(Debug, Clone)]
pub(crate) enum Other {
    /// Holds the row locked (`SELECT … FOR UPDATE`; SQLite: the database's write lock), then
    /// rolls back.
    Lock,
    /// Grants the key to `holder` as a grant statement would (inserts the row one above the
    /// token floor, or takes over a row that is not live, token + 1; a live row is only held
    /// locked), then commits or rolls back.
    Grant {
        /// The row's holder.
        holder: HolderId,
        /// Commits (else rolls back).
        commit: bool,
        /// Once committed, releases the tenure it wrote (and only that one), as the engine
        /// releases a grant that answered after its caller stopped waiting: with the caller's
        /// own holder id, this session is that caller's own abandoned grant.
        release: bool,
    },
}

/// A pool of connections for other sessions, on the world's runtime.
#[derive(Clone)]
pub(crate) struct Sessions {
    store: SeaOrmStore,
    handle: tokio::runtime::Handle,
    /// The term of a row another session grants, in milliseconds.
    term_ms: i64,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions").finish_non_exhaustive()
    }
}

impl Sessions {
    /// Sessions on `store`'s own connections, run on `handle`; rows they grant last `term`.
    pub(crate) fn new(store: SeaOrmStore, handle: tokio::runtime::Handle, term: Duration) -> Self {
        let term_ms = i64::try_from(term.as_millis()).unwrap_or(i64::MAX);
        Self {
            store,
            handle,
            term_ms,
        }
    }

    /// Opens another session's transaction doing `other` on `key`, which ends `hold` after it
    /// opened. Returns once it is open (`true`), or when it could not open in time (`false`).
    pub(crate) async fn stall(&self, key: &LeaseKey, other: Other, hold: Duration) -> bool {
        let (opened, open) = oneshot::channel();
        let (store, key, term_ms) = (self.store.clone(), key.clone(), self.term_ms);
        self.handle.spawn(async move {
            let commit = matches!(other, Other::Grant { commit: true, .. });
            let release = matches!(other, Other::Grant { release: true, .. });
            let (txn, wrote) =
                match tokio::time::timeout(OPEN_CAP, begin(&store, &key, &other, term_ms)).await {
                    Ok(Ok(open)) => open,
                    _ => {
                        let _ = opened.send(false);
                        return;
                    }
                };
            let _ = opened.send(true);
            tokio::time::sleep(hold).await;
            // Its end (and the release) is bounded too, like every wait of the run.
            let end = async move {
                if !commit {
                    let _ = txn.rollback().await;
                    return;
                }
                if txn.commit().await.is_ok()
                    && release
                    && let (Some((id, token)), Other::Grant { holder, .. }) = (wrote, &other)
                {
                    tokio::time::sleep(RELEASE_AFTER).await;
                    let now = store.now_sql();
                    let sql = format!(
                        "UPDATE {} SET status = 0, lease_end_time = {now}, gmt_modified = {now} \
                         WHERE id = ? AND version = ? AND holder = ? AND status = 1",
                        store.table()
                    );
                    let values = vec![id.into(), token.into(), holder.as_str().into()];
                    let _ = store
                        .connection()
                        .execute_raw(statement(&store, &sql, values))
                        .await;
                }
            };
            let _ = tokio::time::timeout(OPEN_CAP, end).await;
        });
        matches!(tokio::time::timeout(OPEN_WITHIN, open).await, Ok(Ok(true)))
    }
}

/// `sql` with `?` placeholders, numbered for PostgreSQL.
fn statement(store: &SeaOrmStore, sql: &str, values: Vec<Value>) -> Statement {
    let (backend, sql) = match store.backend() {
        Backend::Postgres => {
            let mut out = String::with_capacity(sql.len() + 8);
            let mut n = 0;
            for c in sql.chars() {
                if c == '?' {
                    n += 1;
                    out.push_str(&format!("${n}"));
                } else {
                    out.push(c);
                }
            }
            (DbBackend::Postgres, out)
        }
        Backend::Sqlite => (DbBackend::Sqlite, sql.to_owned()),
        _ => (DbBackend::MySql, sql.to_owned()),
    };
    Statement::from_sql_and_values(backend, sql, values)
}

/// The open transaction, and the row id and token of the tenure it wrote, if it wrote one.
type Opened = (DatabaseTransaction, Option<(i64, i64)>);

/// Opens the transaction and does `other` in it, leaving it open.
async fn begin(
    store: &SeaOrmStore,
    key: &LeaseKey,
    other: &Other,
    term_ms: i64,
) -> Result<Opened, String> {
    let e = |err: leasehold::store::sea_orm::DbErr| err.to_string();
    let sqlite = store.backend() == Backend::Sqlite;
    let txn = if sqlite {
        // SQLite has no row locks: the database's write lock, taken at once, is the row's.
        let options = TransactionOptions {
            sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate),
            ..TransactionOptions::default()
        };
        store.connection().begin_with_options(options).await
    } else {
        store.connection().begin().await
    }
    .map_err(e)?;
    let (t, now) = (store.table(), store.now_sql());
    let lock = if sqlite { "" } else { " FOR UPDATE" };
    let key_values =
        || -> Vec<Value> { vec![key.namespace.as_str().into(), key.name.as_str().into()] };
    let read = format!(
        "SELECT id, CASE WHEN status = 1 AND lease_end_time > {now} THEN 'y' ELSE 'n' END AS live \
         FROM {t} WHERE namespace = ? AND lease_name = ?{lock}"
    );
    let row = txn
        .query_all_raw(statement(store, &read, key_values()))
        .await
        .map_err(e)?
        .into_iter()
        .next();
    let Other::Grant { holder, .. } = other else {
        return Ok((txn, None));
    };
    let write = match row {
        Some(row) => {
            let id: i64 = row.try_get("", "id").map_err(e)?;
            let live: String = row.try_get("", "live").map_err(e)?;
            if live == "y" {
                // A live row is not granted again: the session only holds it.
                return Ok((txn, None));
            }
            statement(
                store,
                &format!(
                    "UPDATE {t} SET holder = ?, version = version + 1, status = 1, \
                     lease_end_time = {now} + ?, lease_value = NULL, gmt_modified = {now} \
                     WHERE id = ?"
                ),
                vec![holder.as_str().into(), term_ms.into(), id.into()],
            )
        }
        None => {
            let share = if matches!(store.backend(), Backend::Sqlite | Backend::Postgres) {
                ""
            } else {
                " LOCK IN SHARE MODE"
            };
            let fresh = format!(
                "(COALESCE((SELECT f.version FROM {t}_floor f WHERE f.id = 1{share}), 0) + 1)"
            );
            let mut values = key_values();
            values.extend([holder.as_str().into(), term_ms.into()]);
            statement(
                store,
                &format!(
                    "INSERT INTO {t} (namespace, lease_name, holder, lease_end_time, status, \
                     version, lease_value, gmt_create, gmt_modified) \
                     VALUES (?, ?, ?, {now} + ?, 1, {fresh}, NULL, {now}, {now})"
                ),
                values,
            )
        }
    };
    txn.execute_raw(write).await.map_err(e)?;
    let read = format!("SELECT id, version FROM {t} WHERE namespace = ? AND lease_name = ?");
    let wrote = txn
        .query_all_raw(statement(store, &read, key_values()))
        .await
        .map_err(e)?
        .into_iter()
        .next()
        .map(|row| -> Result<(i64, i64), String> {
            Ok((
                row.try_get("", "id").map_err(e)?,
                row.try_get("", "version").map_err(e)?,
            ))
        })
        .transpose()?;
    Ok((txn, wrote))
}
