//! One actor per lease: it runs the lease machine's commands.

use actix::prelude::*;
use leasehold_core::{
    AcquireOutcome, Command, Event, FencingToken, HolderId, LeaseConfig, LeaseKey, LeaseMachine,
    LossReason, Notification, ReleaseOutcome, RenewOutcome, State, StoreFailure, ValidationError,
};
use leasehold_storage::{Doorbell, LeaseStore, RenewItem, StoreError};
use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::batcher::{QueueRenew, RenewBatcher};
use crate::belief::Belief;
use crate::coalescer::{GrantBatcher, ReleaseBatcher};
use crate::protocol::{
    AbandonLease, ActorStopped, Attempt, CompeteLease, EndTenure, LeaseStatus, Listener,
    QueryLease, ReleaseLease, RenewAnswer, StandByLease, StartLease, StopLease, WakeLease,
    YieldLease,
};
use crate::registry::Registry;

/// Told once, when the actor has stopped: the engine (shared, so no sender is allocated per
/// actor) and the actor's id in its book.
pub(crate) type OnExit = (Arc<Recipient<ActorStopped>>, u64);

/// The actor that holds one lease: it feeds events to a [`LeaseMachine`] and executes the
/// commands that come out. It decides nothing itself.
///
/// - Store requests run as tokio tasks, each abandoned at the request timeout; their results
///   come back as events. Renewals go through the [`RenewBatcher`] when one is given.
/// - One timer at a time: each [`Command::WakeAt`] replaces the pending wake-up.
/// - [`Command::SetDeadline`] goes to the [`Registry`] and the [`Belief`] in the same step: a
///   tenure's cancellation token is cancelled when its deadline is cleared, before any release
///   is sent. [`Command::Notify`] goes to the [`Listener`] (and the log).
///
/// Actix applications drive it with messages: [`StartLease`], [`ReleaseLease`], [`StopLease`],
/// [`AbandonLease`] and [`QueryLease`]; locks add the messages of the engine's `lock` module ([`TakeLock`](crate::TakeLock),
/// [`RenewLockNow`](crate::RenewLockNow), [`UnlockLock`](crate::UnlockLock), …).
///
/// # Lifecycle
/// ## Started
/// Idle: nothing is sent until [`StartLease`] (or a lock's single attempt).
/// ## Competing and holding
/// After [`StartLease`]: acquires, renews, retries with jittered backoff, as the machine says.
/// [`ReleaseLease`] gives the lease up and keeps the actor alive (start again with
/// [`StartLease`]).
/// ## Stopping
/// After [`StopLease`]: the tenure ends at once, the lease is released if held, and the actor
/// stops once the release has settled (at the local deadline at the latest), then answers every
/// `StopLease` waiting. [`AbandonLease`] ends the tenure and stops at once without telling the
/// store. A lock's actor stops by itself once its tenure has ended and settled.
///
/// # Examples
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use actix::Actor;
/// use leasehold_engine::{Belief, LeaseActor, Listener, QueryLease, Registry, StartLease, StopLease};
/// use leasehold_core::{HolderId, LeaseConfig, LeaseKey, MonotonicClock, State};
/// use leasehold_storage::MemoryStore;
///
/// actix::System::new().block_on(async {
///     let registry = Arc::new(Registry::new(Arc::new(MonotonicClock)));
///     let key = LeaseKey::parse("", "leader")?;
///     let listener: Listener = Arc::new(|_, _| {});
///     let belief = Belief::new(Default::default(), Arc::new(MonotonicClock));
///     let actor = LeaseActor::new(
///         key.clone(), HolderId::new("worker-1")?, &LeaseConfig::default(), 1,
///         Arc::new(MemoryStore::new()), Arc::clone(&registry), listener,
///     )?
///     .with_belief(Arc::clone(&belief))
///     .start();
///     actor.send(StartLease).await?;
///     let (token, cancel) = belief.settled().await.expect("held");
///     assert!(registry.has_lease(&key) && !cancel.is_cancelled());
///     let status = actor.send(QueryLease).await?;
///     assert_eq!((status.state, status.token), (State::Held, Some(token)));
///     let (done, stopped) = tokio::sync::oneshot::channel();
///     actor.send(StopLease { done: Some(done) }).await?;
///     assert!(cancel.is_cancelled(), "ended before the release was even answered");
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
    granter: Option<Arc<Addr<GrantBatcher>>>,
    releaser: Option<Arc<Addr<ReleaseBatcher>>>,
    registry: Arc<Registry>,
    listener: Listener,
    belief: Arc<Belief>,
    /// The service's doorbell: told when a tenure begins and once it has ended, and watched
    /// while this task waits to apply again.
    bell: Option<Arc<dyn Doorbell>>,
    /// A tenure began and the doorbell has not been told that it ended yet.
    rung_due: bool,
    /// The engine's shared alarms (one timer for all its actors), this actor's slot in them
    /// once registered, and the sequence number of its live alarm (0: none).
    alarms: Option<Arc<crate::alarms::Alarms>>,
    alarm_slot: Option<u32>,
    alarm: u64,
    on_exit: Option<OnExit>,
    /// What locks, holds, multi-locks, valued or refused tasks, stops with a waiter and actors
    /// without the engine's alarms keep; made on first use (see [`Rare`]).
    rare: Option<Box<Rare>>,
    /// Stop once the tenure has ended and settled (a lock, or a hold being unlocked).
    single_use: bool,
    stop_when_resting: bool,
    /// Take over this holder's own live rows found at a grant (a dead predecessor's).
    reclaim_own: bool,
    /// The put-back bug `KnownBug::CancelAfterReleaseAnswer`: end a given-up tenure's belief
    /// only when its release has settled.
    cancel_late: bool,
    deferred_end: bool,
    /// The store's answer to the release of an unlock, given to the unlock when the actor stops.
    released: Option<ReleaseOutcome>,
}

/// The parts of a [`LeaseActor`] that a lease task held without a value never uses: one
/// allocation for the actors that need them instead of their room in every actor's task (the
/// actor lives inside its tokio task, whose size is rounded up to 128 bytes).
#[derive(Default)]
struct Rare {
    /// The subscription to the doorbell while waiting to apply after a refusal.
    watching: Option<SpawnHandle>,
    /// The pending wake-up of an actor without the engine's alarms.
    timer: Option<SpawnHandle>,
    /// Signalled once the actor has stopped.
    on_stopped: Vec<oneshot::Sender<()>>,
    /// Dropped when the actor stops (a lock's place in the local queue).
    keep: Option<Box<dyn Any + Send>>,
    /// The value every new tenure is granted with ([`leasehold_core::LeaseValue`]); changed by
    /// [`crate::SetTenureValue`] once the store has committed it.
    value: Option<leasehold_core::LeaseValue>,
    /// The answer to a lock's single attempt, once it is known.
    attempt: Option<oneshot::Sender<Attempt>>,
    /// The shared grant of a multi-lock this actor is part of (`joint.rs`).
    joint: Option<Arc<crate::joint::JointGrant>>,
    renewals: Vec<oneshot::Sender<RenewAnswer>>,
    unlock: Option<oneshot::Sender<Result<ReleaseOutcome, StoreFailure>>>,
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
        let belief = Belief::new(Default::default(), Arc::clone(registry.clock()));
        Ok(Self {
            key,
            holder,
            machine: LeaseMachine::new(config, seed)?,
            store,
            renewer: None,
            granter: None,
            releaser: None,
            registry,
            listener,
            belief,
            bell: None,
            rung_due: false,
            alarms: None,
            alarm_slot: None,
            alarm: 0,
            on_exit: None,
            rare: None,
            single_use: false,
            stop_when_resting: false,
            reclaim_own: false,
            cancel_late: false,
            deferred_end: false,
            released: None,
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

    /// Publishes the tenure to `belief` (shared with the handles given to the application).
    #[must_use]
    pub fn with_belief(mut self, belief: Arc<Belief>) -> Self {
        self.belief = belief;
        self
    }

    /// Sends new-tenure grants through `granter` (one statement for grants asked together)
    /// instead of one statement each. Reclaiming actors grant alone.
    #[must_use]
    pub fn with_granter(mut self, granter: Arc<Addr<GrantBatcher>>) -> Self {
        self.granter = Some(granter);
        self
    }

    /// Sends releases through `releaser` (one statement for releases asked together) instead
    /// of one statement each.
    #[must_use]
    pub fn with_releaser(mut self, releaser: Arc<Addr<ReleaseBatcher>>) -> Self {
        self.releaser = Some(releaser);
        self
    }

    /// Tells observers (through the doorbell) that the live tenure changed in a way they show.
    pub(crate) fn announce_change(&self) {
        if let Some(bell) = &self.bell {
            bell.changed(&self.key);
        }
    }

    pub(crate) fn with_bell(mut self, bell: Option<Arc<dyn Doorbell>>) -> Self {
        self.bell = bell;
        self
    }

    /// Wakes up through `alarms` (shared by the engine's actors) instead of a timer of its own.
    pub(crate) fn with_alarms(mut self, alarms: Option<Arc<crate::alarms::Alarms>>) -> Self {
        self.alarms = alarms;
        self
    }

    /// Wakes up through `slot` of its alarms, registered by the engine with the address it keeps.
    pub(crate) fn set_alarm_slot(&mut self, slot: u32) {
        self.alarm_slot = Some(slot);
    }

    pub(crate) fn on_exit(mut self, f: OnExit) -> Self {
        self.on_exit = Some(f);
        self
    }

    pub(crate) fn cancel_late(&mut self, on: bool) {
        self.cancel_late = on;
    }

    pub(crate) fn reclaim_own(&mut self, reclaim: bool) {
        self.reclaim_own = reclaim;
    }

    pub(crate) fn keep(&mut self, keep: Option<Box<dyn Any + Send>>) {
        if keep.is_some() || self.rare.is_some() {
            self.rare().keep = keep;
        }
    }

    /// The rarely used parts, made now if they were not.
    fn rare(&mut self) -> &mut Rare {
        self.rare.get_or_insert_with(Box::default)
    }

    /// Feeds one event to the machine at the current instant and executes its commands.
    pub(crate) fn feed(&mut self, event: Event, ctx: &mut Context<Self>) {
        match &event {
            Event::ReleaseResult { result, .. } => self.release_answered(result),
            Event::AcquireResult {
                result: Ok(outcome),
                ..
            } => self.doorbell_on_grant(outcome, ctx),
            Event::RenewResult {
                result: Ok(RenewOutcome::Lost),
                ..
            } => self.ring(),
            _ => {}
        }
        let now = self.registry.clock().now();
        let cmds = self.machine.handle(now, event);
        let mut lapsed = false;
        for i in 0..cmds.len() {
            if let (
                Command::SetDeadline(None),
                Some(Command::Notify(Notification::Ended { token })),
            ) = (&cmds[i], cmds.get(i + 1))
            {
                self.belief.give_up(*token);
                if self.cancel_late {
                    // KnownBug::CancelAfterReleaseAnswer: has_lease turns false, but the
                    // tenure's belief lives on until its release has settled.
                    self.deferred_end = true;
                    self.registry.set(&self.key, None);
                    continue;
                }
            }
            let mut began = None;
            if let Command::SetDeadline(Some(deadline)) = cmds[i] {
                match cmds.get(i + 1) {
                    // A new tenure is recorded in the registry first and begun in the belief
                    // after: whoever is given its token (`acquired`, `token`) finds `has_lease`
                    // true already. (At the end the order is the other way round: the token is
                    // cancelled first, `has_lease` turns false after.)
                    Some(Command::Notify(Notification::Acquired { token, .. })) => {
                        began = Some((*token, deadline));
                    }
                    // Someone saw this tenure past its deadline and cancelled its token before
                    // the renewal landed: it is over; end it, keep no deadline.
                    Some(Command::Notify(Notification::Renewed { token, .. }))
                        if !self.belief.renewed(*token, deadline) =>
                    {
                        lapsed = true;
                        continue;
                    }
                    _ => {}
                }
            }
            if lapsed && matches!(cmds[i], Command::Notify(Notification::Renewed { .. })) {
                continue;
            }
            self.execute(now, cmds[i].clone(), ctx);
            if let Some((token, deadline)) = began {
                self.belief.begin(token, deadline);
                self.belief.announce();
            }
        }
        if lapsed {
            self.feed(Event::EndTenure(LossReason::DeadlinePassed), ctx);
            return;
        }
        if self.stop_when_resting && matches!(self.machine.state(), State::Released) {
            self.stop_when_resting = false;
            self.feed(Event::Stop, ctx);
            return;
        }
        if self.machine.is_finished() {
            ctx.stop();
        }
    }

    fn limit(&self) -> Duration {
        self.machine.config().request_timeout()
    }

    /// Runs a store call as a bounded task and feeds its answer back.
    fn call<T, F>(
        &mut self,
        ctx: &mut Context<Self>,
        op: &'static str,
        fut: F,
        back: impl FnOnce(Result<T, StoreFailure>) -> Event + 'static,
    ) where
        T: Send + 'static,
        F: std::future::Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        let fut = crate::detached::detached(op, self.limit(), fut);
        ctx.spawn(
            actix::fut::wrap_future(fut).map(move |result, act: &mut Self, ctx| {
                let result = act.failure(op, result);
                act.feed(back(result), ctx);
            }),
        );
    }

    fn execute(&mut self, now: Instant, cmd: Command, ctx: &mut Context<Self>) {
        let (key, holder, store) = (
            self.key.clone(),
            self.holder.clone(),
            Arc::clone(&self.store),
        );
        match cmd {
            Command::TryAcquire { req, term } => {
                tracing::trace!("{key}: begin_tenure {req} as {holder} for {term:?}");
                if let Some(joint) = self.rare.as_ref().and_then(|r| r.joint.as_ref()) {
                    // Part of a multi-lock: one grant for the whole set (bounded there).
                    let fut = joint.ask(key, term);
                    ctx.spawn(actix::fut::wrap_future(fut).map(
                        move |result, act: &mut Self, ctx| {
                            act.feed(Event::AcquireResult { req, result }, ctx);
                        },
                    ));
                    return;
                }
                let reclaim = self.reclaim_own;
                let value = self.rare.as_ref().and_then(|r| r.value.clone());
                if let (Some(granter), false) = (&self.granter, reclaim) {
                    // Bounded like any store call: a batch that answers late is not waited for.
                    let (granter, limit) = (Arc::clone(granter), self.limit());
                    let fut = async move {
                        crate::coalescer::ask(&granter, (holder, term, value), key, now, limit)
                            .await
                    };
                    ctx.spawn(actix::fut::wrap_future(fut).map(
                        move |result, act: &mut Self, ctx| {
                            act.feed(Event::AcquireResult { req, result }, ctx);
                        },
                    ));
                    return;
                }
                let (late_store, late_key, late_holder) =
                    (Arc::clone(&store), key.clone(), holder.clone());
                let fut = async move {
                    let outcome = store
                        .begin_tenure(&key, &holder, term, value.as_ref())
                        .await?;
                    match outcome {
                        // A live row of this holder id that this actor does not believe in: a
                        // dead predecessor's, when the application says so. Taken over by
                        // compare-and-set on its token, so nothing newer can be ended.
                        AcquireOutcome::HeldBy {
                            holder: ref seen,
                            token,
                            ..
                        } if reclaim && *seen == holder => {
                            store
                                .take_over_tenure(&key, &holder, token, term, value.as_ref())
                                .await
                        }
                        other => Ok(other),
                    }
                };
                // A grant that answers after this attempt was given up is released at once, in
                // task mode as in lock mode: the machine forgets an attempt it gave up on.
                let fut = crate::late::grant_or_release(
                    late_store,
                    late_key,
                    late_holder,
                    fut,
                    now,
                    self.limit(),
                );
                ctx.spawn(
                    actix::fut::wrap_future(fut).map(move |result, act: &mut Self, ctx| {
                        let result = act.failure("acquire", result);
                        act.feed(Event::AcquireResult { req, result }, ctx);
                    }),
                );
            }
            Command::Renew { req, token, term } => {
                tracing::trace!("{key}: renew {req} of token {token}");
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
                    let fut = async move { store.renew(&key, &holder, token, term).await };
                    self.call(ctx, "renew", fut, move |result| Event::RenewResult {
                        req,
                        result,
                    });
                }
            }
            Command::Release { req, token } => {
                tracing::trace!("{key}: release {req} of token {token}");
                // Rung once the release has committed (or failed: then the row lapses, and a
                // waiter woken early is only refused once).
                let bell = self
                    .bell
                    .clone()
                    .filter(|_| std::mem::take(&mut self.rung_due));
                if let Some(releaser) = &self.releaser {
                    let (releaser, limit) = (Arc::clone(releaser), self.limit());
                    let fut = async move {
                        let item = RenewItem {
                            key: key.clone(),
                            token,
                        };
                        let outcome =
                            crate::coalescer::ask(&releaser, holder, item, now, limit).await;
                        ring_after_release(
                            bell.as_deref(),
                            &key,
                            matches!(outcome, Ok(ReleaseOutcome::Released)),
                        );
                        outcome
                    };
                    ctx.spawn(actix::fut::wrap_future(fut).map(
                        move |result, act: &mut Self, ctx| {
                            act.feed(Event::ReleaseResult { req, result }, ctx);
                        },
                    ));
                    return;
                }
                let fut = async move {
                    let outcome = store.release(&key, &holder, token).await;
                    ring_after_release(
                        bell.as_deref(),
                        &key,
                        matches!(outcome, Ok(ReleaseOutcome::Released)),
                    );
                    outcome
                };
                self.call(ctx, "release", fut, move |result| Event::ReleaseResult {
                    req,
                    result,
                });
            }
            Command::ReleaseAfter { req, token, after } => {
                tracing::trace!("{key}: release {req} of token {token} after {after:?}");
                let fut = async move {
                    Ok(match store.renew(&key, &holder, token, after).await? {
                        RenewOutcome::Renewed => ReleaseOutcome::Released,
                        RenewOutcome::Lost => ReleaseOutcome::NotHeld,
                    })
                };
                self.call(ctx, "release", fut, move |result| Event::ReleaseResult {
                    req,
                    result,
                });
            }
            Command::WakeAt(at) => {
                let delay = at.saturating_duration_since(now);
                if let Some(alarms) = &self.alarms {
                    let slot = *self
                        .alarm_slot
                        .get_or_insert_with(|| alarms.register(Arc::new(ctx.address())));
                    let at = leasehold_core::Clock::now(&leasehold_core::MonotonicClock) + delay;
                    self.alarm = alarms.set(slot, at);
                    return;
                }
                if let Some(handle) = self.rare().timer.take() {
                    ctx.cancel_future(handle);
                }
                let timer = ctx.run_later(delay, |act, ctx| {
                    act.rare().timer = None;
                    act.feed(Event::Timer, ctx);
                });
                self.rare().timer = Some(timer);
            }
            Command::SetDeadline(deadline) => {
                self.registry.set(&self.key, deadline);
                if deadline.is_none() {
                    self.belief.end();
                }
            }
            Command::Notify(n) => self.notify(&n, ctx),
        }
    }

    fn notify(&mut self, n: &Notification, ctx: &mut Context<Self>) {
        self.log(n);
        crate::metrics::notification(n);
        match n {
            Notification::Acquired {
                token,
                local_deadline,
            } => self.answer_attempt(Attempt::Acquired {
                token: *token,
                local_deadline: *local_deadline,
            }),
            Notification::Refused {
                holder,
                token,
                until,
            } => self.answer_attempt(Attempt::Refused {
                holder: holder.clone(),
                token: *token,
                until: *until,
            }),
            Notification::AttemptFailed { error } => {
                self.answer_attempt(Attempt::Failed(error.clone()));
            }
            Notification::Renewed { .. } => self.answer_renewals(RenewAnswer::Renewed),
            Notification::Lost { .. } | Notification::Ended { .. } => {
                self.answer_renewals(RenewAnswer::Lost);
            }
            Notification::Released { .. } if self.deferred_end => {
                self.deferred_end = false;
                self.belief.end();
            }
            Notification::Released { .. } | Notification::HolderChanged { .. } => {}
        }
        if self.single_use
            && matches!(
                n,
                Notification::Refused { .. }
                    | Notification::AttemptFailed { .. }
                    | Notification::Lost { .. }
                    | Notification::Released { .. }
            )
        {
            self.stop_when_resting = true;
        }
        let listener = Arc::clone(&self.listener);
        let key = &self.key;
        if catch_unwind(AssertUnwindSafe(|| listener(key, n))).is_err() {
            tracing::error!(
                "{key}: a callback panicked handling {n:?}; the tenure is ended (CallbackPanicked)"
            );
            if self.machine.token().is_some() {
                ctx.notify(EndTenure(LossReason::CallbackPanicked));
            }
        }
    }

    fn answer_attempt(&mut self, attempt: Attempt) {
        if let Some(reply) = self.rare.as_mut().and_then(|r| r.attempt.take()) {
            let _ = reply.send(attempt);
        }
    }

    /// Answers every renewal asked of a lock ([`crate::RenewLockNow`]) with `answer`.
    fn answer_renewals(&mut self, answer: RenewAnswer) {
        if let Some(rare) = &mut self.rare {
            for reply in rare.renewals.drain(..) {
                let _ = reply.send(answer.clone());
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
            tracing::warn!("{}: {what} failed: {e}", self.key);
            crate::metrics::store_error(what);
            StoreFailure::new(e.to_string())
        })
    }

    fn log(&self, n: &Notification) {
        crate::trace::notification(&self.key, &self.holder, n);
    }

    /// Answers a pending unlock with the store's answer to its release: a failure at once (the
    /// machine keeps retrying until the deadline), a success once the actor has stopped, so the
    /// caller's next lock finds the key and the local queue free.
    pub(crate) fn release_answered(&mut self, result: &Result<ReleaseOutcome, StoreFailure>) {
        match result {
            Ok(outcome) => self.released = Some(*outcome),
            Err(_) => {
                if let Some(reply) = self.rare.as_mut().and_then(|r| r.unlock.take()) {
                    let _ = reply.send(result.clone());
                }
            }
        }
    }

    /// A grant begins a tenure the doorbell is told about (and ends the wait for one); a refusal
    /// of a task that competes again makes it watch the doorbell until its next grant.
    fn doorbell_on_grant(&mut self, outcome: &AcquireOutcome, ctx: &mut Context<Self>) {
        let Some(bell) = self.bell.clone() else {
            return;
        };
        match outcome {
            AcquireOutcome::Acquired { .. } => {
                if let Some(handle) = self.rare.as_mut().and_then(|r| r.watching.take()) {
                    ctx.cancel_future(handle);
                }
                if !std::mem::replace(&mut self.rung_due, true) {
                    bell.held(&self.key);
                }
            }
            // A lock (single use) waits in `try_locker`, which watches by itself.
            AcquireOutcome::HeldBy { .. }
                if !self.single_use && self.rare.as_ref().is_none_or(|r| r.watching.is_none()) =>
            {
                let rings = bell.watch(&self.key);
                let stream = futures::stream::unfold(rings, |mut rx| async move {
                    rx.recv().await.map(|()| (Ringing, rx))
                });
                let watching = ctx.add_stream(stream);
                self.rare().watching = Some(watching);
                // Watching first, then applying again at once: a release after that attempt
                // rings.
                ctx.notify(WakeLease);
            }
            AcquireOutcome::HeldBy { .. } => {}
        }
    }

    /// Tells the doorbell that the tenure it was told about has ended, once.
    fn ring(&mut self) {
        if std::mem::take(&mut self.rung_due)
            && let Some(bell) = &self.bell
        {
            bell.ring(&self.key);
        }
    }

    pub(crate) fn set_joint(&mut self, joint: Arc<crate::joint::JointGrant>) {
        self.rare().joint = Some(joint);
    }

    pub(crate) fn set_attempt(&mut self, reply: oneshot::Sender<Attempt>) {
        self.rare().attempt = Some(reply);
        self.single_use = true;
    }

    pub(crate) fn add_renewal(&mut self, reply: oneshot::Sender<RenewAnswer>) {
        self.rare().renewals.push(reply);
    }

    pub(crate) fn set_unlock(
        &mut self,
        reply: Option<oneshot::Sender<Result<ReleaseOutcome, StoreFailure>>>,
    ) {
        if reply.is_some() || self.rare.is_some() {
            self.rare().unlock = reply;
        }
        self.single_use = true;
    }

    pub(crate) fn set_single_use(&mut self, on: bool) {
        self.single_use = on;
    }

    pub(crate) fn belief(&self) -> &Arc<Belief> {
        &self.belief
    }

    /// The value new tenures are granted with.
    pub(crate) fn set_grant_value(&mut self, value: Option<leasehold_core::LeaseValue>) {
        if value.is_some() || self.rare.is_some() {
            self.rare().value = value;
        }
    }

    /// What a store call of this tenure names: the key, the holder, the store and the bound.
    pub(crate) fn call_parts(&self) -> (LeaseKey, HolderId, Arc<dyn LeaseStore>, Duration) {
        (
            self.key.clone(),
            self.holder.clone(),
            Arc::clone(&self.store),
            self.limit(),
        )
    }

    /// The tenure the machine holds now, to release it by token.
    pub(crate) fn live_tenure(&self) -> Option<RenewItem> {
        self.machine.token().map(|token| RenewItem {
            key: self.key.clone(),
            token,
        })
    }
}

impl Actor for LeaseActor {
    type Context = Context<Self>;

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        if let (Some(alarms), Some(slot)) = (&self.alarms, self.alarm_slot.take()) {
            alarms.remove(slot);
            self.alarm = 0;
        }
        self.ring();
        if self.machine.local_deadline().is_some() {
            self.registry.set(&self.key, None);
        }
        self.belief.finish();
        let rare = self.rare.take().map(|rare| *rare).unwrap_or_default();
        drop(rare.keep);
        // The engine hears of the stop before anyone waiting on this actor does, so a caller
        // told "stopped" (an unlock, a stop) finds the key gone from the book when it asks next.
        if let Some((engine, id)) = self.on_exit.take() {
            engine.do_send(ActorStopped {
                key: self.key.clone(),
                id,
            });
        }
        if let Some(reply) = rare.unlock {
            // No answer at all: the release was abandoned to lapse.
            let outcome = self.released.take().ok_or_else(|| {
                StoreFailure::new("the release got no answer; the lock lapses after its ttl")
            });
            let _ = reply.send(outcome);
        }
        if let Some(reply) = rare.attempt {
            let _ = reply.send(Attempt::Failed(StoreFailure::new(
                "the lease actor stopped",
            )));
        }
        for reply in rare.renewals {
            let _ = reply.send(RenewAnswer::Lost);
        }
        for done in rare.on_stopped {
            let _ = done.send(());
        }
    }
}

impl Handler<YieldLease> for LeaseActor {
    type Result = Option<FencingToken>;
    fn handle(&mut self, _: YieldLease, ctx: &mut Context<Self>) -> Option<FencingToken> {
        let now = self.registry.clock().now();
        let live = self.machine.token().filter(|_| self.machine.holds(now));
        self.feed(Event::Yield, ctx);
        live
    }
}

impl Handler<crate::alarms::AlarmFired> for LeaseActor {
    type Result = ();
    fn handle(&mut self, msg: crate::alarms::AlarmFired, ctx: &mut Context<Self>) {
        // An alarm replaced or cleared since is not this one.
        if msg.0 != 0 && msg.0 == self.alarm {
            self.alarm = 0;
            self.feed(Event::Timer, ctx);
        }
    }
}

/// A ring of the doorbell for this task's key.
struct Ringing;

impl StreamHandler<Ringing> for LeaseActor {
    fn handle(&mut self, _: Ringing, ctx: &mut Context<Self>) {
        self.feed(Event::Wake, ctx);
    }

    fn finished(&mut self, _ctx: &mut Context<Self>) {
        // The doorbell stopped: the task goes on, polling.
        if let Some(rare) = &mut self.rare {
            rare.watching = None;
        }
    }
}

impl Handler<WakeLease> for LeaseActor {
    type Result = ();
    fn handle(&mut self, _: WakeLease, ctx: &mut Context<Self>) {
        self.feed(Event::Wake, ctx);
    }
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
        if let Some(done) = msg.done {
            self.rare().on_stopped.push(done);
        }
        self.feed(Event::Stop, ctx);
    }
}

impl Handler<AbandonLease> for LeaseActor {
    type Result = MessageResult<AbandonLease>;
    fn handle(&mut self, _: AbandonLease, ctx: &mut Context<Self>) -> Self::Result {
        let live = self.live_tenure();
        self.registry.set(&self.key, None);
        self.belief.finish();
        if live.is_some() {
            // The caller releases this tenure (in one statement with the others) and rings.
            self.rung_due = false;
            ctx.stop();
        } else {
            // An acquire may be in flight: stopping settles it (a late grant is released,
            // never believed) and the actor stops once nothing is left, at once if nothing is.
            self.feed(Event::Stop, ctx);
        }
        MessageResult(live)
    }
}

impl Handler<EndTenure> for LeaseActor {
    type Result = ();
    fn handle(&mut self, msg: EndTenure, ctx: &mut Context<Self>) {
        self.feed(Event::EndTenure(msg.0), ctx);
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

/// Rings `bell` (the tenure's, when it was due) once a release has answered: always, unless
/// the release committed and its own statement rang ([`Doorbell::rings_with_releases`]). A
/// failed or refused release still rings: its row may have ended anyway, and a waiter woken
/// early is only refused once.
fn ring_after_release(bell: Option<&dyn Doorbell>, key: &LeaseKey, committed: bool) {
    if let Some(bell) = bell
        && !(committed && bell.rings_with_releases())
    {
        bell.ring(key);
    }
}

#[cfg(test)]
mod tests {
    /// An actor lives inside its tokio task, whose cell is the future plus 112 bytes rounded up
    /// to 128 on x86_64: at 784 bytes the actor's `ContextFut` keeps every held lease's task in
    /// 896 bytes (it was 1,152 with the rare fields inline; `bench --scale`'s
    /// `settled_heap_per_lease`).
    #[test]
    fn an_actor_s_task_fits_in_896_bytes() {
        let size = std::mem::size_of::<
            actix::dev::ContextFut<super::LeaseActor, actix::Context<super::LeaseActor>>,
        >();
        assert!(
            size <= 784,
            "the actor's future is {size} bytes: its task no longer fits in 896"
        );
    }
}
