//! Lock + unlock pairs per second: the store-level lock (`try_acquire` + `release` through
//! `SeaOrmStore`) on 1,000 names × 16 tasks and on one hot name, next to `PgAdvisoryLock` on
//! PostgreSQL and the same SQL through raw sqlx elsewhere.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::future::join_all;
use leasehold_storage::{
    AcquireOutcome, Backend, HolderId, LeaseKey, LeaseStore, ReleaseOutcome, SeaOrmStore, Term,
};
use sea_orm::sqlx::postgres::PgAdvisoryLock;

use super::statements::{R, Raw, Stmts, capture, err};
use super::{Ctx, Plan, Row, micros, stats, stopwatch, timed};

const TASKS: usize = 16;
const SPREAD_NAMES: usize = 1_000;

/// Which lock a run uses.
#[derive(Clone)]
enum Kind {
    Store(Arc<SeaOrmStore>),
    Raw(Raw, Arc<Stmts>),
    Advisory(sea_orm::sqlx::PgPool),
}

/// Pair latencies and the wall time of the whole run.
struct Run {
    pairs: Vec<Duration>,
    wall: Duration,
}

impl Run {
    fn rate(&self) -> Option<f64> {
        (!self.pairs.is_empty()).then(|| self.pairs.len() as f64 / self.wall.as_secs_f64())
    }
}

/// One try: `Some(latency)` when the pair happened, `None` when the name was held.
async fn try_pair(kind: &Kind, key: &LeaseKey, me: &HolderId, term: Term) -> R<Option<Duration>> {
    let start = stopwatch();
    match kind {
        Kind::Store(store) => match store.try_acquire(key, me, term).await.map_err(err)? {
            AcquireOutcome::Acquired { token, .. } => {
                match store.release(key, me, token).await.map_err(err)? {
                    ReleaseOutcome::Released => Ok(Some(start.elapsed())),
                    other => Err(format!("store release: {other:?}")),
                }
            }
            _ => Ok(None),
        },
        Kind::Raw(raw, s) => {
            match raw
                .try_grant(&s.acquire, key, me.as_str(), term.as_millis_i64())
                .await?
            {
                Some(token) => {
                    raw.release(&s.release, key, me.as_str(), token).await?;
                    Ok(Some(start.elapsed()))
                }
                None => Ok(None),
            }
        }
        Kind::Advisory(pool) => {
            let lock = PgAdvisoryLock::new(format!("{}/{}", key.namespace, key.name));
            let conn = pool.acquire().await.map_err(err)?;
            let guard = lock.acquire(conn).await.map_err(err)?;
            guard.release_now().await.map_err(err)?;
            Ok(Some(start.elapsed()))
        }
    }
}

async fn spread(kind: &Kind, ns: &str, plan: Plan) -> R<Run> {
    let term = Term::new("term", Duration::from_secs(30)).map_err(err)?;
    let (results, wall) = timed(join_all((0..TASKS).map(|t| {
        let kind = kind.clone();
        async move {
            let me =
                HolderId::new(format!("bench-lock-{}-{t}", std::process::id())).map_err(err)?;
            let mut pairs = Vec::with_capacity(plan.spread_pairs);
            for i in 0..plan.spread_pairs {
                let name = format!("lock-{:04}", (i * TASKS + t) % SPREAD_NAMES);
                let key = LeaseKey::parse(ns, &name).map_err(err)?;
                // Another task may hold this name for a moment: try again.
                loop {
                    if let Some(d) = try_pair(&kind, &key, &me, term).await? {
                        pairs.push(d);
                        break;
                    }
                    tokio::task::yield_now().await;
                }
            }
            R::Ok(pairs)
        }
    })))
    .await;
    let mut pairs = Vec::new();
    for r in results {
        pairs.extend(r?);
    }
    Ok(Run { pairs, wall })
}

async fn hot(kind: &Kind, ns: &str, plan: Plan) -> R<Run> {
    let term = Term::new("term", Duration::from_secs(30)).map_err(err)?;
    let key = LeaseKey::parse(ns, "hot").map_err(err)?;
    let done = Arc::new(AtomicUsize::new(0));
    let start = stopwatch();
    let (results, wall) = timed(join_all((0..TASKS).map(|t| {
        let (kind, key, done) = (kind.clone(), key.clone(), Arc::clone(&done));
        async move {
            let me = HolderId::new(format!("bench-hot-{}-{t}", std::process::id())).map_err(err)?;
            let mut pairs = Vec::new();
            while done.load(Ordering::Relaxed) < plan.hot_pairs && start.elapsed() < plan.hot_budget
            {
                match try_pair(&kind, &key, &me, term).await? {
                    Some(d) => {
                        pairs.push(d);
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    None => tokio::task::yield_now().await,
                }
            }
            R::Ok(pairs)
        }
    })))
    .await;
    let mut pairs = Vec::new();
    for r in results {
        pairs.extend(r?);
    }
    Ok(Run { pairs, wall })
}

fn row(name: &'static str, base_name: &str, ours: R<Run>, base: R<Run>, note: String) -> Row {
    let (ours, base) = match (ours, base) {
        (Ok(o), Ok(b)) => (o, Some(b)),
        (Ok(o), Err(e)) => {
            let r = Row::new(name, "µs/pair")
                .measured(stats(&mut micros(&o.pairs)))
                .rates(o.rate(), None)
                .note(format!("{note}; baseline not measured: {e}"));
            return r;
        }
        (Err(e), _) => return Row::skipped(name, "µs/pair", format!("not measured: {e}")),
    };
    let base = base.unwrap_or(Run {
        pairs: Vec::new(),
        wall: Duration::ZERO,
    });
    Row::new(name, "µs/pair")
        .measured(stats(&mut micros(&ours.pairs)))
        .against(base_name, stats(&mut micros(&base.pairs)))
        .rates(ours.rate(), base.rate())
        .note(format!(
            "{note}; {} pairs, baseline {} pairs",
            ours.pairs.len(),
            base.pairs.len()
        ))
}

/// The lock rows.
pub(crate) async fn rows(ctx: &Ctx) -> Vec<Row> {
    let plan = ctx.plan;
    let ours = Kind::Store(Arc::new(ctx.store.clone()));
    let (base_name, base): (&str, R<Kind>) = if ctx.backend() == Backend::Postgres {
        (
            "PgAdvisoryLock acquire+release",
            Ok(Kind::Advisory(
                ctx.store
                    .connection()
                    .get_postgres_connection_pool()
                    .clone(),
            )),
        )
    } else {
        let ns = ctx.namespace("lockcap");
        (
            "raw sqlx, same SQL, same pool",
            capture(&ctx.store, &ns)
                .await
                .map(|s| Kind::Raw(Raw::of(&ctx.store), Arc::new(s))),
        )
    };
    let mut out = Vec::new();
    {
        let ns = ctx.namespace("spread");
        super::step("lock_spread: store");
        let o = spread(&ours, &ns, plan).await;
        super::step("lock_spread: baseline");
        let b = match &base {
            Ok(k) => spread(k, &ctx.namespace("spread-base"), plan).await,
            Err(e) => Err(e.clone()),
        };
        out.push(row(
            "lock_spread",
            base_name,
            o,
            b,
            format!("{SPREAD_NAMES} names × {TASKS} tasks, try_acquire+release via SeaOrmStore"),
        ));
    }
    {
        let ns = ctx.namespace("hot");
        super::step("lock_hot: store");
        let o = hot(&ours, &ns, plan).await;
        super::step("lock_hot: baseline");
        let b = match &base {
            Ok(k) => hot(k, &ctx.namespace("hot-base"), plan).await,
            Err(e) => Err(e.clone()),
        };
        out.push(row(
            "lock_hot",
            base_name,
            o,
            b,
            format!(
                "one name × {TASKS} tasks (refused tries retried at once), up to {} pairs or {:?}",
                plan.hot_pairs, plan.hot_budget
            ),
        ));
    }
    for name in ["lock_spread_facade", "lock_hot_facade"] {
        out.push(Row::skipped(
            name,
            "µs/pair",
            "pending: the facade's lock/unlock (crates/leasehold/src/lock.rs) does not exist yet",
        ));
    }
    out
}
