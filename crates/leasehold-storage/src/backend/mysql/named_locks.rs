//! The holder's side of the MySQL/MariaDB doorbell (see `doorbell.rs`): one connection that
//! takes and lets go the named locks of the keys this service holds.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use sea_orm::sqlx::mysql::{MySqlConnectOptions, MySqlConnection};
use sea_orm::sqlx::{AssertSqlSafe, ConnectOptions, Connection, Row};
use tokio::sync::mpsc;

use crate::doorbell::{BACKOFF_MIN, next_backoff};

/// The most named locks the holder's connection takes (one per held key).
pub const MAX_ARMED: usize = 10_000;
/// Named-lock calls per holder statement.
pub(super) const BATCH: usize = 200;
/// How often a failed `GET_LOCK` of the holder is tried again, 100 ms apart.
pub(super) const ARM_RETRIES: u8 = 10;
/// A ping on the holder's connection when it has been idle this long (a connection the server
/// dropped silently would otherwise keep waiters polling until the next release).
pub(super) const KEEPALIVE: Duration = Duration::from_secs(30);

/// The named lock of a payload, computed by the server (a bind placeholder).
pub(super) const LOCK_NAME: &str = "CONCAT('lh:', LEFT(SHA2(?, 256), 60))";

/// What the holder's connection is asked to do, in order.
#[derive(Debug)]
pub(super) enum Op {
    Arm(String),
    Disarm(String),
}

/// Keeps of `calls` (payload, arm?) those that change this connection's named locks, in order:
/// an arm of a wanted key not armed yet, a disarm of an armed one, each judged after the calls
/// before it — so a lock is never taken twice (named locks are counted: a second `GET_LOCK`
/// would need a second `RELEASE_LOCK`) nor let go when not held. This statement's changes are
/// kept beside `armed`, which is not copied: a copy per statement costs time in proportion to
/// the keys armed, on the engine thread, for every statement of a burst.
fn net_calls(calls: &mut Vec<(String, bool)>, armed: &HashSet<String>, wanted: &HashSet<String>) {
    let mut changed: HashMap<String, bool> = HashMap::new();
    calls.retain(|(p, arm)| {
        let is_armed = changed.get(p).copied().unwrap_or_else(|| armed.contains(p));
        let keep = if *arm {
            wanted.contains(p) && !is_armed
        } else {
            is_armed
        };
        if keep {
            changed.insert(p.clone(), *arm);
        }
        keep
    });
}

/// The holder's connection: takes and lets go the named locks it is asked to, reconnecting with
/// a bounded back-off (and taking the locks of the keys still held again) when it fails.
pub(super) async fn hold_forever(
    options: MySqlConnectOptions,
    mut ops: mpsc::UnboundedReceiver<Op>,
    limit: Duration,
) {
    // The keys held now (their locks wanted) and those whose lock this connection has.
    let mut wanted: HashSet<String> = HashSet::new();
    let mut armed: HashSet<String> = HashSet::new();
    // Locks not taken (someone else had the name for a moment), with tries left.
    let mut retry: HashMap<String, u8> = HashMap::new();
    let mut backoff = BACKOFF_MIN;
    let mut conn: Option<MySqlConnection> = None;
    let mut queue: Vec<Op> = Vec::new();
    loop {
        if queue.is_empty() {
            // Without a connection while keys are held: reconnect after the back-off; locks
            // to take again: in 100 ms; otherwise a keepalive ping when idle.
            let wait = if conn.is_none() && !wanted.is_empty() {
                backoff
            } else if !retry.is_empty() {
                Duration::from_millis(100)
            } else {
                KEEPALIVE
            };
            let next = match tokio::time::timeout(wait, ops.recv()).await {
                Ok(next) => next.map(Some),
                Err(_) => Some(None),
            };
            match next {
                None => return, // the doorbell is gone
                Some(Some(op)) => queue.push(op),
                Some(None) => {}
            }
            while queue.len() < BATCH {
                match ops.try_recv() {
                    Ok(op) => queue.push(op),
                    Err(_) => break,
                }
            }
        }
        // The connection, (re)opened; after a reconnect every key still held is armed again.
        if conn.is_none() {
            match tokio::time::timeout(limit, options.connect()).await {
                Ok(Ok(c)) => {
                    conn = Some(c);
                    backoff = BACKOFF_MIN;
                    armed.clear();
                    for p in &wanted {
                        retry.insert(p.clone(), ARM_RETRIES);
                    }
                }
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "doorbell connection failed (waiters poll meanwhile)");
                }
                Err(_) => tracing::debug!("doorbell connection timed out (waiters poll meanwhile)"),
            }
        }
        let Some(c) = conn.as_mut() else {
            // Keep the wanted set up to date while there is no connection.
            for op in queue.drain(..) {
                match op {
                    Op::Arm(p) => {
                        wanted.insert(p);
                    }
                    Op::Disarm(p) => {
                        wanted.remove(&p);
                    }
                }
            }
            backoff = next_backoff(backoff);
            continue;
        };
        // The calls of this statement, in order: (payload, arm?).
        let mut calls: Vec<(String, bool)> = Vec::new();
        for op in queue.drain(..) {
            match op {
                Op::Arm(p) => {
                    retry.remove(&p);
                    if wanted.len() < MAX_ARMED || wanted.contains(&p) {
                        wanted.insert(p.clone());
                        calls.push((p, true));
                    }
                }
                Op::Disarm(p) => {
                    retry.remove(&p);
                    wanted.remove(&p);
                    calls.push((p, false));
                }
            }
        }
        let due: Vec<String> = retry.keys().take(BATCH).cloned().collect();
        for p in due {
            calls.push((p, true));
        }
        net_calls(&mut calls, &armed, &wanted);
        let sql = if calls.is_empty() {
            "SELECT 1".to_owned()
        } else {
            let exprs: Vec<String> = calls
                .iter()
                .map(|(_, arm)| match arm {
                    true => format!("GET_LOCK({LOCK_NAME}, 0)"),
                    false => format!("RELEASE_LOCK({LOCK_NAME})"),
                })
                .collect();
            format!("SELECT {}", exprs.join(", "))
        };
        let mut query = sea_orm::sqlx::query(AssertSqlSafe(sql));
        for (p, _) in &calls {
            query = query.bind(p);
        }
        match tokio::time::timeout(limit, query.fetch_one(&mut *c)).await {
            Ok(Ok(row)) => {
                for (i, (p, arm)) in calls.iter().enumerate() {
                    let got = row.try_get::<Option<i64>, _>(i).ok().flatten();
                    if *arm {
                        if got == Some(1) {
                            armed.insert(p.clone());
                            retry.remove(p);
                        } else {
                            let left = retry.entry(p.clone()).or_insert(ARM_RETRIES);
                            *left = left.saturating_sub(1);
                            if *left == 0 {
                                retry.remove(p);
                            }
                        }
                    } else {
                        armed.remove(p);
                    }
                }
            }
            failed => {
                match failed {
                    Ok(Err(e)) => {
                        tracing::debug!(error = %e, "doorbell statement failed, reconnecting")
                    }
                    _ => tracing::debug!("doorbell statement timed out, reconnecting"),
                }
                // The server lets the named locks of a closed session go.
                if let Some(c) = conn.take() {
                    crate::doorbell::spawn(async move {
                        let _ = tokio::time::timeout(Duration::from_secs(1), c.close()).await;
                    });
                }
                tokio::time::sleep(backoff).await;
                backoff = next_backoff(backoff);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::net_calls;

    fn set(keys: &[&str]) -> HashSet<String> {
        keys.iter().map(|k| (*k).to_owned()).collect()
    }

    fn calls(list: &[(&str, bool)]) -> Vec<(String, bool)> {
        list.iter().map(|(p, a)| ((*p).to_owned(), *a)).collect()
    }

    #[test]
    fn a_lock_is_taken_once_and_let_go_only_when_held() {
        let (armed, wanted) = (set(&["a", "b"]), set(&["a", "c", "d"]));
        let mut list = calls(&[
            ("a", true),  // armed already: dropped
            ("c", true),  // wanted, not armed: kept
            ("c", true),  // armed by the call before: dropped
            ("e", true),  // not wanted: dropped
            ("b", false), // armed: kept
            ("b", false), // let go by the call before: dropped
            ("x", false), // never armed: dropped
            ("c", false), // armed by this statement: kept
            ("c", true),  // let go by the call before, still wanted: kept
        ]);
        net_calls(&mut list, &armed, &wanted);
        assert_eq!(
            list,
            calls(&[("c", true), ("b", false), ("c", false), ("c", true)])
        );
        // The armed set itself is the caller's to update from the server's answers.
        assert_eq!(armed, set(&["a", "b"]));
    }
}
