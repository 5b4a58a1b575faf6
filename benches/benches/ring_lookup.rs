//! The host ring: owner lookup at 3, 10 and 100 hosts, and the rebuild when a host joins.
//!
//! Lookups cycle through 4,096 task names so the figure is not one cached name. The join is
//! measured both as the engine does it (`HostRing::from_hosts` over the new live set, see
//! `leasehold::shard`) and as an incremental `HostRing::add` on a clone made in the setup.

use std::hint::black_box;

use criterion::{BatchSize, BenchmarkId, Criterion, criterion_group, criterion_main};
use leasehold_ring::HostRing;

const HOST_COUNTS: [usize; 3] = [3, 10, 100];
const JOINER: &str = "joiner-host:31337:abcd";

/// Holder-id shaped host names: hostname:pid:nonce.
fn hosts(count: usize) -> Vec<String> {
    (0..count)
        .map(|i| format!("node-{i}.example:{}:{:04x}", 1000 + i, (i * 7919) & 0xffff))
        .collect()
}

fn task_names(count: usize) -> Vec<String> {
    (0..count).map(|i| format!("orders/shard-{i}")).collect()
}

fn owner_lookup(c: &mut Criterion) {
    let names = task_names(4_096);
    let mut group = c.benchmark_group("ring_lookup/owner");
    for count in HOST_COUNTS {
        let ring = HostRing::from_hosts(hosts(count));
        group.bench_with_input(BenchmarkId::from_parameter(count), &ring, |b, ring| {
            let mut i = 0;
            b.iter(|| {
                i = (i + 1) % names.len();
                ring.owner(black_box(&names[i])).map(str::len)
            });
        });
    }
    group.finish();
}

fn host_join(c: &mut Criterion) {
    let mut group = c.benchmark_group("ring_lookup/join");
    for count in HOST_COUNTS {
        let live = hosts(count);
        let mut joined = live.clone();
        joined.push(JOINER.to_owned());
        group.bench_with_input(BenchmarkId::new("rebuild", count), &joined, |b, joined| {
            b.iter(|| HostRing::from_hosts(black_box(joined)));
        });
        let ring = HostRing::from_hosts(&live);
        group.bench_with_input(BenchmarkId::new("add", count), &ring, |b, ring| {
            b.iter_batched(
                || ring.clone(),
                |mut ring| {
                    assert!(ring.add(black_box(JOINER)));
                    ring
                },
                BatchSize::SmallInput,
            );
        });
    }
    group.finish();
}

criterion_group!(benches, owner_lookup, host_join);
criterion_main!(benches);
