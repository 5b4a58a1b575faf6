//! A seed reproduces its run exactly; different seeds give different runs.

use leasehold_sim::{SimConfig, run};

#[test]
fn the_same_seed_gives_the_same_run() {
    let config = SimConfig {
        trace: true,
        ..SimConfig::default()
    };
    let a = run(7, &config);
    let b = run(7, &config);
    assert!(!a.trace.is_empty());
    assert_eq!(a, b);
    let c = run(8, &config);
    assert_ne!(a.stats, c.stats);
}

#[test]
fn a_refused_configuration_is_reported() {
    let mut config = SimConfig::default();
    config.lease = config
        .lease
        .with_safety_margin(std::time::Duration::from_secs(5));
    let report = run(1, &config);
    assert_eq!(report.violations.len(), 1);
    assert_eq!(report.violations[0].invariant, "config");
}
