//! [`Belief`]: what one lease actor believes about its tenure, shared with every handle on it.
//!
//! The actor writes it while it executes the machine's commands, in the same step in which it
//! updates the registry: a tenure begins at [`Command::BeginTenure`] (right before
//! [`Notification::Acquired`]), its deadline moves on renewal, and it ends at
//! [`Command::EndTenure`]: before any release is sent. Every
//! "do I hold it?" answer of a handle (a task's token, a guard's `is_held`, the tenure's
//! cancellation token) is read from here, so they never disagree with each other or with the
//! registry's `has_lease`.
//!
//! [`Notification::Acquired`]: leasehold_core::Notification::Acquired
//! [`Command::BeginTenure`]: leasehold_core::Command::BeginTenure
//! [`Command::EndTenure`]: leasehold_core::Command::EndTenure

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use leasehold_core::{Clock, FencingToken};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Where a tenure stands.
#[derive(Debug)]
enum State {
    /// No tenure is live; one may begin. `last`: the token of the tenure that ended last.
    Waiting { last: Option<FencingToken> },
    /// A live tenure, until `deadline` on the monotonic clock. Its cancellation token is made
    /// when first asked for (most tenures of a large sharded set are never asked).
    Held {
        token: FencingToken,
        deadline: Instant,
        cancel: Option<CancellationToken>,
    },
    /// The actor has stopped: no tenure will begin again. `last` as in `Waiting`.
    Finished { last: Option<FencingToken> },
}

/// The tenure of one lease actor, as its handles see it.
///
/// Every cancellation token handed out is a child of the service's token, so cancelling that
/// one (shutdown, or the service dropped) ends every tenure's token at once.
pub struct Belief {
    state: Mutex<State>,
    /// The last tenure given up on request (unlocked, stopped), as opposed to lost.
    given_up: Mutex<Option<FencingToken>>,
    changed: Notify,
    service: CancellationToken,
    clock: Arc<dyn Clock>,
    /// Work running under this actor's tenures ([`WorkGuard`]s alive), and in the top bit
    /// whether new work is refused (a hand-over is draining it).
    work: AtomicU64,
}

/// The bit of `Belief::work` that refuses new work.
const DRAINING: u64 = 1 << 63;

impl std::fmt::Debug for Belief {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Belief")
            .field("state", &*self.lock())
            .finish_non_exhaustive()
    }
}

impl Belief {
    /// A belief in no tenure yet, under the service's token `service`, read with `clock`.
    #[must_use]
    pub fn new(service: CancellationToken, clock: Arc<dyn Clock>) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State::Waiting { last: None }),
            given_up: Mutex::new(None),
            changed: Notify::new(),
            service,
            clock,
            work: AtomicU64::new(0),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A tenure began (the actor calls this, then publishes the deadline to the registry, then
    /// [`Belief::announce`]s it, so a waiter woken by `settled` finds `has_lease` true too).
    pub(crate) fn begin(&self, token: FencingToken, deadline: Instant) {
        let previous = std::mem::replace(
            &mut *self.lock(),
            State::Held {
                token,
                deadline,
                cancel: None,
            },
        );
        cancel(previous);
    }

    /// Wakes whoever waits in [`Belief::settled`].
    pub(crate) fn announce(&self) {
        self.changed.notify_waiters();
    }

    /// The live tenure's deadline moved (the actor calls this). Answers `false`, and leaves the
    /// deadline as it was, when a reader already saw the tenure past its deadline and cancelled
    /// its token ([`Belief::tenure`]): a tenure whose token was cancelled is over for good, so
    /// the actor must end it rather than extend it.
    pub(crate) fn renewed(&self, token: FencingToken, next: Instant) -> bool {
        if let State::Held {
            token: live,
            deadline,
            cancel,
        } = &mut *self.lock()
            && *live == token
        {
            if cancel.as_ref().is_some_and(CancellationToken::is_cancelled) {
                return false;
            }
            *deadline = next;
        }
        true
    }

    /// The live tenure (if any) ended: its token is cancelled now.
    pub(crate) fn end(&self) {
        let mut state = self.lock();
        if let State::Held { token, .. } = *state {
            let previous = std::mem::replace(&mut *state, State::Waiting { last: Some(token) });
            drop(state);
            cancel(previous);
            self.changed.notify_waiters();
        }
    }

    /// The actor stopped: the live tenure (if any) ended, and none will begin again.
    pub(crate) fn finish(&self) {
        let mut state = self.lock();
        let last = last_token(&state);
        let previous = std::mem::replace(&mut *state, State::Finished { last });
        drop(state);
        cancel(previous);
        self.changed.notify_waiters();
    }

    /// Whether a tenure is believed now: live, before its local deadline, and the service not
    /// shut down.
    #[must_use]
    pub fn holds(&self) -> bool {
        let now = self.clock.now();
        match *self.lock() {
            State::Held { deadline, .. } => now < deadline && !self.service.is_cancelled(),
            _ => false,
        }
    }

    /// The live tenure's token, if [`Belief::holds`].
    #[must_use]
    pub fn token(&self) -> Option<FencingToken> {
        let now = self.clock.now();
        match *self.lock() {
            State::Held {
                token, deadline, ..
            } if now < deadline && !self.service.is_cancelled() => Some(token),
            _ => None,
        }
    }

    /// Whether `token` is the tenure believed now.
    #[must_use]
    pub fn holds_token(&self, token: FencingToken) -> bool {
        self.token() == Some(token)
    }

    /// The local deadline of tenure `token` (monotonic clock) while it is believed: the instant
    /// it stops being believed unless a renewal moves it first. `None` once it has ended.
    #[must_use]
    pub fn deadline_of(&self, token: FencingToken) -> Option<Instant> {
        let now = self.clock.now();
        match *self.lock() {
            State::Held {
                token: live,
                deadline,
                ..
            } if live == token && now < deadline && !self.service.is_cancelled() => Some(deadline),
            _ => None,
        }
    }

    /// The live tenure's token and cancellation token (made now if nobody asked before); `None`
    /// when no tenure is live, its local deadline has passed, or the service has been shut down
    /// or dropped.
    ///
    /// A reader that finds the deadline passed before the actor's timer has ended the tenure (a
    /// busy engine thread runs it late) cancels the tenure's token itself, so the token never
    /// outlives the deadline by more than the time until someone looks; the tenure cannot be
    /// renewed after that (`Belief::renewed`).
    #[must_use]
    pub fn tenure(&self) -> Option<(FencingToken, CancellationToken)> {
        if self.service.is_cancelled() {
            return None;
        }
        let now = self.clock.now();
        let mut state = self.lock();
        match &mut *state {
            State::Held {
                token,
                cancel,
                deadline,
            } => {
                if now >= *deadline {
                    let late = cancel.replace(cancelled());
                    drop(state);
                    if let Some(late) = late {
                        late.cancel();
                    }
                    return None;
                }
                Some((
                    *token,
                    cancel
                        .get_or_insert_with(|| self.service.child_token())
                        .clone(),
                ))
            }
            _ => None,
        }
    }

    /// The cancellation token of tenure `token`: the live one's if it is live, else an already
    /// cancelled token.
    #[must_use]
    pub fn cancellation_of(&self, token: FencingToken) -> CancellationToken {
        match self.tenure() {
            Some((live, cancel)) if live == token => cancel,
            _ => cancelled(),
        }
    }

    /// Tenure `token` was given up on request (the actor calls this before ending it).
    pub(crate) fn give_up(&self, token: FencingToken) {
        *self.given_up.lock().unwrap_or_else(PoisonError::into_inner) = Some(token);
    }

    /// Whether tenure `token` ended because it was given up on request (unlocked, stopped,
    /// moved away), rather than lost.
    #[must_use]
    pub fn was_given_up(&self, token: FencingToken) -> bool {
        *self.given_up.lock().unwrap_or_else(PoisonError::into_inner) == Some(token)
    }

    /// The token of the tenure believed now or, when none is, of the one that ended last (its
    /// local deadline passed, lost, given up); `None` if no tenure ever began here.
    #[must_use]
    pub fn last_token(&self) -> Option<FencingToken> {
        last_token(&self.lock())
    }

    /// Whether the actor has stopped for good.
    #[must_use]
    pub fn is_finished(&self) -> bool {
        matches!(*self.lock(), State::Finished { .. })
    }

    /// Waits until a tenure is live (`Some`) or the actor stopped (`None`).
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future only stops waiting.
    pub async fn settled(&self) -> Option<(FencingToken, CancellationToken)> {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            // Registered before the state is read, so a change in between is not missed.
            changed.as_mut().enable();
            if let Some(held) = self.tenure() {
                return Some(held);
            }
            if self.is_finished() || self.service.is_cancelled() {
                return None;
            }
            tokio::select! {
                () = changed => {}
                () = self.service.cancelled() => return None,
            }
        }
    }
}

impl Belief {
    /// Begins a piece of work under the live tenure: `None` when no tenure is believed now or
    /// new work is refused ([`Belief::set_draining`]). The work counts as running until the
    /// guard is dropped or [`WorkGuard::finish`]ed; a hand-over waits for it before the release.
    #[must_use]
    pub fn begin_work(self: &Arc<Self>) -> Option<WorkGuard> {
        let token = self.token()?;
        self.work
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                (w & DRAINING == 0).then_some(w + 1)
            })
            .ok()?;
        Some(WorkGuard {
            belief: Arc::clone(self),
            token,
        })
    }

    /// Refuses (`true`) or accepts again (`false`) new work.
    pub fn set_draining(&self, on: bool) {
        if on {
            self.work.fetch_or(DRAINING, Ordering::AcqRel);
        } else {
            self.work.fetch_and(!DRAINING, Ordering::AcqRel);
        }
    }

    /// Whether new work is refused.
    #[must_use]
    pub fn is_draining(&self) -> bool {
        self.work.load(Ordering::Acquire) & DRAINING != 0
    }

    /// How many pieces of work are running.
    #[must_use]
    pub fn running_work(&self) -> u64 {
        self.work.load(Ordering::Acquire) & !DRAINING
    }

    /// Waits until no work is running.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future only stops waiting.
    pub async fn work_done(&self) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.running_work() == 0 {
                return;
            }
            changed.await;
        }
    }
}

/// One piece of work running under a tenure ([`Belief::begin_work`]): a hand-over waits for
/// every guard to be dropped (or [`WorkGuard::finish`]ed) before it releases the lease.
#[derive(Debug)]
#[must_use = "the work counts as running until the guard is dropped"]
pub struct WorkGuard {
    belief: Arc<Belief>,
    token: FencingToken,
}

impl WorkGuard {
    /// The fencing token of the tenure the work began under.
    #[must_use]
    pub fn token(&self) -> FencingToken {
        self.token
    }

    /// Whether that tenure is still believed (the same as the tenure's cancellation token not
    /// being cancelled, read from the clock).
    #[must_use]
    pub fn is_held(&self) -> bool {
        self.belief.holds_token(self.token)
    }

    /// The work has finished (the same as dropping the guard).
    pub fn finish(self) {}
}

impl Drop for WorkGuard {
    fn drop(&mut self) {
        let before = self.belief.work.fetch_sub(1, Ordering::AcqRel);
        if before & !DRAINING == 1 {
            self.belief.changed.notify_waiters();
        }
    }
}

/// A token that is already cancelled.
#[must_use]
pub fn cancelled() -> CancellationToken {
    let c = CancellationToken::new();
    c.cancel();
    c
}

/// The token of the tenure `state` believes in or believed in last, if any.
fn last_token(state: &State) -> Option<FencingToken> {
    match *state {
        State::Held { token, .. } => Some(token),
        State::Waiting { last } | State::Finished { last } => last,
    }
}

fn cancel(state: State) {
    if let State::Held {
        cancel: Some(c), ..
    } = state
    {
        c.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_core::ManualClock;
    use std::time::Duration;

    fn belief() -> (Arc<Belief>, Arc<ManualClock>, CancellationToken) {
        let clock = Arc::new(ManualClock::starting_now());
        let service = CancellationToken::new();
        let b = Belief::new(service.clone(), Arc::clone(&clock) as Arc<dyn Clock>);
        (b, clock, service)
    }

    #[test]
    fn every_signal_agrees_through_a_tenure() {
        let (b, clock, _) = belief();
        assert!(!b.holds() && b.tenure().is_none());
        let deadline = clock.now() + Duration::from_secs(1);
        b.begin(FencingToken(3), deadline);
        let (token, cancel) = b.tenure().expect("live");
        assert_eq!(token, FencingToken(3));
        assert!(b.holds() && b.holds_token(token) && !cancel.is_cancelled());
        b.end();
        assert!(cancel.is_cancelled() && !b.holds() && b.token().is_none());
        assert!(b.cancellation_of(token).is_cancelled());
    }

    #[test]
    fn past_the_deadline_nothing_holds_even_before_the_actor_ends_it() {
        let (b, clock, _) = belief();
        b.begin(FencingToken(1), clock.now() + Duration::from_millis(10));
        clock.advance(Duration::from_millis(10));
        assert!(!b.holds() && b.token().is_none());
    }

    #[test]
    fn a_reader_past_the_deadline_cancels_the_token_and_the_tenure_cannot_be_renewed() {
        let (b, clock, _) = belief();
        let deadline = clock.now() + Duration::from_millis(10);
        b.begin(FencingToken(1), deadline);
        let (_, cancel) = b.tenure().expect("live");
        clock.advance(Duration::from_millis(10));
        // The actor's timer has not run yet: the reader ends the token itself.
        assert!(b.tenure().is_none());
        assert!(cancel.is_cancelled(), "the token outlived the deadline");
        assert!(b.cancellation_of(FencingToken(1)).is_cancelled());
        // A renewal that lands now must not bring the tenure back.
        assert!(!b.renewed(FencingToken(1), deadline + Duration::from_secs(1)));
        assert!(!b.holds() && b.token().is_none() && b.tenure().is_none());
    }

    #[test]
    fn a_renewal_before_the_deadline_extends_every_signal() {
        let (b, clock, _) = belief();
        let deadline = clock.now() + Duration::from_millis(10);
        b.begin(FencingToken(1), deadline);
        let (_, cancel) = b.tenure().expect("live");
        assert!(b.renewed(FencingToken(1), deadline + Duration::from_secs(1)));
        clock.advance(Duration::from_millis(500));
        assert!(b.holds() && b.tenure().is_some() && !cancel.is_cancelled());
    }

    #[test]
    fn cancelling_the_service_cancels_every_tenure_token() {
        let (b, clock, service) = belief();
        b.begin(FencingToken(1), clock.now() + Duration::from_secs(5));
        let (_, cancel) = b.tenure().expect("live");
        service.cancel();
        assert!(cancel.is_cancelled() && !b.holds());
    }

    #[tokio::test]
    async fn work_is_counted_refused_while_draining_and_waited_for() {
        let (b, clock, _) = belief();
        assert!(b.begin_work().is_none(), "no tenure, no work");
        b.begin(FencingToken(4), clock.now() + Duration::from_secs(5));
        let first = b.begin_work().expect("work");
        let second = b.begin_work().expect("work");
        assert_eq!((first.token(), b.running_work()), (FencingToken(4), 2));
        b.set_draining(true);
        assert!(
            b.is_draining() && b.begin_work().is_none(),
            "refused while draining"
        );
        first.finish();
        assert_eq!(b.running_work(), 1);
        let waiter = {
            let b = Arc::clone(&b);
            tokio::spawn(async move { b.work_done().await })
        };
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        drop(second);
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("woken")
            .expect("joined");
        b.set_draining(false);
        assert!(b.begin_work().is_some());
    }
}
