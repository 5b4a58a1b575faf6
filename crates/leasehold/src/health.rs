//! [`Health`]: what [`LeaseService::health`](crate::LeaseService::health) reports, shaped for a
//! liveness and a readiness probe.

/// Whether a service's waiters are woken by its doorbell or poll ([`Health::wakeups`]).
pub use leasehold_storage::doorbell::Wakeups;

use std::fmt;
use std::time::Duration;

/// The overall answer of a health check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Verdict {
    /// Alive and ready: the engine answers, the database is reachable, renewals are on time.
    Healthy,
    /// Alive but not ready: the engine answers, but the database is unreachable, renewals are
    /// late, or the background clock-rate check could not show the clocks agree. A readiness probe should fail; restarting the
    /// process would not help.
    Degraded,
    /// Not alive: the service was shut down, or its engine does not answer. A liveness probe
    /// should fail.
    Dead,
}

/// Why a health check is not [`Verdict::Healthy`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum HealthReason {
    /// The service was shut down (or its engine thread stopped).
    ShutDown,
    /// The engine did not answer within `waited` (the request timeout and a grace of 500 ms).
    EngineUnresponsive {
        /// How long the probe waited.
        waited: Duration,
    },
    /// The database did not answer the probe (`SELECT` of its clock), or answered an error.
    DatabaseUnreachable {
        /// What went wrong.
        error: String,
    },
    /// Leases are held but the last grant or confirmed renewal is older than the service's
    /// renew interval plus its request timeout: renewals are failing or slow.
    RenewalsOverdue {
        /// The age of the last grant or confirmed renewal.
        age: Duration,
        /// The age beyond which renewals are overdue.
        limit: Duration,
    },
    /// The background clock-rate check could not show that the application's and the
    /// database's clocks run at rates within `safety_margin / term` (assumption 2 of
    /// `docs/semantics.md`): shown too large, or not shown within (inconclusive).
    ClockRate(crate::clock::ClockRateReport),
}

impl fmt::Display for HealthReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ShutDown => f.write_str("the service is shut down"),
            Self::EngineUnresponsive { waited } => {
                write!(f, "the engine did not answer within {waited:?}")
            }
            Self::DatabaseUnreachable { error } => {
                write!(f, "the database is unreachable: {error}")
            }
            Self::ClockRate(report) => write!(f, "clock rate: {report}"),
            Self::RenewalsOverdue { age, limit } => write!(
                f,
                "leases are held but the last confirmed renewal is {age:?} old (more than {limit:?})"
            ),
        }
    }
}

/// The answer of the database probe of a health check.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DatabaseProbe {
    /// The database answered, in `round_trip` (through the engine).
    Reachable {
        /// The probe's round trip.
        round_trip: Duration,
    },
    /// The database did not answer in time or answered an error.
    Unreachable {
        /// What went wrong.
        error: String,
    },
    /// Not probed: the engine is shut down or does not answer.
    NotProbed,
}

/// What [`LeaseService::health`](crate::LeaseService::health) found: a [`Verdict`], the
/// [`HealthReason`]s behind it, and the figures it was decided from.
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
/// use leasehold::{LeaseService, LeaseTaskOptions};
/// use leasehold::health::Verdict;
/// let service = LeaseService::builder("sqlite::memory:").build().await?;
/// service.start_lease_task("leader", LeaseTaskOptions::new()).await?.acquired().await?;
/// let health = service.health().await;
/// assert_eq!(health.verdict, Verdict::Healthy, "{health}");
/// assert!(health.is_live() && health.is_ready() && health.reasons.is_empty());
/// assert_eq!(health.leases_held, 1);
/// service.shutdown().await?;
/// assert!(!service.health().await.is_live());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Health {
    /// The overall answer.
    pub verdict: Verdict,
    /// Why it is not [`Verdict::Healthy`] (empty when it is).
    pub reasons: Vec<HealthReason>,
    /// Whether the engine answered the probe.
    pub engine_alive: bool,
    /// The database probe's answer.
    pub database: DatabaseProbe,
    /// The time since the last grant or confirmed renewal of any lease of this service; `None`
    /// before the first.
    pub last_renewal_age: Option<Duration>,
    /// How many leases (lease tasks, sharded names, locks, holds) this service holds now.
    pub leases_held: usize,
    /// The last result of the background clock-rate check, when it is on
    /// ([`LeaseServiceBuilder::check_clock_rate`](crate::LeaseServiceBuilder::check_clock_rate))
    /// and has covered its window once.
    pub clock_rate: Option<crate::clock::ClockRateReport>,
    /// Whether this service's waiters (locks, lease tasks, shards) are woken by the doorbell's
    /// rings or poll: [`Wakeups::Polling`]
    /// names why (for example a pooler in transaction mode without a doorbell URL). Polling is
    /// not a health reason: waiters still get every lease, a poll interval later. `None`
    /// without a doorbell (in-memory stores). Also published as the gauge
    /// `leasehold_doorbell_pushed` (1 or 0) at each health check.
    pub wakeups: Option<crate::health::Wakeups>,
}

impl Health {
    /// For a liveness probe: false only when the service is shut down or its engine does not
    /// answer (restarting the process may help).
    #[must_use]
    pub fn is_live(&self) -> bool {
        self.verdict != Verdict::Dead
    }

    /// For a readiness probe: true only when [`Verdict::Healthy`].
    #[must_use]
    pub fn is_ready(&self) -> bool {
        self.verdict == Verdict::Healthy
    }

    /// Decides the verdict from the reasons: any reason of a dead engine makes it
    /// [`Verdict::Dead`], any other [`Verdict::Degraded`].
    pub(crate) fn decide(mut self) -> Self {
        self.verdict = if self.reasons.iter().any(|r| {
            matches!(
                r,
                HealthReason::ShutDown | HealthReason::EngineUnresponsive { .. }
            )
        }) {
            Verdict::Dead
        } else if self.reasons.is_empty() {
            Verdict::Healthy
        } else {
            Verdict::Degraded
        };
        self
    }
}

impl fmt::Display for Health {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {} leases held", self.verdict, self.leases_held)?;
        if let Some(age) = self.last_renewal_age {
            write!(f, ", last confirmed renewal {age:?} ago")?;
        }
        if let DatabaseProbe::Reachable { round_trip } = self.database {
            write!(f, ", database round trip {round_trip:?}")?;
        }
        if let Some(crate::health::Wakeups::Polling { reason }) = &self.wakeups {
            write!(f, ", waiters poll ({reason})")?;
        }
        for reason in &self.reasons {
            write!(f, "; {reason}")?;
        }
        Ok(())
    }
}
