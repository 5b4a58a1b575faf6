//! Master/standby, the seeds' use case: a stream-processing job that only the master runs.
//!
//! Two nodes (two `LeaseService`s with their own holder ids, as two processes would be) compete
//! for the lease `stream-job`. The winner processes batches until its lease ends; the other
//! stands by. Then the master crashes without releasing (as `kill -9` would), and the standby
//! takes over once the crashed master's grant has expired by the database's clock.
//!
//! ```sh
//! cargo run -p leasehold --example master_standby                       # SQLite in a temp dir
//! cargo run -p leasehold --example master_standby -- --db postgres://postgres@127.0.0.1/test
//! ```

use std::time::Duration;

use leasehold::{CancellationToken, FencingToken, LeaseConfig, LeaseService, LeaseTaskOptions};

/// The job only the master runs: one "batch" every 300 ms until its tenure ends.
async fn stream_job(node: &'static str, token: FencingToken, cancel: CancellationToken) {
    let mut batch = 0u64;
    loop {
        tokio::select! {
            () = cancel.cancelled() => {
                println!("{node}: tenure {token} ended after {batch} batches: stop processing");
                return;
            }
            () = tokio::time::sleep(Duration::from_millis(300)) => {
                batch += 1;
                println!("{node}: processing batch {batch} as master (fencing token {token})");
            }
        }
    }
}

async fn node(url: &str, name: &'static str) -> Result<LeaseService, leasehold::Error> {
    let service = LeaseService::builder(url)
        .holder_id(name)
        .config(
            LeaseConfig::default()
                .with_term(Duration::from_secs(3))
                .with_retry_interval(Duration::from_millis(200)),
        )
        .build()
        .await?;
    let rt = tokio::runtime::Handle::current();
    let options = LeaseTaskOptions::new()
        .on_acquired(move |token, cancel| {
            println!("{name}: became master with token {token}");
            rt.spawn(stream_job(name, token, cancel));
        })
        .on_lost(move |reason| println!("{name}: lost the lease ({reason:?})"));
    service.start_lease_task("stream-job", options).await?;
    Ok(service)
}

fn db_arg() -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == "--db")
        .and_then(|i| args.get(i + 1).cloned())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("leasehold-master-standby-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let url = db_arg()
        .unwrap_or_else(|| format!("sqlite://{}?mode=rwc", dir.join("leases.db").display()));

    let a = node(&url, "node-a").await?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let b = node(&url, "node-b").await?;
    tokio::time::sleep(Duration::from_secs(2)).await;

    let (master, standby) = if a.has_lease("stream-job") {
        (a, b)
    } else {
        (b, a)
    };
    println!(
        "--- {} crashes without releasing its lease ---",
        master.holder()
    );
    master.abort_without_release().await;
    let crashed_at = standby.db_now().await?;

    while !standby.has_lease("stream-job") {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let took_over = standby.db_now().await?;
    println!(
        "--- {} took over {:?} after the crash (term 3 s + retry), by the database clock ---",
        standby.holder(),
        took_over.saturating_since(crashed_at)
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let released = standby.shutdown().await?;
    println!(
        "--- {} shut down and released {released} lease(s) ---",
        standby.holder()
    );
    let _ = std::fs::remove_dir_all(dir);
    Ok(())
}
