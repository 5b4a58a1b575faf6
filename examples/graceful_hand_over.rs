//! Graceful hand-over: the leader is asked to go (a deploy, SIGTERM) while a job runs. It takes
//! no new job, lets the running one finish, and only then releases the lease; the standby's
//! first job starts after the leader's last one ended. Then the new leader yields the lease
//! back (`yield_lease`), as an operator would move leadership off a node.
//!
//! ```sh
//! cargo run -p leasehold --example graceful_hand_over
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use leasehold::{FencingToken, LeaseConfig, LeaseService, LeaseTask, LeaseTaskOptions};

const LEADER: &str = "nightly-billing";

/// A node retrying every `retry` while someone else leads.
async fn node(
    url: &str,
    id: &str,
    retry: Duration,
) -> Result<(LeaseService, LeaseTask), leasehold::Error> {
    let service = LeaseService::builder(url)
        .holder_id(id)
        .config(
            LeaseConfig::default()
                .with_term(Duration::from_secs(3))
                .with_retry_interval(retry),
        )
        .build()
        .await?;
    let task = service
        .start_lease_task(LEADER, LeaseTaskOptions::new())
        .await?;
    Ok((service, task))
}

/// Runs jobs while leading: each job begins with `begin_work` (refused while handing over) and
/// ends by dropping the guard.
fn run_jobs(name: &'static str, task: LeaseTask, job_running: Arc<AtomicBool>) {
    tokio::spawn(async move {
        loop {
            let Ok((token, _)) = task.acquired().await else {
                return;
            };
            let Some(work) = task.begin_work() else {
                // Leading but draining: take no new job.
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            };
            job_running.store(true, Ordering::SeqCst);
            println!("{name}: job starts (token {token})");
            tokio::time::sleep(Duration::from_millis(600)).await;
            println!("{name}: job done (token {token})");
            job_running.store(false, Ordering::SeqCst);
            work.finish();
        }
    });
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("leasehold-handover-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let url = format!("sqlite://{}?mode=rwc", dir.join("leases.db").display());

    let (a, task_a) = node(&url, "node-a", Duration::from_millis(200)).await?;
    let token_a = task_a.acquired().await?.0;
    let (b, task_b) = node(&url, "node-b", Duration::from_millis(800)).await?;
    let a_busy = Arc::new(AtomicBool::new(false));
    run_jobs("node-a", task_a.clone(), Arc::clone(&a_busy));
    // node-b starts its jobs only when it leads; it checks that node-a's job is over by then.
    let overlap = Arc::new(AtomicBool::new(false));
    {
        let (task_b, a_busy, overlap) = (task_b.clone(), Arc::clone(&a_busy), Arc::clone(&overlap));
        tokio::spawn(async move {
            if task_b.acquired().await.is_ok() && a_busy.load(Ordering::SeqCst) {
                overlap.store(true, Ordering::SeqCst);
            }
        });
    }
    run_jobs("node-b", task_b.clone(), Arc::new(AtomicBool::new(false)));
    tokio::time::sleep(Duration::from_millis(300)).await; // node-a is mid-job

    println!("node-a: asked to go; handing over");
    let outcome = a.tasks().hand_over(LEADER, Duration::from_secs(10)).await?;
    println!("node-a: {outcome:?}");
    let token_b = tokio::time::timeout(Duration::from_secs(10), task_b.acquired())
        .await??
        .0;
    println!("node-b: leads (token {token_b})");
    a.shutdown().await?;

    // An operator moves leadership off node-b: it yields, and competes again one retry
    // interval (800 ms) after its release, after node-c (which retries every 100 ms).
    let (c, task_c) = node(&url, "node-c", Duration::from_millis(100)).await?;
    tokio::time::sleep(Duration::from_millis(700)).await;
    let outcome = b
        .tasks()
        .yield_lease(LEADER, Duration::from_secs(10))
        .await?;
    println!("node-b: yielded: {outcome:?}");
    let token_c = tokio::time::timeout(Duration::from_secs(10), task_c.acquired())
        .await??
        .0;
    println!("node-c: leads (token {token_c})");

    b.shutdown().await?;
    c.shutdown().await?;
    let _ = std::fs::remove_dir_all(&dir);
    let ok = grew(token_a, token_b, token_c) && !overlap.load(Ordering::SeqCst);
    if !ok {
        return Err(
            "the successor's tenure overlapped the last job, or tokens did not grow".into(),
        );
    }
    println!("handed over after the last job finished");
    Ok(())
}

/// Each new leader's fencing token is above the previous one's.
fn grew(a: FencingToken, b: FencingToken, c: FencingToken) -> bool {
    a < b && b < c
}
