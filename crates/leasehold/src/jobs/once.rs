//! A job's fire run once: [`Jobs::run_once`](crate::Jobs::run_once), [`FireContext`], [`FireOutcome`]; the
//! protocol is on [`crate::Jobs`].

mod schedule;

use std::sync::Arc;
use std::time::Duration;

use leasehold_core::{DbInstant, FencingToken, HolderId, LeaseKey, LeaseName, ValidationError};
use leasehold_engine::{Belief, ReadRecord};
use tokio_util::sync::CancellationToken;

pub use schedule::{DEFAULT_RUN_TERM, Schedule};

#[cfg(doc)]
use crate::Error;
use crate::LockGuard;
use crate::locks::{LockOutcome, hold_config, lock_config, release_tenure};
use crate::{Jobs, LeaseService, Result};

/// Added to the time a done fire's row stays held: the database's clock and the run's term are
/// counted in whole milliseconds, each truncated, so the row ends a few of them after the next
/// fire rather than a fraction of one before it.
const ROUNDING: Duration = Duration::from_millis(5);

/// What a job is given for the fire it runs: the fire, the tenure's fencing token and its
/// belief.
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
/// use std::time::Duration;
/// use leasehold::LeaseService;
/// use leasehold::jobs::{FireContext, Schedule};
/// async fn compact(fire: FireContext) -> Result<u32, std::io::Error> {
///     let mut done = 0;
///     for _chunk in 0..3 {
///         // Stop between chunks once the run's tenure has ended here: another process may be
///         // running this fire again by now.
///         if fire.cancellation_token().is_cancelled() {
///             break;
///         }
///         // ... write the chunk, admitting `fire.token()` where it is written ...
///         done += 1;
///     }
///     Ok(done)
/// }
/// let service = LeaseService::builder("sqlite::memory:").build().await?;
/// let daily = Schedule::every(Duration::from_secs(86_400))?.offset(Duration::from_secs(7200))?;
/// let outcome = service.jobs().run_once("compact", &daily, compact).await?;
/// assert!(matches!(outcome, leasehold::jobs::FireOutcome::Ran { output: 3, .. }));
/// # service.shutdown().await?; Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct FireContext {
    fire: DbInstant,
    next: DbInstant,
    token: FencingToken,
    key: LeaseKey,
    belief: Arc<Belief>,
}

impl FireContext {
    /// The fire being run, on the database's clock: the same instant in every process.
    #[must_use]
    pub fn fire(&self) -> DbInstant {
        self.fire
    }

    /// The fire after this one: a run of this fire that returns `Ok` keeps every other process
    /// from running the job again until then.
    #[must_use]
    pub fn next_fire(&self) -> DbInstant {
        self.next
    }

    /// The run's fencing token: every run of the job, re-runs of a fire included, has a
    /// larger one than the runs before it. Admit effects with it ([`crate::store::Fence::admit`],
    /// [`crate::fencing_header`]) to make them exactly-once.
    #[must_use]
    pub fn token(&self) -> FencingToken {
        self.token
    }

    /// The job's lock (`{name}#once` in the service's namespace).
    #[must_use]
    pub fn key(&self) -> &LeaseKey {
        &self.key
    }

    /// Whether the run's tenure is live here now (memory only): false from its local deadline,
    /// when renewals failed, or once the service shut down.
    #[must_use]
    pub fn is_held(&self) -> bool {
        self.belief.holds_token(self.token)
    }

    /// The run's belief: cancelled the instant its tenure ends here (renewals failed until the
    /// local deadline, shutdown, the service dropped). Stop the job's work when it fires:
    /// another process may run the fire again from the end of the term.
    #[must_use]
    pub fn cancellation_token(&self) -> CancellationToken {
        self.belief.cancellation_of(self.token)
    }

    /// The local deadline of the run's tenure on the monotonic clock (renewed while the job
    /// runs); `None` once it has ended.
    #[must_use]
    pub fn deadline(&self) -> Option<tokio::time::Instant> {
        self.belief.deadline_of(self.token)
    }
}

/// What one [`Jobs::run_once`](crate::Jobs::run_once) came to.
#[derive(Debug)]
#[non_exhaustive]
pub enum FireOutcome<T, E> {
    /// This process ran the due fire and the job returned `Ok`.
    Ran {
        /// The fire that ran.
        fire: DbInstant,
        /// The fire after it.
        next: DbInstant,
        /// The run's fencing token.
        token: FencingToken,
        /// What the job returned.
        output: T,
        /// Whether the fire was recorded done: false when the run's tenure ended before the
        /// record could be made, when a renewal was left unanswered, or when the record failed
        /// or got no answer in time (then it may or may not have been made). Unrecorded, the
        /// fire may be run again by another process.
        recorded: bool,
    },
    /// This process ran the due fire and the job returned `Err`: the row was released, so
    /// the fire is due again at the next ask of any process (until a later fire is due).
    Failed {
        /// The fire that ran.
        fire: DbInstant,
        /// The run's fencing token.
        token: FencingToken,
        /// What the job returned.
        error: E,
    },
    /// The job's row is held: `holder` is running the due fire, or the due fire is done and
    /// the row is kept until the next one. Nothing ran here.
    Claimed {
        /// Who holds the row (this service's own holder id for a fire it did).
        holder: HolderId,
        /// The fencing token of the holding tenure.
        token: FencingToken,
        /// When the row's grant ends, by the database's clock: the next fire for a done one.
        until: DbInstant,
    },
    /// Another task of this service is running the job (or asking for it). Nothing ran here.
    HeldLocally,
}

impl<T, E> FireOutcome<T, E> {
    /// When it is worth asking again, by the database's clock: the next fire after a run, the
    /// end of the holding grant when claimed; `None` to ask again whenever (a failed run's
    /// fire is due at once; a local run's end is not known here).
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use std::time::Duration;
    /// use leasehold::LeaseService;
    /// use leasehold::jobs::Schedule;
    /// let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// let every_minute = Schedule::every(Duration::from_secs(60))?;
    /// let ok = |_| async { Ok::<_, std::io::Error>(()) };
    /// let ran = service.jobs().run_once("sweep", &every_minute, ok).await?;
    /// let next = ran.ask_again_at().expect("the next fire");
    /// let leasehold::jobs::FireOutcome::Ran { fire, .. } = ran else { unreachable!() };
    /// assert_eq!(next, every_minute.next_fire(fire));
    /// // Asked again before then: claimed until the next fire.
    /// let claimed = service.jobs().run_once("sweep", &every_minute, ok).await?;
    /// assert!(claimed.ask_again_at() >= Some(next));
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    #[must_use]
    pub fn ask_again_at(&self) -> Option<DbInstant> {
        match self {
            FireOutcome::Ran { next, .. } => Some(*next),
            FireOutcome::Claimed { until, .. } => Some(*until),
            FireOutcome::Failed { .. } | FireOutcome::HeldLocally => None,
        }
    }
}

impl Jobs<'_> {
    /// Runs `job` for the fire of `schedule` that is due now by the database's clock, unless
    /// another process (or task of this one) is running it or has done it: at most one
    /// believed run of the job at a time across every process asking with the same name in the
    /// same namespace, and a fire recorded done is never run again. Call it from a ticker of
    /// your own (any interval, any
    /// skew): the ticker decides only when to ask. How it decides is on [`Jobs`].
    ///
    /// The job runs on the caller's task under a live tenure renewed every `term / 3`
    /// ([`Schedule::term`]) by the lock's actor, asked from this call while the job runs; its
    /// [`FireContext`] carries the fire, the fencing token and the cancellation token,
    /// cancelled the instant the tenure ends here.
    ///
    /// **At least once, not exactly once.** A run that crashes, or whose tenure ends before
    /// the job returns, has not recorded its fire: another process runs the fire again once
    /// the term has lapsed (with a larger fencing token), unless a later fire is due by then;
    /// then the later one runs instead. Fence the job's effects with [`FireContext::token`]
    /// ([`crate::store::Fence`]) to make them exactly-once.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use std::time::Duration;
    /// use leasehold::LeaseService;
    /// use leasehold::jobs::{FireOutcome, Schedule};
    /// let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// let hourly = Schedule::every(Duration::from_secs(3600))?;
    /// let ran = service
    ///     .jobs().run_once("report", &hourly, |fire| async move {
    ///         println!("report for {} (token {})", fire.fire(), fire.token());
    ///         Ok::<_, std::io::Error>(())
    ///     })
    ///     .await?;
    /// assert!(matches!(ran, FireOutcome::Ran { recorded: true, .. }));
    /// // The same fire again: done, claimed until the next one.
    /// let again = service.jobs().run_once("report", &hourly, |_| async { Ok::<_, std::io::Error>(()) }).await?;
    /// assert!(matches!(again, FireOutcome::Claimed { .. }));
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Invalid`] for an empty name, a name too long for the lock name
    /// `{name}#once`, or a term too short to be renewed (as [`crate::Locks::hold`]);
    /// [`Error::KeyInUse`] when a lease task or another feature of this service uses the
    /// job's key; [`Error::Store`] (a grant made before a failure is released);
    /// [`Error::ShutDown`]. The job's own error is [`FireOutcome::Failed`].
    ///
    /// # Cancel safety
    /// Dropped before the job starts, nothing is kept (a grant is released). Dropped while the
    /// job runs (the job's future with it), the run's tenure ends and its row is released in
    /// the background, unrecorded: the fire is due again.
    pub async fn run_once<J, Fut, T, E>(
        self,
        name: &str,
        schedule: &Schedule,
        job: J,
    ) -> Result<FireOutcome<T, E>>
    where
        J: FnOnce(FireContext) -> Fut,
        Fut: Future<Output = std::result::Result<T, E>>,
    {
        let key = job_key(self.service, name)?;
        // Checked as a hold (renewed every term/3), taken as a lock renewed on request: the
        // renewals are asked for here, one at a time, so none is in flight when the fire is
        // recorded (a renewal landing after the record would cut it short).
        hold_config(schedule.run_term(), self.service.request_timeout())?;
        let config = lock_config(schedule.run_term(), self.service.request_timeout())?;
        let every = config.renew_interval();
        // One ask of this service at a time per job, from the read to the end of the run.
        let Ok(permit) = self.service.locks().queues().queue(&key).try_lock_owned() else {
            self.service.settle_lock(&key);
            return Ok(FireOutcome::HeldLocally);
        };
        // A held row is a run or a done fire, whoever holds it: read first, so that a service
        // that reclaims its own rows (`reclaim_own_leases`) does not take over its own record.
        let row = self
            .service
            .engine()
            .send(ReadRecord { key: key.clone() })
            .await??;
        if let Some(row) = row.filter(|r| r.held) {
            return Ok(FireOutcome::Claimed {
                holder: row.holder,
                token: row.token,
                until: row.until,
            });
        }
        let guard = match self.service.attempt(&key, config, permit).await?.0 {
            LockOutcome::Acquired(guard) => guard,
            LockOutcome::HeldBy {
                holder,
                token,
                until,
            } => {
                return Ok(FireOutcome::Claimed {
                    holder,
                    token,
                    until,
                });
            }
            LockOutcome::HeldLocally => return Ok(FireOutcome::HeldLocally),
        };
        // The fire is read after the grant: every fire after (grant time − period) is undone,
        // and the database's clock now is past the grant (module page). From here on, the
        // guard releases the row in the background if this future is dropped.
        let now = self.service.db_now().await?;
        let (fire, next) = (schedule.fire_at_or_before(now), schedule.next_fire(now));
        let token = guard.token();
        let (_, belief, _) = guard.tenure_parts();
        let context = FireContext {
            fire,
            next,
            token,
            key,
            belief,
        };
        let (output, settled) = renewed(&guard, every, job(context)).await;
        match output {
            Ok(output) => {
                let recorded = self.record(guard, next, settled).await;
                Ok(FireOutcome::Ran {
                    fire,
                    next,
                    token,
                    output,
                    recorded,
                })
            }
            Err(error) => {
                // Left due: a release that fails leaves the row to lapse after its term.
                let _ = guard.unlock().await;
                Ok(FireOutcome::Failed { fire, token, error })
            }
        }
    }

    /// Records the run's fire done: its row stays held until `next` by the database's clock,
    /// written only while the tenure is live (the lock's release with a minimum hold: one
    /// renewal naming the token, for the time left), and only when every renewal asked for was
    /// answered (`settled`), so no renewal sent earlier can land after it and cut it short;
    /// otherwise the row is released and the fire is due again. The database's time is read
    /// first and `next` turned into an instant on this process's monotonic clock taken after
    /// the read, so the instant is late rather than early. The machine sends a plain release
    /// instead when less than a millisecond of the minimum hold is left; the database's clock
    /// is then past `next` already (the instant is [`ROUNDING`] late), so that release ends the
    /// row after `next` too.
    async fn record(self, guard: LockGuard, next: DbInstant, settled: bool) -> bool {
        let now = if settled && guard.is_held() {
            self.service.db_now().await.ok()
        } else {
            None
        };
        let Some(now) = now else {
            let _ = guard.unlock().await;
            return false;
        };
        let read = self.service.registry().clock().now();
        let left = next.saturating_since(now);
        // A run that overran its next fire releases at once: that fire is due already.
        let not_before = (!left.is_zero()).then(|| read + left + ROUNDING);
        guard.disarm();
        let (actor, belief, limit) = guard.tenure_parts();
        release_tenure(
            limit,
            &actor,
            &belief,
            guard.key(),
            guard.token(),
            not_before,
        )
        .await
        .is_ok()
    }
}

/// Runs `job` while the run's lock is renewed every `every` (asked of the lock's actor, whose
/// machine renews it, ends it at its local deadline and cancels its token). Answers the job's
/// output and whether every renewal asked for was confirmed: a renewal still in flight when the
/// job ends is waited for, so none is outstanding after this returns unless one timed out
/// (then the actor may still be trying it, and `false` says so).
async fn renewed<O>(guard: &LockGuard, every: Duration, job: impl Future<Output = O>) -> (O, bool) {
    let mut settled = true;
    let mut job = std::pin::pin!(job);
    loop {
        tokio::select! {
            out = &mut job => return (out, settled),
            () = tokio::time::sleep(every) => {}
        }
        if !guard.is_held() {
            // Ended here (its token is cancelled): nothing left to renew.
            return (job.await, false);
        }
        let mut renewal = std::pin::pin!(guard.renew());
        tokio::select! {
            out = &mut job => {
                settled &= renewal.await.is_ok();
                return (out, settled);
            }
            answer = &mut renewal => settled &= answer.is_ok(),
        }
    }
}

/// The lock of job `name` in the service's namespace.
fn job_key(service: &LeaseService, name: &str) -> Result<LeaseKey> {
    if name.is_empty() {
        return Err(ValidationError::Empty { field: "job name" }.into());
    }
    let job = LeaseKey::new(service.namespace().clone(), LeaseName::parse(name)?);
    Ok(leasehold_core::derived::DerivedKey::job(&job)?)
}
