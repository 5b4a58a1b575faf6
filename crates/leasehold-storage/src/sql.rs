//! Every statement of the SeaORM store: one function per statement, returning the finished
//! [`Statement`] with its values bound in the order its text names them, per backend. The text of
//! the fixed statements is built once per store. Every value is a bound parameter; only the
//! validated table name is spliced in. [`crate::SeaOrmStore`] sends these and reads the rows.

use leasehold_core::{FencingToken, HolderId, LeaseKey, LeaseValue, Namespace, Term};
use sea_orm::{DbBackend, Statement, Value};

use crate::{RenewItem, StoreError};

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

/// The statements of one store (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct Sql {
    pub dialect: Dialect,
    backend: DbBackend,
    table: String,
    /// The token floor table (`{table}_floor`, one row, `id` 1).
    floor: String,
    /// The database's clock in milliseconds since the epoch, as an SQL expression.
    now: String,
    /// PostgreSQL: grants and releases send their doorbell notifications themselves
    /// ([`crate::SeaOrmStore::notify_in_statements`]).
    notify: bool,
    text: Texts,
}

/// The PostgreSQL channel of rings (`doorbell::postgres::CHANNEL`).
pub(crate) const RELEASED_CHANNEL: &str = "leasehold_lock_released";

/// With `notify`, `, pg_notify(channel, payload)` for a `RETURNING` list, the payload that of
/// `doorbell::payload` computed from the row (byte lengths, as Rust's) with its columns qualified
/// by `a` (`"l."` or `""`): delivered at commit, and not at all if the statement's transaction
/// rolls back. Without, nothing.
fn notify_item(notify: bool, table: &str, channel: &str, a: &str) -> String {
    if !notify {
        return String::new();
    }
    format!(
        ", pg_notify('{channel}', '{}:' || octet_length({a}namespace)::text || ':' || '{table}' || {a}namespace || {a}lease_name)",
        table.len()
    )
}

/// The text of the fixed statements, placeholders already in the backend's form.
#[derive(Debug, Clone)]
struct Texts {
    acquire: String,
    grant_row: String,
    select_one: String,
    renew: String,
    release: String,
    release_all: String,
    force_release: String,
    db_now: String,
    fenced: String,
    columns: String,
    set_value: String,
    floor_columns: String,
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

const COLS: &str = "namespace, lease_name, holder, version, lease_end_time, status, lease_value";

impl Sql {
    /// The database's clock in milliseconds since the epoch, as an SQL expression (for the
    /// batched statements of `group.rs`, built beside their binds there).
    pub(crate) fn now(&self) -> &str {
        &self.now
    }

    /// The token of a row inserted now: one above the token floor (see [`Sql::fresh_version`]).
    pub(crate) fn fresh(&self) -> String {
        fresh_version(self.dialect, &self.floor)
    }

    /// The token floor table's name.
    pub(crate) fn floor_table(&self) -> &str {
        &self.floor
    }

    /// Whether grants and releases send their doorbell notifications themselves.
    pub(crate) fn notifies(&self) -> bool {
        self.notify
    }

    /// With [`Sql::notifies`], a `RETURNING` item announcing each row a grant wrote (on
    /// `doorbell::postgres::CHANGES`), its columns qualified by `alias` (`"l."` or `""`);
    /// otherwise nothing.
    pub(crate) fn announce_item(&self, alias: &str) -> String {
        notify_item(self.notify, &self.table, crate::ddl::CHANGES_CHANNEL, alias)
    }

    /// With [`Sql::notifies`], a `RETURNING` item ringing for each row a release ended (on
    /// `doorbell::postgres::CHANNEL`); otherwise nothing.
    pub(crate) fn ring_item(&self, alias: &str) -> String {
        notify_item(self.notify, &self.table, RELEASED_CHANNEL, alias)
    }

    /// The statements of a store on `table`.
    pub(crate) fn new(dialect: Dialect, table: &str) -> Self {
        Self::notifying(dialect, table, false)
    }

    /// The statements of a store on `table`; with `notify` (PostgreSQL only, other dialects
    /// ignore it) grants and releases send the doorbell's notifications themselves.
    pub(crate) fn notifying(dialect: Dialect, table: &str, notify: bool) -> Self {
        let notify = notify && dialect == Dialect::Postgres;
        let backend = match dialect {
            Dialect::Sqlite => DbBackend::Sqlite,
            Dialect::Postgres => DbBackend::Postgres,
            Dialect::MySql { .. } => DbBackend::MySql,
        };
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
        let floor = crate::ddl::floor_table(table);
        let fresh = fresh_version(dialect, &floor);
        // Parameters of every grant: namespace, name, holder, term (ms), then `keep` (1:
        // try_acquire keeps the token of a live grant of ours and may extend it; 0: a new
        // tenure), then `expected` (the token of our own live tenure a take-over may replace; -1
        // for none), and the new tenure's value. The order differs per dialect: see
        // `Sql::acquire`. A row inserted starts one above the token floor (`fresh`); a new
        // tenure writes its value, a kept grant keeps the value it has.
        // PostgreSQL with `notify`: each row granted announces itself, each row released rings.
        let announce = notify_item(notify, table, crate::ddl::CHANGES_CHANNEL, "");
        let ring = match notify_item(notify, table, RELEASED_CHANNEL, "") {
            item if item.is_empty() => item,
            item => format!(" RETURNING {}", item.trim_start_matches(", ")),
        };
        let acquire = match dialect {
            // ON CONFLICT DO UPDATE locks the existing row, then evaluates WHERE and SET on its
            // newest version: the clock is read then, after any lock wait.
            Dialect::Postgres | Dialect::Sqlite => format!(
                "INSERT INTO {t} AS l (namespace, lease_name, holder, lease_end_time, status, version, lease_value, gmt_create, gmt_modified) \
                 VALUES (?, ?, ?, {now} + ?, 1, {fresh}, ?, {now}, {now}) \
                 ON CONFLICT (namespace, lease_name) DO UPDATE SET \
                 version = CASE WHEN ? = 1 AND l.status = 1 AND l.holder = excluded.holder AND l.lease_end_time > {now} \
                   THEN l.version ELSE l.version + 1 END, \
                 lease_value = CASE WHEN ? = 1 AND l.status = 1 AND l.holder = excluded.holder AND l.lease_end_time > {now} \
                   THEN l.lease_value ELSE excluded.lease_value END, \
                 holder = excluded.holder, lease_end_time = {now} + ?, status = 1, gmt_modified = {now} \
                 WHERE l.status = 0 OR l.lease_end_time <= {now} \
                   OR (l.holder = excluded.holder AND (? = 1 OR l.version = ?)) \
                 RETURNING holder, version, lease_end_time{announce}"
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
                    "INSERT INTO {t} (namespace, lease_name, holder, lease_end_time, status, version, lease_value, gmt_create, gmt_modified) \
                     VALUES (?, ?, ?, {now} + ?, (@leasehold_took := 1), {fresh}, ?, {now}, {now}) \
                     ON DUPLICATE KEY UPDATE \
                     version = IF((@leasehold_took := {take}), \
                       IF(? = 1 AND status = 1 AND holder = VALUES(holder) AND lease_end_time > {now}, version, version + 1), version), \
                     lease_value = IF(@leasehold_took, \
                       IF(? = 1 AND status = 1 AND holder = VALUES(holder) AND lease_end_time > {now}, lease_value, VALUES(lease_value)), lease_value), \
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
             AND status = 1 AND lease_end_time > {now}{ring}"
        );
        let release_all = format!(
            "UPDATE {t} SET status = 0, lease_end_time = {now}, gmt_modified = {now} \
             WHERE holder = ? AND status = 1 AND lease_end_time > {now}"
        );
        let force_release = format!(
            "UPDATE {t} SET status = 0, lease_end_time = {now}, gmt_modified = {now} \
             WHERE namespace = ? AND lease_name = ? AND status = 1 AND lease_end_time > {now}"
        );
        // Oracle MySQL's read of the row its grant upsert left, in the same transaction.
        let grant_row = format!(
            "SELECT holder, version, lease_end_time, CAST(@leasehold_took AS SIGNED) AS took \
             FROM {t} WHERE namespace = ? AND lease_name = ?"
        );
        let db_now = format!("SELECT {now} AS db_now");
        // The fence: this tenure, still live by the database's clock, its row locked until the
        // transaction ends (SQLite: the transaction holds the database's write lock instead).
        let lock = match dialect {
            Dialect::Sqlite => "",
            Dialect::Postgres | Dialect::MySql { .. } => " FOR UPDATE",
        };
        let fenced = format!(
            "SELECT version FROM {t} WHERE namespace = ? AND lease_name = ? AND holder = ? AND version = ? \
             AND status = 1 AND lease_end_time > {now}{lock}"
        );
        let columns = format!(
            "SELECT id, namespace, lease_name, holder, lease_end_time, status, version, lease_value, gmt_create, gmt_modified \
             FROM {t} WHERE 1 = 0"
        );
        let floor_columns = format!("SELECT id, version FROM {floor} WHERE 1 = 0");
        let set_value = format!(
            "UPDATE {t} SET lease_value = ?, gmt_modified = {now} \
             WHERE namespace = ? AND lease_name = ? AND holder = ? AND version = ? \
             AND status = 1 AND lease_end_time > {now}"
        );
        let mut text = Texts {
            acquire,
            grant_row,
            select_one,
            renew,
            release,
            release_all,
            force_release,
            db_now,
            fenced,
            columns,
            set_value,
            floor_columns,
        };
        if dialect == Dialect::Postgres {
            for s in [
                &mut text.acquire,
                &mut text.grant_row,
                &mut text.select_one,
                &mut text.renew,
                &mut text.release,
                &mut text.release_all,
                &mut text.force_release,
                &mut text.fenced,
                &mut text.set_value,
            ] {
                *s = numbered(s);
            }
        }
        Self {
            dialect,
            backend,
            table: table.to_owned(),
            floor,
            now,
            notify,
            text,
        }
    }

    fn statement(&self, sql: &str, values: Vec<Value>) -> Statement {
        Statement::from_sql_and_values(self.backend, sql, values)
    }

    /// The grant behind `try_acquire` (`keep`: a live grant of ours keeps its token and is
    /// extended), `begin_tenure` (a new tenure on a free row only) and `take_over_tenure` (also
    /// over our own live tenure `expected`). PostgreSQL and SQLite return the row only when they
    /// granted; MariaDB returns it always, with `took`; Oracle MySQL returns nothing (read it
    /// back with [`Sql::grant_row`] in the same transaction).
    pub(crate) fn acquire(
        &self,
        key: &LeaseKey,
        holder: &HolderId,
        term: Term,
        keep: bool,
        expected: Option<FencingToken>,
        value: Option<&LeaseValue>,
    ) -> Statement {
        let [ns, name] = key_values(key);
        let (t, k, x): (Value, Value, Value) = (
            term.as_millis_i64().into(),
            i32::from(keep).into(),
            expected.map_or(-1, FencingToken::get).into(),
        );
        let h: Value = holder.as_str().into();
        let v = value_of(value);
        let values = match self.dialect {
            Dialect::Postgres | Dialect::Sqlite => {
                vec![ns, name, h, t.clone(), v, k.clone(), k.clone(), t, k, x]
            }
            Dialect::MySql { .. } => vec![ns, name, h, t.clone(), v, k.clone(), x, k.clone(), k, t],
        };
        self.statement(&self.text.acquire, values)
    }

    /// Oracle MySQL: the row the grant upsert left and whether it granted (`took`).
    pub(crate) fn grant_row(&self, key: &LeaseKey) -> Statement {
        self.statement(&self.text.grant_row, key_values(key).into())
    }

    /// One row, with the database's time (`db_now`).
    pub(crate) fn get(&self, key: &LeaseKey) -> Statement {
        self.statement(&self.text.select_one, key_values(key).into())
    }

    /// Extends the live tenure `holder`/`token` to one `term` from now.
    pub(crate) fn renew(
        &self,
        key: &LeaseKey,
        holder: &HolderId,
        token: FencingToken,
        term: Term,
    ) -> Statement {
        let [ns, name] = key_values(key);
        let values = vec![
            term.as_millis_i64().into(),
            ns,
            name,
            holder.as_str().into(),
            token.get().into(),
        ];
        self.statement(&self.text.renew, values)
    }

    /// Releases the live tenure `holder`/`token`.
    pub(crate) fn release(
        &self,
        key: &LeaseKey,
        holder: &HolderId,
        token: FencingToken,
    ) -> Statement {
        let [ns, name] = key_values(key);
        self.statement(
            &self.text.release,
            vec![ns, name, holder.as_str().into(), token.get().into()],
        )
    }

    /// Releases every live tenure of `holder` (PostgreSQL, SQLite; MySQL goes by id:
    /// [`Sql::mysql_release_all_candidates`]).
    pub(crate) fn release_all(&self, holder: &HolderId) -> Statement {
        self.statement(&self.text.release_all, vec![holder.as_str().into()])
    }

    /// Releases `key` whoever holds it.
    pub(crate) fn force_release(&self, key: &LeaseKey) -> Statement {
        self.statement(&self.text.force_release, key_values(key).into())
    }

    /// The database's clock (`db_now`).
    pub(crate) fn db_now(&self) -> Statement {
        self.statement(&self.text.db_now, Vec::new())
    }

    /// The fence of [`crate::SeaOrmStore::begin_fenced`]: a row when the tenure is live, locked
    /// until the transaction ends.
    pub(crate) fn fenced(
        &self,
        key: &LeaseKey,
        holder: &HolderId,
        token: FencingToken,
    ) -> Statement {
        let [ns, name] = key_values(key);
        self.statement(
            &self.text.fenced,
            vec![ns, name, holder.as_str().into(), token.get().into()],
        )
    }

    /// Every column leasehold reads or writes, no row: fails when one is missing.
    pub(crate) fn columns(&self) -> Statement {
        self.statement(&self.text.columns, Vec::new())
    }

    /// The token floor table's columns, no row: fails when the table is missing.
    pub(crate) fn floor_columns(&self) -> Statement {
        self.statement(&self.text.floor_columns, Vec::new())
    }

    /// Sets the value of the live tenure `holder`/`token`.
    pub(crate) fn set_value(
        &self,
        key: &LeaseKey,
        holder: &HolderId,
        token: FencingToken,
        value: Option<&LeaseValue>,
    ) -> Statement {
        let [ns, name] = key_values(key);
        self.statement(
            &self.text.set_value,
            vec![
                value_of(value),
                ns,
                name,
                holder.as_str().into(),
                token.get().into(),
            ],
        )
    }

    /// The condition of a purgeable row (released or expired, ended more than `?` ms ago, then
    /// `AND namespace = ?` when `namespace`), and its values.
    fn purgeable(&self, namespace: Option<&Namespace>, age: Term) -> (String, Vec<Value>) {
        let now = &self.now;
        let mut values: Vec<Value> = vec![age.as_millis_i64().into()];
        let mut cond =
            format!("(status = 0 OR lease_end_time <= {now}) AND lease_end_time < {now} - ?");
        if let Some(ns) = namespace {
            cond.push_str(" AND namespace = ?");
            values.push(ns.as_str().into());
        }
        (cond, values)
    }

    /// PostgreSQL: locks the token floor against every grant (each grant statement reads it, so
    /// it waits for this transaction and then sees the raised floor), for the purge's
    /// transaction.
    pub(crate) fn pg_lock_floor(&self) -> Statement {
        self.statement(
            &format!("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE", self.floor),
            Vec::new(),
        )
    }

    /// PostgreSQL: deletes up to `limit` purgeable rows (skipping rows another session holds
    /// locked) and raises the token floor to the largest token deleted, in one statement; `n`
    /// is how many.
    pub(crate) fn pg_purge_chunk(
        &self,
        namespace: Option<&Namespace>,
        age: Term,
        limit: usize,
    ) -> Statement {
        let (cond, mut values) = self.purgeable(namespace, age);
        values.push(i64::try_from(limit).unwrap_or(i64::MAX).into());
        let (t, f) = (&self.table, &self.floor);
        self.statement(
            &numbered(&format!(
                "WITH d AS (DELETE FROM {t} WHERE id IN (SELECT id FROM {t} WHERE {cond} \
                 LIMIT ? FOR UPDATE SKIP LOCKED) RETURNING version), \
                 u AS (UPDATE {f} SET version = GREATEST(version, (SELECT COALESCE(MAX(version), 0) FROM d)) \
                 WHERE id = 1 RETURNING id) \
                 SELECT (SELECT COUNT(*) FROM d) AS n, (SELECT COUNT(*) FROM u) AS floors"
            )),
            values,
        )
    }

    /// SQLite, first of the purge's transaction: raises the token floor to the largest token of
    /// the purgeable rows.
    pub(crate) fn sqlite_raise_floor(&self, namespace: Option<&Namespace>, age: Term) -> Statement {
        let (cond, values) = self.purgeable(namespace, age);
        self.statement(
            &format!(
                "UPDATE {f} SET version = MAX(version, COALESCE((SELECT MAX(version) FROM {t} WHERE {cond}), 0)) \
                 WHERE id = 1",
                f = self.floor,
                t = self.table
            ),
            values,
        )
    }

    /// SQLite, second: deletes the purgeable rows whose token the floor covers.
    pub(crate) fn sqlite_purge(&self, namespace: Option<&Namespace>, age: Term) -> Statement {
        let (cond, values) = self.purgeable(namespace, age);
        self.statement(
            &format!(
                "DELETE FROM {t} WHERE {cond} AND version <= (SELECT version FROM {f} WHERE id = 1)",
                f = self.floor,
                t = self.table
            ),
            values,
        )
    }

    /// MySQL, first of the purge's transaction: the token floor's row, locked against every
    /// grant (each grant reads it with a locking read, so it waits for this transaction and
    /// then reads the raised floor).
    pub(crate) fn mysql_lock_floor(&self) -> Statement {
        self.statement(
            &format!("SELECT version FROM {} WHERE id = 1 FOR UPDATE", self.floor),
            Vec::new(),
        )
    }

    /// MySQL: the candidate rows `ids` still purgeable, locked (skipping rows another session
    /// holds locked), with their tokens.
    pub(crate) fn mysql_lock_purgeable(&self, age: Term, ids: &[i64]) -> Statement {
        let (cond, mut values) = self.purgeable(None, age);
        values.extend(ids.iter().map(|&id| Value::from(id)));
        self.statement(
            &format!(
                "SELECT id, version FROM {} WHERE {cond} AND id IN ({}) FOR UPDATE SKIP LOCKED",
                self.table,
                placeholders(ids.len())
            ),
            values,
        )
    }

    /// MySQL: raises the token floor to `token`.
    pub(crate) fn mysql_raise_floor(&self, token: i64) -> Statement {
        self.statement(
            &format!(
                "UPDATE {} SET version = GREATEST(version, ?) WHERE id = 1",
                self.floor
            ),
            vec![token.into()],
        )
    }

    /// MySQL: deletes the rows `ids` (locked by this transaction).
    pub(crate) fn mysql_delete_ids(&self, ids: &[i64]) -> Statement {
        self.statement(
            &format!(
                "DELETE FROM {} WHERE id IN ({})",
                self.table,
                placeholders(ids.len())
            ),
            ids.iter().map(|&id| Value::from(id)).collect(),
        )
    }

    /// The held rows, optionally in one namespace, optionally under a name prefix (matched
    /// literally), ordered by namespace and name, with the database's time (`db_now`).
    pub(crate) fn list_valid(&self, namespace: Option<&Namespace>, prefix: &str) -> Statement {
        let (table, now) = (&self.table, &self.now);
        let mut s = format!(
            "SELECT {COLS}, {now} AS db_now FROM {table} WHERE status = 1 AND lease_end_time > {now}"
        );
        let mut values: Vec<Value> = Vec::new();
        if let Some(ns) = namespace {
            s.push_str(" AND namespace = ?");
            values.push(ns.as_str().into());
        }
        if !prefix.is_empty() {
            match self.dialect {
                Dialect::Postgres => {
                    s.push_str(" AND lease_name LIKE ? ESCAPE '!'");
                    values.push(like_prefix(prefix).into());
                }
                // SQLite's LIKE ignores ASCII case, and MariaDB's LIKE misses names where a
                // four-byte character follows a four-byte prefix character (seen on 10.11 through
                // the binary protocol): compare the prefix exactly instead, bound twice.
                Dialect::Sqlite | Dialect::MySql { .. } => {
                    s.push_str(if self.dialect == Dialect::Sqlite {
                        " AND substr(lease_name, 1, length(?)) = ?"
                    } else {
                        " AND LEFT(lease_name, CHAR_LENGTH(?)) = ?"
                    });
                    values.push(prefix.into());
                    values.push(prefix.into());
                }
            }
        }
        s.push_str(" ORDER BY namespace, lease_name");
        self.statement(&self.finish(s), values)
    }

    /// Batched renewal of `items` of `holder` on PostgreSQL and SQLite: the items as one JSON
    /// parameter, the renewed keys returned (MySQL runs [`Sql::mysql_candidates`],
    /// [`Sql::mysql_renew_ids`] and [`Sql::mysql_read_ids`] in one transaction instead).
    /// PostgreSQL returns rows with `renewed` 1 (renewed) or 0 (live, ours, but locked by another
    /// session: skipped, outcome unknown); SQLite returns the renewed rows.
    pub(crate) fn renew_many(
        &self,
        holder: &HolderId,
        items: &[RenewItem],
        term: Term,
    ) -> Result<Statement, StoreError> {
        let (table, now) = (&self.table, &self.now);
        let json: Value = items_json("renew_many", items)?.into();
        let (t, h): (Value, Value) = (term.as_millis_i64().into(), holder.as_str().into());
        Ok(match self.dialect {
            // PostgreSQL drives from the materialized JSON list (`PG_ITEMS`) through the unique
            // key. Rows locked by another session (an open fenced transaction) are skipped, not
            // waited for, and reported back so the caller can try them alone.
            Dialect::Postgres => self.statement(
                &numbered(&format!(
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
                vec![json, h.clone(), t, h],
            ),
            // SQLite: a semi-join on the unique key.
            Dialect::Sqlite | Dialect::MySql { .. } => self.statement(
                &format!(
                    "UPDATE {table} SET lease_end_time = {now} + ?, gmt_modified = {now} \
                     WHERE (namespace, lease_name, version) IN \
                     (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]') FROM json_each(?)) \
                     AND holder = ? AND status = 1 AND lease_end_time > {now} \
                     RETURNING namespace, lease_name"
                ),
                vec![t, json, h],
            ),
        })
    }

    /// Batched release of the named tenures `items` of `holder`, one statement, the items as
    /// one JSON parameter (PostgreSQL, SQLite; MySQL: [`Sql::mysql_release_many`]).
    pub(crate) fn release_many(
        &self,
        holder: &HolderId,
        items: &[RenewItem],
    ) -> Result<Statement, StoreError> {
        let (table, now) = (&self.table, &self.now);
        let set = format!("SET status = 0, lease_end_time = {now}, gmt_modified = {now}");
        let values = vec![
            items_json("release_many", items)?.into(),
            holder.as_str().into(),
        ];
        let sql = match self.dialect {
            Dialect::Postgres => numbered(&format!(
                "WITH {PG_ITEMS} UPDATE {table} AS l {set} \
                 WHERE l.id = ANY(ARRAY(SELECT x.id FROM w, LATERAL (SELECT id FROM {table} WHERE {PG_KEY} OFFSET 0) x)) \
                 AND l.holder = ? AND l.status = 1 AND l.lease_end_time > {now}"
            )),
            Dialect::Sqlite | Dialect::MySql { .. } => format!(
                "UPDATE {table} {set} WHERE (namespace, lease_name, version) IN \
                 (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]') FROM json_each(?)) \
                 AND holder = ? AND status = 1 AND lease_end_time > {now}"
            ),
        };
        Ok(self.statement(&sql, values))
    }

    /// MySQL: batched release of the items `chunk` (one namespace) of `holder`, one statement.
    pub(crate) fn mysql_release_many(
        &self,
        holder: &HolderId,
        items: &[RenewItem],
        chunk: &[usize],
    ) -> Statement {
        let now = &self.now;
        self.statement(
            &format!(
                "UPDATE {} SET status = 0, lease_end_time = {now}, gmt_modified = {now} \
                 WHERE namespace = ? AND holder = ? AND status = 1 \
                 AND lease_end_time > {now} AND lease_name IN ({}) AND (lease_name, version) IN ({})",
                self.table,
                placeholders(chunk.len()),
                pairs(chunk.len())
            ),
            mysql_key_values(holder, items, chunk),
        )
    }

    /// MySQL: the live-by-status rows of `holder` named by the items `chunk` (one namespace),
    /// with their `version` (the caller keeps those whose version is the item's token): the
    /// names alone select the rows, so the server looks each name up once (a `(lease_name,
    /// version)` row-constructor list beside it cost MariaDB half as much again per chunk of
    /// 5,000, and the old consistent read of every item before the locking read as much again).
    /// `lock`: `FOR UPDATE SKIP LOCKED` (the rows this transaction may change); without it a
    /// consistent read that does not lock (every candidate, locked by someone else or not).
    pub(crate) fn mysql_candidates(
        &self,
        holder: &HolderId,
        items: &[RenewItem],
        chunk: &[usize],
        lock: bool,
    ) -> Statement {
        self.statement(
            &format!(
                "SELECT id, lease_name, version, lease_end_time, gmt_modified FROM {} \
                 WHERE namespace = ? AND holder = ? AND status = 1 AND lease_name IN ({}){}",
                self.table,
                placeholders(chunk.len()),
                if lock { " FOR UPDATE SKIP LOCKED" } else { "" }
            ),
            mysql_name_values(holder, items, chunk),
        )
    }

    /// MySQL: [`Sql::mysql_candidates`] `FOR UPDATE SKIP LOCKED` by row id (ids a renewal found
    /// before) instead of by name, with the same namespace, holder and status conditions; the
    /// caller keeps only rows whose name is an item's.
    pub(crate) fn mysql_candidates_by_id(
        &self,
        holder: &HolderId,
        namespace: &str,
        ids: &[i64],
    ) -> Statement {
        let mut values: Vec<Value> = vec![namespace.into(), holder.as_str().into()];
        values.extend(ids.iter().map(|&id| Value::from(id)));
        self.statement(
            &format!(
                "SELECT id, lease_name, version, lease_end_time, gmt_modified FROM {} \
                 WHERE namespace = ? AND holder = ? AND status = 1 AND id IN ({}) \
                 FOR UPDATE SKIP LOCKED",
                self.table,
                placeholders(ids.len())
            ),
            values,
        )
    }

    /// MySQL: renews the rows `ids` (which this transaction has locked), if still live.
    pub(crate) fn mysql_renew_ids(&self, ids: &[i64], term: Term) -> Statement {
        let now = &self.now;
        let mut values: Vec<Value> = vec![term.as_millis_i64().into()];
        values.extend(ids.iter().map(|&id| Value::from(id)));
        self.statement(
            &format!(
                "UPDATE {} SET lease_end_time = {now} + ?, gmt_modified = {now} \
                 WHERE id IN ({}) AND status = 1 AND lease_end_time > {now}",
                self.table,
                placeholders(ids.len())
            ),
            values,
        )
    }

    /// MySQL: reads back the rows `ids` (after [`Sql::mysql_renew_ids`], under the same locks).
    pub(crate) fn mysql_read_ids(&self, ids: &[i64]) -> Statement {
        self.statement(
            &format!(
                "SELECT id, lease_end_time, gmt_modified FROM {} WHERE id IN ({})",
                self.table,
                placeholders(ids.len())
            ),
            ids.iter().map(|&id| Value::from(id)).collect(),
        )
    }

    /// MySQL: a non-locking read of the ids `release_all` of `holder` would change.
    pub(crate) fn mysql_release_all_candidates(&self, holder: &HolderId) -> Statement {
        self.statement(
            &format!(
                "SELECT id FROM {} WHERE holder = ? AND status = 1 AND lease_end_time > {}",
                self.table, self.now
            ),
            vec![holder.as_str().into()],
        )
    }

    /// MySQL: a non-locking read of the ids `purge` would delete.
    pub(crate) fn mysql_purge_candidates(
        &self,
        namespace: Option<&Namespace>,
        age: Term,
    ) -> Statement {
        let now = &self.now;
        let mut values: Vec<Value> = vec![age.as_millis_i64().into()];
        if let Some(ns) = namespace {
            values.push(ns.as_str().into());
        }
        self.statement(
            &format!(
                "SELECT id FROM {} WHERE (status = 0 OR lease_end_time <= {now}) AND lease_end_time < {now} - ?{}",
                self.table,
                if namespace.is_some() { " AND namespace = ?" } else { "" }
            ),
            values,
        )
    }

    /// MySQL: `release_all` of the candidate `ids`, the condition checked again.
    pub(crate) fn mysql_release_ids(&self, holder: &HolderId, ids: &[i64]) -> Statement {
        let now = &self.now;
        let mut values: Vec<Value> = vec![holder.as_str().into()];
        values.extend(ids.iter().map(|&id| Value::from(id)));
        self.statement(
            &format!(
                "UPDATE {} SET status = 0, lease_end_time = {now}, gmt_modified = {now} \
                 WHERE holder = ? AND status = 1 AND lease_end_time > {now} AND id IN ({})",
                self.table,
                placeholders(ids.len())
            ),
            values,
        )
    }

    /// The catalog's unique keys of the lease table, each as `cols` (comma-separated column
    /// names in key order).
    pub(crate) fn catalog_unique_keys(&self) -> Statement {
        let sql = match self.dialect {
            Dialect::Postgres => numbered(
                "SELECT string_agg(a.attname, ',' ORDER BY k.ord) AS cols \
                 FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY k(attnum, ord) \
                 JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum \
                 WHERE i.indrelid = to_regclass(?) AND i.indisunique AND i.indpred IS NULL \
                 GROUP BY i.indexrelid",
            ),
            Dialect::Sqlite => "SELECT (SELECT group_concat(name, ',') FROM (SELECT name FROM pragma_index_info(il.name) ORDER BY seqno)) AS cols \
                 FROM pragma_index_list(?) il WHERE il.\"unique\" = 1 AND il.partial = 0"
                .to_owned(),
            Dialect::MySql { .. } => "SELECT CAST(GROUP_CONCAT(COLUMN_NAME ORDER BY SEQ_IN_INDEX) AS CHAR) AS cols \
                 FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? \
                 AND NON_UNIQUE = 0 GROUP BY INDEX_NAME"
                .to_owned(),
        };
        self.statement(&sql, vec![self.table.as_str().into()])
    }

    /// The catalog's columns of the lease table: `name`, `type` and `collation` (empty but on
    /// MySQL).
    pub(crate) fn catalog_columns(&self) -> Statement {
        let sql = match self.dialect {
            Dialect::Postgres => numbered(
                "SELECT a.attname::text AS name, format_type(a.atttypid, a.atttypmod) AS type, '' AS collation \
                 FROM pg_attribute a WHERE a.attrelid = to_regclass(?) AND a.attnum > 0 AND NOT a.attisdropped",
            ),
            Dialect::Sqlite => {
                "SELECT name, type, '' AS collation FROM pragma_table_info(?)".to_owned()
            }
            Dialect::MySql { .. } => {
                "SELECT CAST(COLUMN_NAME AS CHAR) AS name, CAST(COLUMN_TYPE AS CHAR) AS type, \
                 CAST(COALESCE(COLLATION_NAME, '') AS CHAR) AS collation \
                 FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?"
                    .to_owned()
            }
        };
        self.statement(&sql, vec![self.table.as_str().into()])
    }

    fn finish(&self, s: String) -> String {
        if self.dialect == Dialect::Postgres {
            numbered(&s)
        } else {
            s
        }
    }
}

/// The server's version string (`v`), to tell MariaDB from Oracle MySQL before a store exists.
pub(crate) fn mysql_version() -> Statement {
    Statement::from_string(DbBackend::MySql, MYSQL_VERSION)
}

/// The version query of [`mysql_version`] as text, for a raw sqlx connection (the pool's
/// `after_connect`, before SeaORM owns it).
pub(crate) const MYSQL_VERSION: &str = "SELECT VERSION() AS v";

/// A new MySQL/MariaDB session's bounds: row-lock waits (whole seconds, rounded up, at least 1)
/// and statement time (`max_statement_time` in seconds on MariaDB, `max_execution_time` in
/// milliseconds on Oracle MySQL, which bounds only `SELECT`s), both `bound`.
#[cfg(feature = "mysql")]
pub(crate) fn mysql_session_bounds(mariadb: bool, bound: std::time::Duration) -> String {
    let lock_secs = (bound.as_secs() + u64::from(bound.subsec_nanos() > 0)).max(1);
    if mariadb {
        format!(
            "SET SESSION innodb_lock_wait_timeout = {lock_secs}, max_statement_time = {:.3}",
            bound.as_secs_f64()
        )
    } else {
        format!(
            "SET SESSION innodb_lock_wait_timeout = {lock_secs}, max_execution_time = {}",
            bound.as_millis().max(1)
        )
    }
}

/// READ COMMITTED: a locking read takes the rows it finds, not the gaps before them. Under
/// InnoDB's default REPEATABLE READ an open fenced transaction (its `FOR UPDATE` on one lease
/// row) also locks the gap before that row, and every grant of a new name that sorts into the
/// gap waits for it (seen: a batch of grants next to a fenced transaction timed out whole).
/// Every statement of the store is atomic on its own, and its transactions read what they
/// locked, so none depends on a repeatable snapshot.
#[cfg(feature = "mysql")]
pub(crate) const MYSQL_READ_COMMITTED: &str =
    "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED";

/// The token of a row inserted now: one above the token floor. MySQL reads the floor with a
/// locking read (the newest committed row, after waiting for a purge that holds it); PostgreSQL
/// reads it in the statement's snapshot, taken after the statement's lock on the floor table, for
/// which a purge's `LOCK TABLE` makes it wait; SQLite has one writer at a time.
pub(crate) fn fresh_version(dialect: Dialect, floor: &str) -> String {
    match dialect {
        Dialect::MySql { .. } => format!(
            "(COALESCE((SELECT f.version FROM {floor} f WHERE f.id = 1 LOCK IN SHARE MODE), 0) + 1)"
        ),
        Dialect::Postgres | Dialect::Sqlite => {
            format!("(COALESCE((SELECT f.version FROM {floor} f WHERE f.id = 1), 0) + 1)")
        }
    }
}

/// A value as a bound parameter (`NULL` for none).
pub(crate) fn value_of(value: Option<&LeaseValue>) -> Value {
    Value::String(value.map(|v| v.as_str().to_owned()))
}

fn key_values(key: &LeaseKey) -> [Value; 2] {
    [key.namespace.as_str().into(), key.name.as_str().into()]
}

/// PostgreSQL and SQLite: `items` as one JSON parameter, a list of `[namespace, name, token]`.
fn items_json(op: &'static str, items: &[RenewItem]) -> Result<String, StoreError> {
    serde_json::to_string(
        &items
            .iter()
            .map(|it| {
                (
                    it.key.namespace.as_str(),
                    it.key.name.as_str(),
                    it.token.get(),
                )
            })
            .collect::<Vec<_>>(),
    )
    .map_err(|e| StoreError::Unexpected {
        op,
        detail: e.to_string(),
    })
}

/// MySQL: the values naming the items `chunk` of one namespace: namespace, holder, the names.
fn mysql_name_values(holder: &HolderId, items: &[RenewItem], chunk: &[usize]) -> Vec<Value> {
    let ns = chunk
        .first()
        .map_or("", |&i| items[i].key.namespace.as_str());
    let mut values: Vec<Value> = vec![ns.into(), holder.as_str().into()];
    values.extend(
        chunk
            .iter()
            .map(|&i| Value::from(items[i].key.name.as_str())),
    );
    values
}

/// MySQL: [`mysql_name_values`], then (name, token) pairs.
fn mysql_key_values(holder: &HolderId, items: &[RenewItem], chunk: &[usize]) -> Vec<Value> {
    let mut values = mysql_name_values(holder, items, chunk);
    for &i in chunk {
        values.push(items[i].key.name.as_str().into());
        values.push(items[i].token.get().into());
    }
    values
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
