//! The SQL of each backend, built once per store. Every value is a bound parameter; only the
//! validated table name is spliced in.

/// Which SQL dialect a store speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    Sqlite,
    Postgres,
    /// `returning`: MariaDB 10.5+ (`INSERT … ON DUPLICATE KEY UPDATE … RETURNING`); Oracle MySQL
    /// lacks it and takes the grant in a transaction of two statements instead.
    MySql {
        returning: bool,
    },
}

/// The statements of one store.
#[derive(Debug, Clone)]
pub(crate) struct Sql {
    pub dialect: Dialect,
    pub now: String,
    pub acquire: String,
    pub select_one: String,
    pub renew: String,
    pub release: String,
    pub release_all: String,
    pub force_release: String,
    pub purge: String,
    pub purge_ns: String,
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

const COLS: &str = "namespace, lease_name, holder, version, lease_end_time, status";

impl Sql {
    pub(crate) fn new(dialect: Dialect, table: &str) -> Self {
        let now = match dialect {
            // clock_timestamp(), not now(): now() is frozen at the start of the transaction, and
            // clock_timestamp() is read when the row is evaluated, after any lock wait. Floored to
            // the millisecond like SQLite's and MySQL's.
            Dialect::Postgres => "FLOOR(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint",
            // UTC_TIMESTAMP(6) is the statement's start; adding the time since then
            // (SYSDATE(6) - NOW(6), both in the session time zone, which sqlx sets to UTC) gives
            // the time the row is evaluated, after any lock wait. Pure UTC arithmetic: no DST
            // ambiguity from UNIX_TIMESTAMP.
            Dialect::MySql { .. } => {
                "((TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) \
                 + GREATEST(0, TIMESTAMPDIFF(MICROSECOND, NOW(6), SYSDATE(6)))) DIV 1000)"
            }
            // 'now' is the same for every use within one statement, and read after the write
            // lock is taken (SQLite waits for it before the statement evaluates anything).
            Dialect::Sqlite => "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)",
        }
        .to_owned();
        let t = table;
        // Parameters of every grant: namespace, name, holder, term (ms), then `keep` (1:
        // try_acquire keeps the token of a live grant of ours and may extend it; 0: a new
        // tenure), then `expected` (the token of our own live tenure a take-over may replace; -1
        // for none). The order differs per dialect: see `acquire_values`.
        let acquire = match dialect {
            // ON CONFLICT DO UPDATE locks the existing row, then evaluates WHERE and SET on its
            // newest version: the clock is read then, after any lock wait.
            Dialect::Postgres | Dialect::Sqlite => format!(
                "INSERT INTO {t} AS l (namespace, lease_name, holder, lease_end_time, status, version, gmt_create, gmt_modified) \
                 VALUES (?, ?, ?, {now} + ?, 1, 1, {now}, {now}) \
                 ON CONFLICT (namespace, lease_name) DO UPDATE SET \
                 version = CASE WHEN ? = 1 AND l.status = 1 AND l.holder = excluded.holder AND l.lease_end_time > {now} \
                   THEN l.version ELSE l.version + 1 END, \
                 holder = excluded.holder, lease_end_time = {now} + ?, status = 1, gmt_modified = {now} \
                 WHERE l.status = 0 OR l.lease_end_time <= {now} \
                   OR (l.holder = excluded.holder AND (? = 1 OR l.version = ?)) \
                 RETURNING holder, version, lease_end_time"
            ),
            // MySQL assigns left to right, each expression seeing the earlier assignments: the
            // decision is made once, from the old row, into @leasehold_took, and every later
            // assignment follows it. The VALUES list sets it to 1 first (a plain insert is a
            // grant), so after the statement it says whether this statement granted. Times in
            // the update part are read after the row lock (see `now`), not from VALUES().
            Dialect::MySql { returning } => {
                let take = format!(
                    "(status = 0 OR lease_end_time <= {now} OR (holder = VALUES(holder) AND (? = 1 OR version = ?)))"
                );
                format!(
                    "INSERT INTO {t} (namespace, lease_name, holder, lease_end_time, status, version, gmt_create, gmt_modified) \
                     VALUES (?, ?, ?, {now} + ?, (@leasehold_took := 1), 1, {now}, {now}) \
                     ON DUPLICATE KEY UPDATE \
                     version = IF((@leasehold_took := {take}), \
                       IF(? = 1 AND status = 1 AND holder = VALUES(holder) AND lease_end_time > {now}, version, version + 1), version), \
                     holder = IF(@leasehold_took, VALUES(holder), holder), \
                     lease_end_time = IF(@leasehold_took, {now} + ?, lease_end_time), \
                     status = IF(@leasehold_took, 1, status), \
                     gmt_modified = IF(@leasehold_took, {now}, gmt_modified){}",
                    if returning {
                        " RETURNING holder, version, lease_end_time, CAST(@leasehold_took AS SIGNED) AS took"
                    } else {
                        ""
                    }
                )
            }
        };
        let select_one = format!(
            "SELECT {COLS}, {now} AS db_now FROM {t} WHERE namespace = ? AND lease_name = ?"
        );
        let renew = format!(
            "UPDATE {t} SET lease_end_time = {now} + ?, gmt_modified = {now} \
             WHERE namespace = ? AND lease_name = ? AND holder = ? AND version = ? \
             AND status = 1 AND lease_end_time > {now}"
        );
        let release = format!(
            "UPDATE {t} SET status = 0, lease_end_time = {now}, gmt_modified = {now} \
             WHERE namespace = ? AND lease_name = ? AND holder = ? AND version = ? \
             AND status = 1 AND lease_end_time > {now}"
        );
        let release_all = format!(
            "UPDATE {t} SET status = 0, lease_end_time = {now}, gmt_modified = {now} \
             WHERE holder = ? AND status = 1 AND lease_end_time > {now}"
        );
        let force_release = format!(
            "UPDATE {t} SET status = 0, lease_end_time = {now}, gmt_modified = {now} \
             WHERE namespace = ? AND lease_name = ? AND status = 1 AND lease_end_time > {now}"
        );
        let purge = format!(
            "DELETE FROM {t} WHERE (status = 0 OR lease_end_time <= {now}) AND lease_end_time < {now} - ?"
        );
        let purge_ns = format!("{purge} AND namespace = ?");
        let mut sql = Self {
            dialect,
            now,
            acquire,
            select_one,
            renew,
            release,
            release_all,
            force_release,
            purge,
            purge_ns,
        };
        if dialect == Dialect::Postgres {
            for s in [
                &mut sql.acquire,
                &mut sql.select_one,
                &mut sql.renew,
                &mut sql.release,
                &mut sql.release_all,
                &mut sql.force_release,
                &mut sql.purge,
                &mut sql.purge_ns,
            ] {
                *s = numbered(s);
            }
        }
        sql
    }

    /// `SELECT` of the held rows, optionally in one namespace, optionally under a name prefix.
    pub(crate) fn list_valid(&self, table: &str, namespace: bool, prefix: bool) -> String {
        let now = &self.now;
        let mut s = format!(
            "SELECT {COLS}, {now} AS db_now FROM {table} WHERE status = 1 AND lease_end_time > {now}"
        );
        if namespace {
            s.push_str(" AND namespace = ?");
        }
        if prefix {
            match self.dialect {
                Dialect::Postgres => s.push_str(" AND lease_name LIKE ? ESCAPE '!'"),
                // SQLite's LIKE ignores ASCII case, and MariaDB's LIKE misses names where a
                // four-byte character follows a four-byte prefix character (seen on 10.11 through
                // the binary protocol): compare the prefix exactly instead. Both bind it twice.
                Dialect::Sqlite => s.push_str(" AND substr(lease_name, 1, length(?)) = ?"),
                Dialect::MySql { .. } => s.push_str(" AND LEFT(lease_name, CHAR_LENGTH(?)) = ?"),
            }
        }
        s.push_str(" ORDER BY namespace, lease_name");
        self.finish(s)
    }

    /// Batched renewal. SQLite and PostgreSQL take the items as one JSON parameter and return the
    /// renewed keys; MySQL runs [`Sql::mysql_candidates`], [`Sql::mysql_renew_ids`] and
    /// [`Sql::mysql_read_ids`] in one transaction instead.
    ///
    /// PostgreSQL parameters: json, holder, term, holder. Rows come back with `renewed` 1
    /// (renewed) or 0 (live, ours, but locked by another session: skipped, outcome unknown).
    /// SQLite parameters: term, json, holder.
    pub(crate) fn renew_many(&self, table: &str) -> String {
        let now = &self.now;
        match self.dialect {
            // PostgreSQL drives from the materialized JSON list (`PG_ITEMS`) through the unique
            // key. SQLite: a semi-join on the unique key. Rows locked by another session (an open fenced transaction) are skipped, not
            // waited for, and reported back so the caller can try them alone.
            Dialect::Postgres => numbered(&format!(
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
            )),
            Dialect::Sqlite | Dialect::MySql { .. } => format!(
                "UPDATE {table} SET lease_end_time = {now} + ?, gmt_modified = {now} \
                 WHERE (namespace, lease_name, version) IN \
                 (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]') FROM json_each(?)) \
                 AND holder = ? AND status = 1 AND lease_end_time > {now} \
                 RETURNING namespace, lease_name"
            ),
        }
    }

    /// Batched release of named tenures, one statement (PostgreSQL, SQLite: parameters json,
    /// holder; MySQL: namespace, holder, then `n` names, then `n` (name, token) pairs).
    pub(crate) fn release_many(&self, table: &str, n: usize) -> String {
        let now = &self.now;
        let set = format!("SET status = 0, lease_end_time = {now}, gmt_modified = {now}");
        match self.dialect {
            Dialect::Postgres => numbered(&format!(
                "WITH {PG_ITEMS} UPDATE {table} AS l {set} \
                 FROM (SELECT x.id FROM w, LATERAL (SELECT id FROM {table} WHERE {PG_KEY} OFFSET 0) x) c \
                 WHERE l.id = c.id AND l.holder = ? AND l.status = 1 AND l.lease_end_time > {now}"
            )),
            Dialect::Sqlite => format!(
                "UPDATE {table} {set} WHERE (namespace, lease_name, version) IN \
                 (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]') FROM json_each(?)) \
                 AND holder = ? AND status = 1 AND lease_end_time > {now}"
            ),
            Dialect::MySql { .. } => format!(
                "UPDATE {table} {set} WHERE namespace = ? AND holder = ? AND status = 1 \
                 AND lease_end_time > {now} AND lease_name IN ({}) AND (lease_name, version) IN ({})",
                placeholders(n),
                pairs(n)
            ),
        }
    }

    /// MySQL: the live-by-status rows of `holder` among `n` (name, token) items of one
    /// namespace: parameters namespace, holder, `n` names, `n` pairs. `lock`: `FOR UPDATE SKIP
    /// LOCKED` (the rows this transaction may change); without it a consistent read that does
    /// not lock (every candidate, locked by someone else or not).
    pub(crate) fn mysql_candidates(&self, table: &str, n: usize, lock: bool) -> String {
        format!(
            "SELECT id, lease_name, lease_end_time, gmt_modified FROM {table} \
             WHERE namespace = ? AND holder = ? AND status = 1 AND lease_name IN ({}) \
             AND (lease_name, version) IN ({}){}",
            placeholders(n),
            pairs(n),
            if lock { " FOR UPDATE SKIP LOCKED" } else { "" }
        )
    }

    /// MySQL: renews the `n` rows (by id) this transaction has locked, if still live: parameters
    /// term, then `n` ids.
    pub(crate) fn mysql_renew_ids(&self, table: &str, n: usize) -> String {
        let now = &self.now;
        format!(
            "UPDATE {table} SET lease_end_time = {now} + ?, gmt_modified = {now} \
             WHERE id IN ({}) AND status = 1 AND lease_end_time > {now}",
            placeholders(n)
        )
    }

    /// MySQL: reads back `n` rows by id (after [`Sql::mysql_renew_ids`], under the same locks).
    pub(crate) fn mysql_read_ids(&self, table: &str, n: usize) -> String {
        format!(
            "SELECT id, lease_end_time, gmt_modified FROM {table} WHERE id IN ({})",
            placeholders(n)
        )
    }

    /// MySQL: a non-locking read of the ids `release_all` (parameter holder) or `purge`
    /// (parameters age, and namespace when `namespace`) would change.
    pub(crate) fn mysql_release_all_candidates(&self, table: &str) -> String {
        format!(
            "SELECT id FROM {table} WHERE holder = ? AND status = 1 AND lease_end_time > {}",
            self.now
        )
    }

    /// See [`Sql::mysql_release_all_candidates`].
    pub(crate) fn mysql_purge_candidates(&self, table: &str, namespace: bool) -> String {
        let now = &self.now;
        format!(
            "SELECT id FROM {table} WHERE (status = 0 OR lease_end_time <= {now}) AND lease_end_time < {now} - ?{}",
            if namespace { " AND namespace = ?" } else { "" }
        )
    }

    /// MySQL: `release_all` of `n` candidate ids, the condition checked again: parameters holder,
    /// then `n` ids.
    pub(crate) fn mysql_release_ids(&self, table: &str, n: usize) -> String {
        let now = &self.now;
        format!(
            "UPDATE {table} SET status = 0, lease_end_time = {now}, gmt_modified = {now} \
             WHERE holder = ? AND status = 1 AND lease_end_time > {now} AND id IN ({})",
            placeholders(n)
        )
    }

    /// MySQL: `purge` of `n` candidate ids, the condition checked again: parameters age, then `n`
    /// ids.
    pub(crate) fn mysql_purge_ids(&self, table: &str, n: usize) -> String {
        let now = &self.now;
        format!(
            "DELETE FROM {table} WHERE (status = 0 OR lease_end_time <= {now}) AND lease_end_time < {now} - ? \
             AND id IN ({})",
            placeholders(n)
        )
    }

    fn finish(&self, s: String) -> String {
        if self.dialect == Dialect::Postgres {
            numbered(&s)
        } else {
            s
        }
    }
}

fn pairs(n: usize) -> String {
    let mut s = String::with_capacity(n * 6);
    for i in 0..n {
        if i > 0 {
            s.push(',');
        }
        s.push_str("(?,?)");
    }
    s
}

fn placeholders(n: usize) -> String {
    let mut s = String::with_capacity(n * 2);
    for i in 0..n {
        if i > 0 {
            s.push(',');
        }
        s.push('?');
    }
    s
}

/// `sql`, written with `?` placeholders, as `backend` takes it: PostgreSQL's `$1, $2, …`, and
/// unchanged for SQLite and MySQL. For statements of your own beside the lease table (the lab's
/// torture log uses it); a `?` inside a string literal would be rewritten too.
///
/// # Examples
/// ```
/// use leasehold_storage::rewrite_placeholders;
/// use sea_orm::DbBackend;
/// assert_eq!(rewrite_placeholders(DbBackend::Postgres, "a = ? AND b = ?"), "a = $1 AND b = $2");
/// assert_eq!(rewrite_placeholders(DbBackend::Sqlite, "a = ?"), "a = ?");
/// ```
#[must_use]
pub fn rewrite_placeholders(backend: sea_orm::DbBackend, sql: &str) -> String {
    if backend == sea_orm::DbBackend::Postgres {
        numbered(sql)
    } else {
        sql.to_owned()
    }
}

/// Rewrites `?` placeholders as PostgreSQL's `$1, $2, …`. Our SQL has no `?` in literals.
pub(crate) fn numbered(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 16);
    let mut n = 0;
    for c in sql.chars() {
        if c == '?' {
            n += 1;
            out.push('$');
            out.push_str(&n.to_string());
        } else {
            out.push(c);
        }
    }
    out
}

/// Escapes a name prefix for `LIKE … ESCAPE '!'` and appends the `%` wildcard.
pub(crate) fn like_prefix(prefix: &str) -> String {
    let mut s = String::with_capacity(prefix.len() + 2);
    for c in prefix.chars() {
        if matches!(c, '!' | '%' | '_') {
            s.push('!');
        }
        s.push(c);
    }
    s.push('%');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_placeholders() {
        assert_eq!(numbered("a = ? AND b = ?"), "a = $1 AND b = $2");
    }

    #[test]
    fn escapes_like_wildcards() {
        assert_eq!(like_prefix("a%b_c!d\\e"), "a!%b!_c!!d\\e%");
    }
}
