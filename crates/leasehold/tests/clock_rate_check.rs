//! The clock-rate check on every backend: `measure_clock_rate` fits the database's clock against
//! the monotonic clock with an uncertainty and a verdict; the service's background check reports
//! it through `health()`; a configuration that tolerates no difference at all cannot be shown
//! within.

mod common;

use std::sync::Arc;
use std::time::Duration;

use leasehold::clock::{ClockRateOptions, ClockRateVerdict, MonotonicClock, measure_clock_rate};
use leasehold::health::{HealthReason, Verdict};
use leasehold::store::{LeaseStore, StoreBuilder};
use leasehold::{LeaseConfig, LeaseService};

use common::{backends, unique_namespace};

fn options() -> ClockRateOptions {
    ClockRateOptions::new()
        .window(Duration::from_millis(600))
        .samples(7)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn measured_rate_is_within_the_default_tolerance_on_every_backend() {
    for (backend, url) in backends("clock-rate") {
        let store: Arc<dyn LeaseStore> = Arc::new(
            StoreBuilder::new(url)
                .migrate(true)
                .connect()
                .await
                .expect("store"),
        );
        let config = LeaseConfig::default();
        let report = measure_clock_rate(store.as_ref(), &MonotonicClock, &config, &options())
            .await
            .expect("measured");
        assert_eq!(report.fit.samples, 7, "{backend}");
        // The samples are scheduled over 600 ms from the start; a first sample sent late
        // under load shortens the measured span by that delay, never by much.
        assert!(
            report.fit.window >= Duration::from_millis(500),
            "{backend}: {report}"
        );
        assert!(report.fit.uncertainty > 0.0, "{backend}: {report}");
        // Real clocks differ by parts per million; 6.7 % is tolerated.
        assert!(report.verdict.is_within(), "{backend}: {report}");
        // A term of 30 s with the smallest margin (1 ms) tolerates 3.3e-5: the database's
        // millisecond clock over 0.6 s cannot show that.
        let strict = LeaseConfig::default().with_safety_margin(Duration::from_millis(1));
        assert!(
            matches!(
                report.fit.verdict(&strict),
                ClockRateVerdict::Inconclusive { .. }
            ),
            "{backend}: {report}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_background_check_reports_through_health_on_every_backend() {
    for (backend, url) in backends("clock-rate-bg") {
        let start = |config: LeaseConfig| {
            LeaseService::builder(url.clone())
                .namespace(unique_namespace("clock"))
                .config(config)
                .check_clock_rate(options())
                .build()
        };
        let service = start(LeaseConfig::default()).await.expect("service");
        let strict = start(LeaseConfig::default().with_safety_margin(Duration::from_millis(1)))
            .await
            .expect("service");
        let mut seen = (None, None);
        for _ in 0..100 {
            seen = (
                service.health().await.clock_rate,
                strict.health().await.clock_rate,
            );
            if seen.0.is_some() && seen.1.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let report = seen.0.unwrap_or_else(|| panic!("{backend}: no report"));
        assert!(report.verdict.is_within(), "{backend}: {report}");
        assert!(service.health().await.is_ready(), "{backend}");
        // The strict service cannot show its tolerance: not ready, and it says why.
        let health = strict.health().await;
        assert_eq!(health.verdict, Verdict::Degraded, "{backend}: {health}");
        assert!(
            health
                .reasons
                .iter()
                .any(|r| matches!(r, HealthReason::ClockRate(_))),
            "{backend}: {health}"
        );
        service.shutdown().await.expect("shutdown");
        strict.shutdown().await.expect("shutdown");
    }
}

#[tokio::test]
async fn bad_options_are_refused() {
    let store = leasehold::store::MemoryStore::new();
    let config = LeaseConfig::default();
    for bad in [
        ClockRateOptions::new().samples(2),
        ClockRateOptions::new().window(Duration::from_millis(1)),
    ] {
        let refused = measure_clock_rate(&store, &MonotonicClock, &config, &bad).await;
        assert!(
            matches!(refused, Err(leasehold::Error::Invalid(_))),
            "{bad:?}"
        );
        let refused = LeaseService::builder("sqlite::memory:")
            .check_clock_rate(bad)
            .build()
            .await;
        assert!(
            matches!(refused, Err(leasehold::Error::Invalid(_))),
            "{bad:?}"
        );
    }
}
