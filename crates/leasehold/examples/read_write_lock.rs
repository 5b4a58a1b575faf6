//! A read-write lock: readers of a catalog share it, the writer that rebuilds it waits for
//! them and is alone while it writes (`Locks::acquire_shared`, `Locks::acquire_exclusive_within`).
//!
//! Three services (three holder ids, as three processes would be): two readers read the
//! catalog at once; the writer asks while they read and waits, and while it waits a new reader
//! stays out (writers are not starved). Once the readers are done the writer writes under a
//! fencing token larger than the last writer's; the waiting reader gets in once it unlocks.
//!
//! ```sh
//! cargo run -p leasehold --example read_write_lock                       # SQLite in a temp dir
//! cargo run -p leasehold --example read_write_lock -- --db postgres://postgres@127.0.0.1/test
//! ```

use std::time::Duration;

use leasehold::LeaseService;

const NAMESPACE: &str = "docs";
const LOCK: &str = "catalog";
const TTL: Duration = Duration::from_secs(10);

fn db_arg() -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == "--db")
        .and_then(|i| args.get(i + 1).cloned())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("leasehold-rw-lock-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let url = db_arg()
        .unwrap_or_else(|| format!("sqlite://{}?mode=rwc", dir.join("leases.db").display()));
    let reader_a = LeaseService::builder(&url)
        .holder_id("reader-a")
        .build()
        .await?;
    let reader_b = LeaseService::builder(&url)
        .holder_id("reader-b")
        .build()
        .await?;
    let writer = LeaseService::builder(&url)
        .holder_id("writer")
        .build()
        .await?;
    for s in [&reader_a, &reader_b, &writer] {
        s.locks().set_retry_interval(Duration::from_millis(20));
    }

    // Two readers at once.
    let a = reader_a
        .locks()
        .read_write()
        .acquire_shared(NAMESPACE, LOCK, TTL)
        .await?;
    let b = reader_b
        .locks()
        .read_write()
        .acquire_shared(NAMESPACE, LOCK, TTL)
        .await?;
    let (a, b) = (a.ok_or("reader-a refused")?, b.ok_or("reader-b refused")?);
    println!(
        "reader-a and reader-b read the catalog together (tokens {} and {})",
        a.token(),
        b.token()
    );

    // The writer waits for them, in the background.
    let w = writer.clone();
    let waiting = tokio::spawn(async move {
        w.locks()
            .read_write()
            .acquire_exclusive_within(NAMESPACE, LOCK, Some(Duration::from_secs(20)), TTL)
            .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    // A new reader stays out while the writer waits.
    if reader_a
        .locks()
        .read_write()
        .acquire_shared(NAMESPACE, LOCK, TTL)
        .await?
        .is_some()
    {
        return Err("a new reader got in past a waiting writer".into());
    }
    println!("writer waits; a new reader stays out until it has written");

    a.unlock().await?;
    b.unlock().await?;
    let guard = waiting.await??.ok_or("the writer timed out")?;
    println!(
        "writer rebuilds the catalog alone under fencing token {}",
        guard.token()
    );
    let cancel = guard.cancellation_token();

    // A reader waiting now gets in once the writer unlocks.
    let r = reader_b.clone();
    let next = tokio::spawn(async move {
        r.locks()
            .read_write()
            .acquire_shared_within(NAMESPACE, LOCK, Some(Duration::from_secs(20)), TTL)
            .await
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    guard.unlock().await?;
    if !cancel.is_cancelled() {
        return Err("the writer's token outlived its unlock".into());
    }
    let reader = next.await??.ok_or("the reader timed out")?;
    println!(
        "reader-b reads the rebuilt catalog (token {})",
        reader.token()
    );
    reader.unlock().await?;

    for s in [reader_a, reader_b, writer] {
        s.shutdown().await?;
    }
    let _ = std::fs::remove_dir_all(dir);
    Ok(())
}
