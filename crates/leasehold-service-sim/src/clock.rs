//! The time base of the oracle: the store's clock, in milliseconds.
//!
//! The oracle judges every belief against the *database's* grant end, so it must read time in the
//! store's base:
//! - **MemoryStore**: the sim builds it with [`leasehold::store::MemoryStore::with_clock`] on
//!   [`SimClock::exact_now`] (the run's monotonic clock as epoch milliseconds, truncated like the
//!   store's own clock), so the oracle reads exactly the clock the store decides with.
//! - **SQL stores** (SQLite `julianday('now')`, PostgreSQL `clock_timestamp()`, MariaDB
//!   `UTC_TIMESTAMP(6)`, all on this machine): the system clock plus an offset measured against
//!   `db_now()` at the start, with its uncertainty (half the round trip, plus 1 ms of rounding).
//!
//! Every reading comes as a lower or an upper bound of the store's "now", so that a violation is
//! reported only when it is certain: a belief sampled at `lower_now()` (read *before* the signal)
//! is compared with a grant end recorded at `upper_now()` (read *after* the store answered).
//!
//! This is the only module that reads `Instant::now` / `SystemTime::now`.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use leasehold::DbInstant;
use leasehold::store::LeaseStore;

/// The store's clock as the oracle reads it. Cheap to clone.
#[derive(Debug, Clone)]
pub struct SimClock {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    origin: Instant,
    origin_ms: i64,
    base: Base,
}

#[derive(Debug, Clone, Copy)]
enum Base {
    /// The store reads [`SimClock::exact_now`] itself.
    Exact,
    /// The store's clock is the system clock plus `offset_ms`, known within `uncertainty_ms`.
    System { offset_ms: i64, uncertainty_ms: i64 },
}

#[allow(clippy::disallowed_methods)] // the sim's one clock module
fn system_ms() -> i64 {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[allow(clippy::disallowed_methods)] // the sim's one clock module
fn instant_now() -> Instant {
    Instant::now()
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl SimClock {
    /// A clock the store will read itself (give [`SimClock::exact_now`] to
    /// [`leasehold::store::MemoryStore::with_clock`]).
    #[must_use]
    pub fn exact() -> Self {
        Self::with_base(Base::Exact)
    }

    /// The clock of a SQL store on this machine: the system clock, offset by what `store`'s
    /// `db_now()` says (the tightest of a few round trips).
    ///
    /// # Errors
    /// When `db_now()` fails.
    pub async fn calibrated(store: &dyn LeaseStore) -> Result<Self, leasehold::StoreError> {
        let mut best: Option<(i64, i64)> = None;
        for _ in 0..5 {
            let before = system_ms();
            let db = store.db_now().await?.as_millis();
            let after = system_ms();
            let half = (after - before + 1) / 2;
            let offset = db - (before + after) / 2;
            if best.is_none_or(|(_, u)| half < u) {
                best = Some((offset, half));
            }
        }
        let (offset_ms, half) = best.unwrap_or((0, 0));
        Ok(Self::with_base(Base::System {
            offset_ms,
            uncertainty_ms: half + 1,
        }))
    }

    fn with_base(base: Base) -> Self {
        Self {
            inner: Arc::new(Inner {
                origin: instant_now(),
                origin_ms: system_ms(),
                base,
            }),
        }
    }

    /// The run's monotonic clock as epoch milliseconds (truncated): the MemoryStore's clock.
    #[must_use]
    pub fn exact_now(&self) -> DbInstant {
        DbInstant(self.inner.origin_ms + ms(self.inner.origin.elapsed()))
    }

    /// A time at or before the store's "now".
    #[must_use]
    pub fn lower_now(&self) -> i64 {
        match self.inner.base {
            Base::Exact => self.exact_now().as_millis(),
            Base::System {
                offset_ms,
                uncertainty_ms,
            } => system_ms() + offset_ms - uncertainty_ms,
        }
    }

    /// A time at or after the store's "now".
    #[must_use]
    pub fn upper_now(&self) -> i64 {
        match self.inner.base {
            Base::Exact => self.exact_now().as_millis(),
            Base::System {
                offset_ms,
                uncertainty_ms,
            } => system_ms() + offset_ms + uncertainty_ms,
        }
    }

    /// Time since the run started, on the monotonic clock (for call bounds and reports).
    #[must_use]
    pub fn elapsed(&self) -> Duration {
        self.inner.origin.elapsed()
    }

    /// A monotonic instant, to time one call.
    #[must_use]
    pub fn instant(&self) -> Instant {
        instant_now()
    }
}

/// The runtime's monotonic clock now, to compare a tenure's local deadline with.
#[allow(clippy::disallowed_methods)] // the sim's one clock module
pub(crate) fn tokio_now() -> tokio::time::Instant {
    tokio::time::Instant::now()
}
