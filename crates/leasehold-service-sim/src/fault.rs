//! What the fault layer does to one store call, drawn from a seeded PRNG per service.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

/// How often each fault happens, per store call (probabilities, summing to at most 1), and how
/// long the timed ones last.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultPlan {
    /// Answered after a delay below the request timeout.
    pub delay: f64,
    /// Answered after a delay beyond the request timeout (the engine should have given up).
    pub long_delay: f64,
    /// Never answered (until the caller drops it, or [`HANG_CAP`]).
    pub hang: f64,
    /// Failed at once with a `StoreError`, nothing applied.
    pub fail: f64,
    /// Applied, then the answer lost (an error returned).
    pub lose_answer: f64,
    /// Applied, then answered late (beyond the request timeout).
    pub slow_answer: f64,
    /// Answered with a timeout now, and applied later, after the engine abandoned it.
    pub apply_late: f64,
    /// SQL stores: passed through while another session holds the row of a key the call
    /// touches locked (`SELECT … FOR UPDATE`; SQLite: `BEGIN IMMEDIATE`) for a drawn time.
    pub row_locked: f64,
    /// SQL stores: passed through while another session has granted a key the call touches
    /// (inserted its row, or taken over a row that is not live) and not yet committed; it
    /// commits or rolls back after a drawn time. The row's holder is the calling service's own
    /// holder id (then the session is that service's own abandoned grant: once committed, it
    /// releases the tenure it wrote, as the engine releases a grant nobody waited for) or
    /// another one.
    pub uncommitted: f64,
    /// How long another session's transaction stays open once the call is sent (drawn
    /// uniformly): shorter than the engine's patience, the call's answer is awaited; longer,
    /// the engine gives the call up while its statement still waits (and commits) inside the
    /// database.
    pub session_hold: Range<Duration>,
    /// How often another session's uncommitted grant is to the calling service's own holder
    /// id (else to another holder).
    pub session_own: f64,
    /// How often another session's uncommitted grant commits (else it rolls back).
    pub session_commits: f64,
    /// The request timeout of the services, which "short" and "long" are measured against.
    pub request_timeout: Duration,
}

impl FaultPlan {
    /// A plan with no fault at all.
    #[must_use]
    pub fn none(request_timeout: Duration) -> Self {
        Self {
            delay: 0.0,
            long_delay: 0.0,
            hang: 0.0,
            fail: 0.0,
            lose_answer: 0.0,
            slow_answer: 0.0,
            apply_late: 0.0,
            row_locked: 0.0,
            uncommitted: 0.0,
            session_hold: request_timeout / 10..request_timeout * 3,
            session_own: 0.5,
            session_commits: 0.5,
            request_timeout,
        }
    }

    /// The default mix: about one call in six is faulty.
    #[must_use]
    pub fn standard(request_timeout: Duration) -> Self {
        Self {
            delay: 0.06,
            long_delay: 0.01,
            hang: 0.01,
            fail: 0.03,
            lose_answer: 0.02,
            slow_answer: 0.02,
            apply_late: 0.02,
            ..Self::none(request_timeout)
        }
    }

    /// The standard mix plus statements stalled inside the database by other sessions (about
    /// one call in sixteen), for the SQL stores.
    #[must_use]
    pub fn standard_sql(request_timeout: Duration) -> Self {
        Self {
            row_locked: 0.03,
            uncommitted: 0.03,
            ..Self::standard(request_timeout)
        }
    }

    /// The longest a statement may reach the store after it was sent: a long delay or a late
    /// application (up to four request timeouts), or a stall beside another session (up to the
    /// longest hold). A renewal sent while its holder still believed can land that late, after
    /// the holder stopped believing, and extend the row by its ttl from then.
    #[must_use]
    pub fn longest_late(&self) -> Duration {
        let mut late = Duration::ZERO;
        if self.long_delay > 0.0 || self.apply_late > 0.0 {
            late = self.request_timeout.mul_f64(LONG.end);
        }
        if self.row_locked > 0.0 || self.uncommitted > 0.0 {
            late = late.max(self.session_hold.end);
        }
        late
    }
}

/// A hang ends after this long with an error, so that a caller without a bound shows up as a
/// call-bound violation instead of stalling the run.
pub const HANG_CAP: Duration = Duration::from_secs(4);

/// A long delay, a slow answer or a late application, in request timeouts.
const LONG: std::ops::Range<f64> = 1.2..4.0;

/// The fault drawn for one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Pass the call through.
    None,
    /// Wait, then pass it through.
    Delay(Duration),
    /// Wait (until dropped, or [`HANG_CAP`]).
    Hang,
    /// Fail at once.
    Fail,
    /// Apply, then fail.
    LoseAnswer,
    /// Apply, then wait before answering.
    SlowAnswer(Duration),
    /// Answer `TimedOut` now; apply after the delay.
    ApplyLate(Duration),
    /// Another session holds the row locked for the time; pass the call through meanwhile.
    RowLocked(Duration),
    /// Another session grants the row uncommitted (to the caller's holder id when `own`), then
    /// commits (when `commit`) or rolls back after `hold`; pass the call through meanwhile.
    Uncommitted {
        /// How long the other session's transaction stays open once the call is sent.
        hold: Duration,
        /// The row's holder is the calling service's holder id.
        own: bool,
        /// The other session commits (else it rolls back).
        commit: bool,
    },
}

/// How many faults of each kind were injected.
#[derive(Debug, Default)]
pub struct FaultCounts {
    /// Calls seen.
    pub calls: AtomicU64,
    /// Delayed calls (short or long).
    pub delayed: AtomicU64,
    /// Hung calls.
    pub hung: AtomicU64,
    /// Failed calls.
    pub failed: AtomicU64,
    /// Applied calls whose answer was lost.
    pub lost_answers: AtomicU64,
    /// Applied calls answered late.
    pub slow_answers: AtomicU64,
    /// Calls applied after they were answered with a timeout.
    pub applied_late: AtomicU64,
    /// Answers the put-back store bug falsified.
    pub lies: AtomicU64,
    /// Calls passed through while another session held their row locked.
    pub row_locks: AtomicU64,
    /// Calls passed through beside another session's uncommitted grant of their row.
    pub uncommitted: AtomicU64,
    /// Other sessions that could not start (the call was passed through without one).
    pub sessions_failed: AtomicU64,
    /// Batched grants (`begin_tenure_many`) passed to the inner store.
    pub batched_grants: AtomicU64,
}

impl FaultCounts {
    /// Faults injected in all (every kind).
    #[must_use]
    pub fn injected(&self) -> u64 {
        [
            &self.delayed,
            &self.hung,
            &self.failed,
            &self.lost_answers,
            &self.slow_answers,
            &self.applied_late,
            &self.row_locks,
            &self.uncommitted,
        ]
        .iter()
        .map(|a| a.load(Ordering::Relaxed))
        .sum()
    }

    /// A one-line summary.
    #[must_use]
    pub fn summary(&self) -> String {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        format!(
            "calls={} delayed={} hung={} failed={} lost_answers={} slow_answers={} applied_late={} row_locks={} uncommitted={} sessions_failed={} batched_grants={} lies={}",
            g(&self.calls),
            g(&self.delayed),
            g(&self.hung),
            g(&self.failed),
            g(&self.lost_answers),
            g(&self.slow_answers),
            g(&self.applied_late),
            g(&self.row_locks),
            g(&self.uncommitted),
            g(&self.sessions_failed),
            g(&self.batched_grants),
            g(&self.lies)
        )
    }
}

/// The seeded source of faults of one service.
#[derive(Debug)]
pub struct FaultDice {
    rng: Mutex<StdRng>,
    plan: FaultPlan,
    /// Off once the run winds down, so the last state settles.
    enabled: AtomicBool,
    /// What was injected.
    pub counts: FaultCounts,
}

impl FaultDice {
    /// Dice for one service.
    #[must_use]
    pub fn new(seed: u64, plan: FaultPlan) -> Self {
        Self {
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
            plan,
            enabled: AtomicBool::new(true),
            counts: FaultCounts::default(),
        }
    }

    /// Stops injecting faults.
    pub fn disable(&self) {
        self.enabled.store(false, Ordering::SeqCst);
    }

    /// A number in `0..1` from the service's PRNG (for the put-back bugs).
    pub fn chance(&self) -> f64 {
        self.rng
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .random()
    }

    /// The fault for the next call.
    pub fn draw(&self) -> Fault {
        self.counts.calls.fetch_add(1, Ordering::Relaxed);
        if !self.enabled.load(Ordering::SeqCst) {
            return Fault::None;
        }
        let p = &self.plan;
        let timeout = p.request_timeout;
        let mut rng = self.rng.lock().unwrap_or_else(PoisonError::into_inner);
        let x: f64 = rng.random();
        let short = |rng: &mut StdRng| timeout.mul_f64(rng.random_range(0.05..0.8));
        let long = |rng: &mut StdRng| timeout.mul_f64(rng.random_range(LONG));
        let hold = p.session_hold.clone();
        let held = |rng: &mut StdRng| {
            if hold.is_empty() {
                hold.start
            } else {
                rng.random_range(hold.clone())
            }
        };
        let mut edge = 0.0;
        let mut next = |q: f64| {
            edge += q;
            x < edge
        };
        let (fault, count) = if next(p.delay) {
            (Fault::Delay(short(&mut rng)), &self.counts.delayed)
        } else if next(p.long_delay) {
            (Fault::Delay(long(&mut rng)), &self.counts.delayed)
        } else if next(p.hang) {
            (Fault::Hang, &self.counts.hung)
        } else if next(p.fail) {
            (Fault::Fail, &self.counts.failed)
        } else if next(p.lose_answer) {
            (Fault::LoseAnswer, &self.counts.lost_answers)
        } else if next(p.slow_answer) {
            (Fault::SlowAnswer(long(&mut rng)), &self.counts.slow_answers)
        } else if next(p.apply_late) {
            (Fault::ApplyLate(long(&mut rng)), &self.counts.applied_late)
        } else if next(p.row_locked) {
            // Counted by the fault layer once the other session is open.
            return Fault::RowLocked(held(&mut rng));
        } else if next(p.uncommitted) {
            return Fault::Uncommitted {
                hold: held(&mut rng),
                own: rng.random_bool(p.session_own.clamp(0.0, 1.0)),
                commit: rng.random_bool(p.session_commits.clamp(0.0, 1.0)),
            };
        } else {
            return Fault::None;
        };
        count.fetch_add(1, Ordering::Relaxed);
        fault
    }
}
