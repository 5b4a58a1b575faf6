//! One actor per lease: it runs the lease machine's commands.

use std::sync::Arc;

use actix::prelude::*;
use leasehold_core::{
    Command, Event, FencingToken, HolderId, LeaseConfig, LeaseKey, LeaseMachine, Notification,
    State, StoreFailure, ValidationError,
};
use leasehold_storage::{LeaseStore, RenewItem, StoreError};
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::Registry;
use crate::batcher::{QueueRenew, RenewBatcher};

/// Told about every [`Notification`] of a lease, on the actor's thread. Keep it short and
/// non-blocking: hand work over to a task or a channel.
pub type Listener = Arc<dyn Fn(&LeaseKey, &Notification) + Send + Sync>;

/// The actor that holds one lease: it feeds events to a [`LeaseMachine`] and executes the
/// commands that come out. It decides nothing itself.
///
/// - Store requests run as futures spawned on the actor; their results come back as events.
///   Renewals go through the [`RenewBatcher`] when one is given, else straight to the store.
/// - One timer at a time: each [`Command::WakeAt`] cancels the pending wake-up and schedules a
///   new one (`ctx.run_later`).
/// - [`Command::SetDeadline`] goes to the [`Registry`], [`Command::Notify`] to the [`Listener`]
///   (and the log: grants and releases at info, losses and store errors at warn, statements at
///   trace).
///
/// Actix applications drive it with messages: [`StartLease`], [`ReleaseLease`], [`StopLease`],
/// [`AbandonLease`] and [`QueryLease`].
///
/// # Lifecycle
/// ## Started
/// Idle: nothing is sent until [`StartLease`].
/// ## Competing and holding
/// After [`StartLease`]: acquires, renews, retries with jittered backoff, as the machine says.
/// [`ReleaseLease`] gives the lease up and keeps the actor alive (start again with
/// [`StartLease`]).
/// ## Stopping
/// After [`StopLease`]: the lease is released if held; the actor stops once the release has
/// settled (at the local deadline at the latest) and then answers every `StopLease` waiting.
/// [`AbandonLease`] stops at once without telling the store (the grant lapses there).
///
/// # Examples
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use actix::Actor;
/// use leasehold_actor::{LeaseActor, Listener, QueryLease, Registry, StartLease, StopLease};
/// use leasehold_core::{HolderId, LeaseConfig, LeaseKey, MonotonicClock, State};
/// use leasehold_storage::MemoryStore;
///
/// actix::System::new().block_on(async {
///     let registry = Arc::new(Registry::new(Arc::new(MonotonicClock)));
///     let key = LeaseKey::parse("", "leader")?;
///     let listener: Listener = Arc::new(|_, _| {});
///     let actor = LeaseActor::new(
///         key.clone(), HolderId::new("worker-1")?, &LeaseConfig::default(), 1,
///         Arc::new(MemoryStore::new()), Arc::clone(&registry), listener,
///     )?
///     .start();
///     actor.send(StartLease).await?;
///     while !registry.has_lease(&key) {
///         tokio::time::sleep(Duration::from_millis(5)).await;
///     }
///     let status = actor.send(QueryLease).await?;
///     assert_eq!(status.state, State::Held);
///     let (done, stopped) = tokio::sync::oneshot::channel();
///     actor.send(StopLease { done: Some(done) }).await?;
///     stopped.await?;
///     Ok::<(), Box<dyn std::error::Error>>(())
/// })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct LeaseActor {
    key: LeaseKey,
    holder: HolderId,
    machine: LeaseMachine,
    store: Arc<dyn LeaseStore>,
    renewer: Option<Arc<Addr<RenewBatcher>>>,
    registry: Arc<Registry>,
    listener: Listener,
    timer: Option<SpawnHandle>,
    on_stopped: Vec<oneshot::Sender<()>>,
}

impl std::fmt::Debug for LeaseActor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseActor")
            .field("key", &self.key)
            .field("holder", &self.holder)
            .field("state", &self.machine.state())
            .finish_non_exhaustive()
    }
}

impl LeaseActor {
    /// An actor for `key`, held as `holder`, with a machine for `config` whose jitter is seeded by
    /// `seed`. Store requests go to `store`; deadlines to `registry`; notifications to `listener`.
    ///
    /// # Errors
    /// The [`ValidationError`] of [`LeaseConfig::validate`].
    pub fn new(
        key: LeaseKey,
        holder: HolderId,
        config: &LeaseConfig,
        seed: u64,
        store: Arc<dyn LeaseStore>,
        registry: Arc<Registry>,
        listener: Listener,
    ) -> Result<Self, ValidationError> {
        Ok(Self {
            key,
            holder,
            machine: LeaseMachine::new(config, seed)?,
            store,
            renewer: None,
            registry,
            listener,
            timer: None,
            on_stopped: Vec::new(),
        })
    }

    /// Sends renewals through `renewer` instead of one statement each.
    #[must_use]
    pub fn with_renewer(self, renewer: Addr<RenewBatcher>) -> Self {
        self.with_shared_renewer(Arc::new(renewer))
    }

    /// Like [`LeaseActor::with_renewer`], sharing one address between many actors: cloning an
    /// `Addr` allocates a sender of its own (about 60 bytes), an `Arc` clone does not.
    #[must_use]
    pub fn with_shared_renewer(mut self, renewer: Arc<Addr<RenewBatcher>>) -> Self {
        self.renewer = Some(renewer);
        self
    }

    /// Feeds one event to the machine at the current instant and executes its commands.
    fn feed(&mut self, event: Event, ctx: &mut Context<Self>) {
        let now = self.registry.clock().now();
        for cmd in self.machine.handle(now, event) {
            self.execute(now, cmd, ctx);
        }
        if self.machine.is_finished() {
            ctx.stop();
        }
    }

    fn execute(&mut self, now: Instant, cmd: Command, ctx: &mut Context<Self>) {
        let limit = self.machine.config().request_timeout();
        let (key, holder, store) = (
            self.key.clone(),
            self.holder.clone(),
            Arc::clone(&self.store),
        );
        match cmd {
            Command::TryAcquire { req, term } => {
                log::trace!("{key}: begin_tenure {req} as {holder} for {term:?}");
                let fut = crate::detached::detached("try_acquire", limit, async move {
                    store.begin_tenure(&key, &holder, term).await
                });
                ctx.spawn(
                    actix::fut::wrap_future(fut).map(move |result, act: &mut Self, ctx| {
                        let result = act.failure("acquire", result);
                        act.feed(Event::AcquireResult { req, result }, ctx);
                    }),
                );
            }
            Command::Renew { req, token, term } => {
                log::trace!("{key}: renew {req} of token {token}");
                if let Some(renewer) = &self.renewer {
                    let (reply, answer) = oneshot::channel();
                    let item = RenewItem { key, token };
                    renewer.do_send(QueueRenew {
                        holder,
                        item,
                        term,
                        reply,
                    });
                    let fut = async move {
                        answer
                            .await
                            .unwrap_or_else(|_| Err(StoreFailure::new("the batch renewer stopped")))
                    };
                    ctx.spawn(actix::fut::wrap_future(fut).map(
                        move |result, act: &mut Self, ctx| {
                            act.feed(Event::RenewResult { req, result }, ctx);
                        },
                    ));
                } else {
                    let fut = crate::detached::detached("renew", limit, async move {
                        store.renew(&key, &holder, token, term).await
                    });
                    ctx.spawn(actix::fut::wrap_future(fut).map(
                        move |result, act: &mut Self, ctx| {
                            let result = act.failure("renew", result);
                            act.feed(Event::RenewResult { req, result }, ctx);
                        },
                    ));
                }
            }
            Command::Release { req, token } => {
                log::trace!("{key}: release {req} of token {token}");
                let fut = crate::detached::detached("release", limit, async move {
                    store.release(&key, &holder, token).await
                });
                ctx.spawn(
                    actix::fut::wrap_future(fut).map(move |result, act: &mut Self, ctx| {
                        let result = act.failure("release", result);
                        act.feed(Event::ReleaseResult { req, result }, ctx);
                    }),
                );
            }
            Command::WakeAt(at) => {
                if let Some(handle) = self.timer.take() {
                    ctx.cancel_future(handle);
                }
                let delay = at.saturating_duration_since(now);
                self.timer = Some(ctx.run_later(delay, |act, ctx| {
                    act.timer = None;
                    act.feed(Event::Timer, ctx);
                }));
            }
            Command::SetDeadline(deadline) => self.registry.set(&self.key, deadline),
            Command::Notify(n) => {
                self.log(&n);
                crate::metrics::notification(&n);
                (self.listener)(&self.key, &n);
            }
        }
    }

    /// Logs a store error and turns it into what the machine understands.
    fn failure<T>(
        &self,
        what: &'static str,
        result: Result<T, StoreError>,
    ) -> Result<T, StoreFailure> {
        result.map_err(|e| {
            log::warn!("{}: {what} failed: {e}", self.key);
            crate::metrics::store_error(what);
            StoreFailure::new(e.to_string())
        })
    }

    fn log(&self, n: &Notification) {
        let key = &self.key;
        match n {
            Notification::Acquired { token, .. } => {
                log::info!("{key}: acquired by {} (token {token})", self.holder);
            }
            Notification::Renewed { token, .. } => log::debug!("{key}: renewed (token {token})"),
            Notification::Lost { token, reason } => {
                log::warn!("{key}: lost by {} (token {token}): {reason:?}", self.holder);
            }
            Notification::Released { token } => log::info!("{key}: released (token {token})"),
            Notification::HolderChanged { holder, token } => match holder {
                Some(h) => log::info!("{key}: held by {h} (token {token})"),
                None => log::info!("{key}: taken over by {} (token {token})", self.holder),
            },
        }
    }
}

impl Actor for LeaseActor {
    type Context = Context<Self>;

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        for done in self.on_stopped.drain(..) {
            let _ = done.send(());
        }
    }
}

/// Start competing for the lease (or again, after [`ReleaseLease`]). Answers at once.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub struct StartLease;

/// Give the lease up (released if held) and stop competing until the next [`StartLease`].
/// Answers at once; the release settles in the background.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub struct ReleaseLease;

/// The ring assigns the lease elsewhere: release it if held and stop competing until
/// [`CompeteLease`] (a [`StartLease`] is ignored meanwhile). Answers at once.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub struct StandByLease;

/// The ring assigns the lease here again: compete after [`StandByLease`]. Answers at once.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub struct CompeteLease;

/// Give the lease up for good: released if held, then the actor stops. `done` (if any) is
/// signalled when the actor has stopped, after the release has settled.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct StopLease {
    /// Signalled once the actor has stopped.
    pub done: Option<oneshot::Sender<()>>,
}

/// Stop at once without telling the store: the registry forgets the lease now, and the grant
/// lapses at the database after its term (or is released by a
/// [`LeaseStore::release_all`] the caller sends).
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub struct AbandonLease;

/// Ask for the lease's current [`LeaseStatus`].
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "LeaseStatus")]
pub struct QueryLease;

/// What a [`LeaseActor`] reports about its lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, MessageResponse)]
pub struct LeaseStatus {
    /// The machine's state.
    pub state: State,
    /// Whether the lease is held now (before the local deadline).
    pub holds: bool,
    /// The live tenure's fencing token, if any.
    pub token: Option<FencingToken>,
    /// The live tenure's local deadline, if any.
    pub local_deadline: Option<Instant>,
}

impl Handler<StartLease> for LeaseActor {
    type Result = ();
    fn handle(&mut self, _: StartLease, ctx: &mut Context<Self>) {
        self.feed(Event::Start, ctx);
    }
}

impl Handler<ReleaseLease> for LeaseActor {
    type Result = ();
    fn handle(&mut self, _: ReleaseLease, ctx: &mut Context<Self>) {
        self.feed(Event::Release, ctx);
    }
}

impl Handler<StandByLease> for LeaseActor {
    type Result = ();
    fn handle(&mut self, _: StandByLease, ctx: &mut Context<Self>) {
        self.feed(Event::StandBy, ctx);
    }
}

impl Handler<CompeteLease> for LeaseActor {
    type Result = ();
    fn handle(&mut self, _: CompeteLease, ctx: &mut Context<Self>) {
        self.feed(Event::Compete, ctx);
    }
}

impl Handler<StopLease> for LeaseActor {
    type Result = ();
    fn handle(&mut self, msg: StopLease, ctx: &mut Context<Self>) {
        self.on_stopped.extend(msg.done);
        self.feed(Event::Stop, ctx);
    }
}

impl Handler<AbandonLease> for LeaseActor {
    type Result = ();
    fn handle(&mut self, _: AbandonLease, ctx: &mut Context<Self>) {
        if self.machine.local_deadline().is_some() {
            self.registry.set(&self.key, None);
        }
        ctx.stop();
    }
}

impl Handler<QueryLease> for LeaseActor {
    type Result = LeaseStatus;
    fn handle(&mut self, _: QueryLease, _ctx: &mut Context<Self>) -> LeaseStatus {
        let now = self.registry.clock().now();
        LeaseStatus {
            state: self.machine.state(),
            holds: self.machine.holds(now),
            token: self.machine.token(),
            local_deadline: self.machine.local_deadline(),
        }
    }
}
