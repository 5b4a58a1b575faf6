//! Observing a lease without competing for it (etcd's `Election.Observe`): a dashboard process
//! follows who leads `scheduler` while two nodes hand the lease over.
//!
//! The observer prints the current state first, then every change: node-a's grant, its
//! renewals (the end moving), its release when it stops, node-b's take-over, and the lapse when
//! node-b crashes without releasing. Grants and releases are pushed by the nodes' doorbells
//! (on MySQL/MariaDB releases only); renewals and the rest are seen within the poll interval
//! (here 200 ms).
//!
//! ```sh
//! cargo run -p leasehold --example observe_leader                       # SQLite in a temp dir
//! cargo run -p leasehold --example observe_leader -- --db postgres://postgres@127.0.0.1/test
//! ```

use std::time::Duration;

use leasehold::elections::{Observation, ObserveOptions};
use leasehold::{LeaseConfig, LeaseService, LeaseTaskOptions};

async fn service(url: &str, name: &str) -> Result<LeaseService, leasehold::Error> {
    LeaseService::builder(url)
        .holder_id(name)
        .namespace("observe-example")
        .config(
            LeaseConfig::default()
                .with_term(Duration::from_secs(2))
                .with_renew_interval(Duration::from_millis(600))
                .with_retry_interval(Duration::from_millis(100))
                .with_safety_margin(Duration::from_millis(300)),
        )
        .build()
        .await
}

fn db_arg() -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == "--db")
        .and_then(|i| args.get(i + 1).cloned())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("leasehold-observe-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let url = db_arg()
        .unwrap_or_else(|| format!("sqlite://{}?mode=rwc", dir.join("leases.db").display()));

    let dashboard = service(&url, "dashboard").await?;
    let options = ObserveOptions::new().poll(Duration::from_millis(200));
    let mut observer = dashboard
        .elections()
        .observe_with("scheduler", options)
        .await?;
    let printer = tokio::spawn(async move {
        let mut lapsed = false;
        while let Some(seen) = observer.next().await {
            match &seen {
                Observation::State(Some(r)) if r.held => println!(
                    "observer: {} leads (token {}, {:?} left)",
                    r.holder,
                    r.token,
                    r.time_left()
                ),
                Observation::State(Some(r)) => {
                    println!(
                        "observer: nobody leads (last: {} with token {})",
                        r.holder, r.token
                    );
                    lapsed = r.holder.as_str() == "node-b";
                }
                Observation::State(None) => println!("observer: nobody has ever led"),
                Observation::Unreachable(e) => println!("observer: cannot see ({e})"),
                other => println!("observer: {other:?}"),
            }
            if lapsed {
                return;
            }
        }
    });

    let a = service(&url, "node-a").await?;
    a.start_lease_task("scheduler", LeaseTaskOptions::new())
        .await?
        .acquired()
        .await?;
    let b = service(&url, "node-b").await?;
    b.start_lease_task("scheduler", LeaseTaskOptions::new())
        .await?;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    println!("--- node-a stops: it releases, node-b takes over ---");
    a.stop_lease_task("scheduler").await?;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    println!("--- node-b crashes without releasing: the lease lapses ---");
    b.abort_without_release().await;
    tokio::time::timeout(Duration::from_secs(20), printer).await??;
    println!("--- the observer saw the lapse of node-b's tenure ---");
    a.shutdown().await?;
    dashboard.shutdown().await?;
    let _ = std::fs::remove_dir_all(dir);
    Ok(())
}
