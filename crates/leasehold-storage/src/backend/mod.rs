//! One folder per database: its [`Driver`] (what it does: detection, pool hooks, batches,
//! purge, catalog, doorbell; `driver.rs`), its [`Dialect`] (the statements whose text differs
//! from the others), the statements only it sends (`statements.rs`), its group-commit
//! transactions (`group.rs`) and its doorbell (`doorbell.rs`). [`Backend`] names the database a
//! store talks to; everything dialect-neutral stays outside this folder. A new database is one
//! folder here, one [`Backend`] variant and one line in [`DRIVERS`].

use sea_orm::{ConnectionTrait, DbBackend, DbErr, Value};

mod driver;
pub(crate) mod mysql;
pub(crate) mod postgres;
pub(crate) mod sqlite;
pub(crate) mod text;

pub(crate) use driver::Driver;

/// Which database a [`crate::SeaOrmStore`] talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Backend {
    /// SQLite (embedded; WAL mode for files).
    Sqlite,
    /// PostgreSQL.
    Postgres,
    /// MariaDB 10.5+ (grant in one `INSERT … ON DUPLICATE KEY UPDATE … RETURNING`).
    MariaDb,
    /// Oracle MySQL 8 (no `RETURNING`: the grant is the same upsert plus a read, in one
    /// transaction, so it stays atomic at the cost of a second round trip).
    MySql,
}

/// Every database's driver: the one registration point. A URL is opened by the first that
/// claims it, a connection by the first that speaks its protocol, which may name another
/// ([`Driver::identified`]).
static DRIVERS: [&dyn Driver; 4] = [
    &sqlite::DRIVER,
    &postgres::DRIVER,
    &mysql::MARIADB,
    &mysql::MYSQL,
];

impl Backend {
    /// Its driver.
    pub(crate) fn driver(self) -> &'static dyn Driver {
        DRIVERS
            .iter()
            .copied()
            .find(|d| d.backend() == self)
            .unwrap_or(&sqlite::DRIVER)
    }

    /// The SQL this backend speaks.
    pub(crate) fn dialect(self) -> &'static dyn Dialect {
        self.driver().dialect()
    }
}

/// The driver of this build that opens `url`, if any.
pub(crate) fn for_url(url: &str) -> Option<&'static dyn Driver> {
    let lower = url.trim().to_ascii_lowercase();
    DRIVERS
        .iter()
        .copied()
        .find(|d| d.built() && d.claims_url(&lower))
}

/// The database `conn` talks to: by its protocol, and by the server's answer where one protocol
/// serves several databases.
pub(crate) async fn detect<C: ConnectionTrait>(conn: &C) -> Result<Backend, DbErr> {
    let protocol = conn.get_database_backend();
    let Some(driver) = DRIVERS
        .iter()
        .copied()
        .find(|d| d.dialect().db_backend() == protocol)
    else {
        return Err(DbErr::Custom(format!("no driver for {protocol:?}")));
    };
    match driver.identify() {
        None => Ok(driver.backend()),
        Some(question) => Ok(driver.identified(conn.query_one_raw(question).await?.as_ref())),
    }
}

/// How a database answers its grant statement ([`Dialect::acquire`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GrantAnswer {
    /// `RETURNING` the row only when the statement granted (PostgreSQL, SQLite).
    WhenGranted,
    /// `RETURNING` the row always, with `took`: whether this statement granted (MariaDB).
    WithTook,
    /// No `RETURNING`: the row and `took` are read back in the same transaction
    /// ([`crate::sql::Sql::grant_row`]; Oracle MySQL).
    ReadBack,
}

/// The values of a grant statement, named; [`Dialect::acquire_values`] puts them in the order its
/// text names them.
pub(crate) struct GrantValues {
    pub ns: Value,
    pub name: Value,
    pub holder: Value,
    /// The term in milliseconds.
    pub term: Value,
    /// The new tenure's value.
    pub value: Value,
    /// The token of our own live tenure a take-over may replace; -1 for none.
    pub expected: Value,
}

/// What a lease table's statements need to know of it: its name and the database's clock
/// expression ([`Dialect::now`]).
pub(crate) struct Names<'a> {
    pub table: &'a str,
    pub now: &'a str,
}

/// The SQL of one database: every statement whose text differs between databases, one impl per
/// database (`backend/<database>/mod.rs`). The default methods are the forms PostgreSQL and
/// SQLite share (`INSERT … ON CONFLICT … RETURNING`, `FOR UPDATE`); MySQL overrides them.
pub(crate) trait Dialect: Send + Sync + std::fmt::Debug {
    /// The SeaORM backend its statements are sent as.
    fn db_backend(&self) -> DbBackend;

    /// The database's clock in milliseconds since the epoch, as an SQL expression, read when
    /// the row is evaluated (after any lock wait).
    fn now(&self) -> &'static str;

    /// `sql`, written with `?` placeholders, as the database takes them.
    fn finish(&self, sql: String) -> String {
        sql
    }

    /// Whether grant and release statements can send the doorbell's notifications themselves
    /// ([`crate::SeaOrmStore::notify_in_statements`]).
    fn notifies_in_statements(&self) -> bool {
        false
    }

    /// The token of a row inserted now: one above the token floor. PostgreSQL reads the floor in
    /// the statement's snapshot, taken after the statement's lock on the floor table, for which
    /// a purge's `LOCK TABLE` makes it wait; SQLite has one writer at a time.
    fn fresh_version(&self, floor: &str) -> String {
        format!("(COALESCE((SELECT f.version FROM {floor} f WHERE f.id = 1), 0) + 1)")
    }

    /// The grant behind `begin_tenure`, either `Grant` (see
    /// [`crate::sql::Sql::acquire`]); `fresh` is [`Dialect::fresh_version`], `announce` the
    /// `RETURNING` item announcing the grant (or nothing).
    fn acquire(&self, n: &Names<'_>, fresh: &str, announce: &str) -> String {
        let (t, now) = (n.table, n.now);
        // ON CONFLICT DO UPDATE locks the existing row, then evaluates WHERE and SET on its
        // newest version: the clock is read then, after any lock wait.
        format!(
            "INSERT INTO {t} AS l (namespace, lease_name, holder, lease_end_time, status, version, lease_value, gmt_create, gmt_modified) \
             VALUES (?, ?, ?, {now} + ?, 1, {fresh}, ?, {now}, {now}) \
             ON CONFLICT (namespace, lease_name) DO UPDATE SET \
             version = l.version + 1, lease_value = excluded.lease_value, \
             holder = excluded.holder, lease_end_time = {now} + ?, status = 1, gmt_modified = {now} \
             WHERE l.status = 0 OR l.lease_end_time <= {now} \
               OR (l.holder = excluded.holder AND l.version = ?) \
             RETURNING holder, version, lease_end_time{announce}"
        )
    }

    /// With [`GrantAnswer::ReadBack`], the read of the row [`Dialect::acquire`] left on `table`
    /// and of whether it granted, in the same transaction (parameters: namespace, name).
    fn grant_row(&self, _table: &str) -> Option<String> {
        None
    }

    /// How [`Dialect::acquire`] answers.
    fn grant_answer(&self) -> GrantAnswer {
        GrantAnswer::WhenGranted
    }

    /// The values of [`Dialect::acquire`] in the order its text names them.
    fn acquire_values(&self, v: GrantValues) -> Vec<Value> {
        let GrantValues {
            ns,
            name,
            holder,
            term,
            value,
            expected,
        } = v;
        vec![ns, name, holder, term.clone(), value, term, expected]
    }

    /// How the fence locks the row of its tenure until the transaction ends.
    fn fence_lock(&self) -> &'static str {
        " FOR UPDATE"
    }

    /// A write of the fence's own row, run after the fence found the tenure live (parameters:
    /// namespace, name, holder, token), for engines where a row lock does not exclude writers
    /// on other nodes; `None` where the lock excludes every writer.
    fn fence_write(&self, _table: &str, _now: &str) -> Option<String> {
        None
    }

    /// Appends to `sql` the condition of a name under `prefix` (matched literally), and its
    /// values to `values`.
    fn name_prefix(&self, prefix: &str, sql: &mut String, values: &mut Vec<Value>);

    /// Batched renewal of the items in the JSON parameter `json` of `holder` by `term` (see
    /// [`crate::sql::Sql::renew_many`]): the text and its values. SQLite's form, a semi-join on
    /// the unique key, by default.
    fn renew_many(
        &self,
        n: &Names<'_>,
        json: Value,
        holder: Value,
        term: Value,
    ) -> (String, Vec<Value>) {
        let (table, now) = (n.table, n.now);
        (
            format!(
                "UPDATE {table} SET lease_end_time = {now} + ?, gmt_modified = {now} \
                 WHERE (namespace, lease_name, version) IN \
                 (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]') FROM json_each(?)) \
                 AND holder = ? AND status = 1 AND lease_end_time > {now} \
                 RETURNING namespace, lease_name"
            ),
            vec![term, json, holder],
        )
    }

    /// Batched release of the items in a JSON parameter, then the holder (see
    /// [`crate::sql::Sql::release_many`]); `set` is the assignment of a release. SQLite's form
    /// by default.
    fn release_many(&self, n: &Names<'_>, set: &str) -> String {
        let (table, now) = (n.table, n.now);
        format!(
            "UPDATE {table} {set} WHERE (namespace, lease_name, version) IN \
             (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]') FROM json_each(?)) \
             AND holder = ? AND status = 1 AND lease_end_time > {now}"
        )
    }

    /// The catalog's unique keys of the table named by the one parameter, each as `cols`
    /// (comma-separated column names in key order).
    fn catalog_unique_keys(&self) -> String;

    /// The catalog's columns of the table named by the one parameter: `name`, `type` and
    /// `collation` (empty but on MySQL).
    fn catalog_columns(&self) -> String;

    /// Whether the name columns must carry a binary no-pad collation (the schema check): where
    /// the default collation would make `Job` and `job`, or `job` and `job `, one lease.
    fn needs_exact_collation(&self) -> bool {
        false
    }

    /// The resource fence's upsert on `table` (parameters: the resource, the token) and, where
    /// it cannot return its row (no `RETURNING`), the read of that row in the same transaction
    /// (parameter: the resource). The stored token becomes the greater of the two, so the row
    /// the statement leaves answers the question; `updated_at` moves only when the caller's
    /// token is admitted. The read back must see that row, not the transaction's snapshot: a
    /// locking read.
    fn fence_upsert(&self, table: &str) -> (String, Option<String>);

    /// The lease table's `id` column (DDL).
    fn id_column(&self) -> &'static str;

    /// The question whose answer picks [`Dialect::exact_collation`], if the table needs one.
    fn collation_question(&self) -> Option<sea_orm::Statement> {
        None
    }

    /// The collation that keeps names exact, from the answer to
    /// [`Dialect::collation_question`].
    fn exact_collation(&self, _answer: Option<&sea_orm::QueryResult>) -> &'static str {
        ""
    }

    /// `CREATE TABLE IF NOT EXISTS` of the lease table with `columns` and its unique key, part
    /// of the statement so that concurrent first runs cannot race on a separate index.
    fn create_table(&self, table: &str, columns: &str, _collation: &str) -> String {
        format!(
            "CREATE TABLE IF NOT EXISTS {table} ({columns}, \
             CONSTRAINT uk_{table}_ns_name UNIQUE (namespace, lease_name))"
        )
    }

    /// `sql`, a `CREATE … IF NOT EXISTS` of `table`'s schema, as one simple query safe against
    /// a concurrent first run; `None` where the database serialises DDL itself.
    fn serialised_create(&self, _table: &str, _sql: &str) -> Option<String> {
        None
    }

    /// The count `n` of columns named by the second parameter in the table named by the first.
    fn has_column(&self) -> &'static str;

    /// The token floor table `floor` created, and its one row inserted unless there.
    fn floor_table_ddl(&self, floor: &str) -> (String, String) {
        (
            format!(
                "CREATE TABLE IF NOT EXISTS {floor} (id INTEGER NOT NULL PRIMARY KEY, \
                 version BIGINT NOT NULL)"
            ),
            format!("INSERT INTO {floor} (id, version) VALUES (1, 0) ON CONFLICT (id) DO NOTHING"),
        )
    }

    /// The table's storage options (`options`, comma-separated) and whether the role owns it
    /// (`owner`), of the table named by the one parameter, where pages keep room for renewals.
    fn fillfactor_and_owner(&self) -> Option<&'static str> {
        None
    }
}

/// The SQL of the databases a connection's protocol speaks (for DDL, which is the same for every
/// database of one protocol).
pub(crate) fn protocol_dialect(protocol: DbBackend) -> &'static dyn Dialect {
    DRIVERS
        .iter()
        .copied()
        .find(|d| d.dialect().db_backend() == protocol)
        .map_or(&sqlite::Sqlite as &dyn Dialect, |d| d.dialect())
}
