//! An actix actor in front of a [`LocalLeases`] handle.

use std::time::Duration;

use actix::{Actor, Context, Handler, Message};
use tokio::time::Instant;

use crate::{ExpiredLease, Listener, LocalLeaseError, LocalLeases};

/// An actix 0.13 actor that forwards [`Create`], [`Renew`], [`Cancel`] and [`Remaining`] to a
/// [`LocalLeases`] handle.
///
/// Every operation is a short synchronous call, so the handlers answer at once; listeners still run
/// on tokio tasks of the service's runtime, not in the actor's context. Other clones of the same
/// handle keep working alongside the actor.
///
/// # Lifecycle
///
/// ## Started
/// Answers messages with the result of the matching [`LocalLeases`] method.
///
/// ## Stopped
/// Drops its handle. If that was the last one the service closes with
/// [`CloseMode::DropAll`](crate::CloseMode::DropAll); keep a clone, or call
/// [`LocalLeases::close`], to decide otherwise.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use actix::Actor;
/// use leasehold_local::{Create, LocalLeases, LocalLeasesActor, Remaining};
///
/// actix_rt::System::new().block_on(async {
///     let addr = LocalLeasesActor::new(LocalLeases::new()).start();
///     let deadline = addr
///         .send(Create::new("cursor-9", Duration::from_secs(30), |lease| println!("{} expired", lease.name())))
///         .await
///         .expect("actor alive")
///         .expect("created");
///     let left = addr.send(Remaining::new("cursor-9")).await.expect("actor alive").expect("held");
///     assert!(left <= Duration::from_secs(30));
///     # let _ = deadline;
/// });
/// ```
#[derive(Debug, Clone)]
pub struct LocalLeasesActor {
    leases: LocalLeases,
}

impl LocalLeasesActor {
    /// An actor forwarding to `leases`.
    ///
    /// # Examples
    ///
    /// See [`LocalLeasesActor`].
    #[must_use]
    pub fn new(leases: LocalLeases) -> Self {
        Self { leases }
    }

    /// The handle the actor forwards to.
    ///
    /// # Examples
    ///
    /// ```
    /// # actix_rt::System::new().block_on(async {
    /// let actor = leasehold_local::LocalLeasesActor::new(leasehold_local::LocalLeases::new());
    /// assert!(actor.leases().is_empty());
    /// # });
    /// ```
    #[must_use]
    pub fn leases(&self) -> &LocalLeases {
        &self.leases
    }
}

impl Actor for LocalLeasesActor {
    type Context = Context<Self>;
}

/// Message: [`LocalLeases::create`]. Answers the deadline.
///
/// # Errors
///
/// As [`LocalLeases::create`].
///
/// # Examples
///
/// See [`LocalLeasesActor`].
#[derive(Debug)]
pub struct Create {
    /// The lease name.
    pub name: String,
    /// The lease period.
    pub period: Duration,
    /// Called once on expiry.
    pub listener: Listener,
}

impl Create {
    /// The message for `LocalLeases::create(name, period, listener)`.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// let msg = leasehold_local::Create::new("slot", Duration::from_secs(5), |lease| println!("{}", lease.name()));
    /// assert_eq!(msg.name, "slot");
    /// ```
    pub fn new(
        name: impl Into<String>,
        period: Duration,
        listener: impl FnOnce(ExpiredLease) + Send + 'static,
    ) -> Self {
        Self::with_listener(name, period, Listener::from_fn(listener))
    }

    /// The message for `LocalLeases::create_with(name, period, listener)`, e.g. with an async
    /// listener.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// use leasehold_local::{Create, Listener};
    ///
    /// let listener = Listener::from_async(|lease| async move { println!("{}", lease.name()) });
    /// let msg = Create::with_listener("slot", Duration::from_secs(5), listener);
    /// assert_eq!(msg.period, Duration::from_secs(5));
    /// ```
    pub fn with_listener(name: impl Into<String>, period: Duration, listener: Listener) -> Self {
        Self {
            name: name.into(),
            period,
            listener,
        }
    }
}

/// Message: [`LocalLeases::renew`]. Answers the new deadline.
///
/// # Errors
///
/// As [`LocalLeases::renew`].
///
/// # Examples
///
/// ```
/// let msg = leasehold_local::Renew::new("slot");
/// assert_eq!(msg.name, "slot");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Renew {
    /// The lease name.
    pub name: String,
}

/// Message: [`LocalLeases::cancel`].
///
/// # Errors
///
/// As [`LocalLeases::cancel`].
///
/// # Examples
///
/// ```
/// let msg = leasehold_local::Cancel::new("slot");
/// assert_eq!(msg.name, "slot");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cancel {
    /// The lease name.
    pub name: String,
}

/// Message: [`LocalLeases::remaining`].
///
/// # Errors
///
/// As [`LocalLeases::remaining`].
///
/// # Examples
///
/// ```
/// let msg = leasehold_local::Remaining::new("slot");
/// assert_eq!(msg.name, "slot");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remaining {
    /// The lease name.
    pub name: String,
}

macro_rules! name_message {
    ($ty:ident, $doc:literal) => {
        impl $ty {
            #[doc = $doc]
            ///
            /// # Examples
            ///
            /// See the type.
            pub fn new(name: impl Into<String>) -> Self {
                Self { name: name.into() }
            }
        }
    };
}

name_message!(Renew, "The message for `LocalLeases::renew(name)`.");
name_message!(Cancel, "The message for `LocalLeases::cancel(name)`.");
name_message!(Remaining, "The message for `LocalLeases::remaining(name)`.");

impl Message for Create {
    type Result = Result<Instant, LocalLeaseError>;
}

impl Message for Renew {
    type Result = Result<Instant, LocalLeaseError>;
}

impl Message for Cancel {
    type Result = Result<(), LocalLeaseError>;
}

impl Message for Remaining {
    type Result = Result<Duration, LocalLeaseError>;
}

impl Handler<Create> for LocalLeasesActor {
    type Result = Result<Instant, LocalLeaseError>;

    fn handle(&mut self, msg: Create, _: &mut Self::Context) -> Self::Result {
        self.leases.create_with(&msg.name, msg.period, msg.listener)
    }
}

impl Handler<Renew> for LocalLeasesActor {
    type Result = Result<Instant, LocalLeaseError>;

    fn handle(&mut self, msg: Renew, _: &mut Self::Context) -> Self::Result {
        self.leases.renew(&msg.name)
    }
}

impl Handler<Cancel> for LocalLeasesActor {
    type Result = Result<(), LocalLeaseError>;

    fn handle(&mut self, msg: Cancel, _: &mut Self::Context) -> Self::Result {
        self.leases.cancel(&msg.name)
    }
}

impl Handler<Remaining> for LocalLeasesActor {
    type Result = Result<Duration, LocalLeaseError>;

    fn handle(&mut self, msg: Remaining, _: &mut Self::Context) -> Self::Result {
        self.leases.remaining(&msg.name)
    }
}
