//! Fair waiting across processes: workers of several processes queue for one lock and are
//! served in the order they arrived (`Locks::acquire_fair_within`), whatever their process.
//!
//! Five services (five holder ids, as five processes would be): the first holds the lock; four
//! workers arrive one after another and queue behind it, each holding a ticket
//! (`{name}#queue:{number}`) that renews itself while it waits. Once the lock is released they
//! are served in arrival order, each under a larger fencing token; the queue is empty after.
//!
//! ```sh
//! cargo run -p leasehold --example fair_lock                       # SQLite in a temp dir
//! cargo run -p leasehold --example fair_lock -- --db postgres://postgres@127.0.0.1/test
//! ```

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use leasehold::derived::{DerivedKey, KeyRole};
use leasehold::{LeaseName, LeaseService};

const NAMESPACE: &str = "docs";
const LOCK: &str = "ledger";
const TTL: Duration = Duration::from_secs(10);

fn db_arg() -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == "--db")
        .and_then(|i| args.get(i + 1).cloned())
}

/// Waits until the queue has `n` live tickets (a worker has arrived once its ticket is there).
async fn queued(service: &LeaseService, n: usize) -> Result<(), Box<dyn std::error::Error>> {
    let prefix = DerivedKey::prefix(&LeaseName::parse(LOCK)?, KeyRole::FairTicket);
    for _ in 0..500 {
        if service
            .locks()
            .held_with_prefix(NAMESPACE, &prefix)
            .await?
            .len()
            == n
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Err(format!("the queue never had {n} tickets").into())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("leasehold-fair-lock-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let url = db_arg()
        .unwrap_or_else(|| format!("sqlite://{}?mode=rwc", dir.join("leases.db").display()));
    let first = LeaseService::builder(&url)
        .holder_id("first")
        .build()
        .await?;
    let guard = first
        .locks()
        .acquire(NAMESPACE, LOCK, TTL)
        .await?
        .ok_or("the lock is taken")?;
    println!("first holds {LOCK} (token {})", guard.token());

    let served = Arc::new(Mutex::new(Vec::new()));
    let mut workers = Vec::new();
    let mut waiting = Vec::new();
    for n in 1..=4 {
        let name = format!("worker-{n}");
        let service = LeaseService::builder(&url)
            .holder_id(name.as_str())
            .build()
            .await?;
        service
            .locks()
            .set_retry_interval(Duration::from_millis(20));
        let (s, served) = (service.clone(), Arc::clone(&served));
        waiting.push(tokio::spawn(async move {
            let wait = Some(Duration::from_secs(30));
            let got = s
                .locks()
                .fair()
                .acquire_within(NAMESPACE, LOCK, wait, TTL)
                .await?;
            let guard = got.ok_or("waited 30 s")?;
            println!("{name} is served (token {})", guard.token());
            served
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(n);
            tokio::time::sleep(Duration::from_millis(50)).await;
            guard.unlock().await?;
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
        }));
        queued(&first, n).await?;
        println!("worker-{n} arrives and queues");
        workers.push(service);
    }

    guard.unlock().await?;
    println!("first releases {LOCK}");
    for w in waiting {
        w.await?.map_err(|e| e.to_string())?;
    }
    let order = served
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    if order != [1, 2, 3, 4] {
        return Err(format!("served out of order: {order:?}").into());
    }
    queued(&first, 0).await?;
    println!("all four workers were served in arrival order; the queue is empty");

    for s in workers.into_iter().chain([first]) {
        s.shutdown().await?;
    }
    let _ = std::fs::remove_dir_all(dir);
    Ok(())
}
