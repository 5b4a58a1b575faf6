//! Candidates and priority: `node-a` (priority 0) leads the scheduler; `node-b` (priority 0)
//! stands by. `node-c`, the preferred node (priority 10, in the primary zone), starts: once it
//! has been a candidate for its settle time it asks `node-a` to yield, and takes the lease over
//! with a larger fencing token, never beside `node-a`. `LeaseService::participants` lists who
//! takes part, before and after.
//!
//! ```sh
//! cargo run -p leasehold --example candidates
//! ```

use std::time::Duration;

use leasehold::clock::{Clock, MonotonicClock};
use leasehold::elections::Candidate;
use leasehold::{LeaseConfig, LeaseService, LeaseTask, LeaseTaskOptions, LeaseValue};

const LEASE: &str = "scheduler";

async fn node(
    url: &str,
    id: &'static str,
    priority: i32,
) -> Result<(LeaseService, LeaseTask), leasehold::Error> {
    let service = LeaseService::builder(url)
        .holder_id(id)
        .config(
            LeaseConfig::default()
                .with_term(Duration::from_secs(3))
                .with_retry_interval(Duration::from_millis(200)),
        )
        .build()
        .await?;
    let candidate = Candidate::new()
        .priority(priority)
        .value(LeaseValue::new(format!("{id}.internal:8080"))?)
        // Hysteresis: ask only after being a candidate this long without a break.
        .settle(Duration::from_secs(2))
        .min_tenure(Duration::from_secs(1));
    let options = LeaseTaskOptions::new().candidate(candidate);
    let task = service.start_lease_task(LEASE, options).await?;
    Ok((service, task))
}

async fn show(service: &LeaseService) -> Result<(), leasehold::Error> {
    for p in service.elections().participants(LEASE).await? {
        let value = p.value.as_ref().map_or("", LeaseValue::as_str);
        match p.token {
            Some(token) => println!(
                "  {} (priority {:?}, {value}) holds, token {token}",
                p.holder, p.priority
            ),
            None => println!(
                "  {} (priority {:?}, {value}) stands by",
                p.holder, p.priority
            ),
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("leasehold-candidates-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let url = format!("sqlite://{}?mode=rwc", dir.join("leases.db").display());

    let (a, task_a) = node(&url, "node-a", 0).await?;
    let (first, _) = task_a.acquired().await?;
    let (b, _task_b) = node(&url, "node-b", 0).await?;
    println!("participants:");
    show(&a).await?;

    let started = MonotonicClock.now();
    let (c, task_c) = node(&url, "node-c", 10).await?;
    let (token, _) = tokio::time::timeout(Duration::from_secs(20), task_c.acquired()).await??;
    let took = MonotonicClock.now().duration_since(started);
    assert!(token > first && !task_a.has_lease());
    println!(
        "node-c took over from tenure {first} with token {token}, {took:.1?} after it started"
    );
    println!("participants:");
    show(&c).await?;

    for s in [a, b, c] {
        s.shutdown().await?;
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
