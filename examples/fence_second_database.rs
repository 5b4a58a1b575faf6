//! Fencing a resource outside the lease database: a stale holder's write to a second database is
//! refused there.
//!
//! The leases live in one SQLite file, the invoices in another, which cannot see the lease row.
//! The invoice database keeps a fence table instead ([`Fence`]); every write to it admits its
//! fencing token in the same transaction ([`Fence::admit`]). A takes the lock with a short ttl
//! and "pauses" past it; B takes the lock over and writes; A wakes up and tries to write with its
//! old token: the invoice database refuses it and A's transaction rolls back.
//!
//! ```text
//! cargo run -p leasehold --example fence_second_database                       # leases in SQLite
//! cargo run -p leasehold --example fence_second_database -- --db postgres://…  # leases elsewhere
//! ```

use std::time::Duration;

use leasehold::store::sea_orm::{
    ConnectionTrait, Database, DatabaseConnection, DbBackend, Statement, TransactionTrait,
};
use leasehold::store::{Fence, FenceOutcome};
use leasehold::{FencingToken, LeaseService};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Writes one invoice through the fence: committed if `token` is admitted, rolled back if not.
async fn write_invoice(
    invoices: &DatabaseConnection,
    fence: &Fence,
    writer: &str,
    token: FencingToken,
) -> Result<FenceOutcome, BoxError> {
    let txn = invoices.begin().await?;
    let outcome = fence.admit(&txn, "invoices", token).await?;
    match outcome {
        FenceOutcome::Admitted => {
            txn.execute_raw(Statement::from_sql_and_values(
                DbBackend::Sqlite,
                "INSERT INTO invoices (writer, token) VALUES (?, ?)",
                [writer.into(), token.get().into()],
            ))
            .await?;
            txn.commit().await?;
        }
        FenceOutcome::Stale { .. } => txn.rollback().await?,
    }
    Ok(outcome)
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let dir = std::env::temp_dir().join(format!("leasehold-fence-2db-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut args = std::env::args().skip(1);
    let leases = match (args.next().as_deref(), args.next()) {
        (Some("--db"), Some(url)) => url,
        _ => format!("sqlite://{}?mode=rwc", dir.join("leases.db").display()),
    };
    // The lock's namespace, this run's own, so that a shared lease database starts it afresh.
    let namespace = format!("billing-{}", std::process::id());
    let invoices_url = format!("sqlite://{}?mode=rwc", dir.join("invoices.db").display());

    let a = LeaseService::builder(&leases)
        .holder_id("billing-a")
        .build()
        .await?;
    let b = LeaseService::builder(&leases)
        .holder_id("billing-b")
        .build()
        .await?;

    // The resource: its own database, its own table, and the fence table beside it.
    let invoices = Database::connect(&invoices_url).await?;
    invoices
        .execute_unprepared(
            "CREATE TABLE IF NOT EXISTS invoices (writer VARCHAR(32) NOT NULL, token BIGINT NOT NULL)",
        )
        .await?;
    let fence = Fence::new(invoices.clone());
    fence.create_table().await?;

    let stale = a
        .lock(&namespace, "invoices", Duration::from_secs(1))
        .await?
        .ok_or("the lock should be free")?;
    println!("A holds the lock with token {}", stale.token());
    if !write_invoice(&invoices, &fence, "A", stale.token())
        .await?
        .is_admitted()
    {
        return Err("A's write during its tenure was refused".into());
    }

    // A pauses; its grant lapses. B waits for the lock and gets it as a new tenure.
    let fresh = b
        .try_locker(
            &namespace,
            "invoices",
            Some(Duration::from_secs(30)),
            Duration::from_secs(30),
        )
        .await?
        .ok_or("B should get the lock once A's grant lapsed")?;
    println!("B took over with token {}", fresh.token());
    match write_invoice(&invoices, &fence, "B", fresh.token()).await? {
        FenceOutcome::Admitted => println!("B's write was admitted"),
        FenceOutcome::Stale { highest } => {
            return Err(format!("B's write was refused (token {highest} is higher)").into());
        }
    }

    // A wakes up, still believing, and writes with its old token.
    match write_invoice(&invoices, &fence, "A", stale.token()).await? {
        FenceOutcome::Stale { highest } => println!(
            "A's stale write (token {}) was refused at the second database: token {highest} wrote there since",
            stale.token()
        ),
        FenceOutcome::Admitted => return Err("the stale write went through".into()),
    }

    let rows = invoices
        .query_all_raw(Statement::from_string(
            DbBackend::Sqlite,
            "SELECT writer, token FROM invoices ORDER BY token",
        ))
        .await?;
    let written = rows
        .iter()
        .map(|r| {
            Ok((
                r.try_get::<String>("", "writer")?,
                r.try_get::<i64>("", "token")?,
            ))
        })
        .collect::<Result<Vec<_>, leasehold::store::sea_orm::DbErr>>()?;
    println!("invoices: {written:?}");

    let _ = stale.unlock().await;
    fresh.unlock().await?;
    a.shutdown().await?;
    b.shutdown().await?;
    invoices.close().await?;
    let _ = std::fs::remove_dir_all(dir);
    Ok(())
}
