//! `leasehold watch`: a live view of the held leases.
//!
//! On a terminal it redraws a table every interval, highlighting rows whose holder or token
//! changed since the last frame. Elsewhere (a pipe, a log file) it prints one plain line per
//! change: a lease granted, taken over, or ended. With `--json`, every change is one JSON object
//! on a line of its own, on a terminal too.
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
use leasehold_storage::{
    DbInstant, LeaseKey, LeaseRecord, LeaseStore, Namespace, SeaOrmStore, StoreError,
};

use crate::duration::human;

/// What a row looked like in the previous frame.
type Frame = BTreeMap<(String, String), (String, i64)>;

const BOLD_YELLOW: &str = "\x1b[1;33m";
const RESET: &str = "\x1b[0m";

/// What `watch` without `--name` was asked.
pub(crate) struct View<'a> {
    /// Only this namespace.
    pub(crate) namespace: Option<&'a Namespace>,
    /// Only names starting with this.
    pub(crate) prefix: &'a str,
    /// Time between refreshes.
    pub(crate) interval: Duration,
    /// Refreshes before returning (forever when `None`).
    pub(crate) count: Option<u64>,
    /// One JSON object per change instead of text.
    pub(crate) json: bool,
}

/// What happened to a name.
#[derive(Clone, Copy)]
enum Event {
    Held,
    Renewed,
    TakenOver,
    Ended,
    Absent,
    Unreachable,
    Unknown,
}

impl Event {
    /// The word of a text line.
    fn text(self) -> &'static str {
        match self {
            Self::Held => "held",
            Self::Renewed => "renewed",
            Self::TakenOver => "taken over",
            Self::Ended => "ended",
            Self::Absent => "absent",
            Self::Unreachable => "unreachable",
            Self::Unknown => "unknown",
        }
    }

    /// The `event` field of a JSON line.
    fn json(self) -> &'static str {
        match self {
            Self::TakenOver => "taken_over",
            other => other.text(),
        }
    }
}

/// One change a watch reports: the name, what happened, and what is known of the tenure.
struct Change {
    event: Event,
    namespace: String,
    name: String,
    /// The database's clock at the read.
    at: Option<DbInstant>,
    /// The holder and token of the tenure concerned.
    tenure: Option<(String, i64)>,
    /// When that tenure ends (or ended).
    until: Option<DbInstant>,
    /// Time left on it at the read.
    left: Option<Duration>,
    /// Why the read failed, or what an observation not known to this command was.
    detail: Option<String>,
}

impl Change {
    fn of(event: Event, key: &LeaseKey) -> Self {
        Self {
            event,
            namespace: key.namespace.to_string(),
            name: key.name.to_string(),
            at: None,
            tenure: None,
            until: None,
            left: None,
            detail: None,
        }
    }

    /// A change concerning the tenure of row `r`, read at `r.db_now`.
    fn row(event: Event, r: &LeaseRecord) -> Self {
        Self {
            at: Some(r.db_now),
            tenure: Some((r.holder.to_string(), r.token.get())),
            until: Some(r.until),
            left: Some(r.time_left()),
            ..Self::of(event, &r.key)
        }
    }

    /// The line printed: text, or one JSON object.
    fn line(&self, json: bool) -> String {
        if json {
            return self.json().to_string();
        }
        let key = if self.namespace.is_empty() {
            self.name.clone()
        } else {
            format!("{}/{}", self.namespace, self.name)
        };
        let mut s = match self.at {
            Some(at) => format!("{at}  {:<10} {key}", self.event.text()),
            None => format!("{:<10} {key}", self.event.text()),
        };
        if let Some((holder, token)) = &self.tenure {
            s.push_str(&format!("  holder {holder}  token {token}"));
        }
        if let Some(left) = self.left {
            s.push_str(&format!("  left {}", human(left)));
        }
        if matches!(self.event, Event::Absent) {
            s.push_str("  no row");
        }
        if let Some(detail) = &self.detail {
            s.push_str(&format!("  {detail}"));
        }
        s
    }

    fn json(&self) -> serde_json::Value {
        let mut v = serde_json::json!({
            "event": self.event.json(),
            "namespace": self.namespace,
            "name": self.name,
        });
        if let Some(at) = self.at {
            v["db_now_ms"] = at.as_millis().into();
            v["db_now"] = at.to_string().into();
        }
        if let Some((holder, token)) = &self.tenure {
            v["holder"] = holder.as_str().into();
            v["token"] = (*token).into();
        }
        if let Some(until) = self.until {
            v["until_ms"] = until.as_millis().into();
        }
        if let Some(left) = self.left {
            v["time_left_ms"] = u64::try_from(left.as_millis()).unwrap_or(u64::MAX).into();
        }
        if let Some(detail) = &self.detail {
            v["error"] = detail.as_str().into();
        }
        v
    }
}

/// Watches until `view.count` refreshes are done (forever when `None`).
pub(crate) async fn watch(store: &SeaOrmStore, view: &View<'_>) -> Result<(), StoreError> {
    let table_view = std::io::stdout().is_terminal() && !view.json;
    let mut previous: Option<Frame> = None;
    let mut done = 0u64;
    loop {
        let rows = store.list_valid(view.namespace, view.prefix).await?;
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
        if table_view {
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
            for change in changes(previous.as_ref(), &frame, &rows, now) {
                let _ = writeln!(out, "{}", change.line(view.json));
            }
        }
        let _ = out.flush();
        drop(out);
        previous = Some(frame);
        done += 1;
        if view.count.is_some_and(|c| done >= c) {
            return Ok(());
        }
        tokio::time::sleep(view.interval).await;
    }
}

/// What changed between two frames, read at `now`.
fn changes(
    previous: Option<&Frame>,
    frame: &Frame,
    rows: &[LeaseRecord],
    now: DbInstant,
) -> Vec<Change> {
    let mut out = Vec::new();
    let empty = Frame::new();
    let before = previous.unwrap_or(&empty);
    for r in rows {
        let k = (r.key.namespace.to_string(), r.key.name.to_string());
        let event = match before.get(&k) {
            None => Event::Held,
            Some((h, t)) if *h != r.holder.as_str() || *t != r.token.get() => Event::TakenOver,
            Some(_) => continue,
        };
        out.push(Change {
            at: Some(now),
            ..Change::row(event, r)
        });
    }
    for ((namespace, name), (holder, token)) in before {
        if !frame.contains_key(&(namespace.clone(), name.clone())) {
            out.push(Change {
                event: Event::Ended,
                namespace: namespace.clone(),
                name: name.clone(),
                at: Some(now),
                tenure: Some((holder.clone(), *token)),
                until: None,
                left: None,
                detail: None,
            });
        }
    }
    out
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

/// Observes `keys` and prints one line per observation (text, or a JSON object), until `count`
/// lines are printed (forever when `None`). Each name's observer yields its current state first.
pub(crate) async fn observe(
    store: &SeaOrmStore,
    keys: Vec<LeaseKey>,
    interval: Duration,
    count: Option<u64>,
    json: bool,
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
        let change = observation(&key, last.get(&key).and_then(Option::as_ref), &o);
        if let Observation::State(s) = o {
            last.insert(key, s);
        }
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{}", change.line(json));
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

/// The change an observation of `key` shows, given the state before it.
fn observation(key: &LeaseKey, before: Option<&LeaseRecord>, o: &Observation) -> Change {
    let r = match o {
        Observation::State(Some(r)) => r,
        Observation::State(None) => return Change::of(Event::Absent, key),
        Observation::Unreachable(e) => {
            return Change {
                detail: Some(e.clone()),
                ..Change::of(Event::Unreachable, key)
            };
        }
        _ => {
            return Change {
                detail: Some(format!("{o:?}")),
                ..Change::of(Event::Unknown, key)
            };
        }
    };
    let event = match before {
        _ if !r.held => Event::Ended,
        Some(b) if b.held && b.holder == r.holder && b.token == r.token => Event::Renewed,
        Some(b) if b.held => Event::TakenOver,
        _ => Event::Held,
    };
    Change::row(event, r)
}
