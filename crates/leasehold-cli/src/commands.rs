//! The subcommands' work. Each returns the process exit code.

use leasehold_core::{Clock, MonotonicClock};
use leasehold_storage::{
    AcquireOutcome, FencingToken, HolderId, LeaseKey, LeaseRecord, LeaseStore, Namespace,
    ReleaseOutcome, SeaOrmStore, StoreBuilder, StoreError, Term, ValidationError, testing,
};

use crate::duration::human;
use crate::{Cli, Command};

/// Exit code: a database error.
const DB_ERROR: u8 = 1;
/// Exit code: bad arguments.
const BAD_ARGS: u8 = 2;
/// Exit code: refused (held by another, not ours).
const REFUSED: u8 = 3;
/// Exit code: `check` found the clock rates too far apart for the margin and term, or could not
/// show they are not.
const CLOCK_RATE: u8 = 5;

enum Failure {
    Args(String),
    Store(StoreError),
}

impl From<ValidationError> for Failure {
    fn from(e: ValidationError) -> Self {
        Self::Args(e.to_string())
    }
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Invalid(v) => Self::Args(v.to_string()),
            StoreError::UnsupportedUrl { .. } => Self::Args(e.to_string()),
            other => Self::Store(other),
        }
    }
}

/// Runs the command and returns the exit code.
pub async fn run(cli: Cli) -> u8 {
    match dispatch(cli).await {
        Ok(code) => code,
        Err(Failure::Args(msg)) => {
            eprintln!("leasehold: {msg}");
            BAD_ARGS
        }
        Err(Failure::Store(e)) => {
            eprintln!("leasehold: {e}");
            DB_ERROR
        }
    }
}

async fn open(cli: &Cli, migrate: bool) -> Result<SeaOrmStore, Failure> {
    Ok(StoreBuilder::new(cli.db.clone())
        .table_prefix(cli.table_prefix.clone())
        .migrate(migrate)
        .connect()
        .await?)
}

async fn dispatch(cli: Cli) -> Result<u8, Failure> {
    match &cli.command {
        Command::Migrate => {
            let store = open(&cli, true).await?;
            store.migrate_all().await?;
            println!("table {} is ready", store.table());
            Ok(0)
        }
        Command::Ls {
            namespace,
            prefix,
            json,
        } => {
            let ns = namespace.as_deref().map(Namespace::new).transpose()?;
            let store = open(&cli, false).await?;
            let rows = store.list_valid(ns.as_ref(), prefix).await?;
            if *json {
                print_json(&rows)
            } else {
                print_table(&rows)
            }
            Ok(0)
        }
        Command::Lock {
            namespace,
            name,
            holder,
            ttl,
        } => {
            let key = LeaseKey::parse(namespace, name)?;
            let holder = HolderId::new(holder.as_str())?;
            let ttl = Term::new("ttl", *ttl)?;
            let store = open(&cli, true).await?;
            match store.try_acquire(&key, &holder, ttl).await? {
                AcquireOutcome::Acquired { token, until } => {
                    println!("{token}");
                    eprintln!("granted {key} to {holder} until {until} (token {token})");
                    Ok(0)
                }
                AcquireOutcome::HeldBy {
                    holder,
                    until,
                    token,
                } => {
                    let now = store.db_now().await?;
                    println!(
                        "held by {holder} (token {token}) for {} more, until {until}",
                        human(until.saturating_since(now))
                    );
                    Ok(REFUSED)
                }
            }
        }
        Command::Unlock {
            namespace,
            name,
            holder,
            token,
        } => {
            let key = LeaseKey::parse(namespace, name)?;
            let holder = HolderId::new(holder.as_str())?;
            let store = open(&cli, false).await?;
            match store.release(&key, &holder, FencingToken(*token)).await? {
                ReleaseOutcome::Released => {
                    println!("released {key}");
                    Ok(0)
                }
                ReleaseOutcome::NotHeld => {
                    match store.get(&key).await? {
                        Some(r) if r.held => println!(
                            "not ours: {key} is held by {} with token {}",
                            r.holder, r.token
                        ),
                        Some(r) => println!(
                            "not ours: {key} is not held (last tenure {} by {} ended)",
                            r.token, r.holder
                        ),
                        None => println!("not ours: {key} does not exist"),
                    }
                    Ok(REFUSED)
                }
            }
        }
        Command::Release {
            force,
            namespace,
            name,
        } => {
            if !force {
                return Err(Failure::Args(
                    "release needs --force: it takes the lease from whoever holds it".into(),
                ));
            }
            let key = LeaseKey::parse(namespace, name)?;
            let store = open(&cli, false).await?;
            if store.force_release(&key).await? {
                println!("released {key}");
                Ok(0)
            } else {
                println!("{key} was not held");
                Ok(REFUSED)
            }
        }
        Command::Purge {
            older_than,
            namespace,
        } => {
            let ns = namespace.as_deref().map(Namespace::new).transpose()?;
            Term::new("older_than", *older_than)?;
            let store = open(&cli, false).await?;
            let n = store.purge(ns.as_ref(), *older_than).await?;
            println!("purged {n} rows");
            Ok(0)
        }
        Command::Check {
            term,
            safety_margin,
            clock_window,
            clock_samples,
            clock_only,
        } => {
            let mut config = leasehold_core::LeaseConfig::default().with_term(*term);
            if let Some(margin) = safety_margin {
                config = config.with_safety_margin(*margin);
            }
            let clock = leasehold_core::clock_rate::ClockRateOptions::new()
                .window(*clock_window)
                .samples(*clock_samples);
            check(&cli, &config, &clock, *clock_only).await
        }
        Command::Watch {
            namespace,
            names,
            prefix,
            interval,
            count,
        } => {
            let ns = namespace.as_deref().map(Namespace::new).transpose()?;
            Term::new("interval", *interval)?;
            if !names.is_empty() {
                let ns = namespace.as_deref().unwrap_or("");
                let keys = names
                    .iter()
                    .map(|n| LeaseKey::parse(ns, n))
                    .collect::<Result<Vec<_>, _>>()?;
                let store = open(&cli, false).await?;
                crate::watch::observe(&store, keys, *interval, *count).await?;
                return Ok(0);
            }
            let store = open(&cli, false).await?;
            crate::watch::watch(&store, ns.as_ref(), prefix, *interval, *count).await?;
            Ok(0)
        }
    }
}

/// The value as a table cell: control characters escaped, at most 60 characters, `-` for none.
fn value_cell(value: Option<&leasehold_core::LeaseValue>) -> String {
    const MAX: usize = 60;
    let Some(v) = value else {
        return "-".to_owned();
    };
    let shown: String = v.as_str().escape_debug().collect();
    if shown.chars().count() > MAX {
        let mut cut: String = shown.chars().take(MAX - 1).collect();
        cut.push('…');
        cut
    } else {
        shown
    }
}

fn print_table(rows: &[LeaseRecord]) {
    let header = ["NAMESPACE", "NAME", "HOLDER", "TOKEN", "TIME LEFT", "VALUE"];
    let cells: Vec<[String; 6]> = rows
        .iter()
        .map(|r| {
            [
                r.key.namespace.to_string(),
                r.key.name.to_string(),
                r.holder.to_string(),
                r.token.to_string(),
                human(r.time_left()),
                value_cell(r.value.as_ref()),
            ]
        })
        .collect();
    let mut width = header.map(|h| h.chars().count());
    for row in &cells {
        for (w, c) in width.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cols: [&str; 6]| {
        let mut s = String::new();
        for (i, (c, w)) in cols.iter().zip(width).enumerate() {
            if i == 3 || i == 4 {
                s.push_str(&format!("{c:>w$}  "));
            } else {
                s.push_str(&format!("{c:<w$}  "));
            }
        }
        println!("{}", s.trim_end());
    };
    line(header);
    for row in &cells {
        line([&row[0], &row[1], &row[2], &row[3], &row[4], &row[5]]);
    }
    println!("{} held", rows.len());
}

fn print_json(rows: &[LeaseRecord]) {
    let list: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| {
            serde_json::json!({
                "namespace": r.key.namespace.as_str(),
                "name": r.key.name.as_str(),
                "holder": r.holder.as_str(),
                "token": r.token.get(),
                "until_ms": r.until.as_millis(),
                "until": r.until.to_string(),
                "time_left_ms": u64::try_from(r.time_left().as_millis()).unwrap_or(u64::MAX),
                "value": r.value.as_ref().map(leasehold_core::LeaseValue::as_str),
            })
        })
        .collect();
    println!("{}", serde_json::Value::Array(list));
}

#[allow(clippy::disallowed_methods)] // reporting the offset is the point: the app clock never decides
fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

async fn check(
    cli: &Cli,
    config: &leasehold_core::LeaseConfig,
    clock_options: &leasehold_core::clock_rate::ClockRateOptions,
    clock_only: bool,
) -> Result<u8, Failure> {
    config.validate()?;
    clock_options.validate()?;
    let store = open(cli, true).await?;
    println!("database: {:?}, table {}", store.backend(), store.table());
    let clock = MonotonicClock;
    let mut rtts = Vec::new();
    let mut offset = 0;
    for _ in 0..20 {
        let before_wall = wall_clock_ms();
        let t0 = clock.now();
        let db = store.db_now().await?;
        let rtt = clock.now() - t0;
        rtts.push(rtt);
        offset = db.as_millis() - (before_wall + i64::try_from(rtt.as_millis() / 2).unwrap_or(0));
    }
    rtts.sort();
    println!(
        "clock: database minus this host = {offset} ms (only informative: leasehold never compares them); round trip median {:?}, max {:?}",
        rtts[rtts.len() / 2],
        rtts[rtts.len() - 1]
    );
    let rate = leasehold_storage::measure_clock_rate(&store, &clock, config, clock_options).await?;
    println!(
        "clock rate (term {:?}, safety margin {:?}): {rate}",
        config.term(),
        config.safety_margin()
    );
    if !clock_only {
        let report = testing::run(store, "leasehold-check").await;
        println!("{report}");
        if report.failed() != 0 {
            return Ok(DB_ERROR);
        }
    }
    if !rate.verdict.is_within() {
        eprintln!(
            "leasehold: the clock rates of this host and the database {}",
            rate.verdict
        );
        return Ok(CLOCK_RATE);
    }
    Ok(0)
}
