//! What goes into the lease machine ([`Event`]) and what comes out ([`Command`]).

use std::fmt;

use tokio::time::Instant;

use crate::{
    AcquireOutcome, DbInstant, FencingToken, HolderId, ReleaseOutcome, RenewOutcome, Term,
};

/// Identifies one request the machine asked for. Fresh for every request, increasing; a result
/// whose id is not the outstanding request is stale and ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestId(pub u64);

impl RequestId {
    /// The raw value.
    #[must_use]
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// A store request that failed: the database was unreachable, the statement failed, or the
/// outcome is unknown. Only its description reaches the machine, which does not depend on
/// storage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreFailure {
    message: String,
}

impl StoreFailure {
    /// A failure described by `message`.
    #[must_use]
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }

    /// The description of the failure.
    #[must_use]
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for StoreFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for StoreFailure {}

/// Something that happened, fed to [`LeaseMachine::handle`](super::LeaseMachine::handle).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Begin competing for the lease (from `Idle`, or again after `Released`).
    Start,
    /// A wake-up asked for by [`Command::TimerAt`] fired (an early or spurious one is harmless).
    Timer,
    /// The answer to [`Command::TryAcquire`].
    AcquireResult {
        /// The request answered.
        req: RequestId,
        /// The store's answer.
        result: Result<AcquireOutcome, StoreFailure>,
    },
    /// The answer to [`Command::Renew`].
    RenewResult {
        /// The request answered.
        req: RequestId,
        /// The store's answer.
        result: Result<RenewOutcome, StoreFailure>,
    },
    /// The answer to [`Command::Release`].
    ReleaseResult {
        /// The request answered.
        req: RequestId,
        /// The store's answer.
        result: Result<ReleaseOutcome, StoreFailure>,
    },
    /// The ring assigns the name to another host: release it if held and stop competing.
    StandBy,
    /// The ring assigns the name to this host again: compete.
    Compete,
    /// Give the lease up: release it if held and stop competing until the next [`Event::Start`].
    Release,
    /// Give the lease up for good: like [`Event::Release`], and [`Event::Start`] is ignored
    /// afterwards. See [`LeaseMachine::is_finished`](super::LeaseMachine::is_finished).
    Stop,
    /// One attempt, as a lock takes it: like [`Event::Start`], but a refusal
    /// ([`Notification::Refused`]), a failed attempt ([`Notification::AttemptFailed`]) or a later
    /// loss ends in *Released* instead of competing again. Ignored unless *Idle* or *Released*
    /// with nothing left to settle.
    TryOnce,
    /// Renew now (a lock renewed on request): in *Held*, sends [`Command::Renew`] at once;
    /// ignored elsewhere (a renewal already outstanding answers for it).
    RenewNow,
    /// Whether the machine renews by itself one renew interval after each successful request
    /// (the default, and what a lease task does) or only on [`Event::RenewNow`] (a lock). Turned
    /// on while *Held*, the next renewal is sent at once.
    SetAutoRenew(bool),
    /// Keep competing after a loss or a refusal (what a lease task does); turned on by
    /// [`Event::Start`] too. A hold switches a lock to it.
    SetCompete(bool),
    /// Like [`Event::Release`], but the grant must not end before `not_before` (local monotonic
    /// clock; ShedLock's `lockAtLeastFor`): the tenure ends here at once, and the release is sent
    /// as [`Command::ReleaseAfter`] for the time still left, so the row lapses then.
    ReleaseNotBefore(Instant),
    /// The lease was just released by its holder (a release announcement): while waiting to
    /// apply again (after a refusal or a loss), apply now instead of at the scheduled instant;
    /// while an attempt is out (it may have read the row before the release), apply again at
    /// once if that attempt is refused. Ignored elsewhere; an announcement that is late or wrong
    /// only costs one refused attempt.
    Wake,
    /// Give the live tenure up and compete again (Spring's `yieldLeadership`): the tenure ends
    /// here and is released as on [`Event::Release`]; once the release has settled the machine
    /// waits one full retry interval, ignoring [`Event::Wake`] (its own release's announcement),
    /// and applies again, so contenders waiting their retry interval get a chance first. Ignored
    /// when no tenure is live; a machine that does not compete (a lock) only releases.
    Yield,
    /// End the live tenure at once for `reason` (for example a panicking callback): the deadline
    /// is cleared, [`Notification::Lost`] emitted, the grant released, and the machine competes
    /// again if it competes at all. Ignored when no tenure is live.
    EndTenure(LossReason),
    /// Someone is waiting for this key (a new lock of it): a release that failed and waits for
    /// its backoff is sent again now instead (the database may be back). Ignored unless such a
    /// retry is pending; a release in flight answers for itself.
    SettleNow,
    /// Tenure `token` could not take its renewal ([`Command::RenewTenure`]): whoever holds its
    /// token saw the old local deadline pass first and cancelled the token. A cancelled token is
    /// over for good, so the tenure ends here as [`LossReason::DeadlinePassed`]
    /// ([`Notification::Lost`]), and its grant, which the store did renew, is released; the
    /// machine competes again if it competes at all. Ignored unless `token` is the live tenure.
    Lapsed {
        /// The tenure whose token was cancelled.
        token: FencingToken,
    },
}

/// Something the actor must do, in the order given. The machine never waits on a command: the
/// actor sends requests right away (the machine takes the `now` of the event as their send time)
/// and feeds their answers back as events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Send an acquire for one `term`; answer with [`Event::AcquireResult`] carrying `req`.
    TryAcquire {
        /// The request id to answer with.
        req: RequestId,
        /// The term to ask for.
        term: Term,
    },
    /// Send a renewal of tenure `token` for one `term`; answer with [`Event::RenewResult`].
    Renew {
        /// The request id to answer with.
        req: RequestId,
        /// The tenure to renew.
        token: FencingToken,
        /// The term to ask for.
        term: Term,
    },
    /// Send a release of tenure `token`; answer with [`Event::ReleaseResult`].
    Release {
        /// The request id to answer with.
        req: RequestId,
        /// The tenure to release.
        token: FencingToken,
    },
    /// Shorten tenure `token` to end `after` from now by the store's clock (a renewal for
    /// `after`), so it lapses then: a release that keeps a minimum hold. Answer with
    /// [`Event::ReleaseResult`] (`Released` when the renewal succeeded, `NotHeld` when the
    /// tenure had ended).
    ReleaseAfter {
        /// The request id to answer with.
        req: RequestId,
        /// The tenure to release.
        token: FencingToken,
        /// How long the grant still lasts.
        after: Term,
    },
    /// Deliver [`Event::Timer`] at this instant (at once if it has passed). The actor keeps one
    /// timer: each `TimerAt` replaces the previous one.
    TimerAt(Instant),
    /// A new tenure began: publish its local deadline (for example to the registry that answers
    /// `has_lease`) first, then its token (to whoever is handed it), so that whoever is given the
    /// token finds the lease held. Comes right before [`Notification::Acquired`]. Whoever reads
    /// the deadline must treat the lease as held only while its monotonic clock is before it.
    BeginTenure {
        /// The tenure's fencing token.
        token: FencingToken,
        /// Its local deadline.
        deadline: Instant,
    },
    /// The live tenure `token` was renewed: publish its new local deadline. Comes right before
    /// [`Notification::Renewed`]. If whoever holds the token saw the old deadline pass and
    /// cancelled it meanwhile, keep the old deadline and feed [`Event::Lapsed`] once this
    /// step's commands have run: the tenure is over all the same (the
    /// [`Notification::Renewed`] of this step still goes out: the store did renew it).
    RenewTenure {
        /// The tenure's fencing token.
        token: FencingToken,
        /// Its new local deadline.
        deadline: Instant,
    },
    /// The tenure `token` ended here: withdraw its deadline and cancel its token, before any
    /// release is sent. `given_up`: it was given up on request (followed by
    /// [`Notification::Ended`]); otherwise it ended by itself (followed by
    /// [`Notification::Lost`]).
    EndTenure {
        /// The tenure's fencing token.
        token: FencingToken,
        /// Given up on request, not lost.
        given_up: bool,
    },
    /// Tell the application what happened.
    Notify(Notification),
}

/// What the application is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notification {
    /// A new tenure began: the lease is held until `local_deadline` unless renewed.
    Acquired {
        /// The tenure's fencing token.
        token: FencingToken,
        /// The instant (monotonic clock) after which the lease must be treated as not held.
        local_deadline: Instant,
    },
    /// A renewal succeeded: the local deadline moved.
    Renewed {
        /// The tenure's fencing token.
        token: FencingToken,
        /// The new local deadline.
        local_deadline: Instant,
    },
    /// The tenure ended without being released: it must be treated as not held from now on.
    Lost {
        /// The tenure that ended.
        token: FencingToken,
        /// Why.
        reason: LossReason,
    },
    /// A tenure given up on request (release, stop, standby or [`Event::EndTenure`]) ended here:
    /// emitted right after [`Command::EndTenure`] (`given_up`) and before the release is sent.
    /// Everything that believes in the tenure must stop believing now.
    Ended {
        /// The tenure that ended.
        token: FencingToken,
    },
    /// The single attempt of [`Event::TryOnce`] found the lease held by someone (possibly this
    /// holder, in another tenure).
    Refused {
        /// Who holds it.
        holder: HolderId,
        /// Their tenure's token.
        token: FencingToken,
        /// When their grant ends, by the database's clock.
        until: DbInstant,
    },
    /// The single attempt of [`Event::TryOnce`] failed: the store failed, did not answer within
    /// the request timeout, or answered too late to hold anything. A grant it may have made is
    /// released (or lapses).
    AttemptFailed {
        /// What went wrong.
        error: StoreFailure,
    },
    /// A tenure given up on request (release, stop or standby) has been settled with the store:
    /// released, found already ended, or abandoned to lapse after release attempts failed until
    /// its local deadline.
    Released {
        /// The tenure that was given up.
        token: FencingToken,
    },
    /// Someone else holds the lease, or a new tenure of someone else was seen, or (with `None`)
    /// this holder took the lease over after someone else had been seen holding it.
    HolderChanged {
        /// The holder now seen; `None` for this holder itself.
        holder: Option<HolderId>,
        /// The fencing token of the tenure now seen.
        token: FencingToken,
    },
}

/// Why a tenure was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossReason {
    /// No renewal succeeded before the local deadline (store errors, timeouts or late answers).
    DeadlinePassed,
    /// The store answered the renewal with [`RenewOutcome::Lost`]: the grant had lapsed, been
    /// released or been taken over.
    EndedAtStore,
    /// A callback of the application panicked while handling the tenure; the tenure was ended
    /// and released (see [`Event::EndTenure`]).
    CallbackPanicked,
}

/// The state of a [`LeaseMachine`](super::LeaseMachine), as seen from outside. The lifecycle is
/// documented on the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    /// Created, not started.
    Idle,
    /// Competing: an acquire is outstanding, or the next attempt is scheduled.
    Applying,
    /// Holding a tenure; the next renewal is scheduled.
    Held,
    /// Holding a tenure; a renewal is outstanding or being retried.
    Renewing,
    /// A tenure was just lost; applying again after the retry interval.
    Lost,
    /// Given up on request; not competing until started again.
    Released,
    /// The ring assigns the name elsewhere; not competing until told to.
    Standby,
    /// Given up for good.
    Stopped,
    /// The tenure was yielded ([`Event::Yield`]): its release is settling, or the machine waits
    /// one retry interval before applying again.
    Yielded,
}
