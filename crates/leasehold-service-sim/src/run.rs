//! One run: the world, the programs, the oracle, the wind-down, the report.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use leasehold::{LeaseConfig, Namespace};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use crate::SimReport;
use crate::beliefs::Beliefs;
use crate::fault::FaultPlan;
use crate::journal::Journal;
use crate::oracle::{Oracle, panics};
use crate::program::{Ctx, Program};
use crate::spec::{Backend, SimSpec};
use crate::stall::{StallCounts, run_stalls};
use crate::world::{SimError, World};

/// The lease term of a run: `spec.term`, or drawn from the seed in 300–600 ms.
fn term_of(spec: &SimSpec) -> Duration {
    spec.term.unwrap_or_else(|| {
        let mut rng = StdRng::seed_from_u64(spec.seed);
        Duration::from_millis(rng.random_range(300..=600))
    })
}

/// Runs `spec` in real time (each service has its own engine thread) and reports what the
/// oracle found. Prints the seed and a summary line to stderr.
///
/// The programs run on a [`tokio::task::LocalSet`] (today's `LeaseService::hold_lock` future
/// is not `Send`), so await this future directly in the test's runtime (`block_on`, a
/// `#[tokio::test]` body), not inside `tokio::spawn`.
///
/// # Errors
/// [`SimError`] when the backend cannot be opened.
pub async fn run(spec: SimSpec) -> Result<SimReport, SimError> {
    tokio::task::LocalSet::new()
        .run_until(run_local(spec))
        .await
}

async fn run_local(spec: SimSpec) -> Result<SimReport, SimError> {
    let mark = panics::mark();
    let term = term_of(&spec);
    let config = LeaseConfig::default()
        .with_term(term)
        .with_request_timeout(spec.request_timeout);
    eprintln!(
        "service-sim: seed {} on {} ({} services, term {term:?}, {:?}) — replay with LEASEHOLD_SIM_SEED={}",
        spec.seed,
        spec.backend.name(),
        spec.services,
        spec.duration,
        spec.seed
    );
    let world = World::open(spec.clone(), config).await?;
    let clock = world.clock.clone();
    let beliefs = Arc::new(Beliefs::default());
    let journal = Arc::new(Journal::new(clock.clone(), spec.services));
    let oracle = Arc::new(Oracle::new(
        spec.seed,
        Arc::clone(&beliefs),
        Arc::clone(&world.log),
        clock.clone(),
        Arc::clone(&journal),
    ));
    let keys: Vec<String> = (0..4).map(|i| format!("k{i}")).collect();
    let mut shard_names: Vec<String> = (0..4).map(|i| format!("s{i}")).collect();
    // One name is both a sharded name and a lease task / lock name.
    shard_names.push("k3".to_owned());
    let plan = spec.faults.clone().unwrap_or_else(|| {
        if spec.backend.is_sql() {
            FaultPlan::standard_sql(spec.request_timeout)
        } else {
            FaultPlan::standard(spec.request_timeout)
        }
    });
    let ctx = Arc::new(Ctx {
        world,
        beliefs,
        oracle: Arc::clone(&oracle),
        journal,
        clock: clock.clone(),
        plan,
        keys,
        shard_names,
        dice: Mutex::new(Vec::new()),
    });

    let stop = Arc::new(AtomicBool::new(false));
    let sampler = oracle
        .spawn_sampler(spec.sample_period, Arc::clone(&stop))
        .map_err(SimError::Io)?;
    let rows = tokio::spawn(check_rows(Arc::clone(&ctx), Arc::clone(&stop)));
    let until = clock.instant() + spec.duration;
    let stalls = match (&spec.backend, &ctx.world.sql) {
        (Backend::Postgres(_) | Backend::Mysql(_), Some(sql)) => Some(tokio::spawn(run_stalls(
            sql.clone(),
            ctx.world.namespace.clone(),
            ctx.keys.iter().chain(&ctx.shard_names).cloned().collect(),
            spec.seed,
            clock.clone(),
            until,
        ))),
        _ => None,
    };

    let programs: Vec<_> = (0..spec.services)
        .map(|slot| tokio::task::spawn_local(Program::new(Arc::clone(&ctx), slot).run(until)))
        .collect();
    let mut finished = Vec::new();
    for p in programs {
        match p.await {
            Ok(program) => finished.push(program),
            Err(e) => eprintln!("service-sim: a program task ended: {e}"),
        }
    }
    let stall_counts = match stalls {
        Some(h) => h.await.unwrap_or_default(),
        None => StallCounts::default(),
    };

    // Wind-down: no more faults; the last state settles for a term, still sampled, then every
    // incarnation is shut down, still sampled.
    for dice in ctx
        .dice
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
    {
        dice.disable();
    }
    tokio::time::sleep(term).await;
    let guards = futures::future::join_all(finished.into_iter().map(Program::finish)).await;
    tokio::time::sleep(term / 2).await;
    drop(guards);
    stop.store(true, Ordering::SeqCst);
    let _ = rows.await;
    let _ = tokio::task::spawn_blocking(move || sampler.join()).await;
    oracle.collect_panics(mark);

    let dice = ctx
        .dice
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let report = SimReport::new(
        &spec,
        term,
        &oracle,
        &ctx.world.log,
        &dice,
        stall_counts,
        clock.elapsed(),
    );
    eprintln!("service-sim: {}", report.summary());
    Ok(report)
}

/// The leak check and a purge of the run's namespace, every `row_period`, until `stop`.
async fn check_rows(ctx: Arc<Ctx>, stop: Arc<AtomicBool>) {
    let period = ctx.world.spec.row_period;
    for _ in 0..1_000_000 {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        if let Ok(rows) = ctx.world.live_rows().await {
            ctx.oracle
                .check_rows(&rows, ctx.max_term(), ctx.plan.longest_late());
        }
        // Purge every row released or expired a millisecond ago, as an impatient retention
        // would: the oracle's `tokens_never_repeat` checks that no name's token ever comes back.
        if let Ok(ns) = Namespace::new(ctx.world.namespace.clone()) {
            let _ = ctx
                .world
                .rows
                .purge(Some(&ns), Duration::from_millis(1))
                .await;
        }
        tokio::time::sleep(period).await;
    }
}
