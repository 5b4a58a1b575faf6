//! In-process leases with expiry listeners (the HBase `Leases` part): sessions held for clients
//! that may vanish. Clients that keep renewing keep their session; the others expire, and the
//! listener frees their resources exactly once.
//!
//! ```sh
//! cargo run -p leasehold --example local_leases
//! ```

use std::time::Duration;

use leasehold::local::{CloseMode, LocalLeases};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let leases = LocalLeases::new();
    for client in ["alice", "bob", "carol"] {
        leases.create(client, Duration::from_millis(500), move |lease| {
            println!(
                "session of {} expired ({:?}): closing its cursor",
                lease.name(),
                lease.cause()
            );
        })?;
        println!("opened a session for {client}");
    }
    // alice keeps renewing; bob cancels cleanly; carol vanishes.
    leases.cancel("bob")?;
    println!("bob closed his session (no expiry callback)");
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        leases.renew("alice")?;
        println!("alice renewed; {:?} left", leases.remaining("alice")?);
    }
    println!("live sessions: {}", leases.len());
    match leases.renew("carol") {
        Ok(_) => println!("carol renewed?"),
        Err(e) => println!("carol cannot renew: {e}"),
    }
    let closed = leases.close(CloseMode::ExpireAll);
    tokio::time::sleep(Duration::from_millis(50)).await;
    println!("closed the service, expiring {closed} remaining session(s)");
    Ok(())
}
