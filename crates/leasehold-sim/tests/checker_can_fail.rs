//! The checker is not vacuous: with clocks drifting beyond what the safety margin covers, the
//! same simulation does find a holder believing it holds a lease the store has let go.

mod common;

use std::time::Duration;

use leasehold_sim::SimConfig;

/// Runs `seeds` seeds of a configuration that breaks `drift_within_margin` and asserts that at
/// least one of them is caught by a safety invariant.
fn caught(config: &SimConfig, seeds: u64) -> usize {
    assert!(!config.drift_within_margin());
    let seeds: Vec<u64> = (0..seeds).collect();
    let (failed, _, _) = common::run_all(&seeds, config);
    let safety: Vec<_> = failed
        .iter()
        .flat_map(|r| &r.violations)
        .filter(|v| matches!(v.invariant, "one_holder" | "store_agrees"))
        .collect();
    eprintln!(
        "{} of {} seeds caught; first: {:?}",
        failed.len(),
        seeds.len(),
        safety.first().map(ToString::to_string)
    );
    safety.len()
}

#[test]
fn a_margin_of_one_millisecond_with_drifting_clocks_is_caught() {
    let mut config = SimConfig::default();
    config.lease = config.lease.with_safety_margin(Duration::from_millis(1));
    assert!(caught(&config, 40) > 0);
}

#[test]
fn clocks_drifting_beyond_the_margin_are_caught() {
    let config = SimConfig {
        max_drift_ppm: 300_000,
        ..SimConfig::default()
    };
    assert!(caught(&config, 40) > 0);
}
