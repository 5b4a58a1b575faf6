//! Voluntary releases (`Event::Release`, then `Event::Start` a little later) during the fault
//! window. This is how the simulation found the stale-release bug replayed step by step in
//! `machine_bug_stale_release.rs` (seed 95 failed before every grant became a new tenure with
//! `LeaseStore::begin_tenure`).

mod common;

use leasehold_sim::SimConfig;

#[test]
fn invariants_hold_with_voluntary_releases() {
    let mut config = SimConfig::default();
    config.faults.release_every = Some(config.lease.term() * 3);
    let seeds = common::seeds();
    let (failed, total, _) = common::run_all(&seeds, &config);
    eprintln!(
        "{} of {} seeds failed; {total:?}",
        failed.len(),
        seeds.len()
    );
    assert!(total.releases > 0);
    if let Some(first) = failed.first() {
        panic!("{}", common::explain(first, &config));
    }
}
