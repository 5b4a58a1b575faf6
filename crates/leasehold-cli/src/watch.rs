//! `leasehold watch`: a live view of the held leases.
//!
//! On a terminal it redraws a table every interval, highlighting rows whose holder or token
//! changed since the last frame. Elsewhere (a pipe, a log file) it prints one plain line per
//! change: a lease granted, taken over, or ended.
//!
//! With `--name`, it observes those names instead ([`leasehold_storage::observe`]): one line per
//! observation — the current state first, then every change (granted, renewed, taken over,
//! ended, unreachable) — releases by services pushed through one doorbell for all the names,
//! grants by services too on PostgreSQL and SQLite files, the rest polled every interval.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::time::Duration;

use std::sync::Arc;

use leasehold_storage::observe::{LeaseObserver, Observation, ObserveOptions};
use leasehold_storage::{LeaseKey, LeaseRecord, LeaseStore, Namespace, SeaOrmStore, StoreError};

use crate::duration::human;

/// What a row looked like in the previous frame.
type Frame = BTreeMap<(String, String), (String, i64)>;

const BOLD_YELLOW: &str = "\x1b[1;33m";
const RESET: &str = "\x1b[0m";

/// Watches until `count` refreshes are done (forever when `None`).
pub async fn watch(
    store: &SeaOrmStore,
    namespace: Option<&Namespace>,
    prefix: &str,
    interval: Duration,
    count: Option<u64>,
) -> Result<(), StoreError> {
    let tty = std::io::stdout().is_terminal();
    let mut previous: Option<Frame> = None;
    let mut done = 0u64;
    loop {
        let rows = store.list_valid(namespace, prefix).await?;
        let now = store.db_now().await?;
        let frame: Frame = rows
            .iter()
            .map(|r| {
                (
                    (r.key.namespace.to_string(), r.key.name.to_string()),
                    (r.holder.to_string(), r.token.get()),
                )
            })
            .collect();
        let mut out = std::io::stdout().lock();
        if tty {
            let _ = write!(out, "\x1b[2J\x1b[H");
            let _ = writeln!(
                out,
                "leasehold watch  {now}  {} held  (Ctrl-C to stop)\n",
                rows.len()
            );
            let _ = write!(
                out,
                "{}",
                table(&rows, previous.as_ref(), leasehold_cli::color_allowed())
            );
        } else {
            for line in changes(previous.as_ref(), &frame, &rows) {
                let _ = writeln!(out, "{now}  {line}");
            }
        }
        let _ = out.flush();
        drop(out);
        previous = Some(frame);
        done += 1;
        if count.is_some_and(|c| done >= c) {
            return Ok(());
        }
        tokio::time::sleep(interval).await;
    }
}

/// The plain-text lines describing what changed between two frames.
fn changes(previous: Option<&Frame>, frame: &Frame, rows: &[LeaseRecord]) -> Vec<String> {
    let mut lines = Vec::new();
    let empty = Frame::new();
    let before = previous.unwrap_or(&empty);
    for r in rows {
        let k = (r.key.namespace.to_string(), r.key.name.to_string());
        let what = match before.get(&k) {
            None => "held",
            Some((h, t)) if *h != r.holder.as_str() || *t != r.token.get() => "taken over",
            Some(_) => continue,
        };
        lines.push(format!(
            "{what:<10} {}  holder {}  token {}  left {}",
            r.key,
            r.holder,
            r.token,
            human(r.time_left())
        ));
    }
    for ((ns, name), (holder, token)) in before {
        if !frame.contains_key(&(ns.clone(), name.clone())) {
            let key = if ns.is_empty() {
                name.clone()
            } else {
                format!("{ns}/{name}")
            };
            lines.push(format!(
                "{:<10} {key}  holder {holder}  token {token}",
                "ended"
            ));
        }
    }
    lines
}

/// The terminal table, changed rows highlighted in colour, or marked `*` at the end of the line
/// when colour is off (`NO_COLOR`).
fn table(rows: &[LeaseRecord], previous: Option<&Frame>, color: bool) -> String {
    let mut s = format!(
        "{:<20} {:<28} {:<30} {:>7} {:>10}\n",
        "NAMESPACE", "NAME", "HOLDER", "TOKEN", "TIME LEFT"
    );
    for r in rows {
        let k = (r.key.namespace.to_string(), r.key.name.to_string());
        let changed =
            previous.is_some_and(|p| p.get(&k) != Some(&(r.holder.to_string(), r.token.get())));
        let line = format!(
            "{:<20} {:<28} {:<30} {:>7} {:>10}",
            r.key.namespace.as_str(),
            r.key.name.as_str(),
            r.holder.as_str(),
            r.token.get(),
            human(r.time_left())
        );
        if changed && color {
            s.push_str(&format!("{BOLD_YELLOW}{line}{RESET}\n"));
        } else if changed {
            s.push_str(&format!("{line} *\n"));
        } else {
            s.push_str(&line);
            s.push('\n');
        }
    }
    s
}

/// Observes `keys` and prints one line per observation, until `count` lines are printed
/// (forever when `None`). Each name's observer yields its current state first.
pub async fn observe(
    store: &SeaOrmStore,
    keys: Vec<LeaseKey>,
    interval: Duration,
    count: Option<u64>,
) -> Result<(), StoreError> {
    let bell = leasehold_storage::doorbell::for_store(store, Duration::from_secs(5));
    let options = ObserveOptions::new().poll(interval);
    let lease_store: Arc<dyn LeaseStore> = Arc::new(store.clone());
    // A small channel: a slow terminal holds the observers back, and each then keeps only
    // the latest state of its name.
    let (tx, mut rx) = tokio::sync::mpsc::channel(16);
    for key in keys {
        let mut obs = LeaseObserver::spawn(Arc::clone(&lease_store), bell.clone(), key, options);
        let tx = tx.clone();
        tokio::spawn(async move {
            while let Some(o) = obs.next().await {
                if tx.send((obs.key().clone(), o)).await.is_err() {
                    return;
                }
            }
        });
    }
    drop(tx);
    let mut last: BTreeMap<LeaseKey, Option<LeaseRecord>> = BTreeMap::new();
    let mut done = 0u64;
    while let Some((key, o)) = rx.recv().await {
        let line = observation_line(&key, last.get(&key).and_then(Option::as_ref), &o);
        if let Observation::State(s) = o {
            last.insert(key, s);
        }
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
        done += 1;
        if count.is_some_and(|c| done >= c) {
            break;
        }
    }
    if let Some(bell) = bell {
        bell.stop();
    }
    Ok(())
}

/// One line for an observation of `key`, given the state before it.
fn observation_line(key: &LeaseKey, before: Option<&LeaseRecord>, o: &Observation) -> String {
    let r = match o {
        Observation::State(Some(r)) => r,
        Observation::State(None) => return format!("{:<10} {key}  no row", "absent"),
        Observation::Unreachable(e) => return format!("{:<10} {key}  {e}", "unreachable"),
        _ => return format!("{:<10} {key}  {o:?}", "unknown"),
    };
    let what = match before {
        _ if !r.held => "ended",
        Some(b) if b.held && b.holder == r.holder && b.token == r.token => "renewed",
        Some(b) if b.held => "taken over",
        _ => "held",
    };
    format!(
        "{}  {what:<10} {key}  holder {}  token {}  left {}",
        r.db_now,
        r.holder,
        r.token,
        human(r.time_left())
    )
}
