//! Observers (`leasehold_storage::observe`): how soon an observer sees a hand-over, and on
//! PostgreSQL what the change trigger that pushes it costs a grant and a renewal.

use std::sync::Arc;
use std::time::Duration;

use leasehold_storage::observe::{LeaseObserver, Observation, ObserveOptions};
use leasehold_storage::{
    AcquireOutcome, Backend, Doorbell, Grant, HolderId, LeaseKey, LeaseStore, SeaOrmStore,
    StoreBuilder, Term, doorbell,
};

use super::{Ctx, Row, micros, stats, stopwatch, timed};

/// The observer's poll interval in the delay rows (its default).
const POLL: Duration = leasehold_storage::observe::DEFAULT_POLL;
/// Bound on one event (a failed cycle is left out of the figures).
const EVENT_BOUND: Duration = Duration::from_secs(10);

/// The term of every grant here: far longer than any cycle.
const TERM: Duration = Duration::from_secs(60);

/// The rows: `observer_delay` (every backend) and, on PostgreSQL, `grant_release_trigger` and
/// `renew_trigger`.
pub(crate) async fn rows(ctx: &Ctx) -> Vec<Row> {
    let Ok(term) = Term::new("term", TERM) else {
        return Vec::new();
    };
    let mut rows = vec![delay_row(ctx, term).await];
    if ctx.backend() == Backend::Postgres {
        rows.extend(trigger_rows(ctx, term).await);
    }
    rows
}

/// Median ms from a hand-over's grant answer (its commit is before it) to the observer's event
/// naming the new holder (0 when the event came first), with the service's doorbell; baseline
/// the same observer without one (poll only).
async fn delay_row(ctx: &Ctx, term: Term) -> Row {
    let (pushed, polled) = if ctx.plan.quick { (10, 3) } else { (30, 10) };
    let watcher = match StoreBuilder::new(ctx.url.clone())
        .table_prefix(ctx.prefix.clone())
        .connect()
        .await
    {
        Ok(s) => s,
        Err(e) => return Row::skipped("observer_delay", "ms", e.to_string()),
    };
    let bell = doorbell::for_store(&watcher, Duration::from_secs(5));
    let with_bell = handovers(ctx, &watcher, bell.clone(), pushed, term).await;
    let without = handovers(ctx, &watcher, None, polled, term).await;
    if let Some(bell) = bell {
        bell.stop();
    }
    let ms = |d: Vec<Duration>| d.iter().map(|d| d.as_secs_f64() * 1e3).collect::<Vec<_>>();
    let (mut a, mut b) = (ms(with_bell), ms(without));
    let pushed_what = match ctx.backend() {
        Backend::Postgres => "grants announced by the holders' doorbell",
        Backend::Sqlite => "grants announced by the holders' doorbell (datagram)",
        _ => "releases pushed by the doorbell, grants polled",
    };
    Row::new("observer_delay", "ms")
        .measured(stats(&mut a))
        .against(format!("poll only ({POLL:?})"), stats(&mut b))
        .note(format!(
            "grant answer → observer event, {} hand-overs; {pushed_what}",
            a.len()
        ))
}

/// `n` hand-overs A → B of one name, each timed from B's grant answer to the observer's event.
async fn handovers(
    ctx: &Ctx,
    watcher: &SeaOrmStore,
    bell: Option<Arc<dyn Doorbell>>,
    n: usize,
    term: Term,
) -> Vec<Duration> {
    let key = match LeaseKey::parse(&ctx.namespace("observe"), "handover") {
        Ok(k) => k,
        Err(_) => return Vec::new(),
    };
    let (Ok(a), Ok(b)) = (HolderId::new("bench-a"), HolderId::new("bench-b")) else {
        return Vec::new();
    };
    let holders_bell = doorbell::for_store(&ctx.store, Duration::from_secs(5));
    let options = ObserveOptions::new().poll(POLL);
    let mut obs = LeaseObserver::spawn(Arc::new(watcher.clone()), bell, key.clone(), options);
    let _ = tokio::time::timeout(EVENT_BOUND, obs.next()).await;
    let mut out = Vec::with_capacity(n);
    let store = &ctx.store;
    // One hand-over more than timed: the first warms up the doorbells' connections and sockets.
    for i in 0..=n {
        let Ok(AcquireOutcome::Acquired { token: ta, .. }) =
            store.begin_tenure(&key, &a, Grant::New, term, None).await
        else {
            continue;
        };
        if let Some(bell) = &holders_bell {
            bell.held(&key);
        }
        if !seen(&mut obs, &a).await {
            continue;
        }
        if store.release(&key, &a, ta).await.is_err() {
            continue;
        }
        if let Some(bell) = &holders_bell {
            bell.ring(&key);
        }
        let Ok(AcquireOutcome::Acquired { token: tb, .. }) =
            store.begin_tenure(&key, &b, Grant::New, term, None).await
        else {
            continue;
        };
        let answered = stopwatch();
        // As the engine does on every grant: on PostgreSQL and SQLite this announces it.
        if let Some(bell) = &holders_bell {
            bell.held(&key);
        }
        if seen(&mut obs, &b).await && i > 0 {
            out.push(answered.elapsed());
        }
        let _ = store.release(&key, &b, tb).await;
    }
    if let Some(bell) = holders_bell {
        bell.stop();
    }
    out
}

/// Waits (bounded) until the observer says `who` holds the name.
async fn seen(obs: &mut LeaseObserver, who: &HolderId) -> bool {
    tokio::time::timeout(EVENT_BOUND, async {
        while let Some(o) = obs.next().await {
            if let Observation::State(Some(r)) = &o
                && r.held
                && &r.holder == who
            {
                return true;
            }
        }
        false
    })
    .await
    .unwrap_or(false)
}

/// µs per grant + release cycle and per renewal, one client, on a copy of the lease table with
/// the opt-in change trigger against the lease table without it, blocks alternated. (Its real
/// cost is under concurrent grants, which lose group commit: see docs/benchmarks.md.)
async fn trigger_rows(ctx: &Ctx, term: Term) -> Vec<Row> {
    let skipped = |e: String| vec![Row::skipped("grant_release_trigger", "µs", e)];
    let trig = match StoreBuilder::new(ctx.url.clone())
        .table_prefix(format!("{}trig_", ctx.prefix))
        .connect()
        .await
    {
        Ok(s) => s,
        Err(e) => return skipped(e.to_string()),
    };
    let table = trig.table().to_owned();
    if let Err(e) = leasehold_storage::ddl::ensure_change_notify(trig.connection(), &table).await {
        return skipped(e.to_string());
    }
    let Ok(holder) = HolderId::new("bench-trigger") else {
        return Vec::new();
    };
    let ns = ctx.namespace("trigger");
    let cycles = ctx.plan.cycles.max(200);
    let blocks = 4;
    let (mut with, mut without) = (Vec::new(), Vec::new());
    let (mut renew_with, mut renew_without) = (Vec::new(), Vec::new());
    for block in 0..blocks {
        for (store, grants, renews) in [
            (&trig, &mut with, &mut renew_with),
            (&ctx.store, &mut without, &mut renew_without),
        ] {
            cycle(
                store,
                (&ns, &holder, term),
                block,
                cycles / blocks,
                grants,
                renews,
            )
            .await;
        }
    }
    let _ = leasehold_storage::ddl::drop_lease_table(trig.connection(), &table).await;
    trig.connection().clone().close().await.ok();
    let (mut a, mut b) = (micros(&with), micros(&without));
    let (mut c, mut d) = (micros(&renew_with), micros(&renew_without));
    vec![
        Row::new("grant_release_trigger", "µs")
            .measured(stats(&mut a))
            .against("the lease table (no trigger)", stats(&mut b))
            .note("begin_tenure + release, one client, each notifying at commit with the opt-in trigger"),
        Row::new("renew_trigger", "µs")
            .measured(stats(&mut c))
            .against("the lease table (no trigger)", stats(&mut d))
            .note("renew, one client: the trigger's WHEN is evaluated, nothing notified"),
    ]
}

/// `n` grant + renew + release cycles on fresh names of `store`.
async fn cycle(
    store: &SeaOrmStore,
    (ns, holder, term): (&str, &HolderId, Term),
    block: usize,
    n: usize,
    grants: &mut Vec<Duration>,
    renews: &mut Vec<Duration>,
) {
    for i in 0..n {
        let Ok(key) = LeaseKey::parse(ns, &format!("t{block}-{i}")) else {
            continue;
        };
        let (granted, g) = timed(store.begin_tenure(&key, holder, Grant::New, term, None)).await;
        let Ok(AcquireOutcome::Acquired { token, .. }) = granted else {
            continue;
        };
        let (_, r) = timed(store.renew(&key, holder, token, term)).await;
        let (_, rel) = timed(store.release(&key, holder, token)).await;
        grants.push(g + rel);
        renews.push(r);
    }
}
