//! [`LeaseService`]: the seeds' `ILeaseService`.
//!
//! | file | holds |
//! |---|---|
//! | `service.rs` | [`LeaseService`], its state, its builders and the helpers the other modules use |
//! | `service/tasks.rs` | lease tasks: starting one or many, stopping, listing |
//! | `service/reads.rs` | what the service answers without changing anything: `has_lease`, `current_holder`, `db_now`, `health`, `subscribe` |
//! | `service/shutdown.rs` | `shutdown` and the crash hook |

mod reads;
mod shutdown;
mod tasks;

use std::sync::{Arc, Mutex, PoisonError};

use actix::{Addr, Handler, Message};
use leasehold_core::{HolderId, LeaseConfig, LeaseKey, LeaseName, MonotonicClock, Namespace};
use leasehold_engine::{Belief, LeaseEngine, NamespaceDeadlines, Registry};
use leasehold_storage::{SeaOrmStore, Store};
use tokio::sync::{broadcast, oneshot};
use tokio_util::sync::CancellationToken;

pub use tasks::START_CHUNK;

use crate::builder::LeaseServiceBuilder;
use crate::holder::HolderClaim;
use crate::runtime::{self, EngineSpec, EngineThread, StoreSource};
use crate::{Error, LeaseEvent, Result};

/// How many events a slow subscriber may fall behind before it misses some.
const EVENT_BUFFER: usize = 1024;

/// Leases for master/standby failover, held by one holder (this process) through the database.
/// Replaces the seeds' `ILeaseService`.
///
/// The service owns one thread running an actix `System`, on which the stores are connected and
/// every lease actor lives; its async methods work from any runtime (plain tokio, actix-web).
/// [`LeaseService::has_lease`] reads memory only. Cloning is cheap and shares the service.
/// Dropping the last clone without [`LeaseService::shutdown`] ends every tenure at once (every
/// cancellation token is cancelled, nothing is believed) and stops the engine without
/// releasing: the leases lapse at the database after their term.
///
/// One process may run several services, each with its own holder id; a second live service
/// with the same holder id is refused ([`Error::HolderInUse`]).
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
/// use leasehold::{LeaseService, LeaseTaskOptions};
///
/// let service = LeaseService::builder("sqlite::memory:").build().await?;
/// let options = LeaseTaskOptions::new().on_acquired(|token, _cancel| {
///     println!("we are master (fencing token {token})");
/// });
/// let task = service.start_lease_task("scheduler", options).await?;
/// task.acquired().await?;
/// assert!(service.has_lease("scheduler"));
/// service.shutdown().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct LeaseService {
    inner: Arc<ServiceState>,
}

#[derive(Debug)]
struct ServiceState {
    engine: Addr<LeaseEngine>,
    registry: Arc<Registry>,
    /// The registry's deadlines of `namespace`: `has_lease` looks the name up here directly.
    deadlines: Arc<NamespaceDeadlines>,
    holder: HolderId,
    namespace: Namespace,
    config: LeaseConfig,
    events: broadcast::Sender<LeaseEvent>,
    thread: Mutex<Option<EngineThread>>,
    lock_queues: crate::lock::LockQueues,
    /// The parent of every tenure's cancellation token.
    cancel: CancellationToken,
    claim: Mutex<Option<HolderClaim>>,
    #[cfg(feature = "known-bugs")]
    bug: Option<leasehold_engine::KnownBug>,
    /// The latest report of the background clock-rate check, if it runs.
    clock_rate: Arc<Mutex<Option<crate::ClockRateReport>>>,
    /// The running N-holder lease tasks, by name.
    permit_tasks: crate::permit_task::PermitTasks,
}

/// A [`LeaseService`] that does not keep it alive: a background loop upgrades it for one step.
#[derive(Debug, Clone)]
pub(crate) struct WeakService(std::sync::Weak<ServiceState>);

impl WeakService {
    /// The service, unless its last clone was dropped.
    pub(crate) fn upgrade(&self) -> Option<LeaseService> {
        self.0.upgrade().map(|inner| LeaseService { inner })
    }
}

impl std::fmt::Debug for EngineThread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineThread").finish_non_exhaustive()
    }
}

impl Drop for ServiceState {
    fn drop(&mut self) {
        let thread = self
            .thread
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        // Every tenure ends now, whatever the engine thread is doing.
        self.cancel.cancel();
        if let Some(t) = thread.take() {
            tracing::info!(
                "{}: lease service dropped without shutdown; its leases lapse after their term",
                self.holder
            );
            self.registry.clear();
            t.system.stop();
        }
    }
}

impl LeaseService {
    /// A builder connecting to `url` (`sqlite://path?mode=rwc`, `sqlite::memory:`,
    /// `postgres://…`, `mysql://…`).
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    pub fn builder(url: impl Into<String>) -> LeaseServiceBuilder {
        LeaseServiceBuilder::new(StoreSource::Url(url.into()))
    }

    /// A builder over an existing store, used for requests and renewals alike. The store is a
    /// [`Store`]: the engine's tenures use its [`LeaseStore`](crate::LeaseStore) port, and retention purges through
    /// its [`AdminStore`](leasehold_storage::AdminStore) port (`MemoryStore`, `SeaOrmStore` and
    /// every decorator of this workspace have both). It is no more than that to the service: fencing (`begin_fenced`) and PostgreSQL wake-ups
    /// need the SQL store itself, given with [`LeaseService::from_sql_store`]. A SQL store's
    /// connections belong to the runtime that opened them: keep that runtime alive as long as
    /// the service (or prefer [`LeaseService::builder`], which connects on the engine thread).
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use std::sync::Arc;
    /// use leasehold::{LeaseService, MemoryStore};
    /// let service = LeaseService::from_store(Arc::new(MemoryStore::new())).build().await?;
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    pub fn from_store(store: Arc<dyn Store>) -> LeaseServiceBuilder {
        LeaseServiceBuilder::new(StoreSource::Store(store, None))
    }

    /// A builder over an existing SQL store: requests and renewals go to it, fenced
    /// transactions open on it, and on PostgreSQL releases are announced and heard on it. Its
    /// connections belong to the runtime that opened them (see [`LeaseService::from_store`]).
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use std::time::Duration;
    /// use leasehold::{LeaseService, StoreBuilder};
    /// let store = StoreBuilder::new("sqlite::memory:").connect().await?;
    /// let service = LeaseService::from_sql_store(store).build().await?;
    /// let guard = service.lock("jobs", "ledger", Duration::from_secs(30)).await?.expect("free");
    /// assert!(guard.begin_fenced().await?.is_some());
    /// # drop(guard); service.shutdown().await?; Ok(()) }
    /// ```
    pub fn from_sql_store(store: SeaOrmStore) -> LeaseServiceBuilder {
        let lease_store: Arc<dyn Store> = Arc::new(store.clone());
        LeaseServiceBuilder::new(StoreSource::Store(lease_store, Some(store)))
    }

    pub(crate) async fn start(
        spec: EngineSpec,
        holder: HolderId,
        namespace: Namespace,
        config: LeaseConfig,
    ) -> Result<Self> {
        let claim = HolderClaim::take(&holder)?;
        #[cfg(feature = "known-bugs")]
        let bug = spec.bug;
        let registry = Arc::new(Registry::new(Arc::new(MonotonicClock)));
        let cancel = CancellationToken::new();
        let (engine, thread) = runtime::start(
            spec,
            Arc::clone(&registry),
            cancel.clone(),
            config.request_timeout(),
        )
        .await?;
        tracing::info!("{holder}: lease service started");
        let deadlines = registry.namespace(&namespace);
        Ok(Self {
            inner: Arc::new(ServiceState {
                engine,
                registry,
                deadlines,
                holder,
                namespace,
                config,
                events: broadcast::channel(EVENT_BUFFER).0,
                thread: Mutex::new(Some(thread)),
                lock_queues: crate::lock::LockQueues::default(),
                cancel,
                claim: Mutex::new(Some(claim)),
                #[cfg(feature = "known-bugs")]
                bug,
                clock_rate: Arc::default(),
                permit_tasks: crate::permit_task::PermitTasks::default(),
            }),
        })
    }

    pub(crate) fn key(&self, name: &str) -> Result<LeaseKey> {
        Ok(LeaseKey::new(
            self.inner.namespace.clone(),
            LeaseName::parse(name)?,
        ))
    }

    /// This service's holder id.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// assert!(service.holder().as_str().contains(&std::process::id().to_string()));
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    #[must_use]
    pub fn holder(&self) -> &HolderId {
        &self.inner.holder
    }

    /// This service's namespace.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// let service = leasehold::LeaseService::builder("sqlite::memory:").namespace("jobs").build().await?;
    /// assert_eq!(service.namespace().as_str(), "jobs");
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    #[must_use]
    pub fn namespace(&self) -> &Namespace {
        &self.inner.namespace
    }

    /// Sends `msg` to the engine from a task on the engine thread and waits for the answer: the
    /// message is delivered even if the caller stops waiting.
    pub(crate) fn on_engine<M>(
        &self,
        msg: M,
    ) -> impl std::future::Future<Output = Result<M::Result>> + use<M>
    where
        M: Message + Send + 'static,
        M::Result: Send,
        LeaseEngine: Handler<M>,
    {
        let engine = self.inner.engine.clone();
        let (tx, rx) = oneshot::channel();
        let spawned = self.spawn_on_engine(async move {
            let _ = tx.send(engine.send(msg).await);
        });
        async move {
            if !spawned {
                return Err(Error::ShutDown);
            }
            Ok(rx.await.map_err(|_| Error::ShutDown)??)
        }
    }

    /// Starts the background clock-rate check on the engine thread; it ends with the service.
    pub(crate) fn start_clock_check(&self, options: crate::ClockRateOptions) {
        let check = crate::clock_rate::background(
            self.inner.engine.clone(),
            Arc::clone(self.inner.registry.clock()),
            self.inner.config.clone(),
            options,
            Arc::clone(&self.inner.clock_rate),
            self.inner.cancel.clone(),
        );
        self.spawn_on_engine(check);
    }

    /// Starts the background purge on the engine thread; it ends with the service.
    pub(crate) fn start_retention(&self, retention: crate::Retention) {
        let purge = crate::retention::background(
            self.inner.engine.clone(),
            self.inner.namespace.clone(),
            retention,
            self.inner.config.request_timeout(),
            self.inner.cancel.clone(),
        );
        self.spawn_on_engine(purge);
    }

    /// The parent of every tenure's cancellation token.
    pub(crate) fn service_token(&self) -> CancellationToken {
        self.inner.cancel.clone()
    }

    /// A belief for a new tenure-bearing actor of this service.
    pub(crate) fn new_belief(&self) -> Arc<Belief> {
        Belief::new(
            self.inner.cancel.clone(),
            Arc::clone(self.inner.registry.clock()),
        )
    }

    /// The service's configuration (of its lease tasks unless their options say otherwise).
    pub(crate) fn config(&self) -> &LeaseConfig {
        &self.inner.config
    }

    /// The service's request timeout: the bound of its store calls.
    pub(crate) fn request_timeout(&self) -> std::time::Duration {
        self.inner.config.request_timeout()
    }

    /// The engine, the registry, the service's configuration and its event sender, for the
    /// sharded tasks (`shard.rs`).
    pub(crate) fn parts(
        &self,
    ) -> (
        &Addr<LeaseEngine>,
        &Arc<Registry>,
        &LeaseConfig,
        &broadcast::Sender<LeaseEvent>,
    ) {
        let i = &self.inner;
        (&i.engine, &i.registry, &i.config, &i.events)
    }

    /// Runs `fut` on the engine thread; `false` once the service is shut down.
    pub(crate) fn spawn_on_engine(
        &self,
        fut: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> bool {
        let thread = self
            .inner
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        thread
            .as_ref()
            .is_some_and(|t| t.system.arbiter().spawn(fut))
    }

    /// The running N-holder lease tasks.
    pub(crate) fn permit_task_book(&self) -> &crate::permit_task::PermitTasks {
        &self.inner.permit_tasks
    }

    /// A handle on this service that does not keep it alive, for its background loops.
    pub(crate) fn downgrade(&self) -> WeakService {
        WeakService(Arc::downgrade(&self.inner))
    }

    /// Whether this is the last handle on the service: a background step that upgraded its
    /// [`WeakService`] and finds itself alone lets go, so the user's drop ends the service.
    pub(crate) fn is_only_handle(&self) -> bool {
        Arc::strong_count(&self.inner) == 1
    }

    pub(crate) fn engine(&self) -> &Addr<LeaseEngine> {
        &self.inner.engine
    }

    pub(crate) fn registry(&self) -> &Arc<Registry> {
        &self.inner.registry
    }

    /// This process's fair queue per lock.
    pub(crate) fn lock_queues(&self) -> &crate::lock::LockQueues {
        &self.inner.lock_queues
    }

    fn is_shut_down(&self) -> bool {
        self.inner
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_none()
    }
}
