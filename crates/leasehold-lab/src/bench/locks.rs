//! Lock + unlock pairs per second: the store-level lock (`begin_tenure` + `release` through
//! `SeaOrmStore`) on 1,000 names × 16 tasks and on one hot name, next to `PgAdvisoryLock` on
//! PostgreSQL and the same SQL through raw sqlx elsewhere.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::future::join_all;
use leasehold::LeaseService;
use leasehold_storage::{
    AcquireOutcome, Backend, Grant, HolderId, LeaseKey, LeaseStore, ReleaseOutcome, SeaOrmStore,
    Term,
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
    /// MySQL/MariaDB's named lock, as `distributed-lock-mysql` takes it: `GET_LOCK(name, 0)`
    /// and `RELEASE_LOCK(name)` on one pooled connection (nothing written, no TTL, no token).
    NamedLock(sea_orm::sqlx::MySqlPool),
    /// The facade: `LeaseService::lock` + `LockGuard::unlock`.
    Facade(LeaseService),
    /// The facade's multi-lock: `AllLocks::acquire` of the name and its `~b` twin +
    /// `MultiLockGuard::unlock`.
    FacadeAll(LeaseService),
    /// The same two names as two facade locks, taken in key order and released together.
    FacadeTwo(LeaseService),
}

/// Pair latencies and the wall time of the whole run, and the CPU spent meanwhile by this
/// process and (when it runs on this machine) by the database server.
#[derive(Clone)]
struct Run {
    pairs: Vec<Duration>,
    wall: Duration,
    cpu: Cpu,
}

/// CPU time over a run: this process, and the database server with all its sessions (`None`
/// when the server is not on this machine).
#[derive(Clone, Copy, Default)]
struct Cpu {
    client: Option<Duration>,
    server: Option<Duration>,
}

impl Cpu {
    fn now(server: Option<&str>) -> Self {
        Self {
            client: crate::capacity::own_cpu(),
            server: server.and_then(crate::capacity::server_cpu),
        }
    }

    fn since(self, start: Self) -> Self {
        let d = |a: Option<Duration>, b: Option<Duration>| Some(a?.saturating_sub(b?));
        Self {
            client: d(self.client, start.client),
            server: d(self.server, start.server),
        }
    }

    /// "client X µs, server Y µs" of CPU per pair.
    fn per_pair(self, pairs: usize) -> String {
        let us = |c: Option<Duration>| match c {
            Some(c) if pairs > 0 => format!("{:.0} µs", c.as_secs_f64() * 1e6 / pairs as f64),
            _ => "n/a".to_owned(),
        };
        format!("client {}, server {}", us(self.client), us(self.server))
    }
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
        Kind::Store(store) => match store
            .begin_tenure(key, me, Grant::New, term, None)
            .await
            .map_err(err)?
        {
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
        Kind::Facade(service) => {
            let ttl = Duration::from_millis(u64::try_from(term.as_millis_i64()).unwrap_or(30_000));
            match service
                .lock(key.namespace.as_str(), key.name.as_str(), ttl)
                .await
                .map_err(err)?
            {
                Some(guard) => {
                    guard.unlock().await.map_err(err)?;
                    Ok(Some(start.elapsed()))
                }
                None => Ok(None),
            }
        }
        Kind::FacadeAll(service) => {
            let ttl = Duration::from_millis(u64::try_from(term.as_millis_i64()).unwrap_or(30_000));
            let twin = format!("{}~b", key.name);
            let names = [key.name.as_str(), twin.as_str()];
            match service
                .locks()
                .all()
                .acquire(key.namespace.as_str(), &names, ttl)
                .await
                .map_err(err)?
            {
                Some(set) => {
                    set.unlock().await.map_err(err)?;
                    Ok(Some(start.elapsed()))
                }
                None => Ok(None),
            }
        }
        Kind::FacadeTwo(service) => {
            let ttl = Duration::from_millis(u64::try_from(term.as_millis_i64()).unwrap_or(30_000));
            let (ns, twin) = (key.namespace.as_str(), format!("{}~b", key.name));
            let locks = service.locks();
            let Some(first) = locks
                .acquire(ns, key.name.as_str(), ttl)
                .await
                .map_err(err)?
            else {
                return Ok(None);
            };
            let Some(second) = locks.acquire(ns, &twin, ttl).await.map_err(err)? else {
                first.unlock().await.map_err(err)?;
                return Ok(None);
            };
            let (a, b) = futures::join!(first.unlock(), second.unlock());
            a.map_err(err)?;
            b.map_err(err)?;
            Ok(Some(start.elapsed()))
        }
        Kind::Advisory(pool) => {
            let lock = PgAdvisoryLock::new(format!("{}/{}", key.namespace, key.name));
            let conn = pool.acquire().await.map_err(err)?;
            let guard = lock.acquire(conn).await.map_err(err)?;
            guard.release_now().await.map_err(err)?;
            Ok(Some(start.elapsed()))
        }
        Kind::NamedLock(pool) => {
            let name = format!("{}/{}", key.namespace, key.name);
            let mut conn = pool.acquire().await.map_err(err)?;
            let got: Option<i64> = sea_orm::sqlx::query_scalar("SELECT GET_LOCK(?, 0)")
                .bind(&name)
                .fetch_one(&mut *conn)
                .await
                .map_err(err)?;
            if got != Some(1) {
                return Ok(None);
            }
            let freed: Option<i64> = sea_orm::sqlx::query_scalar("SELECT RELEASE_LOCK(?)")
                .bind(&name)
                .fetch_one(&mut *conn)
                .await
                .map_err(err)?;
            match freed {
                Some(1) => Ok(Some(start.elapsed())),
                other => Err(format!("RELEASE_LOCK answered {other:?}")),
            }
        }
    }
}

async fn spread(kind: &Kind, ns: &str, plan: Plan, server: Option<&str>) -> R<Run> {
    spread_over(kind, ns, plan, server, TASKS).await
}

/// [`spread`] with `tasks` tasks (one task: a pair with nothing to wait for).
async fn spread_over(
    kind: &Kind,
    ns: &str,
    plan: Plan,
    server: Option<&str>,
    tasks: usize,
) -> R<Run> {
    let term = Term::new("term", Duration::from_secs(30)).map_err(err)?;
    let cpu = Cpu::now(server);
    let (results, wall) = timed(join_all((0..tasks).map(|t| {
        let kind = kind.clone();
        async move {
            let me =
                HolderId::new(format!("bench-lock-{}-{t}", std::process::id())).map_err(err)?;
            let mut pairs = Vec::with_capacity(plan.spread_pairs);
            for i in 0..plan.spread_pairs {
                let name = format!("lock-{:04}", (i * tasks + t) % SPREAD_NAMES);
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
    let cpu = Cpu::now(server).since(cpu);
    let mut pairs = Vec::new();
    for r in results {
        pairs.extend(r?);
    }
    Ok(Run { pairs, wall, cpu })
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
    Ok(Run {
        pairs,
        wall,
        cpu: Cpu::default(),
    })
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
        cpu: Cpu::default(),
    });
    let cpu = if ours.cpu.client.is_some() && base.cpu.client.is_some() {
        format!(
            "; CPU per pair {} (baseline {})",
            ours.cpu.per_pair(ours.pairs.len()),
            base.cpu.per_pair(base.pairs.len())
        )
    } else {
        String::new()
    };
    Row::new(name, "µs/pair")
        .measured(stats(&mut micros(&ours.pairs)))
        .against(base_name, stats(&mut micros(&base.pairs)))
        .rates(ours.rate(), base.rate())
        .note(format!(
            "{note}; {} pairs, baseline {} pairs{cpu}",
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
    let facade = LeaseService::builder(ctx.url.clone())
        .table_prefix(ctx.prefix.clone())
        .build()
        .await
        .map_err(err);
    // The same facade with every grant and release a statement of its own: the baseline of
    // group commit, in the same run.
    let one_by_one = LeaseService::builder(ctx.url.clone())
        .table_prefix(ctx.prefix.clone())
        .tuning(leasehold::EngineTuning::new().group_commit(false))
        .build()
        .await
        .map_err(err);
    // PostgreSQL: the same facade with the doorbell's notifications sent by the grant and
    // release statements themselves (`notify_in_statements`), against the default in the run.
    let notifying = if ctx.backend() == Backend::Postgres {
        Some(
            LeaseService::builder(ctx.url.clone())
                .table_prefix(ctx.prefix.clone())
                .tuning(leasehold::EngineTuning::new().notify_in_statements(true))
                .build()
                .await
                .map_err(err),
        )
    } else {
        None
    };
    // The server's CPU counts every session it serves: quote it from a server of its own.
    let server = crate::capacity::server_pid(&ctx.store).await;
    let server = server.as_deref();
    super::step("lock_spread: store");
    let spread_ours = spread(&ours, &ctx.namespace("spread"), plan, server).await;
    super::step("lock_spread: baseline");
    let spread_base = match &base {
        Ok(k) => spread(k, &ctx.namespace("spread-base"), plan, server).await,
        Err(e) => Err(e.clone()),
    };
    // PostgreSQL: the durable floor beside the advisory lock. The store's own grant and release
    // SQL through raw sqlx (no library, no batching), 16 tasks; and the same pair from one task
    // alone (two durable commits, nothing to wait for), which says whether the latency of a
    // commit or the CPU it costs bounds the 16 tasks.
    let durable = if ctx.backend() == Backend::Postgres {
        super::step("lock_spread: raw durable SQL (16 tasks, then one)");
        let raw = capture(&ctx.store, &ctx.namespace("lockcap"))
            .await
            .map(|s| Kind::Raw(Raw::of(&ctx.store), Arc::new(s)));
        Some(match raw {
            Ok(k) => {
                let many = spread(&k, &ctx.namespace("spread-raw"), plan, server).await;
                let one = spread_over(&k, &ctx.namespace("spread-raw1"), plan, None, 1).await;
                (many, one)
            }
            Err(e) => (Err(e.clone()), Err(e)),
        })
    } else {
        None
    };
    super::step("lock_hot: store");
    let hot_ours = hot(&ours, &ctx.namespace("hot"), plan).await;
    super::step("lock_hot: baseline");
    let hot_base = match &base {
        Ok(k) => hot(k, &ctx.namespace("hot-base"), plan).await,
        Err(e) => Err(e.clone()),
    };
    // The peer a MySQL user would pick instead: the named lock (`distributed-lock-mysql`).
    let named = if !matches!(ctx.backend(), Backend::MySql | Backend::MariaDb) {
        None
    } else {
        super::step("lock_spread: named lock (GET_LOCK)");
        let k = Kind::NamedLock(ctx.store.connection().get_mysql_connection_pool().clone());
        Some(spread(&k, &ctx.namespace("spread-named"), plan, server).await)
    };
    super::step("lock_spread / lock_hot: facade");
    let (spread_facade, hot_facade) = match &facade {
        Ok(service) => {
            let k = Kind::Facade(service.clone());
            (
                spread(&k, &ctx.namespace("spread-facade"), plan, server).await,
                hot(&k, &ctx.namespace("hot-facade"), plan).await,
            )
        }
        Err(e) => (Err(e.clone()), Err(e.clone())),
    };
    super::step("lock_all_spread_facade: multi-locks and two locks");
    let (spread_all, spread_two) = match &facade {
        Ok(service) => (
            spread(
                &Kind::FacadeAll(service.clone()),
                &ctx.namespace("spread-all"),
                plan,
                server,
            )
            .await,
            spread(
                &Kind::FacadeTwo(service.clone()),
                &ctx.namespace("spread-two"),
                plan,
                server,
            )
            .await,
        ),
        Err(e) => (Err(e.clone()), Err(e.clone())),
    };
    super::step("lock_spread: facade without group commit");
    let spread_one_by_one = match &one_by_one {
        Ok(service) => {
            spread(
                &Kind::Facade(service.clone()),
                &ctx.namespace("spread-1by1"),
                plan,
                server,
            )
            .await
        }
        Err(e) => Err(e.clone()),
    };
    let spread_notifying = match &notifying {
        Some(Ok(service)) => {
            super::step("lock_spread: facade notifying in its statements");
            Some(
                spread(
                    &Kind::Facade(service.clone()),
                    &ctx.namespace("spread-notify"),
                    plan,
                    server,
                )
                .await,
            )
        }
        Some(Err(e)) => Some(Err(e.clone())),
        None => None,
    };
    let notifying = notifying.and_then(Result::ok);
    for service in [&facade, &one_by_one]
        .into_iter()
        .flatten()
        .chain(notifying.as_ref())
    {
        let _ = service.shutdown().await;
    }
    let spread_note = format!("{SPREAD_NAMES} names × {TASKS} tasks");
    let hot_note = format!(
        "one name × {TASKS} tasks (refused tries retried at once), up to {} pairs or {:?}",
        plan.hot_pairs, plan.hot_budget
    );
    let notify_row = spread_notifying.map(|ours| {
        row(
            "lock_spread_facade_notify_in_statements",
            "the default facade (a pg_notify statement after each commit)",
            ours,
            spread_facade.clone(),
            format!(
                "{spread_note} on one LeaseService, lock+unlock, grants and releases notifying in their own statements"
            ),
        )
    });
    let durable_row = durable.map(|(many, one)| {
        let alone_note = match (&one, &spread_base) {
            (Ok(one), Ok(base)) => {
                let mut us = micros(&one.pairs);
                let alone = stats(&mut us).map_or(0.0, |s| s.median);
                match base.rate() {
                    Some(adv) if alone > 0.0 => {
                        let most = TASKS as f64 * 1e6 / alone;
                        format!(
                            "; one task alone: {alone:.0} µs/pair (two durable commits, nothing \
                             to wait for): {TASKS} tasks at that latency would do {most:.0} \
                             pairs/s = {:.2}× the advisory lock's rate in this run, so latency \
                             is not the bound; the CPU per pair below is",
                            most / adv
                        )
                    }
                    _ => String::new(),
                }
            }
            (Err(e), _) => format!("; one-task pair not measured: {e}"),
            _ => String::new(),
        };
        row(
            "lock_spread_raw_durable",
            base_name,
            many,
            spread_base.clone(),
            format!(
                "{spread_note}, the store's grant + release SQL through raw sqlx, one statement and one commit each (the durable floor, no library){alone_note}"
            ),
        )
    });
    let mut rows = vec![
        row(
            "lock_spread",
            base_name,
            spread_ours,
            spread_base.clone(),
            format!("{spread_note}, begin_tenure+release via SeaOrmStore"),
        ),
        row(
            "lock_hot",
            base_name,
            hot_ours,
            hot_base.clone(),
            format!("{hot_note}, via SeaOrmStore"),
        ),
        match named {
            Some(named) => row(
                "lock_spread_facade",
                "GET_LOCK + RELEASE_LOCK (distributed-lock-mysql's lock), same pool",
                spread_facade.clone(),
                named,
                format!("{spread_note} on one LeaseService, lock+unlock"),
            ),
            None => row(
                "lock_spread_facade",
                base_name,
                spread_facade.clone(),
                spread_base,
                format!("{spread_note} on one LeaseService, lock+unlock"),
            ),
        },
        row(
            "lock_spread_facade_group_commit",
            "the same without group commit",
            spread_facade,
            spread_one_by_one,
            format!("{spread_note} on one LeaseService, lock+unlock, group commit on vs off"),
        ),
        row(
            "lock_all_spread_facade",
            "two facade locks in key order, released together",
            spread_all,
            spread_two,
            format!(
                "{spread_note} on one LeaseService, acquire_all of two names (one transaction) + unlock"
            ),
        ),
        row(
            "lock_hot_facade",
            base_name,
            hot_facade,
            hot_base,
            format!(
                "{hot_note}, one LeaseService (its local queue answers HeldLocally while a task holds it)"
            ),
        ),
    ];
    rows.extend(notify_row);
    rows.extend(durable_row);
    rows
}

/// One handoff: A holds, B waits in `try_locker`; from A's unlock call until B holds.
pub(crate) async fn handoff_once(a: &LeaseService, b: &LeaseService, ns: &str) -> R<Duration> {
    let ttl = Duration::from_secs(30);
    let guard = a
        .lock(ns, "handoff", ttl)
        .await
        .map_err(err)?
        .ok_or("handoff: the first holder did not get the lock")?;
    let waiter = {
        let (b, ns) = (b.clone(), ns.to_owned());
        tokio::spawn(async move {
            b.try_locker(&ns, "handoff", Some(Duration::from_secs(20)), ttl)
                .await
        })
    };
    // Let the waiter be refused once and start waiting (and LISTEN on PostgreSQL).
    tokio::time::sleep(Duration::from_millis(400)).await;
    let start = stopwatch();
    guard.unlock().await.map_err(err)?;
    let got = waiter.await.map_err(err)?.map_err(err)?;
    let elapsed = start.elapsed();
    let got = got.ok_or("handoff: the waiter never got the lock")?;
    got.unlock().await.map_err(err)?;
    Ok(elapsed)
}

/// The same with `PgAdvisoryLock`: the waiter blocks in `pg_advisory_lock` on its own connection.
async fn advisory_handoff_once(pool: &sea_orm::sqlx::PgPool, ns: &str) -> R<Duration> {
    let lock = PgAdvisoryLock::new(format!("{ns}/handoff"));
    let conn = pool.acquire().await.map_err(err)?;
    let guard = lock.acquire(conn).await.map_err(err)?;
    let waiter = {
        let (pool, lock) = (pool.clone(), lock.clone());
        tokio::spawn(async move {
            let conn = pool.acquire().await.map_err(err)?;
            let guard = lock.acquire(conn).await.map_err(err)?;
            let at = stopwatch();
            guard.release_now().await.map_err(err)?;
            R::Ok(at)
        })
    };
    tokio::time::sleep(Duration::from_millis(400)).await;
    let start = stopwatch();
    guard.release_now().await.map_err(err)?;
    let at = waiter.await.map_err(err)??;
    Ok(at.saturating_duration_since(start))
}

/// Lock handoff: release → the waiter holds, between two services (two holders, two engines,
/// two pools) in this process.
pub(crate) async fn handoff_row(ctx: &Ctx) -> Row {
    let rounds = if ctx.plan.quick { 3 } else { 20 };
    let build = |who: &str| {
        LeaseService::builder(ctx.url.clone())
            .table_prefix(ctx.prefix.clone())
            .holder_id(format!("bench-handoff-{who}-{}", std::process::id()))
            .build()
    };
    let (a, b) = match (build("a").await, build("b").await) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => {
            return Row::skipped("lock_handoff", "ms", format!("not measured: {e}"));
        }
    };
    let ns = ctx.namespace("handoff");
    let mut ours = Vec::new();
    let mut error = None;
    for _ in 0..rounds {
        match handoff_once(&a, &b, &ns).await {
            Ok(d) => ours.push(d),
            Err(e) => {
                error = Some(e);
                break;
            }
        }
    }
    let _ = a.shutdown().await;
    let _ = b.shutdown().await;
    let mut base = Vec::new();
    let base_name = if ctx.backend() == Backend::Postgres {
        let pool = ctx
            .store
            .connection()
            .get_postgres_connection_pool()
            .clone();
        for _ in 0..rounds {
            match advisory_handoff_once(&pool, &ns).await {
                Ok(d) => base.push(d),
                Err(e) => {
                    error = Some(format!("baseline: {e}"));
                    break;
                }
            }
        }
        "PgAdvisoryLock: waiter blocked in pg_advisory_lock"
    } else {
        ""
    };
    let ms = |d: &[Duration]| d.iter().map(|d| d.as_secs_f64() * 1e3).collect::<Vec<_>>();
    Row::new("lock_handoff", "ms")
        .measured(stats(&mut ms(&ours)))
        .against(base_name, stats(&mut ms(&base)))
        .note(format!(
            "{} handoffs between two LeaseServices in one process (unlock call → try_locker returns){}{}; goal median ≤ 5 ms on PostgreSQL",
            ours.len(),
            match ctx.backend() {
                Backend::Postgres => "; woken by the doorbell (NOTIFY)",
                Backend::Sqlite => "; woken by the doorbell (datagram next to the file)",
                _ => "; woken by the doorbell (named lock)",
            },
            error.map(|e| format!("; failed: {e}")).unwrap_or_default()
        ))
}
