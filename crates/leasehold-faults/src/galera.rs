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
use crate::record::Record;
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
    store: leasehold::SeaOrmStore,
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
            .block_on(leasehold::StoreBuilder::new(cluster.node_url(i)).connect())
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
        use leasehold::{Grant, HolderId, LeaseKey, LeaseStore, StoreError, Term};
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

/// How long a waiter on one node waited for a lock released on another, and how long it could
/// have waited at most by polling alone.
#[derive(Debug, Clone, Copy)]
pub struct Wakeup {
    /// From the release's return to the waiter's grant.
    pub waited: Duration,
    /// The longest pause between a waiter's attempts: the retry interval doubled up to 8×,
    /// plus its 25 % jitter.
    pub poll_bound: Duration,
}

/// A lock held through node 1 and waited for through node 2: the MySQL doorbell (named locks,
/// `GET_LOCK`) is per node, so node 2's waiter is not woken by node 1's release and finds the
/// lock free at its next poll.
///
/// # Errors
/// The service's or the lock's error, or a waiter that never got the lock.
pub fn cross_node_wakeup(cluster: &GaleraCluster) -> Result<Wakeup, ServerError> {
    let failed = |detail: String| ServerError::Command {
        command: "cross-node lock wake-up".into(),
        detail,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|cause| ServerError::Io {
            what: "runtime".into(),
            cause,
        })?;
    rt.block_on(async {
        let ttl = Duration::from_secs(60);
        let retry = Duration::from_millis(100);
        let service = |node: usize, holder: &'static str| {
            leasehold::LeaseService::builder(cluster.node_url(node))
                .namespace("galera-wakeup")
                .holder_id(holder)
                .build()
        };
        let a = service(0, "wake-a")
            .await
            .map_err(|e| failed(e.to_string()))?;
        let b = service(1, "wake-b")
            .await
            .map_err(|e| failed(e.to_string()))?;
        b.locks().set_retry_interval(retry);
        let held = a
            .lock("galera-wakeup", "x", ttl)
            .await
            .map_err(|e| failed(e.to_string()))?
            .ok_or_else(|| failed("node 1 could not take the free lock".into()))?;
        let b2 = b.clone();
        let waiter = tokio::spawn(async move {
            let got = b2
                .try_locker("galera-wakeup", "x", Some(Duration::from_secs(30)), ttl)
                .await;
            (got, mono_ns())
        });
        // Long enough for the waiter's pauses to have grown to their longest.
        tokio::time::sleep(Duration::from_secs(3)).await;
        held.unlock().await.map_err(|e| failed(e.to_string()))?;
        let released = mono_ns();
        let (got, at) = waiter.await.map_err(|e| failed(e.to_string()))?;
        let guard = got
            .map_err(|e| failed(e.to_string()))?
            .ok_or_else(|| failed("node 2's waiter never got the lock".into()))?;
        let _ = guard.unlock().await;
        let _ = a.shutdown().await;
        let _ = b.shutdown().await;
        Ok(Wakeup {
            waited: Duration::from_nanos(at.saturating_sub(released)),
            poll_bound: retry * 8 + retry * 2,
        })
    })
}

/// A fenced transaction opened through node 1 while its tenure is live; the tenure lapses and
/// another holder is granted the name through node 2, where node 1's row lock does not reach;
/// then the fenced transaction writes and commits. The commit must be refused (the grant
/// through node 2 is ordered first and changed the fence's row) and its write must not be
/// applied on any node. `Ok` carries the commit's error text.
///
/// # Errors
/// What went wrong, as text: a setup step, or a fenced commit that succeeded.
pub fn fence_overtaken_on_another_node(cluster: &GaleraCluster) -> Result<String, String> {
    use leasehold::sea_orm::ConnectionTrait;
    use leasehold::{AcquireOutcome, Grant, HolderId, LeaseKey, LeaseStore, Term};
    on_new_runtime(async {
        let text = |e: &dyn std::fmt::Display| e.to_string();
        let one = leasehold::StoreBuilder::new(cluster.node_url(0))
            .connect()
            .await
            .map_err(|e| text(&e))?;
        let two = leasehold::StoreBuilder::new(cluster.node_url(1))
            .connect()
            .await
            .map_err(|e| text(&e))?;
        one.connection()
            .execute_unprepared(
                "CREATE TABLE IF NOT EXISTS galera_fenced (id BIGINT AUTO_INCREMENT PRIMARY KEY, \
                 token BIGINT NOT NULL)",
            )
            .await
            .map_err(|e| text(&e))?;
        let key = LeaseKey::parse("galera-fence", "x").map_err(|e| text(&e))?;
        let (a, b) = (
            HolderId::new("fence-a").map_err(|e| text(&e))?,
            HolderId::new("fence-b").map_err(|e| text(&e))?,
        );
        let term = Term::new("term", Duration::from_secs(1)).map_err(|e| text(&e))?;
        let AcquireOutcome::Acquired { token, .. } = one
            .begin_tenure(&key, &a, Grant::New, term, None)
            .await
            .map_err(|e| text(&e))?
        else {
            return Err("node 1 did not grant the free name".into());
        };
        let txn = one
            .begin_fenced(&key, &a, token)
            .await
            .map_err(|e| text(&e))?
            .ok_or("the fence refused a live tenure")?;
        // The tenure lapses; node 2 does not see node 1's row lock and grants the name.
        tokio::time::sleep(Duration::from_millis(1300)).await;
        let taken = two
            .begin_tenure(&key, &b, Grant::New, term, None)
            .await
            .map_err(|e| text(&e))?;
        let AcquireOutcome::Acquired { token: next, .. } = taken else {
            return Err(format!("node 2 did not grant the lapsed name: {taken:?}"));
        };
        let write = txn
            .execute_unprepared(&format!(
                "INSERT INTO galera_fenced (token) VALUES ({})",
                token.get()
            ))
            .await;
        let committed = match write {
            Ok(_) => txn.commit().await.map_err(|e| text(&e)),
            Err(e) => Err(text(&e)),
        };
        let kept = two
            .connection()
            .query_all_raw(leasehold::sea_orm::Statement::from_string(
                leasehold::sea_orm::DbBackend::MySql,
                format!("SELECT id FROM galera_fenced WHERE token = {}", token.get()),
            ))
            .await
            .map_err(|e| text(&e))?
            .len();
        match committed {
            Ok(()) => Err(format!(
                "the fenced commit under token {} succeeded after node 2 granted token {}",
                token.get(),
                next.get()
            )),
            Err(_) if kept > 0 => Err("a refused fenced write was applied".into()),
            Err(e) => Ok(e),
        }
    })
}

/// Every transactional path of the store on MySQL/MariaDB (the joint grant, the batched grant,
/// renewal and release, the purge) run through node 1 with its `COMMIT` held at a proxy while
/// node 2 commits a conflicting grant of one of its rows. Node 1's transaction then loses to the
/// write ordered first (it is aborted by the replicated write, or refused by certification if
/// its commit is replicated first); either way its `COMMIT` answers 1213. Each path must answer
/// from what the database kept: the store retries the deadlock victim and its answer agrees
/// with node 2's grant (never a grant, renewal or release of the row node 2 granted), or it
/// answers a transient error; and node 2's tenure is still live, with the holder and token it
/// was granted, on every node. `Ok` carries one line per path: what it answered.
///
/// # Errors
/// What went wrong, as text: a setup step, a `COMMIT` that was never held, or a path whose
/// answer or whose effect contradicts node 2's grant.
pub fn commits_lost_to_another_node(cluster: &GaleraCluster) -> Result<Vec<String>, String> {
    use leasehold::{
        AcquireOutcome, AdminStore, AllOutcome, BatchRenewal, Grant, HolderId, LeaseKey,
        LeaseStore, ReleaseOutcome, TenureRef, Term,
    };
    use leasehold_testkit::FaultProxy;
    on_new_runtime(async {
        let text = |e: &dyn std::fmt::Display| e.to_string();
        let node1: std::net::SocketAddr = ([127, 0, 0, 1], cluster.port(0)).into();
        let proxy = FaultProxy::start(node1).await.map_err(|e| text(&e))?;
        let one = leasehold::StoreBuilder::new(proxy.url_for(&cluster.node_url(0), node1))
            .connect()
            .await
            .map_err(|e| text(&e))?;
        let two = leasehold::StoreBuilder::new(cluster.node_url(1))
            .connect()
            .await
            .map_err(|e| text(&e))?;
        let ns = format!("galera-commit-{}", std::process::id());
        let key = |name: &str| LeaseKey::parse(&ns, name).map_err(|e| text(&e));
        let (a, b) = (
            HolderId::new("commit-a").map_err(|e| text(&e))?,
            HolderId::new("commit-b").map_err(|e| text(&e))?,
        );
        let term = Term::new("term", Duration::from_secs(30)).map_err(|e| text(&e))?;
        let mut lines = Vec::new();
        let mut contest = Contest {
            proxy: &proxy,
            cluster,
            two: &two,
            b: &b,
            term,
            held: 0,
            cert: 0,
            aborted: 0,
        };

        // b's tenure of `k` (token `t`), read on every node, must be live and unchanged.
        let check_b = |k: LeaseKey, t: leasehold::FencingToken| {
            let (one, two, b) = (one.clone(), two.clone(), b.clone());
            async move {
                for (node, store) in [("node 1", &one), ("node 2", &two)] {
                    let row = store.get(&k).await.map_err(|e| e.to_string())?;
                    match row {
                        Some(r) if r.held && r.holder == b && r.token == t => {}
                        other => {
                            return Err(format!(
                                "{k}: node 2 granted it to {b} (token {}), {node} shows {other:?}",
                                t.get()
                            ));
                        }
                    }
                }
                Ok::<(), String>(())
            }
        };
        let transient = |path: &str, e: &leasehold::StoreError| {
            if e.is_transient() {
                Ok(format!("{path}: a transient error ({e})"))
            } else {
                Err(format!("{path}: an error that is not transient: {e}"))
            }
        };

        // The joint grant (all or nothing).
        let (j1, j2) = (key("joint-1")?, key("joint-2")?);
        let call = {
            let (one, a, keys) = (one.clone(), a.clone(), vec![j1.clone(), j2.clone()]);
            async move { one.begin_tenure_all(&a, &keys, term).await }
        };
        let (answer, bt) = contest.run(call, &j1).await?;
        lines.push(match &answer {
            Ok(AllOutcome::HeldBy { key, holder, .. }) if *key == j1 && *holder == b => {
                format!("joint grant: held by {b}, nothing granted")
            }
            Ok(other) => return Err(format!("joint grant answered {other:?} after {b}'s grant")),
            Err(e) => transient("joint grant", e)?,
        });
        check_b(j1.clone(), bt).await?;
        if let Some(r) = two.get(&j2).await.map_err(|e| text(&e))?
            && r.held
        {
            return Err(format!("joint grant: {j2} held after the refusal: {r:?}"));
        }

        // The batched grant.
        let (m1, m2) = (key("many-1")?, key("many-2")?);
        let call = {
            let (one, a, keys) = (one.clone(), a.clone(), vec![m1.clone(), m2.clone()]);
            async move { one.begin_tenure_many(&a, &keys, term, None).await }
        };
        let (answer, bt) = contest.run(call, &m1).await?;
        lines.push(match &answer {
            Ok(items) => match items.as_slice() {
                [
                    Ok(AcquireOutcome::HeldBy { holder, .. }),
                    Ok(AcquireOutcome::Acquired { .. }),
                ] if *holder == b => {
                    format!("batched grant: {m1} held by {b}, {m2} granted")
                }
                other => {
                    return Err(format!(
                        "batched grant answered {other:?} after {b}'s grant"
                    ));
                }
            },
            Err(e) => transient("batched grant", e)?,
        });
        check_b(m1.clone(), bt).await?;

        // Tenures of a, granted through node 1 before the batched renewal and release.
        let mut tenures = Vec::new();
        for name in ["renew-1", "renew-2", "release-1", "release-2"] {
            let k = key(name)?;
            match one
                .begin_tenure(&k, &a, Grant::New, term, None)
                .await
                .map_err(|e| text(&e))?
            {
                AcquireOutcome::Acquired { token, .. } => tenures.push(TenureRef { key: k, token }),
                other => return Err(format!("{k} not granted to {a}: {other:?}")),
            }
        }

        // The batched renewal.
        let (r1, r2) = (tenures[0].clone(), tenures[1].clone());
        let call = {
            let (one, a, items) = (one.clone(), a.clone(), vec![r1.clone(), r2.clone()]);
            async move { one.renew_batch(&a, &items, term).await }
        };
        let (answer, bt) = contest.run(call, &r1.key).await?;
        lines.push(match &answer {
            Ok(items) => match items.as_slice() {
                [
                    BatchRenewal::Lost | BatchRenewal::Unknown,
                    BatchRenewal::Renewed,
                ] => {
                    format!(
                        "batched renewal: {} {:?}, {} renewed",
                        r1.key, items[0], r2.key
                    )
                }
                other => {
                    return Err(format!(
                        "batched renewal answered {other:?} after {b}'s grant"
                    ));
                }
            },
            Err(e) => transient("batched renewal", e)?,
        });
        check_b(r1.key.clone(), bt).await?;

        // The batched release.
        let (q1, q2) = (tenures[2].clone(), tenures[3].clone());
        let call = {
            let (one, a, items) = (one.clone(), a.clone(), vec![q1.clone(), q2.clone()]);
            async move { one.release_batch(&a, &items).await }
        };
        let (answer, bt) = contest.run(call, &q1.key).await?;
        lines.push(match &answer {
            Ok(items) => match items.as_slice() {
                [Ok(ReleaseOutcome::NotHeld), Ok(ReleaseOutcome::Released)] => {
                    format!("batched release: {} not held, {} released", q1.key, q2.key)
                }
                other => {
                    return Err(format!(
                        "batched release answered {other:?} after {b}'s grant"
                    ));
                }
            },
            Err(e) => transient("batched release", e)?,
        });
        check_b(q1.key.clone(), bt).await?;

        // The purge: a released row deleted by node 1 while node 2 grants it again.
        let p = key("purge-1")?;
        let AcquireOutcome::Acquired { token, .. } = one
            .begin_tenure(&p, &a, Grant::New, term, None)
            .await
            .map_err(|e| text(&e))?
        else {
            return Err(format!("{p} not granted to {a}"));
        };
        one.release(&p, &a, token).await.map_err(|e| text(&e))?;
        let call = {
            let (one, ns) = (one.clone(), p.namespace.clone());
            async move { one.purge(Some(&ns), Duration::ZERO).await }
        };
        let (answer, bt) = contest.run(call, &p).await?;
        lines.push(match &answer {
            Ok(n) => format!("purge: {n} rows deleted, {p} kept"),
            Err(e) => transient("purge", e)?,
        });
        check_b(p.clone(), bt).await?;

        lines.push(format!(
            "{} refused by certification, {} aborted by the replicated write",
            contest.cert, contest.aborted
        ));
        let _ = two.release_all(&b).await;
        let _ = one.release_all(&a).await;
        Ok(lines)
    })
}

/// One contest of [`commits_lost_to_another_node`]: a call through node 1 (behind `proxy`)
/// against a grant of the same row through node 2, and the tally of how node 1 lost.
struct Contest<'a> {
    proxy: &'a leasehold_testkit::FaultProxy,
    cluster: &'a GaleraCluster,
    two: &'a leasehold::SeaOrmStore,
    b: &'a leasehold::HolderId,
    term: leasehold::Term,
    /// COMMITs held so far.
    held: u64,
    /// Node 1 transactions refused by certification.
    cert: u64,
    /// Node 1 transactions aborted by node 2's replicated write.
    aborted: u64,
}

impl Contest<'_> {
    /// Runs `call` on node 1 with its COMMIT held; meanwhile node 2 grants `contested` to b
    /// (after taking it from a by force when a holds it). Returns the call's answer and b's
    /// token, once the cluster's counters show how node 1's transaction lost its commit.
    async fn run<T: Send + 'static>(
        &mut self,
        call: impl std::future::Future<Output = T> + Send + 'static,
        contested: &leasehold::LeaseKey,
    ) -> Result<(T, leasehold::FencingToken), String> {
        use leasehold::{AcquireOutcome, AdminStore, Grant, LeaseStore};
        let before = certification_conflicts(self.cluster);
        self.proxy.hold_commits();
        let answer = tokio::spawn(call);
        self.held += 1;
        if !self
            .proxy
            .wait_commits_held(self.held, Duration::from_secs(10))
            .await
        {
            self.proxy.pass_commits();
            return Err("node 1's COMMIT was not held within 10 s".into());
        }
        let _ = self
            .two
            .force_release(contested)
            .await
            .map_err(|e| e.to_string())?;
        let granted = self
            .two
            .begin_tenure(contested, self.b, Grant::New, self.term, None)
            .await
            .map_err(|e| e.to_string());
        // Let node 1 apply node 2's write before its COMMIT goes on (it is refused either way).
        tokio::time::sleep(Duration::from_millis(300)).await;
        self.proxy.pass_commits();
        let answer = answer.await.map_err(|e| e.to_string())?;
        // The contest must have cost node 1's transaction its commit (an abort by the
        // replicated write or a certification failure), or it showed nothing. The counters are
        // status reads of each node, which can lag the client's answer: wait for them a little.
        let lost = |c: (u64, u64)| c.0 + c.1 > before.0 + before.1;
        let mut after = certification_conflicts(self.cluster);
        for _ in 0..50 {
            if lost(after) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            after = certification_conflicts(self.cluster);
        }
        if !lost(after) {
            return Err(format!(
                "{contested}: node 1's transaction was neither refused by certification nor \
                 aborted by node 2's write (counters {before:?}, then {after:?})"
            ));
        }
        self.cert += after.0 - before.0;
        self.aborted += after.1 - before.1;
        match granted? {
            AcquireOutcome::Acquired { token, .. } => Ok((answer, token)),
            other => Err(format!("node 2 did not grant {contested}: {other:?}")),
        }
    }
}

/// A store wrapped around the application's own pool on a Galera node
/// (`SeaOrmStore::from_connection`) is refused with `StoreError::Misconfigured` while the pool's
/// connections do not wait for causality, and accepted once they do (`wsrep_sync_wait = 7`).
/// `Ok` carries the refusal's text.
///
/// # Errors
/// What went wrong, as text: a connection that failed, a pool accepted without the setting, or
/// one refused with it.
pub fn own_pool_needs_causality_wait(cluster: &GaleraCluster) -> Result<String, String> {
    use leasehold::sea_orm::{ConnectOptions, ConnectionTrait, Database};
    on_new_runtime(async {
        let text = |e: &dyn std::fmt::Display| e.to_string();
        let mut options = ConnectOptions::new(cluster.node_url(0));
        options.max_connections(1).min_connections(1);
        let pool = Database::connect(options).await.map_err(|e| text(&e))?;
        let refusal =
            match leasehold::SeaOrmStore::from_connection(pool.clone(), "lease_info").await {
                Err(e @ leasehold::StoreError::Misconfigured { .. }) if !e.is_transient() => {
                    e.to_string()
                }
                Err(e) => return Err(format!("refused with the wrong error: {e}")),
                Ok(_) => return Err("a pool without wsrep_sync_wait was accepted".into()),
            };
        // The pool's one connection now waits for causality.
        pool.execute_unprepared("SET SESSION wsrep_sync_wait = 7")
            .await
            .map_err(|e| text(&e))?;
        leasehold::SeaOrmStore::from_connection(pool, "lease_info")
            .await
            .map_err(|e| format!("refused with wsrep_sync_wait = 7: {e}"))?;
        Ok(refusal)
    })
}
