//! N-holder lease tasks: three nodes run the task `crawler` with two permits, so two crawl at
//! once (each on its own slot, with its own fencing token) and one stands by. One active node
//! stops its task (its slot is released), and the standby takes the freed slot.
//!
//! ```sh
//! cargo run -p leasehold --example n_holder_tasks                       # SQLite in a temp dir
//! cargo run -p leasehold --example n_holder_tasks -- --db postgres://postgres@127.0.0.1/test
//! ```

use std::time::Duration;

use leasehold::{LeaseConfig, LeaseService, LeaseTaskOptions, PermitTask};

async fn node(
    url: &str,
    name: &'static str,
) -> Result<(LeaseService, PermitTask), leasehold::Error> {
    let service = LeaseService::builder(url).holder_id(name).build().await?;
    let options = LeaseTaskOptions::new()
        .config(
            LeaseConfig::default()
                .with_term(Duration::from_secs(3))
                .with_retry_interval(Duration::from_millis(200)),
        )
        .on_acquired(move |token, _cancel| println!("{name}: crawling (fencing token {token})"))
        .on_lost(move |reason| println!("{name}: lost its slot ({reason:?})"));
    let task = service
        .tasks()
        .start_with_permits("crawler", 2, options)
        .await?;
    Ok((service, task))
}

fn db_arg() -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == "--db")
        .and_then(|i| args.get(i + 1).cloned())
}

/// Waits until exactly two of `nodes` hold a slot.
async fn two_active(nodes: &[(LeaseService, PermitTask)]) {
    while nodes.iter().filter(|(_, t)| t.has_lease()).count() != 2 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("leasehold-n-holder-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let url = db_arg()
        .unwrap_or_else(|| format!("sqlite://{}?mode=rwc", dir.join("leases.db").display()));

    let mut nodes = Vec::new();
    for name in ["node-a", "node-b", "node-c"] {
        nodes.push(node(&url, name).await?);
    }
    two_active(&nodes).await;
    for (service, task) in &nodes {
        match task.held_slot() {
            Some((slot, token)) => println!("{}: slot {slot}, token {token}", service.holder()),
            None => println!("{}: standing by", service.holder()),
        }
    }
    let standby = nodes
        .iter()
        .position(|(_, t)| !t.has_lease())
        .ok_or("no standby")?;
    let active = nodes
        .iter()
        .position(|(_, t)| t.has_lease())
        .ok_or("no active node")?;

    println!("--- {} stops its task ---", nodes[active].0.holder());
    nodes[active].1.stop().await?;
    two_active(&nodes).await;
    let (service, task) = &nodes[standby];
    if let Some((slot, token)) = task.held_slot() {
        println!(
            "--- {} took over slot {slot} (token {token}): two nodes crawl again ---",
            service.holder()
        );
    }
    for (service, _) in nodes {
        service.shutdown().await?;
    }
    let _ = std::fs::remove_dir_all(dir);
    Ok(())
}
