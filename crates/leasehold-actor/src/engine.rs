//! The engine: the actor that owns every [`LeaseActor`] of one holder.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Arc;

use actix::prelude::*;
use futures::future::join_all;
use leasehold_core::{DbInstant, HolderId, LeaseConfig, LeaseKey, LeaseRecord, ValidationError};
use leasehold_storage::{LeaseStore, StoreError};
use tokio::sync::oneshot;

use crate::Registry;
use crate::actor::{AbandonLease, LeaseActor, Listener, StartLease, StopLease};
use crate::batcher::RenewBatcher;

/// Owns the [`LeaseActor`] of every lease task of one holder, and the stores they use.
///
/// Messages: [`StartTask`], [`StopTask`], [`ShutdownAll`], [`ReadRecord`], [`ReadDbNow`],
/// [`ListTasks`].
///
/// # Lifecycle
/// ## Running
/// Starts and stops lease actors on request; requests through the main store, renewals
/// through the [`RenewBatcher`] (which may use a store of its own).
/// ## After [`ShutdownAll`]
/// Every actor has been abandoned and everything the holder held released in one statement;
/// the engine keeps answering, with no tasks.
///
/// # Examples
/// Inside an actix application's own `System`:
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use actix::Actor;
/// use leasehold_actor::{LeaseEngine, Listener, Registry, RenewBatcher, ShutdownAll, StartTask, StopTask};
/// use leasehold_core::{HolderId, LeaseConfig, LeaseKey, MonotonicClock, Notification};
/// use leasehold_storage::{LeaseStore, MemoryStore};
///
/// actix::System::new().block_on(async {
///     let store: Arc<dyn LeaseStore> = Arc::new(MemoryStore::new());
///     let registry = Arc::new(Registry::new(Arc::new(MonotonicClock)));
///     let renewer = RenewBatcher::new(Arc::clone(&store), Duration::from_millis(10)).start();
///     let holder = HolderId::new("worker-1")?;
///     let engine = LeaseEngine::new(holder, store, renewer, Arc::clone(&registry)).start();
///
///     let key = LeaseKey::parse("", "leader")?;
///     let listener: Listener = Arc::new(|key: &LeaseKey, n: &Notification| println!("{key}: {n:?}"));
///     let config = LeaseConfig::default();
///     assert!(engine.send(StartTask { key: key.clone(), config, listener }).await??);
///     while !registry.has_lease(&key) {
///         tokio::time::sleep(Duration::from_millis(5)).await;
///     }
///     assert!(engine.send(StopTask { key: key.clone() }).await?);
///     assert!(!registry.has_lease(&key));
///     assert_eq!(engine.send(ShutdownAll).await??, 0);
///     Ok::<(), Box<dyn std::error::Error>>(())
/// })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct LeaseEngine {
    pub(crate) holder: HolderId,
    pub(crate) store: Arc<dyn LeaseStore>,
    renewer: Arc<Addr<RenewBatcher>>,
    registry: Arc<Registry>,
    tasks: HashMap<LeaseKey, Addr<LeaseActor>>,
    started: u64,
}

impl std::fmt::Debug for LeaseEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseEngine")
            .field("holder", &self.holder)
            .field("tasks", &self.tasks.len())
            .finish_non_exhaustive()
    }
}

impl LeaseEngine {
    /// An engine for `holder`: requests go to `store`, renewals through `renewer`, deadlines to
    /// `registry`.
    #[must_use]
    pub fn new(
        holder: HolderId,
        store: Arc<dyn LeaseStore>,
        renewer: Addr<RenewBatcher>,
        registry: Arc<Registry>,
    ) -> Self {
        Self {
            holder,
            store,
            renewer: Arc::new(renewer),
            registry,
            tasks: HashMap::new(),
            started: 0,
        }
    }

    /// A jitter seed that differs between holders, leases and restarts.
    fn seed(&mut self, key: &LeaseKey) -> u64 {
        self.started += 1;
        std::collections::hash_map::RandomState::new().hash_one((&self.holder, key, self.started))
    }
}

impl Actor for LeaseEngine {
    type Context = Context<Self>;
}

/// Start a lease task for `key` unless one is running. Answers `Ok(true)` if started,
/// `Ok(false)` if one was already running.
#[derive(Message)]
#[rtype(result = "Result<bool, ValidationError>")]
pub struct StartTask {
    /// The lease.
    pub key: LeaseKey,
    /// Its configuration.
    pub config: LeaseConfig,
    /// Told about its notifications.
    pub listener: Listener,
}

impl std::fmt::Debug for StartTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StartTask")
            .field("key", &self.key)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// Stop the lease task of `key`, releasing the lease if held. Answers once the actor has
/// stopped: `true` if there was a task.
#[derive(Debug, Message)]
#[rtype(result = "bool")]
pub struct StopTask {
    /// The lease.
    pub key: LeaseKey,
}

/// Abandon every task and release everything the holder holds with one
/// [`LeaseStore::release_all`]. Answers how many leases were released.
#[derive(Debug, Message)]
#[rtype(result = "Result<u64, StoreError>")]
pub struct ShutdownAll;

/// Read one lease row from the store.
#[derive(Debug, Message)]
#[rtype(result = "Result<Option<LeaseRecord>, StoreError>")]
pub struct ReadRecord {
    /// The lease.
    pub key: LeaseKey,
}

/// Read the store's clock.
#[derive(Debug, Message)]
#[rtype(result = "Result<DbInstant, StoreError>")]
pub struct ReadDbNow;

/// The keys of the running tasks.
#[derive(Debug, Message)]
#[rtype(result = "Vec<LeaseKey>")]
pub struct ListTasks;

impl Handler<StartTask> for LeaseEngine {
    type Result = Result<bool, ValidationError>;

    fn handle(&mut self, msg: StartTask, _ctx: &mut Context<Self>) -> Self::Result {
        let Some(addr) = self.spawn_actor(msg.key, &msg.config, msg.listener)? else {
            return Ok(false);
        };
        addr.do_send(StartLease);
        Ok(true)
    }
}

impl LeaseEngine {
    /// Starts an idle actor for `key` and registers it, unless a task is running (`None`).
    pub(crate) fn spawn_actor(
        &mut self,
        key: LeaseKey,
        config: &LeaseConfig,
        listener: Listener,
    ) -> Result<Option<Addr<LeaseActor>>, ValidationError> {
        if self.tasks.get(&key).is_some_and(Addr::connected) {
            return Ok(None);
        }
        let seed = self.seed(&key);
        let actor = LeaseActor::new(
            key.clone(),
            self.holder.clone(),
            config,
            seed,
            Arc::clone(&self.store),
            Arc::clone(&self.registry),
            listener,
        )?
        .with_shared_renewer(Arc::clone(&self.renewer));
        let addr = actor.start();
        log::debug!("{key}: lease task started");
        self.tasks.insert(key, addr.clone());
        Ok(Some(addr))
    }

    /// The running actor of `key`, if any.
    pub(crate) fn task(&self, key: &LeaseKey) -> Option<&Addr<LeaseActor>> {
        self.tasks.get(key)
    }

    /// The store requests go to.
    pub(crate) fn store(&self) -> Arc<dyn LeaseStore> {
        Arc::clone(&self.store)
    }
}

impl Handler<StopTask> for LeaseEngine {
    type Result = ResponseFuture<bool>;

    fn handle(&mut self, msg: StopTask, _ctx: &mut Context<Self>) -> Self::Result {
        let Some(addr) = self.tasks.remove(&msg.key) else {
            return Box::pin(async { false });
        };
        let (done, stopped) = oneshot::channel();
        addr.do_send(StopLease { done: Some(done) });
        Box::pin(async move {
            // An error means the actor is gone already, which is what we wait for.
            let _ = stopped.await;
            true
        })
    }
}

impl Handler<ShutdownAll> for LeaseEngine {
    type Result = ResponseFuture<Result<u64, StoreError>>;

    fn handle(&mut self, _: ShutdownAll, _ctx: &mut Context<Self>) -> Self::Result {
        self.registry.clear();
        let actors: Vec<_> = self.tasks.drain().map(|(_, addr)| addr).collect();
        let store = Arc::clone(&self.store);
        let holder = self.holder.clone();
        Box::pin(async move {
            // Abandon first, so no renewal or acquire races the release below.
            join_all(actors.iter().map(|a| a.send(AbandonLease))).await;
            log::trace!("release_all for {holder}");
            let n = store.release_all(&holder).await?;
            log::info!("{holder}: shut down, released {n} leases");
            Ok(n)
        })
    }
}

impl Handler<ReadRecord> for LeaseEngine {
    type Result = ResponseFuture<Result<Option<LeaseRecord>, StoreError>>;

    fn handle(&mut self, msg: ReadRecord, _ctx: &mut Context<Self>) -> Self::Result {
        let store = Arc::clone(&self.store);
        Box::pin(async move { store.get(&msg.key).await })
    }
}

impl Handler<ReadDbNow> for LeaseEngine {
    type Result = ResponseFuture<Result<DbInstant, StoreError>>;

    fn handle(&mut self, _: ReadDbNow, _ctx: &mut Context<Self>) -> Self::Result {
        let store = Arc::clone(&self.store);
        Box::pin(async move { store.db_now().await })
    }
}

impl Handler<ListTasks> for LeaseEngine {
    type Result = Vec<LeaseKey>;

    fn handle(&mut self, _: ListTasks, _ctx: &mut Context<Self>) -> Vec<LeaseKey> {
        self.tasks.keys().cloned().collect()
    }
}
