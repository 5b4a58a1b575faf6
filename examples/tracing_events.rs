//! leasehold's diagnostics through `tracing`: every lease task and lock runs in a `lease` span
//! with `namespace`, `name`, `holder` and `token`, and its grants, losses, hand-overs and
//! releases are events inside it with an `event` field (`acquired`, `lost`, `released`,
//! `holder_changed`, `taken_over`, …) and their own fields, the span's not repeated.
//! Applications on `log` get the same events as log records, with the lease's fields, without
//! doing anything.
//!
//! ```sh
//! cargo run -p leasehold --example tracing_events
//! ```
//!
//! It prints, for example:
//! `INFO lease{namespace="" name="report-leader" holder="node-a" token=1}: leasehold_engine::trace:
//! tenure acquired event="acquired"`

use std::io::IsTerminal;
use std::time::Duration;

use leasehold::{LeaseConfig, LeaseService, LeaseTaskOptions};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_ansi(std::io::stdout().is_terminal())
        .init();

    let dir = std::env::temp_dir().join(format!("leasehold-tracing-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let url = format!("sqlite://{}?mode=rwc", dir.join("leases.db").display());
    let service = LeaseService::builder(&url)
        .holder_id("node-a")
        .config(LeaseConfig::default().with_term(Duration::from_secs(5)))
        .build()
        .await?;

    // A lease task: `acquired` inside its span.
    let task = service
        .start_lease_task("report-leader", LeaseTaskOptions::new())
        .await?;
    tokio::time::timeout(Duration::from_secs(10), task.acquired()).await??;

    // A lock: its own span, `acquired` then `released`.
    let locks = service.locks();
    let guard = locks
        .acquire("jobs", "rebuild-index", Duration::from_secs(30))
        .await?
        .ok_or("the lock is free in a new database")?;
    tracing::info!(
        token = guard.token().get(),
        "the application holds the lock"
    );
    locks.release("jobs", "rebuild-index").await?;

    // Shutting down releases the lease task's tenure: `released`.
    service.shutdown().await?;
    let _ = std::fs::remove_dir_all(&dir);
    println!("traced a lease task and a lock");
    Ok(())
}
