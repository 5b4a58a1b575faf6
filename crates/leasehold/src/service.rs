//! [`LeaseService`]: the seeds' `ILeaseService`.
//!
//! | file | holds |
//! |---|---|
//! | `service.rs` | [`LeaseService`], its state, its builders and the helpers the other modules use |
//! | `service/extensions.rs` | the type map in which each family keeps its own state |
//! | `service/seed_names.rs` | the seeds' method names, each a one-line delegation to a family's handle |
//! | `service/reads.rs` | what the service answers without changing anything: `has_lease`, `current_holder`, `db_now`, `health`, `subscribe` |
//! | `service/shutdown.rs` | `shutdown` and the crash hook |

mod extensions;
mod reads;
mod seed_names;
mod shutdown;

use std::sync::{Arc, Mutex, PoisonError};

use actix::{Addr, Handler, Message};
use leasehold_core::{HolderId, LeaseConfig, LeaseKey, LeaseName, MonotonicClock, Namespace};
use leasehold_engine::{Belief, LeaseEngine, NamespaceDeadlines, Registry};
use tokio::sync::{broadcast, oneshot};
use tokio_util::sync::CancellationToken;

use extensions::Extensions;

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
    /// The parent of every tenure's cancellation token.
    cancel: CancellationToken,
    claim: Mutex<Option<HolderClaim>>,
    #[cfg(feature = "known-bugs")]
    bug: Option<leasehold_engine::KnownBug>,
    /// The latest report of the background clock-rate check, if it runs.
    clock_rate: Arc<Mutex<Option<crate::clock::ClockRateReport>>>,
    /// The state each family keeps for itself (see [`Extensions`]).
    extensions: Extensions,
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
                cancel,
                claim: Mutex::new(Some(claim)),
                #[cfg(feature = "known-bugs")]
                bug,
                clock_rate: Arc::default(),
                extensions: Extensions::default(),
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
    pub(crate) fn start_clock_check(&self, options: crate::clock::ClockRateOptions) {
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

    /// The state of type `T` a family keeps in this service, made with `T::default()` on first
    /// use: the service itself knows no family's state.
    pub(crate) fn extension<T: Default + Send + Sync + 'static>(&self) -> Arc<T> {
        self.inner.extensions.get()
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

    /// The registry's deadlines of the service's namespace.
    pub(crate) fn deadlines(&self) -> &Arc<NamespaceDeadlines> {
        &self.inner.deadlines
    }

    /// The sender of the service's events.
    pub(crate) fn events(&self) -> &broadcast::Sender<LeaseEvent> {
        &self.inner.events
    }

    pub(crate) fn engine(&self) -> &Addr<LeaseEngine> {
        &self.inner.engine
    }

    pub(crate) fn registry(&self) -> &Arc<Registry> {
        &self.inner.registry
    }

    fn is_shut_down(&self) -> bool {
        self.inner
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_none()
    }
}
