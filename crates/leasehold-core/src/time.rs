//! Database time and validated lease terms.
//!
//! Database time is kept as whole milliseconds since the Unix epoch, as computed by the database's
//! own clock inside each statement. The application never compares its wall clock with it.

use std::fmt;
use std::time::Duration;

use crate::ValidationError;

/// An instant on the database's clock: milliseconds since the Unix epoch (UTC).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DbInstant(pub i64);

impl DbInstant {
    /// Milliseconds since the Unix epoch.
    #[must_use]
    pub fn as_millis(self) -> i64 {
        self.0
    }

    /// The time from `earlier` to `self`, or zero if `earlier` is later.
    #[must_use]
    pub fn saturating_since(self, earlier: DbInstant) -> Duration {
        u64::try_from(self.0.saturating_sub(earlier.0))
            .map_or(Duration::ZERO, Duration::from_millis)
    }

    /// This instant moved forward by `d` (saturating).
    #[must_use]
    pub fn plus(self, d: Duration) -> DbInstant {
        DbInstant(
            self.0
                .saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
        )
    }
}

impl fmt::Display for DbInstant {
    /// RFC 3339 in UTC with milliseconds, e.g. `2026-11-29T21:06:14.123Z`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.rem_euclid(1000);
        let secs = self.0.div_euclid(1000);
        let days = secs.div_euclid(86_400);
        let sod = secs.rem_euclid(86_400);
        let (y, m, d) = civil_from_days(days);
        write!(
            f,
            "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{ms:03}Z",
            sod / 3600,
            (sod / 60) % 60,
            sod % 60
        )
    }
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// A validated lease term (time-to-live), counted by the database's clock in whole milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Term(Duration);

impl Term {
    /// The shortest term accepted: one millisecond.
    pub const MIN: Duration = Duration::from_millis(1);
    /// The longest term accepted: 3650 days. Longer terms are almost certainly a unit mistake,
    /// and keep `now + term` far inside every backend's 64-bit millisecond arithmetic.
    pub const MAX: Duration = Duration::from_secs(3650 * 86_400);

    /// Validates a term for the field named `field`. Sub-millisecond parts are truncated.
    ///
    /// # Errors
    /// [`ValidationError::TooShort`] under one millisecond, [`ValidationError::TooLarge`] over
    /// [`Term::MAX`].
    pub fn new(field: &'static str, value: Duration) -> Result<Self, ValidationError> {
        let truncated = Duration::from_millis(u64::try_from(value.as_millis()).unwrap_or(u64::MAX));
        if truncated < Self::MIN {
            return Err(ValidationError::TooShort {
                field,
                value,
                min: Self::MIN,
            });
        }
        if value > Self::MAX {
            return Err(ValidationError::TooLarge {
                field,
                value,
                max: Self::MAX,
            });
        }
        Ok(Self(truncated))
    }

    /// The term as a duration.
    #[must_use]
    pub fn duration(self) -> Duration {
        self.0
    }

    /// The term in whole milliseconds, as bound into SQL.
    #[must_use]
    pub fn as_millis_i64(self) -> i64 {
        // Term::MAX is 3.15e11 ms, far below i64::MAX.
        i64::try_from(self.0.as_millis()).unwrap_or(i64::MAX)
    }
}

impl TryFrom<Duration> for Term {
    type Error = ValidationError;
    fn try_from(value: Duration) -> Result<Self, ValidationError> {
        Self::new("term", value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_rfc3339() {
        assert_eq!(DbInstant(0).to_string(), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            DbInstant(1_795_986_374_123).to_string(),
            "2026-11-29T21:06:14.123Z"
        );
        assert_eq!(
            DbInstant(951_782_400_000).to_string(),
            "2000-02-29T00:00:00.000Z"
        );
    }

    #[test]
    fn term_bounds() {
        assert!(Term::new("term", Duration::ZERO).is_err());
        assert!(Term::new("term", Duration::from_micros(999)).is_err());
        assert_eq!(
            Term::new("term", Duration::from_micros(1500)).map(Term::as_millis_i64),
            Ok(1)
        );
        assert!(Term::new("term", Term::MAX).is_ok());
        assert!(matches!(
            Term::new("ttl", Term::MAX + Duration::from_secs(1)),
            Err(ValidationError::TooLarge { field: "ttl", .. })
        ));
    }
}
