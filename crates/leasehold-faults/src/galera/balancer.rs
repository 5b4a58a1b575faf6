//! The Galera cluster behind a TCP balancer: a throwaway HAProxy in TCP mode in front of the
//! three nodes, every holder connected through its one port, while the node that takes the
//! connections is SIGKILLed or cut off from the other two.

use std::path::Path;
use std::time::Duration;

use super::SETTLE;
use crate::clock::{mono_ns, ms_between};
use crate::fleet::HolderSpec;
use crate::ha::first_grant_after;
use crate::oracle::Report;
use crate::record::Record;
use crate::scenario::{Pace, Run, TERM_MS};
use crate::servers::{GaleraCluster, HaProxy, HaProxyPaths, HealthAgent, ServerError, ServerState};

/// The `listen` section's name, as the stats socket reports it.
const SECTION: &str = "galera";

/// The HAProxy config for `nodes`, each `(name, client port, health check port)`; the first
/// takes every connection while it is in rotation.
///
/// - **One writer at a time.** The first node is the only active server; the others are
///   `backup`, and HAProxy sends new connections to the first backup in rotation only while
///   no active server is. Every holder then decides on one node: the MySQL doorbell
///   (`GET_LOCK`, per node) wakes waiters, and two holders' writes of one row do not meet at
///   certification. `on-marked-up shutdown-backup-sessions` closes the backup's connections
///   when the first node is back in rotation, so the clients return to one node together
///   instead of staying split over two.
/// - **The health check asks whether the node serves clients**, not whether its port answers.
///   A node outside the primary component (cut off, or joining) still accepts TCP connections
///   and completes the MySQL handshake, so a TCP check or `option mysql-check` keeps it in
///   rotation while it refuses every statement (error 1047, "WSREP has not yet prepared node
///   for application use"). So the check is HTTP on a port of its own (`option httpchk`,
///   `check port`), answered `200` only when the node's `wsrep_ready` is `ON` and its state is
///   `Synced` (as the `clustercheck` script does behind xinetd); a node that is down does not
///   answer, which fails the check too.
/// - **`on-marked-down shutdown-sessions`**: once a node is out of rotation, HAProxy closes
///   the connections it still carries to it. A pooled connection to a node that left the
///   primary component would otherwise stay open and answer errors (or, to a silent node,
///   nothing) until the client gives up on it; closed, it fails at once and the pool opens a
///   new one, which goes to the node now in rotation.
/// - **Checked every 500 ms, out after 2 failures, back after 2 successes**: a lost node is out
///   of rotation about a second after it stops serving, well within the term, and a flapping
///   node does not come back on one good answer.
/// - **`retries` and `option redispatch`**: a connection attempt that a dead node refuses
///   before its check has failed is tried again on another server.
/// - **`timeout client` and `timeout server` of an hour**: pooled connections and the
///   doorbell's connection sit idle for long stretches; a shorter timeout closes them under the
///   client, which then fails a statement and reconnects.
#[must_use]
pub fn haproxy_config(paths: &HaProxyPaths, nodes: &[(&str, u16, u16)]) -> String {
    let servers: Vec<String> = nodes
        .iter()
        .enumerate()
        .map(|(i, (name, port, check))| {
            format!(
                "    server {name} 127.0.0.1:{port} check port {check}{}",
                if i == 0 { "" } else { " backup" }
            )
        })
        .collect();
    format!(
        "global\n\
         \x20   stats socket {stats} mode 600 level user\n\
         \x20   log stderr format raw local0 info\n\
         \n\
         defaults\n\
         \x20   mode tcp\n\
         \x20   log global\n\
         \x20   timeout connect 1s\n\
         \x20   timeout client 1h\n\
         \x20   timeout server 1h\n\
         \x20   timeout check 2s\n\
         \x20   retries 2\n\
         \x20   option redispatch\n\
         \n\
         listen {SECTION}\n\
         \x20   bind 127.0.0.1:{port}\n\
         \x20   option httpchk GET /\n\
         \x20   http-check expect status 200\n\
         \x20   default-server inter 500ms fall 2 rise 2 on-marked-down shutdown-sessions \
         on-marked-up shutdown-backup-sessions\n\
         {servers}\n",
        stats = paths.stats.display(),
        port = paths.port,
        servers = servers.join("\n"),
    )
}

/// HAProxy in front of a [`GaleraCluster`], with one [`HealthAgent`] per node answering whether
/// it is synced. Dropping it stops both.
#[derive(Debug)]
pub struct GaleraBalancer {
    proxy: HaProxy,
    _agents: Vec<HealthAgent>,
}

impl GaleraBalancer {
    /// Starts the health checks and HAProxy with [`haproxy_config`] for every node of
    /// `cluster`, node 1 active, and waits until node 1 is in rotation.
    ///
    /// # Errors
    /// [`ServerError::Missing`] without `haproxy`; HAProxy's errors, or node 1 not in rotation
    /// within 10 s.
    pub fn start(cluster: &GaleraCluster) -> Result<Self, ServerError> {
        let agents = (0..cluster.len())
            .map(|i| HealthAgent::start(cluster.synced_probe(i)))
            .collect::<Result<Vec<_>, _>>()?;
        let names: Vec<String> = (1..=cluster.len()).map(|i| format!("node{i}")).collect();
        let nodes: Vec<(&str, u16, u16)> = (0..cluster.len())
            .map(|i| (names[i].as_str(), cluster.port(i), agents[i].port()))
            .collect();
        let proxy = HaProxy::start(|paths| haproxy_config(paths, &nodes))?;
        let balancer = Self {
            proxy,
            _agents: agents,
        };
        balancer.wait_server(0, false, Duration::from_secs(10))?;
        Ok(balancer)
    }

    /// The URL holders connect to: the balancer's port, the cluster's database and user.
    #[must_use]
    pub fn url(&self) -> String {
        format!("mysql://holder:holder@127.0.0.1:{}/test", self.proxy.port())
    }

    /// The config HAProxy runs with.
    #[must_use]
    pub fn config(&self) -> &str {
        self.proxy.config()
    }

    /// Node `i`'s state in the balancer.
    #[must_use]
    pub fn server(&self, i: usize) -> Option<ServerState> {
        self.proxy.server(SECTION, &format!("node{}", i + 1))
    }

    /// Waits until node `i` is out of rotation (`down`) or in it; returns when it was seen so
    /// (mono ns).
    ///
    /// # Errors
    /// [`ServerError::NotReady`] with HAProxy's log.
    pub fn wait_server(&self, i: usize, down: bool, within: Duration) -> Result<u64, ServerError> {
        let until = crate::clock::deadline(within);
        while !crate::clock::passed(until) {
            if self
                .server(i)
                .is_some_and(|s| s.is_down() == down && (down || s.status == "UP"))
            {
                return Ok(mono_ns());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(ServerError::NotReady {
            what: format!(
                "node{} {} the balancer's rotation",
                i + 1,
                if down { "out of" } else { "in" }
            ),
            secs: within.as_secs(),
            log: self.proxy.log(),
        })
    }

    /// The end of HAProxy's log.
    #[must_use]
    pub fn log(&self) -> String {
        self.proxy.log()
    }
}

/// What happens to the node in rotation in [`behind_balancer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BalancerFault {
    /// Node 1, which takes every connection, is SIGKILLed; started again later.
    KillNode,
    /// Node 1 is cut off from the other two while it runs (`gmcast.isolate`); healed later.
    IsolateNode,
}

impl BalancerFault {
    /// The scenario's name.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::KillNode => "galera_balancer_node_sigkill",
            Self::IsolateNode => "galera_balancer_node_isolated",
        }
    }
}

/// One scenario behind `balancer`: holders `a`, `b` and `c` connect through its port (node 1
/// takes them all); node 1 is lost; the balancer takes it out of rotation and new connections
/// go to node 2; node 1 comes back and the balancer returns every client to it. The report's
/// notes carry the times from the fault to node 1 out of rotation and to the first grant, and
/// how many connections node 2 took; a fault after which nothing is granted again, or no
/// connection moved, is a violation.
///
/// # Errors
/// Setup failures, or a cluster or balancer that does not settle within 90 s.
pub fn behind_balancer(
    bin: &Path,
    cluster: &GaleraCluster,
    balancer: &GaleraBalancer,
    fault: BalancerFault,
) -> Result<Report, ServerError> {
    let pace = Pace::get();
    let url = balancer.url();
    let mut run = Run::new(bin, cluster, fault.name())?;
    run.spawn(HolderSpec::new("a", &url))?;
    run.wait_granted(0, "n0");
    run.spawn(HolderSpec::new("b", &url))?;
    run.spawn(HolderSpec::new("c", &url))?;
    run.sleep_ms(pace.warm_ms);
    let before: Vec<ServerState> = (0..cluster.len())
        .map(|i| balancer.server(i))
        .collect::<Option<_>>()
        .ok_or_else(|| ServerError::NotReady {
            what: "the balancer's stats".into(),
            secs: 0,
            log: balancer.log(),
        })?;
    run.note(&format!(
        "before the fault: open connections per node {:?}",
        before.iter().map(|s| s.current).collect::<Vec<_>>()
    ));
    let fault_at = mono_ns();
    match fault {
        BalancerFault::KillNode => {
            cluster.kill_node(0);
            run.note("node1 (every holder's, through the balancer) SIGKILLed");
        }
        BalancerFault::IsolateNode => {
            cluster.isolate_node(0)?;
            run.note("node1 (every holder's, through the balancer) isolated (gmcast.isolate=1)");
        }
    }
    let out = balancer.wait_server(0, true, SETTLE)?;
    run.note(&format!(
        "node1 out of the balancer's rotation {:.0} ms after the fault",
        ms_between(fault_at, out)
    ));
    match fault {
        BalancerFault::KillNode => cluster.wait_size(1, 2, SETTLE)?,
        BalancerFault::IsolateNode => cluster.wait_non_primary(0, SETTLE)?,
    }
    run.note(&format!(
        "{}, {:.0} ms after the fault",
        match fault {
            BalancerFault::KillNode => "node2 and node3 a primary component of two",
            BalancerFault::IsolateNode => "node1 non-primary",
        },
        ms_between(fault_at, mono_ns())
    ));
    // The service resumes by itself: some holder is granted a name after the fault.
    let first = first_grant_after(&run, fault_at, Duration::from_millis(8 * TERM_MS));
    run.sleep_ms(pace.fault_ms);
    let moved = balancer
        .server(1)
        .map_or(0, |s| s.total.saturating_sub(before[1].total));
    run.note(&format!(
        "node2 took {moved} new connections while node1 was out of rotation"
    ));
    match fault {
        BalancerFault::KillNode => {
            cluster.restart_node(0)?;
            run.note("node1 started again and synced");
        }
        BalancerFault::IsolateNode => {
            cluster.heal(0)?;
            run.note("node1's isolation lifted: rejoined and synced");
        }
    }
    let back = balancer.wait_server(0, false, SETTLE)?;
    run.note("node1 back in rotation: the backups' connections closed");
    run.sleep_ms(pace.tail_ms);
    let after: Vec<u64> = (0..cluster.len())
        .map(|i| balancer.server(i).map_or(0, |s| s.current))
        .collect();
    let not_primary = run
        .holders
        .iter()
        .flat_map(crate::fleet::Holder::records)
        .filter(|r| {
            matches!(r, Record::Error { error, .. }
                if error.contains("is not in the cluster's primary component"))
        })
        .count();
    let granted_since_back = run
        .holders
        .iter()
        .flat_map(crate::fleet::Holder::records)
        .filter(|r| matches!(r, Record::Acquired { at, .. } if *at > back))
        .count();
    let mut report = run.finish(cluster);
    report.notes.push(format!(
        "after node1's return: open connections per node {after:?}; {granted_since_back} \
         grants since"
    ));
    if fault == BalancerFault::IsolateNode {
        report.notes.push(format!(
            "calls refused as not primary (StoreError::NotPrimary) before the balancer moved \
             them: {not_primary}"
        ));
    }
    if moved == 0 {
        report
            .unrecovered
            .push("the balancer moved no connection to node2".into());
    }
    match first {
        Some(at) => report.notes.push(format!(
            "first grant {:.0} ms after the fault, through the balancer (term {TERM_MS} ms)",
            ms_between(fault_at, at)
        )),
        None => report
            .unrecovered
            .push("no holder was granted anything after the fault".into()),
    }
    Ok(report)
}
