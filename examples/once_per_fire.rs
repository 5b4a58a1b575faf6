//! Once-per-fire scheduled jobs: a report due every 2 seconds by the database's clock, asked for
//! by three workers whose tickers disagree by more than a second, runs once per fire
//! (`Jobs::run_once`).
//!
//! Three workers (three `LeaseService`s with their own holder ids, as three processes would be)
//! tick at their own idea of each fire: node-a 700 ms early, node-b on time, node-c 900 ms late.
//! Each asks at its tick, and again at the instant a refusal names. The report is written to a
//! second database through a fence ([`Fence::admit`] with the run's fencing token), one row per
//! fire. Then node-a takes a fire and crashes part-way: its run's row lapses after the term, and
//! node-b runs the same fire again with a larger token.
//!
//! ```sh
//! cargo run -p leasehold --example once_per_fire                       # SQLite in a temp dir
//! cargo run -p leasehold --example once_per_fire -- --db postgres://postgres@127.0.0.1/test
//! ```

use std::time::Duration;

use leasehold::clock::{Clock, MonotonicClock};
use leasehold::jobs::{FireContext, FireOutcome, Schedule};
use leasehold::store::Fence;
use leasehold::store::sea_orm::{
    ConnectionTrait, Database, DatabaseConnection, DbBackend, Statement, TransactionTrait,
};
use leasehold::{DbInstant, LeaseService};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const JOB: &str = "report";
const PERIOD: Duration = Duration::from_secs(2);
const TERM: Duration = Duration::from_secs(1);

/// Sleeps until `service`'s database clock reads `at`.
async fn sleep_until_db(service: &LeaseService, at: DbInstant) -> Result<(), BoxError> {
    let now = service.db_now().await?;
    tokio::time::sleep_until(MonotonicClock.now() + at.saturating_since(now)).await;
    Ok(())
}

/// The job: one report row per fire, admitted by the run's fencing token in the same
/// transaction, so a run that lost its tenure to a newer one cannot write after it.
async fn report(
    reports: DatabaseConnection,
    worker: String,
    fire: FireContext,
) -> Result<(), BoxError> {
    let txn = reports.begin().await?;
    if !Fence::new(reports.clone())
        .admit(&txn, "reports", fire.token())
        .await?
        .is_admitted()
    {
        txn.rollback().await?;
        return Err("a newer run has written: this one is stale".into());
    }
    txn.execute_raw(Statement::from_sql_and_values(
        DbBackend::Sqlite,
        "INSERT INTO reports (fire, worker, token) VALUES (?, ?, ?)",
        [
            fire.fire().as_millis().into(),
            worker.clone().into(),
            fire.token().get().into(),
        ],
    ))
    .await?;
    txn.commit().await?;
    println!(
        "{worker}: ran the report of {} (token {})",
        fire.fire(),
        fire.token()
    );
    Ok(())
}

/// One worker's ticker: asks at its own idea of each fire (`skew_ms` off the database's), or
/// at the instant a refusal names, for `fires` fires from `first`.
async fn ticker(
    worker: LeaseService,
    reports: DatabaseConnection,
    schedule: Schedule,
    first: DbInstant,
    fires: i64,
    skew_ms: i64,
) -> Result<(), BoxError> {
    let name = worker.holder().to_string();
    let period = i64::try_from(PERIOD.as_millis())?;
    let end = DbInstant(first.as_millis() + fires * period);
    let mut tick = DbInstant(first.as_millis() + skew_ms);
    let mut again = None;
    loop {
        let at = match again {
            Some(a) if a < tick => a,
            _ => tick,
        };
        if at >= end {
            return Ok(());
        }
        sleep_until_db(&worker, at).await?;
        let (r, n) = (reports.clone(), name.clone());
        let outcome = worker
            .jobs()
            .run_once(JOB, &schedule, |fire| report(r, n, fire))
            .await?;
        again = match outcome {
            FireOutcome::Claimed { holder, until, .. } => {
                println!("{name}: the due fire is claimed by {holder} until {until}");
                Some(until)
            }
            FireOutcome::Failed { error, .. } => return Err(error),
            _ => None,
        };
        if at >= tick {
            tick = DbInstant(tick.as_millis() + period);
        }
    }
}

fn db_arg() -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == "--db")
        .and_then(|i| args.get(i + 1).cloned())
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let dir = std::env::temp_dir().join(format!("leasehold-once-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let url = db_arg()
        .unwrap_or_else(|| format!("sqlite://{}?mode=rwc", dir.join("leases.db").display()));
    // This run's own namespace, so that a shared lease database starts it afresh.
    let namespace = format!("reports-{}", std::process::id());
    let mut workers = Vec::new();
    for id in ["node-a", "node-b", "node-c"] {
        let service = LeaseService::builder(&url)
            .holder_id(id)
            .namespace(&namespace)
            .build()
            .await?;
        workers.push(service);
    }
    let reports_url = format!("sqlite://{}?mode=rwc", dir.join("reports.db").display());
    let reports = Database::connect(&reports_url).await?;
    reports
        .execute_unprepared(
            "CREATE TABLE IF NOT EXISTS reports (fire BIGINT NOT NULL, worker TEXT NOT NULL, token BIGINT NOT NULL)",
        )
        .await?;
    Fence::new(reports.clone()).create_table().await?;

    let schedule = Schedule::every(PERIOD)?.term(TERM);
    let first = schedule.next_fire(workers[0].db_now().await?);
    let fires = 3;
    let mut tickers = Vec::new();
    for (worker, skew) in workers.iter().zip([-700, 0, 900]) {
        let run = ticker(
            worker.clone(),
            reports.clone(),
            schedule,
            first,
            fires,
            skew,
        );
        tickers.push(tokio::spawn(run));
    }
    for t in tickers {
        t.await??;
    }
    let rows = reports
        .query_all_raw(Statement::from_string(
            DbBackend::Sqlite,
            format!(
                "SELECT fire, COUNT(*) AS runs FROM reports WHERE fire >= {} GROUP BY fire",
                first.as_millis()
            ),
        ))
        .await?;
    let counts = rows
        .iter()
        .map(|r| r.try_get::<i64>("", "runs"))
        .collect::<Result<Vec<_>, _>>()?;
    if counts.len() != usize::try_from(fires)? || counts.iter().any(|c| *c != 1) {
        return Err(format!("expected one run for each of {fires} fires, got {counts:?}").into());
    }
    println!("the report ran once per fire over {fires} fires");

    // node-a takes the next fire and crashes part-way: nothing is released, its row lapses.
    let (a, b) = (workers[0].clone(), workers[1].clone());
    let fire = schedule.next_fire(a.db_now().await?);
    // A little after the fire: the previous fire's record ends a few milliseconds after it.
    sleep_until_db(&a, DbInstant(fire.as_millis() + 100)).await?;
    let (started, crashed) = tokio::sync::oneshot::channel();
    let run = {
        let a = a.clone();
        tokio::spawn(async move {
            a.jobs()
                .run_once(JOB, &schedule, |ctx| async move {
                    let _ = started.send(ctx.token());
                    std::future::pending::<Result<(), BoxError>>().await
                })
                .await
        })
    };
    let crashed_token = crashed.await?;
    a.abort_without_release().await;
    run.abort();
    println!("node-a crashed while running the report of {fire} (token {crashed_token})");
    loop {
        let (r, n) = (reports.clone(), b.holder().to_string());
        match b
            .jobs()
            .run_once(JOB, &schedule, |fire| report(r, n, fire))
            .await?
        {
            FireOutcome::Ran {
                fire: again, token, ..
            } if again == fire && token > crashed_token => {
                println!("node-b ran the crashed fire again after the term, with token {token}");
                break;
            }
            FireOutcome::Claimed { .. } => tokio::time::sleep(Duration::from_millis(100)).await,
            other => return Err(format!("unexpected: {other:?}").into()),
        }
    }
    for worker in &workers[1..] {
        worker.shutdown().await?;
    }
    Ok(())
}
