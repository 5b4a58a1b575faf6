//! Lease timing configuration, validated up front.
//!
//! All values are [`Duration`]s. The intervals that are not set explicitly are derived from the
//! term, so changing only the term keeps a consistent configuration.

use std::time::Duration;

use crate::{Term, ValidationError};

/// The shortest interval accepted for `renew_interval`, `retry_interval`, `safety_margin` and
/// `request_timeout`: one millisecond, the resolution of tokio's timers.
pub const MIN_INTERVAL: Duration = Duration::from_millis(1);

/// The default lease term: 30 seconds.
pub const DEFAULT_TERM: Duration = Duration::from_secs(30);

/// The default retry interval (when the renew interval allows it): one second.
pub const DEFAULT_RETRY_INTERVAL: Duration = Duration::from_secs(1);

/// The largest default safety margin: two seconds.
pub const MAX_DEFAULT_SAFETY_MARGIN: Duration = Duration::from_secs(2);

/// How a lease is held: the term of each grant, how often it is renewed, how contention and
/// failures are retried, and how much of each term is kept back as a safety margin.
///
/// The derived defaults (renew interval, retry interval, safety margin and request timeout)
/// follow the term until they are set explicitly. The default configuration validates for every
/// term of at least 6 ms.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use leasehold_core::LeaseConfig;
///
/// let config = LeaseConfig::default().with_term(Duration::from_secs(9));
/// assert_eq!(config.renew_interval(), Duration::from_secs(3));
/// assert_eq!(config.retry_interval(), Duration::from_secs(1));
/// assert_eq!(config.safety_margin(), Duration::from_millis(900));
/// assert_eq!(config.request_timeout(), Duration::from_secs(3));
/// assert!(config.validate().is_ok());
///
/// let bad = config.with_renew_interval(Duration::from_secs(9));
/// assert!(bad.validate().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseConfig {
    term: Duration,
    renew: Renewal,
    retry_interval: Option<Duration>,
    safety_margin: Option<Duration>,
    request_timeout: Option<Duration>,
}

/// How a lease is renewed: one field, so that the configuration (inside every lease actor) is
/// no larger for the choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Renewal {
    /// By itself, every term / 3.
    Default,
    /// By itself, at this interval.
    Every(Duration),
    /// Only on request.
    OnRequest,
}

impl Default for LeaseConfig {
    fn default() -> Self {
        Self {
            term: DEFAULT_TERM,
            renew: Renewal::Default,
            retry_interval: None,
            safety_margin: None,
            request_timeout: None,
        }
    }
}

impl LeaseConfig {
    /// The default configuration (same as [`LeaseConfig::default`]).
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets how long one grant or renewal lasts, counted by the database's clock.
    ///
    /// Default: 30 s ([`DEFAULT_TERM`]). Sub-millisecond parts are dropped.
    #[must_use]
    pub fn with_term(mut self, term: Duration) -> Self {
        self.term = term;
        self
    }

    /// Sets how long after the last successful renewal (or grant) was sent the next renewal is
    /// sent.
    ///
    /// Default: term / 3.
    #[must_use]
    pub fn with_renew_interval(mut self, interval: Duration) -> Self {
        self.renew = Renewal::Every(interval);
        self
    }

    /// Sets how long to wait before trying again after losing a race ([`HeldBy`]) or losing a
    /// tenure, and the longest backoff after a store error.
    ///
    /// Default: 1 s ([`DEFAULT_RETRY_INTERVAL`]), or half the renew interval when that is
    /// shorter, so that it stays below the renew interval.
    ///
    /// [`HeldBy`]: crate::AcquireOutcome::HeldBy
    #[must_use]
    pub fn with_retry_interval(mut self, interval: Duration) -> Self {
        self.retry_interval = Some(interval);
        self
    }

    /// Sets how much of each term is kept back: the local deadline is
    /// `send_time + term − safety_margin`. It must cover the difference between the rates of the
    /// local monotonic clock and the database's clock over one term.
    ///
    /// Default: term / 10, but at least 1 ms and at most 2 s ([`MAX_DEFAULT_SAFETY_MARGIN`]).
    #[must_use]
    pub fn with_safety_margin(mut self, margin: Duration) -> Self {
        self.safety_margin = Some(margin);
        self
    }

    /// Sets how long a request may stay unanswered; after that it counts as failed (its answer, if
    /// it ever comes, is ignored).
    ///
    /// Default: the renew interval.
    #[must_use]
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = Some(timeout);
        self
    }

    /// Declares a lease that is never renewed by itself, only on request (a plain lock):
    /// [`LeaseConfig::validate`] then leaves out the checks that only matter to automatic
    /// renewals (the renew and retry intervals against the term and each other, and their
    /// 1 ms minimum), so a term as short as 1 ms is accepted. What still matters is checked:
    /// the term itself, a request timeout of at least 1 ms, and a safety margin shorter than the
    /// term (or the lease would never be believed held).
    ///
    /// A lease renewed on request has no renew interval of its own: `true` forgets one set by
    /// [`LeaseConfig::with_renew_interval`] (and setting one afterwards declares automatic
    /// renewal again); `false` renews every term / 3 unless an interval is set after it.
    ///
    /// Default: `false` (renewed by itself every renew interval).
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use leasehold_core::LeaseConfig;
    ///
    /// let tiny = LeaseConfig::default()
    ///     .with_term(Duration::from_millis(1))
    ///     .with_safety_margin(Duration::from_micros(100))
    ///     .with_request_timeout(Duration::from_millis(1));
    /// assert!(tiny.validate().is_err());
    /// assert!(tiny.with_renewed_on_request(true).validate().is_ok());
    /// ```
    #[must_use]
    pub fn with_renewed_on_request(mut self, on: bool) -> Self {
        self.renew = match (on, self.renew) {
            (true, _) => Renewal::OnRequest,
            (false, Renewal::OnRequest) => Renewal::Default,
            (false, other) => other,
        };
        self
    }

    /// Whether the lease is renewed only on request ([`LeaseConfig::with_renewed_on_request`]).
    #[must_use]
    pub fn renewed_on_request(&self) -> bool {
        self.renew == Renewal::OnRequest
    }

    /// How long one grant or renewal lasts.
    #[must_use]
    pub fn term(&self) -> Duration {
        self.term
    }

    /// How long after the last successful renewal was sent the next one is sent.
    #[must_use]
    pub fn renew_interval(&self) -> Duration {
        match self.renew {
            Renewal::Every(interval) => interval,
            Renewal::Default | Renewal::OnRequest => self.term / 3,
        }
    }

    /// The wait after contention or loss, and the longest backoff after a store error.
    #[must_use]
    pub fn retry_interval(&self) -> Duration {
        self.retry_interval
            .unwrap_or_else(|| DEFAULT_RETRY_INTERVAL.min(self.renew_interval() / 2))
    }

    /// How much of each term is kept back before the local deadline.
    #[must_use]
    pub fn safety_margin(&self) -> Duration {
        self.safety_margin
            .unwrap_or_else(|| (self.term / 10).clamp(MIN_INTERVAL, MAX_DEFAULT_SAFETY_MARGIN))
    }

    /// How long a request may stay unanswered before it counts as failed.
    #[must_use]
    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
            .unwrap_or_else(|| self.renew_interval())
    }

    /// Checks every field and the relations between them:
    /// `term > renew_interval > retry_interval`, `safety_margin < term − renew_interval` (so a
    /// renewal has time to succeed before the local deadline), every interval at least
    /// [`MIN_INTERVAL`], and the request timeout at most [`Term::MAX`].
    ///
    /// # Errors
    /// A [`ValidationError`] naming the field at fault: [`ValidationError::TooShort`] /
    /// [`ValidationError::TooLarge`] for a value out of range, [`ValidationError::Relation`] for
    /// fields that do not fit together.
    pub fn validate(&self) -> Result<(), ValidationError> {
        self.validated_term().map(|_| ())
    }

    /// Validates the configuration and returns the term as bound into SQL.
    pub(crate) fn validated_term(&self) -> Result<Term, ValidationError> {
        let term = Term::new("term", self.term)?;
        let term_d = term.duration();
        let renew = self.renew_interval();
        let retry = self.retry_interval();
        let margin = self.safety_margin();
        let timeout = self.request_timeout();
        if timeout > Term::MAX {
            return Err(ValidationError::TooLarge {
                field: "request_timeout",
                value: timeout,
                max: Term::MAX,
            });
        }
        if self.renewed_on_request() {
            // Nothing is scheduled at the renew or retry interval: only a grant's life matters.
            if timeout < MIN_INTERVAL {
                return Err(ValidationError::TooShort {
                    field: "request_timeout",
                    value: timeout,
                    min: MIN_INTERVAL,
                });
            }
            if margin.is_zero() || margin >= term_d {
                return Err(relation(
                    "safety_margin",
                    format!(
                        "{margin:?} must be above zero and shorter than the term ({term_d:?}), \
                         or the lease is never believed held"
                    ),
                ));
            }
            return Ok(term);
        }
        for (field, value) in [
            ("renew_interval", renew),
            ("retry_interval", retry),
            ("safety_margin", margin),
            ("request_timeout", timeout),
        ] {
            if value < MIN_INTERVAL {
                return Err(ValidationError::TooShort {
                    field,
                    value,
                    min: MIN_INTERVAL,
                });
            }
        }
        if renew >= term_d {
            return Err(relation(
                "renew_interval",
                format!("{renew:?} must be shorter than the term ({term_d:?})"),
            ));
        }
        if retry >= renew {
            return Err(relation(
                "retry_interval",
                format!("{retry:?} must be shorter than the renew interval ({renew:?})"),
            ));
        }
        let window = term_d - renew;
        if margin >= window {
            return Err(relation(
                "safety_margin",
                format!(
                    "{margin:?} must be shorter than term - renew_interval ({window:?}), \
                     or a renewal has no time to succeed before the local deadline"
                ),
            ));
        }
        Ok(term)
    }
}

fn relation(field: &'static str, reason: String) -> ValidationError {
    ValidationError::Relation { field, reason }
}

#[cfg(test)]
mod tests;
