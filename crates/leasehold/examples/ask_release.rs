//! Cooperative revocation: an operator wants the scheduler off `node-a` (a deploy there). From
//! `node-b`, which stands by for the same lease, it asks the holder to hand over
//! (`LeaseService::ask_release`). `node-a` opted in (`LeaseTaskOptions::revocable`): it takes no
//! new job, lets the running one finish, gives the lease up and stays out while the ask is
//! live, so `node-b` takes it, with a larger fencing token, after `node-a`'s last job ended.
//! A forced ask then moves the lease back while a job of `node-b`'s never returns.
//!
//! ```sh
//! cargo run -p leasehold --example ask_release
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use leasehold::elections::{AskOptions, AskOutcome, Revocable, Revocation};
use leasehold::{LeaseConfig, LeaseService, LeaseTask, LeaseTaskOptions};

const LEASE: &str = "scheduler";

async fn node(url: &str, id: &'static str) -> Result<(LeaseService, LeaseTask), leasehold::Error> {
    let service = LeaseService::builder(url)
        .holder_id(id)
        .config(LeaseConfig::default().with_term(Duration::from_secs(3)))
        .build()
        .await?;
    let revocable = Revocable::new(Duration::from_secs(30)).on_revoke(move |what| match what {
        Revocation::Asked { asker, token } => {
            println!("{id}: {asker} asks for tenure {token}: finishing the running job");
        }
        Revocation::HandedOver(how) => println!("{id}: handed over ({how:?})"),
        other => println!("{id}: {other:?}"),
    });
    let options = LeaseTaskOptions::new().revocable(revocable);
    let task = service.start_lease_task(LEASE, options).await?;
    Ok((service, task))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("leasehold-ask-release-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let url = format!("sqlite://{}?mode=rwc", dir.join("leases.db").display());

    let (a, task_a) = node(&url, "node-a").await?;
    let (first, _) = task_a.acquired().await?;
    println!("node-a leads with token {first}");
    let (b, task_b) = node(&url, "node-b").await?;

    // node-a's running job: 400 ms, tracked with begin_work.
    let job = task_a.begin_work().ok_or("node-a leads")?;
    let job_done = Arc::new(AtomicBool::new(false));
    let done = Arc::clone(&job_done);
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(400)).await;
        done.store(true, Ordering::SeqCst);
        println!("node-a: last job finished");
        drop(job);
    });

    match b
        .elections()
        .ask_release(LEASE, Duration::from_secs(10))
        .await?
    {
        AskOutcome::Acquired { previous, token } => {
            assert!(job_done.load(Ordering::SeqCst) && !task_a.has_lease());
            println!(
                "node-b took over from tenure {previous} with token {token}, after node-a's last job"
            );
        }
        other => return Err(format!("unexpected: {other:?}").into()),
    }

    // node-b's job never returns; node-a asks with a force deadline of 500 ms.
    let stuck = task_b.begin_work().ok_or("node-b leads")?;
    let forcing = AskOptions::new(Duration::from_secs(10)).force_after(Duration::from_millis(500));
    match a.elections().ask_release_with(LEASE, &forcing).await? {
        AskOutcome::Acquired { token, .. } => {
            assert!(!stuck.is_held() && !task_b.has_lease());
            println!(
                "forced: node-a leads again with token {token}; node-b's stuck job is no longer held"
            );
        }
        other => return Err(format!("unexpected: {other:?}").into()),
    }
    drop(stuck);
    a.shutdown().await?;
    b.shutdown().await?;
    let _ = std::fs::remove_dir_all(dir);
    Ok(())
}
