//! The `LocalLeases` handle and the task that drives its timer; one lease's operations are in
//! `service/leases.rs`.

mod leases;

use std::fmt;
use std::future::poll_fn;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use leasehold_core::{Clock, MonotonicClock};
use tokio::runtime::Handle;

use crate::state::{Removed, State};
#[cfg(doc)]
use crate::{Listener, LocalLeaseError};

/// The longest lease period accepted: one year.
///
/// The timer (tokio-util's `DelayQueue`) cannot arm anything more than about two years past its
/// start and panics if asked to; one year leaves room for the service's own lifetime.
pub const MAX_PERIOD: Duration = Duration::from_secs(365 * 24 * 60 * 60);

/// How many fired leases the driver takes out per lock acquisition.
const DISPATCH_BATCH: usize = 64;

/// What [`LocalLeases::close`] does with the leases still held.
///
/// # Examples
///
/// ```
/// use leasehold_local::{CloseMode, LocalLeases};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let leases = LocalLeases::new();
/// assert_eq!(leases.close(CloseMode::DropAll), 0);
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CloseMode {
    /// Call every remaining listener now, with [`ExpiryCause::Closed`](crate::ExpiryCause::Closed)
    /// (in deadline order, each on its own task): resources are released as if every lease had
    /// expired. HBase's `Leases.close()` does this.
    ExpireAll,
    /// Drop every remaining listener without calling it; whatever the listeners own is dropped
    /// with them. Dropping the last [`LocalLeases`] handle does this.
    DropAll,
}

/// In-process leases with expiry listeners, all on one timer.
///
/// A lease is a name, a period and a [`Listener`]. Unless it is renewed within its period, or
/// cancelled, its listener is called exactly once, on its own task, soon after the deadline.
/// The service is a cheap [`Clone`] handle; every method is synchronous and non-blocking (a short
/// critical section), so it can be called from async code, from plain threads and from actors
/// (see [`LocalLeasesActor`](crate::LocalLeasesActor)).
///
/// # Lifecycle
///
/// ## Open
/// From [`new`](Self::new) until [`close`](Self::close) or the last handle is dropped. A background
/// task on the runtime owns the timer and dispatches listeners.
///
/// ## Expired, not yet dispatched
/// Once the [`Clock`] reaches a lease's deadline the lease is decided: [`renew`](Self::renew),
/// [`cancel`](Self::cancel) and [`remaining`](Self::remaining) answer
/// [`LocalLeaseError::Expired`], and its listener runs (a few microseconds later, or as soon as the
/// runtime gets to it). After that the name is free again: [`LocalLeaseError::Unknown`].
///
/// ## Closed
/// After [`close`](Self::close) (either [`CloseMode`]), after the last handle is dropped
/// ([`CloseMode::DropAll`]), or when the runtime shuts down (listeners dropped uncalled), every
/// operation answers [`LocalLeaseError::Closed`] and the background task has ended.
///
/// # Time
///
/// Deadlines are instants of the service's [`Clock`] ([`MonotonicClock`] by default); the timer
/// is tokio's, so it follows tokio's paused time in tests. A custom clock must advance with
/// tokio's time, or listeners fire by tokio's time while `renew` judges by the clock's.
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
/// let (tx, rx) = tokio::sync::oneshot::channel();
/// leases.create("scanner-42", Duration::from_secs(60), move |lease| {
///     // close the scanner here
///     let _ = tx.send(lease.name().to_owned());
/// })?;
///
/// tokio::time::sleep(Duration::from_secs(30)).await;
/// leases.renew("scanner-42")?; // now due 60 s from here
///
/// assert_eq!(rx.await.as_deref(), Ok("scanner-42")); // the client went away
/// assert!(matches!(leases.renew("scanner-42"), Err(LocalLeaseError::Unknown { .. })));
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct LocalLeases {
    handle: Arc<LastHandle>,
}

/// ServiceCore by the handles and the driver task.
struct ServiceCore {
    state: Mutex<State>,
    clock: Box<dyn Clock>,
    runtime: Handle,
}

/// Closes the service (dropping the listeners) when the last handle goes.
struct LastHandle(Arc<ServiceCore>);

impl Drop for LastHandle {
    fn drop(&mut self) {
        self.0.close(CloseMode::DropAll);
    }
}

/// Closes the service when the driver task ends or is dropped with its runtime.
struct DriverGuard(Arc<ServiceCore>);

impl Drop for DriverGuard {
    fn drop(&mut self) {
        self.0.close(CloseMode::DropAll);
    }
}

impl ServiceCore {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing panics while the lock is held (listeners never run under it), but a poisoned
        // table is still consistent: every mutation completes before any call that could fail.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn close(&self, mode: CloseMode) -> usize {
        let Some((drained, driver)) = self.lock().close() else {
            return 0;
        };
        if let Some(waker) = driver {
            waker.wake();
        }
        let count = drained.len();
        match mode {
            CloseMode::ExpireAll => self.dispatch(drained),
            // Dropped here, outside the lock: a listener's captures may call back into us.
            CloseMode::DropAll => drop(drained),
        }
        count
    }

    fn dispatch(&self, due: Vec<Removed>) {
        for (lease, listener) in due {
            listener.dispatch(&self.runtime, lease);
        }
    }
}

/// The one task per service: waits on the timer, takes out fired leases, spawns their listeners.
///
/// Takes a [`DriverGuard`] (not just the `Arc`) so that the service closes even if the task is
/// dropped before its first poll.
async fn drive(guard: DriverGuard) {
    let shared = &guard.0;
    while let Some(due) = poll_fn(|cx| shared.lock().poll_expired(cx, DISPATCH_BATCH)).await {
        let more = due.len() == DISPATCH_BATCH;
        shared.dispatch(due);
        if more {
            // Let the listeners just spawned (and everyone else) run between batches.
            tokio::task::yield_now().await;
        }
    }
}

impl LocalLeases {
    /// A service on the current tokio runtime, timed by [`MonotonicClock`].
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime (like `tokio::spawn`); use [`on`](Self::on) to name one.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let leases = leasehold_local::LocalLeases::new();
    /// assert!(leases.is_empty());
    /// # }
    /// ```
    #[must_use]
    pub fn new() -> Self {
        Self::with_clock(MonotonicClock)
    }

    /// A service on the current tokio runtime, with deadlines read from `clock`.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime; use [`on`](Self::on) to name one.
    ///
    /// # Examples
    ///
    /// ```
    /// use leasehold_core::MonotonicClock;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let leases = leasehold_local::LocalLeases::with_clock(MonotonicClock);
    /// # drop(leases);
    /// # }
    /// ```
    #[must_use]
    pub fn with_clock(clock: impl Clock) -> Self {
        Self::on(&Handle::current(), clock)
    }

    /// A service whose timer and listeners run on `runtime`; it can then be used from any thread.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use leasehold_core::MonotonicClock;
    /// use leasehold_local::LocalLeases;
    ///
    /// let runtime = tokio::runtime::Builder::new_multi_thread().enable_time().build()?;
    /// let leases = LocalLeases::on(runtime.handle(), MonotonicClock);
    /// // No runtime context needed from here on.
    /// leases.create("reservation", Duration::from_secs(10), |_| {})?;
    /// assert_eq!(leases.len(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn on(runtime: &Handle, clock: impl Clock) -> Self {
        let state = {
            let _in_runtime = runtime.enter();
            State::new()
        };
        let shared = Arc::new(ServiceCore {
            state: Mutex::new(state),
            clock: Box::new(clock),
            runtime: runtime.clone(),
        });
        drop(runtime.spawn(drive(DriverGuard(Arc::clone(&shared)))));
        Self {
            handle: Arc::new(LastHandle(shared)),
        }
    }

    fn shared(&self) -> &ServiceCore {
        &self.handle.0
    }

    /// How many leases are held, counting expired ones whose listener has not been dispatched.
    /// Zero once closed.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), leasehold_local::LocalLeaseError> {
    /// let leases = leasehold_local::LocalLeases::new();
    /// leases.create("a", Duration::from_secs(1), |_| {})?;
    /// leases.create("b", Duration::from_secs(1), |_| {})?;
    /// assert_eq!(leases.len(), 2);
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn len(&self) -> usize {
        self.shared().lock().len()
    }

    /// Whether no lease is held.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// assert!(leasehold_local::LocalLeases::new().is_empty());
    /// # }
    /// ```
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Closes the service: every later operation answers [`LocalLeaseError::Closed`], the
    /// background task ends, and the leases still held are expired or dropped as `mode` says.
    /// Returns how many leases were held; closing again returns 0.
    ///
    /// With [`CloseMode::ExpireAll`] the listeners are spawned before `close` returns and run
    /// concurrently with the caller.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use leasehold_local::{CloseMode, ExpiryCause, LocalLeaseError, LocalLeases};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), LocalLeaseError> {
    /// let leases = LocalLeases::new();
    /// let (tx, rx) = tokio::sync::oneshot::channel();
    /// leases.create("cursor", Duration::from_secs(600), move |lease| {
    ///     let _ = tx.send(lease.cause());
    /// })?;
    /// assert_eq!(leases.close(CloseMode::ExpireAll), 1);
    /// assert_eq!(rx.await, Ok(ExpiryCause::Closed));
    /// assert_eq!(leases.renew("cursor"), Err(LocalLeaseError::Closed));
    /// # Ok(())
    /// # }
    /// ```
    pub fn close(&self, mode: CloseMode) -> usize {
        self.shared().close(mode)
    }
}

impl Default for LocalLeases {
    /// The same as [`LocalLeases::new`].
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for LocalLeases {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalLeases")
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}
