//! A database failover: a throwaway PostgreSQL primary with a streaming standby
//! (`pg_basebackup`), holders connected through a forwarder that moves to the new primary as a
//! virtual IP would; the primary is SIGKILLed mid-run and the standby promoted.
//!
//! Synchronous replication: zero double believers and fenced tokens still growing (asserted).
//! Asynchronous replication with the standby lagging: the hazard docs/operations.md describes
//! (grants the new primary never saw, two believers) is measured and printed, not asserted:
//! it is the documented limit of assumption 1 (one database decides).

mod common;

use common::{bin, require, selected, summary};
use leasehold_faults::scenario::{Replication, failover, print_report};

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
    let replication = Replication::Asynchronous { lag_ms: 1000 };
    let Some(report) = require("postgres failover", failover(&bin(), replication)) else {
        return;
    };
    println!("\nasynchronous failover (measured, not asserted):");
    print_report(&report);
}
