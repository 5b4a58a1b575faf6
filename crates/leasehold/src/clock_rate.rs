//! The clock-rate check with a verdict: samples the database's clock against the monotonic
//! clock over a window and judges the fit ([`leasehold_core::clock_rate`]) against
//! `safety_margin / term`. Used by `leasehold check`, [`measure_clock_rate`] and the service's
//! opt-in background check ([`LeaseServiceBuilder::check_clock_rate`](crate::LeaseServiceBuilder::check_clock_rate)).

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use actix::Addr;
use leasehold_actor::{LeaseEngine, ReadDbNow};
use leasehold_core::clock_rate::{ClockRateVerdict, ClockSample, RateFit, fit_rate};
use leasehold_core::{Clock, LeaseConfig, ValidationError};
use leasehold_storage::{LeaseStore, StoreError};
use tokio_util::sync::CancellationToken;

use crate::Result;

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
/// use leasehold::ClockRateOptions;
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

    /// The time between two samples.
    fn every(&self) -> Duration {
        self.window / u32::try_from(self.samples - 1).unwrap_or(u32::MAX)
    }
}

/// A measured clock-rate difference and what it means for one configuration.
///
/// # Examples
/// See [`measure_clock_rate`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClockRateReport {
    /// The fit: the rate difference and its uncertainty.
    pub fit: RateFit,
    /// The verdict against `safety_margin / term`.
    pub verdict: ClockRateVerdict,
}

impl ClockRateReport {
    fn new(fit: RateFit, config: &LeaseConfig) -> Self {
        let verdict = fit.verdict(config);
        leasehold_actor::metrics::clock_rate(fit.difference, fit.uncertainty, verdict.is_within());
        Self { fit, verdict }
    }
}

impl fmt::Display for ClockRateReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.fit, self.verdict)
    }
}

/// Measures how the database's clock rate differs from this process's monotonic clock: the
/// samples of `options` (each read bounded by `config`'s request timeout), fitted by least
/// squares, judged against `config`'s `safety_margin / term` (assumption 2 of
/// `docs/semantics.md`). Takes about `options.window_len()`.
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
/// use std::time::Duration;
/// use leasehold::{ClockRateOptions, LeaseConfig, MemoryStore, MonotonicClock, measure_clock_rate};
/// let store = MemoryStore::new();
/// let options = ClockRateOptions::new().window(Duration::from_millis(200)).samples(5);
/// let report = measure_clock_rate(&store, &MonotonicClock, &LeaseConfig::default(), &options).await?;
/// println!("{report}");
/// assert_eq!(report.fit.samples, 5);
/// # Ok(()) }
/// ```
///
/// # Errors
/// [`Error::Invalid`](crate::Error::Invalid) for bad options or configuration;
/// [`Error::Store`](crate::Error::Store) when a read of the database clock fails or times out.
///
/// # Cancel safety
/// Cancel safe: it only reads.
pub async fn measure_clock_rate(
    store: &dyn LeaseStore,
    clock: &dyn Clock,
    config: &LeaseConfig,
    options: &ClockRateOptions,
) -> Result<ClockRateReport> {
    options.validate()?;
    config.validate()?;
    let limit = config.request_timeout();
    let mut samples = Vec::with_capacity(options.samples);
    let start = clock.now();
    for i in 0..options.samples {
        let at = start + options.every() * u32::try_from(i).unwrap_or(u32::MAX);
        tokio::time::sleep(at.saturating_duration_since(clock.now())).await;
        let sent = clock.now();
        let db = tokio::time::timeout(limit, store.db_now())
            .await
            .map_err(|_| StoreError::TimedOut {
                op: "db_now",
                after: limit,
            })??;
        let received = clock.now();
        samples.push(ClockSample { sent, received, db });
    }
    let fit = fit_rate(&samples).map_err(|e| ValidationError::Relation {
        field: "clock-rate samples",
        reason: e.to_string(),
    })?;
    Ok(ClockRateReport::new(fit, config))
}

/// The service's background check: a sample every `window / (samples − 1)` through the
/// engine, the last `samples` fitted once they span the window, the report kept in `slot` and
/// published to the gauges. Ends when `stop` is cancelled (shutdown or drop of the service).
pub(crate) async fn background(
    engine: Addr<LeaseEngine>,
    clock: Arc<dyn Clock>,
    config: LeaseConfig,
    options: ClockRateOptions,
    slot: Arc<Mutex<Option<ClockRateReport>>>,
    stop: CancellationToken,
) {
    let mut ring: VecDeque<ClockSample> = VecDeque::with_capacity(options.samples);
    let limit = config.request_timeout();
    let full = options.window.mul_f64(0.9);
    loop {
        let sent = clock.now();
        let read = tokio::select! {
            () = stop.cancelled() => return,
            read = tokio::time::timeout(limit, engine.send(ReadDbNow)) => read,
        };
        match read {
            Ok(Ok(Ok(db))) => {
                if ring.len() == options.samples {
                    ring.pop_front();
                }
                ring.push_back(ClockSample {
                    sent,
                    received: clock.now(),
                    db,
                });
            }
            Ok(Err(_)) => return, // the engine stopped
            Ok(Ok(Err(e))) => log::debug!("clock-rate check: db_now failed: {e}"),
            Err(_) => log::debug!("clock-rate check: db_now got no answer within {limit:?}"),
        }
        let span = match (ring.front(), ring.back()) {
            (Some(a), Some(b)) => b.received.saturating_duration_since(a.sent),
            _ => Duration::ZERO,
        };
        if span >= full {
            let samples: Vec<ClockSample> = ring.iter().copied().collect();
            if let Ok(fit) = fit_rate(&samples) {
                let report = ClockRateReport::new(fit, &config);
                if !report.verdict.is_within() {
                    log::warn!("clock-rate check: {report}");
                }
                *slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(report);
            }
        }
        let next = sent + options.every();
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(next.saturating_duration_since(clock.now())) => {}
        }
    }
}
