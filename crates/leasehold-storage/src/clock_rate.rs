//! Measuring the clock-rate difference between a store's database clock and this process's
//! monotonic clock ([`measure_clock_rate`]); the fit and the verdict are
//! [`leasehold_core::clock_rate`].

use leasehold_core::clock_rate::{ClockRateOptions, ClockRateReport, ClockSample, fit_rate};
use leasehold_core::{Clock, LeaseConfig, ValidationError};

use crate::{LeaseStore, StoreError};

/// Measures how the database's clock rate differs from this process's monotonic clock: the
/// samples of `options` (each read of the database clock bounded by `config`'s request
/// timeout), fitted by least squares, judged against `config`'s `safety_margin / term`
/// (assumption 2 of `docs/semantics.md`). Takes about `options.window_len()`.
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold_storage::StoreError> {
/// use std::time::Duration;
/// use leasehold_core::clock_rate::ClockRateOptions;
/// use leasehold_core::{LeaseConfig, MonotonicClock};
/// use leasehold_storage::{MemoryStore, measure_clock_rate};
/// let options = ClockRateOptions::new().window(Duration::from_millis(200)).samples(5);
/// let report = measure_clock_rate(&MemoryStore::new(), &MonotonicClock, &LeaseConfig::default(), &options).await?;
/// println!("{report}");
/// assert_eq!(report.fit.samples, 5);
/// # Ok(()) }
/// ```
///
/// # Errors
/// [`StoreError::Invalid`] for bad options or configuration; the store's error when a read of
/// the database clock fails, [`StoreError::TimedOut`] when one gets no answer in time.
///
/// # Cancel safety
/// Cancel safe: it only reads.
pub async fn measure_clock_rate(
    store: &dyn LeaseStore,
    clock: &dyn Clock,
    config: &LeaseConfig,
    options: &ClockRateOptions,
) -> Result<ClockRateReport, StoreError> {
    options.validate()?;
    config.validate()?;
    let limit = config.request_timeout();
    let count = options.sample_count();
    let mut samples = Vec::with_capacity(count);
    let start = clock.now();
    for i in 0..count {
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
