//! Yields (`Event::Yield`: the tenure ends here, is released, and the holder competes again one
//! retry interval after the release settled) during the fault window: the invariants hold.
//! 300 seeds by default (about 8 s), `LEASEHOLD_SIM_SEEDS` / `LEASEHOLD_SIM_SEED` as elsewhere.

mod common;

use leasehold_sim::SimConfig;

#[test]
fn invariants_hold_with_yields() {
    let mut config = SimConfig::default();
    config.faults.yield_every = Some(config.lease.term() * 3);
    let mut seeds = common::seeds();
    if std::env::var_os("LEASEHOLD_SIM_SEEDS").is_none() {
        seeds.truncate(300);
    }
    let (failed, total, _) = common::run_all(&seeds, &config);
    eprintln!(
        "{} of {} seeds failed; {total:?}",
        failed.len(),
        seeds.len()
    );
    assert!(total.yields > 0 && total.takeovers > 0);
    if let Some(first) = failed.first() {
        panic!("{}", common::explain(first, &config));
    }
}
