//! One lease's operations on [`LocalLeases`]: create (with a sync, async or ready-made
//! listener), renew, cancel, and the time remaining.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::{LocalLeases, MAX_PERIOD};
use crate::{ExpiredLease, Listener, LocalLeaseError, Result};

impl LocalLeases {
    /// Creates a lease: unless renewed or cancelled, `listener` is called once `period` has passed.
    /// Returns the deadline.
    ///
    /// See [`create_async`](Self::create_async) for an async listener.
    ///
    /// # Errors
    ///
    /// - [`LocalLeaseError::InvalidName`] for an empty name;
    /// - [`LocalLeaseError::InvalidPeriod`] for a zero period or one above [`MAX_PERIOD`];
    /// - [`LocalLeaseError::AlreadyExists`] when a lease of that name is held (including one that
    ///   has expired but whose listener has not been dispatched yet);
    /// - [`LocalLeaseError::CapacityExceeded`] past about a billion leases;
    /// - [`LocalLeaseError::Closed`] after [`close`](Self::close).
    ///
    /// On error the listener is dropped without being called.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use leasehold_local::{LocalLeaseError, LocalLeases};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), LocalLeaseError> {
    /// let leases = LocalLeases::new();
    /// leases.create("cursor-1", Duration::from_secs(30), |lease| println!("{} expired", lease.name()))?;
    /// assert!(matches!(
    ///     leases.create("cursor-1", Duration::from_secs(30), |_| {}),
    ///     Err(LocalLeaseError::AlreadyExists { .. })
    /// ));
    /// assert!(matches!(
    ///     leases.create("cursor-2", Duration::ZERO, |_| {}),
    ///     Err(LocalLeaseError::InvalidPeriod { .. })
    /// ));
    /// # Ok(())
    /// # }
    /// ```
    pub fn create(
        &self,
        name: &str,
        period: Duration,
        listener: impl FnOnce(ExpiredLease) + Send + 'static,
    ) -> Result<Instant> {
        self.create_with(name, period, Listener::from_fn(listener))
    }

    /// Creates a lease whose listener is async; the future it returns runs on its own task.
    ///
    /// # Errors
    ///
    /// As [`create`](Self::create).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use leasehold_local::LocalLeases;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), leasehold_local::LocalLeaseError> {
    /// let leases = LocalLeases::new();
    /// let (tx, rx) = tokio::sync::oneshot::channel();
    /// leases.create_async("session", Duration::from_secs(30), |lease| async move {
    ///     tokio::time::sleep(Duration::from_secs(1)).await; // e.g. flush, then close
    ///     let _ = tx.send(lease.name().to_owned());
    /// })?;
    /// assert_eq!(rx.await.as_deref(), Ok("session"));
    /// # Ok(())
    /// # }
    /// ```
    pub fn create_async<F, Fut>(&self, name: &str, period: Duration, listener: F) -> Result<Instant>
    where
        F: FnOnce(ExpiredLease) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.create_with(name, period, Listener::from_async(listener))
    }

    /// Creates a lease with a ready-made [`Listener`] (sync or async).
    ///
    /// # Errors
    ///
    /// As [`create`](Self::create).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use leasehold_local::{Listener, LocalLeases};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), leasehold_local::LocalLeaseError> {
    /// let leases = LocalLeases::new();
    /// let listener = Listener::from_fn(|lease| println!("{} expired", lease.name()));
    /// leases.create_with("slot", Duration::from_secs(5), listener)?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn create_with(&self, name: &str, period: Duration, listener: Listener) -> Result<Instant> {
        validate(name, period)?;
        let shared = self.shared();
        // The timer may arm a tokio `Sleep`, which must be made inside its runtime.
        let _in_runtime = shared.runtime.enter();
        let outcome = {
            let mut state = shared.lock();
            state.create(name, period, listener, shared.clock.now())
        };
        outcome.map_err(|(err, listener)| {
            drop(listener); // outside the lock
            err
        })
    }

    /// Renews a lease for its full period from now. Returns the new deadline.
    ///
    /// # Errors
    ///
    /// - [`LocalLeaseError::Expired`] when the deadline has passed (even if the listener has not
    ///   run yet: it will, exactly once);
    /// - [`LocalLeaseError::Unknown`] when no such lease is held (never created, cancelled, or
    ///   expired and dispatched);
    /// - [`LocalLeaseError::Closed`] after [`close`](Self::close).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use leasehold_local::LocalLeases;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), leasehold_local::LocalLeaseError> {
    /// let leases = LocalLeases::new();
    /// let first = leases.create("session", Duration::from_secs(10), |_| {})?;
    /// tokio::time::sleep(Duration::from_secs(4)).await;
    /// let second = leases.renew("session")?;
    /// assert_eq!(second - first, Duration::from_secs(4));
    /// # Ok(())
    /// # }
    /// ```
    pub fn renew(&self, name: &str) -> Result<Instant> {
        let shared = self.shared();
        let _in_runtime = shared.runtime.enter();
        let mut state = shared.lock();
        state.renew(name, shared.clock.now())
    }

    /// Removes a lease without calling its listener (which is dropped).
    ///
    /// # Errors
    ///
    /// - [`LocalLeaseError::Expired`] when the deadline has passed: the lease then belongs to its
    ///   listener, which runs (exactly once) as if `cancel` had not been called;
    /// - [`LocalLeaseError::Unknown`] when no such lease is held;
    /// - [`LocalLeaseError::Closed`] after [`close`](Self::close).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use leasehold_local::{LocalLeaseError, LocalLeases};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), LocalLeaseError> {
    /// let leases = LocalLeases::new();
    /// leases.create("cursor", Duration::from_secs(10), |_| unreachable!("cancelled"))?;
    /// leases.cancel("cursor")?;
    /// assert!(matches!(leases.cancel("cursor"), Err(LocalLeaseError::Unknown { .. })));
    /// # Ok(())
    /// # }
    /// ```
    pub fn cancel(&self, name: &str) -> Result<()> {
        let shared = self.shared();
        let _in_runtime = shared.runtime.enter();
        let listener = {
            let mut state = shared.lock();
            state.cancel(name, shared.clock.now())?
        };
        drop(listener); // outside the lock
        Ok(())
    }

    /// How long until the lease's deadline (always above zero).
    ///
    /// # Errors
    ///
    /// [`LocalLeaseError::Expired`], [`LocalLeaseError::Unknown`] or [`LocalLeaseError::Closed`],
    /// as for [`renew`](Self::renew).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use leasehold_local::LocalLeases;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), leasehold_local::LocalLeaseError> {
    /// let leases = LocalLeases::new();
    /// leases.create("slot", Duration::from_secs(10), |_| {})?;
    /// tokio::time::sleep(Duration::from_secs(3)).await;
    /// assert_eq!(leases.remaining("slot")?, Duration::from_secs(7));
    /// # Ok(())
    /// # }
    /// ```
    pub fn remaining(&self, name: &str) -> Result<Duration> {
        let shared = self.shared();
        let state = shared.lock();
        state.remaining(name, shared.clock.now())
    }
}

fn validate(name: &str, period: Duration) -> Result<()> {
    if name.is_empty() {
        return Err(LocalLeaseError::InvalidName {
            name: String::new(),
            reason: "it is empty",
        });
    }
    if period.is_zero() || period > MAX_PERIOD {
        return Err(LocalLeaseError::InvalidPeriod {
            period,
            max: MAX_PERIOD,
        });
    }
    Ok(())
}
