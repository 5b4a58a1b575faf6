//! `leasehold watch`: a live view of the held leases.
//!
//! On a terminal it redraws a table every interval, highlighting rows whose holder or token
//! changed since the last frame. Elsewhere (a pipe, a log file) it prints one plain line per
//! change: a lease granted, taken over, or ended.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::time::Duration;

use leasehold_storage::{LeaseRecord, LeaseStore, Namespace, SeaOrmStore, StoreError};

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
            let _ = write!(out, "{}", table(&rows, previous.as_ref()));
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

/// The terminal table, changed rows highlighted.
fn table(rows: &[LeaseRecord], previous: Option<&Frame>) -> String {
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
        if changed {
            s.push_str(&format!("{BOLD_YELLOW}{line}{RESET}\n"));
        } else {
            s.push_str(&line);
            s.push('\n');
        }
    }
    s
}
