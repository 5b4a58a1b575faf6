//! One torture worker process: competes for the names and, while it believes it holds one,
//! writes work rows to the log, one unfenced and one fenced per round.

use std::io::Read;
use std::time::Duration;

use leasehold::{LeaseConfig, LeaseService, LeaseTask, LeaseTaskOptions};
use leasehold_storage::{FencingToken, HolderId, LeaseKey, StoreBuilder, StoreError};
use rand::RngExt;

use super::log::{Kind, LogWriter};
use super::{WorkerArgs, lease_config, name_of};

/// Runs until killed (or until the parent goes away: stdin closes). Returns an error message if
/// it could not start.
pub async fn run(db: &str, args: WorkerArgs) -> Result<(), String> {
    // The parent holds our stdin open; when it dies (even by SIGKILL), read returns and we exit.
    std::thread::spawn(|| {
        let mut buf = [0_u8; 64];
        while let Ok(n) = std::io::stdin().read(&mut buf) {
            if n == 0 {
                break;
            }
        }
        std::process::exit(0);
    });
    let config: LeaseConfig = lease_config(args.term);
    let service = LeaseService::builder(db)
        .holder_id(args.holder.clone())
        .namespace(args.namespace.clone())
        .config(config)
        .build()
        .await
        .map_err(|e| format!("worker {}: {e}", args.holder))?;
    let store = StoreBuilder::new(db)
        .migrate(false)
        .connect()
        .await
        .map_err(|e| format!("worker {}: {e}", args.holder))?;
    let writer = LogWriter::new(store, args.namespace.clone(), args.holder.clone());
    let holder = HolderId::new(args.holder.as_str()).map_err(|e| e.to_string())?;
    let mut tasks = Vec::new();
    for i in 0..args.names {
        let task = service
            .start_lease_task(&name_of(i), LeaseTaskOptions::new())
            .await
            .map_err(|e| format!("worker {}: {e}", args.holder))?;
        tasks.push(task);
    }
    let mut errors = 0_u64;
    loop {
        let mut wrote = false;
        for task in &tasks {
            if let Some(token) = task.token() {
                wrote = true;
                if let Err(e) = round(&writer, &holder, task, token).await {
                    errors += 1;
                    if errors.is_power_of_two() {
                        eprintln!(
                            "torture worker {}: {e} ({errors} errors so far)",
                            args.holder
                        );
                    }
                }
            }
        }
        if !wrote {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// One round of work on a name this holder believes it holds: a pause-prone gap, an unfenced
/// write, another gap, a fenced write (or its refusal, recorded outside the fence).
async fn round(
    writer: &LogWriter,
    holder: &HolderId,
    task: &LeaseTask,
    token: FencingToken,
) -> Result<(), StoreError> {
    let key: &LeaseKey = task.key();
    let name = key.name.as_str();
    // "Work" between the check and the writes: a SIGSTOP landing here makes the writes stale.
    tokio::time::sleep(gap()).await;
    writer.append(name, token.get(), Kind::Unfenced).await?;
    tokio::time::sleep(gap()).await;
    match writer.store().begin_fenced(key, holder, token).await? {
        Some(txn) => {
            let inserted = writer.append_fenced(&txn, name, token.get()).await;
            let committed = match inserted {
                Ok(()) => txn.commit().await.is_ok(),
                Err(_) => false,
            };
            if !committed {
                // SQLite: a stale snapshot cannot be upgraded to a write; the write did not happen.
                writer
                    .append(name, token.get(), Kind::FencedRefused)
                    .await?;
            }
        }
        None => {
            writer
                .append(name, token.get(), Kind::FencedRefused)
                .await?
        }
    }
    Ok(())
}

fn gap() -> Duration {
    Duration::from_millis(rand::rng().random_range(5..40))
}
