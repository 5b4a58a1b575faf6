//! What the service answers without changing anything: whether a lease is held, who holds a
//! name at the database, the database's clock, health, and the event stream.

use std::sync::{Arc, PoisonError};

use leasehold_core::{DbInstant, LeaseRecord};
use leasehold_engine::{ReadDbNow, ReadRecord};
use tokio::sync::broadcast;

use super::LeaseService;
#[cfg(doc)]
use crate::Error;
use crate::{LeaseEvent, Result};

/// How much longer than the request timeout a health probe waits for the engine.
const HEALTH_GRACE: std::time::Duration = std::time::Duration::from_millis(500);

impl LeaseService {
    /// Whether this holder holds `name` now: a memory lookup and one monotonic clock read, no
    /// IO. False at and after the local deadline even if a renewal is stuck, and false for an
    /// invalid name. Replaces `ILeaseService.hasLease`.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use leasehold::{LeaseService, LeaseTaskOptions};
    /// let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// assert!(!service.has_lease("leader"));
    /// service.start_lease_task("leader", LeaseTaskOptions::new()).await?.acquired().await?;
    /// assert!(service.has_lease("leader"));
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    #[must_use]
    pub fn has_lease(&self, name: &str) -> bool {
        self.inner.deadlines.has_lease(name)
    }

    /// Who holds `name` according to the database now, with the fencing token and end time;
    /// `None` when nobody does (never granted, released or expired). Any stored name is read,
    /// a derived row's too (`leader#ask`, `leader#next`: [`crate::derived`]), since a read
    /// cannot be taken for the row's role.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use leasehold::{LeaseService, LeaseTaskOptions};
    /// let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// assert!(service.current_holder("leader").await?.is_none());
    /// let (token, _) = service.start_lease_task("leader", LeaseTaskOptions::new()).await?.acquired().await?;
    /// let record = service.current_holder("leader").await?.expect("held");
    /// assert_eq!((&record.holder, record.token), (service.holder(), token));
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Invalid`], [`Error::Store`], [`Error::ShutDown`].
    pub async fn current_holder(&self, name: &str) -> Result<Option<LeaseRecord>> {
        // A read cannot be taken for a derived row's role: any stored name is read, a derived
        // one (`leader#ask`, `leader#next`) included.
        let key = leasehold_core::LeaseKey::from_stored(self.namespace().as_str(), name)?;
        let record = self.inner.engine.send(ReadRecord { key }).await??;
        Ok(record.filter(|r| r.held))
    }

    /// The database's clock, which decides every expiry.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// assert!(service.db_now().await?.as_millis() > 0);
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Store`], [`Error::ShutDown`].
    pub async fn db_now(&self) -> Result<DbInstant> {
        Ok(self.inner.engine.send(ReadDbNow).await??)
    }

    /// A health check for a liveness or readiness probe: whether the engine answers, whether
    /// the database answers a read of its clock (one probe through the engine, bounded by the
    /// request timeout and a grace of 500 ms), the age of the last grant or confirmed renewal,
    /// and how many leases are held. Renewals are overdue when leases are held and the last
    /// confirmation is older than the service's renew interval plus its request timeout.
    /// Never fails: every problem is a [`HealthReason`](crate::health::HealthReason).
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use leasehold::LeaseService;
    /// use leasehold::health::DatabaseProbe;
    /// let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// let health = service.health().await;
    /// assert!(health.is_ready(), "{health}");
    /// assert!(matches!(health.database, DatabaseProbe::Reachable { .. }));
    /// assert_eq!((health.leases_held, health.last_renewal_age), (0, None));
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn health(&self) -> crate::Health {
        use crate::health::{DatabaseProbe, HealthReason};
        let clock = Arc::clone(self.inner.registry.clock());
        let mut health = crate::Health {
            verdict: crate::health::Verdict::Healthy,
            reasons: Vec::new(),
            engine_alive: false,
            database: DatabaseProbe::NotProbed,
            last_renewal_age: None,
            leases_held: 0,
            clock_rate: None,
            wakeups: self.inner.registry.wakeups(),
        };
        if let Some(w) = &health.wakeups {
            leasehold_engine::metrics::doorbell_pushed(!matches!(
                w,
                leasehold_storage::doorbell::Wakeups::Polling { .. }
            ));
        }
        if self.is_shut_down() {
            health.reasons.push(HealthReason::ShutDown);
            return health.decide();
        }
        let waited = self.inner.config.request_timeout() + HEALTH_GRACE;
        let t0 = clock.now();
        match tokio::time::timeout(waited, self.inner.engine.send(ReadDbNow)).await {
            Err(_) => health
                .reasons
                .push(HealthReason::EngineUnresponsive { waited }),
            Ok(Err(_)) => health.reasons.push(HealthReason::ShutDown),
            Ok(Ok(answer)) => {
                health.engine_alive = true;
                health.database = match answer {
                    Ok(_) => DatabaseProbe::Reachable {
                        round_trip: clock.now().saturating_duration_since(t0),
                    },
                    Err(e) => {
                        let error = e.to_string();
                        health.reasons.push(HealthReason::DatabaseUnreachable {
                            error: error.clone(),
                        });
                        DatabaseProbe::Unreachable { error }
                    }
                };
            }
        }
        let now = clock.now();
        health.leases_held = self.inner.registry.held_count();
        health.last_renewal_age = self
            .inner
            .registry
            .last_confirmed()
            .map(|at| now.saturating_duration_since(at));
        let limit = self.inner.config.renew_interval() + self.inner.config.request_timeout();
        if let Some(age) = health.last_renewal_age
            && health.leases_held > 0
            && age > limit
        {
            health
                .reasons
                .push(HealthReason::RenewalsOverdue { age, limit });
        }
        health.clock_rate = *self
            .inner
            .clock_rate
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(report) = health.clock_rate
            && !report.verdict.is_within()
        {
            health.reasons.push(HealthReason::ClockRate(report));
        }
        health.decide()
    }

    /// Every [`LeaseEvent`] of this service's tasks from now on, for those who prefer a stream
    /// to callbacks. A receiver more than 1024 events behind misses the oldest.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use leasehold::{EventKind, LeaseService, LeaseTaskOptions};
    /// let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// let mut events = service.subscribe();
    /// service.start_lease_task("leader", LeaseTaskOptions::new()).await?;
    /// let event = events.recv().await.expect("an event");
    /// assert_eq!(event.what, EventKind::Acquired);
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    #[must_use]
    pub fn subscribe(&self) -> broadcast::Receiver<LeaseEvent> {
        self.inner.events.subscribe()
    }
}
