//! Simulated time: one global "true" time, the store's clock, and each holder's drifting clock.

use std::time::Duration;

use leasehold_storage::DbInstant;
use tokio::time::Instant;

/// The store's clock reads `DB_EPOCH_MS` at true time zero (any date works; this is 2023-11-14).
pub const DB_EPOCH_MS: i64 = 1_700_000_000_000;

/// The store's clock granularity: whole milliseconds, as the SQL stores keep it.
pub const DB_GRANULARITY: Duration = Duration::from_millis(1);

/// A true instant: microseconds since the start of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct TrueTime(pub u64);

impl TrueTime {
    /// `self + d`, to the microsecond (rounded up, so nothing happens earlier than asked).
    #[must_use]
    pub fn plus(self, d: Duration) -> TrueTime {
        TrueTime(self.0.saturating_add(micros_ceil(d)))
    }

    /// The time since `earlier` (zero if `earlier` is later).
    #[must_use]
    pub fn since(self, earlier: TrueTime) -> Duration {
        Duration::from_micros(self.0.saturating_sub(earlier.0))
    }

    /// The store's clock at this true instant: true time in whole milliseconds (truncated).
    #[must_use]
    pub fn db(self) -> DbInstant {
        DbInstant(DB_EPOCH_MS + i64::try_from(self.0 / 1000).unwrap_or(i64::MAX))
    }

    /// The true instant at which the store's clock starts reading `db`.
    #[must_use]
    pub fn from_db(db: DbInstant) -> TrueTime {
        TrueTime(
            u64::try_from(db.0 - DB_EPOCH_MS)
                .unwrap_or(0)
                .saturating_mul(1000),
        )
    }
}

impl std::fmt::Display for TrueTime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{:06}s", self.0 / 1_000_000, self.0 % 1_000_000)
    }
}

fn micros_ceil(d: Duration) -> u64 {
    u64::try_from(d.as_nanos().div_ceil(1000)).unwrap_or(u64::MAX)
}

/// A holder's monotonic clock: `local = offset + true × (1 + ppm / 10⁶)`, in nanoseconds after a
/// shared base [`Instant`]. Its rate is constant for the run and differs from true time by `ppm`
/// parts per million (positive: the clock runs fast).
#[derive(Debug, Clone, Copy)]
pub struct LocalClock {
    base: Instant,
    offset_ns: u64,
    ppm: i64,
}

impl LocalClock {
    /// A clock reading `base + offset` at true time zero, running at rate `1 + ppm / 10⁶`.
    ///
    /// # Panics
    /// If `ppm` is not above −10⁶ (the clock would not advance).
    #[must_use]
    pub fn new(base: Instant, offset: Duration, ppm: i64) -> Self {
        assert!(ppm > -1_000_000, "a clock must advance");
        Self {
            base,
            offset_ns: u64::try_from(offset.as_nanos()).unwrap_or(u64::MAX),
            ppm,
        }
    }

    /// The drift in parts per million.
    #[must_use]
    pub fn ppm(&self) -> i64 {
        self.ppm
    }

    fn local_ns(&self, t: TrueTime) -> u128 {
        let rate = u128::try_from(1_000_000 + self.ppm).unwrap_or(1);
        u128::from(self.offset_ns) + u128::from(t.0) * 1000 * rate / 1_000_000
    }

    /// The clock's reading at true time `t`.
    #[must_use]
    pub fn at(&self, t: TrueTime) -> Instant {
        let ns = u64::try_from(self.local_ns(t)).unwrap_or(u64::MAX);
        self.base + Duration::from_nanos(ns)
    }

    /// The first true microsecond, not before `not_before`, at which the clock reads `local` or
    /// later: when a timer set for `local` fires.
    #[must_use]
    pub fn when(&self, local: Instant, not_before: TrueTime) -> TrueTime {
        let target = local.saturating_duration_since(self.base).as_nanos();
        if self.local_ns(not_before) >= target {
            return not_before;
        }
        let rate = u128::try_from(1_000_000 + self.ppm).unwrap_or(1);
        let guess = (target - u128::from(self.offset_ns)) * 1_000_000 / (1000 * rate);
        let mut t = TrueTime(u64::try_from(guess).unwrap_or(u64::MAX).max(not_before.0));
        while self.local_ns(t) < target {
            t.0 += 1;
        }
        while t.0 > not_before.0 && self.local_ns(TrueTime(t.0 - 1)) >= target {
            t.0 -= 1;
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timers_fire_at_the_first_microsecond_reaching_the_instant() {
        let base = crate::base_instant();
        for ppm in [-99_000, -1, 0, 7, 50_000] {
            let c = LocalClock::new(base, Duration::from_millis(1234), ppm);
            for t in [0_u64, 1, 999, 123_456_789] {
                let local = c.at(TrueTime(t)) + Duration::from_nanos(1);
                let fire = c.when(local, TrueTime(0));
                assert!(c.at(fire) >= local);
                assert!(fire.0 == 0 || c.at(TrueTime(fire.0 - 1)) < local);
            }
        }
    }

    #[test]
    fn db_clock_truncates_to_milliseconds() {
        assert_eq!(TrueTime(1999).db(), DbInstant(DB_EPOCH_MS + 1));
        assert_eq!(
            TrueTime::from_db(DbInstant(DB_EPOCH_MS + 3)),
            TrueTime(3000)
        );
    }
}
