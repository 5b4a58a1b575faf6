//! `leasehold purge`: deletes rows released or expired for longer than an age, or with
//! `--dry-run` says which rows that would be, deleting nothing.
//!
//! The dry run reads the table the way an application does (the columns of
//! [`leasehold_storage::entity`]), with the rule of [`AdminStore::purge`]: a row is purgeable
//! when it is not held (released, or its end passed) and its end is more than the age before the
//! database's now. It reads the database's clock once and compares with it, so what it lists is
//! what a purge at that instant would remove, except rows a running statement holds locked,
//! which a purge skips.

use leasehold_storage::{AdminStore, LeaseStore, Namespace, SeaOrmStore, StoreError, Term};
use sea_orm::{ConnectionTrait, DbErr, Statement, Value};

use crate::exit::Failure;

/// How many purgeable rows a dry run names (it counts them all).
pub(crate) const SHOWN: u64 = 20;

/// What `purge` was asked.
pub(crate) struct PurgeArgs {
    /// Only this namespace.
    pub(crate) namespace: Option<Namespace>,
    /// The least time since a row's end for it to go.
    pub(crate) older_than: Term,
    /// One JSON object on stdout instead of text.
    pub(crate) json: bool,
}

/// Purges and says how many rows went.
pub(crate) async fn purge(store: &SeaOrmStore, args: &PurgeArgs) -> Result<u8, Failure> {
    let n = store
        .purge(args.namespace.as_ref(), args.older_than.duration())
        .await?;
    if args.json {
        let mut value = header(args, false);
        value["purged"] = n.into();
        println!("{value}");
    } else {
        println!("purged {n} rows");
    }
    Ok(0)
}

/// One row a purge would remove.
struct Purgeable {
    namespace: String,
    name: String,
    holder: String,
    token: i64,
    /// When its last tenure ended, ms since the epoch by the database's clock.
    ended_ms: i64,
}

/// Counts the purgeable rows and names the first [`SHOWN`] (by namespace and name); deletes
/// nothing.
pub(crate) async fn dry_run(store: &SeaOrmStore, args: &PurgeArgs) -> Result<u8, Failure> {
    let now = store.db_now().await?;
    let now_ms = now.as_millis();
    let cutoff = now_ms.saturating_sub(args.older_than.as_millis_i64());
    let (count, rows) = read(store, args.namespace.as_ref(), now_ms, cutoff)
        .await
        .map_err(|e| {
            Failure::Store(StoreError::Database {
                op: "purge --dry-run",
                cause: e,
            })
        })?;
    if args.json {
        let mut value = header(args, true);
        value["purgeable"] = count.into();
        value["db_now_ms"] = now_ms.into();
        value["rows"] = rows
            .iter()
            .map(|r| {
                serde_json::json!({
                    "namespace": r.namespace,
                    "name": r.name,
                    "holder": r.holder,
                    "token": r.token,
                    "ended_ms": r.ended_ms,
                    "ended_ago_ms": now_ms.saturating_sub(r.ended_ms),
                })
            })
            .collect();
        println!("{value}");
        return Ok(0);
    }
    let scope = args
        .namespace
        .as_ref()
        .map_or_else(String::new, |ns| format!(" in namespace {}", ns.as_str()));
    println!(
        "would purge {count} rows{scope} (released or expired more than {} ago); nothing deleted",
        crate::duration::human(args.older_than.duration())
    );
    for r in &rows {
        let key = if r.namespace.is_empty() {
            r.name.clone()
        } else {
            format!("{}/{}", r.namespace, r.name)
        };
        let ago = std::time::Duration::from_millis(
            u64::try_from(now_ms.saturating_sub(r.ended_ms)).unwrap_or(0),
        );
        println!(
            "  {key}  holder {}  token {}  ended {} ago",
            r.holder,
            r.token,
            crate::duration::human(ago)
        );
    }
    let shown = u64::try_from(rows.len()).unwrap_or(u64::MAX);
    if count > shown {
        println!("  … and {} more", count - shown);
    }
    Ok(0)
}

/// The fields both outcomes share.
fn header(args: &PurgeArgs, dry_run: bool) -> serde_json::Value {
    serde_json::json!({
        "dry_run": dry_run,
        "namespace": args.namespace.as_ref().map(Namespace::as_str),
        "older_than_ms": args.older_than.as_millis_i64(),
    })
}

/// The count of purgeable rows and the first [`SHOWN`] of them.
async fn read(
    store: &SeaOrmStore,
    namespace: Option<&Namespace>,
    now_ms: i64,
    cutoff_ms: i64,
) -> Result<(u64, Vec<Purgeable>), DbErr> {
    let db = store.connection();
    let backend = db.get_database_backend();
    let mut cond = "(status = 0 OR lease_end_time <= ?) AND lease_end_time < ?".to_owned();
    let mut values: Vec<Value> = vec![now_ms.into(), cutoff_ms.into()];
    if let Some(ns) = namespace {
        cond.push_str(" AND namespace = ?");
        values.push(ns.as_str().into());
    }
    let table = store.table();
    let statement = |sql: String| {
        Statement::from_sql_and_values(
            backend,
            leasehold_storage::rewrite_placeholders(backend, &sql),
            values.clone(),
        )
    };
    let count = db
        .query_one_raw(statement(format!(
            "SELECT COUNT(*) AS n FROM {table} WHERE {cond}"
        )))
        .await?
        .map_or(Ok(0), |row| row.try_get::<i64>("", "n"))?;
    let rows = db
        .query_all_raw(statement(format!(
            "SELECT namespace, lease_name, holder, version, lease_end_time FROM {table} \
             WHERE {cond} ORDER BY namespace, lease_name LIMIT {SHOWN}"
        )))
        .await?
        .iter()
        .map(|row| {
            Ok(Purgeable {
                namespace: row.try_get("", "namespace")?,
                name: row.try_get("", "lease_name")?,
                holder: row.try_get("", "holder")?,
                token: row.try_get("", "version")?,
                ended_ms: row.try_get("", "lease_end_time")?,
            })
        })
        .collect::<Result<Vec<_>, DbErr>>()?;
    Ok((u64::try_from(count).unwrap_or(0), rows))
}
