//! Every transactional path of the store whose `COMMIT` through node 1 loses to a grant of the
//! same row through node 2.

use std::time::Duration;

use super::{certification_conflicts, on_new_runtime};
use crate::servers::GaleraCluster;

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
    use leasehold::engine::Term;
    use leasehold::store::{
        AcquireOutcome, AdminStore, AllOutcome, BatchRenewal, Grant, LeaseStore, ReleaseOutcome,
        TenureRef,
    };
    use leasehold::{HolderId, LeaseKey};
    use leasehold_testkit::FaultProxy;
    on_new_runtime(async {
        let text = |e: &dyn std::fmt::Display| e.to_string();
        let node1: std::net::SocketAddr = ([127, 0, 0, 1], cluster.port(0)).into();
        let proxy = FaultProxy::start(node1).await.map_err(|e| text(&e))?;
        let one = leasehold::store::StoreBuilder::new(proxy.url_for(&cluster.node_url(0), node1))
            .connect()
            .await
            .map_err(|e| text(&e))?;
        let two = leasehold::store::StoreBuilder::new(cluster.node_url(1))
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
    two: &'a leasehold::store::SeaOrmStore,
    b: &'a leasehold::HolderId,
    term: leasehold::engine::Term,
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
        use leasehold::store::{AcquireOutcome, AdminStore, Grant, LeaseStore};
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
