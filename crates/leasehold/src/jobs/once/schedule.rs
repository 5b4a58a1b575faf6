//! [`Schedule`]: when a job's fires are, on the database's clock.

use std::time::Duration;

use leasehold_core::{DbInstant, Term, ValidationError};

use crate::Result;

/// The term of a run when none is given: how long a crashed run keeps its fire from being run
/// again, and what each renewal of a live run extends it to.
pub const DEFAULT_RUN_TERM: Duration = Duration::from_secs(30);

/// When a job fires, on the database's clock: every `period` from the Unix epoch, moved by an
/// `offset` (the fires are the instants `offset + k × period`, in whole milliseconds since the
/// Unix epoch, by the database's clock), and the term of a run ([`Schedule::term`]).
///
/// A fire is named by its instant, so every process computes the same fire from the same
/// database time, whatever its own clock says.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use leasehold::DbInstant;
/// use leasehold::jobs::Schedule;
/// // every hour at 15 minutes past
/// let hourly = Schedule::every(Duration::from_secs(3600))?.offset(Duration::from_secs(900))?;
/// let at = DbInstant(7_200_000 + 1_000_000); // 02:16:40 on 1 January 1970
/// assert_eq!(hourly.fire_at_or_before(at), DbInstant(7_200_000 + 900_000));
/// assert_eq!(hourly.next_fire(at), DbInstant(10_800_000 + 900_000));
/// # Ok::<(), leasehold::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    period: Term,
    offset: Duration,
    term: Duration,
}

impl Schedule {
    /// Fires every `period` (whole milliseconds; a sub-millisecond part is dropped), at the
    /// multiples of `period` since the Unix epoch; a run's term is [`DEFAULT_RUN_TERM`].
    ///
    /// # Errors
    /// [`crate::Error::Invalid`] for a period under one millisecond (zero included) or over
    /// [`Term::MAX`].
    pub fn every(period: Duration) -> Result<Self> {
        Ok(Self {
            period: Term::new("period", period)?,
            offset: Duration::ZERO,
            term: DEFAULT_RUN_TERM,
        })
    }

    /// Moves every fire `offset` later (whole milliseconds): `every(1 day).offset(2 h)` fires
    /// at 02:00 UTC by the database's clock.
    ///
    /// # Errors
    /// [`crate::Error::Invalid`] when `offset` is not shorter than the period.
    pub fn offset(mut self, offset: Duration) -> Result<Self> {
        let offset = Duration::from_millis(u64::try_from(offset.as_millis()).unwrap_or(u64::MAX));
        if offset >= self.period.duration() {
            return Err(ValidationError::Relation {
                field: "offset",
                reason: format!(
                    "{offset:?} must be shorter than the period {:?}",
                    self.period.duration()
                ),
            }
            .into());
        }
        self.offset = offset;
        Ok(self)
    }

    /// Sets the term of a run (default [`DEFAULT_RUN_TERM`]): a run's row is granted for
    /// `term` and renewed every `term / 3` while the job runs, so a run that crashes keeps its
    /// fire from being run again for at most `term`. Checked when a run is asked for, as a
    /// held lock's ttl ([`crate::Locks::hold`]).
    #[must_use]
    pub fn term(mut self, term: Duration) -> Self {
        self.term = term;
        self
    }

    /// The period.
    #[must_use]
    pub fn period(&self) -> Duration {
        self.period.duration()
    }

    /// The offset of the fires from the multiples of the period.
    #[must_use]
    pub fn offset_of_fires(&self) -> Duration {
        self.offset
    }

    /// The term of a run.
    #[must_use]
    pub fn run_term(&self) -> Duration {
        self.term
    }

    /// The latest fire at or before `at`: the fire that is due at database time `at`.
    #[must_use]
    pub fn fire_at_or_before(&self, at: DbInstant) -> DbInstant {
        let (period, offset) = self.millis();
        let since = at.as_millis().saturating_sub(offset);
        DbInstant(
            since
                .div_euclid(period)
                .saturating_mul(period)
                .saturating_add(offset),
        )
    }

    /// The first fire after `at`.
    #[must_use]
    pub fn next_fire(&self, at: DbInstant) -> DbInstant {
        let (period, _) = self.millis();
        DbInstant(
            self.fire_at_or_before(at)
                .as_millis()
                .saturating_add(period),
        )
    }

    /// The period and the offset in milliseconds; the period is at least 1 ms and at most
    /// [`Term::MAX`], the offset shorter than the period.
    fn millis(&self) -> (i64, i64) {
        let period = self.period.as_millis_i64();
        let offset = i64::try_from(self.offset.as_millis()).unwrap_or(0);
        (period, offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn fires_are_the_offset_multiples_of_the_period() {
        let s = Schedule::every(ms(1000))
            .expect("period")
            .offset(ms(250))
            .expect("offset");
        assert_eq!(s.fire_at_or_before(DbInstant(5_250)), DbInstant(5_250));
        assert_eq!(s.fire_at_or_before(DbInstant(5_249)), DbInstant(4_250));
        assert_eq!(s.fire_at_or_before(DbInstant(6_249)), DbInstant(5_250));
        assert_eq!(s.next_fire(DbInstant(5_250)), DbInstant(6_250));
        assert_eq!(s.next_fire(DbInstant(5_249)), DbInstant(5_250));
        // before the epoch, still the latest fire at or before
        assert_eq!(s.fire_at_or_before(DbInstant(-1)), DbInstant(-750));
    }

    #[test]
    fn bad_periods_and_offsets_are_refused() {
        assert!(matches!(
            Schedule::every(Duration::ZERO),
            Err(crate::Error::Invalid(ValidationError::TooShort {
                field: "period",
                ..
            }))
        ));
        assert!(matches!(
            Schedule::every(Duration::from_micros(999)),
            Err(crate::Error::Invalid(ValidationError::TooShort { .. }))
        ));
        assert!(matches!(
            Schedule::every(Term::MAX + ms(1)),
            Err(crate::Error::Invalid(ValidationError::TooLarge { .. }))
        ));
        let s = Schedule::every(ms(1000)).expect("period");
        assert!(matches!(
            s.offset(ms(1000)),
            Err(crate::Error::Invalid(ValidationError::Relation {
                field: "offset",
                ..
            }))
        ));
    }
}
