//! Building a [`LeaseService`].

use std::sync::Arc;

use leasehold_core::{LeaseConfig, Namespace};
use leasehold_storage::{SeaOrmStore, Store, StoreBuilder};

use crate::runtime::{EngineSpec, StoreLayer, StoreSource, is_memory_sqlite};
use crate::{EngineTuning, LeaseService, Result};

/// Configures and starts a [`LeaseService`]; made by [`LeaseService::builder`] or
/// [`LeaseServiceBuilder::from_store`](crate::LeaseServiceBuilder::from_store).
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
/// use std::time::Duration;
/// use leasehold::{LeaseConfig, LeaseService};
///
/// let service = LeaseService::builder("sqlite::memory:")
///     .holder_id("billing-worker-1")
///     .namespace("billing")
///     .config(LeaseConfig::default().with_term(Duration::from_secs(15)))
///     .build()
///     .await?;
/// assert_eq!(service.holder().as_str(), "billing-worker-1");
/// # service.shutdown().await?; Ok(()) }
/// ```
#[must_use]
pub struct LeaseServiceBuilder {
    source: StoreSource,
    holder: Option<String>,
    namespace: String,
    config: LeaseConfig,
    tuning: EngineTuning,
    table_prefix: String,
    layer: Option<StoreLayer>,
    renew_store: Option<Arc<dyn Store>>,
    reclaim_own_leases: bool,
    clock_check: Option<crate::clock::ClockRateOptions>,
    retention: Option<crate::Retention>,
    doorbell_url: Option<String>,
    max_connections: Option<u32>,
    renewal_connections: u32,
    #[cfg(feature = "known-bugs")]
    bug: Option<leasehold_engine::KnownBug>,
}

/// The default of [`LeaseServiceBuilder::renewal_connections`].
const RENEWAL_CONNECTIONS: u32 = 2;

impl std::fmt::Debug for LeaseServiceBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseServiceBuilder")
            .field("holder", &self.holder)
            .field("namespace", &self.namespace)
            .field("config", &self.config)
            .field("tuning", &self.tuning)
            .finish_non_exhaustive()
    }
}

impl LeaseServiceBuilder {
    /// A builder over an existing store, used for requests and renewals alike. The store is a
    /// [`Store`]: the engine's tenures use its [`LeaseStore`](crate::store::LeaseStore) port, and retention purges through
    /// its [`AdminStore`](leasehold_storage::AdminStore) port (`MemoryStore`, `SeaOrmStore` and
    /// every decorator of this workspace have both). It is no more than that to the service: fencing (`begin_fenced`) and PostgreSQL wake-ups
    /// need the SQL store itself, given with [`LeaseServiceBuilder::from_sql_store`]. A SQL store's
    /// connections belong to the runtime that opened them: keep that runtime alive as long as
    /// the service (or prefer [`LeaseService::builder`], which connects on the engine thread).
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use std::sync::Arc;
    /// use leasehold::LeaseServiceBuilder;
    /// use leasehold::store::MemoryStore;
    /// let service = LeaseServiceBuilder::from_store(Arc::new(MemoryStore::new())).build().await?;
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    pub fn from_store(store: Arc<dyn Store>) -> Self {
        Self::new(StoreSource::Store(store, None))
    }

    /// A builder over an existing SQL store: requests and renewals go to it, fenced
    /// transactions open on it, and on PostgreSQL releases are announced and heard on it. Its
    /// connections belong to the runtime that opened them (see [`LeaseServiceBuilder::from_store`]).
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use std::time::Duration;
    /// use leasehold::LeaseServiceBuilder;
    /// use leasehold::store::StoreBuilder;
    /// let store = StoreBuilder::new("sqlite::memory:").connect().await?;
    /// let service = LeaseServiceBuilder::from_sql_store(store).build().await?;
    /// let guard = service.lock("jobs", "ledger", Duration::from_secs(30)).await?.expect("free");
    /// assert!(guard.begin_fenced().await?.is_some());
    /// # drop(guard); service.shutdown().await?; Ok(()) }
    /// ```
    pub fn from_sql_store(store: SeaOrmStore) -> Self {
        let lease_store: Arc<dyn Store> = Arc::new(store.clone());
        Self::new(StoreSource::Store(lease_store, Some(store)))
    }

    pub(crate) fn new(source: StoreSource) -> Self {
        Self {
            source,
            holder: None,
            namespace: String::new(),
            config: LeaseConfig::default(),
            tuning: EngineTuning::default(),
            table_prefix: String::new(),
            layer: None,
            renew_store: None,
            reclaim_own_leases: false,
            clock_check: None,
            retention: None,
            doorbell_url: None,
            max_connections: None,
            renewal_connections: RENEWAL_CONNECTIONS,
            #[cfg(feature = "known-bugs")]
            bug: None,
        }
    }

    /// PostgreSQL: the URL of the doorbell's one `LISTEN` connection, past a pooler (default:
    /// the service's URL). Through a pooler in transaction mode (`pooler=transaction` in the
    /// URL) a `LISTEN` is never heard, so without this waiters poll (at their retry interval),
    /// and [`LeaseService::health`](crate::LeaseService::health) says so in its `wakeups`.
    /// Rings are still sent through the service's pool.
    ///
    /// # Examples
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use leasehold::LeaseService;
    /// let service = LeaseService::builder("postgres://app@pgbouncer:6432/app?pooler=transaction")
    ///     .doorbell_url("postgres://app@db:5432/app")
    ///     .build()
    ///     .await?;
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    pub fn doorbell_url(mut self, url: impl Into<String>) -> Self {
        self.doorbell_url = Some(url.into());
        self
    }

    /// The most connections of the service's request pool (default 10; 4 for SQLite files).
    /// With a URL the service opens, besides it, a renewal pool
    /// ([`renewal_connections`](Self::renewal_connections)) and on PostgreSQL one `LISTEN`
    /// connection (none through transaction pooling without a
    /// [`doorbell_url`](Self::doorbell_url)); docs/operations.md, "Poolers and balancers",
    /// counts them. Through a pooler in session mode each one keeps a server connection.
    pub fn max_connections(mut self, n: u32) -> Self {
        self.max_connections = Some(n.max(1));
        self
    }

    /// The most connections of the renewal pool a service from a URL opens beside its request
    /// pool, so that busy requests cannot starve renewals (default 2, at least 1). Renewals of
    /// one window go out as one statement, so one connection keeps every lease of the service
    /// renewed; the second lets a renewal go out while a slow one is still out.
    pub fn renewal_connections(mut self, n: u32) -> Self {
        self.renewal_connections = n.max(1);
        self
    }

    /// Puts a known bug back, to show that the service simulation's oracle catches it. Tests
    /// of the oracle only: the cargo feature `known-bugs`.
    #[cfg(feature = "known-bugs")]
    #[doc(hidden)]
    pub fn reintroduce_bug(mut self, bug: leasehold_engine::KnownBug) -> Self {
        self.bug = Some(bug);
        self
    }

    /// A stable holder id (default: `host:pid:random`, unique per service). A service restarted
    /// with the same id waits its predecessor's unexpired leases out like any other holder,
    /// unless [`LeaseServiceBuilder::reclaim_own_leases`] says the predecessor is known dead.
    /// Two live services of one process cannot share an id ([`crate::Error::HolderInUse`]).
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// # use leasehold::LeaseService;
    /// let service = LeaseService::builder("sqlite::memory:").holder_id("worker-1").build().await?;
    /// assert_eq!(service.holder().as_str(), "worker-1");
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    pub fn holder_id(mut self, id: impl Into<String>) -> Self {
        self.holder = Some(id.into());
        self
    }

    /// Take over this holder id's own unexpired leases at once, as new tenures with the next
    /// fencing token, instead of waiting for them to lapse (default: `false`).
    ///
    /// Safe only when no other live process can be using the same holder id: a stable id of a
    /// process that is known to be dead (a supervisor restarted it after it exited, or the id
    /// names a node that was fenced off). If the old process is still running (a network split,
    /// a paused VM), both believe they hold the lease until the old one's local deadline; only
    /// fencing tokens then protect shared resources. Within one running service it changes
    /// nothing: a tenure of this service is never taken over by itself.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// # use leasehold::LeaseService;
    /// let service = LeaseService::builder("sqlite::memory:")
    ///     .holder_id("worker-1")
    ///     .reclaim_own_leases(true) // worker-1 is restarted only after it exited
    ///     .build()
    ///     .await?;
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    pub fn reclaim_own_leases(mut self, reclaim: bool) -> Self {
        self.reclaim_own_leases = reclaim;
        self
    }

    /// Runs the clock-rate check in the background (default: off): reads the database's clock
    /// `options.sample_count()` times per `options.window_len()`, through the engine, fits the
    /// last window against the monotonic clock and judges it against the service's
    /// `safety_margin / term` (see [`measure_clock_rate`](crate::clock::measure_clock_rate)). The
    /// latest report is in [`Health::clock_rate`](crate::Health::clock_rate); a verdict other
    /// than within makes the service [`Verdict::Degraded`](crate::health::Verdict::Degraded) and is
    /// logged at warn; the gauges `leasehold_clock_rate_difference`, `_uncertainty` and `_ok`
    /// follow. It costs one `SELECT` of the clock per sample (10 a second by default).
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use std::time::Duration;
    /// use leasehold::LeaseService;
    /// use leasehold::clock::ClockRateOptions;
    /// let options = ClockRateOptions::new().window(Duration::from_millis(300)).samples(4);
    /// let service = LeaseService::builder("sqlite::memory:").check_clock_rate(options).build().await?;
    /// tokio::time::sleep(Duration::from_millis(600)).await;
    /// if let Some(report) = service.health().await.clock_rate {
    ///     println!("{report}");
    /// }
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    pub fn check_clock_rate(mut self, options: crate::clock::ClockRateOptions) -> Self {
        self.clock_check = Some(options);
        self
    }

    /// Purges old rows of this service's namespace in the background (default: off): rows
    /// released or expired for longer than [`Retention::age`](crate::Retention::age), every
    /// [`Retention::interval`](crate::Retention::interval), each run one store call bounded by
    /// the request timeout. Tokens never go back: a name created again after its row was purged
    /// starts above any token it had (the store's token floor). `leasehold purge` does the same
    /// by hand.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use std::time::Duration;
    /// use leasehold::{LeaseService, Retention};
    /// let service = LeaseService::builder("sqlite::memory:")
    ///     .retention(Retention::new(Duration::from_secs(7 * 86_400)))
    ///     .build()
    ///     .await?;
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    pub fn retention(mut self, retention: crate::Retention) -> Self {
        self.retention = Some(retention);
        self
    }

    /// The namespace of every lease of this service (default `""`).
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// # use leasehold::LeaseService;
    /// let service = LeaseService::builder("sqlite::memory:").namespace("billing").build().await?;
    /// assert_eq!(service.namespace().as_str(), "billing");
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// The lease configuration (default: term 30 s, renew every term / 3, retry 1 s, safety
    /// margin term / 10 up to 2 s). Validated by [`LeaseServiceBuilder::build`].
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// # use leasehold::LeaseService;
    /// use std::time::Duration;
    /// let config = leasehold::LeaseConfig::default().with_term(Duration::from_secs(10));
    /// let service = LeaseService::builder("sqlite::memory:").config(config).build().await?;
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    pub fn config(mut self, config: LeaseConfig) -> Self {
        self.config = config;
        self
    }

    /// How the engine groups its statements (default: [`EngineTuning::default`]): the batch
    /// window of renewals, group commit of grants and releases, PostgreSQL notifications in the
    /// statements. Tuning, not behaviour: every lease means the same whatever it is. Validated
    /// by [`LeaseServiceBuilder::build`].
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// # use leasehold::LeaseService;
    /// use std::time::Duration;
    /// use leasehold::EngineTuning;
    /// let service = LeaseService::builder("sqlite::memory:")
    ///     .tuning(EngineTuning::new().batch_window(Duration::from_millis(20)))
    ///     .build()
    ///     .await?;
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    pub fn tuning(mut self, tuning: EngineTuning) -> Self {
        self.tuning = tuning;
        self
    }

    /// Table prefix when connecting from a URL (default none: the table is `lease_info`).
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// # use leasehold::LeaseService;
    /// let service = LeaseService::builder("sqlite::memory:").table_prefix("app_").build().await?;
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    pub fn table_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.table_prefix = prefix.into();
        self
    }

    /// With [`LeaseServiceBuilder::from_store`](crate::LeaseServiceBuilder::from_store): a separate store for renewals (default: the same
    /// store), so that an exhausted application pool cannot starve them. Ignored when connecting
    /// from a URL, where the service opens a second small pool itself. A [`Store`] (both ports),
    /// as for `from_store`, so that the [`store_layer`](Self::store_layer) wraps it too; the
    /// service only renews through it.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use std::sync::Arc;
    /// use leasehold::LeaseService;
    /// use leasehold::store::MemoryStore;
    /// let store = MemoryStore::new();
    /// let service = leasehold::LeaseServiceBuilder::from_store(Arc::new(store.clone()))
    ///     .renew_store(Arc::new(store))
    ///     .build()
    ///     .await?;
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    pub fn renew_store(mut self, store: Arc<dyn Store>) -> Self {
        self.renew_store = Some(store);
        self
    }

    /// Test hook: wraps every store the engine opens (or is given) with `layer`, for failure
    /// injection and counting. The layer wraps both ports ([`Store`]): the tenures' calls and
    /// the operator's calls the service makes (retention's purge).
    #[doc(hidden)]
    pub fn store_layer(
        mut self,
        layer: impl Fn(Arc<dyn Store>) -> Arc<dyn Store> + Send + Sync + 'static,
    ) -> Self {
        self.layer = Some(Arc::new(layer));
        self
    }

    /// Validates the options, starts the engine thread and connects: from a URL, one store for
    /// requests (creating the table if missing) and a second pool of two connections for
    /// renewals, so an exhausted application pool cannot starve them (in-memory SQLite shares
    /// one store: it cannot be split).
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// # use leasehold::LeaseService;
    /// let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// let bad = LeaseService::builder("sqlite::memory:").namespace("\0").build().await;
    /// assert!(matches!(bad, Err(leasehold::Error::Invalid(_))));
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Invalid`](crate::Error::Invalid) for a bad holder id, namespace or
    /// configuration; [`Error::Store`](crate::Error::Store) when the database cannot be
    /// reached; [`Error::Thread`](crate::Error::Thread) when the engine thread cannot start.
    pub async fn build(self) -> Result<LeaseService> {
        self.config.validate()?;
        self.tuning.validate()?;
        if let Some(options) = &self.clock_check {
            options.validate()?;
        }
        if let Some(retention) = &self.retention {
            retention.validate()?;
        }
        let holder = crate::holder::holder(self.holder)?;
        let namespace = Namespace::new(self.namespace)?;
        let source = match self.source {
            StoreSource::Url(url) => {
                // Statements the engine gave up on die at the server too.
                let bound = self.config.request_timeout();
                let mut main = StoreBuilder::new(url.clone())
                    .table_prefix(self.table_prefix.clone())
                    .server_timeout(bound);
                if let Some(direct) = self.doorbell_url {
                    main = main.doorbell_url(direct);
                }
                if let Some(n) = self.max_connections {
                    main = main.max_connections(n);
                }
                main.table_name()?;
                let memory = is_memory_sqlite(&url);
                let renew = StoreBuilder::new(url)
                    .table_prefix(self.table_prefix)
                    .server_timeout(bound)
                    .max_connections(self.renewal_connections);
                StoreSource::Builders(main, renew, memory)
            }
            StoreSource::Store(store, sql) => match self.renew_store {
                Some(renew) => StoreSource::Stores(store, renew, sql),
                None => StoreSource::Store(store, sql),
            },
            other => other,
        };
        let spec = EngineSpec {
            source,
            holder: holder.clone(),
            tuning: self.tuning,
            layer: self.layer,
            reclaim_own_leases: self.reclaim_own_leases,
            #[cfg(feature = "known-bugs")]
            bug: self.bug,
        };
        let service = LeaseService::start(spec, holder, namespace, self.config).await?;
        if let Some(options) = self.clock_check {
            service.start_clock_check(options);
        }
        if let Some(retention) = self.retention {
            service.start_retention(retention);
        }
        Ok(service)
    }
}
