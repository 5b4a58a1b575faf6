//! Cooperative revocation on every backend: `ask_release` asks the holder of a lease to hand it
//! over; a revocable holder drains its running work, ends its tenure (token cancelled before
//! the release) and stays out while the ask is live, so the asker's standby task gets the
//! lease only after the holder's work returned and its belief ended; a holder that did not opt
//! in is not moved; the ask's force deadline ends a holder whose work never returns.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::clock::{Clock, MonotonicClock};
use leasehold::elections::{AskOptions, AskOutcome, Revocable, Revocation};
use leasehold::{
    Error, EventKind, FencingToken, HandOver, LeaseConfig, LeaseService, LeaseTask,
    LeaseTaskOptions,
};
use tokio::time::Instant;

use common::{backends, unique_namespace};

/// Now, on the monotonic clock the library reads.
fn now() -> Instant {
    MonotonicClock.now()
}

fn config() -> LeaseConfig {
    LeaseConfig::default()
        .with_term(Duration::from_secs(3))
        .with_retry_interval(Duration::from_millis(200))
        .with_request_timeout(Duration::from_secs(1))
}

async fn service(url: &str, ns: &str) -> LeaseService {
    LeaseService::builder(url)
        .namespace(ns)
        .config(config())
        .build()
        .await
        .expect("service")
}

async fn held(task: &LeaseTask) -> FencingToken {
    tokio::time::timeout(Duration::from_secs(15), task.acquired())
        .await
        .expect("acquired in time")
        .expect("held")
        .0
}

/// A revocable task whose callback records what it was told.
fn revocable(drain: Duration) -> (LeaseTaskOptions, Arc<Mutex<Vec<Revocation>>>) {
    let told = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&told);
    let revocable = Revocable::new(drain).on_revoke(move |what| {
        seen.lock().expect("told").push(what);
    });
    (LeaseTaskOptions::new().revocable(revocable), told)
}

/// Every belief signal of one task: `has_lease`, its token, its tenure's cancellation token.
fn believes(service: &LeaseService, task: &LeaseTask) -> bool {
    service.has_lease("leader")
        || task.token().is_some()
        || !task.cancellation_token().is_cancelled()
}

/// Samples both tasks' belief signals every millisecond on a thread of its own; counts the
/// samples in which both believed.
struct Sampler {
    stop: Arc<AtomicBool>,
    both: Arc<AtomicU64>,
    rounds: Arc<AtomicU64>,
    thread: std::thread::JoinHandle<()>,
}

impl Sampler {
    fn start(a: (LeaseService, LeaseTask), b: (LeaseService, LeaseTask)) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let both = Arc::new(AtomicU64::new(0));
        let rounds = Arc::new(AtomicU64::new(0));
        let (s, n, r) = (Arc::clone(&stop), Arc::clone(&both), Arc::clone(&rounds));
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                if believes(&a.0, &a.1) && believes(&b.0, &b.1) {
                    n.fetch_add(1, Ordering::SeqCst);
                }
                r.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        Self {
            stop,
            both,
            rounds,
            thread,
        }
    }

    /// Stops; answers (samples with two believers, rounds).
    fn stop(self) -> (u64, u64) {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().expect("sampler");
        (
            self.both.load(Ordering::SeqCst),
            self.rounds.load(Ordering::SeqCst),
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_asker_gets_the_lease_only_after_the_holders_work_returned() {
    for (backend, url) in backends("revoke") {
        let ns = unique_namespace("revoke");
        let holder = service(&url, &ns).await;
        let asker = service(&url, &ns).await;
        let (options, told) = revocable(Duration::from_secs(30));
        let task_h = holder
            .start_lease_task("leader", options)
            .await
            .expect("start");
        let token_h = held(&task_h).await;
        let cancel_h = task_h.cancellation_token();
        let task_a = asker
            .start_lease_task("leader", LeaseTaskOptions::new())
            .await
            .expect("start");

        // The holder's token must be cancelled before its release is announced as settled.
        let mut events = holder.subscribe();
        let cancelled_first = {
            let cancel = cancel_h.clone();
            tokio::spawn(async move {
                loop {
                    match events.recv().await {
                        Ok(e) if e.what == EventKind::Released && e.token == token_h => {
                            return cancel.is_cancelled();
                        }
                        Ok(_) => {}
                        Err(_) => return false,
                    }
                }
            })
        };

        // A piece of work of about 300 ms, tracked as hand_over tracks it.
        let work = task_h.begin_work().expect("held, not draining");
        let returned = Arc::new(Mutex::new(None::<Instant>));
        let worker = {
            let returned = Arc::clone(&returned);
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(300)).await;
                *returned.lock().expect("returned") = Some(now());
                drop(work);
            })
        };
        let sampler = Sampler::start(
            (holder.clone(), task_h.clone()),
            (asker.clone(), task_a.clone()),
        );
        let asked = now();
        let outcome = asker
            .elections()
            .ask_release_with("leader", &AskOptions::new(Duration::from_secs(20)))
            .await
            .expect("ask");
        let answered = now();
        let (both, rounds) = sampler.stop();
        worker.await.expect("worker");

        let AskOutcome::Acquired { previous, token } = outcome else {
            panic!("{backend}: {outcome:?}");
        };
        assert_eq!(previous, token_h, "{backend}");
        assert!(token > token_h, "{backend}: a larger token");
        assert_eq!(
            both, 0,
            "{backend}: two believers in {both} of {rounds} samples"
        );
        assert!(rounds > 100, "{backend}: sampled {rounds} rounds");
        let returned = returned.lock().expect("returned").expect("work returned");
        assert!(
            returned < answered,
            "{backend}: the work returned before the answer"
        );
        assert!(
            returned.duration_since(asked) >= Duration::from_millis(250),
            "{backend}: the asker waited for the work"
        );
        assert!(
            cancel_h.is_cancelled(),
            "{backend}: the holder's belief ended"
        );
        assert!(task_a.has_lease() && !task_h.has_lease(), "{backend}");
        assert!(
            cancelled_first.await.expect("events"),
            "{backend}: the holder's token was cancelled before its release settled"
        );
        let told = told.lock().expect("told").clone();
        assert_eq!(
            told,
            vec![
                Revocation::Asked {
                    asker: asker.holder().clone(),
                    token: token_h,
                },
                Revocation::HandedOver(HandOver::Drained { token: token_h }),
            ],
            "{backend}"
        );
        // The ask was withdrawn: its row is free, and the holder competes again (refused).
        let row = asker.current_holder("leader#ask").await.expect("read");
        assert!(row.is_none(), "{backend}: the ask's row released: {row:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(task_a.has_lease() && !task_h.has_lease(), "{backend}");
        println!(
            "{backend}: asked at 0, work returned at {:?}, answered at {:?}, {rounds} samples",
            returned.duration_since(asked),
            answered.duration_since(asked)
        );
        holder.shutdown().await.expect("shutdown");
        asker.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_of_a_lease_nobody_holds_is_not_held() {
    for (backend, url) in backends("revoke-free") {
        let ns = unique_namespace("revoke-free");
        let asker = service(&url, &ns).await;
        let outcome = asker
            .elections()
            .ask_release("leader", Duration::from_secs(2))
            .await
            .expect("ask");
        assert_eq!(outcome, AskOutcome::NotHeld, "{backend}");
        // Its own lease: nothing asked.
        let task = asker
            .start_lease_task("leader", LeaseTaskOptions::new())
            .await
            .expect("start");
        let token = held(&task).await;
        let outcome = asker
            .elections()
            .ask_release("leader", Duration::from_secs(2))
            .await
            .expect("ask");
        assert_eq!(outcome, AskOutcome::HeldHere { token }, "{backend}");
        assert!(
            asker
                .current_holder("leader#ask")
                .await
                .expect("read")
                .is_none()
        );
        asker.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_that_did_not_opt_in_is_not_moved() {
    for (backend, url) in backends("revoke-plain") {
        let ns = unique_namespace("revoke-plain");
        let holder = service(&url, &ns).await;
        let asker = service(&url, &ns).await;
        let task_h = holder
            .start_lease_task("leader", LeaseTaskOptions::new())
            .await
            .expect("start");
        let token_h = held(&task_h).await;
        let cancel_h = task_h.cancellation_token();
        let started = now();
        let outcome = asker
            .elections()
            .ask_release("leader", Duration::from_millis(1500))
            .await
            .expect("ask");
        let waited = now().duration_since(started);
        assert_eq!(
            outcome,
            AskOutcome::TimedOut {
                holder: holder.holder().clone(),
                token: token_h
            },
            "{backend}"
        );
        assert!(
            waited >= Duration::from_millis(1400) && waited < Duration::from_secs(4),
            "{backend}: waited {waited:?}"
        );
        assert_eq!(task_h.token(), Some(token_h), "{backend}: not moved");
        assert!(!cancel_h.is_cancelled(), "{backend}");
        let row = asker.current_holder("leader#ask").await.expect("read");
        assert!(row.is_none(), "{backend}: the ask was withdrawn: {row:?}");
        holder.shutdown().await.expect("shutdown");
        asker.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_withdrawn_before_the_work_returned_leaves_the_holder_holding() {
    for (backend, url) in backends("revoke-withdrawn") {
        let ns = unique_namespace("revoke-withdrawn");
        let holder = service(&url, &ns).await;
        let asker = service(&url, &ns).await;
        let (options, told) = revocable(Duration::from_secs(3600));
        let task_h = holder
            .start_lease_task("leader", options)
            .await
            .expect("start");
        let token_h = held(&task_h).await;
        let work = task_h.begin_work().expect("held");
        let outcome = asker
            .elections()
            .ask_release("leader", Duration::from_millis(1500))
            .await
            .expect("ask");
        assert!(
            matches!(outcome, AskOutcome::TimedOut { token, .. } if token == token_h),
            "{backend}: {outcome:?}"
        );
        // The holder hears the ask's end: it accepts work again, still under its tenure.
        for _ in 0..300 {
            if !task_h.is_draining() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(!task_h.is_draining(), "{backend}: still draining");
        assert_eq!(task_h.token(), Some(token_h), "{backend}");
        assert!(
            task_h.begin_work().is_some(),
            "{backend}: new work accepted again"
        );
        drop(work);
        let told = told.lock().expect("told").clone();
        assert_eq!(
            told.last(),
            Some(&Revocation::Withdrawn { token: token_h }),
            "{backend}: {told:?}"
        );
        holder.shutdown().await.expect("shutdown");
        asker.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_force_deadline_ends_a_holder_whose_work_never_returns() {
    for (backend, url) in backends("revoke-force") {
        let ns = unique_namespace("revoke-force");
        let holder = service(&url, &ns).await;
        let asker = service(&url, &ns).await;
        let (options, told) = revocable(Duration::from_secs(3600));
        let task_h = holder
            .start_lease_task("leader", options)
            .await
            .expect("start");
        let token_h = held(&task_h).await;
        let cancel_h = task_h.cancellation_token();
        let task_a = asker
            .start_lease_task("leader", LeaseTaskOptions::new())
            .await
            .expect("start");
        let stuck = task_h.begin_work().expect("held");
        let sampler = Sampler::start(
            (holder.clone(), task_h.clone()),
            (asker.clone(), task_a.clone()),
        );
        let asked = now();
        let options =
            AskOptions::new(Duration::from_secs(10)).force_after(Duration::from_millis(800));
        let outcome = asker
            .elections()
            .ask_release_with("leader", &options)
            .await
            .expect("ask");
        let waited = now().duration_since(asked);
        let (both, rounds) = sampler.stop();
        let AskOutcome::Acquired { previous, token } = outcome else {
            panic!("{backend}: {outcome:?}");
        };
        assert_eq!(previous, token_h, "{backend}");
        assert!(token > token_h, "{backend}: a larger token");
        assert_eq!(
            both, 0,
            "{backend}: two believers in {both} of {rounds} samples"
        );
        assert!(
            waited >= Duration::from_millis(700) && waited < Duration::from_secs(6),
            "{backend}: forced after {waited:?}"
        );
        assert!(
            cancel_h.is_cancelled() && !stuck.is_held(),
            "{backend}: belief ended"
        );
        let told = told.lock().expect("told").clone();
        assert_eq!(
            told.last(),
            Some(&Revocation::HandedOver(HandOver::TimedOut {
                token: token_h,
                running: 1
            })),
            "{backend}: {told:?}"
        );
        assert!(
            matches!(told.first(), Some(Revocation::Asked { .. })),
            "{backend}: {told:?}"
        );
        drop(stuck);
        holder.shutdown().await.expect("shutdown");
        asker.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_before_anything_is_written() {
    let asker = LeaseService::builder("sqlite::memory:")
        .build()
        .await
        .expect("service");
    let invalid = |r: Result<AskOutcome, Error>| matches!(r, Err(Error::Invalid(_)));
    assert!(invalid(
        asker
            .elections()
            .ask_release("", Duration::from_secs(1))
            .await
    ));
    assert!(invalid(
        asker
            .elections()
            .ask_release("leader", Duration::ZERO)
            .await
    ));
    let long = "x".repeat(253);
    assert!(
        invalid(
            asker
                .elections()
                .ask_release(&long, Duration::from_secs(1))
                .await
        ),
        "{{name}}#ask too long"
    );
    let forcing = AskOptions::new(Duration::from_secs(1)).force_after(Duration::from_secs(1));
    assert!(invalid(
        asker.elections().ask_release_with("leader", &forcing).await
    ));
    assert!(invalid(
        asker
            .elections()
            .ask_release(
                "leader",
                leasehold::engine::Term::MAX + Duration::from_secs(1)
            )
            .await
    ));
    // A revocable task whose ask key cannot be made is refused before it starts.
    let options = LeaseTaskOptions::new().revocable(Revocable::new(Duration::from_secs(1)));
    let refused = asker.start_lease_task(&long, options).await;
    assert!(matches!(refused, Err(Error::Invalid(_))), "{refused:?}");
    assert!(asker.tasks().list().await.expect("list").is_empty());
    asker.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_asker_without_a_task_sees_the_release_and_the_holder_comes_back() {
    for (backend, url) in backends("revoke-notask") {
        let ns = unique_namespace("revoke-notask");
        let holder = service(&url, &ns).await;
        let asker = service(&url, &ns).await;
        // Started many at once: each revocable task watches its own ask.
        let (options, told) = revocable(Duration::from_secs(30));
        let tasks = holder
            .tasks()
            .start_many(["leader", "other"], options)
            .await
            .expect("start");
        let token = held(&tasks[0]).await;
        let other = held(&tasks[1]).await;
        let outcome = asker
            .elections()
            .ask_release("leader", Duration::from_secs(10))
            .await
            .expect("ask");
        assert_eq!(
            outcome,
            AskOutcome::Released { previous: token },
            "{backend}"
        );
        // The ask is withdrawn on return: the holder competes again and takes a new tenure.
        let again = held(&tasks[0]).await;
        assert!(
            again > token,
            "{backend}: a new tenure {again} after {token}"
        );
        assert_eq!(
            tasks[1].token(),
            Some(other),
            "{backend}: the other task untouched"
        );
        let told = told.lock().expect("told").clone();
        assert!(
            matches!(told.last(), Some(Revocation::HandedOver(HandOver::Drained { token: t })) if *t == token),
            "{backend}: {told:?}"
        );
        holder.shutdown().await.expect("shutdown");
        asker.shutdown().await.expect("shutdown");
    }
}
