//! The clock-rate check: does the database's clock run at the rate of this process's monotonic
//! clock, within what the lease configuration tolerates?
//!
//! Guarantee G2 rests on one assumption: over one term, the two clocks' rates differ by less
//! than `safety_margin / term`. This module fits the database's clock against the monotonic
//! clock from timed samples ([`fit_rate`]) and judges the fit against a configuration
//! ([`RateFit::verdict`]). It is pure: the samples are taken elsewhere
//! (`leasehold_storage::measure_clock_rate`, used by `leasehold check`; the service's
//! background check).

use std::fmt;
use std::time::Duration;

use tokio::time::Instant;

use crate::{DbInstant, LeaseConfig, ValidationError};

/// The database clock's resolution as leasehold reads it: every backend floors to the
/// millisecond.
pub const DB_CLOCK_RESOLUTION: Duration = Duration::from_millis(1);

/// One reading of the database's clock: the monotonic instants just before the request was sent
/// and just after its answer arrived, and the database's time, read somewhere in between.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockSample {
    /// The monotonic instant before the request was sent.
    pub sent: Instant,
    /// The monotonic instant after the answer arrived.
    pub received: Instant,
    /// The database's clock, read between the two.
    pub db: DbInstant,
}

/// The least-squares fit of the database's clock against the monotonic clock.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateFit {
    /// The database clock's rate relative to the monotonic clock, minus one: `0.001` means
    /// the database's clock runs 0.1 % fast.
    pub difference: f64,
    /// A bound on the error of `difference`: the most the fitted slope can be off if each
    /// sample's database time was read anywhere within its round trip and floored to the
    /// millisecond. The true difference lies within `difference ± uncertainty` as long as each
    /// clock runs at a steady rate over the window.
    pub uncertainty: f64,
    /// The standard error of the slope from the fit's residuals (statistical, for reference;
    /// `uncertainty` is the bound the verdict uses).
    pub standard_error: f64,
    /// How many samples were fitted.
    pub samples: usize,
    /// The monotonic time from the first sample to the last.
    pub window: Duration,
    /// The longest round trip of a sample.
    pub max_round_trip: Duration,
}

/// Why samples could not be fitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FitError {
    /// Fewer than three samples.
    #[error("{0} clock samples; at least 3 are needed")]
    TooFewSamples(usize),
    /// The samples were all taken at the same monotonic instant.
    #[error("the clock samples span no time")]
    NoSpan,
}

/// Fits `db = a + (1 + difference) · t` over `samples` by least squares, `t` being each
/// sample's round-trip midpoint on the monotonic clock.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use leasehold_core::clock_rate::{ClockSample, fit_rate};
/// use leasehold_core::{DbInstant, LeaseConfig, ManualClock, Clock};
///
/// // A database clock running 1 % fast, read every 100 ms with a 2 ms round trip.
/// let t0 = ManualClock::starting_now().now();
/// let samples: Vec<ClockSample> = (0..21)
///     .map(|i| {
///         let sent = t0 + Duration::from_millis(100 * i);
///         ClockSample {
///             sent,
///             received: sent + Duration::from_millis(2),
///             db: DbInstant(1_000_000 + (101 * i as i64)),
///         }
///     })
///     .collect();
/// let fit = fit_rate(&samples)?;
/// assert!((fit.difference - 0.01).abs() < 1e-6);
/// assert!(fit.uncertainty < 0.01);
/// // The default configuration (term 30 s, margin 2 s) tolerates 6.7 %: within.
/// assert!(fit.verdict(&LeaseConfig::default()).is_within());
/// # Ok::<(), leasehold_core::clock_rate::FitError>(())
/// ```
///
/// # Errors
/// [`FitError::TooFewSamples`] under three samples, [`FitError::NoSpan`] when they span no
/// time.
#[allow(clippy::cast_precision_loss)] // milliseconds and seconds far below 2^52
pub fn fit_rate(samples: &[ClockSample]) -> Result<RateFit, FitError> {
    if samples.len() < 3 {
        return Err(FitError::TooFewSamples(samples.len()));
    }
    let origin = samples[0].sent;
    let db0 = samples[0].db.as_millis();
    let mid = |s: &ClockSample| {
        let sent = s.sent.saturating_duration_since(origin).as_secs_f64();
        let received = s.received.saturating_duration_since(origin).as_secs_f64();
        (sent + received.max(sent)) / 2.0
    };
    let xs: Vec<f64> = samples.iter().map(mid).collect();
    let ys: Vec<f64> = samples
        .iter()
        .map(|s| (s.db.as_millis() - db0) as f64 / 1000.0)
        .collect();
    let n = samples.len() as f64;
    let mean_x = xs.iter().sum::<f64>() / n;
    let mean_y = ys.iter().sum::<f64>() / n;
    let sxx: f64 = xs.iter().map(|x| (x - mean_x).powi(2)).sum();
    if sxx <= 0.0 {
        return Err(FitError::NoSpan);
    }
    let sxy: f64 = xs
        .iter()
        .zip(&ys)
        .map(|(x, y)| (x - mean_x) * (y - mean_y))
        .sum();
    let slope = sxy / sxx;
    let intercept = mean_y - slope * mean_x;
    let ssr: f64 = xs
        .iter()
        .zip(&ys)
        .map(|(x, y)| (y - intercept - slope * x).powi(2))
        .sum();
    let standard_error = (ssr / (n - 2.0) / sxx).sqrt();
    // The slope is Σ w_i y_i with w_i = (x_i − x̄) / Sxx; an error of at most e_i in each y_i
    // moves it by at most Σ |w_i| e_i. A sample's database time was read somewhere within its
    // round trip (half of it either side of the midpoint, which the database's clock measures
    // at its own rate) and floored to the millisecond.
    let resolution = DB_CLOCK_RESOLUTION.as_secs_f64();
    let db_rate = slope.abs().max(1.0);
    let uncertainty: f64 = samples
        .iter()
        .zip(&xs)
        .map(|(s, x)| {
            let rtt = s.received.saturating_duration_since(s.sent).as_secs_f64();
            (x - mean_x).abs() / sxx * (rtt / 2.0 * db_rate + resolution)
        })
        .sum();
    let first = samples.iter().map(|s| s.sent).min().unwrap_or(origin);
    let last = samples.iter().map(|s| s.received).max().unwrap_or(origin);
    Ok(RateFit {
        difference: slope - 1.0,
        uncertainty,
        standard_error,
        samples: samples.len(),
        window: last.saturating_duration_since(first),
        max_round_trip: samples
            .iter()
            .map(|s| s.received.saturating_duration_since(s.sent))
            .max()
            .unwrap_or_default(),
    })
}

/// The rate difference a configuration tolerates: `safety_margin / term`.
#[must_use]
pub fn allowed_difference(config: &LeaseConfig) -> f64 {
    config.safety_margin().as_secs_f64() / config.term().as_secs_f64()
}

/// What a [`RateFit`] says about assumption 2 for one configuration.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum ClockRateVerdict {
    /// `|difference| + uncertainty < allowed`: the clocks are shown to agree well enough.
    Within {
        /// `safety_margin / term`.
        allowed: f64,
    },
    /// `|difference| − uncertainty ≥ allowed`: the clocks are shown to disagree too much; two
    /// holders can believe at once. Raise the safety margin or fix the clocks.
    TooLarge {
        /// `safety_margin / term`.
        allowed: f64,
    },
    /// Neither could be shown: the uncertainty is too large (round trips too slow for the
    /// window). Measure over a longer window.
    Inconclusive {
        /// `safety_margin / term`.
        allowed: f64,
    },
}

impl ClockRateVerdict {
    /// Whether the clocks were shown to agree within the configuration's tolerance.
    #[must_use]
    pub fn is_within(&self) -> bool {
        matches!(self, Self::Within { .. })
    }
}

impl RateFit {
    /// Judges this fit against `config`'s tolerance, `safety_margin / term`.
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use leasehold_core::clock_rate::{ClockRateVerdict, RateFit};
    /// use leasehold_core::LeaseConfig;
    /// let fit = RateFit {
    ///     difference: 0.2, uncertainty: 0.01, standard_error: 0.001, samples: 20,
    ///     window: Duration::from_secs(2), max_round_trip: Duration::from_millis(3),
    /// };
    /// assert!(matches!(fit.verdict(&LeaseConfig::default()), ClockRateVerdict::TooLarge { .. }));
    /// ```
    #[must_use]
    pub fn verdict(&self, config: &LeaseConfig) -> ClockRateVerdict {
        let allowed = allowed_difference(config);
        let d = self.difference.abs();
        if d + self.uncertainty < allowed {
            ClockRateVerdict::Within { allowed }
        } else if d - self.uncertainty >= allowed {
            ClockRateVerdict::TooLarge { allowed }
        } else {
            ClockRateVerdict::Inconclusive { allowed }
        }
    }
}

impl fmt::Display for RateFit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "database clock rate minus monotonic = {:+.6} ± {:.6} ({} samples over {:?}, round trip up to {:?})",
            self.difference, self.uncertainty, self.samples, self.window, self.max_round_trip
        )
    }
}

impl fmt::Display for ClockRateVerdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Within { allowed } => {
                write!(
                    f,
                    "within the tolerated {allowed:.6} (safety_margin / term)"
                )
            }
            Self::TooLarge { allowed } => write!(
                f,
                "larger than the tolerated {allowed:.6} (safety_margin / term): two holders can believe at once; raise the safety margin or fix the clocks"
            ),
            Self::Inconclusive { allowed } => write!(
                f,
                "cannot be shown within the tolerated {allowed:.6} (safety_margin / term): the uncertainty is too large; measure over a longer window"
            ),
        }
    }
}

/// How a clock-rate check samples: `samples` reads of the database's clock spread evenly over
/// `window`. Defaults: 20 samples over 2 s.
///
/// The uncertainty of the measurement is about (round trip + 2 ms) / window: on a local
/// network (a round trip of 1 ms) the default window shows differences of about 0.15 %, far
/// finer than the default tolerance of 6.7 % (2 s / 30 s).
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use leasehold_core::clock_rate::ClockRateOptions;
/// let options = ClockRateOptions::new().window(Duration::from_secs(5)).samples(50);
/// assert_eq!((options.window_len(), options.sample_count()), (Duration::from_secs(5), 50));
/// assert!(ClockRateOptions::new().samples(2).validate().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub struct ClockRateOptions {
    window: Duration,
    samples: usize,
}

impl Default for ClockRateOptions {
    fn default() -> Self {
        Self {
            window: Duration::from_secs(2),
            samples: 20,
        }
    }
}

impl ClockRateOptions {
    /// 20 samples over 2 s.
    pub fn new() -> Self {
        Self::default()
    }

    /// The time the samples are spread over (default 2 s; at least 10 ms).
    pub fn window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// How many samples (default 20; at least 3).
    pub fn samples(mut self, samples: usize) -> Self {
        self.samples = samples;
        self
    }

    /// The window.
    #[must_use]
    pub fn window_len(&self) -> Duration {
        self.window
    }

    /// The number of samples.
    #[must_use]
    pub fn sample_count(&self) -> usize {
        self.samples
    }

    /// Checks the options.
    ///
    /// # Errors
    /// [`ValidationError::TooShort`] for a window under 10 ms, [`ValidationError::Relation`]
    /// for fewer than 3 samples.
    pub fn validate(&self) -> Result<(), ValidationError> {
        let min = Duration::from_millis(10);
        if self.window < min {
            return Err(ValidationError::TooShort {
                field: "clock-rate window",
                value: self.window,
                min,
            });
        }
        if self.samples < 3 {
            return Err(ValidationError::Relation {
                field: "clock-rate samples",
                reason: format!("{} samples; at least 3 are needed for a fit", self.samples),
            });
        }
        Ok(())
    }

    /// The time between two samples: `window / (samples − 1)`.
    #[must_use]
    pub fn every(&self) -> Duration {
        self.window / u32::try_from(self.samples - 1).unwrap_or(u32::MAX)
    }
}

/// A clock-rate difference read from samples, and what it means for one configuration.
///
/// Made by `leasehold_storage::measure_clock_rate` (and the `leasehold` facade's, which also
/// publishes it to the gauges), which samples a store.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClockRateReport {
    /// The fit: the rate difference and its uncertainty.
    pub fit: RateFit,
    /// The verdict against `safety_margin / term`.
    pub verdict: ClockRateVerdict,
}

impl ClockRateReport {
    /// `fit` judged against `config`.
    #[must_use]
    pub fn new(fit: RateFit, config: &LeaseConfig) -> Self {
        let verdict = fit.verdict(config);
        Self { fit, verdict }
    }
}

impl fmt::Display for ClockRateReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.fit, self.verdict)
    }
}

#[cfg(test)]
mod tests;
