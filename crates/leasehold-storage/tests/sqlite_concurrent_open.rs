//! SQLite: stores opening one new database file at once all connect. The connection that
//! switches the new file to WAL can be answered "database is locked" at once while another opens
//! it (SQLite does not wait in the busy handler for that switch's exclusive lock); the open is
//! tried again within the connect timeout (`backend/sqlite/open.rs`). Sixteen stores at once on
//! a new file, ten files (`LEASEHOLD_OPEN_ROUNDS` for more); without the retry about one file in
//! thirty had an open fail.

use std::time::Duration;

use leasehold_storage::StoreBuilder;
use leasehold_testkit::scratch::ScratchDir;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_stores_open_one_new_file_at_once() {
    let rounds: usize = std::env::var("LEASEHOLD_OPEN_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let mut failures = Vec::new();
    for round in 0..rounds {
        let dir = ScratchDir::new("concurrent-open");
        let url = dir.sqlite_url("leases.db");
        let opens: Vec<_> = (0..16)
            .map(|i| {
                let url = url.clone();
                tokio::spawn(async move {
                    StoreBuilder::new(url)
                        .table_prefix(format!("t{}_", i % 2))
                        .connect_timeout(Duration::from_secs(5))
                        .connect()
                        .await
                })
            })
            .collect();
        for open in opens {
            if let Err(e) = open.await.expect("join") {
                failures.push(format!("file {round}: {e}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} opens failed: {failures:#?}",
        failures.len()
    );
}
