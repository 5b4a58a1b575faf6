//! A database failover: a throwaway PostgreSQL primary with a streaming standby
//! (`pg_basebackup`), holders connected through a forwarder that moves to the new primary as a
//! virtual IP would; the primary is SIGKILLed mid-run and the standby promoted.
//!
//! Synchronous replication: zero double believers and fenced tokens still growing (asserted).
//! Asynchronous replication with the standby two terms behind: the hazard docs/operations.md
//! describes (grants the new primary never saw, two believers) is measured and printed, not
//! asserted: it is the documented limit of assumption 1 (one database decides). What still holds
//! is asserted: no belief past a term after its last confirmation, the new primary's fence
//! refuses what it never granted, and the service recovers on the new primary.

mod common;

use common::{bin, require, selected, summary};
use leasehold_faults::scenario::{Replication, TERM_MS, failover, print_report};

#[test]
fn failover_with_synchronous_replication_keeps_one_believer() {
    if !selected("failover_synchronous") {
        return;
    }
    let Some(report) = require(
        "postgres failover",
        failover(&bin(), Replication::Synchronous),
    ) else {
        return;
    };
    summary(&[report]);
}

#[test]
fn failover_with_asynchronous_replication_measures_the_hazard() {
    if !selected("failover_asynchronous") {
        return;
    }
    // The standby falls two terms behind: every grant and renewal of the last two terms is lost.
    let replication = Replication::Asynchronous {
        lag_ms: 2 * TERM_MS,
    };
    let Some(report) = require("postgres failover", failover(&bin(), replication)) else {
        return;
    };
    println!("\nasynchronous failover: the hazard of docs/operations.md, measured:");
    print_report(&report);
    println!(
        "hazard: {} overlap(s) of two believers, longest {} ms; {} token(s) granted twice or \
         never kept by the new primary",
        report.overlaps.len(),
        report
            .longest_overlap_ms()
            .map_or("–".to_owned(), |ms| format!("{ms:.0}")),
        report.token_violations.len()
    );
    // What holds even so: every belief ends within a term of its last confirmation, the new
    // primary's fence refuses what it never granted, and the service recovers by itself.
    let held: Vec<String> = report
        .beliefs_past_grant
        .iter()
        .chain(&report.fence_violations)
        .chain(&report.unrecovered)
        .cloned()
        .collect();
    assert!(held.is_empty(), "{}", held.join("\n"));
}
