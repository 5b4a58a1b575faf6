//! Candidates and priority on every backend: `participants` lists the holder and every live
//! candidate with its priority and value; a standing-by candidate of higher priority takes the
//! lease over through cooperative revocation, never overlapping the holder's belief; its
//! hysteresis keeps a flapping preferred candidate, an equal priority and a holder that is not
//! a candidate from moving the lease; bad input is refused before anything is written.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{backends, unique_namespace};
use leasehold::clock::{Clock, MonotonicClock};
use leasehold::elections::{Candidate, Participant};
use leasehold::{
    Error, FencingToken, LeaseConfig, LeaseService, LeaseTask, LeaseTaskOptions, LeaseValue,
};

const RETRY: Duration = Duration::from_millis(200);

fn config() -> LeaseConfig {
    LeaseConfig::default()
        .with_term(Duration::from_secs(3))
        .with_retry_interval(RETRY)
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

fn candidate(priority: i32) -> Candidate {
    Candidate::new().priority(priority)
}

fn options(candidate: Candidate) -> LeaseTaskOptions {
    LeaseTaskOptions::new().candidate(candidate)
}

/// One participant as (holder, priority, value, token).
type Row = (String, Option<i32>, Option<String>, Option<FencingToken>);

/// The participants as rows.
fn summary(all: &[Participant]) -> Vec<Row> {
    all.iter()
        .map(|p| {
            (
                p.holder.to_string(),
                p.priority,
                p.value.as_ref().map(|v| v.as_str().to_owned()),
                p.token,
            )
        })
        .collect()
}

/// Waits until `service` lists `n` participants.
async fn listed(service: &LeaseService, n: usize) -> Vec<Participant> {
    let give_up = MonotonicClock.now() + Duration::from_secs(10);
    loop {
        let all = service
            .elections()
            .participants("leader")
            .await
            .expect("participants");
        if all.len() == n || MonotonicClock.now() > give_up {
            return all;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every belief signal of one task: `has_lease`, its token, its tenure's cancellation token.
fn believes(service: &LeaseService, task: &LeaseTask) -> Option<Option<FencingToken>> {
    let token = task.token();
    let any =
        service.has_lease("leader") || token.is_some() || !task.cancellation_token().is_cancelled();
    any.then_some(token)
}

/// Samples both tasks' belief signals every 2 ms on a thread of its own: counts the samples in
/// which both believed, and records every token seen, in order.
struct Sampler {
    stop: Arc<AtomicBool>,
    both: Arc<AtomicU64>,
    rounds: Arc<AtomicU64>,
    tokens: Arc<Mutex<Vec<FencingToken>>>,
    thread: std::thread::JoinHandle<()>,
}

impl Sampler {
    fn start(a: (LeaseService, LeaseTask), b: (LeaseService, LeaseTask)) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let both = Arc::new(AtomicU64::new(0));
        let rounds = Arc::new(AtomicU64::new(0));
        let tokens = Arc::new(Mutex::new(Vec::new()));
        let (s, n, r, t) = (
            Arc::clone(&stop),
            Arc::clone(&both),
            Arc::clone(&rounds),
            Arc::clone(&tokens),
        );
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                let (x, y) = (believes(&a.0, &a.1), believes(&b.0, &b.1));
                if x.is_some() && y.is_some() {
                    n.fetch_add(1, Ordering::SeqCst);
                }
                let mut seen = t.lock().expect("tokens");
                for token in [x, y].into_iter().flatten().flatten() {
                    if seen.last() != Some(&token) {
                        seen.push(token);
                    }
                }
                drop(seen);
                r.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        Self {
            stop,
            both,
            rounds,
            tokens,
            thread,
        }
    }

    /// Stops; answers (samples with two believers, rounds, tokens seen in order).
    fn stop(self) -> (u64, u64, Vec<FencingToken>) {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().expect("sampler");
        let tokens = self.tokens.lock().expect("tokens").clone();
        (
            self.both.load(Ordering::SeqCst),
            self.rounds.load(Ordering::SeqCst),
            tokens,
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn participants_lists_the_holder_and_every_standby() {
    for (backend, url) in backends("cand-list") {
        let ns = unique_namespace("cand-list");
        let a = service(&url, &ns).await;
        let b = service(&url, &ns).await;
        let c = service(&url, &ns).await;
        let value = |v: &str| LeaseValue::new(v).expect("short");
        let task_a = a
            .start_lease_task("leader", options(candidate(5).value(value("a:80"))))
            .await
            .expect("start");
        let token = held(&task_a).await;
        b.start_lease_task("leader", options(candidate(1).value(value("b:80"))))
            .await
            .expect("start");
        // The task's own value, reused.
        let c_options = options(candidate(3)).value(value("c:80"));
        c.start_lease_task("leader", c_options)
            .await
            .expect("start");
        let all = listed(&a, 3).await;
        let holder = |s: &LeaseService| s.holder().to_string();
        assert_eq!(
            summary(&all),
            vec![
                (holder(&a), Some(5), Some("a:80".into()), Some(token)),
                (holder(&c), Some(3), Some("c:80".into()), None),
                (holder(&b), Some(1), Some("b:80".into()), None),
            ],
            "{backend}"
        );
        assert!(all[0].is_holder() && !all[1].is_holder(), "{backend}");
        // A stopped standby is gone once its stop returned: no waiting a term.
        assert!(c.stop_lease_task("leader").await.expect("stop"));
        let all = a
            .elections()
            .participants("leader")
            .await
            .expect("participants");
        assert_eq!(
            summary(&all),
            vec![
                (holder(&a), Some(5), Some("a:80".into()), Some(token)),
                (holder(&b), Some(1), Some("b:80".into()), None),
            ],
            "{backend}"
        );
        // The stopped holder too; the standby takes over and is listed as the holder.
        assert!(a.stop_lease_task("leader").await.expect("stop"));
        let all = b
            .elections()
            .participants("leader")
            .await
            .expect("participants");
        assert!(
            all.iter().all(|p| &p.holder == b.holder()),
            "{backend}: {all:?}"
        );
        for s in [&a, &b, &c] {
            s.shutdown().await.expect("shutdown");
        }
        let rows = b_rows(&url, &ns).await;
        assert!(
            rows.is_empty(),
            "{backend}: rows left after shutdown: {rows:?}"
        );
    }
}

/// The live rows of namespace `ns`, read by a service of its own.
async fn b_rows(url: &str, ns: &str) -> Vec<String> {
    let reader = service(url, ns).await;
    let rows = reader
        .locks()
        .held_with_prefix(ns, "")
        .await
        .expect("list")
        .into_iter()
        .map(|r| r.key.name.to_string())
        .collect();
    reader.shutdown().await.expect("shutdown");
    rows
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_higher_priority_takes_over_within_settle_and_a_retry_interval_without_overlap() {
    let settle = Duration::from_millis(1500);
    for (backend, url) in backends("cand-takeover") {
        let ns = unique_namespace("cand-takeover");
        let low = service(&url, &ns).await;
        let high = service(&url, &ns).await;
        let task_low = low
            .start_lease_task("leader", options(candidate(0)))
            .await
            .expect("start");
        let token_low = held(&task_low).await;
        let cancel_low = task_low.cancellation_token();
        let preferred = candidate(10)
            .settle(settle)
            .min_tenure(Duration::from_secs(1));
        let started = MonotonicClock.now();
        let task_high = high
            .start_lease_task("leader", options(preferred))
            .await
            .expect("start");
        let sampler = Sampler::start(
            (low.clone(), task_low.clone()),
            (high.clone(), task_high.clone()),
        );
        let token_high = held(&task_high).await;
        let took = MonotonicClock.now().duration_since(started);
        // Stays with the preferred one: the old holder competes again and is refused.
        tokio::time::sleep(Duration::from_millis(800)).await;
        let (both, rounds, tokens) = sampler.stop();
        assert_eq!(
            both, 0,
            "{backend}: two believers in {both} of {rounds} samples"
        );
        assert!(rounds > 100, "{backend}: sampled {rounds} rounds");
        assert!(token_high > token_low, "{backend}: a larger token");
        assert!(
            tokens.windows(2).all(|w| w[0] < w[1]),
            "{backend}: tokens grow: {tokens:?}"
        );
        assert!(cancel_low.is_cancelled(), "{backend}");
        assert!(task_high.has_lease() && !task_low.has_lease(), "{backend}");
        // Settle, a retry interval (jittered by a quarter), and generous slack for the ask's
        // statements and the holder's read of it (polled every renew interval on MariaDB).
        let bound = settle + RETRY.mul_f64(1.25) + Duration::from_secs(3);
        assert!(
            took >= settle && took <= bound,
            "{backend}: took over after {took:?}, expected within {settle:?}..{bound:?}"
        );
        let all = high
            .elections()
            .participants("leader")
            .await
            .expect("participants");
        assert_eq!(all[0].holder, *high.holder(), "{backend}");
        assert_eq!(all[0].token, Some(token_high), "{backend}");
        println!(
            "{backend}: took over {took:?} after the start (settle {settle:?}, retry {RETRY:?}), \
             {rounds} samples, never two believers"
        );
        low.shutdown().await.expect("shutdown");
        high.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flapping_preferred_candidate_never_moves_the_lease() {
    let settle = Duration::from_secs(2);
    for (backend, url) in backends("cand-flap") {
        let ns = unique_namespace("cand-flap");
        let holder = service(&url, &ns).await;
        let flapper = service(&url, &ns).await;
        let task = holder
            .start_lease_task("leader", options(candidate(0)))
            .await
            .expect("start");
        let token = held(&task).await;
        let preferred = candidate(10).settle(settle).min_tenure(Duration::ZERO);
        for _ in 0..4 {
            flapper
                .start_lease_task("leader", options(preferred.clone()))
                .await
                .expect("start");
            tokio::time::sleep(Duration::from_millis(1200)).await;
            assert!(flapper.stop_lease_task("leader").await.expect("stop"));
            tokio::time::sleep(Duration::from_millis(200)).await;
            assert_eq!(
                task.token(),
                Some(token),
                "{backend}: the holder kept its tenure"
            );
        }
        let row = holder.current_holder("leader#ask").await.expect("read");
        assert!(row.is_none(), "{backend}: never asked: {row:?}");
        // Once it stays past its settle time, it does take over.
        let stays = flapper
            .start_lease_task("leader", options(preferred.clone()))
            .await
            .expect("start");
        let took = held(&stays).await;
        assert!(took > token, "{backend}");
        println!(
            "{backend}: 4 runs of 1.2 s under a settle of {settle:?} never asked; a run that stayed took over"
        );
        holder.shutdown().await.expect("shutdown");
        flapper.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn equal_priority_and_a_holder_that_is_not_a_candidate_are_never_preempted() {
    let eager = |p| {
        candidate(p)
            .settle(Duration::from_secs(1))
            .min_tenure(Duration::ZERO)
    };
    for (backend, url) in backends("cand-keep") {
        let ns = unique_namespace("cand-keep");
        let holder = service(&url, &ns).await;
        let other = service(&url, &ns).await;
        // Equal priority.
        let task = holder
            .start_lease_task("leader", options(eager(3)))
            .await
            .expect("start");
        let token = held(&task).await;
        other
            .start_lease_task("leader", options(eager(3)))
            .await
            .expect("start");
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(task.token(), Some(token), "{backend}: equal priority kept");
        assert!(other.stop_lease_task("leader").await.expect("stop"));
        assert!(holder.stop_lease_task("leader").await.expect("stop"));
        // A holder that is not a candidate, and a far higher priority.
        let plain = holder
            .start_lease_task("leader", LeaseTaskOptions::new())
            .await
            .expect("start");
        let token = held(&plain).await;
        other
            .start_lease_task("leader", options(eager(100)))
            .await
            .expect("start");
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(plain.token(), Some(token), "{backend}: a plain holder kept");
        let all = other
            .elections()
            .participants("leader")
            .await
            .expect("participants");
        assert_eq!(
            summary(&all),
            vec![
                (holder.holder().to_string(), None, None, Some(token)),
                (other.holder().to_string(), Some(100), None, None),
            ],
            "{backend}"
        );
        holder.shutdown().await.expect("shutdown");
        other.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_before_anything_is_written() {
    for (backend, url) in backends("cand-bad") {
        let ns = unique_namespace("cand-bad");
        let s = service(&url, &ns).await;
        let refused = |r: &Result<LeaseTask, Error>| matches!(r, Err(Error::Invalid(_)));
        let too_long_value = LeaseValue::new("v".repeat(1020)).expect("fits alone");
        let over = leasehold::engine::Term::MAX + Duration::from_secs(1);
        // `{name}#ask` fits, `{name}#cand:{holder}` does not.
        let long = "n".repeat(255 - 6 - s.holder().as_str().len() + 1);
        let cases: Vec<(&str, LeaseTaskOptions)> = vec![
            ("", options(Candidate::new())),
            (long.as_str(), options(Candidate::new())),
            ("leader", options(Candidate::new().settle(over))),
            (
                "leader",
                options(Candidate::new().settle(Duration::from_millis(1))),
            ),
            ("leader", options(Candidate::new().min_tenure(over))),
            ("leader", options(Candidate::new().drain_timeout(over))),
            (
                "leader",
                options(Candidate::new().value(too_long_value.clone())),
            ),
            ("leader", options(Candidate::new()).value(too_long_value)),
        ];
        for (name, options) in cases {
            let r = s.start_lease_task(name, options.clone()).await;
            assert!(refused(&r), "{backend}: {name:?} {options:?}: {r:?}");
            let r = s.tasks().start_many([name], options).await;
            assert!(
                matches!(r, Err(Error::Invalid(_))),
                "{backend}: many: {r:?}"
            );
        }
        assert!(matches!(
            s.elections().participants("").await,
            Err(Error::Invalid(_))
        ));
        assert!(
            s.tasks().list().await.expect("list").is_empty(),
            "{backend}"
        );
        let rows = s.locks().held_with_prefix(&ns, "").await.expect("list");
        assert!(rows.is_empty(), "{backend}: rows written: {rows:?}");
        s.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_over_to_a_named_successor() {
    for (backend, url) in backends("cand-next") {
        let ns = unique_namespace("cand-next");
        let h = service(&url, &ns).await;
        let s1 = service(&url, &ns).await;
        let s2 = service(&url, &ns).await;
        let task_h = h
            .start_lease_task("leader", options(candidate(0)))
            .await
            .expect("start");
        let token_h = held(&task_h).await;
        // The other standby counts its tenures: it must get none.
        let grants = Arc::new(AtomicU64::new(0));
        let counted = Arc::clone(&grants);
        let s1_options = options(candidate(0)).on_acquired(move |_, _| {
            counted.fetch_add(1, Ordering::SeqCst);
        });
        s1.start_lease_task("leader", s1_options)
            .await
            .expect("start");
        let task_s2 = s2
            .start_lease_task("leader", options(candidate(0)))
            .await
            .expect("start");
        assert_eq!(listed(&h, 3).await.len(), 3, "{backend}");
        let sampler = Sampler::start((h.clone(), task_h.clone()), (s2.clone(), task_s2.clone()));
        let asked = MonotonicClock.now();
        let outcome = h
            .elections()
            .hand_over_to("leader", s2.holder(), Duration::from_secs(5))
            .await
            .expect("hand over");
        let answered = MonotonicClock.now().duration_since(asked);
        assert_eq!(
            outcome,
            leasehold::HandOver::Drained { token: token_h },
            "{backend}"
        );
        let token_s2 = held(&task_s2).await;
        let (both, rounds, tokens) = sampler.stop();
        assert_eq!(
            both, 0,
            "{backend}: two believers in {both} of {rounds} samples"
        );
        assert!(token_s2 > token_h, "{backend}");
        assert!(
            tokens.windows(2).all(|w| w[0] < w[1]),
            "{backend}: {tokens:?}"
        );
        assert_eq!(
            grants.load(Ordering::SeqCst),
            0,
            "{backend}: the other standby stayed out"
        );
        // The marker is withdrawn; the old holder competes again and is refused.
        let marker = h.current_holder("leader#next").await.expect("read");
        assert!(marker.is_none(), "{backend}: {marker:?}");
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert!(task_s2.has_lease() && !task_h.has_lease(), "{backend}");
        println!("{backend}: handed over to the named successor, answered after {answered:?}");

        // Bad input: nothing written.
        let invalid = |r: &Result<leasehold::HandOver, Error>| matches!(r, Err(Error::Invalid(_)));
        let long = "n".repeat(251);
        let timeout = Duration::from_secs(1);
        assert!(invalid(
            &s2.elections().hand_over_to("", h.holder(), timeout).await
        ));
        assert!(invalid(
            &s2.elections()
                .hand_over_to(&long, h.holder(), timeout)
                .await
        ));
        assert!(invalid(
            &s2.elections()
                .hand_over_to("leader", h.holder(), Duration::ZERO)
                .await
        ));
        assert!(invalid(
            &s2.elections()
                .hand_over_to("leader", s2.holder(), timeout)
                .await
        ));
        let marker = h.current_holder("leader#next").await.expect("read");
        assert!(marker.is_none(), "{backend}: {marker:?}");
        assert_eq!(task_s2.token(), Some(token_s2), "{backend}: still held");
        for s in [&h, &s1, &s2] {
            s.shutdown().await.expect("shutdown");
        }
    }
}
