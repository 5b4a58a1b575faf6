//! Scheduled run-once jobs, reached through [`LeaseService::jobs`] → [`Jobs`]: each fire of a
//! schedule runs once across every process (`jobs/once.rs`; the schedule in
//! `jobs/once/schedule.rs`).

pub(crate) mod once;

pub use once::{DEFAULT_RUN_TERM, FireContext, FireOutcome, Schedule};

use crate::LeaseService;

/// Once-per-fire scheduled jobs: [`Jobs::run_once`] runs a job once per fire of its
/// [`Schedule`] across every process that asks, the fire being decided by the database's
/// clock, and runs a fire again only when its run ended before recording it (a crash: at least
/// once); ShedLock's purpose, without its `lockAtLeastFor` guess.
///
/// # One lock per job, kept until the next fire
/// Job `name` is the lock `{name}#once` in the service's namespace, a plain lock of the
/// engine: its lease machine decides the run's tenure as any other, and belief is its one
/// cancellation token. An ask ([`Jobs::run_once`]):
/// 1. reads the job's row, and tries to take the lock if nobody holds it (one attempt). A
///    held row is [`FireOutcome::Claimed`]: a run is going on, or the due fire is done;
/// 2. once granted, reads the database's clock: the fire due then
///    ([`Schedule::fire_at_or_before`]) is the one this tenure runs;
/// 3. runs the job with a [`FireContext`] (the fire, the tenure's fencing token and its
///    cancellation token) while asking the lock's actor to renew the tenure every `term / 3`:
///    its machine renews it, ends it at the local deadline when renewals fail, and cancels the
///    token then;
/// 4. when the job returns `Ok`, records the fire done by keeping the row held, by the
///    database's clock, until the next fire (the release of a lock that must last at least
///    until then, ShedLock's `lockAtLeastFor`, sent only while the tenure is live and no
///    renewal is in flight, since a renewal landing after it would cut it short); when it
///    returns `Err`, releases the row, so the fire is due again at the next ask.
///
/// Why that is enough: a fire `F` done before a grant at database time `g` left the row held
/// until `F + period` at least, so a grant at `g` is only possible when every fire after
/// `g − period` is undone, and the fire read after the grant is one of them. No second record
/// is needed, and no SQL beyond the lock's own statements.
///
/// # What the ticker decides
/// Only when to ask: a ticker early by seconds finds the previous fire's row held (done) and
/// is told until when ([`FireOutcome::ask_again_at`]); one late by seconds finds the due fire
/// held by its run or done. Missed fires are not caught up: an ask runs the latest due fire
/// only, and fires that fell due while a run was going on are the one run that follows it.
///
/// The handle is borrowed from the service by [`LeaseService::jobs`]; cheap to make.
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use leasehold::jobs::{FireOutcome, Schedule};
/// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
/// let every_minute = Schedule::every(Duration::from_secs(60))?;
/// let outcome = service
///     .jobs()
///     .run_once("report", &every_minute, |_fire| async { Ok::<_, std::io::Error>(()) })
///     .await?;
/// assert!(matches!(outcome, FireOutcome::Ran { .. }));
/// # service.shutdown().await?; Ok(()) }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Jobs<'a> {
    service: &'a LeaseService,
}

impl LeaseService {
    /// The handle on this service's run-once jobs: see [`Jobs`].
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// let _jobs = service.jobs();
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    #[must_use]
    pub fn jobs(&self) -> Jobs<'_> {
        Jobs { service: self }
    }
}

impl Jobs<'_> {
    /// The next fire of `schedule` after now, by the database's clock: when a ticker should ask
    /// next.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use std::time::Duration;
    /// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// let hourly = leasehold::jobs::Schedule::every(Duration::from_secs(3600))?;
    /// let next = service.jobs().next_fire(&hourly).await?;
    /// assert!(next > service.db_now().await?);
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`crate::Error::Store`] when the database's clock cannot be read;
    /// [`crate::Error::ShutDown`].
    pub async fn next_fire(self, schedule: &Schedule) -> crate::Result<leasehold_core::DbInstant> {
        Ok(schedule.next_fire(self.service.db_now().await?))
    }
}
