//! PostgreSQL with automatic failover: a throwaway pg_auto_failover formation (a monitor and two
//! data nodes, synchronous replication), holders in two processes connected with one URL naming
//! both nodes (`target_session_attrs=read-write`), following the primary by themselves.
//!
//! One formation serves the scenarios in turn: the primary's node SIGKILLed and later started
//! again (it rejoins), a planned switchover, and the primary's node frozen (SIGSTOP: its
//! connections silent, as behind a blackhole) then thawed (it rejoins), and the primary's node
//! cut off the network while it runs (its port blackholed with iptables, its keeper's link to
//! the monitor partitioned), then healed (it rejoins), and the primary's node SIGKILLed after
//! the standby's WAL receiver was stopped for a term (synchronous replication: the primary
//! acknowledged nothing meanwhile). Asserted for each: no two
//! believers, no token granted twice, fenced writes never going back, belief ending by the
//! local deadline while no primary answers, and a grant again after the promotion. The time
//! from the fault to the first grant is printed. Then the same formation with asynchronous
//! replication and the same lagging standby: the grants the primary acknowledged alone are lost
//! and granted again (the hazard, printed), what still holds is asserted.

mod common;

use common::{bin, require, selected, summary};
use leasehold_faults::ha::{NodeFault, auto_failover, prepare};
use leasehold_faults::scenario::print_report;
use leasehold_faults::servers::Formation;

#[test]
fn pg_auto_failover_keeps_one_believer_through_node_loss() {
    let names = [
        ("paf_kill", NodeFault::Kill),
        ("paf_switchover", NodeFault::Switchover),
        ("paf_freeze", NodeFault::Freeze),
        ("paf_blackhole", NodeFault::Blackhole),
        ("paf_lag_kill", NodeFault::KillLagging),
    ];
    let asynchronous = selected("paf_async_lag_kill");
    if !asynchronous && !names.iter().any(|(n, _)| selected(n)) {
        return;
    }
    let Some(mut formation) = require("pg_auto_failover", Formation::start(2)) else {
        return;
    };
    prepare(&bin(), &formation).expect("the formation's tables");
    let mut reports = Vec::new();
    for (_, fault) in names.into_iter().filter(|(n, _)| selected(n)) {
        let report = auto_failover(&bin(), &mut formation, fault)
            .unwrap_or_else(|e| panic!("{fault:?}: {e}"));
        print_report(&report);
        reports.push(report);
    }
    summary(&reports);
    if !asynchronous {
        return;
    }

    // Asynchronous replication (every node's replication-quorum off): a commit returns before
    // the standby has it. With the standby's WAL receiver stopped for a term before the kill,
    // every grant the primary acknowledged meanwhile is missing on the promoted standby, and its
    // token is granted again there. Printed, not asserted (the documented limit: one database
    // decides only if it keeps what it acknowledged). What holds even so is asserted: belief
    // ends within a term of its last confirmation, the new primary's fence refuses a holder
    // whose grant it never received, and the service recovers by itself.
    formation
        .set_synchronous(false)
        .expect("asynchronous replication");
    let report = auto_failover(&bin(), &mut formation, NodeFault::KillLagging)
        .unwrap_or_else(|e| panic!("asynchronous lagging kill: {e}"));
    println!("\nasynchronous replication, standby lagging a term, primary killed: the hazard:");
    print_report(&report);
    println!(
        "hazard: {} overlap(s) of two believers; {} token(s) granted twice or never kept",
        report.overlaps.len(),
        report.token_violations.len()
    );
    let held: Vec<String> = report
        .beliefs_past_grant
        .iter()
        .chain(&report.fence_violations)
        .chain(&report.unrecovered)
        .cloned()
        .collect();
    assert!(held.is_empty(), "{}", held.join("\n"));
}
