//! [`Elections::observe`](crate::Elections::observe): watch a name without competing for it.

use leasehold_engine::ObserveLease;
use leasehold_storage::observe::{LeaseObserver, ObserveOptions};

use crate::Elections;
use crate::Result;

impl Elections<'_> {
    /// Watches `name` (in this service's namespace) without competing for it: the returned
    /// [`LeaseObserver`] yields the current state first, then every change — holder, token,
    /// database-time end, `held` — as [`Observation`](crate::elections::Observation)s (etcd's
    /// `Election.Observe`). Polls every second; [`Elections::observe_with`](crate::Elections::observe_with) sets the poll.
    ///
    /// What is pushed and what is polled (guarantees in `docs/semantics.md`, "Observers"):
    /// on PostgreSQL grants, take-overs and releases by `LeaseService`s are pushed after their
    /// commit (their doorbells' `pg_notify`, through this service's one `LISTEN` connection);
    /// so they are on SQLite files, and on MySQL/MariaDB their releases. Everything else —
    /// renewals (the end moving), grants on MySQL/MariaDB, other writers — is seen at most one
    /// poll interval
    /// plus one read (bounded by the request timeout) after it committed, and a lapse at the
    /// end of the grant last read. A consumer that lags sees the latest state, never a queue;
    /// after a failed read ([`Observation::Unreachable`](crate::elections::Observation)) the next state
    /// read is yielded whether or not it changed. An observer opens no connection of its own,
    /// and ends (its `next` answers `None`) when the service shuts down or is dropped.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use leasehold::{LeaseService, LeaseTaskOptions};
    ///
    /// let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// let mut observer = service.elections().observe("scheduler").await?;
    /// let first = observer.next().await.expect("running");
    /// assert!(first.holder().is_none(), "nobody holds it yet");
    ///
    /// let (token, _) = service.start_lease_task("scheduler", LeaseTaskOptions::new()).await?.acquired().await?;
    /// let seen = observer.next().await.expect("running");
    /// let holder = seen.holder().expect("held");
    /// assert_eq!((&holder.holder, holder.token), (service.holder(), token));
    /// service.shutdown().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Invalid`](crate::Error::Invalid) for a bad name,
    /// [`Error::ShutDown`](crate::Error::ShutDown).
    pub async fn observe(self, name: &str) -> Result<LeaseObserver> {
        self.observe_with(name, ObserveOptions::new()).await
    }

    /// [`Elections::observe`](crate::Elections::observe) with its poll interval set by `options` (the read bound is
    /// the service's request timeout unless `options` sets a shorter one).
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use std::time::Duration;
    /// use leasehold::LeaseService;
    /// use leasehold::elections::ObserveOptions;
    /// let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// let options = ObserveOptions::new().poll(Duration::from_millis(200));
    /// let mut observer = service.elections().observe_with("scheduler", options).await?;
    /// assert!(observer.next().await.is_some());
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`Elections::observe`](crate::Elections::observe).
    pub async fn observe_with(self, name: &str, options: ObserveOptions) -> Result<LeaseObserver> {
        let key = self.service.key(name)?;
        let options =
            options.read_timeout(self.service.request_timeout().min(options.read_bound()));
        Ok(self
            .service
            .engine()
            .send(ObserveLease { key, options })
            .await?)
    }
}
