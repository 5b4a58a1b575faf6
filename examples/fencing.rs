//! Fencing: a paused (stale) lock holder's write is rejected after another holder took over.
//!
//! Two services (two holders) share one database. A takes the lock with a short ttl, then
//! "pauses" (stops renewing, like a GC pause or SIGSTOP) past the ttl. B takes the lock over and
//! writes through a fenced transaction. A wakes up believing nothing happened and tries to write
//! with its old fencing token: the fence refuses, and the ledger only holds B's entry.
//!
//! ```text
//! cargo run -p leasehold --example fencing                       # SQLite file in the temp dir
//! cargo run -p leasehold --example fencing -- --db postgres://…  # any supported URL
//! ```

use std::time::Duration;

use leasehold::LeaseService;
use leasehold::store::StoreBuilder;
use leasehold::store::sea_orm::{ConnectionTrait, DbBackend, Statement};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Runs the scenario against `url`; returns the ledger's entries (only B's).
pub async fn run(url: &str, namespace: &str) -> Result<Vec<String>, BoxError> {
    let a = LeaseService::builder(url)
        .holder_id(format!("{namespace}-a"))
        .build()
        .await?;
    let b = LeaseService::builder(url)
        .holder_id(format!("{namespace}-b"))
        .build()
        .await?;
    // Our own connection for our own tables, on this runtime.
    let store = StoreBuilder::new(url).connect().await?;
    let db = store.connection();
    let table = format!(
        "ledger_{}",
        namespace.replace(|c: char| !c.is_ascii_alphanumeric(), "_")
    );
    db.execute_unprepared(&format!(
        "CREATE TABLE IF NOT EXISTS {table} (entry VARCHAR(200))"
    ))
    .await?;
    let insert = |entry: &str| {
        let sql = match db.get_database_backend() {
            DbBackend::Postgres => format!("INSERT INTO {table} (entry) VALUES ($1)"),
            _ => format!("INSERT INTO {table} (entry) VALUES (?)"),
        };
        Statement::from_sql_and_values(db.get_database_backend(), sql, [entry.into()])
    };

    let ttl = Duration::from_secs(1);
    let stale = a
        .lock(namespace, "ledger", ttl)
        .await?
        .ok_or("the lock should be free")?;
    println!("A holds the lock with token {}", stale.token());

    // A pauses; its grant lapses. B waits for the lock and gets it as a new tenure.
    let fresh = b
        .try_locker(
            namespace,
            "ledger",
            Some(Duration::from_secs(30)),
            Duration::from_secs(30),
        )
        .await?
        .ok_or("B should get the lock once A's grant lapsed")?;
    println!("B took over with token {}", fresh.token());
    let txn = fresh
        .begin_fenced_on(&store)
        .await?
        .ok_or("B's tenure is live")?;
    txn.execute_raw(insert("written by B")).await?;
    txn.commit().await?;

    // A wakes up and tries to write with its old token: refused before anything is written.
    match stale.begin_fenced_on(&store).await? {
        Some(txn) => {
            txn.execute_raw(insert("written by stale A")).await?;
            txn.commit().await?;
            return Err("the stale write went through".into());
        }
        None => println!("A's stale write (token {}) was rejected", stale.token()),
    }
    match stale.unlock().await {
        Err(leasehold::LockError::LockLost { token, .. }) => {
            println!("A's unlock: lost token {token}")
        }
        other => return Err(format!("A's unlock should report LockLost, got {other:?}").into()),
    }
    fresh.unlock().await?;

    let rows = db
        .query_all_raw(Statement::from_string(
            db.get_database_backend(),
            format!("SELECT entry FROM {table}"),
        ))
        .await?;
    let entries = rows
        .iter()
        .map(|r| r.try_get::<String>("", "entry"))
        .collect::<Result<Vec<_>, _>>()?;
    db.execute_unprepared(&format!("DROP TABLE {table}"))
        .await?;
    a.shutdown().await?;
    b.shutdown().await?;
    Ok(entries)
}

#[allow(dead_code)] // also compiled into the test `lock_fencing_example`
#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let mut args = std::env::args().skip(1);
    let url = match (args.next().as_deref(), args.next()) {
        (Some("--db"), Some(url)) => url,
        _ => {
            let dir =
                std::env::temp_dir().join(format!("leasehold-fencing-{}", std::process::id()));
            std::fs::create_dir_all(&dir)?;
            format!("sqlite://{}?mode=rwc", dir.join("leases.db").display())
        }
    };
    let entries = run(&url, &format!("fencing-{}", std::process::id())).await?;
    println!("ledger: {entries:?}");
    Ok(())
}
