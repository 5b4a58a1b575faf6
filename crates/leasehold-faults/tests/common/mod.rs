//! Shared by the real-fault tests: the holder binary, tool checks, scenario selection and the
//! summary that fails the test on any violation.
#![allow(dead_code)]

use std::path::PathBuf;

use leasehold_faults::oracle::Report;
use leasehold_faults::servers::ServerError;

/// The `fault-holder` binary cargo built for these tests.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_fault-holder"))
}

/// The value, or `None` (skip) when a tool is missing and `CI` is not set. With `CI` set, a
/// missing tool is a failure naming it.
pub fn require<T>(what: &str, r: Result<T, ServerError>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e @ ServerError::Missing { .. }) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "{what}: {e}. CI is set, so a missing tool fails the real-fault suite \
                 (install it, e.g. in .ci/run)"
            );
            eprintln!("SKIPPED {what}: {e} (set CI to make this a failure)");
            None
        }
        Err(e) => panic!("{what}: {e}"),
    }
}

/// Whether scenario `name` is selected (`LEASEHOLD_FAULTS=a,b` runs only those; default all).
pub fn selected(name: &str) -> bool {
    match std::env::var("LEASEHOLD_FAULTS") {
        Ok(list) if !list.trim().is_empty() => list.split(',').any(|s| name.contains(s.trim())),
        _ => true,
    }
}

/// Prints the table of every scenario and fails on any violation, naming each.
pub fn summary(reports: &[Report]) {
    println!("\n{}", Report::header());
    for r in reports {
        println!("{}", r.row());
    }
    let failed: Vec<String> = reports
        .iter()
        .flat_map(|r| {
            r.violations()
                .into_iter()
                .map(move |v| format!("{}/{}: {v}", r.backend, r.scenario))
        })
        .collect();
    assert!(
        failed.is_empty(),
        "{} violation(s):\n{}",
        failed.len(),
        failed.join("\n")
    );
}
