//! [`LeaseService`]: the seeds' `ILeaseService`.

use std::sync::{Arc, Mutex, PoisonError};

use actix::Addr;
use dashmap::DashMap;
use leasehold_actor::{
    LeaseEngine, ListTasks, NamespaceDeadlines, ReadDbNow, ReadRecord, Registry, ShutdownAll,
    StartTask, StopTask,
};
use leasehold_core::{
    DbInstant, HolderId, LeaseConfig, LeaseKey, LeaseName, LeaseRecord, MonotonicClock, Namespace,
};
use leasehold_storage::LeaseStore;
use tokio::sync::broadcast;

use crate::builder::LeaseServiceBuilder;
use crate::runtime::{self, EngineSpec, EngineThread, Source};
use crate::task::{self, LeaseTask, LeaseTaskOptions, TaskState, Tenure};
use crate::{Error, LeaseEvent, Result};

/// How many events a slow subscriber may fall behind before it misses some.
const EVENT_BUFFER: usize = 1024;

/// Leases for master/standby failover, held by one holder (this process) through the database.
/// Replaces the seeds' `ILeaseService`.
///
/// The service owns one thread running an actix `System`, on which the stores are connected and
/// every lease actor lives; its async methods work from any runtime (plain tokio, actix-web).
/// [`LeaseService::has_lease`] reads memory only. Cloning is cheap and shares the service.
/// Dropping the last clone without [`LeaseService::shutdown`] stops the engine without releasing:
/// the leases lapse at the database after their term.
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
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    engine: Addr<LeaseEngine>,
    registry: Arc<Registry>,
    /// The registry's deadlines of `namespace`: `has_lease` looks the name up here directly.
    deadlines: Arc<NamespaceDeadlines>,
    holder: HolderId,
    namespace: Namespace,
    config: LeaseConfig,
    events: broadcast::Sender<LeaseEvent>,
    tasks: DashMap<LeaseName, LeaseTask>,
    thread: Mutex<Option<EngineThread>>,
    locks: crate::lock::LocalLocks,
}

impl std::fmt::Debug for EngineThread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineThread").finish_non_exhaustive()
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let thread = self
            .thread
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(t) = thread.take() {
            log::info!(
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
        LeaseServiceBuilder::new(Source::Url(url.into()))
    }

    /// A builder over an existing store, used for requests and renewals alike. A SQL store's
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
    pub fn from_store(store: Arc<dyn LeaseStore>) -> LeaseServiceBuilder {
        LeaseServiceBuilder::new(Source::Store(store))
    }

    pub(crate) async fn start(
        spec: EngineSpec,
        holder: HolderId,
        namespace: Namespace,
        config: LeaseConfig,
    ) -> Result<Self> {
        let registry = Arc::new(Registry::new(Arc::new(MonotonicClock)));
        let (engine, thread) = runtime::start(spec, Arc::clone(&registry)).await?;
        log::info!("{holder}: lease service started");
        let deadlines = registry.namespace(&namespace);
        Ok(Self {
            inner: Arc::new(Inner {
                engine,
                registry,
                deadlines,
                holder,
                namespace,
                config,
                events: broadcast::channel(EVENT_BUFFER).0,
                tasks: DashMap::new(),
                thread: Mutex::new(Some(thread)),
                locks: crate::lock::LocalLocks::default(),
            }),
        })
    }

    fn key(&self, name: &str) -> Result<LeaseKey> {
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
    /// the running task's handle and ignores `options`. Replaces `ILeaseService.startLeaseTask`.
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
    /// [`Error::Invalid`] for a bad name or task configuration; [`Error::ShutDown`].
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
        if let Some(task) = self.inner.tasks.get(&key.name) {
            return Ok(task.clone());
        }
        // Two racing first calls share one task state; the engine starts one actor.
        let task = self
            .inner
            .tasks
            .entry(key.name.clone())
            .or_insert_with(|| LeaseTask {
                key: key.clone(),
                state: TaskState::new(),
                deadlines: Arc::clone(&self.inner.deadlines),
            })
            .clone();
        let listener = task::listener(
            self.inner.holder.clone(),
            Arc::clone(&task.state),
            &options,
            self.inner.events.clone(),
        );
        let started = self
            .inner
            .engine
            .send(StartTask {
                key: key.clone(),
                config,
                listener,
            })
            .await;
        if !matches!(started, Ok(Ok(_))) {
            self.inner.tasks.remove(&key.name);
        }
        started??;
        Ok(task)
    }

    /// Stops the task for `name`: releases the lease if held, waits until that has settled (at
    /// the local deadline at the latest), and cancels the tenure's token. Returns whether a task
    /// was running. Other tasks are untouched. Replaces `ILeaseService.stopLeaseTask`.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use leasehold::{LeaseService, LeaseTaskOptions};
    /// let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// service.start_lease_task("leader", LeaseTaskOptions::new()).await?.acquired().await?;
    /// assert!(service.stop_lease_task("leader").await?);
    /// assert!(!service.has_lease("leader"));
    /// assert!(service.current_holder("leader").await?.is_none());
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad name; [`Error::ShutDown`].
    ///
    /// # Cancel safety
    /// Once the engine has the request, dropping the future only stops waiting: the task is
    /// stopped and the lease released anyway.
    pub async fn stop_lease_task(&self, name: &str) -> Result<bool> {
        let key = self.key(name)?;
        let stopped = self
            .inner
            .engine
            .send(StopTask { key: key.clone() })
            .await?;
        if let Some((_, task)) = self.inner.tasks.remove(&key.name) {
            task.state.end(Tenure::Stopped);
        }
        Ok(stopped)
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
        let keys = self.inner.engine.send(ListTasks).await?;
        Ok(keys.into_iter().map(|k| k.name).collect())
    }

    /// Every [`LeaseEvent`] of this service's tasks from now on, for those who prefer a stream
    /// to callbacks. A receiver more than 1024 events behind misses the oldest.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use leasehold::{LeaseEvent, LeaseService, LeaseTaskOptions};
    /// let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// let mut events = service.subscribe();
    /// service.start_lease_task("leader", LeaseTaskOptions::new()).await?;
    /// let event = events.recv().await.expect("an event");
    /// assert!(matches!(event, LeaseEvent::Acquired { .. }));
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    #[must_use]
    pub fn subscribe(&self) -> broadcast::Receiver<LeaseEvent> {
        self.inner.events.subscribe()
    }

    /// Stops every task and releases everything this holder holds in one statement
    /// (`release_all`), then stops the engine thread. Returns how many leases were released.
    /// Replaces `ILeaseService.shutdown`.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use leasehold::{LeaseService, LeaseTaskOptions};
    /// let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// service.start_lease_task("a", LeaseTaskOptions::new()).await?.acquired().await?;
    /// service.start_lease_task("b", LeaseTaskOptions::new()).await?.acquired().await?;
    /// assert_eq!(service.shutdown().await?, 2);
    /// assert!(!service.has_lease("a"));
    /// assert!(matches!(service.db_now().await, Err(leasehold::Error::ShutDown)));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::ShutDown`] if already shut down; [`Error::Store`] if the release failed (the
    /// engine is stopped anyway, and the leases lapse after their term).
    ///
    /// # Cancel safety
    /// Dropping the future part-way may leave the leases to lapse instead of being released,
    /// and the engine thread running until the last clone of the service is dropped.
    pub async fn shutdown(&self) -> Result<u64> {
        if self.is_shut_down() {
            return Err(Error::ShutDown);
        }
        let released = self.inner.engine.send(ShutdownAll).await;
        let Some(thread) = self.take_thread() else {
            return Err(Error::ShutDown);
        };
        self.end_tasks();
        thread.stop().await;
        Ok(released??)
    }

    /// Test hook simulating a crash: stops the engine without telling the database, so the
    /// leases lapse after their term and others take over.
    #[doc(hidden)]
    pub async fn abort_without_release(&self) {
        if let Some(thread) = self.take_thread() {
            self.inner.registry.clear();
            self.end_tasks();
            thread.stop().await;
        }
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

    pub(crate) fn locks(&self) -> &crate::lock::LocalLocks {
        &self.inner.locks
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

    fn end_tasks(&self) {
        for task in self.inner.tasks.iter() {
            task.state.end(Tenure::Stopped);
        }
        self.inner.tasks.clear();
    }
}
