//! One actor per lease: it runs the lease machine's commands.
//!
//! - `mod.rs`: the [`LeaseActor`], `feed` (one event in, the machine's commands out) and
//!   `execute` (one command into IO, a timer, the registry or the belief).
//! - `grant.rs`, `renew.rs`, `release.rs`: the ports [`GrantRoute`], [`RenewRoute`] and
//!   [`ReleaseRoute`], where grants, renewals and releases go (one statement each, a group
//!   commit, a multi-lock's joint grant), chosen when the actor is built.
//! - `calls.rs`: the store calls of a tenure (grant, renewal, release), each through its port,
//!   each answered back as an event.
//! - `announce.rs`: what the actor tells others: listener, log, metrics, doorbell.
//! - `lease.rs`: the handlers of the lease messages ([`crate::StartLease`], …).
//! - `lock.rs`: the handlers of a lock's messages and the answers of its attempt, renewals and
//!   unlock.
//! - `setup.rs`: how the engine builds and equips an actor.
//! - `value.rs`: changing the value of the live tenure.

mod announce;
mod calls;
mod grant;
mod lease;
mod lock;
mod release;
mod renew;
mod setup;
mod value;

pub(crate) use grant::GrantRoute;
pub(crate) use release::ReleaseRoute;
pub(crate) use renew::RenewRoute;

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use leasehold_core::{
    Command, Event, HolderId, LeaseConfig, LeaseKey, LeaseMachine, ReleaseOutcome, RenewOutcome,
    State, StoreFailure, ValidationError,
};
use leasehold_storage::{Doorbell, LeaseStore, StoreError};
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::belief::Belief;
use crate::protocol::*;
use crate::registry::Registry;

/// Told once, when the actor has stopped: the engine (shared, so no sender is allocated per
/// actor) and the actor's id in its book.
pub(crate) type OnExit = (Arc<Recipient<ActorStopped>>, u64);

/// The actor that holds one lease: it feeds events to a [`LeaseMachine`] and executes the
/// commands that come out. It decides nothing itself.
///
/// - Store requests run as tokio tasks, each abandoned at the request timeout; their results
///   come back as events. Grants, renewals and releases each go through a port chosen when the
///   actor is built: one statement of their own, or a group commit
///   ([`RenewGroup`](crate::RenewGroup) for renewals).
/// - One timer at a time: each [`Command::TimerAt`] replaces the pending alarm.
/// - [`Command::BeginTenure`], [`Command::RenewTenure`] and [`Command::EndTenure`] go to the
///   [`Registry`] and the [`Belief`] in the same step: a tenure's cancellation token is cancelled
///   when it ends, before any release is sent. The commands carry their own order: the actor
///   never reads one command to decide another. [`Command::Notify`] goes to the [`Listener`] (and the log).
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
    /// Where grants go: direct, group commit or a multi-lock's joint grant (shared with the
    /// engine's other actors of the same route).
    grant: Arc<GrantRoute>,
    /// Where renewals go: direct or the group commit of renewals (shared likewise).
    renew: Arc<RenewRoute>,
    /// Where releases go: direct or the group commit of releases (shared likewise).
    release: Arc<ReleaseRoute>,
    registry: Arc<Registry>,
    listener: Listener,
    belief: Arc<Belief>,
    /// The service's doorbell: told when a tenure begins and once it has ended, and watched
    /// while this task waits to apply again.
    doorbell: Option<Arc<dyn Doorbell>>,
    /// A tenure began and the doorbell has not been told that it ended yet.
    rung_due: bool,
    /// The engine's shared alarms (one timer for all its actors), this actor's slot in them
    /// once registered, and the sequence number of its live alarm (0: none).
    alarms: Option<Arc<crate::alarms::Alarms<LeaseActor>>>,
    alarm_slot: Option<u32>,
    alarm: u64,
    on_exit: Option<OnExit>,
    /// What locks, holds, valued or refused tasks, stops with a waiter and actors without the
    /// engine's alarms attach; made on first use (see [`Attached`]).
    attached: Option<Box<Attached>>,
    /// Stop once the tenure has ended and settled (a lock, or a hold being unlocked).
    single_use: bool,
    /// The belief refused this step's renewal: the tenure's token was cancelled.
    lapsed: bool,
    stop_when_resting: bool,
    /// The put-back bug `KnownBug::CancelAfterReleaseAnswer`: end a given-up tenure's belief
    /// only when its release has settled.
    #[cfg(feature = "known-bugs")]
    cancel_late: bool,
    #[cfg(feature = "known-bugs")]
    deferred_end: bool,
    /// The store's answer to the release of an unlock, given to the unlock when the actor stops.
    released: Option<ReleaseOutcome>,
}

/// What some users attach to a [`LeaseActor`] and a lease task held without a value never does:
/// the replies awaited (a lock's attempt, renewals and unlock, stop waiters), what is kept (a
/// lock's place in the local queue, the tenure's value), and the actor's own timer and doorbell
/// watch. One allocation for the actors that need them instead of their room in every actor's
/// task (the actor lives inside its tokio task, whose size is rounded up to 128 bytes).
#[derive(Default)]
struct Attached {
    /// The subscription to the doorbell while waiting to apply after a refusal.
    watching: Option<SpawnHandle>,
    /// The pending alarm of an actor without the engine's alarms.
    timer: Option<SpawnHandle>,
    /// Signalled once the actor has stopped.
    on_stopped: Vec<oneshot::Sender<()>>,
    /// Dropped when the actor stops (a lock's place in the local queue).
    keep: Option<Box<dyn Any + Send>>,
    /// The value every new tenure is granted with ([`leasehold_core::LeaseValue`]); changed by
    /// [`crate::SetTenureValue`] once the store has committed it.
    value: Option<leasehold_core::LeaseValue>,
    /// The actor's `lease` span, when its requester's dispatcher wants one (see `crate::trace`).
    span: Option<tracing::Span>,
    /// The answer to a lock's single attempt, once it is known.
    attempt: Option<oneshot::Sender<Attempt>>,
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
            grant: GrantRoute::direct(),
            renew: RenewRoute::direct(),
            release: ReleaseRoute::direct(),
            registry,
            listener,
            belief,
            doorbell: None,
            rung_due: false,
            alarms: None,
            alarm_slot: None,
            alarm: 0,
            on_exit: None,
            attached: None,
            single_use: false,
            lapsed: false,
            stop_when_resting: false,
            #[cfg(feature = "known-bugs")]
            cancel_late: false,
            #[cfg(feature = "known-bugs")]
            deferred_end: false,
            released: None,
        })
    }

    /// The attached parts, made now if they were not.
    fn attached(&mut self) -> &mut Attached {
        self.attached.get_or_insert_with(Box::default)
    }

    /// The actor's `lease` span, if it has one.
    pub(crate) fn span(&self) -> Option<&tracing::Span> {
        self.attached.as_ref().and_then(|a| a.span.as_ref())
    }

    /// Feeds one event to the machine at the current instant and executes its commands, inside
    /// the actor's `lease` span (user callbacks included).
    pub(crate) fn feed(&mut self, event: Event, ctx: &mut Context<Self>) {
        match self.span().cloned() {
            Some(span) => crate::trace::in_span(&span, || self.step(event, ctx)),
            None => self.step(event, ctx),
        }
    }

    /// [`LeaseActor::feed`] inside the span.
    fn step(&mut self, event: Event, ctx: &mut Context<Self>) {
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
        for cmd in self.machine.handle(now, event) {
            self.execute(now, cmd, ctx);
        }
        // A renewal the belief refused (see `Command::RenewTenure`) is the machine's to judge.
        if std::mem::take(&mut self.lapsed)
            && let Some(token) = self.machine.token()
        {
            self.step(Event::Lapsed { token }, ctx);
            return;
        }
        if self.stop_when_resting && matches!(self.machine.state(), State::Released) {
            self.stop_when_resting = false;
            self.step(Event::Stop, ctx);
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
        let (key, holder, limit) = (self.key.clone(), self.holder.clone(), self.limit());
        let fut = async move {
            let result = crate::detached::detached(op, limit, fut).await;
            store_failure(&key, &holder, op, result)
        };
        let fut = crate::trace::traced(self.span(), fut);
        ctx.spawn(
            actix::fut::wrap_future(fut).map(move |result, act: &mut Self, ctx| {
                act.feed(back(result), ctx);
            }),
        );
    }

    fn execute(&mut self, now: Instant, cmd: Command, ctx: &mut Context<Self>) {
        match cmd {
            Command::TryAcquire { req, term } => self.grant(now, req, term, ctx),
            Command::Renew { req, token, term } => self.renew(req, token, term, ctx),
            Command::Release { req, token } => self.release(now, req, token, ctx),
            Command::ReleaseAfter { req, token, after } => {
                self.release_after(req, token, after, ctx);
            }
            Command::TimerAt(at) => {
                let delay = at.saturating_duration_since(now);
                if let Some(alarms) = &self.alarms {
                    let slot = *self
                        .alarm_slot
                        .get_or_insert_with(|| alarms.register(Arc::new(ctx.address())));
                    let at = leasehold_core::Clock::now(&leasehold_core::MonotonicClock) + delay;
                    self.alarm = alarms.set(slot, at);
                    return;
                }
                if let Some(handle) = self.attached().timer.take() {
                    ctx.cancel_future(handle);
                }
                let timer = ctx.run_later(delay, |act, ctx| {
                    act.attached().timer = None;
                    act.feed(Event::Timer, ctx);
                });
                self.attached().timer = Some(timer);
            }
            // A new tenure is recorded in the registry first and begun in the belief after:
            // whoever is given its token (`acquired`, `token`) finds `has_lease` true already.
            // (At the end the order is the other way round: the token is cancelled first,
            // `has_lease` turns false after.)
            Command::BeginTenure { token, deadline } => {
                self.registry.set(&self.key, Some(deadline));
                self.belief.begin(token, deadline);
                self.belief.announce();
            }
            // Someone saw this tenure past its old deadline and cancelled its token before the
            // renewal landed: the belief keeps it ended, no deadline is published, and the
            // machine is told once this step's commands have run.
            Command::RenewTenure { token, deadline } => {
                if self.belief.renewed(token, deadline) {
                    self.registry.set(&self.key, Some(deadline));
                } else {
                    self.lapsed = true;
                }
            }
            Command::EndTenure { token, given_up } => {
                if given_up {
                    self.belief.give_up(token);
                    #[cfg(feature = "known-bugs")]
                    if self.cancel_late {
                        // KnownBug::CancelAfterReleaseAnswer: has_lease turns false, but the
                        // tenure's belief lives on until its release has settled.
                        self.deferred_end = true;
                        self.registry.set(&self.key, None);
                        return;
                    }
                }
                self.registry.set(&self.key, None);
                self.belief.end();
            }
            Command::Notify(n) => self.notify(&n, ctx),
        }
    }
}

/// Logs a store error of `what` on `key` (held as `holder`) and turns it into what the machine
/// understands.
fn store_failure<T>(
    key: &LeaseKey,
    holder: &HolderId,
    what: &'static str,
    result: Result<T, StoreError>,
) -> Result<T, StoreFailure> {
    result.map_err(|e| {
        crate::trace::lease_event!(
            tracing::Level::WARN,
            key,
            holder,
            op = what,
            error = %e,
            "store call failed"
        );
        crate::metrics::store_error(what);
        StoreFailure::new(e.to_string())
    })
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
        let attached = self.attached.take().map(|a| *a).unwrap_or_default();
        drop(attached.keep);
        // The engine hears of the stop before anyone waiting on this actor does, so a caller
        // told "stopped" (an unlock, a stop) finds the key gone from the book when it asks next.
        if let Some((engine, id)) = self.on_exit.take() {
            engine.do_send(ActorStopped {
                key: self.key.clone(),
                id,
            });
        }
        if let Some(reply) = attached.unlock {
            // No answer at all: the release was abandoned to lapse.
            let outcome = self.released.take().ok_or_else(|| {
                StoreFailure::new("the release got no answer; the lock lapses after its ttl")
            });
            let _ = reply.send(outcome);
        }
        if let Some(reply) = attached.attempt {
            let _ = reply.send(Attempt::Failed(StoreFailure::new(
                "the lease actor stopped",
            )));
        }
        for reply in attached.renewals {
            let _ = reply.send(RenewAnswer::Lost);
        }
        for done in attached.on_stopped {
            let _ = done.send(());
        }
    }
}

#[cfg(test)]
mod tests {
    /// An actor lives inside its tokio task, whose cell is the future plus 112 bytes rounded up
    /// to 128 on x86_64: at 784 bytes the actor's `ContextFut` keeps every held lease's task in
    /// 896 bytes (`bench --scale`'s `settled_heap_per_lease` counts it); what only some actors
    /// need lives in `Attached`.
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
