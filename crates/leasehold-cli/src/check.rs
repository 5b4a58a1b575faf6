//! `leasehold check`: the conformance suite, the clock offset and round trip, and the clock-rate
//! verdict, all in a scratch table made for the run and dropped after it (also when the run is
//! interrupted). The suite grants and releases rows, releases every row of its holders and
//! purges, which raises the token floor of the table it runs in: in the real table its rows
//! would show as held in `ls` and `watch`, and the floor of every namespace would rise. The
//! real table is never opened, so it is not even created where it does not exist.
//!
//! Each step says on stderr what it is doing as it starts (the suite check by check), so a run
//! of half a minute is not silent and stdout carries only the results.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicUsize, Ordering};

use leasehold_conformance::{self as conformance, Outcome, Report};
use leasehold_core::clock_rate::{ClockRateOptions, ClockRateReport, ClockRateVerdict};
use leasehold_core::{Clock, LeaseConfig, MonotonicClock};
use leasehold_storage::{LeaseStore, SeaOrmStore, StoreBuilder};

use crate::Cli;
use crate::exit::{CLOCK_RATE, DB_ERROR, Failure, INTERRUPTED, NODE_CLOCKS, wall_clock_ms};

/// What `check` was asked for.
pub struct CheckArgs {
    /// The configuration the clock-rate verdict is for.
    pub config: LeaseConfig,
    /// How the database clock is sampled.
    pub clock: ClockRateOptions,
    /// Only the clock checks.
    pub clock_only: bool,
    /// One JSON object on stdout instead of text.
    pub json: bool,
}

/// The scratch table prefix of this run: unique per process and start time, so checks run at
/// once on several hosts never share one, and recognisable in a catalog (`lh_check_`).
fn scratch_prefix() -> String {
    format!(
        "lh_check_{}_{}_",
        std::process::id(),
        wall_clock_ms().rem_euclid(1_000_000_000)
    )
}

/// Runs the checks in a scratch table and drops it, whatever the checks did.
pub async fn check(cli: &Cli, args: &CheckArgs) -> Result<u8, Failure> {
    args.config.validate()?;
    args.clock.validate()?;
    let urls = node_urls(cli.db_url())?;
    let prefix = scratch_prefix();
    let mut stores = Vec::new();
    for url in &urls {
        match StoreBuilder::new(url.clone())
            .table_prefix(prefix.clone())
            .migrate(true)
            .connect()
            .await
        {
            Ok(s) => stores.push(s),
            Err(e) => {
                drop_scratch(&stores).await;
                return Err(e.into());
            }
        }
    }
    let outcome = tokio::select! {
        outcome = run(&stores, args) => outcome,
        _ = tokio::signal::ctrl_c() => Ok(INTERRUPTED),
    };
    let dropped = drop_scratch(&stores).await;
    let store = &stores[0];
    let code = outcome?;
    if code == INTERRUPTED {
        eprintln!(
            "leasehold: check interrupted; scratch table {} dropped",
            store.table()
        );
    }
    Ok(if !dropped && code == 0 {
        DB_ERROR
    } else {
        code
    })
}

/// The servers to check: one, or for a MySQL/MariaDB URL naming several (the nodes of a
/// Galera cluster, `mysql://user@h1:3306,h2:3306,h3:3306/db`) each node's URL. A store follows
/// one MySQL server only; the list is for `check`, which compares the nodes' clocks.
fn node_urls(url: &str) -> Result<Vec<String>, Failure> {
    let hosts = leasehold_storage::HostList::parse(url)?;
    let mysql = url.trim().to_ascii_lowercase().starts_with("mysql://");
    Ok(if mysql && hosts.several() {
        hosts.urls().to_vec()
    } else {
        vec![url.to_owned()]
    })
}

/// Drops the scratch table through every store (`IF EXISTS`: on a cluster the first drop
/// replicates); whether every drop succeeded.
async fn drop_scratch(stores: &[SeaOrmStore]) -> bool {
    let mut all = true;
    for store in stores {
        if let Err(e) = store.drop_table().await {
            eprintln!(
                "leasehold: could not drop the scratch table {}: {e}",
                store.table()
            );
            all = false;
        }
    }
    all
}

/// Node `other`'s clock minus node `first`'s, from the pair of readings with the smallest
/// uncertainty out of 20: each reading is placed at the middle of its round trip on this host's
/// monotonic clock, so the uncertainty is half of both round trips plus a millisecond for the
/// readings' resolution.
struct NodeOffset {
    offset_ms: f64,
    uncertainty_ms: f64,
}

async fn node_offset(first: &SeaOrmStore, other: &SeaOrmStore) -> Result<NodeOffset, Failure> {
    let clock = MonotonicClock;
    let mut best: Option<NodeOffset> = None;
    for _ in 0..20 {
        let t0 = clock.now();
        let a = first.db_now().await?;
        let t1 = clock.now();
        let b = other.db_now().await?;
        let t2 = clock.now();
        let between = ((t2 - t1) + (t1 - t0)).as_secs_f64() * 1000.0 / 2.0;
        #[allow(clippy::cast_precision_loss)] // milliseconds since the epoch fit an f64 exactly
        let offset_ms = (b.as_millis() - a.as_millis()) as f64 - between;
        let uncertainty_ms = between + 1.0;
        if best
            .as_ref()
            .is_none_or(|b| uncertainty_ms < b.uncertainty_ms)
        {
            best = Some(NodeOffset {
                offset_ms,
                uncertainty_ms,
            });
        }
    }
    best.ok_or_else(|| Failure::Args("no clock readings".into()))
}

/// The round trips and the offset of the database clock from this host's wall clock.
struct Offset {
    offset_ms: i64,
    median: std::time::Duration,
    max: std::time::Duration,
}

async fn offset(store: &SeaOrmStore) -> Result<Offset, Failure> {
    let clock = MonotonicClock;
    let mut rtts = Vec::new();
    let mut offset_ms = 0;
    for _ in 0..20 {
        let before_wall = wall_clock_ms();
        let t0 = clock.now();
        let db = store.db_now().await?;
        let rtt = clock.now() - t0;
        rtts.push(rtt);
        offset_ms =
            db.as_millis() - (before_wall + i64::try_from(rtt.as_millis() / 2).unwrap_or(0));
    }
    rtts.sort();
    Ok(Offset {
        offset_ms,
        median: rtts[rtts.len() / 2],
        max: rtts[rtts.len() - 1],
    })
}

/// Says on stderr which step starts, one line each.
fn step(what: &str) {
    eprintln!("leasehold check: {what}");
}

/// Runs the conformance suite, saying each check on stderr as it starts: a line each, or on a
/// terminal one line ticking through them, erased when the suite ends (nothing else prints
/// meanwhile).
async fn suite(store: &SeaOrmStore) -> Report {
    let subject = conformance::Subject::sql(store.clone());
    let total = conformance::check_count(&subject);
    let tty = std::io::stderr().is_terminal();
    step(&format!("the conformance suite, {total} checks"));
    let started = AtomicUsize::new(0);
    // The suite asks the filter about each check just before running it.
    let report = conformance::run_matching(subject, "leasehold-check", |name| {
        let n = started.fetch_add(1, Ordering::Relaxed) + 1;
        if tty {
            eprint!("\r\x1b[K[{n}/{total}] {name}");
        } else {
            step(&format!("[{n}/{total}] {name}"));
        }
        true
    })
    .await;
    if tty {
        eprint!("\r\x1b[K");
    }
    report
}

async fn run(stores: &[SeaOrmStore], args: &CheckArgs) -> Result<u8, Failure> {
    let store = &stores[0];
    if !args.json {
        println!(
            "database: {:?}, scratch table {} (dropped after the run)",
            store.backend(),
            store.table()
        );
    }
    step("reading the database clock's offset and round trip (20 reads)");
    let offset = offset(store).await?;
    if !args.json {
        println!(
            "clock: database minus this host = {} ms (only informative: leasehold never compares them); round trip median {:?}, max {:?}",
            offset.offset_ms, offset.median, offset.max
        );
    }
    step(&format!(
        "sampling the database clock's rate over {:?}",
        args.clock.window_len()
    ));
    let rate =
        leasehold_storage::measure_clock_rate(store, &MonotonicClock, &args.config, &args.clock)
            .await?;
    if !args.json {
        println!(
            "clock rate (term {:?}, safety margin {:?}): {rate}",
            args.config.term(),
            args.config.safety_margin()
        );
    }
    let report = if args.clock_only {
        None
    } else {
        let report = suite(store).await;
        if !args.json {
            println!("{report}");
        }
        Some(report)
    };
    // Each node judges expiry by its own clock: a node ahead of the one that granted sees a
    // lease end early, so two nodes' clocks must agree within the safety margin.
    let margin_ms = args.config.safety_margin().as_secs_f64() * 1000.0;
    let mut nodes = Vec::new();
    for (i, other) in stores.iter().enumerate().skip(1) {
        step(&format!("comparing node {}'s clock with node 1's", i + 1));
        let o = node_offset(store, other).await?;
        let within = o.offset_ms.abs() + o.uncertainty_ms < margin_ms;
        if !args.json {
            println!(
                "node {} clock minus node 1: {:+.1} ms ± {:.1} ms: {} the safety margin ({:?})",
                i + 1,
                o.offset_ms,
                o.uncertainty_ms,
                if within { "within" } else { "NOT shown within" },
                args.config.safety_margin()
            );
        }
        nodes.push((i + 1, o, within));
    }
    let nodes_within = nodes.iter().all(|(_, _, within)| *within);
    let code = if report.as_ref().is_some_and(|r| r.failed() != 0) {
        DB_ERROR
    } else if !nodes_within {
        NODE_CLOCKS
    } else if !rate.verdict.is_within() {
        CLOCK_RATE
    } else {
        0
    };
    if args.json {
        let mut v = json(store, &offset, &rate, report.as_ref(), code);
        v["nodes"] = nodes
            .iter()
            .map(|(n, o, within)| {
                serde_json::json!({
                    "node": n,
                    "offset_ms": o.offset_ms,
                    "uncertainty_ms": o.uncertainty_ms,
                    "within": within,
                })
            })
            .collect();
        println!("{v}");
    }
    if !nodes_within {
        eprintln!(
            "leasehold: the nodes' clocks are not shown to agree within the safety margin ({:?})",
            args.config.safety_margin()
        );
    }
    if !rate.verdict.is_within() {
        eprintln!(
            "leasehold: the clock rates of this host and the database {}",
            rate.verdict
        );
    }
    Ok(code)
}

fn json(
    store: &SeaOrmStore,
    offset: &Offset,
    rate: &ClockRateReport,
    report: Option<&Report>,
    code: u8,
) -> serde_json::Value {
    let (verdict, allowed) = match rate.verdict {
        ClockRateVerdict::Within { allowed } => ("within", Some(allowed)),
        ClockRateVerdict::TooLarge { allowed } => ("too_large", Some(allowed)),
        ClockRateVerdict::Inconclusive { allowed } => ("inconclusive", Some(allowed)),
        _ => ("unknown", None),
    };
    let checks = report.map(|r| {
        r.results
            .iter()
            .map(|c| {
                let (outcome, detail) = match &c.outcome {
                    Outcome::Passed => ("passed", None),
                    Outcome::Skipped(why) => ("skipped", Some(why.as_str())),
                    Outcome::Failed(e) => ("failed", Some(e.as_str())),
                    _ => ("unknown", None),
                };
                serde_json::json!({
                    "name": c.name,
                    "outcome": outcome,
                    "detail": detail,
                    "elapsed_ms": u64::try_from(c.elapsed.as_millis()).unwrap_or(u64::MAX),
                })
            })
            .collect::<Vec<_>>()
    });
    serde_json::json!({
        "backend": format!("{:?}", store.backend()),
        "scratch_table": store.table(),
        "offset_ms": offset.offset_ms,
        "round_trip_median_us": u64::try_from(offset.median.as_micros()).unwrap_or(u64::MAX),
        "round_trip_max_us": u64::try_from(offset.max.as_micros()).unwrap_or(u64::MAX),
        "clock_rate": {
            "difference": rate.fit.difference,
            "uncertainty": rate.fit.uncertainty,
            "samples": rate.fit.samples,
            "allowed": allowed,
            "verdict": verdict,
            "text": rate.to_string(),
        },
        "checks": checks,
        "passed": report.map(Report::passed),
        "skipped": report.map(Report::skipped),
        "failed": report.map(Report::failed),
        "exit_code": code,
    })
}
