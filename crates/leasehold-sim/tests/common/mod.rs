//! Running many seeds, from the environment, on every core.
#![allow(dead_code)] // each test binary uses part of it

use std::num::NonZeroUsize;

use leasehold_sim::{SimConfig, SimReport, Stats, run};

/// Seeds run when `LEASEHOLD_SIM_SEEDS` is not set.
pub const DEFAULT_SEEDS: u64 = 1000;

/// The seeds to run: `LEASEHOLD_SIM_SEED=<n>` alone, else `0..LEASEHOLD_SIM_SEEDS`
/// (default [`DEFAULT_SEEDS`]).
pub fn seeds() -> Vec<u64> {
    let var = |name: &str| {
        std::env::var(name).ok().map(|v| {
            v.trim()
                .parse::<u64>()
                .unwrap_or_else(|_| panic!("{name} must be a number, not {v:?}"))
        })
    };
    match var("LEASEHOLD_SIM_SEED") {
        Some(seed) => vec![seed],
        None => (0..var("LEASEHOLD_SIM_SEEDS").unwrap_or(DEFAULT_SEEDS)).collect(),
    }
}

/// Runs every seed (on all cores) and returns the failing reports and the summed stats.
pub fn run_all(seeds: &[u64], config: &SimConfig) -> (Vec<SimReport>, Stats, Vec<SimReport>) {
    let threads = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
    let chunk = seeds.len().div_ceil(threads).max(1);
    let results: Vec<(Vec<SimReport>, Stats, Vec<SimReport>)> = std::thread::scope(|s| {
        let handles: Vec<_> = seeds
            .chunks(chunk)
            .map(|part| {
                s.spawn(move || {
                    let mut failed = Vec::new();
                    let mut passed = Vec::new();
                    let mut total = Stats::default();
                    for &seed in part {
                        let report = run(seed, config);
                        total.add(&report.stats);
                        if report.is_ok() {
                            passed.push(report);
                        } else {
                            failed.push(report);
                        }
                    }
                    (failed, total, passed)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a simulation thread panicked"))
            .collect()
    });
    let mut failed = Vec::new();
    let mut passed = Vec::new();
    let mut total = Stats::default();
    for (f, t, p) in results {
        failed.extend(f);
        passed.extend(p);
        total.add(&t);
    }
    failed.sort_by_key(|r| r.seed);
    (failed, total, passed)
}

/// Reruns a failing seed with a trace and describes it: the violation, how to reproduce it,
/// and the last steps before it.
pub fn explain(report: &SimReport, config: &SimConfig) -> String {
    let traced = run(
        report.seed,
        &SimConfig {
            trace: true,
            ..config.clone()
        },
    );
    let tail: Vec<&str> = traced
        .trace
        .iter()
        .rev()
        .take(40)
        .rev()
        .map(String::as_str)
        .collect();
    format!("{report}last steps:\n  {}", tail.join("\n  "))
}
