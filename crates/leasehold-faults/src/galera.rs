//! Scenarios on a MariaDB Galera cluster of three nodes: holders in several processes, each
//! connected to a different node, while a node dies, is cut off from the other two, or the
//! whole cluster goes down and is bootstrapped again; and holders on every node competing for
//! the same names, their grants decided by certification.

use std::path::Path;
use std::time::Duration;

use crate::clock::{mono_ns, ms_between};
use crate::fleet::HolderSpec;
use crate::ha::first_grant_after;
use crate::oracle::Report;
use crate::scenario::{Pace, Run, TERM_MS, setup};
use crate::servers::{GaleraCluster, ServerError};

/// What happens to the cluster in [`galera`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GaleraFault {
    /// The first holder's node is SIGKILLed; the other two go on as a primary component of two;
    /// the node is started again later and rejoins.
    KillNode,
    /// The first holder's node is cut off from the other two while it runs
    /// (`gmcast.isolate`): it leaves the primary component and refuses clients; the others go
    /// on; the cut heals and the node rejoins.
    IsolateNode,
    /// Every node SIGKILLed at once, then the cluster bootstrapped again from the node with the
    /// newest recovered state, the others joining it.
    RestartAll,
    /// No fault: a holder on each of the three nodes competes for the same names and locks for
    /// the whole run, so grants, renewals, releases and fenced writes of one name race across
    /// nodes and lose certification.
    Contend,
}

impl GaleraFault {
    /// The scenario's name.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::KillNode => "galera_node_sigkill",
            Self::IsolateNode => "galera_node_isolated",
            Self::RestartAll => "galera_whole_cluster_restart",
            Self::Contend => "galera_contend_on_three_nodes",
        }
    }
}

/// How long the cluster may take to settle after a fault before the scenario fails.
const SETTLE: Duration = Duration::from_secs(90);

/// Prepares a new cluster for the scenarios: the lease and fenced-write tables and the audit
/// triggers, created on the first node and replicated to every node.
///
/// # Errors
/// Setup failures.
pub fn prepare(bin: &Path, cluster: &GaleraCluster) -> Result<(), ServerError> {
    setup(bin, cluster)
}

/// One scenario on `cluster`: holder `a` on node 1 (the first to hold every name), `b` on node
/// 2 (and for [`GaleraFault::Contend`] `c` on node 3). The report's notes carry the time from
/// the fault to the first grant after it.
///
/// # Errors
/// Setup failures, or a cluster that does not settle within [`SETTLE`].
pub fn galera(
    bin: &Path,
    cluster: &GaleraCluster,
    fault: GaleraFault,
) -> Result<Report, ServerError> {
    let pace = Pace::get();
    let mut run = Run::new(bin, cluster, fault.name())?;
    run.spawn(HolderSpec::new("a", &cluster.node_url(0)))?;
    if fault != GaleraFault::Contend {
        run.wait_granted(0, "n0");
    }
    run.spawn(HolderSpec::new("b", &cluster.node_url(1)))?;
    if fault == GaleraFault::Contend {
        run.spawn(HolderSpec::new("c", &cluster.node_url(2)))?;
    }
    run.sleep_ms(pace.warm_ms);
    let fault_at = mono_ns();
    match fault {
        GaleraFault::KillNode => {
            cluster.kill_node(0);
            run.note("node1 (a's) SIGKILLed");
            cluster.wait_size(1, 2, SETTLE)?;
            run.note(&format!(
                "node2 and node3 a primary component of two, {:.0} ms after the fault",
                ms_between(fault_at, mono_ns())
            ));
        }
        GaleraFault::IsolateNode => {
            cluster.isolate_node(0)?;
            run.note("node1 (a's) isolated from the others (gmcast.isolate=1)");
            cluster.wait_non_primary(0, SETTLE)?;
            run.note(&format!(
                "node1 non-primary, {:.0} ms after the fault",
                ms_between(fault_at, mono_ns())
            ));
        }
        GaleraFault::RestartAll => {
            cluster.kill_all();
            run.note("every node SIGKILLed");
            run.sleep_ms(pace.fault_ms);
            let first = cluster.restart_all()?;
            run.note(&format!(
                "cluster bootstrapped from node{} and rejoined, {:.0} ms after the fault",
                first + 1,
                ms_between(fault_at, mono_ns())
            ));
        }
        GaleraFault::Contend => {
            run.sleep_ms(pace.fault_ms + pace.tail_ms);
        }
    }
    // The service resumes by itself: some holder is granted a name after the fault.
    let first = (fault != GaleraFault::Contend)
        .then(|| first_grant_after(&run, fault_at, Duration::from_millis(8 * TERM_MS)));
    run.sleep_ms(pace.fault_ms);
    match fault {
        GaleraFault::KillNode => {
            cluster.restart_node(0)?;
            run.note("node1 started again and synced");
        }
        GaleraFault::IsolateNode => {
            cluster.heal(0)?;
            run.note("node1's isolation lifted: rejoined and synced");
        }
        GaleraFault::RestartAll | GaleraFault::Contend => {}
    }
    run.sleep_ms(pace.tail_ms);
    let mut report = run.finish(cluster);
    match first {
        Some(Some(at)) => report.notes.push(format!(
            "first grant {:.0} ms after the fault (term {TERM_MS} ms)",
            ms_between(fault_at, at)
        )),
        Some(None) => report
            .unrecovered
            .push("no holder was granted anything after the fault".into()),
        None => {}
    }
    Ok(report)
}
