//! PostgreSQL: its [`Driver`](super::Driver) (`driver.rs`, opened by `open.rs` through
//! `pooler.rs` and `primary.rs`), its [`Dialect`], the statements only it sends
//! (`statements.rs`: the purge), its group commit (`group.rs`) and its doorbell (`doorbell.rs`:
//! `NOTIFY`/`LISTEN`).

use sea_orm::{DbBackend, Value};

use super::text::{like_prefix, numbered};
use super::{Dialect, Names};

#[cfg(feature = "postgres")]
pub mod doorbell;
mod driver;
mod group;
pub(crate) mod notify;
#[cfg(feature = "postgres")]
mod open;
#[cfg(feature = "postgres")]
pub mod pooler;
#[cfg(feature = "postgres")]
pub(crate) mod primary;
mod statements;

pub(crate) use driver::DRIVER;

/// PostgreSQL's SQL.
#[derive(Debug)]
pub(crate) struct Postgres;

/// The PostgreSQL channel of rings (`doorbell::postgres::CHANNEL`).
pub(crate) const RELEASED_CHANNEL: &str = "leasehold_lock_released";

/// With `notify`, `, pg_notify(channel, payload)` for a `RETURNING` list, the payload that of
/// `doorbell::payload` computed from the row (byte lengths, as Rust's) with its columns qualified
/// by `a` (`"l."` or `""`): delivered at commit, and not at all if the statement's transaction
/// rolls back. Without, nothing.
pub(crate) fn notify_item(notify: bool, table: &str, channel: &str, a: &str) -> String {
    if !notify {
        return String::new();
    }
    format!(
        ", pg_notify('{channel}', '{}:' || octet_length({a}namespace)::text || ':' || '{table}' || {a}namespace || {a}lease_name)",
        table.len()
    )
}

/// PostgreSQL: the JSON list of `[namespace, name, token]` items, expanded once. Driving from it
/// through the unique key keeps a batch linear: a semi-join `IN (SELECT … json_array_elements)`
/// can make the planner scan the table and re-expand the list for every row (quadratic: 10 s
/// for 1,000 items beside 5,000 rows).
const PG_ITEMS: &str = "w AS MATERIALIZED (SELECT e->>0 AS ns, e->>1 AS name, (e->>2)::bigint AS v \
     FROM json_array_elements(?::json) e)";
/// PostgreSQL: the row of item `w`, in a `LATERAL` subquery so the planner looks each item up
/// through the unique key (with a stale row estimate it otherwise joined by scanning the table
/// once per item). `OFFSET 0` keeps the planner from flattening it back into such a join.
const PG_KEY: &str = "namespace = w.ns AND lease_name = w.name AND version = w.v";

impl Dialect for Postgres {
    fn db_backend(&self) -> DbBackend {
        DbBackend::Postgres
    }

    fn now(&self) -> &'static str {
        // clock_timestamp(), not now(): now() is frozen at the start of the transaction, and
        // clock_timestamp() is read when the row is evaluated, after any lock wait. Floored to
        // the millisecond like SQLite's and MySQL's.
        "FLOOR(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint"
    }

    fn finish(&self, sql: String) -> String {
        numbered(&sql)
    }

    fn notifies_in_statements(&self) -> bool {
        true
    }

    fn name_prefix(&self, prefix: &str, sql: &mut String, values: &mut Vec<Value>) {
        sql.push_str(" AND lease_name LIKE ? ESCAPE '!'");
        values.push(like_prefix(prefix).into());
    }

    fn renew_many(&self, n: &Names<'_>, json: Value, h: Value, t: Value) -> (String, Vec<Value>) {
        let (table, now) = (n.table, n.now);
        // PostgreSQL drives from the materialized JSON list (`PG_ITEMS`) through the unique
        // key. Rows locked by another session (an open fenced transaction) are skipped, not
        // waited for, and reported back so the caller can try them alone.
        (
            format!(
                "WITH {PG_ITEMS}, \
                 c AS (SELECT x.id FROM w, LATERAL (SELECT id FROM {table} \
                   WHERE {PG_KEY} AND holder = ? AND status = 1 FOR UPDATE SKIP LOCKED) x), \
                 u AS (UPDATE {table} AS l SET lease_end_time = {now} + ?, gmt_modified = {now} \
                 FROM c WHERE l.id = c.id AND l.status = 1 AND l.lease_end_time > {now} \
                 RETURNING l.namespace, l.lease_name) \
                 SELECT namespace, lease_name, 1 AS renewed FROM u \
                 UNION ALL SELECT x.namespace, x.lease_name, 0 AS renewed FROM w, LATERAL (SELECT id, namespace, lease_name \
                   FROM {table} WHERE {PG_KEY} AND holder = ? AND status = 1 OFFSET 0) x \
                 WHERE x.id NOT IN (SELECT id FROM c)"
            ),
            vec![json, h.clone(), t, h],
        )
    }

    fn release_many(&self, n: &Names<'_>, set: &str) -> String {
        let (table, now) = (n.table, n.now);
        format!(
            "WITH {PG_ITEMS} UPDATE {table} AS l {set} \
             WHERE l.id = ANY(ARRAY(SELECT x.id FROM w, LATERAL (SELECT id FROM {table} WHERE {PG_KEY} OFFSET 0) x)) \
             AND l.holder = ? AND l.status = 1 AND l.lease_end_time > {now}"
        )
    }

    fn catalog_unique_keys(&self) -> String {
        "SELECT string_agg(a.attname, ',' ORDER BY k.ord) AS cols \
         FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY k(attnum, ord) \
         JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum \
         WHERE i.indrelid = to_regclass(?) AND i.indisunique AND i.indpred IS NULL \
         GROUP BY i.indexrelid"
            .to_owned()
    }

    fn catalog_columns(&self) -> String {
        "SELECT a.attname::text AS name, format_type(a.atttypid, a.atttypmod) AS type, '' AS collation \
         FROM pg_attribute a WHERE a.attrelid = to_regclass(?) AND a.attnum > 0 AND NOT a.attisdropped"
            .to_owned()
    }

    fn fence_upsert(&self, table: &str) -> (String, Option<String>) {
        let now = self.now();
        (
            format!(
                "INSERT INTO {table} AS f (resource, token, updated_at) VALUES ($1, $2, {now}) \
                 ON CONFLICT (resource) DO UPDATE SET \
                 token = GREATEST(f.token, EXCLUDED.token), \
                 updated_at = CASE WHEN f.token <= EXCLUDED.token THEN EXCLUDED.updated_at \
                 ELSE f.updated_at END \
                 RETURNING token"
            ),
            None,
        )
    }

    fn id_column(&self) -> &'static str {
        "id BIGSERIAL PRIMARY KEY"
    }

    /// `IF NOT EXISTS` is not safe against a concurrent first run here (both see no table, the
    /// second fails on the catalog's unique key: "duplicate key value violates unique constraint
    /// pg_class_relname_nsp_index"), so the statement runs in one simple query behind the
    /// table's migration advisory lock: the second run waits for the first to commit and then
    /// finds the table.
    fn serialised_create(&self, table: &str, sql: &str) -> Option<String> {
        Some(format!(
            "SELECT pg_advisory_xact_lock(hashtext('leasehold_migrate:{table}'));\n{sql}"
        ))
    }

    fn has_column(&self) -> &'static str {
        "SELECT count(*)::bigint AS n FROM information_schema.columns \
         WHERE table_schema = current_schema() AND table_name = $1 AND column_name = $2"
    }

    fn fillfactor_and_owner(&self) -> Option<&'static str> {
        Some(
            "SELECT COALESCE(array_to_string(c.reloptions, ','), '') AS options, \
             pg_has_role(c.relowner, 'USAGE') AS owner \
             FROM pg_class c WHERE c.oid = to_regclass($1)",
        )
    }
}
