//! `Registry::has_lease` and `has_lease_str` with 1,000 and 100,000 held keys on the real
//! monotonic clock, next to a baseline: a std `HashMap<String, Instant>` lookup and an
//! `Instant::now` comparison, the least a from-memory answer can cost, and the clock read alone.
//!
//! Only the public API is used (`new`, `set`, `has_lease`, `has_lease_str`). Lookups cycle
//! through the keys in a scrambled order, so the larger map is not served from one cache line.
#![allow(clippy::disallowed_methods)] // the baseline reads the process clock by design

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use leasehold_engine::Registry;
use leasehold_core::{Clock, LeaseKey, MonotonicClock};

const KEY_COUNTS: [usize; 2] = [1_000, 100_000];
const NAMESPACE: &str = "bench";
const HOUR: Duration = Duration::from_secs(3_600);

/// The lease names, in a scrambled order (a multiplicative step co-prime with `count`).
fn names(count: usize) -> Vec<String> {
    let step = 7_919; // prime, and neither count is a multiple of it
    (0..count)
        .map(|i| format!("orders/shard-{}", (i * step) % count))
        .collect()
}

/// The next index of a cycle through `len` items, without a division.
fn next(i: &mut usize, len: usize) -> usize {
    *i += 1;
    if *i == len {
        *i = 0;
    }
    *i
}

fn has_lease(c: &mut Criterion) {
    let mut group = c.benchmark_group("has_lease");
    // The clock read alone: part of every call below.
    group.bench_function("baseline_clock_read", |b| b.iter(|| MonotonicClock.now()));
    for count in KEY_COUNTS {
        let names = names(count);
        let keys: Vec<LeaseKey> = names
            .iter()
            .map(|name| LeaseKey::parse(NAMESPACE, name).expect("valid key"))
            .collect();
        let registry = Registry::new(Arc::new(MonotonicClock));
        let deadline = MonotonicClock.now() + HOUR;
        for key in &keys {
            registry.set(key, Some(deadline));
        }
        assert!(keys.iter().all(|key| registry.has_lease(key)));

        group.bench_with_input(BenchmarkId::new("has_lease", count), &keys, |b, keys| {
            let mut i = 0;
            b.iter(|| registry.has_lease(black_box(&keys[next(&mut i, keys.len())])));
        });
        group.bench_with_input(
            BenchmarkId::new("has_lease_str", count),
            &names,
            |b, names| {
                let mut i = 0;
                b.iter(|| {
                    let name = &names[next(&mut i, names.len())];
                    registry.has_lease_str(black_box(NAMESPACE), black_box(name))
                });
            },
        );

        let std_deadline = Instant::now() + HOUR;
        let baseline: HashMap<String, Instant> = names
            .iter()
            .map(|name| (name.clone(), std_deadline))
            .collect();
        group.bench_with_input(
            BenchmarkId::new("baseline_std_hashmap", count),
            &names,
            |b, names| {
                let mut i = 0;
                b.iter(|| {
                    let name = &names[next(&mut i, names.len())];
                    baseline
                        .get(black_box(name.as_str()))
                        .is_some_and(|deadline| Instant::now() < *deadline)
                });
            },
        );
    }
    group.finish();
}

criterion_group!(benches, has_lease);
criterion_main!(benches);
