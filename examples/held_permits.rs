//! Held permits: at most two crawlers fetch at once, each under a permit of the semaphore
//! `crawl/fetchers` that the engine renews by itself (`Semaphores::hold`).
//!
//! Three workers (three `LeaseService`s with their own holder ids, as three processes would be)
//! ask for one of the two permits. Two get one and work until their permit's cancellation token
//! is cancelled; the third finds both taken. The permits outlive their ttl, renewed in the
//! background; when one worker releases its permit, its work stops first, and the third worker
//! gets the slot at once.
//!
//! ```sh
//! cargo run -p leasehold --example held_permits                       # SQLite in a temp dir
//! cargo run -p leasehold --example held_permits -- --db postgres://postgres@127.0.0.1/test
//! ```

use std::time::Duration;

use leasehold::locks::HeldPermit;
use leasehold::{CancellationToken, FencingToken, LeaseService};

const NAMESPACE: &str = "crawl";
const SEMAPHORE: &str = "fetchers";
const PERMITS: u32 = 2;
const TTL: Duration = Duration::from_secs(3);

/// The work done under a permit: one fetch every 500 ms until the permit's tenure ends.
async fn fetch(worker: String, index: u32, token: FencingToken, cancel: CancellationToken) {
    let mut fetched = 0u64;
    loop {
        tokio::select! {
            () = cancel.cancelled() => {
                println!("{worker}: permit {index} ended after {fetched} fetches: stop fetching");
                return;
            }
            () = tokio::time::sleep(Duration::from_millis(500)) => {
                fetched += 1;
                println!("{worker}: fetch {fetched} under permit {index} (fencing token {token})");
            }
        }
    }
}

/// Asks for a permit; on success starts the work under it.
async fn ask(worker: &LeaseService) -> Result<Option<HeldPermit>, leasehold::Error> {
    let name = worker.holder().to_string();
    let Some(permit) = worker
        .locks()
        .permits()
        .hold(NAMESPACE, SEMAPHORE, PERMITS, TTL)
        .await?
    else {
        println!("{name}: both permits are taken");
        return Ok(None);
    };
    println!(
        "{name}: got permit {} of {} with token {}",
        permit.index(),
        permit.permits(),
        permit.token()
    );
    tokio::spawn(fetch(
        name,
        permit.index(),
        permit.token(),
        permit.cancellation_token(),
    ));
    Ok(Some(permit))
}

fn db_arg() -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == "--db")
        .and_then(|i| args.get(i + 1).cloned())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("leasehold-held-permits-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let url = db_arg()
        .unwrap_or_else(|| format!("sqlite://{}?mode=rwc", dir.join("leases.db").display()));
    let mut workers = Vec::new();
    for id in ["worker-a", "worker-b", "worker-c"] {
        workers.push(LeaseService::builder(&url).holder_id(id).build().await?);
    }

    let first = ask(&workers[0]).await?.ok_or("a permit should be free")?;
    let second = ask(&workers[1]).await?.ok_or("a permit should be free")?;
    if ask(&workers[2]).await?.is_some() {
        return Err("a third permit was granted".into());
    }

    // Nobody renews by hand: the engine does, every ttl/3.
    tokio::time::sleep(TTL + Duration::from_secs(1)).await;
    if !(first.is_held() && second.is_held()) {
        return Err("a held permit lapsed".into());
    }
    println!("--- both permits still held after {TTL:?} + 1 s, renewed by the engine ---");

    // worker-a is done: its work stops (the token is cancelled before the release is sent),
    // and the slot is free for worker-c as soon as the release has answered.
    first.release().await?;
    let third = ask(&workers[2])
        .await?
        .ok_or("the released permit should be free")?;
    println!(
        "--- worker-c got permit {} right after the release ---",
        third.index()
    );
    tokio::time::sleep(Duration::from_millis(600)).await;

    for worker in workers {
        let released = worker.shutdown().await?;
        println!("{}: shut down, released {released}", worker.holder());
    }
    let _ = std::fs::remove_dir_all(dir);
    Ok(())
}
