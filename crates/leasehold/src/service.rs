//! [`LeaseService`]: the seeds' `ILeaseService`.

use std::sync::{Arc, Mutex, PoisonError};

use actix::{Addr, Handler, Message};
use leasehold_core::{
    DbInstant, HolderId, LeaseConfig, LeaseKey, LeaseName, LeaseRecord, MonotonicClock, Namespace,
};
use leasehold_engine::{
    Belief, LeaseEngine, ListTasks, NamespaceDeadlines, Owner, ReadDbNow, ReadRecord, Registry,
    ShutdownAll, StartTask, StartTasks, StopTask,
};
use leasehold_storage::{SeaOrmStore, Store};
use tokio::sync::{broadcast, oneshot};
use tokio_util::sync::CancellationToken;

use crate::builder::LeaseServiceBuilder;
use crate::holder::HolderClaim;
use crate::runtime::{self, EngineSpec, EngineThread, StoreSource};
use crate::task::{self, LeaseTask, LeaseTaskOptions};
use crate::{Error, LeaseEvent, Result};

/// How many events a slow subscriber may fall behind before it misses some.
const EVENT_BUFFER: usize = 1024;

/// How many names [`LeaseService::start_lease_tasks`] hands to the engine in one message: the
/// engine thread spawns that many actors in one step, so a chunk keeps that step short next to
/// the renewals the same thread runs.
pub const START_CHUNK: usize = 1_000;

/// How much longer than the request timeout a health probe waits for the engine.
const HEALTH_GRACE: std::time::Duration = std::time::Duration::from_millis(500);

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
            }),
        })
    }

    pub(crate) fn key(&self, name: &str) -> Result<LeaseKey> {
        Ok(LeaseKey::new(
            self.inner.namespace.clone(),
            LeaseName::new(name)?,
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

    /// Starts competing for `name`: acquire, and once held renew in the background; when someone
    /// else holds it, retry until their lease ends. Idempotent per name: a second call returns
    /// the running task's handle and ignores `options`; while the task of `name` is still being
    /// stopped, a new start waits for that stop to settle first. Replaces
    /// `ILeaseService.startLeaseTask`.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use leasehold::{LeaseService, LeaseTaskOptions};
    /// let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// let options = LeaseTaskOptions::new()
    ///     .on_acquired(|token, cancel| { tokio::spawn(async move { cancel.cancelled().await; }); })
    ///     .on_lost(|reason| eprintln!("lost the lease: {reason:?}"));
    /// let task = service.start_lease_task("leader", options).await?;
    /// let again = service.start_lease_task("leader", LeaseTaskOptions::new()).await?;
    /// assert_eq!(task.key(), again.key());
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad name or task configuration; [`Error::KeyInUse`] when a lock,
    /// a hold or sharded tasks of this service use the name; [`Error::ShutDown`].
    ///
    /// # Cancel safety
    /// Dropped before the engine has the request, nothing is started; after, the task runs
    /// (start it again to get its handle).
    pub async fn start_lease_task(
        &self,
        name: &str,
        options: LeaseTaskOptions,
    ) -> Result<LeaseTask> {
        let key = self.key(name)?;
        let config = options
            .config
            .clone()
            .unwrap_or_else(|| self.inner.config.clone());
        config.validate()?;
        let start = self.start_message(key.clone(), config, &options);
        let (belief, _) = self.inner.engine.send(start).await??;
        Ok(LeaseTask {
            key,
            belief,
            deadlines: Arc::clone(&self.inner.deadlines),
            engine: self.inner.engine.clone(),
            owner: leasehold_engine::Owner::Task,
        })
    }

    /// Starts a lease task for each of `names`, all with the same `options`: what
    /// [`start_lease_task`](Self::start_lease_task) does for each, with one round trip to the
    /// engine per [`START_CHUNK`] names instead of one per name. Use it to start many tasks at
    /// once (a job per partition, a service taking up thousands of names): on a loaded engine
    /// thread, which also renews every lease already held, each single start waits a cycle of
    /// that thread (ten services of 100,000 leases sharing a 2-core machine with their
    /// PostgreSQL: 57,000 single starts in 156 s, against 90,000 in 21–32 s with this call;
    /// docs/benchmarks.md). The grants themselves go out batched either way (see
    /// [`EngineTuning::group_commit`](crate::EngineTuning::group_commit)).
    ///
    /// Answers the handles in the order of `names`; a name given twice, or already running as a
    /// task, answers the running task's handle (and ignores `options` for it, as a single start
    /// does). The callbacks of `options` are shared by all the tasks; to tell the names apart in
    /// them, start the tasks one by one or watch [`subscribe`](Self::subscribe), whose events
    /// name their lease.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use leasehold::{LeaseService, LeaseTaskOptions};
    /// let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// let names: Vec<String> = (0..100).map(|i| format!("partition-{i}")).collect();
    /// let tasks = service.start_lease_tasks(&names, LeaseTaskOptions::new()).await?;
    /// assert_eq!(tasks.len(), 100);
    /// for task in &tasks {
    ///     task.acquired().await?;
    /// }
    /// assert!(names.iter().all(|name| service.has_lease(name)));
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad name (the first one) or a bad task configuration: checked
    /// before anything is started. [`Error::KeyInUse`] when a lock, a hold or sharded tasks of
    /// this service use one of the names, or [`Error::ShutDown`]: then the tasks this call had
    /// started (in earlier chunks) are stopped again, their leases released if granted
    /// meanwhile; tasks that were running before the call are left as they were.
    ///
    /// # Cancel safety
    /// Dropped part-way, the chunks the engine already has run (start them again to get their
    /// handles); the rest are not started.
    pub async fn start_lease_tasks<I, S>(
        &self,
        names: I,
        options: LeaseTaskOptions,
    ) -> Result<Vec<LeaseTask>>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let keys = names
            .into_iter()
            .map(|name| self.key(name.as_ref()))
            .collect::<Result<Vec<_>>>()?;
        let config = options
            .config
            .clone()
            .unwrap_or_else(|| self.inner.config.clone());
        config.validate()?;
        let mut tasks = Vec::with_capacity(keys.len());
        let mut started_here = Vec::new();
        for chunk in keys.chunks(START_CHUNK) {
            let starts = chunk
                .iter()
                .map(|key| self.start_message(key.clone(), config.clone(), &options))
                .collect();
            let answered = match self.inner.engine.send(StartTasks(starts)).await {
                Ok(Ok(answered)) => answered,
                failed => {
                    // Leave things as they were: stop what this call started (each stop is
                    // handed to the engine at once; then all are waited for together).
                    let stops: Vec<_> = started_here
                        .into_iter()
                        .map(|key| {
                            self.on_engine(StopTask {
                                key,
                                owner: Owner::Task,
                            })
                        })
                        .collect();
                    futures::future::join_all(stops).await;
                    return Err(match failed {
                        Ok(Err(e)) => e.into(),
                        Err(e) => e.into(),
                        Ok(Ok(_)) => Error::ShutDown,
                    });
                }
            };
            for (key, (belief, started)) in chunk.iter().zip(answered) {
                if started {
                    started_here.push(key.clone());
                }
                tasks.push(LeaseTask {
                    key: key.clone(),
                    belief,
                    deadlines: Arc::clone(&self.inner.deadlines),
                    engine: self.inner.engine.clone(),
                    owner: leasehold_engine::Owner::Task,
                });
            }
        }
        Ok(tasks)
    }

    /// Stops the task for `name`: its tenure ends at once (the cancellation token is cancelled
    /// and `has_lease` is false before the release is even sent), the lease is released if
    /// held, and this waits until that has settled (at the local deadline at the latest).
    /// Returns whether a task was running. Other tasks, and locks on other names, are
    /// untouched. Replaces `ILeaseService.stopLeaseTask`.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use leasehold::{LeaseService, LeaseTaskOptions};
    /// let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// let (_, cancel) = service.start_lease_task("leader", LeaseTaskOptions::new()).await?.acquired().await?;
    /// assert!(service.stop_lease_task("leader").await?);
    /// assert!(!service.has_lease("leader") && cancel.is_cancelled());
    /// assert!(service.current_holder("leader").await?.is_none());
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad name; [`Error::ShutDown`].
    ///
    /// # Cancel safety
    /// Cancel safe: the stop is handed to the engine before the first await, so dropping the
    /// future (even before it is polled past that point) only stops waiting: the task is
    /// stopped and the lease released anyway.
    pub async fn stop_lease_task(&self, name: &str) -> Result<bool> {
        let key = self.key(name)?;
        let stopping = self.on_engine(StopTask {
            key,
            owner: Owner::Task,
        });
        stopping.await
    }

    /// Whether this holder holds `name` now: a memory lookup and one monotonic clock read, no
    /// IO. False at and after the local deadline even if a renewal is stuck, and false for an
    /// invalid name. Replaces `ILeaseService.hasLease`.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use leasehold::{LeaseService, LeaseTaskOptions};
    /// let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// assert!(!service.has_lease("leader"));
    /// service.start_lease_task("leader", LeaseTaskOptions::new()).await?.acquired().await?;
    /// assert!(service.has_lease("leader"));
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    #[must_use]
    pub fn has_lease(&self, name: &str) -> bool {
        self.inner.deadlines.has_lease(name)
    }

    /// Who holds `name` according to the database now, with the fencing token and end time;
    /// `None` when nobody does (never granted, released or expired).
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use leasehold::{LeaseService, LeaseTaskOptions};
    /// let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// assert!(service.current_holder("leader").await?.is_none());
    /// let (token, _) = service.start_lease_task("leader", LeaseTaskOptions::new()).await?.acquired().await?;
    /// let record = service.current_holder("leader").await?.expect("held");
    /// assert_eq!((&record.holder, record.token), (service.holder(), token));
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Invalid`], [`Error::Store`], [`Error::ShutDown`].
    pub async fn current_holder(&self, name: &str) -> Result<Option<LeaseRecord>> {
        let key = self.key(name)?;
        let record = self.inner.engine.send(ReadRecord { key }).await??;
        Ok(record.filter(|r| r.held))
    }

    /// The database's clock, which decides every expiry.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// assert!(service.db_now().await?.as_millis() > 0);
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Store`], [`Error::ShutDown`].
    pub async fn db_now(&self) -> Result<DbInstant> {
        Ok(self.inner.engine.send(ReadDbNow).await??)
    }

    /// A health check for a liveness or readiness probe: whether the engine answers, whether
    /// the database answers a read of its clock (one probe through the engine, bounded by the
    /// request timeout and a grace of 500 ms), the age of the last grant or confirmed renewal,
    /// and how many leases are held. Renewals are overdue when leases are held and the last
    /// confirmation is older than the service's renew interval plus its request timeout.
    /// Never fails: every problem is a [`HealthReason`](crate::HealthReason).
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use leasehold::{DatabaseProbe, LeaseService};
    /// let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// let health = service.health().await;
    /// assert!(health.is_ready(), "{health}");
    /// assert!(matches!(health.database, DatabaseProbe::Reachable { .. }));
    /// assert_eq!((health.leases_held, health.last_renewal_age), (0, None));
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn health(&self) -> crate::Health {
        use crate::{DatabaseProbe, HealthReason};
        let clock = Arc::clone(self.inner.registry.clock());
        let mut health = crate::Health {
            verdict: crate::Verdict::Healthy,
            reasons: Vec::new(),
            engine_alive: false,
            database: DatabaseProbe::NotProbed,
            last_renewal_age: None,
            leases_held: 0,
            clock_rate: None,
        };
        if self.is_shut_down() {
            health.reasons.push(HealthReason::ShutDown);
            return health.decide();
        }
        let waited = self.inner.config.request_timeout() + HEALTH_GRACE;
        let t0 = clock.now();
        match tokio::time::timeout(waited, self.inner.engine.send(ReadDbNow)).await {
            Err(_) => health
                .reasons
                .push(HealthReason::EngineUnresponsive { waited }),
            Ok(Err(_)) => health.reasons.push(HealthReason::ShutDown),
            Ok(Ok(answer)) => {
                health.engine_alive = true;
                health.database = match answer {
                    Ok(_) => DatabaseProbe::Reachable {
                        round_trip: clock.now().saturating_duration_since(t0),
                    },
                    Err(e) => {
                        let error = e.to_string();
                        health.reasons.push(HealthReason::DatabaseUnreachable {
                            error: error.clone(),
                        });
                        DatabaseProbe::Unreachable { error }
                    }
                };
            }
        }
        let now = clock.now();
        health.leases_held = self.inner.registry.held_count();
        health.last_renewal_age = self
            .inner
            .registry
            .last_confirmed()
            .map(|at| now.saturating_duration_since(at));
        let limit = self.inner.config.renew_interval() + self.inner.config.request_timeout();
        if let Some(age) = health.last_renewal_age
            && health.leases_held > 0
            && age > limit
        {
            health
                .reasons
                .push(HealthReason::RenewalsOverdue { age, limit });
        }
        health.clock_rate = *self
            .inner
            .clock_rate
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(report) = health.clock_rate
            && !report.verdict.is_within()
        {
            health.reasons.push(HealthReason::ClockRate(report));
        }
        health.decide()
    }

    /// The names of the running lease tasks.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use leasehold::{LeaseService, LeaseTaskOptions};
    /// let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// service.start_lease_task("a", LeaseTaskOptions::new()).await?;
    /// assert_eq!(service.lease_tasks().await?.len(), 1);
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::ShutDown`].
    pub async fn lease_tasks(&self) -> Result<Vec<LeaseName>> {
        let keys = self
            .inner
            .engine
            .send(ListTasks { owner: Owner::Task })
            .await?;
        Ok(keys.into_iter().map(|k| k.name).collect())
    }

    /// Every [`LeaseEvent`] of this service's tasks from now on, for those who prefer a stream
    /// to callbacks. A receiver more than 1024 events behind misses the oldest.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use leasehold::{EventKind, LeaseService, LeaseTaskOptions};
    /// let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// let mut events = service.subscribe();
    /// service.start_lease_task("leader", LeaseTaskOptions::new()).await?;
    /// let event = events.recv().await.expect("an event");
    /// assert_eq!(event.what, EventKind::Acquired);
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    #[must_use]
    pub fn subscribe(&self) -> broadcast::Receiver<LeaseEvent> {
        self.inner.events.subscribe()
    }

    /// Ends every tenure of this service at once (every cancellation token is cancelled, every
    /// guard, task and sharded name stops believing), then releases exactly the tenures it
    /// held (by name and token, in one statement where the backend allows: never a row this
    /// service does not believe in), then stops the engine thread. Returns how many leases were
    /// released. Replaces `ILeaseService.shutdown`.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use leasehold::{LeaseService, LeaseTaskOptions};
    /// let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// let (_, cancel) = service.start_lease_task("a", LeaseTaskOptions::new()).await?.acquired().await?;
    /// service.start_lease_task("b", LeaseTaskOptions::new()).await?.acquired().await?;
    /// assert_eq!(service.shutdown().await?, 2);
    /// assert!(!service.has_lease("a") && cancel.is_cancelled());
    /// assert!(matches!(service.db_now().await, Err(leasehold::Error::ShutDown)));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::ShutDown`] if already shut down; [`Error::Store`] if the release failed (the
    /// engine is stopped anyway, and the leases lapse after their term).
    ///
    /// # Cancel safety
    /// Every tenure ends before the first await. Dropping the future part-way may leave the
    /// leases to lapse instead of being released, and the engine thread running until the last
    /// clone of the service is dropped.
    pub async fn shutdown(&self) -> Result<u64> {
        if self.is_shut_down() {
            return Err(Error::ShutDown);
        }
        // The tenures end before the release statement, so no guard outlives its row.
        #[cfg(feature = "known-bugs")]
        let end_first =
            self.inner.bug != Some(leasehold_engine::KnownBug::ShutdownReleasesByHolder);
        #[cfg(not(feature = "known-bugs"))]
        let end_first = true;
        if end_first {
            self.inner.cancel.cancel();
        }
        let released = self.on_engine(ShutdownAll).await;
        let Some(thread) = self.take_thread() else {
            return Err(Error::ShutDown);
        };
        thread.stop().await;
        self.release_claim();
        Ok(released??)
    }

    /// Test hook simulating a crash: ends every tenure here and stops the engine without
    /// telling the database, so the leases lapse after their term and others take over.
    #[doc(hidden)]
    pub async fn abort_without_release(&self) {
        self.inner.cancel.cancel();
        if let Some(thread) = self.take_thread() {
            self.inner.registry.clear();
            thread.stop().await;
        }
        self.release_claim();
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

    /// The engine message starting a lease task for `key` with `options` (and `config`, their
    /// configuration or the service's, already validated).
    fn start_message(
        &self,
        key: LeaseKey,
        config: LeaseConfig,
        options: &LeaseTaskOptions,
    ) -> StartTask {
        let belief = self.new_belief();
        let listener = task::listener(
            self.inner.holder.clone(),
            Arc::clone(&belief),
            options,
            self.inner.events.clone(),
        );
        StartTask {
            belief: Some(belief),
            value: options.value.clone(),
            ..StartTask::new(key, config, listener)
        }
    }

    /// A belief for a new tenure-bearing actor of this service.
    pub(crate) fn new_belief(&self) -> Arc<Belief> {
        Belief::new(
            self.inner.cancel.clone(),
            Arc::clone(self.inner.registry.clock()),
        )
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

    fn take_thread(&self) -> Option<EngineThread> {
        self.inner
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    fn release_claim(&self) {
        self.inner
            .claim
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
    }
}
