//! MariaDB Galera behind a TCP balancer: a throwaway HAProxy in TCP mode in front of three
//! nodes, node 1 taking every connection and nodes 2 and 3 its backups, its health check an
//! HTTP check per node answering whether the node is synced with the primary component. Holders
//! in three processes connect through the balancer's one port. Node 1 is SIGKILLed (started
//! again later), then cut off from the other two (healed later); each time the balancer takes
//! it out of rotation, closes the connections to it and sends new ones to node 2, and returns
//! every client to node 1 once it is back. Asserted for each: no two believers, no token
//! granted twice, fenced writes never going back, belief ending by the local deadline (the
//! connections to the lost node keep no holder believing), a grant again after the fault
//! through the balancer, and connections moved to node 2. The times from the fault to node 1
//! out of rotation and to the first grant are printed.

mod common;

use common::{bin, require, selected, summary};
use leasehold_faults::galera::{BalancerFault, GaleraBalancer, behind_balancer, prepare};
use leasehold_faults::scenario::print_report;
use leasehold_faults::servers::{GaleraCluster, ServerError, which};

#[test]
fn galera_behind_haproxy_keeps_one_believer_when_a_node_is_lost() {
    let faults = [BalancerFault::KillNode, BalancerFault::IsolateNode];
    if !faults.iter().any(|f| selected(f.name())) {
        return;
    }
    // HAProxy first: without it there is no scenario, and the cluster takes a while to start.
    if require("haproxy", which("haproxy", "haproxy")).is_none() {
        return;
    }
    let Some(cluster) = require("galera", GaleraCluster::start()) else {
        return;
    };
    prepare(&bin(), &cluster).expect("the cluster's tables");
    let balancer = GaleraBalancer::start(&cluster).unwrap_or_else(|e| panic!("haproxy: {e}"));
    println!("HAProxy config:\n{}", balancer.config());
    let mut reports = Vec::new();
    for fault in faults.iter().copied().filter(|f| selected(f.name())) {
        let report =
            behind_balancer(&bin(), &cluster, &balancer, fault).unwrap_or_else(|e: ServerError| {
                panic!(
                    "{fault:?}: {e}\n{}\n--- haproxy\n{}",
                    cluster.logs(),
                    balancer.log()
                )
            });
        print_report(&report);
        reports.push(report);
    }
    summary(&reports);
}
