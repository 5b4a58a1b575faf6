//! Retention: the optional background purge of old rows ([`Retention`],
//! [`LeaseServiceBuilder::retention`](crate::LeaseServiceBuilder::retention)).

use std::collections::BTreeSet;
use std::time::Duration;

use actix::Addr;
use leasehold_core::{Namespace, ValidationError};
use leasehold_engine::{LeaseEngine, PurgeRows, UsedNamespaces};
use tokio_util::sync::CancellationToken;

/// How a service purges old rows in the background: rows released or expired for longer than
/// `age` are deleted every `interval`, in every namespace the service uses — its own (lease
/// tasks, shard groups) and every namespace it took a lock, permit or hold in — and in the
/// namespaces named with [`Retention::namespace`]; or in the whole table with
/// [`Retention::whole_table`].
///
/// Purging never resets a token: the store raises its token floor in the same transaction, so
/// a name created again starts above any token it ever had (see
/// [`AdminStore::purge`](crate::store::AdminStore::purge)). Held rows are never purged.
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
///
/// // Lock rows of another service's namespace too, or every row of the table.
/// let ns = leasehold::Namespace::new("files")?;
/// let r = Retention::new(Duration::from_secs(86_400)).namespace(ns.clone());
/// assert_eq!(r.named().collect::<Vec<_>>(), [&ns]);
/// assert!(Retention::new(Duration::from_secs(86_400)).whole_table().covers_whole_table());
/// # Ok::<(), leasehold::ValidationError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct Retention {
    age: Duration,
    interval: Duration,
    named: BTreeSet<Namespace>,
    whole_table: bool,
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
            named: BTreeSet::new(),
            whole_table: false,
        }
    }

    /// Also purge `namespace` (for example the lock namespace of services that run no
    /// retention of their own).
    pub fn namespace(mut self, namespace: Namespace) -> Self {
        self.named.insert(namespace);
        self
    }

    /// Purge every namespace of the table (one statement per run), for the one service an
    /// operator picks to keep the table tidy.
    pub fn whole_table(mut self) -> Self {
        self.whole_table = true;
        self
    }

    /// The namespaces named with [`Retention::namespace`].
    pub fn named(&self) -> impl Iterator<Item = &Namespace> {
        self.named.iter()
    }

    /// Whether every namespace of the table is purged.
    #[must_use]
    pub fn covers_whole_table(&self) -> bool {
        self.whole_table
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

/// The purge loop, on the engine thread until `stop`: one bounded purge per namespace per
/// interval (each `PurgeRows` runs through the engine's `detached`, abandoned at `limit`, and the
/// purge's statements are bounded on the server too). The namespaces are read from the engine
/// at each run, so a lock namespace first used after the start is covered from then on. A failed
/// purge is logged and retried next interval.
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
        let scopes: Vec<Option<Namespace>> = if retention.whole_table {
            vec![None]
        } else {
            let used = tokio::select! {
                () = stop.cancelled() => return,
                used = engine.send(UsedNamespaces) => used,
            };
            let Ok(used) = used else { return }; // the engine stopped
            let mut all: BTreeSet<Namespace> = used.into_iter().collect();
            all.insert(namespace.clone());
            all.extend(retention.named.iter().cloned());
            all.into_iter().map(Some).collect()
        };
        for scope in scopes {
            let ask = PurgeRows {
                namespace: scope.clone(),
                older_than: retention.age,
                limit,
            };
            let answer = tokio::select! {
                () = stop.cancelled() => return,
                answer = engine.send(ask) => answer,
            };
            let label = scope.as_ref().map_or("every namespace", Namespace::as_str);
            match answer {
                Ok(Ok(n)) => {
                    if n > 0 {
                        tracing::info!("retention: purged {n} rows of {label}");
                    }
                }
                Ok(Err(e)) => tracing::warn!("retention: purge of {label} failed: {e}"),
                Err(_) => return, // the engine stopped
            }
        }
    }
}
