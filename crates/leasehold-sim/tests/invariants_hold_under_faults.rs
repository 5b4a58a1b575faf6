//! The invariants hold for every seed of the default configuration, and the runs did exercise
//! faults and takeovers.
//!
//! `LEASEHOLD_SIM_SEEDS=<n>` sets how many seeds (default 1,000), `LEASEHOLD_SIM_SEED=<n>` runs
//! one. Release check: `LEASEHOLD_SIM_SEEDS=100000 cargo test --release -p leasehold-sim`.

mod common;

use leasehold_sim::SimConfig;

#[test]
fn invariants_hold_for_every_seed() {
    let config = SimConfig::default();
    assert!(config.drift_within_margin());
    let seeds = common::seeds();
    let clock = leasehold_core::MonotonicClock;
    let started = leasehold_core::Clock::now(&clock);
    let (failed, total, passed) = common::run_all(&seeds, &config);
    eprintln!(
        "{} seeds in {:.1?}: {} failed; {total:?}",
        seeds.len(),
        started.elapsed(),
        failed.len()
    );
    if let Some(first) = failed.first() {
        let seeds: Vec<u64> = failed.iter().map(|r| r.seed).collect();
        panic!(
            "{} of {} seeds broke an invariant: {seeds:?}\n{}",
            failed.len(),
            seeds.len(),
            common::explain(first, &config)
        );
    }
    // A run with no fault or no takeover proves nothing: make sure they happened.
    for (what, n) in [
        ("dropped requests", total.dropped_requests),
        ("failed requests", total.failed_requests),
        ("dropped answers", total.dropped_answers),
        ("failed answers", total.failed_answers),
        ("slow requests", total.slow_requests),
        ("slow answers", total.slow_answers),
        ("late answers", total.late_answers),
        ("pauses", total.pauses),
        ("crashes", total.crashes),
        ("takeovers", total.takeovers),
        ("losses", total.losses),
    ] {
        assert!(n > 0, "no {what} in {} seeds: {total:?}", seeds.len());
    }
    let with_takeover = passed.iter().filter(|r| r.stats.takeovers > 0).count();
    assert!(
        with_takeover * 10 >= passed.len() * 9,
        "only {with_takeover} of {} runs had a takeover",
        passed.len()
    );
}
