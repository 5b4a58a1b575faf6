//! Single checks on the Galera cluster, beside the scenarios: a cross-node wake-up, a fenced
//! commit overtaken through another node, and a store around the application's own pool.

use std::time::Duration;

use super::on_new_runtime;
use crate::clock::mono_ns;
use crate::servers::{GaleraCluster, ServerError};

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
    use leasehold::engine::Term;
    use leasehold::store::sea_orm::ConnectionTrait;
    use leasehold::store::{AcquireOutcome, Grant, LeaseStore};
    use leasehold::{HolderId, LeaseKey};
    on_new_runtime(async {
        let text = |e: &dyn std::fmt::Display| e.to_string();
        let one = leasehold::store::StoreBuilder::new(cluster.node_url(0))
            .connect()
            .await
            .map_err(|e| text(&e))?;
        let two = leasehold::store::StoreBuilder::new(cluster.node_url(1))
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
            .query_all_raw(leasehold::store::sea_orm::Statement::from_string(
                leasehold::store::sea_orm::DbBackend::MySql,
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

/// A store wrapped around the application's own pool on a Galera node
/// (`SeaOrmStore::from_connection`) is refused with `StoreError::Misconfigured` while the pool's
/// connections do not wait for causality, and accepted once they do (`wsrep_sync_wait = 7`).
/// `Ok` carries the refusal's text.
///
/// # Errors
/// What went wrong, as text: a connection that failed, a pool accepted without the setting, or
/// one refused with it.
pub fn own_pool_needs_causality_wait(cluster: &GaleraCluster) -> Result<String, String> {
    use leasehold::store::sea_orm::{ConnectOptions, ConnectionTrait, Database};
    on_new_runtime(async {
        let text = |e: &dyn std::fmt::Display| e.to_string();
        let mut options = ConnectOptions::new(cluster.node_url(0));
        options.max_connections(1).min_connections(1);
        let pool = Database::connect(options).await.map_err(|e| text(&e))?;
        let refusal = match leasehold::store::SeaOrmStore::from_connection(
            pool.clone(),
            "lease_info",
        )
        .await
        {
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
        leasehold::store::SeaOrmStore::from_connection(pool, "lease_info")
            .await
            .map_err(|e| format!("refused with wsrep_sync_wait = 7: {e}"))?;
        Ok(refusal)
    })
}
