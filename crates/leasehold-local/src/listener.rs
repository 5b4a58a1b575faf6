//! What is called when a lease expires, and how it is called: on its own task, panics contained.

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;
use tokio::runtime::Handle;
use tokio::time::Instant;

/// Why a listener is being called.
///
/// # Examples
///
/// ```
/// use leasehold_local::{ExpiredLease, ExpiryCause};
///
/// fn on_expiry(lease: ExpiredLease) {
///     match lease.cause() {
///         ExpiryCause::DeadlinePassed => println!("{} timed out", lease.name()),
///         ExpiryCause::Closed => println!("{} released at shutdown", lease.name()),
///         _ => {}
///     }
/// }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ExpiryCause {
    /// The lease reached its deadline without being renewed.
    DeadlinePassed,
    /// The service was closed with [`CloseMode::ExpireAll`](crate::CloseMode::ExpireAll).
    Closed,
}

/// The lease handed to its listener when it expires.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use leasehold_local::{ExpiryCause, LocalLeases};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), leasehold_local::LocalLeaseError> {
/// let leases = LocalLeases::new();
/// let (tx, rx) = tokio::sync::oneshot::channel();
/// let deadline = leases.create("slot-7", Duration::from_secs(5), move |lease| {
///     let _ = tx.send(lease);
/// })?;
/// let lease = rx.await.expect("the listener runs");
/// assert_eq!(lease.name(), "slot-7");
/// assert_eq!(lease.deadline(), deadline);
/// assert_eq!(lease.cause(), ExpiryCause::DeadlinePassed);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpiredLease {
    name: Arc<str>,
    deadline: Instant,
    cause: ExpiryCause,
}

impl ExpiredLease {
    pub(crate) fn new(name: Arc<str>, deadline: Instant, cause: ExpiryCause) -> Self {
        Self {
            name,
            deadline,
            cause,
        }
    }

    /// The lease's name, as given to [`create`](crate::LocalLeases::create).
    ///
    /// # Examples
    ///
    /// See [`ExpiredLease`].
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The deadline the lease had when it expired (for [`ExpiryCause::Closed`], the deadline
    /// it would have had; it may lie in the future).
    ///
    /// # Examples
    ///
    /// See [`ExpiredLease`].
    #[must_use]
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Why the listener is being called.
    ///
    /// # Examples
    ///
    /// See [`ExpiredLease`].
    #[must_use]
    pub fn cause(&self) -> ExpiryCause {
        self.cause
    }
}

type SyncFn = Box<dyn FnOnce(ExpiredLease) + Send + 'static>;
type AsyncFn = Box<dyn FnOnce(ExpiredLease) -> BoxFuture<'static, ()> + Send + 'static>;

enum Kind {
    Sync(SyncFn),
    Async(AsyncFn),
}

/// The code called, exactly once, when a lease expires.
///
/// [`LocalLeases::create`](crate::LocalLeases::create) takes a plain
/// `FnOnce(ExpiredLease) + Send + 'static` closure and
/// [`create_async`](crate::LocalLeases::create_async) an async one; build a `Listener` yourself
/// ([`from_fn`](Self::from_fn), [`from_async`](Self::from_async), or `From` a closure) for
/// [`create_with`](crate::LocalLeases::create_with) or the actor's [`Create`](crate::Create).
///
/// Each listener runs on its own tokio task on the service's runtime, so a slow listener delays
/// no other listener and not the timer. A panic inside a listener is caught, logged with
/// `tracing::error!` and otherwise ignored. A synchronous listener must not block for long (on a
/// current-thread runtime it would stall everything); hand blocking work to
/// `tokio::task::spawn_blocking` or make the listener async.
///
/// # Examples
///
/// ```
/// use leasehold_local::{ExpiredLease, Listener};
///
/// let sync_listener: Listener = (|lease: ExpiredLease| println!("{} expired", lease.name())).into();
/// let async_listener = Listener::from_async(|lease: ExpiredLease| async move {
///     tokio::task::yield_now().await;
///     println!("{} expired", lease.name());
/// });
/// # drop((sync_listener, async_listener));
/// ```
pub struct Listener(Kind);

impl Listener {
    /// A listener from a synchronous closure (the same as `Listener::from(f)`).
    ///
    /// # Examples
    ///
    /// ```
    /// use leasehold_local::Listener;
    ///
    /// let listener = Listener::from_fn(|lease| println!("{} expired", lease.name()));
    /// # drop(listener);
    /// ```
    pub fn from_fn(f: impl FnOnce(ExpiredLease) + Send + 'static) -> Self {
        Self(Kind::Sync(Box::new(f)))
    }

    /// A listener from an async closure; the future it returns is driven on its own task.
    ///
    /// # Examples
    ///
    /// ```
    /// use leasehold_local::Listener;
    ///
    /// let listener = Listener::from_async(|lease| async move {
    ///     // close the cursor, release the slot...
    ///     println!("{} expired", lease.name());
    /// });
    /// # drop(listener);
    /// ```
    pub fn from_async<F, Fut>(f: F) -> Self
    where
        F: FnOnce(ExpiredLease) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        Self(Kind::Async(Box::new(move |lease| f(lease).boxed())))
    }

    /// Calls the listener on a new task of `runtime`, catching and logging a panic.
    pub(crate) fn dispatch(self, runtime: &Handle, lease: ExpiredLease) {
        let name = Arc::clone(&lease.name);
        let run = async move {
            let outcome = match self.0 {
                Kind::Sync(f) => std::panic::catch_unwind(AssertUnwindSafe(move || f(lease))),
                // Calling `f` is inside the guarded future, so a panic before the first await
                // is caught too.
                Kind::Async(f) => {
                    AssertUnwindSafe(async move { f(lease).await })
                        .catch_unwind()
                        .await
                }
            };
            if let Err(payload) = outcome {
                tracing::error!(
                    "listener of local lease {name:?} panicked: {}; the service carries on",
                    panic_message(payload.as_ref())
                );
            }
        };
        // A runtime that is shutting down drops the task; the listener is then dropped uncalled.
        drop(runtime.spawn(run));
    }
}

impl<F> From<F> for Listener
where
    F: FnOnce(ExpiredLease) + Send + 'static,
{
    fn from(f: F) -> Self {
        Self::from_fn(f)
    }
}

impl fmt::Debug for Listener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.0 {
            Kind::Sync(_) => "Listener::Sync",
            Kind::Async(_) => "Listener::Async",
        })
    }
}

fn panic_message(payload: &(dyn Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&'static str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "<non-string panic payload>"
    }
}
