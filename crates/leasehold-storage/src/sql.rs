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

const COLS: &str = "namespace, lease_name, holder, version, lease_end_time, status";

impl Sql {
    pub(crate) fn new(dialect: Dialect, table: &str) -> Self {
        let now = match dialect {
            // clock_timestamp(), not now(): now() is frozen at the start of the transaction.
            Dialect::Postgres => "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint",
            // Pure UTC arithmetic: no session time zone, no DST ambiguity.
            Dialect::MySql { .. } => {
                "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000)"
            }
            // 'now' is the same for every use within one statement.
            Dialect::Sqlite => "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)",
        }
        .to_owned();
        let t = table;
        let acquire = match dialect {
            Dialect::Postgres => format!(
                "WITH n AS (SELECT {now} AS ms) \
                 INSERT INTO {t} AS l (namespace, lease_name, holder, lease_end_time, status, version, gmt_create, gmt_modified) \
                 SELECT ?, ?, ?, n.ms + ?, 1, 1, n.ms, n.ms FROM n \
                 ON CONFLICT (namespace, lease_name) DO UPDATE SET \
                 version = CASE WHEN ? = 1 AND l.status = 1 AND l.holder = EXCLUDED.holder AND l.lease_end_time > EXCLUDED.gmt_modified \
                   THEN l.version ELSE l.version + 1 END, \
                 holder = EXCLUDED.holder, lease_end_time = EXCLUDED.lease_end_time, status = 1, \
                 gmt_modified = EXCLUDED.gmt_modified \
                 WHERE l.status = 0 OR l.lease_end_time <= EXCLUDED.gmt_modified OR l.holder = EXCLUDED.holder \
                 RETURNING holder, version, lease_end_time"
            ),
            Dialect::Sqlite => format!(
                "INSERT INTO {t} AS l (namespace, lease_name, holder, lease_end_time, status, version, gmt_create, gmt_modified) \
                 VALUES (?, ?, ?, {now} + ?, 1, 1, {now}, {now}) \
                 ON CONFLICT (namespace, lease_name) DO UPDATE SET \
                 version = CASE WHEN ? = 1 AND l.status = 1 AND l.holder = excluded.holder AND l.lease_end_time > excluded.gmt_modified \
                   THEN l.version ELSE l.version + 1 END, \
                 holder = excluded.holder, lease_end_time = excluded.lease_end_time, status = 1, \
                 gmt_modified = excluded.gmt_modified \
                 WHERE l.status = 0 OR l.lease_end_time <= excluded.gmt_modified OR l.holder = excluded.holder \
                 RETURNING holder, version, lease_end_time"
            ),
            // MySQL assigns left to right, each expression seeing the earlier assignments. The
            // version is decided first from the old row; then `holder` is set only when the grant
            // happens, after which "granted" is exactly `holder = VALUES(holder)`.
            Dialect::MySql { returning } => {
                let free = "(status = 0 OR lease_end_time <= VALUES(gmt_modified) OR holder = VALUES(holder))";
                format!(
                    "INSERT INTO {t} (namespace, lease_name, holder, lease_end_time, status, version, gmt_create, gmt_modified) \
                     VALUES (?, ?, ?, {now} + ?, 1, 1, {now}, {now}) \
                     ON DUPLICATE KEY UPDATE \
                     version = IF(? = 1 AND status = 1 AND holder = VALUES(holder) AND lease_end_time > VALUES(gmt_modified), version, \
                       IF({free}, version + 1, version)), \
                     holder = IF({free}, VALUES(holder), holder), \
                     lease_end_time = IF(holder = VALUES(holder), VALUES(lease_end_time), lease_end_time), \
                     status = IF(holder = VALUES(holder), 1, status), \
                     gmt_modified = IF(holder = VALUES(holder), VALUES(gmt_modified), gmt_modified){}",
                    if returning {
                        " RETURNING holder, version, lease_end_time"
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
    /// renewed keys; MySQL takes `n` row constructors and is followed by [`Sql::renewed_mysql`].
    pub(crate) fn renew_many(&self, table: &str, n: usize) -> String {
        let now = &self.now;
        match self.dialect {
            // A semi-join on the unique key: the planner drives from the JSON list through the
            // (namespace, lease_name) index. Joining the expanded list directly made it scan the
            // holder's rows and re-expand the list for each (quadratic: 230 s for 10,000 rows).
            Dialect::Postgres => numbered(&format!(
                "UPDATE {table} AS l SET lease_end_time = n.ms + ?, gmt_modified = n.ms \
                 FROM (SELECT {now} AS ms) n \
                 WHERE (l.namespace, l.lease_name, l.version) IN \
                 (SELECT e->>0, e->>1, (e->>2)::bigint FROM json_array_elements(?::json) e) \
                 AND l.holder = ? AND l.status = 1 AND l.lease_end_time > n.ms \
                 RETURNING l.namespace, l.lease_name"
            )),
            Dialect::Sqlite => format!(
                "UPDATE {table} SET lease_end_time = {now} + ?, gmt_modified = {now} \
                 WHERE (namespace, lease_name, version) IN \
                 (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]') FROM json_each(?)) \
                 AND holder = ? AND status = 1 AND lease_end_time > {now} \
                 RETURNING namespace, lease_name"
            ),
            // One namespace per statement and a plain `lease_name IN (…)`: a range on the unique
            // key with a third of the placeholders of a `(namespace, lease_name, version)` row
            // list. The version is checked on the rows read back (`renewed_mysql`); a row of this
            // holder with another version is this holder's own newer tenure, which the extension
            // cannot harm.
            Dialect::MySql { .. } => format!(
                "UPDATE {table} SET lease_end_time = {now} + ?, gmt_modified = {now} \
                 WHERE namespace = ? AND holder = ? AND status = 1 AND lease_end_time > {now} \
                 AND lease_name IN ({})",
                placeholders(n)
            ),
        }
    }

    /// MySQL: which of `n` items are held by the holder now (run right after the batched UPDATE).
    pub(crate) fn renewed_mysql(&self, table: &str, n: usize) -> String {
        format!(
            "SELECT lease_name, version FROM {table} WHERE namespace = ? AND holder = ? AND status = 1 \
             AND lease_end_time > {} AND lease_name IN ({})",
            self.now,
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
