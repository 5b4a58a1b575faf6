//! Sharded lease tasks: three hosts split 100 named tasks by a consistent-hash ring, and
//! re-split them when one host leaves.
//!
//! Three `LeaseService`s in one process stand in for three processes (each has its own holder
//! id and engine). Every host starts the same 100 names with `start_sharded`; each competes only
//! for the names the ring of live members assigns it. Then `host-b` leaves gracefully: it
//! releases its membership first and then its names, and the others take them over at their
//! next refresh. Nothing moves between the hosts that stay.
//!
//! ```sh
//! cargo run -p leasehold --example shard_tasks                       # SQLite in a temp dir
//! cargo run -p leasehold --example shard_tasks -- --db postgres://postgres@127.0.0.1/test
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use leasehold::shards::ShardOptions;
use leasehold::{LeaseConfig, LeaseService, ShardedTasks};

const TASKS: usize = 100;

fn names() -> Vec<String> {
    (0..TASKS).map(|i| format!("partition-{i:03}")).collect()
}

async fn host(
    url: &str,
    ns: &str,
    name: &'static str,
) -> Result<(LeaseService, ShardedTasks), leasehold::Error> {
    let service = LeaseService::builder(url)
        .namespace(ns)
        .holder_id(name)
        .config(
            LeaseConfig::default()
                .with_term(Duration::from_secs(3))
                .with_retry_interval(Duration::from_millis(200)),
        )
        .build()
        .await?;
    let options = ShardOptions::new()
        .refresh_interval(Duration::from_millis(500))
        .on_acquired(move |task, token, cancel| {
            log_line(name, task, &format!("acquired (token {token})"));
            // Real work would run until `cancel` is cancelled (the task moved or was lost).
            drop(cancel);
        })
        .on_lost(move |task, reason| log_line(name, task, &format!("lost ({reason:?})")));
    let shards = service.start_sharded(names(), options).await?;
    Ok((service, shards))
}

/// Prints the first few callbacks of each host only, so the output stays readable.
fn log_line(host: &str, task: &str, what: &str) {
    if task.ends_with('0') && task < "partition-030" {
        println!("  {host}: {task} {what}");
    }
}

/// Waits until every task is held by exactly one host and the counts stay put for a refresh;
/// reports how long that took by the database's clock.
async fn settle(
    clock: &LeaseService,
    hosts: &[(&str, &ShardedTasks)],
) -> Result<BTreeMap<String, usize>, Box<dyn std::error::Error>> {
    let started = clock.db_now().await?;
    let mut last = BTreeMap::new();
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(600)).await;
        let counts: BTreeMap<String, usize> = hosts
            .iter()
            .map(|(name, shards)| ((*name).to_owned(), shards.held().len()))
            .collect();
        let total: usize = counts.values().sum();
        if total == TASKS && counts == last {
            let now = clock.db_now().await?;
            println!(
                "  settled within {:?} (database time)",
                now.saturating_since(started)
            );
            return Ok(counts);
        }
        last = counts;
    }
    Err(format!("the tasks did not settle within a minute: {last:?}").into())
}

fn db_arg() -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == "--db")
        .and_then(|i| args.get(i + 1).cloned())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("leasehold-shard-tasks-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let url = db_arg()
        .unwrap_or_else(|| format!("sqlite://{}?mode=rwc", dir.join("leases.db").display()));
    // A namespace of its own per run, so a shared database keeps no stale members from earlier.
    let ns = format!("shard-example-{}", std::process::id());

    println!("--- three hosts start the same {TASKS} tasks ---");
    let (a, shards_a) = host(&url, &ns, "host-a").await?;
    let (b, shards_b) = host(&url, &ns, "host-b").await?;
    let (c, shards_c) = host(&url, &ns, "host-c").await?;
    let counts = settle(
        &a,
        &[
            ("host-a", &shards_a),
            ("host-b", &shards_b),
            ("host-c", &shards_c),
        ],
    )
    .await?;
    for (host, n) in &counts {
        println!("{host} holds {n} tasks");
    }

    println!("--- host-b leaves gracefully ---");
    let released = shards_b.leave().await?;
    println!("  host-b released {released} tasks");
    let counts = settle(
        &a,
        &[
            ("host-a", &shards_a),
            ("host-b", &shards_b),
            ("host-c", &shards_c),
        ],
    )
    .await?;
    for (host, n) in &counts {
        println!("{host} holds {n} tasks");
    }

    for service in [&a, &b, &c] {
        service.shutdown().await?;
    }
    let _ = std::fs::remove_dir_all(dir);
    Ok(())
}
