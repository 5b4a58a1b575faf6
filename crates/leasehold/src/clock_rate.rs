//! The clock-rate check with a verdict: samples the database's clock against the monotonic
//! clock over a window and judges the fit ([`leasehold_core::clock_rate`]) against
//! `safety_margin / term`: [`measure_clock_rate`] (the sampling is `leasehold_storage`'s, which
//! `leasehold check` uses) and the service's
//! opt-in background check ([`LeaseServiceBuilder::check_clock_rate`](crate::LeaseServiceBuilder::check_clock_rate)).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use actix::Addr;
use leasehold_core::clock_rate::{ClockRateOptions, ClockRateReport, ClockSample, fit_rate};
use leasehold_core::{Clock, LeaseConfig};
use leasehold_engine::{LeaseEngine, ReadDbNow};
use leasehold_storage::{LeaseStore, StoreError};
use tokio_util::sync::CancellationToken;

use crate::Result;

/// Measures how the database's clock rate differs from this process's monotonic clock: the
/// samples of `options` (each read bounded by `config`'s request timeout), fitted by least
/// squares, judged against `config`'s `safety_margin / term` (assumption 2 of
/// `docs/semantics.md`), and published to the gauges. Takes about `options.window_len()`.
/// (`leasehold_storage::measure_clock_rate` without the gauges.)
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
/// use std::time::Duration;
/// use leasehold::LeaseConfig;
/// use leasehold::clock::{ClockRateOptions, MonotonicClock, measure_clock_rate};
/// use leasehold::store::MemoryStore;
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
    let report = leasehold_storage::measure_clock_rate(store, clock, config, options)
        .await
        .map_err(|e| match e {
            StoreError::Invalid(v) => crate::Error::Invalid(v),
            other => crate::Error::Store(other),
        })?;
    publish(&report);
    Ok(report)
}

/// Publishes a report to the gauges.
fn publish(report: &ClockRateReport) {
    leasehold_engine::metrics::clock_rate(
        report.fit.difference,
        report.fit.uncertainty,
        report.verdict.is_within(),
    );
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
    let mut ring: VecDeque<ClockSample> = VecDeque::with_capacity(options.sample_count());
    let limit = config.request_timeout();
    let full = options.window_len().mul_f64(0.9);
    loop {
        let sent = clock.now();
        let read = tokio::select! {
            () = stop.cancelled() => return,
            read = tokio::time::timeout(limit, engine.send(ReadDbNow)) => read,
        };
        match read {
            Ok(Ok(Ok(db))) => {
                if ring.len() == options.sample_count() {
                    ring.pop_front();
                }
                ring.push_back(ClockSample {
                    sent,
                    received: clock.now(),
                    db,
                });
            }
            Ok(Err(_)) => return, // the engine stopped
            Ok(Ok(Err(e))) => tracing::debug!("clock-rate check: db_now failed: {e}"),
            Err(_) => tracing::debug!("clock-rate check: db_now got no answer within {limit:?}"),
        }
        let span = match (ring.front(), ring.back()) {
            (Some(a), Some(b)) => b.received.saturating_duration_since(a.sent),
            _ => Duration::ZERO,
        };
        if span >= full {
            let samples: Vec<ClockSample> = ring.iter().copied().collect();
            if let Ok(fit) = fit_rate(&samples) {
                let report = ClockRateReport::new(fit, &config);
                publish(&report);
                if !report.verdict.is_within() {
                    tracing::warn!("clock-rate check: {report}");
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
