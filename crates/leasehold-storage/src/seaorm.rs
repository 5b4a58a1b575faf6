//! The SeaORM store: SQLite, PostgreSQL and MySQL/MariaDB. It only sends the statements `sql.rs`
//! and `backend/<database>/` make (through [`crate::retry::retry_deadlocks`], the one retry
//! loop; writes also through SQLite's write gate, `backend/sqlite/gate.rs`) and reads
//! their rows; the single grant is driven from `grant.rs`, the batched statements from
//! `batch.rs` and `group.rs`.

use std::time::Duration;

use async_trait::async_trait;
use leasehold_core::{
    AcquireOutcome, DbInstant, FencingToken, HolderId, LeaseKey, LeaseRecord, LeaseValue,
    Namespace, ReleaseOutcome, RenewOutcome, SetValueOutcome, Term,
};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbErr, QueryResult, Statement};

use crate::backend::Backend;
use crate::sql::Sql;
use crate::{AdminStore, AllOutcome, BatchRenewal, Grant, LeaseStore, StoreError, TenureRef};

/// A [`LeaseStore`] on a SeaORM connection. Build one with [`crate::StoreBuilder`], or from an
/// existing connection with [`SeaOrmStore::from_connection`].
#[derive(Debug, Clone)]
pub struct SeaOrmStore {
    pub(crate) db: DatabaseConnection,
    table: String,
    pub(crate) sql: Sql,
    server_timeout: Option<Duration>,
    /// The ids of the rows it renewed lately, where batches go by row id (`row_ids.rs`).
    pub(crate) row_ids: std::sync::Arc<crate::row_ids::RowIds>,
    /// A URL of several servers: keeps the task that follows the primary running while any
    /// clone of the store lives. Only held, never read.
    #[allow(dead_code)]
    follower: Option<std::sync::Arc<()>>,
    /// The server's `host:port` when the store was opened from a URL, for errors that name it.
    pub(crate) node: Option<String>,
    /// The server is a cluster node (`backend/mysql/galera.rs`), whose refusals outside the
    /// primary component are told apart from lock waits ([`SeaOrmStore::judged`]).
    pub(crate) galera: bool,
    /// The gate its writers in this process pass one at a time, in arrival order, shared with
    /// every store of the process on that database ([`crate::backend::Driver::write_gate`]).
    pub(crate) gate: Option<std::sync::Arc<crate::backend::sqlite::gate::WriteGate>>,
    /// Through transaction pooling: what opens each of the store's transactions
    /// (`backend/postgres/pooler.rs`); every statement then runs in a transaction of its own.
    pooled: Option<std::sync::Arc<str>>,
    /// The URL of the doorbell's own connection, past the pooler
    /// ([`crate::StoreBuilder::doorbell_url`]).
    pub(crate) doorbell_url: Option<std::sync::Arc<str>>,
    /// A known bug put back (tests of the history checker only: the cargo feature
    /// `known-bugs`).
    #[cfg(feature = "known-bugs")]
    pub(crate) bug: Option<crate::KnownBug>,
}

impl SeaOrmStore {
    /// Wraps an existing connection whose lease table is `table` (created beforehand, for
    /// example with [`crate::ddl::create_lease_table`]).
    ///
    /// On a MariaDB Galera node (`@@wsrep_on`) the connection must make its decisions wait
    /// for causality (`wsrep_sync_wait` covering reads, updates and deletes, and inserts: 7),
    /// which [`crate::StoreBuilder`] sets on every connection it opens: set it on every
    /// connection of the pool given here (the server's `wsrep_sync_wait = 7`, or the pool's
    /// after-connect hook), or a grant on a lagging node could be decided on rows older than
    /// another node's commit.
    ///
    /// # Errors
    /// [`StoreError::Database`] if the MySQL server version cannot be read;
    /// [`StoreError::Misconfigured`] on a Galera node whose connection's `wsrep_sync_wait` is
    /// not 7 (or more).
    pub async fn from_connection(db: DatabaseConnection, table: &str) -> Result<Self, StoreError> {
        let backend = crate::backend::detect(&db)
            .await
            .map_err(|e| StoreError::Database {
                op: "connect",
                cause: e,
            })?;
        let mut store = Self::with_backend(db, table, backend);
        backend.driver().adopted(&mut store).await?;
        Ok(store)
    }

    /// Wraps a connection, forcing the backend's SQL flavour (tests use this to run the MySQL 8
    /// path on MariaDB).
    #[must_use]
    pub fn with_backend(db: DatabaseConnection, table: &str, backend: Backend) -> Self {
        let gate = backend.driver().write_gate(&db);
        Self {
            sql: Sql::new(backend, table),
            db,
            table: table.to_owned(),
            server_timeout: None,
            row_ids: std::sync::Arc::default(),
            follower: None,
            node: None,
            galera: false,
            gate,
            pooled: None,
            doorbell_url: None,
            #[cfg(feature = "known-bugs")]
            bug: None,
        }
    }

    /// Puts a known bug back (tests of the history checker only: the cargo feature
    /// `known-bugs`).
    #[cfg(feature = "known-bugs")]
    #[doc(hidden)]
    #[must_use]
    pub fn reintroduce_bug(mut self, bug: Option<crate::KnownBug>) -> Self {
        self.bug = bug;
        self
    }

    /// Records the server-side bound its connections were opened with (see
    /// [`crate::StoreBuilder::server_timeout`]).
    pub(crate) fn set_server_timeout(&mut self, bound: Duration) {
        self.server_timeout = Some(bound);
    }

    /// Records the server's `host:port`, named by errors such as [`StoreError::NotPrimary`].
    pub(crate) fn set_node(&mut self, node: String) {
        self.node = Some(node);
    }

    /// Keeps the primary's follower running while the store lives.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn set_follower(&mut self, follower: Option<std::sync::Arc<()>>) {
        self.follower = follower;
    }

    /// Runs every statement in a transaction of its own opened by `prelude` (through
    /// transaction pooling, [`crate::backend::Driver::in_own_transaction`]).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn set_transaction_pooling(&mut self, prelude: String) {
        self.pooled = Some(prelude.into());
    }

    /// Gives the doorbell's own connection its own URL (checked by the driver).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn set_doorbell_url(&mut self, url: &str) {
        self.doorbell_url = Some(url.into());
    }

    /// Whether the store reaches PostgreSQL through transaction pooling
    /// ([`crate::StoreBuilder::transaction_pooling`]): every statement runs in a transaction of
    /// its own, and the server bounds are set in each.
    #[must_use]
    pub fn transaction_pooling(&self) -> bool {
        self.pooled.is_some()
    }

    /// Begins a transaction that always runs its `BEGIN` to the end, bounded by the server bound
    /// and a second ([`crate::retry::begin_whole`]). Through transaction pooling its prelude
    /// runs first (the server bounds for this transaction).
    pub(crate) async fn begin_whole(
        &self,
        options: sea_orm::TransactionOptions,
    ) -> Result<sea_orm::DatabaseTransaction, sea_orm::DbErr> {
        let limit = self
            .server_timeout
            .map(|bound| bound + crate::connect::DRAIN_SLACK);
        let txn = crate::retry::begin_whole(&self.db, options, limit).await?;
        if let Some(prelude) = &self.pooled {
            txn.execute_unprepared(prelude).await?;
        }
        Ok(txn)
    }

    /// A transaction on the store's pool, opened as the store opens its own: through
    /// transaction pooling ([`crate::StoreBuilder::transaction_pooling`]) with the server bounds
    /// set for it and the prepared statements of other clients dropped from its server
    /// connection. Through transaction pooling, run your own statements on the store's
    /// connection in such a transaction (or in [`SeaOrmStore::begin_fenced`]): a statement
    /// outside one is prepared on one server connection and may run on another.
    ///
    /// # Errors
    /// [`StoreError`] when the `BEGIN` fails or gets no answer within the server bound and a
    /// second.
    pub async fn begin(&self) -> Result<sea_orm::DatabaseTransaction, StoreError> {
        self.begin_whole(sea_orm::TransactionOptions::default())
            .await
            .map_err(self.err("begin"))
    }

    /// Sends `stmt` and reads every row: on the pool, or through transaction pooling in a
    /// transaction of its own, committed before the rows are returned.
    pub(crate) async fn all_raw(&self, stmt: Statement) -> Result<Vec<QueryResult>, DbErr> {
        match &self.pooled {
            None => self.db.query_all_raw(stmt).await,
            Some(prelude) => self
                .sql
                .driver()
                .in_own_transaction(&self.db, prelude, stmt)
                .await
                .map(|(rows, _)| rows),
        }
    }

    /// [`SeaOrmStore::all_raw`] for the first row only.
    pub(crate) async fn one_raw(&self, stmt: Statement) -> Result<Option<QueryResult>, DbErr> {
        if self.pooled.is_none() {
            return self.db.query_one_raw(stmt).await;
        }
        Ok(self.all_raw(stmt).await?.into_iter().next())
    }

    /// Sends a statement that returns no rows and returns how many rows it changed, as
    /// [`SeaOrmStore::all_raw`] sends it.
    pub(crate) async fn exec_raw(&self, stmt: Statement) -> Result<u64, DbErr> {
        match &self.pooled {
            None => Ok(self.db.execute_raw(stmt).await?.rows_affected()),
            Some(prelude) => self
                .sql
                .driver()
                .in_own_transaction(&self.db, prelude, stmt)
                .await
                .map(|(_, done)| done),
        }
    }

    /// The server-side bound on each statement's lock wait and run time that this store's
    /// connections were opened with, when [`crate::StoreBuilder`] opened them (`None` for
    /// [`SeaOrmStore::from_connection`] and [`SeaOrmStore::with_backend`]: the connection's own
    /// settings apply).
    #[must_use]
    pub fn server_timeout(&self) -> Option<Duration> {
        self.server_timeout
    }

    /// The same store (table, dialect, server bound, pooling) on another connection to the same
    /// database, for example one of another role.
    #[must_use]
    pub fn on_connection(&self, db: DatabaseConnection) -> Self {
        let mut s = Self::with_backend(db, &self.table, self.backend());
        s.server_timeout = self.server_timeout;
        s.pooled = self.pooled.clone();
        s
    }

    /// The same store as `backend` speaks it, on the same connection (tests use this to run the
    /// MySQL 8 path on MariaDB). Keeps the server-side bound.
    #[must_use]
    pub fn speaking(&self, backend: Backend) -> Self {
        let mut s = Self::with_backend(self.db.clone(), &self.table, backend);
        s.server_timeout = self.server_timeout;
        s
    }

    /// The backend in use.
    #[must_use]
    pub fn backend(&self) -> Backend {
        self.sql.driver().backend()
    }

    /// The database's clock in milliseconds since the epoch as an SQL expression, the one every
    /// statement of this store reads (for statements of your own that must compare with
    /// `lease_end_time`, such as an audit log written in a fenced transaction).
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold_storage::StoreError> {
    /// use leasehold_storage::StoreBuilder;
    /// let store = StoreBuilder::new("sqlite::memory:").connect().await?;
    /// assert!(store.now_sql().contains("julianday('now')"));
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn now_sql(&self) -> &str {
        self.sql.now()
    }

    /// On PostgreSQL, makes every statement of this store that grants or releases a tenure
    /// also send the doorbell's notification for each row it changed — `pg_notify` on
    /// [`crate::doorbell::postgres::CHANGES`] for a grant, on
    /// [`crate::doorbell::postgres::CHANNEL`] for a release — in the same transaction, so it is
    /// delivered at the commit and never for a statement that rolled back. The doorbell made
    /// from this store ([`crate::doorbell::for_store`]) then sends nothing of its own for
    /// grants or committed releases ([`crate::doorbell::Doorbell::rings_with_releases`]): one
    /// statement and one commit instead of two. The cost: a transaction that notifies holds
    /// PostgreSQL's database-wide notification lock until its commit is flushed, so notifying
    /// commits of many sessions at once queue behind each other (figures in
    /// `docs/benchmarks.md`); off by default, for few writers per
    /// database. A service turns it on for the store it opens with its own
    /// `notify_in_statements`; set it on a store you pass in only if that store serves the
    /// service's lease calls. Other backends ignore it.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold_storage::StoreError> {
    /// let store = leasehold_storage::StoreBuilder::new("sqlite::memory:").connect().await?;
    /// let store = store.notify_in_statements(true);
    /// assert!(!store.notifies_in_statements()); // PostgreSQL only
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn notify_in_statements(mut self, on: bool) -> Self {
        self.sql = Sql::notifying(self.backend(), &self.table, on);
        self
    }

    /// Whether grants and releases send their doorbell notifications themselves
    /// ([`SeaOrmStore::notify_in_statements`]).
    #[must_use]
    pub fn notifies_in_statements(&self) -> bool {
        self.sql.notifies()
    }

    /// The lease table's name.
    #[must_use]
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The underlying connection (for example to run fenced statements beside the lease table).
    #[must_use]
    pub fn connection(&self) -> &DatabaseConnection {
        &self.db
    }

    /// Runs every migration step on the lease table, idempotently, and checks the result: what
    /// `leasehold migrate` does. Unlike [`StoreBuilder::migrate`](crate::StoreBuilder::migrate),
    /// which migrates only a table that fails the schema check, this also applies the steps that
    /// change settings rather than shape to a table that already passes it (step 4 on
    /// PostgreSQL: room on each page for renewals, [`crate::ddl::room_for_renewals`]).
    ///
    /// # Errors
    /// [`StoreError::Database`] if a step fails (a read-only database, a role that may not
    /// create tables), [`StoreError::Schema`] if the table is still not usable afterwards.
    pub async fn migrate_all(&self) -> Result<(), StoreError> {
        self.create_table()
            .await
            .map_err(|e| StoreError::db("migrate", &self.table, e))?;
        self.verify_schema().await
    }

    /// Creates or brings the lease table up to date ([`crate::ddl::create_lease_table`]), in one
    /// transaction through transaction pooling.
    pub(crate) async fn create_table(&self) -> Result<(), DbErr> {
        if self.pooled.is_none() {
            return crate::ddl::create_lease_table(&self.db, &self.table).await;
        }
        let txn = self
            .begin_whole(sea_orm::TransactionOptions::default())
            .await?;
        crate::ddl::create_lease_table(&txn, &self.table).await?;
        txn.commit().await
    }

    /// Drops this store's lease table and its token floor table (and on PostgreSQL the change
    /// trigger), if they exist. Every row and the token floor go with them, so a table made
    /// again under the name starts its tokens over: for scratch tables only (what `leasehold
    /// check` works in), never a table a service uses.
    ///
    /// # Errors
    /// [`StoreError::ReadOnly`] or [`StoreError::Database`] if a statement fails.
    pub async fn drop_table(&self) -> Result<(), StoreError> {
        let dropped = if self.pooled.is_none() {
            crate::ddl::drop_lease_table(&self.db, &self.table).await
        } else {
            match self
                .begin_whole(sea_orm::TransactionOptions::default())
                .await
            {
                Ok(txn) => match crate::ddl::drop_lease_table(&txn, &self.table).await {
                    Ok(()) => txn.commit().await,
                    Err(e) => Err(e),
                },
                Err(e) => Err(e),
            }
        };
        dropped.map_err(|e| StoreError::db("drop_table", &self.table, e))
    }

    /// Classifies the error of a statement of `op` ([`StoreError::db_on`]): every failed
    /// statement of the store passes here (and through [`SeaOrmStore::judged`]), so it is also
    /// where the failure is noted for a follower of a primary ([`crate::retry::note_trouble`]).
    pub(crate) fn err(&self, op: &'static str) -> impl FnOnce(sea_orm::DbErr) -> StoreError + '_ {
        move |e| {
            crate::retry::note_trouble();
            StoreError::db_on(op, &self.table, self.node.as_deref(), e)
        }
    }
}

pub(crate) fn get<T: sea_orm::TryGetable>(
    row: &QueryResult,
    op: &'static str,
    col: &str,
) -> Result<T, StoreError> {
    row.try_get("", col).map_err(|e| StoreError::Unexpected {
        op,
        detail: format!("column {col}: {e}"),
    })
}

fn record(row: &QueryResult, op: &'static str) -> Result<LeaseRecord, StoreError> {
    let bad = |e: leasehold_core::ValidationError| StoreError::Unexpected {
        op,
        detail: e.to_string(),
    };
    let namespace: String = get(row, op, "namespace")?;
    let name: String = get(row, op, "lease_name")?;
    let holder: String = get(row, op, "holder")?;
    let status: i16 = get(row, op, "status")?;
    let until = DbInstant(get(row, op, "lease_end_time")?);
    let db_now = DbInstant(get(row, op, "db_now")?);
    let value = get::<Option<String>>(row, op, "lease_value")?
        .map(LeaseValue::new)
        .transpose()
        .map_err(bad)?;
    Ok(LeaseRecord {
        key: LeaseKey::from_stored(&namespace, &name).map_err(bad)?,
        holder: HolderId::new(holder).map_err(bad)?,
        token: FencingToken(get(row, op, "version")?),
        until,
        value,
        held: status == 1 && until > db_now,
        db_now,
    })
}

#[async_trait]
impl LeaseStore for SeaOrmStore {
    async fn begin_tenure(
        &self,
        key: &LeaseKey,
        holder: &HolderId,
        grant: Grant,
        term: Term,
        value: Option<&LeaseValue>,
    ) -> Result<AcquireOutcome, StoreError> {
        self.acquire(key, holder, grant, term, value).await
    }

    async fn begin_tenure_all(
        &self,
        holder: &HolderId,
        keys: &[LeaseKey],
        term: Term,
    ) -> Result<AllOutcome, StoreError> {
        self.begin_tenure_joint(holder, keys, term).await
    }

    async fn set_value(
        &self,
        key: &LeaseKey,
        holder: &HolderId,
        token: FencingToken,
        value: Option<&LeaseValue>,
    ) -> Result<SetValueOutcome, StoreError> {
        let n = self
            .execute("set_value", self.sql.set_value(key, holder, token, value))
            .await?;
        Ok(if n == 1 {
            SetValueOutcome::Set
        } else {
            SetValueOutcome::NotHeld
        })
    }

    async fn begin_tenure_many(
        &self,
        holder: &HolderId,
        keys: &[LeaseKey],
        term: Term,
        value: Option<&LeaseValue>,
    ) -> Result<Vec<Result<AcquireOutcome, StoreError>>, StoreError> {
        self.begin_tenure_items(holder, keys, term, value).await
    }

    async fn release_batch(
        &self,
        holder: &HolderId,
        items: &[TenureRef],
    ) -> Result<Vec<Result<ReleaseOutcome, StoreError>>, StoreError> {
        self.release_batch_items(holder, items).await
    }

    async fn renew(
        &self,
        key: &LeaseKey,
        holder: &HolderId,
        token: FencingToken,
        term: Term,
    ) -> Result<RenewOutcome, StoreError> {
        let n = self
            .execute("renew", self.sql.renew(key, holder, token, term))
            .await?;
        Ok(if n == 1 {
            RenewOutcome::Renewed
        } else {
            RenewOutcome::Lost
        })
    }

    async fn renew_many(
        &self,
        holder: &HolderId,
        items: &[TenureRef],
        term: Term,
    ) -> Result<Vec<bool>, StoreError> {
        self.renew_items_waiting(holder, items, term).await
    }

    async fn renew_batch(
        &self,
        holder: &HolderId,
        items: &[TenureRef],
        term: Term,
    ) -> Result<Vec<BatchRenewal>, StoreError> {
        self.renew_items(holder, items, term).await
    }

    async fn release_many(
        &self,
        holder: &HolderId,
        items: &[TenureRef],
    ) -> Result<u64, StoreError> {
        self.release_items(holder, items).await
    }

    async fn release(
        &self,
        key: &LeaseKey,
        holder: &HolderId,
        token: FencingToken,
    ) -> Result<ReleaseOutcome, StoreError> {
        let n = self
            .execute("release", self.sql.release(key, holder, token))
            .await?;
        Ok(if n == 1 {
            ReleaseOutcome::Released
        } else {
            ReleaseOutcome::NotHeld
        })
    }

    async fn get(&self, key: &LeaseKey) -> Result<Option<LeaseRecord>, StoreError> {
        self.query_one("get", self.sql.get(key))
            .await?
            .map(|r| record(&r, "get"))
            .transpose()
    }

    async fn list_valid(
        &self,
        namespace: Option<&Namespace>,
        prefix: &str,
    ) -> Result<Vec<LeaseRecord>, StoreError> {
        self.query_all("list_valid", self.sql.list_valid(namespace, prefix))
            .await?
            .iter()
            .map(|r| record(r, "list_valid"))
            .collect()
    }

    async fn db_now(&self) -> Result<DbInstant, StoreError> {
        let row = self.query_one("db_now", self.sql.db_now()).await?;
        let row = row.ok_or(StoreError::Unexpected {
            op: "db_now",
            detail: "no row".into(),
        })?;
        Ok(DbInstant(get(&row, "db_now", "db_now")?))
    }
}

#[async_trait]
impl AdminStore for SeaOrmStore {
    async fn release_all(&self, holder: &HolderId) -> Result<u64, StoreError> {
        self.sql.driver().release_all(self, holder).await
    }

    async fn force_release(&self, key: &LeaseKey) -> Result<bool, StoreError> {
        Ok(self
            .execute("force_release", self.sql.force_release(key))
            .await?
            == 1)
    }

    async fn purge(
        &self,
        namespace: Option<&Namespace>,
        older_than: Duration,
    ) -> Result<u64, StoreError> {
        let age = Term::new("older_than", older_than.max(Term::MIN))?;
        self.purge_rows(namespace, age).await
    }
}
