//! Scenarios on a MariaDB Galera cluster of three nodes: holders in several processes, each
//! connected to a different node, while a node dies, is cut off from the other two, or the
//! whole cluster goes down and is bootstrapped again; and holders on every node competing for
//! the same names, their grants decided by certification; and the cluster behind a TCP
//! balancer (HAProxy), every holder connected through it, while the node it sends them to is
//! lost.

use std::path::Path;
use std::time::Duration;

use crate::clock::{mono_ns, ms_between};
use crate::fleet::HolderSpec;
use crate::ha::first_grant_after;
use crate::oracle::Report;
use crate::record::Record;
use crate::scenario::{Pace, Run, TERM_MS, setup};
use crate::servers::{GaleraCluster, ServerError};

mod balancer;
mod checks;
mod commits;

pub use balancer::{BalancerFault, GaleraBalancer, behind_balancer, haproxy_config};

pub use checks::{
    Wakeup, cross_node_wakeup, fence_overtaken_on_another_node, own_pool_needs_causality_wait,
};
pub use commits::commits_lost_to_another_node;

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
/// Setup failures, or a cluster that does not settle within 90 s.
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
    let conflicts_before = certification_conflicts(cluster);
    run.sleep_ms(pace.warm_ms);
    let fault_at = mono_ns();
    let mut refused_as_not_primary = None;
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
            let probe = NodeProbe::open(cluster, 0)?;
            cluster.isolate_node(0)?;
            run.note("node1 (a's) isolated from the others (gmcast.isolate=1)");
            cluster.wait_non_primary(0, SETTLE)?;
            run.note(&format!(
                "node1 non-primary, {:.0} ms after the fault",
                ms_between(fault_at, mono_ns())
            ));
            refused_as_not_primary = Some(probe.refused_as_not_primary());
        }
        GaleraFault::RestartAll => {
            cluster.kill_all();
            run.note("every node SIGKILLed");
            run.sleep_ms(pace.fault_ms);
            let (first, serving) = cluster.restart_all()?;
            run.note(&format!(
                "node{} bootstrapped and serving {:.0} ms after the fault; every node synced \
                 {:.0} ms after the fault",
                first + 1,
                ms_between(fault_at, serving),
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
    // The holder on the isolated node is refused with the typed error naming its node.
    let not_primary = run.holders[0]
        .records()
        .iter()
        .filter(|r| {
            matches!(r, Record::Error { error, .. }
                if error.contains("is not in the cluster's primary component")
                    && error.contains(&format!("127.0.0.1:{}", cluster.port(0))))
        })
        .count();
    let conflicts = certification_conflicts(cluster);
    let mut report = run.finish(cluster);
    if fault == GaleraFault::Contend {
        report.notes.push(format!(
            "transactions refused by certification during the run: {}; local transactions \
             aborted by a replicated write: {}",
            conflicts.0.saturating_sub(conflicts_before.0),
            conflicts.1.saturating_sub(conflicts_before.1)
        ));
    }
    if fault == GaleraFault::IsolateNode {
        report.notes.push(format!(
            "a's calls refused as not primary (StoreError::NotPrimary) while its node was cut \
             off: {not_primary}"
        ));
    }
    if let Some(Err(answer)) = refused_as_not_primary {
        report.unrecovered.push(format!(
            "a grant on the non-primary node was not refused with StoreError::NotPrimary \
             naming it: {answer}"
        ));
    }
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

/// Runs `work` to its end on a runtime of its own (two worker threads: the checks below spawn
/// calls that must go on while they wait); a runtime that cannot be built is the error.
fn on_new_runtime<T>(work: impl Future<Output = Result<T, String>>) -> Result<T, String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?
        .block_on(work)
}

/// The cluster's certification failures and brute-force aborts so far, summed over the nodes.
fn certification_conflicts(cluster: &GaleraCluster) -> (u64, u64) {
    (
        cluster.counter("wsrep_local_cert_failures"),
        cluster.counter("wsrep_local_bf_aborts"),
    )
}

/// A store on one node, opened while the node serves, to be asked again once it does not.
pub(crate) struct NodeProbe {
    rt: tokio::runtime::Runtime,
    store: leasehold::store::SeaOrmStore,
    node: String,
}

impl NodeProbe {
    /// Opens a store on node `i` of `cluster`.
    fn open(cluster: &GaleraCluster, i: usize) -> Result<Self, ServerError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|cause| ServerError::Io {
                what: "runtime".into(),
                cause,
            })?;
        let store = rt
            .block_on(leasehold::store::StoreBuilder::new(cluster.node_url(i)).connect())
            .map_err(|e| ServerError::Command {
                command: "open a store on a node".into(),
                detail: e.to_string(),
            })?;
        Ok(Self {
            rt,
            store,
            node: format!("127.0.0.1:{}", cluster.port(i)),
        })
    }

    /// Asks for a grant, alone and in a batch (a transaction on MySQL/MariaDB): on a node
    /// outside the primary component each must be refused with
    /// [`leasehold::StoreError::NotPrimary`] naming the node, a transient error. `Err` carries
    /// what was answered instead.
    fn refused_as_not_primary(&self) -> Result<(), String> {
        use leasehold::engine::Term;
        use leasehold::store::{Grant, LeaseStore};
        use leasehold::{HolderId, LeaseKey, StoreError};
        let key = LeaseKey::parse("galera-probe", "x").map_err(|e| e.to_string())?;
        let other = LeaseKey::parse("galera-probe", "y").map_err(|e| e.to_string())?;
        let me = HolderId::new("probe").map_err(|e| e.to_string())?;
        let term = Term::new("term", Duration::from_secs(5)).map_err(|e| e.to_string())?;
        let refused = |answer: Result<String, StoreError>, call: &str| match answer {
            Err(e @ StoreError::NotPrimary { .. })
                if e.is_transient() && e.to_string().contains(&self.node) =>
            {
                Ok(())
            }
            Err(e) => Err(format!("{call}: {e}")),
            Ok(o) => Err(format!("{call}: answered {o}")),
        };
        let alone = self
            .rt
            .block_on(self.store.begin_tenure(&key, &me, Grant::New, term, None))
            .map(|o| format!("{o:?}"));
        refused(alone, "begin_tenure")?;
        let batch = self.rt.block_on(self.store.begin_tenure_many(
            &me,
            &[key.clone(), other.clone()],
            term,
            None,
        ));
        // The batch fails whole, or each item answers the error.
        let batch = match batch {
            Ok(items) => match items
                .into_iter()
                .map(|i| i.err())
                .collect::<Option<Vec<_>>>()
            {
                Some(errors) => {
                    for e in errors {
                        refused(Err(e), "begin_tenure_many's item")?;
                    }
                    return Ok(());
                }
                None => Ok("a batch with an answered item".to_owned()),
            },
            Err(e) => Err(e),
        };
        refused(batch, "begin_tenure_many")
    }
}
