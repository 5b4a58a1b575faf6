//! Opening a store from a URL, with pools configured for lease traffic.

#[cfg(any(feature = "postgres", feature = "mysql"))]
use std::sync::Arc;
use std::time::Duration;

use leasehold_core::ValidationError;
use sea_orm::{ConnectOptions, Database, DbErr};

use crate::error::redact;
use crate::redact::{PoolUrl, refuse_unread_secrets, scrub, scrub_error};
use crate::tls;
use crate::{SeaOrmStore, StoreError};

mod returned;
pub(crate) use returned::DRAIN_SLACK;
#[cfg(feature = "mysql")]
use returned::MYSQL_LEFT_OPEN;
#[cfg(feature = "postgres")]
use returned::PG_LEFT_OPEN;
#[cfg(any(feature = "postgres", feature = "mysql"))]
use returned::{Drain, drained, replaced};
mod session;
#[cfg(feature = "postgres")]
use crate::backend::postgres::pooler::session_bounds;
#[cfg(feature = "mysql")]
use session::mysql_session_bounds;
#[cfg(feature = "postgres")]
use session::primary_only;
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
    max_connections: Option<u32>,
    connect_timeout: Duration,
    acquire_timeout: Duration,
    busy_timeout: Option<Duration>,
    server_timeout: Duration,
    transaction_pooling: Option<bool>,
    doorbell_url: Option<String>,
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
        let lower = url.to_ascii_lowercase();
        let sqlite = lower.starts_with("sqlite:");
        let postgres = lower.starts_with("postgres://") || lower.starts_with("postgresql://");
        let mysql = lower.starts_with("mysql://");
        if !((sqlite && cfg!(feature = "sqlite"))
            || (postgres && cfg!(feature = "postgres"))
            || (mysql && cfg!(feature = "mysql")))
        {
            return Err(StoreError::UnsupportedUrl { url: redact(&url) });
        }
        // A secret the driver would not read is refused before any driver parses the URL: it
        // would be ignored, and sqlx's PostgreSQL parser logs an unknown parameter's value.
        refuse_unread_secrets(&url).map_err(|problem| StoreError::BadUrl {
            url: redact(&url),
            problem,
        })?;
        // PostgreSQL: `pooler=…` and `doorbell_host=…` are ours, not the driver's
        // (backend/postgres/pooler.rs).
        #[cfg(feature = "postgres")]
        let (url, pooled, pooled_said, doorbell_url) = if postgres {
            let params =
                crate::backend::postgres::pooler::split_params(&url).map_err(|problem| {
                    StoreError::BadUrl {
                        url: redact(&url),
                        problem,
                    }
                })?;
            let explicit = self.transaction_pooling.is_some() || params.said;
            let pooled = self.transaction_pooling.unwrap_or(params.transaction);
            let doorbell = self.doorbell_url.clone().or(params.doorbell_url);
            (params.url, pooled, explicit, doorbell)
        } else {
            (url, false, true, None)
        };
        let hosts = crate::HostList::parse(&url)?;
        if hosts.several() && !postgres {
            return Err(StoreError::BadUrl {
                url: redact(&url),
                problem: "several hosts are followed on PostgreSQL only; give a MySQL/MariaDB \
                          store one server's URL"
                    .into(),
            });
        }
        // PostgreSQL with several hosts (or `target_session_attrs=read-write`): the pool uses
        // the server that accepts writes, and follows it (backend/postgres/primary.rs).
        #[cfg(feature = "postgres")]
        let primary = if postgres && (hosts.several() || hosts.asks_for_primary()) {
            let primary = Arc::new(crate::backend::postgres::primary::Primary::new(
                &hosts,
                pg_options(pooled),
                self.connect_timeout,
            )?);
            primary
                .find()
                .await
                .map_err(|found| StoreError::NoWritableHost {
                    url: redact(&url),
                    found: scrub(&found, &url),
                })?;
            Some(primary)
        } else {
            None
        };
        #[cfg(not(feature = "postgres"))]
        let primary: Option<()> = None;
        // The pool retries a refused connection until its acquire timeout, which suits a server
        // restarting under running leases but not a wrong host or port at startup.
        let url = match &primary {
            #[cfg(feature = "postgres")]
            Some(p) => hosts.urls()[hosts
                .addresses()
                .iter()
                .position(|a| a == p.current_address())
                .unwrap_or(0)]
            .clone(),
            _ => {
                probe(&url, self.connect_timeout)
                    .await
                    .map_err(|cause| connect_error(&url, cause))?;
                url
            }
        };
        // A URL of transaction pooling that does not say so is refused here, not on the first
        // prepared statement that lands on another server connection.
        #[cfg(feature = "postgres")]
        if postgres
            && !pooled_said
            && let Ok(options) = url.parse::<sea_orm::sqlx::postgres::PgConnectOptions>()
        {
            let limit = self.connect_timeout.min(POOLER_CHECK);
            if crate::backend::postgres::pooler::detect(&options, limit).await == Some(true) {
                return Err(StoreError::Pooler {
                    op: "connect",
                    problem: crate::PoolerProblem::TransactionModeUnsaid,
                    cause: DbErr::Custom(
                        "two client connections shared one server connection".into(),
                    ),
                });
            }
        }
        let memory = sqlite && (lower.contains(":memory:") || lower.contains("mode=memory"));
        // sea-orm records its options, URL included, in a `trace` span: it gets the URL without
        // its secrets, which are set on the driver's options below.
        let pool_url = PoolUrl::split(&url);
        let mut opt = ConnectOptions::new(pool_url.url.clone());
        opt.sqlx_logging(false)
            .test_before_acquire(false)
            .connect_timeout(self.connect_timeout)
            .acquire_timeout(self.acquire_timeout);
        if memory {
            opt.max_connections(1)
                .min_connections(1)
                .idle_timeout(None)
                .max_lifetime(None);
        } else {
            opt.max_connections(self.max_connections.unwrap_or(if sqlite { 4 } else { 10 }));
        }
        let bound = self.server_timeout;
        #[cfg(feature = "postgres")]
        if postgres {
            let session = pg_options(pooled);
            // The options a replacement connection is opened with (see `drained`): the server in
            // use when it is opened.
            let fixed = url
                .parse::<sea_orm::sqlx::postgres::PgConnectOptions>()
                .ok()
                .map(&session);
            let follow = primary.clone();
            let fresh = Arc::new(move || match &follow {
                Some(p) => Some(p.current()),
                None => fixed.clone(),
            });
            let secret = pool_url.clone();
            opt.map_sqlx_postgres_opts(move |o| {
                let o = session(o);
                let o = match &secret.password {
                    Some(p) => o.password(p),
                    None => o,
                };
                match &secret.ssl_key {
                    Some(k) if PoolUrl::key_is_inline(k) => o.ssl_client_key_from_pem(k),
                    Some(k) => o.ssl_client_key(k),
                    None => o,
                }
            });
            let connect_timeout = self.connect_timeout;
            let check = primary.is_some();
            let moved = primary.clone();
            // A second ping: the first may answer the abandoned statement's own error.
            opt.map_sqlx_postgres_pool_opts(move |p| {
                let fresh = Arc::clone(&fresh);
                let moved = moved.clone();
                p.before_acquire(move |_conn, meta| {
                    let reuse = !moved
                        .as_ref()
                        .is_some_and(|p| p.opened_before_move(meta.age));
                    Box::pin(async move { Ok(reuse) })
                })
                .after_connect(move |conn, _meta| {
                    Box::pin(async move {
                        if check {
                            primary_only(conn).await?;
                        }
                        // Through transaction pooling each transaction sets them instead.
                        if !pooled {
                            session_bounds(conn, bound).await?;
                        }
                        Ok(())
                    })
                })
                .after_release(move |conn, _meta| {
                    let fresh = Arc::clone(&fresh);
                    Box::pin(async move {
                        let drain = drained(conn, bound + DRAIN_SLACK, 2, PG_LEFT_OPEN).await;
                        Ok(drain == Drain::Reusable
                            || replaced(conn, connect_timeout.min(bound), || {
                                let options = fresh();
                                async move {
                                    use sea_orm::sqlx::Connection;
                                    let options =
                                        options.ok_or(sea_orm::sqlx::Error::PoolClosed)?;
                                    let mut c =
                                        sea_orm::sqlx::PgConnection::connect_with(&options).await?;
                                    if check {
                                        primary_only(&mut c).await?;
                                    }
                                    if !pooled {
                                        session_bounds(&mut c, bound).await?;
                                    }
                                    Ok(c)
                                }
                            })
                            .await)
                    })
                })
            });
        }
        #[cfg(feature = "mysql")]
        if mysql {
            // One ping: after an error packet sqlx's MySQL stream still waits for that statement's
            // result, so a second ping would only wait out the bound.
            let fresh = url
                .parse::<sea_orm::sqlx::mysql::MySqlConnectOptions>()
                .ok()
                .map(Arc::new);
            let connect_timeout = self.connect_timeout;
            let secret = pool_url.clone();
            opt.map_sqlx_mysql_opts(move |o| {
                let o = match &secret.password {
                    Some(p) => o.password(p),
                    None => o,
                };
                match &secret.ssl_key {
                    Some(k) if PoolUrl::key_is_inline(k) => o.ssl_client_key_from_pem(k),
                    Some(k) => o.ssl_client_key(k),
                    None => o,
                }
            });
            opt.map_sqlx_mysql_pool_opts(move |p| {
                let fresh = fresh.clone();
                p.after_connect(move |conn, _meta| Box::pin(mysql_session_bounds(conn, bound)))
                    .after_release(move |conn, _meta| {
                        let fresh = fresh.clone();
                        Box::pin(async move {
                            let drain =
                                drained(conn, bound + DRAIN_SLACK, 1, MYSQL_LEFT_OPEN).await;
                            Ok(drain == Drain::Reusable
                                || replaced(conn, connect_timeout.min(bound), || {
                                    let fresh = fresh.clone();
                                    async move {
                                        use sea_orm::sqlx::Connection;
                                        let options =
                                            fresh.ok_or(sea_orm::sqlx::Error::PoolClosed)?;
                                        let mut c =
                                            sea_orm::sqlx::MySqlConnection::connect_with(&options)
                                                .await?;
                                        mysql_session_bounds(&mut c, bound).await?;
                                        Ok(c)
                                    }
                                })
                                .await)
                        })
                    })
            });
        }
        #[cfg(feature = "sqlite")]
        if sqlite {
            let busy = self.busy_timeout.unwrap_or(bound);
            opt.map_sqlx_sqlite_opts(move |o| {
                let o = o.busy_timeout(busy);
                if memory {
                    o
                } else {
                    o.journal_mode(sea_orm::sqlx::sqlite::SqliteJournalMode::Wal)
                        .synchronous(sea_orm::sqlx::sqlite::SqliteSynchronous::Normal)
                }
            });
            if !memory {
                // SQLite rolls a transaction back by itself on some errors (SQLITE_FULL from a
                // full disk, SQLITE_IOERR, SQLITE_NOMEM); the ROLLBACK sent when it is dropped
                // then fails and sqlx keeps counting the connection as in a transaction. Reused,
                // its next transaction would be a SAVEPOINT whose rollback leaves a real
                // transaction open, and every statement after it on that connection would be
                // answered but never committed. Such a connection is closed, not reused (an
                // in-memory database lives in its only connection, so it is kept).
                opt.map_sqlx_sqlite_pool_opts(|p| {
                    p.before_acquire(|conn, _meta| {
                        Box::pin(
                            async move { Ok(!sea_orm::sqlx::Connection::is_in_transaction(conn)) },
                        )
                    })
                });
            }
        }
        #[cfg(feature = "sqlite")]
        let connected = if sqlite && !memory {
            crate::backend::sqlite::open::connect(opt, self.connect_timeout).await
        } else {
            Database::connect(opt).await
        };
        #[cfg(not(feature = "sqlite"))]
        let connected = Database::connect(opt).await;
        let db = match connected {
            Ok(db) => db,
            Err(cause) => {
                return Err(
                    match tls::diagnose(&url, &cause, self.connect_timeout).await {
                        Some(problem) => tls_error(&url, problem, &cause),
                        None if crate::error::is_not_primary(&cause) => StoreError::db_on(
                            "connect",
                            &table,
                            hosts.addresses().first().map(String::as_str),
                            cause,
                        ),
                        None => StoreError::Connect {
                            url: redact(&url),
                            cause: scrub_error(cause, &url),
                        },
                    },
                );
            }
        };
        #[cfg(feature = "postgres")]
        let follower = primary.map(|p| {
            let alive = Arc::new(());
            p.follow(
                db.get_postgres_connection_pool().clone(),
                Arc::downgrade(&alive),
            );
            alive
        });
        let node = hosts.addresses().first().cloned();
        let mut store = SeaOrmStore::from_connection(db, &table)
            .await
            .map_err(|e| match e {
                StoreError::NotPrimary { op, cause, .. } => StoreError::NotPrimary {
                    op,
                    node: node.clone().unwrap_or_else(|| "the store's server".into()),
                    cause,
                },
                other => other,
            })?;
        store.set_server_timeout(bound);
        #[cfg(feature = "postgres")]
        if pooled {
            store.set_transaction_pooling(crate::backend::postgres::pooler::transaction_prelude(
                bound,
            ));
        }
        #[cfg(feature = "postgres")]
        if let Some(direct) = doorbell_url.as_deref() {
            store
                .set_doorbell_url(direct)
                .map_err(|problem| StoreError::BadUrl {
                    url: redact(direct),
                    problem,
                })?;
        }
        if let (Some(node), false) = (node, hosts.several()) {
            store.set_node(node);
        }
        store.detect_galera().await;
        #[cfg(feature = "postgres")]
        store.set_follower(follower);
        match store.verify_schema().await {
            Ok(()) => {}
            Err(StoreError::Schema { .. }) if self.migrate => {
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

/// How long [`StoreBuilder::connect`] may spend finding out whether a PostgreSQL URL goes
/// through transaction pooling (at most the connect timeout).
#[cfg(feature = "postgres")]
const POOLER_CHECK: Duration = Duration::from_secs(2);

/// The driver's options of a PostgreSQL connection: without the statement cache through
/// transaction pooling (a named statement would not be on the next transaction's server).
/// The server bounds are set after connecting ([`session_bounds`]), not with the `options`
/// startup parameter, which PgBouncer refuses (backend/postgres/pooler.rs).
#[cfg(feature = "postgres")]
fn pg_options(
    pooled: bool,
) -> impl Fn(sea_orm::sqlx::postgres::PgConnectOptions) -> sea_orm::sqlx::postgres::PgConnectOptions
+ Clone
+ Send
+ Sync
+ 'static {
    move |o: sea_orm::sqlx::postgres::PgConnectOptions| {
        if pooled {
            o.statement_cache_capacity(0)
        } else {
            o
        }
    }
}

/// The error for a failed connection: [`StoreError::Tls`] when TLS is what stood in the way,
/// [`StoreError::Connect`] otherwise.
fn connect_error(url: &str, cause: DbErr) -> StoreError {
    match tls::problem(&cause) {
        Some(problem) => tls_error(url, problem, &cause),
        None => StoreError::Connect {
            url: redact(url),
            cause: scrub_error(cause, url),
        },
    }
}

fn tls_error(url: &str, problem: crate::TlsProblem, source: &DbErr) -> StoreError {
    StoreError::Tls {
        url: redact(url),
        problem,
        detail: scrub(&source.to_string(), url),
    }
}
