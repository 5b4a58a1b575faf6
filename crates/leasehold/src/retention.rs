//! Retention: the optional background purge of old rows ([`Retention`],
//! [`LeaseServiceBuilder::retention`](crate::LeaseServiceBuilder::retention)).

use std::time::Duration;

use actix::Addr;
use leasehold_core::{Namespace, ValidationError};
use leasehold_engine::{LeaseEngine, PurgeRows};
use tokio_util::sync::CancellationToken;

/// How a service purges old rows in the background: rows of its namespace released or expired
/// for longer than `age` are deleted every `interval`.
///
/// Purging never resets a token: the store raises its token floor in the same transaction, so
/// a name created again starts above any token it ever had (see
/// [`LeaseStore::purge`](crate::LeaseStore::purge)). Held rows are never purged.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use leasehold::Retention;
/// let r = Retention::new(Duration::from_secs(7 * 86_400));
/// assert_eq!(r.interval(), Duration::from_secs(3600));
/// let r = r.every(Duration::from_secs(600));
/// assert_eq!(r.interval(), Duration::from_secs(600));
/// assert!(Retention::new(Duration::ZERO).validate().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub struct Retention {
    age: Duration,
    interval: Duration,
}

impl Retention {
    /// The shortest age and interval accepted.
    pub const MIN: Duration = Duration::from_secs(1);

    /// Purge rows released or expired for longer than `age`; every `age / 10` by default,
    /// between 1 s and one hour.
    pub fn new(age: Duration) -> Self {
        Self {
            age,
            interval: (age / 10).clamp(Self::MIN, Duration::from_secs(3600)),
        }
    }

    /// Purge every `interval` instead.
    pub fn every(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }

    /// How old a released or expired row must be.
    #[must_use]
    pub fn age(&self) -> Duration {
        self.age
    }

    /// How often the purge runs.
    #[must_use]
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// Checks both durations are at least [`Retention::MIN`].
    ///
    /// # Errors
    /// [`ValidationError::TooShort`] naming `retention.age` or `retention.interval`.
    pub fn validate(&self) -> Result<(), ValidationError> {
        for (field, value) in [
            ("retention.age", self.age),
            ("retention.interval", self.interval),
        ] {
            if value < Self::MIN {
                return Err(ValidationError::TooShort {
                    field,
                    value,
                    min: Self::MIN,
                });
            }
        }
        Ok(())
    }
}

/// The purge loop, on the engine thread until `stop`: one bounded purge per interval (each
/// `PurgeRows` runs through the engine's `detached`, abandoned at `limit`, and the purge's
/// statements are bounded on the server too). A failed run is logged and retried next interval.
pub(crate) async fn background(
    engine: Addr<LeaseEngine>,
    namespace: Namespace,
    retention: Retention,
    limit: Duration,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(retention.interval) => {}
        }
        let ask = PurgeRows {
            namespace: Some(namespace.clone()),
            older_than: retention.age,
            limit,
        };
        let answer = tokio::select! {
            () = stop.cancelled() => return,
            answer = engine.send(ask) => answer,
        };
        match answer {
            Ok(Ok(n)) => {
                if n > 0 {
                    tracing::info!("retention: purged {n} rows of namespace {namespace:?}");
                }
            }
            Ok(Err(e)) => tracing::warn!("retention: purge failed: {e}"),
            Err(_) => return, // the engine stopped
        }
    }
}
