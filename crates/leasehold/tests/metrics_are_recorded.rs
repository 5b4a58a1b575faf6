//! With the `metrics` feature (on by default), the engine reports grants, losses, releases and
//! batched renewals to whatever recorder the application installed, and keeps the gauges of
//! held leases and "is leader" per name.
#![cfg(feature = "metrics")]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use leasehold::{LeaseConfig, LeaseService, LeaseTaskOptions};
use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};

/// Counts increments and histogram samples per metric name (labels folded in).
#[derive(Default)]
struct Tally(Mutex<HashMap<String, Arc<Cell>>>);

#[derive(Default)]
struct Cell(AtomicU64);

impl CounterFn for Cell {
    fn increment(&self, value: u64) {
        self.0.fetch_add(value, Ordering::SeqCst);
    }
    fn absolute(&self, value: u64) {
        self.0.store(value, Ordering::SeqCst);
    }
}

impl HistogramFn for Cell {
    fn record(&self, _value: f64) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A gauge's value (f64 bits).
#[derive(Default)]
struct Level(AtomicU64);

impl GaugeFn for Level {
    fn increment(&self, value: f64) {
        let _ = self
            .0
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| {
                Some((f64::from_bits(v) + value).to_bits())
            });
    }
    fn decrement(&self, value: f64) {
        self.increment(-value);
    }
    fn set(&self, value: f64) {
        self.0.store(value.to_bits(), Ordering::SeqCst);
    }
}

/// Gauges by name and labels: `name{k=v,...}`.
#[derive(Default)]
struct Levels(Mutex<HashMap<String, Arc<Level>>>);

fn series(key: &Key) -> String {
    let labels: Vec<String> = key
        .labels()
        .map(|l| format!("{}={}", l.key(), l.value()))
        .collect();
    format!("{}{{{}}}", key.name(), labels.join(","))
}

impl Levels {
    fn cell(&self, key: &Key) -> Arc<Level> {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(map.entry(series(key)).or_default())
    }
    fn get(&self, series: &str) -> Option<f64> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(series)
            .map(|c| f64::from_bits(c.0.load(Ordering::SeqCst)))
    }
}

impl Tally {
    fn cell(&self, key: &Key) -> Arc<Cell> {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(map.entry(key.name().to_owned()).or_default())
    }
    fn get(&self, name: &str) -> u64 {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            .map_or(0, |c| c.0.load(Ordering::SeqCst))
    }
}

struct TallyRecorder(Arc<Tally>, Arc<Levels>);

impl Recorder for TallyRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.0.cell(key))
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.1.cell(key))
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(self.0.cell(key))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_renewals_and_releases_are_counted() {
    let tally = Arc::new(Tally::default());
    let levels = Arc::new(Levels::default());
    metrics::set_global_recorder(TallyRecorder(Arc::clone(&tally), Arc::clone(&levels)))
        .expect("the only recorder of this test binary");

    let service = LeaseService::builder("sqlite::memory:")
        .config(
            LeaseConfig::default()
                .with_term(Duration::from_millis(600))
                .with_retry_interval(Duration::from_millis(50)),
        )
        .build()
        .await
        .expect("service");
    for name in ["a", "b", "c"] {
        let task = service
            .start_lease_task(name, LeaseTaskOptions::new())
            .await
            .expect("start");
        tokio::time::timeout(Duration::from_secs(10), task.acquired())
            .await
            .expect("in time")
            .expect("held");
    }
    assert_eq!(levels.get("leasehold_leases_held{}"), Some(3.0));
    // A few renew intervals (term / 3 = 200 ms each).
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(service.stop_lease_task("a").await.expect("stop"));
    assert_eq!(levels.get("leasehold_leases_held{}"), Some(2.0));
    assert_eq!(
        levels.get("leasehold_is_leader{namespace=,name=a}"),
        Some(0.0)
    );
    assert_eq!(
        levels.get("leasehold_is_leader{namespace=,name=b}"),
        Some(1.0)
    );

    assert_eq!(tally.get("leasehold_grants_total"), 3);
    assert!(
        tally.get("leasehold_renew_batches_total") >= 1,
        "no batched renewal recorded"
    );
    assert_eq!(
        tally.get("leasehold_renew_batch_leases"),
        tally.get("leasehold_renew_batch_seconds")
    );
    assert_eq!(tally.get("leasehold_releases_total"), 1);
    assert_eq!(tally.get("leasehold_losses_total"), 0);
    for name in leasehold::engine::metrics::METRIC_NAMES {
        assert!(name.starts_with("leasehold_"));
    }
    service.shutdown().await.expect("shutdown");
    assert_eq!(levels.get("leasehold_leases_held{}"), Some(0.0));
    assert_eq!(
        levels.get("leasehold_is_leader{namespace=,name=b}"),
        Some(0.0)
    );
}
