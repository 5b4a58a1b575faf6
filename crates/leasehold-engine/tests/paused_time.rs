//! The engine on Tokio's paused time: timers, late answers, the batch window and shutdown with a
//! call in flight, replayed exactly (no wall clock, no flakes).
//!
//! Each test runs an actix `System` on a current-thread runtime started paused: time only moves
//! when every task waits, straight to the next timer. The actors' clock ([`MonotonicClock`]) and
//! the store's clock (a [`MemoryStore`] on the same paused clock) move together, so every
//! instant below is exact, and every assertion is about what a belief signal says at an instant.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix::Actor;
use leasehold_core::{
    Clock, DbInstant, HolderId, LeaseConfig, LeaseKey, MonotonicClock, Notification,
};
use leasehold_engine::{
    Belief, EngineError, LeaseEngine, Listener, Owner, Registry, RenewGroup, ShutdownAll,
    StartTask, StopTask,
};
use leasehold_storage::{LeaseStore, MemoryStore};
use leasehold_testkit::counting::{CountingStore, Op, StoreCounts};
use tokio::time::{Instant, sleep};

/// Runs `test` in an actix system on a paused current-thread runtime.
fn paused<F: Future<Output = ()>>(test: impl FnOnce() -> F) {
    let system = actix::System::with_tokio_rt(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .expect("a paused runtime")
    });
    system.block_on(test());
}

/// A memory store whose database clock is the paused clock (epoch milliseconds from an arbitrary
/// origin), counted, with `hook` before every call.
fn store<F>(
    hook: impl Fn(Op) -> F + Send + Sync + 'static,
) -> (Arc<dyn LeaseStore>, Arc<StoreCounts>)
where
    F: Future<Output = Result<(), leasehold_storage::StoreError>> + Send + 'static,
{
    let origin = MonotonicClock.now();
    let db = MemoryStore::with_clock(move || {
        let since = MonotonicClock.now() - origin;
        DbInstant(1_800_000_000_000 + i64::try_from(since.as_millis()).unwrap_or(i64::MAX))
    });
    let counts = Arc::new(StoreCounts::default());
    let counted = CountingStore::new(Arc::new(db), Arc::clone(&counts)).before_call(hook);
    (Arc::new(counted), counts)
}

/// Every notification of one key, with the instant it was given.
#[derive(Default)]
struct Heard(Mutex<Vec<(Instant, Notification)>>);

impl Heard {
    fn listener(self: &Arc<Self>) -> Listener {
        let me = Arc::clone(self);
        Arc::new(move |_, n: &Notification| {
            me.0.lock()
                .expect("not poisoned")
                .push((MonotonicClock.now(), n.clone()));
        })
    }

    fn all(&self) -> Vec<(Instant, Notification)> {
        self.0.lock().expect("not poisoned").clone()
    }
}

struct Rig {
    engine: actix::Addr<LeaseEngine>,
    registry: Arc<Registry>,
    counts: Arc<StoreCounts>,
    store: Arc<dyn LeaseStore>,
}

fn rig<F>(limit: Duration, hook: impl Fn(Op) -> F + Send + Sync + 'static) -> Rig
where
    F: Future<Output = Result<(), leasehold_storage::StoreError>> + Send + 'static,
{
    let (store, counts) = store(hook);
    let registry = Arc::new(Registry::new(Arc::new(MonotonicClock)));
    let renewer = RenewGroup::new(Arc::clone(&store), Duration::from_millis(10)).start();
    let holder = HolderId::new("paused-1").expect("holder");
    let engine = LeaseEngine::new(holder, Arc::clone(&store), renewer, Arc::clone(&registry))
        .with_request_timeout(limit)
        .start();
    Rig {
        engine,
        registry,
        counts,
        store,
    }
}

/// A rig (statements bounded at 1 s) whose first grant statement takes `stall`; every other
/// call answers at once.
fn first_grant_slow(stall: Duration) -> Rig {
    let first = AtomicBool::new(true);
    rig(Duration::from_secs(1), move |op| {
        let slow = matches!(op, Op::BeginTenure | Op::BeginTenureMany)
            && first.swap(false, Ordering::SeqCst);
        async move {
            if slow {
                sleep(stall).await;
            }
            Ok(())
        }
    })
}

fn config() -> LeaseConfig {
    LeaseConfig::new()
        .with_term(Duration::from_secs(3))
        .with_renew_interval(Duration::from_secs(1))
        .with_retry_interval(Duration::from_millis(500))
        .with_safety_margin(Duration::from_millis(300))
        .with_request_timeout(Duration::from_millis(800))
}

async fn start(rig: &Rig, name: &str, heard: &Arc<Heard>) -> (LeaseKey, Arc<Belief>) {
    let key = LeaseKey::parse("paused", name).expect("key");
    let start = StartTask::new(key.clone(), config(), heard.listener());
    let (belief, started) = rig
        .engine
        .send(start)
        .await
        .expect("engine")
        .expect("start");
    assert!(started);
    (key, belief)
}

/// Every signal says the same thing about `key` at this instant.
fn believes(rig: &Rig, key: &LeaseKey, belief: &Belief) -> bool {
    let holds = belief.holds();
    let token_live = belief.tenure().is_some_and(|(_, c)| !c.is_cancelled());
    let registry = rig.registry.has_lease(key);
    assert_eq!(
        (holds, token_live, registry),
        (holds, holds, holds),
        "the belief signals of {key} disagree at {:?}",
        MonotonicClock.now()
    );
    holds
}

#[test]
fn a_held_lease_keeps_one_renewal_timer_for_a_minute() {
    paused(|| async {
        let rig = rig(Duration::from_secs(1), |_| async { Ok(()) });
        let heard = Arc::new(Heard::default());
        let (key, belief) = start(&rig, "steady", &heard).await;
        let (token, _) = belief.settled().await.expect("held");
        let before = rig.counts.renew_many_items();
        let t0 = MonotonicClock.now();
        while MonotonicClock.now() - t0 < Duration::from_secs(60) {
            assert!(believes(&rig, &key, &belief), "lost a steady lease");
            assert_eq!(belief.token(), Some(token), "a steady lease changed tenure");
            sleep(Duration::from_millis(50)).await;
        }
        let renewals = rig.counts.renew_many_items() - before;
        eprintln!("{renewals} renewals in 60 s");
        // One renewal per renew interval (1 s, jittered at most downwards by the machine): a
        // renewal timer that is added instead of replaced doubles this within seconds.
        assert!(
            (55..=75).contains(&renewals),
            "{renewals} renewals in 60 s at a 1 s renew interval"
        );
        assert!(
            heard
                .all()
                .iter()
                .all(|(_, n)| !matches!(n, Notification::Lost { .. })),
            "{:?}",
            heard.all()
        );
        assert!(
            rig.engine
                .send(StopTask {
                    key: key.clone(),
                    owner: Owner::Task
                })
                .await
                .expect("engine")
        );
        assert!(!believes(&rig, &key, &belief));
    });
}

#[test]
fn renewals_that_answer_late_end_belief_at_the_local_deadline() {
    paused(|| async {
        // From `stall_from` on, every renewal is answered only once the stall is over (5 s,
        // longer than the term): each answer comes after the call was abandoned.
        let stall_from = Arc::new(Mutex::new(None::<Instant>));
        let stall = Arc::clone(&stall_from);
        let rig = rig(Duration::from_secs(1), move |op| {
            let until = stall
                .lock()
                .expect("not poisoned")
                .map(|t| t + Duration::from_secs(5));
            async move {
                if let (Op::RenewMany | Op::Renew, Some(until)) = (op, until) {
                    tokio::time::sleep_until(until).await;
                }
                Ok(())
            }
        });
        let heard = Arc::new(Heard::default());
        let (key, belief) = start(&rig, "late", &heard).await;
        let (first, cancel) = belief.settled().await.expect("held");
        sleep(Duration::from_millis(2_500)).await;
        let stalled_at = MonotonicClock.now();
        *stall_from.lock().expect("not poisoned") = Some(stalled_at);

        // Sample every 10 ms until well after the stall: belief must end by the last local
        // deadline the machine announced, and never come back for the old token.
        let mut ended_at = None;
        while MonotonicClock.now() - stalled_at < Duration::from_secs(9) {
            let now = MonotonicClock.now();
            let holds = believes(&rig, &key, &belief);
            if ended_at.is_none() && !holds {
                ended_at = Some(now);
            }
            if ended_at.is_some() {
                assert!(
                    !belief.holds_token(first),
                    "the first tenure was believed again after it ended"
                );
            }
            sleep(Duration::from_millis(10)).await;
        }
        let ended_at = ended_at.expect("belief never ended under stalled renewals");
        let heard = heard.all();
        let last_deadline = heard
            .iter()
            .filter(|(at, _)| *at <= stalled_at)
            .filter_map(|(_, n)| match n {
                Notification::Acquired { local_deadline, .. }
                | Notification::Renewed { local_deadline, .. } => Some(*local_deadline),
                _ => None,
            })
            .next_back()
            .expect("a deadline before the stall");
        assert!(
            ended_at <= last_deadline + Duration::from_millis(10),
            "believed {:?} past the local deadline",
            ended_at - last_deadline
        );
        assert!(
            cancel.is_cancelled(),
            "the first tenure's token was never cancelled"
        );
        let lost_at = heard
            .iter()
            .find_map(|(at, n)| {
                matches!(n, Notification::Lost { token, .. } if *token == first).then_some(*at)
            })
            .expect("no Lost for the first tenure");
        assert!(
            lost_at <= last_deadline,
            "Lost told {:?} late",
            lost_at - last_deadline
        );
        // Once the stall is over the task competes again and wins a new tenure.
        let (second, _) = belief.settled().await.expect("held again");
        assert!(second > first, "{second:?} after {first:?}");
        let _ = rig.engine.send(ShutdownAll).await;
    });
}

#[test]
fn renewals_due_together_go_out_as_one_statement() {
    paused(|| async {
        let rig = rig(Duration::from_secs(1), |_| async { Ok(()) });
        let heard = Arc::new(Heard::default());
        let mut keys = Vec::new();
        for i in 0..20 {
            keys.push(start(&rig, &format!("batch-{i}"), &heard).await);
        }
        for (_, belief) in &keys {
            belief.settled().await.expect("held");
        }
        let (calls, items) = (
            rig.counts.calls(Op::RenewMany),
            rig.counts.renew_many_items(),
        );
        sleep(Duration::from_secs(30)).await;
        let calls = rig.counts.calls(Op::RenewMany) - calls;
        let items = rig.counts.renew_many_items() - items;
        eprintln!("{calls} statements for {items} renewals");
        assert!(items >= 20 * 25, "{items} renewals of 20 leases in 30 s");
        // 20 leases granted within one instant renew together: a statement per window, not
        // per lease (the window is term / 30 = 100 ms, so jitter cannot split them far).
        assert!(
            calls * 4 <= items,
            "{calls} renewal statements for {items} renewals"
        );
        assert_eq!(
            rig.counts.calls(Op::Renew),
            0,
            "single renewals bypassed the batcher"
        );
        for (key, belief) in &keys {
            assert!(believes(&rig, key, belief));
        }
        let released = rig
            .engine
            .send(ShutdownAll)
            .await
            .expect("engine")
            .expect("shutdown");
        assert_eq!(released, 20);
    });
}

#[test]
fn shutdown_with_a_grant_in_flight_is_bounded_and_releases_the_late_grant() {
    paused(|| async {
        let granting = Arc::new(AtomicBool::new(false));
        let seen = Arc::clone(&granting);
        let rig = rig(Duration::from_secs(1), move |op| {
            let seen = Arc::clone(&seen);
            async move {
                if matches!(op, Op::BeginTenure | Op::BeginTenureMany) {
                    seen.store(true, Ordering::SeqCst);
                    // Applied, but 2 s late: after the engine gave up waiting for it.
                    sleep(Duration::from_secs(2)).await;
                }
                Ok(())
            }
        });
        let heard = Arc::new(Heard::default());
        let (key, belief) = start(&rig, "in-flight", &heard).await;
        let asked = MonotonicClock.now();
        while !granting.load(Ordering::SeqCst) {
            assert!(
                MonotonicClock.now() - asked < Duration::from_secs(5),
                "no grant was asked for"
            );
            sleep(Duration::from_millis(1)).await;
        }
        let t0 = MonotonicClock.now();
        let released = rig.engine.send(ShutdownAll).await.expect("engine");
        let took = MonotonicClock.now() - t0;
        assert!(released.is_ok(), "{released:?}");
        assert!(
            took <= Duration::from_millis(1_100),
            "shutdown took {took:?}"
        );
        assert!(!believes(&rig, &key, &belief));
        // The grant lands after the shutdown answered; it must be released, not left to lapse
        // while nobody believes it.
        sleep(Duration::from_secs(3)).await;
        assert!(!believes(&rig, &key, &belief), "believed after shutdown");
        let row = rig.store.get(&key).await.expect("get");
        let now = rig.store.db_now().await.expect("now");
        assert!(
            row.as_ref().is_none_or(|r| !r.held || r.until <= now),
            "a late grant is still held in the store: {row:?}"
        );
        assert!(
            rig.counts.calls(Op::Release)
                + rig.counts.calls(Op::ReleaseMany)
                + rig.counts.calls(Op::ReleaseBatch)
                >= 1
                || row.is_none(),
            "the late grant was left to lapse"
        );
        let after = rig
            .engine
            .send(StartTask::new(key.clone(), config(), heard.listener()))
            .await
            .expect("engine");
        assert!(matches!(after, Err(EngineError::ShuttingDown)), "{after:?}");
    });
}

#[test]
fn grants_asked_together_share_a_statement_and_each_is_answered() {
    paused(|| async {
        // Every grant statement takes 50 ms: while the first two are out, the rest queue and go
        // together.
        let rig = rig(Duration::from_secs(1), |op| async move {
            if matches!(op, Op::BeginTenure | Op::BeginTenureMany) {
                sleep(Duration::from_millis(50)).await;
            }
            Ok(())
        });
        let heard = Arc::new(Heard::default());
        let mut started = Vec::new();
        for i in 0..50 {
            started.push(start(&rig, &format!("burst-{i}"), &heard).await);
        }
        let t0 = MonotonicClock.now();
        for (_, belief) in &started {
            belief.settled().await.expect("held");
        }
        let took = MonotonicClock.now() - t0;
        let statements = rig.counts.calls(Op::BeginTenure) + rig.counts.calls(Op::BeginTenureMany);
        eprintln!(
            "50 grants in {statements} statements ({} batched items), all held after {took:?}",
            rig.counts.begin_tenure_many_items()
        );
        assert!(
            statements <= 6,
            "{statements} grant statements for 50 grants"
        );
        assert_eq!(
            rig.counts.calls(Op::BeginTenure) + rig.counts.begin_tenure_many_items(),
            50,
            "every grant asked exactly once"
        );
        for (key, belief) in &started {
            assert!(believes(&rig, key, belief));
            let row = rig.store.get(key).await.expect("get").expect("row");
            assert_eq!(
                Some(row.token),
                belief.token(),
                "{key}: believed token differs from the row"
            );
        }
        let released = rig
            .engine
            .send(ShutdownAll)
            .await
            .expect("engine")
            .expect("shutdown");
        assert_eq!(released, 50);
    });
}

/// Grants and releases asked in one turn while none of their kind is out go as one statement:
/// the group commit drains its mailbox before it sends, so the first request does not go out
/// alone with the rest a round trip behind it (a shard leaver's names and membership).
#[test]
fn requests_of_one_turn_go_out_as_one_statement() {
    paused(|| async {
        let rig = rig(Duration::from_secs(1), |_| async { Ok(()) });
        let heard = Arc::new(Heard::default());
        let keys: Vec<LeaseKey> = (0..8)
            .map(|i| LeaseKey::parse("paused", &format!("turn-{i}")).expect("key"))
            .collect();
        // Eight starts sent in one poll: the engine hands them to eight machines in one turn.
        let started = futures::future::join_all(keys.iter().map(|key| {
            rig.engine
                .send(StartTask::new(key.clone(), config(), heard.listener()))
        }))
        .await;
        let mut beliefs = Vec::new();
        for answer in started {
            let (belief, fresh) = answer.expect("engine").expect("start");
            assert!(fresh);
            beliefs.push(belief);
        }
        for belief in &beliefs {
            belief.settled().await.expect("held");
        }
        assert_eq!(
            (
                rig.counts.calls(Op::BeginTenure),
                rig.counts.calls(Op::BeginTenureMany),
                rig.counts.begin_tenure_many_items()
            ),
            (0, 1, 8),
            "eight grants of one turn: (single, batched statements, batched items)"
        );
        for (key, belief) in keys.iter().zip(&beliefs) {
            assert!(believes(&rig, key, belief));
        }
        let stopped = futures::future::join_all(keys.iter().map(|key| {
            rig.engine.send(StopTask {
                key: key.clone(),
                owner: Owner::Task,
            })
        }))
        .await;
        assert!(stopped.into_iter().all(|s| s.expect("engine")));
        for (key, belief) in keys.iter().zip(&beliefs) {
            assert!(!believes(&rig, key, belief));
        }
        // The releases settle after the stops answered.
        sleep(Duration::from_millis(100)).await;
        assert_eq!(
            (
                rig.counts.calls(Op::Release),
                rig.counts.calls(Op::ReleaseBatch)
            ),
            (0, 1),
            "eight releases of one turn: (single, batched statements)"
        );
        for key in &keys {
            let row = rig.store.get(key).await.expect("get");
            assert!(
                row.as_ref().is_none_or(|r| !r.held),
                "{key}: still held after its release: {row:?}"
            );
        }
    });
}

#[test]
fn a_grant_answered_after_its_caller_stopped_waiting_is_released_at_once() {
    paused(|| async {
        // The first grant commits 790 ms after it was asked: after its caller's patience (the
        // 800 ms request timeout less a twentieth), within the statement's own 1 s bound.
        let rig = first_grant_slow(Duration::from_millis(790));
        let heard = Arc::new(Heard::default());
        let t0 = MonotonicClock.now();
        let (key, belief) = start(&rig, "orphan", &heard).await;
        let (token, _) = belief.settled().await.expect("held");
        let took = MonotonicClock.now() - t0;
        // The orphaned tenure (token 1) was released by its token as soon as its answer came:
        // the task's retry won token 2 at once instead of being refused by its own row until
        // the 3 s term ran out.
        assert_eq!(
            token.get(),
            2,
            "the task holds the orphan's token or a later one"
        );
        assert!(
            took < Duration::from_millis(1_500),
            "held only after {took:?}: the orphaned grant kept the row"
        );
        assert!(
            rig.counts.calls(Op::ReleaseBatch) + rig.counts.calls(Op::Release) >= 1,
            "the orphaned grant was never released"
        );
        assert!(believes(&rig, &key, &belief));
        let row = rig.store.get(&key).await.expect("get").expect("row");
        assert_eq!(Some(row.token), belief.token());
        let _ = rig.engine.send(ShutdownAll).await;
    });
}

#[test]
fn grants_wait_while_renewals_are_behind() {
    paused(|| async {
        // From `slow_from` on, each renewal statement takes 700 ms: late, for a 3 s term whose
        // late mark is 500 ms (a sixth).
        let slow_from = Arc::new(AtomicBool::new(false));
        let slow = Arc::clone(&slow_from);
        let sent: Arc<Mutex<Vec<(Op, Instant)>>> = Arc::default();
        let log = Arc::clone(&sent);
        let (store, counts) = store(move |op| {
            log.lock()
                .expect("not poisoned")
                .push((op, MonotonicClock.now()));
            let slow = matches!(op, Op::RenewMany) && slow.load(Ordering::SeqCst);
            async move {
                if slow {
                    sleep(Duration::from_millis(700)).await;
                }
                Ok(())
            }
        });
        let registry = Arc::new(Registry::new(Arc::new(MonotonicClock)));
        let renewer = RenewGroup::new(Arc::clone(&store), Duration::from_millis(10));
        let pressure = renewer.pressure();
        let engine = LeaseEngine::new(
            HolderId::new("paused-1").expect("holder"),
            Arc::clone(&store),
            renewer.start(),
            Arc::clone(&registry),
        )
        .with_request_timeout(Duration::from_secs(1))
        .with_renew_pressure(pressure)
        .start();
        let rig = Rig {
            engine,
            registry,
            counts,
            store,
        };
        let heard = Arc::new(Heard::default());
        let (_, held) = start(&rig, "held", &heard).await;
        held.settled().await.expect("held");
        slow_from.store(true, Ordering::SeqCst);
        // Wait until the held lease's renewal has been out for more than its late mark.
        let renew_sent = loop {
            sleep(Duration::from_millis(10)).await;
            let at = sent
                .lock()
                .expect("not poisoned")
                .iter()
                .find(|(op, _)| *op == Op::RenewMany)
                .map(|(_, at)| *at);
            if let Some(at) = at
                && MonotonicClock.now() - at > Duration::from_millis(550)
            {
                break at;
            }
        };
        let asked = MonotonicClock.now();
        let (key, new) = start(&rig, "new", &heard).await;
        let (_, _) = new.settled().await.expect("held once renewals caught up");
        // No grant statement went out between the ask and the late renewal's answer (700 ms
        // after it was sent) plus the late mark's span.
        let resumes = renew_sent + Duration::from_millis(700 + 500);
        let grants: Vec<Instant> = sent
            .lock()
            .expect("not poisoned")
            .iter()
            .filter(|(op, at)| matches!(op, Op::BeginTenure | Op::BeginTenureMany) && *at >= asked)
            .map(|(_, at)| *at)
            .collect();
        assert!(!grants.is_empty(), "the new lease's grant was never sent");
        assert!(
            grants.iter().all(|at| *at >= resumes),
            "a grant went out {:?} before renewals caught up",
            resumes - grants[0]
        );
        assert!(believes(&rig, &key, &new));
        // The held lease kept its tenure throughout.
        assert!(held.holds(), "the held lease was lost while grants waited");
        let _ = rig.engine.send(ShutdownAll).await;
    });
}

#[test]
fn a_stalled_grant_statement_does_not_hold_the_next_grants_back() {
    paused(|| async {
        // The first grant statement stalls for 600 ms (a row lock, a slow server); every later
        // one answers at once. Grants asked meanwhile go out beside it once it has been out
        // `STALLED`, instead of waiting for its answer.
        let rig = first_grant_slow(Duration::from_millis(600));
        let heard = Arc::new(Heard::default());
        let t0 = MonotonicClock.now();
        let (stuck, stuck_belief) = start(&rig, "stuck", &heard).await;
        sleep(Duration::from_millis(1)).await;
        let mut others = Vec::new();
        for name in ["a", "b", "c"] {
            others.push(start(&rig, name, &heard).await);
        }
        sleep(leasehold_engine::STALLED + Duration::from_millis(20)).await;
        for (key, belief) in &others {
            assert!(
                believes(&rig, key, belief),
                "{key} not held {:?} after the start: it waited behind the stalled grant",
                MonotonicClock.now() - t0
            );
        }
        assert!(
            !believes(&rig, &stuck, &stuck_belief),
            "the stalled grant cannot have answered yet"
        );
        stuck_belief.settled().await.expect("held");
        assert!(believes(&rig, &stuck, &stuck_belief));
        assert!(
            MonotonicClock.now() - t0 >= Duration::from_millis(600),
            "the stall was not applied"
        );
        let released = rig
            .engine
            .send(ShutdownAll)
            .await
            .expect("engine")
            .expect("shutdown");
        assert_eq!(released, 4);
    });
}
