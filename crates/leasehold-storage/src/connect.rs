//! Opening a store from a URL, with pools configured for lease traffic.

use std::time::Duration;

use leasehold_core::ValidationError;
use sea_orm::{ConnectOptions, Database, DatabaseConnection, DbErr};

use crate::redact::redact_url as redact;
use crate::redact::{PoolUrl, refuse_unread_secrets, scrub, scrub_error};
use crate::tls;
use crate::{SeaOrmStore, StoreError};

mod returned;
pub(crate) use returned::DRAIN_SLACK;
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) use returned::{Drain, drained, replaced};
#[cfg(any(feature = "postgres", feature = "mysql"))]
mod session;
#[cfg(any(feature = "postgres", feature = "mysql"))]
use session::probe;

/// Builds a [`SeaOrmStore`] from a database URL.
///
/// Defaults, chosen for lease traffic (short statements that must not queue behind a check):
/// - statement logging off (every statement is logged at `trace` by the store instead);
/// - no ping before each checkout (`test_before_acquire(false)`): it costs 60–100 µs per statement
///   here, and a dead pooled connection surfaces as one failed statement, which the lease engine
///   retries anyway;
/// - SQLite files: WAL journal, `synchronous=NORMAL` (durable against process crashes; a power
///   loss takes every process of that machine down with it), a busy timeout of the server timeout,
///   4 connections;
///   in-memory SQLite: one connection that never expires (each connection would be its own
///   database);
/// - PostgreSQL / MySQL: 10 connections, 5 s connect timeout; one connection is opened outside
///   the pool first, so a refused connection or an unknown host fails [`StoreBuilder::connect`]
///   at once (once running, the pool keeps retrying a refused connection until the acquire
///   timeout, which rides out a database restart);
/// - PostgreSQL URLs may name several servers, in libpq's form
///   (`postgres://u@h1:5432,h2:5432/db?target_session_attrs=read-write`): the store uses the one
///   that accepts writes and follows it across failovers; [`StoreError::NoWritableHost`] when
///   none does at connect (docs/operations.md, "PostgreSQL with automatic failover");
/// - PostgreSQL through a pooler (PgBouncer, a provider's pooled endpoint): the URL says its
///   mode, `?pooler=session` or `?pooler=transaction` ([`StoreBuilder::transaction_pooling`]),
///   and may name the server the doorbell listens on past it (`doorbell_host=db:5432`,
///   [`StoreBuilder::doorbell_url`]); a URL of transaction pooling that does not say so is
///   refused at connect (docs/operations.md, "Poolers and balancers");
/// - every statement bounded on the server by [`StoreBuilder::server_timeout`] (default 5 s);
/// - the lease table is created if missing, unless [`StoreBuilder::migrate`] is `false`.
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold_storage::StoreError> {
/// use leasehold_storage::StoreBuilder;
/// let store = StoreBuilder::new("sqlite::memory:").table_prefix("app_").connect().await?;
/// assert_eq!(store.table(), "app_lease_info");
/// # Ok(()) }
/// ```
#[derive(Clone)]
#[must_use]
pub struct StoreBuilder {
    url: String,
    table_prefix: String,
    migrate: bool,
    pub(crate) max_connections: Option<u32>,
    pub(crate) connect_timeout: Duration,
    pub(crate) acquire_timeout: Duration,
    pub(crate) busy_timeout: Option<Duration>,
    pub(crate) server_timeout: Duration,
    pub(crate) transaction_pooling: Option<bool>,
    pub(crate) doorbell_url: Option<String>,
}

impl std::fmt::Debug for StoreBuilder {
    /// The URL is shown with its secrets masked ([`crate::redact_url`]).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreBuilder")
            .field("url", &redact(&self.url))
            .field("table_prefix", &self.table_prefix)
            .field("migrate", &self.migrate)
            .field("max_connections", &self.max_connections)
            .field("connect_timeout", &self.connect_timeout)
            .field("acquire_timeout", &self.acquire_timeout)
            .field("busy_timeout", &self.busy_timeout)
            .field("server_timeout", &self.server_timeout)
            .finish()
    }
}

/// The default of [`StoreBuilder::server_timeout`].
pub const DEFAULT_SERVER_TIMEOUT: Duration = Duration::from_secs(5);

/// Longest table prefix accepted (keeps index names within every backend's identifier limit).
const MAX_PREFIX: usize = 32;

/// Checks a table prefix: at most [`MAX_PREFIX`] bytes of ASCII letters, digits and `_`, not
/// starting with a digit, so that it can be spliced into SQL as part of an identifier.
pub(crate) fn check_table_prefix(p: &str) -> Result<(), ValidationError> {
    if p.len() > MAX_PREFIX {
        return Err(ValidationError::TooLong {
            field: "table_prefix",
            len: p.len(),
            max: MAX_PREFIX,
        });
    }
    if !p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        || p.starts_with(|c: char| c.is_ascii_digit())
    {
        return Err(ValidationError::NotIdentifier {
            field: "table_prefix",
            value: p.to_owned(),
        });
    }
    Ok(())
}

impl StoreBuilder {
    /// A builder for `url`: `sqlite://path?mode=rwc`, `sqlite::memory:`, `postgres://…`,
    /// `mysql://…`.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            table_prefix: String::new(),
            migrate: true,
            max_connections: None,
            connect_timeout: Duration::from_secs(5),
            acquire_timeout: Duration::from_secs(10),
            busy_timeout: None,
            server_timeout: DEFAULT_SERVER_TIMEOUT,
            transaction_pooling: None,
            doorbell_url: None,
        }
    }

    /// Table name prefix (default empty: the table is `lease_info`). ASCII letters, digits, `_`.
    pub fn table_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.table_prefix = prefix.into();
        self
    }

    /// Whether to create the lease table if it is missing (default `true`). With `false`, a
    /// missing table is a [`StoreError::Schema`] at connect time.
    pub fn migrate(mut self, migrate: bool) -> Self {
        self.migrate = migrate;
        self
    }

    /// Pool size (default: 4 for SQLite files, 1 for in-memory SQLite, 10 otherwise).
    pub fn max_connections(mut self, n: u32) -> Self {
        self.max_connections = Some(n.max(1));
        self
    }

    /// How long [`StoreBuilder::connect`] waits for the server to answer its first connection
    /// before giving up with [`StoreError::Connect`] (default 5 s).
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.connect_timeout = d;
        self
    }

    /// How long a statement may wait for a pooled connection (default 10 s).
    pub fn acquire_timeout(mut self, d: Duration) -> Self {
        self.acquire_timeout = d;
        self
    }

    /// SQLite: how long a writer waits for another process's write lock (default: the
    /// [`StoreBuilder::server_timeout`]).
    pub fn busy_timeout(mut self, d: Duration) -> Self {
        self.busy_timeout = Some(d);
        self
    }

    /// The bound the **database server** puts on every statement of this store's connections
    /// (default 5 s): how long it may wait for a row lock and how long it may run before the
    /// server cancels it ([`StoreError::ServerTimeout`]), so a statement the caller gave up on
    /// cannot run (and grant, renew or release) later. Set it to the caller's request timeout.
    ///
    /// - PostgreSQL: `lock_timeout` and `statement_timeout`, set by `SET` on each new connection
    ///   (one round trip; not the `options` startup parameter, which PgBouncer refuses), plus
    ///   `tcp_keepalives_idle` / `_interval` / `_count` so the server notices a client whose
    ///   network died and ends its session (and its locks) within about the bound plus three
    ///   seconds. Through transaction pooling ([`StoreBuilder::transaction_pooling`]) the two
    ///   bounds are set with `SET LOCAL` in each transaction instead.
    /// - MariaDB: `innodb_lock_wait_timeout` (whole seconds, rounded up, at least 1) and
    ///   `max_statement_time`; Oracle MySQL: `innodb_lock_wait_timeout` and
    ///   `max_execution_time` (which MySQL applies to `SELECT`s only); set on each new connection.
    /// - SQLite: the busy timeout, unless [`StoreBuilder::busy_timeout`] is set.
    ///
    /// The bound applies to every statement on the store's connections, including those run in
    /// a [`SeaOrmStore::begin_fenced`] transaction: run longer work on a pool of your own. sqlx
    /// offers no client-side TCP keepalive; a statement whose connection went silent is ended on
    /// the client by the caller's own timeout (the lease engine abandons it at the request
    /// timeout), and the pool's acquire timeout bounds the wait for a connection.
    pub fn server_timeout(mut self, d: Duration) -> Self {
        self.server_timeout = d.max(Duration::from_millis(1));
        self
    }

    /// PostgreSQL: whether the URL reaches the server through a pooler in transaction mode
    /// (PgBouncer's `pool_mode = transaction`, a provider's pooled endpoint), where a client
    /// keeps a server connection for one transaction only. The URL parameter
    /// `pooler=transaction` (or `pooler=session`) says the same; this call overrides it.
    ///
    /// With `true`, every statement runs in a transaction of its own (committed before its
    /// answer is reported), which first drops the prepared statements other clients left on
    /// that server connection and sets the server bounds for the transaction (`SET LOCAL`);
    /// the statement cache is off. Three round trips more per statement than a direct
    /// connection. `LISTEN` cannot work through such a pooler: give the doorbell a direct URL
    /// ([`StoreBuilder::doorbell_url`]), or waiters poll (docs/operations.md, "Poolers and
    /// balancers").
    ///
    /// Unset (the default), the store finds out at connect: a URL whose client connections
    /// share server connections per transaction is refused with [`StoreError::Pooler`],
    /// naming this setting, rather than failing later on a prepared statement or keeping a
    /// server bound on some server connections only. `false` skips that check (two extra
    /// connections at connect).
    pub fn transaction_pooling(mut self, on: bool) -> Self {
        self.transaction_pooling = Some(on);
        self
    }

    /// PostgreSQL: the URL the doorbell's `LISTEN` connection uses, past the pooler (default:
    /// the store's URL). Rings are still sent through the store's pool; only the one listening
    /// connection goes direct. Needed for push wake-ups through transaction pooling, where a
    /// `LISTEN` is never heard; without it waiters poll (and the service reports it).
    /// The URL parameter `doorbell_host=host:port` says the same with the rest of the store's
    /// URL (user, password, database, TLS parameters); this call overrides it.
    pub fn doorbell_url(mut self, url: impl Into<String>) -> Self {
        self.doorbell_url = Some(url.into());
        self
    }

    /// The table name this builder will use.
    ///
    /// # Errors
    /// [`ValidationError`] if the prefix is not a plain identifier or is too long.
    pub fn table_name(&self) -> Result<String, ValidationError> {
        check_table_prefix(&self.table_prefix)?;
        Ok(crate::ddl::table_name(&self.table_prefix))
    }

    /// Connects, creates the table if asked to, and checks its columns.
    ///
    /// # Errors
    /// [`StoreError::Invalid`] for a bad prefix; [`StoreError::UnsupportedUrl`] for another
    /// scheme or a backend this build leaves out (cargo features `sqlite`, `postgres`, `mysql`);
    /// [`StoreError::Connect`] when the database cannot be reached: at once for a refused
    /// connection, an unknown host or database, or bad credentials, after the connect timeout
    /// for a server that never answers; [`StoreError::Tls`] when TLS stood in the way (the
    /// server accepts only TLS and the URL or the build has none, or the handshake or the
    /// certificate check failed); [`StoreError::Schema`] when the table is missing or has
    /// other columns; [`StoreError::ReadOnly`] when the table is missing and cannot be created.
    pub async fn connect(self) -> Result<SeaOrmStore, StoreError> {
        let table = self.table_name()?;
        let url = self.url.trim().to_owned();
        let Some(driver) = crate::backend::for_url(&url) else {
            return Err(StoreError::UnsupportedUrl { url: redact(&url) });
        };
        // A secret the driver would not read is refused before any driver parses the URL: it
        // would be ignored, and sqlx's PostgreSQL parser logs an unknown parameter's value.
        refuse_unread_secrets(&url).map_err(|problem| StoreError::BadUrl {
            url: redact(&url),
            problem,
        })?;
        let migrate = self.migrate;
        let store = driver
            .open(Opening {
                builder: self,
                url,
                table: table.clone(),
            })
            .await?;
        match store.verify_schema().await {
            Ok(()) => {}
            Err(StoreError::Schema { .. }) if migrate => {
                store
                    .create_table()
                    .await
                    .map_err(|e| StoreError::db("migrate", &table, e))?;
                store.verify_schema().await?;
            }
            Err(e) => return Err(e),
        }
        Ok(store)
    }
}

/// What a driver opens a store from ([`crate::backend::Driver::open`]): the builder's settings,
/// the URL (trimmed, its secrets checked) and the lease table's name.
pub(crate) struct Opening {
    /// The builder's settings.
    pub(crate) builder: StoreBuilder,
    /// The URL.
    pub(crate) url: String,
    /// The lease table.
    pub(crate) table: String,
}

impl Opening {
    /// The servers of a URL that must name one.
    ///
    /// # Errors
    /// [`StoreError::BadUrl`] when it names several.
    pub(crate) fn one_host(&self, url: &str) -> Result<crate::HostList, StoreError> {
        let hosts = crate::HostList::parse(url)?;
        if hosts.several() {
            return Err(StoreError::BadUrl {
                url: redact(url),
                problem: "several hosts are followed on PostgreSQL only; give a MySQL/MariaDB \
                          store one server's URL"
                    .into(),
            });
        }
        Ok(hosts)
    }

    /// Opens one connection to `url` outside any pool and closes it (see [`probe`]), so that an
    /// unreachable server is an error at once.
    ///
    /// # Errors
    /// [`StoreError::Connect`] or [`StoreError::Tls`].
    #[cfg(any(feature = "postgres", feature = "mysql"))]
    pub(crate) async fn probe<O>(&self, url: &str) -> Result<(), StoreError>
    where
        O: sea_orm::sqlx::ConnectOptions,
        O::Connection: Sized,
    {
        probe::<O>(url, self.builder.connect_timeout)
            .await
            .map_err(|cause| connect_error(url, cause))
    }

    /// The pool's options for `url` (its secrets set on the driver's options by the driver, from
    /// the returned [`PoolUrl`]): `default_size` connections unless the builder says, one that
    /// never expires for an in-memory database.
    pub(crate) fn pool_options(
        &self,
        url: &str,
        default_size: u32,
        memory: bool,
    ) -> (ConnectOptions, PoolUrl) {
        // sea-orm records its options, URL included, in a `trace` span: it gets the URL without
        // its secrets, which are set on the driver's options.
        let pool_url = PoolUrl::split(url);
        let mut opt = ConnectOptions::new(pool_url.url.clone());
        opt.sqlx_logging(false)
            .test_before_acquire(false)
            .connect_timeout(self.builder.connect_timeout)
            .acquire_timeout(self.builder.acquire_timeout);
        if memory {
            opt.max_connections(1)
                .min_connections(1)
                .idle_timeout(None)
                .max_lifetime(None);
        } else {
            opt.max_connections(self.builder.max_connections.unwrap_or(default_size));
        }
        (opt, pool_url)
    }

    /// Opens the pool of `opt` (for `url`, whose servers are `hosts`).
    ///
    /// # Errors
    /// [`StoreError::Tls`], [`StoreError::NotPrimary`] or [`StoreError::Connect`].
    pub(crate) async fn pool(
        &self,
        opt: ConnectOptions,
        url: &str,
        hosts: &crate::HostList,
    ) -> Result<DatabaseConnection, StoreError> {
        self.opened(Database::connect(opt).await, url, hosts).await
    }

    /// The pool a driver opened its own way, or the error its open answered, judged as
    /// [`Opening::pool`] judges it.
    ///
    /// # Errors
    /// [`StoreError::Tls`], [`StoreError::NotPrimary`] or [`StoreError::Connect`].
    pub(crate) async fn opened(
        &self,
        connected: Result<DatabaseConnection, sea_orm::DbErr>,
        url: &str,
        hosts: &crate::HostList,
    ) -> Result<DatabaseConnection, StoreError> {
        match connected {
            Ok(db) => Ok(db),
            Err(cause) => Err(
                match tls::diagnose(url, &cause, self.builder.connect_timeout).await {
                    Some(problem) => tls_error(url, problem, &cause),
                    None if crate::error::is_not_primary(&cause) => StoreError::db_on(
                        "connect",
                        &self.table,
                        hosts.addresses().first().map(String::as_str),
                        cause,
                    ),
                    None => StoreError::Connect {
                        url: redact(url),
                        cause: scrub_error(cause, url),
                    },
                },
            ),
        }
    }

    /// The store on `db`, whose servers are `hosts`, with the builder's server bound.
    ///
    /// # Errors
    /// As [`SeaOrmStore::from_connection`].
    pub(crate) async fn store(
        &self,
        db: DatabaseConnection,
        hosts: &crate::HostList,
    ) -> Result<SeaOrmStore, StoreError> {
        let node = hosts.addresses().first().cloned();
        let mut store = SeaOrmStore::from_connection(db, &self.table)
            .await
            .map_err(|e| match e {
                StoreError::NotPrimary { op, cause, .. } => StoreError::NotPrimary {
                    op,
                    node: node.clone().unwrap_or_else(|| "the store's server".into()),
                    cause,
                },
                other => other,
            })?;
        store.set_server_timeout(self.builder.server_timeout);
        if let (Some(node), false) = (node, hosts.several()) {
            store.set_node(node);
        }
        Ok(store)
    }
}

/// The error for a failed connection: [`StoreError::Tls`] when TLS is what stood in the way,
/// [`StoreError::Connect`] otherwise.
#[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
pub(crate) fn connect_error(url: &str, cause: DbErr) -> StoreError {
    match tls::problem(&cause) {
        Some(problem) => tls_error(url, problem, &cause),
        None => StoreError::Connect {
            url: redact(url),
            cause: scrub_error(cause, url),
        },
    }
}

pub(crate) fn tls_error(url: &str, problem: crate::TlsProblem, source: &DbErr) -> StoreError {
    StoreError::Tls {
        url: redact(url),
        problem,
        detail: scrub(&source.to_string(), url),
    }
}
