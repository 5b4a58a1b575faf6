//! The statements of the SeaORM store: one function per statement, returning the finished
//! [`Statement`] with its values bound in the order its text names them. This file holds the
//! dialect-neutral statements and helpers; where the text differs between databases it asks the
//! store's [`Dialect`] (`backend/<database>/mod.rs`), and the statements only one database sends
//! are in `impl Sql` blocks of `backend/<database>/`. The text of the fixed statements is built
//! once per store (`sql/texts.rs`). Every value is a bound parameter; only the validated table
//! name is spliced in. [`crate::SeaOrmStore`] sends these and reads the rows.

use leasehold_core::{FencingToken, HolderId, LeaseKey, LeaseValue, Namespace, Term};
use sea_orm::{Statement, Value};

use crate::backend::{Backend, Dialect, Driver, GrantAnswer, GrantValues, Names, postgres};

mod texts;
use crate::backend::text::numbered;
use crate::{StoreError, TenureRef};
use texts::Texts;

/// The statements of one store (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct Sql {
    /// The database's driver, and the SQL it speaks.
    driver: &'static dyn Driver,
    dialect: &'static dyn Dialect,
    pub(crate) table: String,
    /// The token floor table (`{table}_floor`, one row, `id` 1).
    pub(crate) floor: String,
    /// The database's clock in milliseconds since the epoch, as an SQL expression.
    pub(crate) now: String,
    /// PostgreSQL: grants and releases send their doorbell notifications themselves
    /// ([`crate::SeaOrmStore::notify_in_statements`]).
    notify: bool,
    text: Texts,
}

const COLS: &str = "namespace, lease_name, holder, version, lease_end_time, status, lease_value";

impl Sql {
    /// The database's driver.
    pub(crate) fn driver(&self) -> &'static dyn Driver {
        self.driver
    }

    /// The database's SQL.
    pub(crate) fn dialect(&self) -> &'static dyn Dialect {
        self.dialect
    }

    /// The database's clock in milliseconds since the epoch, as an SQL expression.
    pub(crate) fn now(&self) -> &str {
        &self.now
    }

    /// The token of a row inserted now: one above the token floor
    /// ([`Dialect::fresh_version`]).
    pub(crate) fn fresh(&self) -> String {
        self.dialect.fresh_version(&self.floor)
    }

    /// `sql`, written with `?` placeholders, as the backend takes them.
    pub(crate) fn finish(&self, sql: String) -> String {
        self.dialect.finish(sql)
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
        postgres::notify_item(self.notify, &self.table, crate::ddl::CHANGES_CHANNEL, alias)
    }

    /// With [`Sql::notifies`], a `RETURNING` item ringing for each row a release ended (on
    /// `doorbell::postgres::CHANNEL`); otherwise nothing.
    pub(crate) fn ring_item(&self, alias: &str) -> String {
        postgres::notify_item(self.notify, &self.table, postgres::RELEASED_CHANNEL, alias)
    }

    /// The statements of a store on `table`.
    pub(crate) fn new(backend: Backend, table: &str) -> Self {
        Self::notifying(backend, table, false)
    }

    /// The statements of a store on `table`; with `notify` (PostgreSQL only, other dialects
    /// ignore it) grants and releases send the doorbell's notifications themselves.
    pub(crate) fn notifying(backend: Backend, table: &str, notify: bool) -> Self {
        let driver = backend.driver();
        let dialect = driver.dialect();
        let notify = notify && dialect.notifies_in_statements();
        let floor = crate::ddl::floor_table(table);
        Self {
            driver,
            dialect,
            table: table.to_owned(),
            now: dialect.now().to_owned(),
            text: Texts::new(dialect, table, &floor, notify),
            floor,
            notify,
        }
    }

    /// `sql` with its `values`, for this store's backend.
    pub(crate) fn statement(&self, sql: &str, values: Vec<Value>) -> Statement {
        Statement::from_sql_and_values(self.dialect.db_backend(), sql, values)
    }

    /// What the dialect's statements need to know of the lease table.
    fn names(&self) -> Names<'_> {
        Names {
            table: &self.table,
            now: &self.now,
        }
    }

    /// The grant behind `begin_tenure`: a new tenure on a free row only (`expected` `None`,
    /// [`crate::Grant::New`]) or also over our own live tenure `expected`
    /// ([`crate::Grant::TakeOver`]); every grant is a new tenure (token + 1). PostgreSQL and
    /// SQLite return the row only when they granted; MariaDB returns it always, with `took`;
    /// Oracle MySQL returns nothing (read it back with [`Sql::grant_row`] in the same
    /// transaction).
    pub(crate) fn acquire(
        &self,
        key: &LeaseKey,
        holder: &HolderId,
        term: Term,
        expected: Option<FencingToken>,
        value: Option<&LeaseValue>,
    ) -> Statement {
        let [ns, name] = key_values(key);
        let values = self.dialect.acquire_values(GrantValues {
            ns,
            name,
            holder: holder.as_str().into(),
            term: term.as_millis_i64().into(),
            value: value_of(value),
            expected: expected.map_or(-1, FencingToken::get).into(),
        });
        self.statement(&self.text.acquire, values)
    }

    /// How [`Sql::acquire`] answers.
    pub(crate) fn grant_answer(&self) -> GrantAnswer {
        self.dialect.grant_answer()
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

    /// The write of the fence's row after [`Sql::fenced`] found it live (see
    /// [`crate::backend::Dialect::fence_write`]); `None` where the fence's lock suffices.
    pub(crate) fn fence_write(
        &self,
        key: &LeaseKey,
        holder: &HolderId,
        token: FencingToken,
    ) -> Option<Statement> {
        let [ns, name] = key_values(key);
        self.text.fence_write.as_ref().map(|text| {
            self.statement(
                text,
                vec![ns, name, holder.as_str().into(), token.get().into()],
            )
        })
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
    pub(crate) fn purgeable(
        &self,
        namespace: Option<&Namespace>,
        age: Term,
    ) -> (String, Vec<Value>) {
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
            self.dialect.name_prefix(prefix, &mut s, &mut values);
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
        items: &[TenureRef],
        term: Term,
    ) -> Result<Statement, StoreError> {
        let json: Value = items_json("renew_many", items)?.into();
        let (t, h): (Value, Value) = (term.as_millis_i64().into(), holder.as_str().into());
        let (sql, values) = self.dialect.renew_many(&self.names(), json, h, t);
        Ok(self.statement(&self.finish(sql), values))
    }

    /// Batched release of the named tenures `items` of `holder`, one statement, the items as
    /// one JSON parameter (PostgreSQL, SQLite; MySQL: [`Sql::mysql_release_many`]).
    pub(crate) fn release_many(
        &self,
        holder: &HolderId,
        items: &[TenureRef],
    ) -> Result<Statement, StoreError> {
        let set = self.release_set();
        let values = vec![
            items_json("release_many", items)?.into(),
            holder.as_str().into(),
        ];
        let sql = self.finish(self.dialect.release_many(&self.names(), &set));
        Ok(self.statement(&sql, values))
    }

    /// The catalog's unique keys of the lease table, each as `cols` (comma-separated column
    /// names in key order).
    pub(crate) fn catalog_unique_keys(&self) -> Statement {
        let sql = self.finish(self.dialect.catalog_unique_keys());
        self.statement(&sql, vec![self.table.as_str().into()])
    }

    /// The catalog's columns of the lease table: `name`, `type` and `collation` (empty but on
    /// MySQL).
    pub(crate) fn catalog_columns(&self) -> Statement {
        let sql = self.finish(self.dialect.catalog_columns());
        self.statement(&sql, vec![self.table.as_str().into()])
    }

    /// The assignment of a release: status 0, ended now.
    pub(crate) fn release_set(&self) -> String {
        let now = &self.now;
        format!("SET status = 0, lease_end_time = {now}, gmt_modified = {now}")
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
pub(crate) fn items_json<'i>(
    op: &'static str,
    items: impl IntoIterator<Item = &'i TenureRef>,
) -> Result<String, StoreError> {
    serde_json::to_string(
        &items
            .into_iter()
            .map(|it| {
                (
                    it.key.namespace.as_str(),
                    it.key.name.as_str(),
                    it.token.get(),
                )
            })
            .collect::<Vec<_>>(),
    )
    .map_err(|e| unexpected(op, &e))
}

/// PostgreSQL and SQLite: `keys` as one JSON parameter, a list of `[namespace, name]`.
pub(crate) fn keys_json<'k>(
    op: &'static str,
    keys: impl IntoIterator<Item = &'k LeaseKey>,
) -> Result<String, StoreError> {
    serde_json::to_string(
        &keys
            .into_iter()
            .map(|k| (k.namespace.as_str(), k.name.as_str()))
            .collect::<Vec<_>>(),
    )
    .map_err(|e| unexpected(op, &e))
}

fn unexpected(op: &'static str, e: &serde_json::Error) -> StoreError {
    StoreError::Unexpected {
        op,
        detail: e.to_string(),
    }
}

/// `n` comma-separated `?` placeholders, for an `IN (…)` list.
pub(crate) fn placeholders(n: usize) -> String {
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
