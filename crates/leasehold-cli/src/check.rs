//! `leasehold check`: the conformance suite, the clock offset and round trip, and the clock-rate
//! verdict, all in a scratch table made for the run and dropped after it (also when the run is
//! interrupted). The suite grants and releases rows, releases every row of its holders and
//! purges, which raises the token floor of the table it runs in: in the real table its rows
//! would show as held in `ls` and `watch`, and the floor of every namespace would rise. The
//! real table is never opened, so it is not even created where it does not exist.

use leasehold_core::clock_rate::{ClockRateOptions, ClockRateReport, ClockRateVerdict};
use leasehold_core::{Clock, LeaseConfig, MonotonicClock};
use leasehold_storage::{LeaseStore, SeaOrmStore, StoreBuilder};
use leasehold_testkit::conformance::{self, Outcome, Report};

use crate::Cli;
use crate::exit::{CLOCK_RATE, DB_ERROR, Failure, wall_clock_ms};

/// Exit code of a run interrupted by Ctrl-C (128 + SIGINT), after the scratch table is dropped.
const INTERRUPTED: u8 = 130;

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
    let store = StoreBuilder::new(cli.db.clone())
        .table_prefix(scratch_prefix())
        .migrate(true)
        .connect()
        .await?;
    let outcome = tokio::select! {
        outcome = run(&store, args) => outcome,
        _ = tokio::signal::ctrl_c() => Ok(INTERRUPTED),
    };
    let dropped = store.drop_table().await;
    if let Err(e) = &dropped {
        eprintln!(
            "leasehold: could not drop the scratch table {}: {e}",
            store.table()
        );
    }
    let code = outcome?;
    if code == INTERRUPTED {
        eprintln!(
            "leasehold: check interrupted; scratch table {} dropped",
            store.table()
        );
    }
    Ok(if dropped.is_err() && code == 0 {
        DB_ERROR
    } else {
        code
    })
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

async fn run(store: &SeaOrmStore, args: &CheckArgs) -> Result<u8, Failure> {
    if !args.json {
        println!(
            "database: {:?}, scratch table {} (dropped after the run)",
            store.backend(),
            store.table()
        );
    }
    let offset = offset(store).await?;
    if !args.json {
        println!(
            "clock: database minus this host = {} ms (only informative: leasehold never compares them); round trip median {:?}, max {:?}",
            offset.offset_ms, offset.median, offset.max
        );
    }
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
        let report = conformance::run(store.clone(), "leasehold-check").await;
        if !args.json {
            println!("{report}");
        }
        Some(report)
    };
    let code = if report.as_ref().is_some_and(|r| r.failed() != 0) {
        DB_ERROR
    } else if !rate.verdict.is_within() {
        CLOCK_RATE
    } else {
        0
    };
    if args.json {
        println!("{}", json(store, &offset, &rate, report.as_ref(), code));
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
