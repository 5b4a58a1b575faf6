//! The engine: the actor that owns every [`LeaseActor`] of one holder, and the only book of
//! running tenures.
//!
//! - `mod.rs`: the [`LeaseEngine`], how it is built and how it starts an actor.
//! - `book.rs`: the book `key -> (owner, actor, belief)` and the stop of an actor.
//! - `tasks.rs`: lease tasks (start, stop, list, find, yield).
//! - `locks.rs`: locks, holds, multi-locks, fencing.
//! - `shard.rs`: the engine's side of sharded tasks.
//! - `shutdown.rs`: ending every tenure and releasing exactly those held.
//! - `reads.rs`: store reads, purges and observers on the engine's runtime.
//! - `value.rs`: changing a running task's value.

mod book;
mod locks;
mod reads;
mod shard;
mod shutdown;
mod tasks;
mod value;

pub(crate) use book::{Entry, First, Lookup, NewActor, stopped};
pub use locks::TakenLock;

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use leasehold_core::{HolderId, LeaseKey};
use leasehold_storage::{AdminStore, Doorbell, LeaseStore};
use tokio_util::sync::CancellationToken;

use crate::actor::{GrantRoute, LeaseActor, ReleaseRoute, RenewRoute};
use crate::belief::Belief;
use crate::group_commit::{GrantGroup, ReleaseGroup};
use crate::protocol::*;
use crate::registry::Registry;
use crate::renew_group::{RenewGroup, RenewPressure};

/// A known bug that a test can put back, to show that the service simulation's oracle catches
/// it. Compiled only with the cargo feature `known-bugs` (tests of the oracle): a normal build
/// carries neither the bugs nor a branch that asks for them.
#[cfg(feature = "known-bugs")]
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
/// the [`RenewGroup`] (which may use a store of its own).
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
/// use leasehold_engine::{LeaseEngine, Listener, Owner, Registry, RenewGroup, ShutdownAll, StartTask, StopTask};
/// use leasehold_core::{HolderId, LeaseConfig, LeaseKey, MonotonicClock, Notification};
/// use leasehold_storage::{LeaseStore, MemoryStore};
///
/// actix::System::new().block_on(async {
///     let store: Arc<dyn LeaseStore> = Arc::new(MemoryStore::new());
///     let registry = Arc::new(Registry::new(Arc::new(MonotonicClock)));
///     let renewer = RenewGroup::new(Arc::clone(&store), Duration::from_millis(10)).start();
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
    /// The operator's calls on the same store, when the engine was given them
    /// ([`LeaseEngine::with_admin_store`]): retention's purge (`PurgeRows`).
    pub(crate) admin: Option<Arc<dyn AdminStore>>,
    /// The SQL store under `store`, when the service has one: fencing and the doorbell
    /// go to it directly (see [`LeaseEngine::with_sql_store`]).
    pub(crate) sql: Option<leasehold_storage::SeaOrmStore>,
    /// Where its actors' renewals go: the [`RenewGroup`] it was given.
    renew_route: Arc<RenewRoute>,
    /// Where its actors' grants go (made with the first actor): the group commit, or one
    /// statement each when grants are not batched or own rows are reclaimed.
    grant_route: Option<Arc<GrantRoute>>,
    /// Where its actors' releases go (made with the first actor): the group commit, or one
    /// statement each when grants are not batched.
    release_route: Option<Arc<ReleaseRoute>>,
    /// How the renewer's renewals are doing: grants wait while they are behind.
    renew_pressure: Option<Arc<RenewPressure>>,
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
    pub(crate) doorbell: Option<Arc<dyn Doorbell>>,
    shut_down: bool,
    reclaim_own: bool,
    #[cfg(feature = "known-bugs")]
    bug: Option<KnownBug>,
    /// This engine's address, shared by every actor (an `Addr` clone allocates a sender).
    me: Option<Arc<Recipient<ActorStopped>>>,
    /// One timer for every actor's alarms (started with the first actor).
    alarms: Option<Arc<crate::alarms::Alarms<LeaseActor>>>,
}

impl std::fmt::Debug for LeaseEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseEngine")
            .field("holder", &self.holder)
            .field("book", &self.book.len())
            .finish_non_exhaustive()
    }
}

/// The doorbell of a service on the SQL store `sql` (see [`leasehold_storage::doorbell`]).
fn doorbell_of(
    sql: Option<&leasehold_storage::SeaOrmStore>,
    limit: Duration,
) -> Option<Arc<dyn Doorbell>> {
    leasehold_storage::doorbell::for_store(sql?, limit)
}

/// The bound of the engine's own store calls when none is configured.
pub(crate) const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

impl LeaseEngine {
    /// An engine for `holder`: requests go to `store`, renewals through `renewer`, deadlines to
    /// `registry`. Its own store calls (reads, listings, shutdown's release) are bounded by
    /// 10 s unless [`LeaseEngine::with_request_timeout`] says otherwise.
    #[must_use]
    pub fn new(
        holder: HolderId,
        store: Arc<dyn LeaseStore>,
        renewer: Addr<RenewGroup>,
        registry: Arc<Registry>,
    ) -> Self {
        Self {
            holder,
            store,
            admin: None,
            sql: None,
            renew_route: Arc::new(RenewRoute::Group(Arc::new(renewer))),
            grant_route: None,
            release_route: None,
            renew_pressure: None,
            batch_grants: true,
            registry,
            book: HashMap::new(),
            namespaces: std::collections::BTreeSet::new(),
            started: 0,
            limit: DEFAULT_REQUEST_TIMEOUT,
            service: CancellationToken::new(),
            doorbell: None,
            shut_down: false,
            reclaim_own: false,
            #[cfg(feature = "known-bugs")]
            bug: None,
            me: None,
            alarms: None,
        }
    }

    /// Grants wait while the renewals `pressure` measures are behind (give it the renewer's
    /// [`RenewGroup::pressure`]): held tenures come before new ones.
    #[must_use]
    pub fn with_renew_pressure(mut self, pressure: Arc<RenewPressure>) -> Self {
        self.renew_pressure = Some(pressure);
        self
    }

    /// Bounds the engine's own store calls by `limit`.
    #[must_use]
    pub fn with_request_timeout(mut self, limit: Duration) -> Self {
        self.limit = limit;
        self.doorbell = doorbell_of(self.sql.as_ref(), limit);
        self.registry.set_doorbell(self.doorbell.clone());
        self
    }

    /// The SQL store under the engine's store (the same database and table; the lease store may
    /// be a wrapper around it): `begin_fenced` opens its transactions there, and
    /// its doorbell rings and is watched (see [`leasehold_storage::doorbell`]). Without one,
    /// fencing answers an error and waiters poll.
    #[must_use]
    pub fn with_sql_store(mut self, sql: Option<leasehold_storage::SeaOrmStore>) -> Self {
        self.sql = sql;
        self.doorbell = doorbell_of(self.sql.as_ref(), self.limit);
        self.registry.set_doorbell(self.doorbell.clone());
        self
    }

    /// The operator's calls on the engine's store (the same rows as its [`LeaseStore`], usually
    /// the same store: an `Arc<dyn leasehold_storage::Store>` coerces to both): [`PurgeRows`]
    /// purges through it. The engine's tenures never reach it; without one, `PurgeRows`
    /// answers an error.
    #[must_use]
    pub fn with_admin_store(mut self, admin: Arc<dyn AdminStore>) -> Self {
        self.admin = Some(admin);
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

    /// Puts a known bug back (tests of the simulation's oracle only: the cargo feature
    /// `known-bugs`).
    #[cfg(feature = "known-bugs")]
    #[doc(hidden)]
    #[must_use]
    pub fn reintroduce_bug(mut self, bug: Option<KnownBug>) -> Self {
        self.bug = bug;
        self
    }

    /// Whether grants and releases asked for together go out as one statement (default
    /// `true`: group commit of grants and releases).
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

    /// Starts an actor for `key` owned by `owner`, sends it its first message (`new.first`)
    /// and enters it in the book. The caller has checked that the key is free. Every actor of
    /// the engine starts this way.
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
            first,
            dispatch,
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
        .with_belief(Arc::clone(&belief))
        .with_doorbell(self.doorbell.clone())
        .with_alarms(Some(Arc::clone(&alarms)))
        .on_exit((self.me(ctx), id));
        let (store, limit) = (Arc::clone(&self.store), self.limit);
        let (batch, reclaim) = (self.batch_grants, self.reclaim_own);
        let pressure = self.renew_pressure.clone();
        let route = self.grant_route.get_or_insert_with(|| {
            Arc::new(if reclaim {
                // Reclaiming actors grant alone: a take-over is one statement of its own.
                GrantRoute::Direct { reclaim: true }
            } else if batch {
                GrantRoute::Group(Arc::new(
                    GrantGroup::new(store, limit)
                        .with_renew_pressure(pressure)
                        .start(),
                ))
            } else {
                GrantRoute::Direct { reclaim: false }
            })
        });
        actor.route_grants(Arc::clone(route));
        actor.route_renewals(Arc::clone(&self.renew_route));
        let store = Arc::clone(&self.store);
        let release = self.release_route.get_or_insert_with(|| {
            if batch {
                Arc::new(ReleaseRoute::Group(Arc::new(
                    ReleaseGroup::new(store, limit).start(),
                )))
            } else {
                ReleaseRoute::direct()
            }
        });
        actor.route_releases(Arc::clone(release));
        #[cfg(feature = "known-bugs")]
        actor.cancel_late(self.bug == Some(KnownBug::CancelAfterReleaseAnswer));
        actor.set_span(crate::trace::lease_span(&dispatch, &key, &self.holder));
        setup(&mut actor);
        // The address the book keeps is the one the alarms slot keeps: made before the actor
        // runs, so the slot is known before its first alarm.
        let context = Context::new();
        let kept = Arc::new(context.address());
        actor.set_alarm_slot(alarms.register(Arc::clone(&kept)));
        let addr = context.run(actor);
        match first {
            First::Compete => addr.do_send(StartLease),
            First::StandBy => addr.do_send(StandByLease),
            First::TryOnce => addr.do_send(TryLock),
        }
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
}

impl Actor for LeaseEngine {
    type Context = Context<Self>;

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        // The system is going away: every tenure ends now.
        self.me = None;
        self.alarms = None;
        self.service.cancel();
        if let Some(doorbell) = &self.doorbell {
            doorbell.stop();
        }
    }
}
