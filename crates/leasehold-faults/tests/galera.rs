//! MariaDB Galera: a throwaway cluster of three nodes, holders in two or three processes each
//! connected to a different node.
//!
//! One cluster serves the scenarios in turn: holders on every node competing for the same
//! names (certification decides); the first holder's node SIGKILLed, then started again; that
//! node cut off from the other two (it leaves the primary component and refuses clients), then
//! healed; and every node SIGKILLed, the cluster bootstrapped again from the newest node.
//! Asserted for each: no two believers, no token granted twice, fenced writes never going back,
//! belief ending by the local deadline while the holder's node does not serve, and a grant
//! again after the fault. The time from the fault to the first grant is printed.

mod common;

use common::{bin, require, selected, summary};
use leasehold_faults::galera::{GaleraFault, galera, prepare};
use leasehold_faults::scenario::print_report;
use leasehold_faults::servers::GaleraCluster;

#[test]
fn galera_keeps_one_believer_through_node_loss_and_certification() {
    let faults = [
        GaleraFault::Contend,
        GaleraFault::KillNode,
        GaleraFault::IsolateNode,
        GaleraFault::RestartAll,
    ];
    if !faults.iter().any(|f| selected(f.name())) {
        return;
    }
    let Some(cluster) = require("galera", GaleraCluster::start()) else {
        return;
    };
    prepare(&bin(), &cluster).expect("the cluster's tables");
    let mut reports = Vec::new();
    for fault in faults.into_iter().filter(|f| selected(f.name())) {
        let report = galera(&bin(), &cluster, fault)
            .unwrap_or_else(|e| panic!("{fault:?}: {e}\n{}", cluster.logs()));
        print_report(&report);
        reports.push(report);
    }
    summary(&reports);
}
