//! The lease state machine: every decision about one lease, with no IO and no clock.
//!
//! The actor turns messages into [`Event`]s, calls [`LeaseMachine::handle`] with the current
//! instant, and executes the [`Command`]s that come out, in order.

mod applying;
mod holding;
mod messages;
mod phase;
mod resting;
mod rng;
mod steps;
#[cfg(test)]
mod tests;

use tokio::time::Instant;

pub use messages::{Command, Event, LossReason, Notification, RequestId, State, StoreFailure};

use crate::ValidationError;
use crate::{FencingToken, HolderId, LeaseConfig, Term};
use phase::{Cleanup, Phase, Rest, Tenure};
use rng::XorShift;

/// The pure state machine of one lease: it decides when to acquire, renew and release, and when
/// a tenure must be considered lost, from the events fed to it and the instants passed in.
///
/// Every request carries a fresh [`RequestId`]; an answer that is not for the outstanding request
/// (late, timed out, or for an ended tenure) is ignored. A request unanswered after the request
/// timeout counts as failed. Waits after contention and store errors are jittered by a small
/// deterministic generator seeded at construction, so a run can be replayed exactly.
///
/// The local deadline of a tenure is `send_time + term − safety_margin`, where `send_time` is the
/// `now` at which the [`Command::TryAcquire`] or [`Command::Renew`] that earned it was emitted.
/// [`LeaseMachine::holds`] is never true at or after it.
///
/// # Idle
/// Created. [`Event::Start`] sends [`Command::TryAcquire`] and moves to *Applying*;
/// [`Event::StandBy`] moves to *Standby*, [`Event::Release`] to *Released*, [`Event::Stop`] to
/// *Stopped*.
///
/// # Applying
/// An acquire is outstanding, or the next one is scheduled. `Acquired` starts a tenure
/// (*Held*; [`Command::BeginTenure`] and [`Notification::Acquired`]) unless its deadline has
/// already passed when the answer arrives, which counts as a failure. `HeldBy` waits the jittered
/// retry interval (and reports [`Notification::HolderChanged`] when the holder or tenure seen is
/// new), or applies again at once when [`Event::Wake`] (a release announced) arrived while that
/// refused attempt was out. A store error or timeout backs off with jitter: retry interval / 8,
/// / 4, / 2, then the retry interval, never longer.
///
/// # Held
/// A tenure is live; a renewal is scheduled one renew interval after the last successful request
/// was sent. At the scheduled instant [`Command::Renew`] is sent (*Renewing*).
///
/// # Renewing
/// A renewal is outstanding or being retried. `Renewed` moves the deadline to that renewal's send
/// time + term − margin ([`Notification::Renewed`]) and returns to *Held*. A store error or timeout
/// retries with backoff, as in *Applying*. `RenewOutcome::Lost` ends the tenure at once. The answer
/// of the last attempt given up at its request timeout is still taken while a later attempt is
/// scheduled or out (counted from *its* send time, so never later than the database's extension):
/// under load a batched renewal can answer after its timeout, and if every attempt's answer were
/// stale once its successor was sent, renewals slower than the request timeout would never
/// succeed and the tenure would end at its deadline with the database renewing it all along.
///
/// In *Held* and *Renewing*, any event handled at or after the local deadline first ends the
/// tenure ([`LossReason::DeadlinePassed`]), so a late answer never revives it.
///
/// # Lost
/// The tenure ended: [`Command::EndTenure`] and [`Notification::Lost`] were emitted.
/// After the jittered retry interval the machine applies again; a new grant is a new tenure.
///
/// # Released
/// Given up on [`Event::Release`]. A held tenure is released at once: the deadline is cleared
/// immediately, the release is retried on failure until the tenure's local deadline, and
/// [`Notification::Released`] is emitted once it is settled. An acquire outstanding when the
/// lease was given up may have been granted: if its answer is `Acquired`, that grant is released
/// (silently); if it never comes, the grant lapses at the database after one term.
/// [`Event::Start`] competes again once the release (if any) has settled.
///
/// # Standby
/// The ring assigns the name elsewhere: like *Released*, but [`Event::Compete`] (not `Start`)
/// resumes competing.
///
/// # Yielded
/// The tenure was given up by [`Event::Yield`] (ended here first, then released, like
/// *Released*). One retry interval after the release settled the machine applies again
/// (*Applying*); meanwhile [`Event::Wake`] (its own release's announcement), `Start` and
/// `Compete` change nothing, and `Release`, `StandBy` and `Stop` end the yield as they would
/// end competing.
///
/// # Stopped
/// Given up for good, with the same clean-up as *Released*; `Start` and `Compete` are ignored.
/// [`LeaseMachine::is_finished`] tells when nothing is left to settle.
///
/// # Modes: lease task, lock, hold
/// A **lease task** ([`Event::Start`]) competes until it wins, renews by itself and competes
/// again after a loss. A **lock** takes one attempt ([`Event::TryOnce`]): a refusal is
/// [`Notification::Refused`] (holder, token, end), a failure [`Notification::AttemptFailed`],
/// and after either (or a later loss) the machine rests in *Released*. With
/// [`Event::SetAutoRenew`]`(false)` it renews only on [`Event::RenewNow`]; a **hold** switches a
/// lock to automatic renewal (and [`Event::SetCompete`]`(true)` to competing again after a loss).
/// [`Event::ReleaseNotBefore`] gives a tenure up now but lets its grant run until a minimum hold
/// has passed ([`Command::ReleaseAfter`]); [`Event::EndTenure`] ends a tenure from outside (a
/// panicking callback), and [`Event::Lapsed`] ends one whose token was cancelled before its
/// renewal could be published.
///
/// # Belief
/// The commands say what to do with the tenure, in the order to do it, so the actor never reads
/// one command to decide another: [`Command::BeginTenure`] (deadline first, then token) comes
/// before [`Notification::Acquired`], [`Command::RenewTenure`] before [`Notification::Renewed`].
/// Whenever a tenure ends here, [`Command::EndTenure`] comes first, then
/// [`Notification::Lost`] (it ended by itself) or [`Notification::Ended`] (it was given up:
/// `given_up`), and only then any release; [`Notification::Released`] later says the release
/// has settled.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use leasehold_core::machine::{Command, Event, LeaseMachine, Notification, State};
/// use leasehold_core::{AcquireOutcome, Clock, DbInstant, FencingToken, LeaseConfig, ManualClock};
/// use leasehold_core::{ReleaseOutcome, RenewOutcome};
///
/// // Term 30 s, renew every 10 s, margin 2 s; a request unanswered after 5 s has failed.
/// let config = LeaseConfig::default().with_request_timeout(Duration::from_secs(5));
/// let mut machine = LeaseMachine::new(&config, 7)?;
/// let t0 = ManualClock::starting_now().now();
/// let secs = Duration::from_secs;
///
/// // Start: ask for the lease, and wake up if the store does not answer in time.
/// let cmds = machine.handle(t0, Event::Start);
/// let Command::TryAcquire { req, .. } = cmds[0] else { unreachable!() };
/// assert_eq!(cmds[1], Command::TimerAt(t0 + secs(5)));
///
/// // Granted: held until send time + term - margin, renewed one renew interval after sending.
/// let token = FencingToken(1);
/// let granted = AcquireOutcome::Acquired { token, until: DbInstant(30_000) };
/// let cmds = machine.handle(t0 + secs(1), Event::AcquireResult { req, result: Ok(granted) });
/// let deadline = t0 + secs(28);
/// assert_eq!(cmds, vec![
///     Command::BeginTenure { token, deadline },
///     Command::Notify(Notification::Acquired { token, local_deadline: deadline }),
///     Command::TimerAt(t0 + secs(10)),
/// ]);
/// assert!(machine.holds(t0 + secs(27)) && !machine.holds(deadline));
///
/// // The renewal is due; it succeeds and moves the deadline.
/// let cmds = machine.handle(t0 + secs(10), Event::Timer);
/// let Command::Renew { req, .. } = cmds[0] else { unreachable!() };
/// let result = Ok(RenewOutcome::Renewed);
/// let cmds = machine.handle(t0 + secs(11), Event::RenewResult { req, result });
/// assert_eq!(cmds[0], Command::RenewTenure { token, deadline: t0 + secs(38) });
/// assert_eq!(machine.state(), State::Held);
///
/// // Stop: the deadline is cleared and the end announced at once, then the release is sent.
/// let cmds = machine.handle(t0 + secs(12), Event::Stop);
/// assert_eq!(cmds[0], Command::EndTenure { token, given_up: true });
/// assert_eq!(cmds[1], Command::Notify(Notification::Ended { token }));
/// let Command::Release { req, .. } = cmds[2] else { unreachable!() };
/// assert!(!machine.holds(t0 + secs(12)) && !machine.is_finished());
/// let result = Ok(ReleaseOutcome::Released);
/// let cmds = machine.handle(t0 + secs(12), Event::ReleaseResult { req, result });
/// assert_eq!(cmds, vec![Command::Notify(Notification::Released { token })]);
/// assert!(machine.is_finished());
/// # Ok::<(), leasehold_core::ValidationError>(())
/// ```
#[derive(Debug, Clone)]
pub struct LeaseMachine {
    config: LeaseConfig,
    term: Term,
    phase: Phase,
    last_req: u64,
    rng: XorShift,
    /// The instant of the last `TimerAt` not yet fired.
    armed: Option<Instant>,
    /// The other holder and tenure last seen in a `HeldBy`; `None` when unknown or ours.
    seen: Option<(HolderId, FencingToken)>,
    /// Renew by itself (a lease task), or only on `RenewNow` (a lock).
    auto_renew: bool,
    /// Compete again after a refusal or a loss (a lease task), or rest (a lock's `TryOnce`).
    compete: bool,
    /// An [`Event::Wake`] arrived while an acquire was in flight: that acquire may have read
    /// the row before the release it announces, so a refusal of it applies again at once.
    woken: bool,
}

impl LeaseMachine {
    /// A machine in *Idle* for `config`, its jitter seeded by `seed` (any value; vary it between
    /// holders so they do not retry in step).
    ///
    /// # Errors
    /// The [`ValidationError`] of [`LeaseConfig::validate`].
    pub fn new(config: &LeaseConfig, seed: u64) -> Result<Self, ValidationError> {
        let term = config.validated_term()?;
        Ok(Self {
            config: config.clone(),
            term,
            phase: Phase::Idle,
            last_req: 0,
            rng: XorShift::new(seed),
            armed: None,
            seen: None,
            auto_renew: true,
            compete: true,
            woken: false,
        })
    }

    /// The configuration this machine runs with.
    #[must_use]
    pub fn config(&self) -> &LeaseConfig {
        &self.config
    }

    /// The current state.
    #[must_use]
    pub fn state(&self) -> State {
        match self.phase {
            Phase::Idle => State::Idle,
            Phase::Applying { .. } => State::Applying,
            Phase::Held { .. } => State::Held,
            Phase::Renewing { .. } => State::Renewing,
            Phase::Lost { .. } => State::Lost,
            Phase::Resting {
                rest: Rest::Released,
                ..
            } => State::Released,
            Phase::Resting {
                rest: Rest::Standby,
                ..
            } => State::Standby,
            Phase::Resting {
                rest: Rest::Stopped,
                ..
            } => State::Stopped,
            Phase::Resting {
                rest: Rest::Yielded { .. },
                ..
            } => State::Yielded,
        }
    }

    /// Whether the lease is held at `now`: a tenure is live and `now` is before its local deadline.
    #[must_use]
    pub fn holds(&self, now: Instant) -> bool {
        self.tenure().is_some_and(|t| now < t.deadline)
    }

    /// The local deadline of the live tenure, if any (it may have passed if no event has been
    /// handled since; [`LeaseMachine::holds`] accounts for that).
    #[must_use]
    pub fn local_deadline(&self) -> Option<Instant> {
        self.tenure().map(|t| t.deadline)
    }

    /// The fencing token of the live tenure, if any.
    #[must_use]
    pub fn token(&self) -> Option<FencingToken> {
        self.tenure().map(|t| t.token)
    }

    /// Whether the machine is *Stopped* with nothing left to settle with the store: the actor can
    /// exit.
    #[must_use]
    pub fn is_finished(&self) -> bool {
        self.phase
            == Phase::Resting {
                rest: Rest::Stopped,
                cleanup: Cleanup::Done,
                resume: false,
            }
    }

    fn tenure(&self) -> Option<Tenure> {
        match self.phase {
            Phase::Held { tenure, .. } | Phase::Renewing { tenure, .. } => Some(tenure),
            _ => None,
        }
    }

    /// Handles one event at `now` and returns the commands to execute, in order.
    ///
    /// `now` must not go backwards between calls. Ends with a [`Command::TimerAt`] whenever the
    /// next instant the machine must act at has changed.
    pub fn handle(&mut self, now: Instant, event: Event) -> Vec<Command> {
        if event == Event::Timer {
            self.armed = None;
        }
        let mut out = Vec::new();
        self.step(now, event, &mut out);
        let wake = self.next_wake();
        if wake.is_some() && wake != self.armed {
            self.armed = wake;
            out.extend(wake.map(Command::TimerAt));
        }
        out
    }

    /// Every transition: the flags an event sets, then one arm per phase (`applying.rs`:
    /// Idle, Applying, Lost; `holding.rs`: Held, Renewing; `resting.rs`: Resting), each of
    /// which names every event it ignores.
    fn step(&mut self, now: Instant, event: Event, out: &mut Vec<Command>) {
        match event {
            Event::Start => self.compete = true,
            Event::SetCompete(on) => self.compete = on,
            Event::SetAutoRenew(on) => self.auto_renew = on,
            _ => {}
        }
        let phase = std::mem::replace(&mut self.phase, Phase::Idle);
        self.phase = match phase {
            // Whatever happens at or after the local deadline, the tenure ends first; then the
            // event is handled in Lost (where late answers are stale).
            Phase::Held { tenure, .. } | Phase::Renewing { tenure, .. }
                if now >= tenure.deadline =>
            {
                return self.past_deadline(now, tenure, event, out);
            }
            Phase::Idle => self.idle(now, event, out),
            Phase::Applying { next, attempt } => self.applying(now, next, attempt, event, out),
            Phase::Held { tenure, renew_at } => self.held(now, tenure, renew_at, event, out),
            Phase::Renewing {
                tenure,
                next,
                attempt,
                abandoned,
            } => self.renewing(now, (tenure, next, attempt, abandoned), event, out),
            Phase::Lost { retry_at } => self.lost(now, retry_at, event, out),
            Phase::Resting {
                rest,
                cleanup,
                resume,
            } => self.resting(now, (rest, cleanup, resume), event, out),
        };
    }

    /// The local deadline of `tenure` has passed: it ends (Lost), then `event` is handled there.
    fn past_deadline(
        &mut self,
        now: Instant,
        tenure: Tenure,
        event: Event,
        out: &mut Vec<Command>,
    ) {
        self.phase = self.lose(now, tenure.token, LossReason::DeadlinePassed, out);
        self.step(now, event, out);
    }
}
