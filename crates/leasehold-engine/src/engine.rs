//! The engine: the actor that owns every [`LeaseActor`] of one holder, and the only book of
//! running tenures.

use actix::prelude::*;
use futures::future::join_all;
use leasehold_core::{DbInstant, HolderId, LeaseConfig, LeaseKey, LeaseRecord};
use leasehold_storage::{Doorbell, LeaseStore, StoreError};
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::actor::LeaseActor;
use crate::batcher::RenewBatcher;
use crate::belief::Belief;
use crate::detached::detached;
use crate::protocol::{
    AbandonLease, ActorStopped, EngineError, FindTask, ListTasks, Listener, Owner, PurgeRows,
    ReadDbNow, ReadRecord, ShutdownAll, StandByLease, StartLease, StartTask, StartTasks, StopLease,
    StopTask, UsedNamespaces, YieldLease, YieldTask,
};
use crate::registry::Registry;

/// A known bug that a test can put back, to show that the service simulation's oracle catches
/// it. Never set outside such tests.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum KnownBug {
    /// A tenure given up on request is ended (token cancelled, guard released) only when the
    /// release's answer arrives, not before the release is sent.
    CancelAfterReleaseAnswer,
    /// `shutdown` releases every row of the holder id (`release_all`) without ending the live
    /// guards' tenures first.
    ShutdownReleasesByHolder,
}

/// One entry of the book: the owner, the actor, and whether it is stopping.
pub(crate) struct Entry {
    pub(crate) owner: Owner,
    /// Shared with the actor's slot in the engine's alarms (one actix sender for both).
    pub(crate) addr: Arc<Addr<LeaseActor>>,
    pub(crate) belief: Arc<Belief>,
    id: u64,
    stopping: bool,
    /// Told (by being dropped with the entry) once the actor has stopped. An empty `Vec` costs
    /// no allocation, unlike a watch channel per actor (about 350 bytes).
    waiters: Vec<oneshot::Sender<()>>,
}

/// Owns the [`LeaseActor`] of every tenure of one holder (lease tasks, sharded names,
/// membership, locks, holds), the stores they use, and the book `key -> (owner, actor)`.
///
/// A key stays in the book until its actor has stopped (its release settled), so a new start of
/// the same key waits for the old one instead of racing it; a key owned by one feature is
/// refused to another ([`EngineError::Owned`]). Every store call of the engine runs through one
/// bounded primitive (a tokio task abandoned at the request timeout).
///
/// # Lifecycle
/// ## Running
/// Starts and stops lease actors on request; requests through the main store, renewals through
/// the [`RenewBatcher`] (which may use a store of its own).
/// ## After [`ShutdownAll`]
/// Every tenure has ended (tokens cancelled), every actor has stopped, and exactly the tenures
/// the engine held were released; starts are refused.
///
/// # Examples
/// Inside an actix application's own `System`:
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use actix::Actor;
/// use leasehold_engine::{LeaseEngine, Listener, Owner, Registry, RenewBatcher, ShutdownAll, StartTask, StopTask};
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
///     let start = StartTask::new(key.clone(), LeaseConfig::default(), listener);
///     let (belief, started) = engine.send(start).await??;
///     assert!(started);
///     belief.settled().await.expect("held");
///     assert!(registry.has_lease(&key));
///     assert!(engine.send(StopTask { key: key.clone(), owner: Owner::Task }).await?);
///     assert!(!registry.has_lease(&key) && !belief.holds());
///     assert_eq!(engine.send(ShutdownAll).await??, 0);
///     Ok::<(), Box<dyn std::error::Error>>(())
/// })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct LeaseEngine {
    pub(crate) holder: HolderId,
    pub(crate) store: Arc<dyn LeaseStore>,
    /// The SQL store under `store`, when the service has one: fencing and the doorbell
    /// go to it directly (see [`LeaseEngine::with_sql_store`]).
    pub(crate) sql: Option<leasehold_storage::SeaOrmStore>,
    renewer: Arc<Addr<RenewBatcher>>,
    /// Grants of actors asked together go out as one statement (started with the engine).
    granter: Option<Arc<Addr<crate::GrantBatcher>>>,
    releaser: Option<Arc<Addr<crate::ReleaseBatcher>>>,
    /// How the renewer's renewals are doing: grants wait while they are behind.
    renew_pressure: Option<Arc<crate::RenewPressure>>,
    batch_grants: bool,
    registry: Arc<Registry>,
    pub(crate) book: HashMap<LeaseKey, Entry>,
    /// Every namespace a tenure of this engine was started in (tasks, locks, permits, holds):
    /// what retention purges by default ([`UsedNamespaces`]). Kept for the engine's life:
    /// applications use few namespaces, and a namespace once used may keep released rows.
    namespaces: std::collections::BTreeSet<leasehold_core::Namespace>,
    started: u64,
    pub(crate) limit: Duration,
    /// The parent of every tenure's cancellation token.
    pub(crate) service: CancellationToken,
    pub(crate) bell: Option<Arc<dyn Doorbell>>,
    shut_down: bool,
    reclaim_own: bool,
    bug: Option<KnownBug>,
    /// This engine's address, shared by every actor (an `Addr` clone allocates a sender).
    me: Option<Arc<Recipient<ActorStopped>>>,
    /// One timer for every actor's wake-ups (started with the first actor).
    alarms: Option<Arc<crate::alarms::Alarms>>,
}

impl std::fmt::Debug for LeaseEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseEngine")
            .field("holder", &self.holder)
            .field("book", &self.book.len())
            .finish_non_exhaustive()
    }
}

/// At shutdown, the released keys are rung one by one up to this many (beyond, waiters poll).
const RING_AT_SHUTDOWN: usize = 1_000;

/// The doorbell of a service on the SQL store `sql` (see [`leasehold_storage::doorbell`]).
fn doorbell_of(
    sql: Option<&leasehold_storage::SeaOrmStore>,
    limit: Duration,
) -> Option<Arc<dyn Doorbell>> {
    leasehold_storage::doorbell::for_store(sql?, limit)
}

/// The bound of the engine's own store calls when none is configured.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

impl LeaseEngine {
    /// An engine for `holder`: requests go to `store`, renewals through `renewer`, deadlines to
    /// `registry`. Its own store calls (reads, listings, shutdown's release) are bounded by
    /// [`DEFAULT_REQUEST_TIMEOUT`] unless [`LeaseEngine::with_request_timeout`] says otherwise.
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
            sql: None,
            renewer: Arc::new(renewer),
            granter: None,
            releaser: None,
            renew_pressure: None,
            batch_grants: true,
            registry,
            book: HashMap::new(),
            namespaces: std::collections::BTreeSet::new(),
            started: 0,
            limit: DEFAULT_REQUEST_TIMEOUT,
            service: CancellationToken::new(),
            bell: None,
            shut_down: false,
            reclaim_own: false,
            bug: None,
            me: None,
            alarms: None,
        }
    }

    /// Grants wait while the renewals `pressure` measures are behind (give it the renewer's
    /// [`RenewBatcher::pressure`]): held tenures come before new ones.
    #[must_use]
    pub fn with_renew_pressure(mut self, pressure: Arc<crate::RenewPressure>) -> Self {
        self.renew_pressure = Some(pressure);
        self
    }

    /// Bounds the engine's own store calls by `limit`.
    #[must_use]
    pub fn with_request_timeout(mut self, limit: Duration) -> Self {
        self.limit = limit;
        self.bell = doorbell_of(self.sql.as_ref(), limit);
        self
    }

    /// The SQL store under the engine's store (the same database and table; the lease store may
    /// be a wrapper around it): `begin_fenced` opens its transactions there, and
    /// its doorbell rings and is watched (see [`leasehold_storage::doorbell`]). Without one,
    /// fencing answers an error and waiters poll.
    #[must_use]
    pub fn with_sql_store(mut self, sql: Option<leasehold_storage::SeaOrmStore>) -> Self {
        self.sql = sql;
        self.bell = doorbell_of(self.sql.as_ref(), self.limit);
        self
    }

    /// Take over this holder's own unexpired rows (left by a dead predecessor with the same
    /// holder id) as new tenures instead of waiting for them to lapse. Only safe when no other
    /// live process uses the holder id; see `LeaseServiceBuilder::reclaim_own_leases`.
    #[must_use]
    pub fn reclaim_own_leases(mut self, reclaim: bool) -> Self {
        self.reclaim_own = reclaim;
        self
    }

    /// Puts a known bug back (tests of the simulation's oracle only).
    #[doc(hidden)]
    #[must_use]
    pub fn reintroduce_bug(mut self, bug: Option<KnownBug>) -> Self {
        self.bug = bug;
        self
    }

    /// Whether grants and releases asked for together go out as one statement (default
    /// `true`; see [`GrantBatcher`](crate::GrantBatcher), [`ReleaseBatcher`](crate::ReleaseBatcher)).
    /// `false`: one `begin_tenure` or `release` each.
    #[must_use]
    pub fn batch_grants(mut self, batch: bool) -> Self {
        self.batch_grants = batch;
        self
    }

    /// Every tenure's cancellation token is a child of `service`: cancelling it ends them all.
    #[must_use]
    pub fn with_service_token(mut self, service: CancellationToken) -> Self {
        self.service = service;
        self
    }

    /// A jitter seed that differs between holders, leases and restarts.
    fn seed(&mut self, key: &LeaseKey) -> u64 {
        self.started += 1;
        std::collections::hash_map::RandomState::new().hash_one((&self.holder, key, self.started))
    }

    /// Starts an idle actor for `key` owned by `owner` and enters it in the book. The caller
    /// has checked that the key is free.
    pub(crate) fn spawn_actor(
        &mut self,
        new: NewActor,
        ctx: &mut Context<Self>,
        setup: impl FnOnce(&mut LeaseActor),
    ) -> Result<(Addr<LeaseActor>, Arc<Belief>), EngineError> {
        let NewActor {
            key,
            owner,
            config,
            listener,
            belief,
        } = new;
        if self.shut_down {
            return Err(EngineError::ShuttingDown);
        }
        let seed = self.seed(&key);
        let id = self.started;
        let belief = belief.unwrap_or_else(|| {
            Belief::new(self.service.clone(), Arc::clone(self.registry.clock()))
        });
        let pressure = self.renew_pressure.clone();
        let alarms = Arc::clone(
            self.alarms
                .get_or_insert_with(|| crate::alarms::Alarms::start(pressure)),
        );
        let mut actor = LeaseActor::new(
            key.clone(),
            self.holder.clone(),
            &config,
            seed,
            Arc::clone(&self.store),
            Arc::clone(&self.registry),
            listener,
        )?
        .with_shared_renewer(Arc::clone(&self.renewer))
        .with_belief(Arc::clone(&belief))
        .with_bell(self.bell.clone())
        .with_alarms(Some(Arc::clone(&alarms)))
        .on_exit((self.me(ctx), id));
        if self.batch_grants {
            let (store, limit) = (Arc::clone(&self.store), self.limit);
            let pressure = self.renew_pressure.clone();
            let granter = self.granter.get_or_insert_with(|| {
                Arc::new(
                    crate::GrantBatcher::new(store, limit)
                        .with_renew_pressure(pressure)
                        .start(),
                )
            });
            actor = actor.with_granter(Arc::clone(granter));
            let store = Arc::clone(&self.store);
            let releaser = self
                .releaser
                .get_or_insert_with(|| Arc::new(crate::ReleaseBatcher::new(store, limit).start()));
            actor = actor.with_releaser(Arc::clone(releaser));
        }
        actor.reclaim_own(self.reclaim_own);
        actor.cancel_late(self.bug == Some(KnownBug::CancelAfterReleaseAnswer));
        setup(&mut actor);
        // The address the book keeps is the one the alarms slot keeps: made before the actor
        // runs, so the slot is known before its first wake-up.
        let context = Context::new();
        let kept = Arc::new(context.address());
        actor.set_alarm_slot(alarms.register(Arc::clone(&kept)));
        let addr = context.run(actor);
        crate::trace::actor_started(&key, &self.holder, id);
        if !self.namespaces.contains(&key.namespace) {
            self.namespaces.insert(key.namespace.clone());
        }
        self.book.insert(
            key,
            Entry {
                owner,
                addr: kept,
                belief: Arc::clone(&belief),
                id,
                stopping: false,
                waiters: Vec::new(),
            },
        );
        Ok((addr, belief))
    }

    fn me(&mut self, ctx: &Context<Self>) -> Arc<Recipient<ActorStopped>> {
        Arc::clone(
            self.me
                .get_or_insert_with(|| Arc::new(ctx.address().recipient())),
        )
    }

    /// What the book says about `key` for a new start by `owner`: `Ok(None)` when free,
    /// `Ok(Some(entry))` when `owner` itself runs it, `Err` when another owner does. A stopping
    /// entry answers its stop signal in `Wait`.
    /// The actor of the running (not stopping) task of `key` run by `owner`, if any.
    pub(crate) fn running(&self, key: &LeaseKey, owner: &Owner) -> Option<Addr<LeaseActor>> {
        self.book
            .get(key)
            .filter(|e| e.owner == *owner && !e.stopping)
            .map(|e| Addr::clone(&e.addr))
    }

    pub(crate) fn lookup(&mut self, key: &LeaseKey, owner: &Owner) -> Lookup {
        match self.book.get_mut(key) {
            None => Lookup::Free,
            Some(e) if e.stopping => Lookup::Wait(e.on_stop()),
            Some(e) if &e.owner == owner => Lookup::Mine(Arc::clone(&e.belief)),
            Some(e) => Lookup::Other(e.owner.clone()),
        }
    }

    /// Marks `key` as stopping and sends the stop; answers the stop signal. `None` when the key
    /// is not owned by `owner`.
    pub(crate) fn stop_entry(
        &mut self,
        key: &LeaseKey,
        owner: &Owner,
    ) -> Option<oneshot::Receiver<()>> {
        let entry = self.book.get_mut(key).filter(|e| &e.owner == owner)?;
        if !entry.stopping {
            entry.stopping = true;
            entry.addr.do_send(StopLease { done: None });
        }
        Some(entry.on_stop())
    }

    /// The store requests go to.
    pub(crate) fn store(&self) -> Arc<dyn LeaseStore> {
        Arc::clone(&self.store)
    }
}

impl Entry {
    /// A receiver told when this entry's actor has stopped.
    fn on_stop(&mut self) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        self.waiters.retain(|w| !w.is_closed());
        self.waiters.push(tx);
        rx
    }
}

/// What a new actor of the book is made of.
pub(crate) struct NewActor {
    pub(crate) key: LeaseKey,
    pub(crate) owner: Owner,
    pub(crate) config: LeaseConfig,
    pub(crate) listener: Listener,
    pub(crate) belief: Option<Arc<Belief>>,
}

/// The book's answer for a start.
pub(crate) enum Lookup {
    Free,
    Mine(Arc<Belief>),
    Other(Owner),
    /// The key's actor is stopping: wait for this, then look again.
    Wait(oneshot::Receiver<()>),
}

/// Waits until the actor of a stop signal has stopped (its entry left the book).
pub(crate) async fn stopped(rx: oneshot::Receiver<()>) {
    let _ = rx.await;
}

impl Actor for LeaseEngine {
    type Context = Context<Self>;

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        // The system is going away: every tenure ends now.
        self.me = None;
        self.alarms = None;
        self.service.cancel();
        if let Some(bell) = &self.bell {
            bell.stop();
        }
    }
}

impl Handler<ActorStopped> for LeaseEngine {
    type Result = ();
    fn handle(&mut self, msg: ActorStopped, _ctx: &mut Context<Self>) {
        crate::trace::actor_stopped(&msg.key, &self.holder, msg.id);
        if self.book.get(&msg.key).is_some_and(|e| e.id == msg.id) {
            self.book.remove(&msg.key);
        }
    }
}

impl Handler<StartTask> for LeaseEngine {
    type Result = ResponseFuture<Result<(Arc<Belief>, bool), EngineError>>;

    fn handle(&mut self, msg: StartTask, ctx: &mut Context<Self>) -> Self::Result {
        match self.lookup(&msg.key, &msg.owner) {
            Lookup::Mine(belief) => Box::pin(async move { Ok((belief, false)) }),
            Lookup::Other(owner) => {
                let key = msg.key;
                Box::pin(async move { Err(EngineError::Owned { key, owner }) })
            }
            Lookup::Wait(rx) => {
                let engine = ctx.address();
                Box::pin(async move {
                    stopped(rx).await;
                    engine
                        .send(msg)
                        .await
                        .map_err(|_| EngineError::ShuttingDown)?
                })
            }
            Lookup::Free => {
                let (compete, value) = (msg.compete, msg.value);
                let new = NewActor {
                    key: msg.key,
                    owner: msg.owner,
                    config: msg.config,
                    listener: msg.listener,
                    belief: msg.belief,
                };
                let started = self.spawn_actor(new, ctx, |a| a.set_grant_value(value));
                Box::pin(async move {
                    let (addr, belief) = started?;
                    if compete {
                        addr.do_send(StartLease);
                    } else {
                        addr.do_send(StandByLease);
                    }
                    Ok((belief, true))
                })
            }
        }
    }
}

impl Handler<StartTasks> for LeaseEngine {
    type Result = ResponseFuture<Result<Vec<(Arc<Belief>, bool)>, EngineError>>;

    fn handle(&mut self, msg: StartTasks, ctx: &mut Context<Self>) -> Self::Result {
        if let Some(err) = msg.0.iter().find_map(|start| {
            match self.book.get(&start.key) {
                // A stopping entry is waited for, as by a single start.
                Some(e) if !e.stopping && e.owner != start.owner => Some(EngineError::Owned {
                    key: start.key.clone(),
                    owner: e.owner.clone(),
                }),
                _ => None,
            }
        }) {
            return Box::pin(async move { Err(err) });
        }
        let started: Vec<_> = msg
            .0
            .into_iter()
            .map(|start| <Self as Handler<StartTask>>::handle(self, start, ctx))
            .collect();
        Box::pin(async move { join_all(started).await.into_iter().collect() })
    }
}

impl Handler<StopTask> for LeaseEngine {
    type Result = ResponseFuture<bool>;

    fn handle(&mut self, msg: StopTask, _ctx: &mut Context<Self>) -> Self::Result {
        match self.stop_entry(&msg.key, &msg.owner) {
            None => Box::pin(async { false }),
            Some(rx) => Box::pin(async move {
                stopped(rx).await;
                true
            }),
        }
    }
}

impl Handler<ShutdownAll> for LeaseEngine {
    type Result = ResponseFuture<Result<u64, StoreError>>;

    fn handle(&mut self, _: ShutdownAll, _ctx: &mut Context<Self>) -> Self::Result {
        if self.bug == Some(KnownBug::ShutdownReleasesByHolder) {
            // The old way: abandon the tasks, leave the locks' guards believing, and release
            // every row of the holder id.
            self.shut_down = true;
            self.registry.clear();
            let actors: Vec<_> = self
                .book
                .values()
                .filter(|e| !matches!(e.owner, Owner::Lock | Owner::Hold))
                .map(|e| Addr::clone(&e.addr))
                .collect();
            let (store, holder) = (Arc::clone(&self.store), self.holder.clone());
            return Box::pin(async move {
                join_all(actors.iter().map(|a| a.send(AbandonLease))).await;
                let released = store.release_all(&holder).await;
                // The guards lived on (until their own deadline timers, in the old code).
                tokio::time::sleep(std::time::Duration::from_millis(300)).await;
                released
            });
        }
        self.shut_down = true;
        self.service.cancel();
        self.registry.clear();
        for entry in self.book.values() {
            entry.belief.finish();
        }
        let bell = self.bell.clone();
        let actors: Vec<_> = self.book.values().map(|e| Addr::clone(&e.addr)).collect();
        let settled: Vec<_> = self.book.values_mut().map(Entry::on_stop).collect();
        let (store, holder, limit) = (Arc::clone(&self.store), self.holder.clone(), self.limit);
        Box::pin(async move {
            let held: Vec<_> = join_all(actors.iter().map(|a| a.send(AbandonLease)))
                .await
                .into_iter()
                .filter_map(|r| r.ok().flatten())
                .collect();
            // Acquires in flight settle (a late grant is released) within one request timeout.
            let settling = tokio::time::timeout(limit, join_all(settled.into_iter().map(stopped)));
            if held.is_empty() {
                let _ = settling.await;
                if let Some(bell) = bell {
                    bell.stop();
                }
                return Ok(0);
            }
            tracing::trace!("release_many of {} tenures of {holder}", held.len());
            // One statement per few thousand rows: the bound grows with the batch.
            let chunks = u32::try_from(held.len() / 1000).unwrap_or(u32::MAX);
            let limit = limit.saturating_mul(chunks.saturating_add(1));
            let items = held.clone();
            let n = detached("release_many", limit, async move {
                store.release_many(&holder, &items).await
            })
            .await;
            // Rung after the release committed: one ring per key for a few keys (on MySQL,
            // stopping lets every named lock go at once anyway).
            // Awaited (bounded): the engine's runtime ends right after shutdown.
            if let Some(bell) = bell {
                if n.is_ok() && held.len() <= RING_AT_SHUTDOWN {
                    let rings = join_all(held.iter().map(|item| bell.ring_now(&item.key)));
                    let _ = tokio::time::timeout(limit, rings).await;
                }
                bell.stop();
            }
            let _ = settling.await;
            let n = n?;
            tracing::info!(
                event = "shut_down",
                released = n,
                "shut down, released {n} leases"
            );
            Ok(n)
        })
    }
}

impl Handler<ReadRecord> for LeaseEngine {
    type Result = ResponseFuture<Result<Option<LeaseRecord>, StoreError>>;

    fn handle(&mut self, msg: ReadRecord, _ctx: &mut Context<Self>) -> Self::Result {
        let store = self.store();
        Box::pin(detached("get", self.limit, async move {
            store.get(&msg.key).await
        }))
    }
}

impl Handler<ReadDbNow> for LeaseEngine {
    type Result = ResponseFuture<Result<DbInstant, StoreError>>;

    fn handle(&mut self, _: ReadDbNow, _ctx: &mut Context<Self>) -> Self::Result {
        let store = self.store();
        Box::pin(detached("db_now", self.limit, async move {
            store.db_now().await
        }))
    }
}

impl Handler<PurgeRows> for LeaseEngine {
    type Result = ResponseFuture<Result<u64, StoreError>>;

    fn handle(&mut self, msg: PurgeRows, _ctx: &mut Context<Self>) -> Self::Result {
        let store = self.store();
        Box::pin(detached("purge", msg.limit, async move {
            store.purge(msg.namespace.as_ref(), msg.older_than).await
        }))
    }
}

impl Handler<UsedNamespaces> for LeaseEngine {
    type Result = Vec<leasehold_core::Namespace>;

    fn handle(&mut self, _: UsedNamespaces, _ctx: &mut Context<Self>) -> Self::Result {
        self.namespaces.iter().cloned().collect()
    }
}

impl Handler<ListTasks> for LeaseEngine {
    type Result = Vec<LeaseKey>;

    fn handle(&mut self, msg: ListTasks, _ctx: &mut Context<Self>) -> Vec<LeaseKey> {
        self.book
            .iter()
            .filter(|(_, e)| e.owner == msg.owner && !e.stopping)
            .map(|(k, _)| k.clone())
            .collect()
    }
}

impl Handler<FindTask> for LeaseEngine {
    type Result = Option<Arc<Belief>>;

    fn handle(&mut self, msg: FindTask, _ctx: &mut Context<Self>) -> Self::Result {
        self.book
            .get(&msg.key)
            .filter(|e| e.owner == msg.owner && !e.stopping)
            .map(|e| Arc::clone(&e.belief))
    }
}

impl Handler<YieldTask> for LeaseEngine {
    type Result = ResponseFuture<Option<Option<leasehold_core::FencingToken>>>;

    fn handle(&mut self, msg: YieldTask, _ctx: &mut Context<Self>) -> Self::Result {
        let addr = self
            .book
            .get(&msg.key)
            .filter(|e| e.owner == msg.owner && !e.stopping)
            .map(|e| Addr::clone(&e.addr));
        Box::pin(async move {
            let addr = addr?;
            Some(addr.send(YieldLease).await.ok().flatten())
        })
    }
}
