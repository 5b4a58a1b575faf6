//! Once-per-fire scheduled jobs (`Jobs::run_once`) on SQLite (file), PostgreSQL and
//! MySQL: three services standing for three processes, their tickers skewed by about a second,
//! run every fire exactly once, none skipped and never two runs at once; a run that crashes is
//! run again by another service only after its term has lapsed, for the same fire, with a
//! larger token; a job's error leaves its fire due; asks while a run goes on run nothing; a
//! done fire's row outlasts the renewals of its run; bad input is refused.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use leasehold::clock::{Clock, MonotonicClock};
use leasehold::jobs::{FireOutcome, Schedule};
use leasehold::{DbInstant, Error, FencingToken, LeaseService, ValidationError};
use tokio::time::Instant;

const JOB: &str = "report";

/// A service of its own (a process of its own, as far as the database can tell) in `ns`.
async fn process(url: &str, ns: &str) -> LeaseService {
    LeaseService::builder(url)
        .namespace(ns)
        .build()
        .await
        .expect("service")
}

/// The instant on this process's monotonic clock when `service`'s database clock reads `at`
/// (now if that has passed).
async fn local_instant(service: &LeaseService, at: DbInstant) -> Instant {
    let now = service.db_now().await.expect("db time");
    MonotonicClock.now() + at.saturating_since(now)
}

/// One run of the job, as its job saw it.
#[derive(Debug, Clone)]
struct Run {
    runner: usize,
    fire: DbInstant,
    token: FencingToken,
    /// The database's clock when the job started (read after the grant).
    started: DbInstant,
}

type Log = Arc<Mutex<Vec<Run>>>;

fn runs(log: &Log) -> Vec<Run> {
    log.lock().unwrap_or_else(PoisonError::into_inner).clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_skewed_tickers_run_every_fire_exactly_once() {
    for (backend, url) in common::backends("once-per-fire-skew") {
        let ns = common::unique_namespace("once-skew");
        let period = Duration::from_millis(1500);
        let schedule = Schedule::every(period)
            .expect("period")
            .term(Duration::from_secs(1));
        let services = [
            process(&url, &ns).await,
            process(&url, &ns).await,
            process(&url, &ns).await,
        ];
        // Each ticker believes the fires are at its own time: early, on time, late.
        let skews: [i64; 3] = [-900, 0, 1100];
        let log: Log = Arc::default();
        let inside = Arc::new(AtomicUsize::new(0));
        let overlaps = Arc::new(AtomicUsize::new(0));
        let start = services[0].db_now().await.expect("db time");
        let first = schedule.next_fire(start);
        let fires = 5;
        let end = DbInstant(first.as_millis() + fires * period.as_millis() as i64);
        let mut tickers = Vec::new();
        for (runner, service) in services.iter().enumerate() {
            let (service, log) = (service.clone(), Arc::clone(&log));
            let (inside, overlaps) = (Arc::clone(&inside), Arc::clone(&overlaps));
            let skew = skews[runner];
            tickers.push(tokio::spawn(async move {
                let mut fire = first;
                let mut again: Option<DbInstant> = None;
                loop {
                    // The ticker's next tick: its idea of the next fire, or the instant a
                    // refusal named, whichever is sooner.
                    let tick = DbInstant(fire.as_millis() + skew);
                    let at = again.filter(|a| *a < tick).unwrap_or(tick);
                    if at >= end {
                        break;
                    }
                    tokio::time::sleep_until(local_instant(&service, at).await).await;
                    let (s, l) = (service.clone(), Arc::clone(&log));
                    let (i, o) = (Arc::clone(&inside), Arc::clone(&overlaps));
                    let outcome = service
                        .jobs()
                        .run_once(JOB, &schedule, |ctx| async move {
                            if i.fetch_add(1, Ordering::SeqCst) > 0 {
                                o.fetch_add(1, Ordering::SeqCst);
                            }
                            let started = s.db_now().await.expect("db time");
                            l.lock().unwrap_or_else(PoisonError::into_inner).push(Run {
                                runner,
                                fire: ctx.fire(),
                                token: ctx.token(),
                                started,
                            });
                            tokio::time::sleep(Duration::from_millis(300)).await;
                            i.fetch_sub(1, Ordering::SeqCst);
                            Ok::<_, std::io::Error>(())
                        })
                        .await
                        .expect("run_once");
                    if let FireOutcome::Ran { recorded, .. } = &outcome {
                        assert!(recorded, "runner {runner}: a run's fire was not recorded");
                    }
                    // A refusal says until when the row is held; a ticker that ran the fire
                    // keeps its own skewed idea of the next one.
                    again = match &outcome {
                        FireOutcome::Claimed { .. } => outcome.ask_again_at(),
                        _ => None,
                    };
                    if at >= tick {
                        fire = DbInstant(fire.as_millis() + period.as_millis() as i64);
                    }
                }
            }));
        }
        for t in tickers {
            t.await.expect("ticker");
        }
        // An early ticker's first ask may run the fire before `first`: not counted.
        let mut seen: Vec<Run> = runs(&log).into_iter().filter(|r| r.fire >= first).collect();
        seen.sort_by_key(|r| r.fire);
        let fired: Vec<DbInstant> = seen.iter().map(|r| r.fire).collect();
        let expected: Vec<DbInstant> = (0..fires)
            .map(|k| DbInstant(first.as_millis() + k * period.as_millis() as i64))
            .collect();
        assert_eq!(
            fired, expected,
            "{backend}: not exactly one run per fire: {seen:?}"
        );
        assert_eq!(
            overlaps.load(Ordering::SeqCst),
            0,
            "{backend}: two runs at once"
        );
        for r in &seen {
            assert!(
                r.started >= r.fire,
                "{backend}: a fire ran before it was due: {r:?}"
            );
        }
        assert!(
            seen.windows(2).all(|w| w[0].token < w[1].token),
            "{backend}: tokens did not grow from run to run: {seen:?}"
        );
        let runners: std::collections::BTreeSet<usize> = seen.iter().map(|r| r.runner).collect();
        eprintln!("{backend}: fires run by runners {runners:?}");
        for s in services {
            s.shutdown().await.expect("shutdown");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_run_is_run_again_after_its_term_with_a_larger_token() {
    for (backend, url) in common::backends("once-per-fire-crash") {
        let ns = common::unique_namespace("once-crash");
        let term = Duration::from_secs(1);
        let schedule = Schedule::every(Duration::from_secs(4))
            .expect("period")
            .term(term);
        let (a, b, c) = (
            process(&url, &ns).await,
            process(&url, &ns).await,
            process(&url, &ns).await,
        );
        // Start just after a fire, so the re-run (a term later) is due before the next one.
        let fire = schedule.next_fire(a.db_now().await.expect("db time"));
        tokio::time::sleep_until(local_instant(&a, fire).await + Duration::from_millis(50)).await;
        let log: Log = Arc::default();
        let (started_tx, started_rx) = tokio::sync::oneshot::channel();
        let crashed = {
            let (a, l) = (a.clone(), Arc::clone(&log));
            tokio::spawn(async move {
                a.clone()
                    .jobs()
                    .run_once(JOB, &schedule, |ctx| async move {
                        let started = a.db_now().await.expect("db time");
                        l.lock().unwrap_or_else(PoisonError::into_inner).push(Run {
                            runner: 0,
                            fire: ctx.fire(),
                            token: ctx.token(),
                            started,
                        });
                        let _ = started_tx.send(());
                        // Runs for ever: only the crash ends it.
                        std::future::pending::<Result<(), std::io::Error>>().await
                    })
                    .await
            })
        };
        started_rx.await.expect("the first run started");
        // Two renewals go by: the run is held, not merely granted.
        tokio::time::sleep(term).await;
        let row = b
            .current_holder(&format!("{JOB}#once"))
            .await
            .expect("read")
            .expect("the running fire's row is held");
        assert_eq!(&row.holder, a.holder(), "{backend}");
        // The crash: the engine stops without a word to the database; the row only lapses.
        a.abort_without_release().await;
        crashed.abort();
        let first = runs(&log)[0].clone();
        assert_eq!(
            first.fire, fire,
            "{backend}: the first run ran another fire"
        );
        // b and c ask every 100 ms until one of them runs the fire again.
        let deadline = local_instant(&b, DbInstant(fire.as_millis() + 3500)).await;
        let mut claimed_by_a = 0;
        let rerun = 'ask: loop {
            assert!(
                MonotonicClock.now() < deadline,
                "{backend}: the crashed run's fire was not run again"
            );
            for (runner, s) in [(1, &b), (2, &c)] {
                let (s2, l) = (s.clone(), Arc::clone(&log));
                let outcome = s
                    .jobs()
                    .run_once(JOB, &schedule, |ctx| async move {
                        let started = s2.db_now().await.expect("db time");
                        l.lock().unwrap_or_else(PoisonError::into_inner).push(Run {
                            runner,
                            fire: ctx.fire(),
                            token: ctx.token(),
                            started,
                        });
                        Ok::<_, std::io::Error>(())
                    })
                    .await
                    .expect("run_once");
                match outcome {
                    FireOutcome::Ran { recorded, .. } => {
                        assert!(recorded, "{backend}: the re-run was not recorded");
                        break 'ask runs(&log).last().cloned().expect("logged");
                    }
                    FireOutcome::Claimed { holder, .. } => {
                        assert_eq!(&holder, a.holder(), "{backend}: claimed by a non-runner");
                        claimed_by_a += 1;
                    }
                    other => panic!("{backend}: {other:?}"),
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert!(
            claimed_by_a > 0,
            "{backend}: nobody asked while the crashed run's row was live"
        );
        assert_eq!(rerun.fire, fire, "{backend}: the re-run ran another fire");
        assert!(
            rerun.started >= row.until,
            "{backend}: the fire ran again at {} while the crashed run's grant lasted until {}",
            rerun.started,
            row.until
        );
        assert!(
            rerun.token > first.token,
            "{backend}: the re-run's token {} is not above the crashed run's {}",
            rerun.token,
            first.token
        );
        // Done now: the other service finds it recorded.
        let after = c
            .jobs()
            .run_once(JOB, &schedule, |_| async { Ok::<_, std::io::Error>(()) })
            .await
            .expect("run_once");
        assert!(
            matches!(after, FireOutcome::Claimed { until, .. } if until >= schedule.next_fire(fire)),
            "{backend}: the re-run fire was not recorded until the next fire: {after:?}"
        );
        assert_eq!(runs(&log).len(), 2, "{backend}: {:?}", runs(&log));
        b.shutdown().await.expect("shutdown");
        c.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_job_leaves_its_fire_due_and_a_done_fire_is_claimed() {
    for (backend, url) in common::backends("once-per-fire-failed") {
        let ns = common::unique_namespace("once-failed");
        let (a, b) = (process(&url, &ns).await, process(&url, &ns).await);
        let schedule = Schedule::every(Duration::from_secs(3600))
            .expect("period")
            .term(Duration::from_secs(2));
        let failed = a
            .jobs()
            .run_once(JOB, &schedule, |_| async { Err::<(), _>("disk full") })
            .await
            .expect("run_once");
        let FireOutcome::Failed {
            fire,
            token,
            error: "disk full",
        } = failed
        else {
            panic!("{backend}: {failed:?}");
        };
        let ran = b
            .jobs()
            .run_once(JOB, &schedule, |ctx| async move { Ok::<_, ()>(ctx.fire()) })
            .await
            .expect("run_once");
        let FireOutcome::Ran {
            fire: again,
            token: later,
            output,
            recorded: true,
            ..
        } = ran
        else {
            panic!("{backend}: {ran:?}");
        };
        assert!(
            again == fire || again == schedule.next_fire(fire),
            "{backend}: the failed fire was not run again"
        );
        assert_eq!(output, again, "{backend}");
        assert!(
            later > token,
            "{backend}: the second run's token is not larger"
        );
        for s in [&a, &b] {
            let done = s
                .jobs()
                .run_once(JOB, &schedule, |_| async { Ok::<_, ()>(()) })
                .await
                .expect("run_once");
            assert!(
                matches!(&done, FireOutcome::Claimed { holder, until, .. }
                    if holder == b.holder() && *until >= schedule.next_fire(again)),
                "{backend}: a done fire was not claimed until the next one: {done:?}"
            );
        }
        a.shutdown().await.expect("shutdown");
        b.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_ending_just_before_the_next_fire_is_not_run_again() {
    for (backend, url) in common::backends("once-per-fire-close") {
        let ns = common::unique_namespace("once-close");
        let (a, b) = (process(&url, &ns).await, process(&url, &ns).await);
        let schedule = Schedule::every(Duration::from_millis(1500))
            .expect("period")
            .term(Duration::from_secs(1));
        // Asked at a fire, so the job can end 100 ms before the next one: the record is a
        // minimum hold of about 100 ms.
        let fire = schedule.next_fire(a.db_now().await.expect("db time"));
        tokio::time::sleep_until(local_instant(&a, fire).await + Duration::from_millis(20)).await;
        let a2 = a.clone();
        let ran = a
            .jobs()
            .run_once(JOB, &schedule, |ctx| async move {
                let end = DbInstant(ctx.next_fire().as_millis() - 100);
                tokio::time::sleep_until(local_instant(&a2, end).await).await;
                Ok::<_, ()>(ctx.fire())
            })
            .await
            .expect("run_once");
        let FireOutcome::Ran {
            output: done,
            next,
            recorded: true,
            ..
        } = ran
        else {
            panic!("{backend}: {ran:?}");
        };
        // The next ask, at once, runs the next fire: never the one just done.
        let again = b
            .jobs()
            .run_once(JOB, &schedule, |ctx| async move { Ok::<_, ()>(ctx.fire()) })
            .await
            .expect("run_once");
        match again {
            FireOutcome::Ran { output, .. } => {
                assert_eq!(output, next, "{backend}: the fire {done} was run again")
            }
            FireOutcome::Claimed { until, .. } => assert!(
                until >= next,
                "{backend}: the done fire {done} was held only until {until}"
            ),
            other => panic!("{backend}: {other:?}"),
        }
        a.shutdown().await.expect("shutdown");
        b.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_made_as_a_renewal_is_due_is_not_cut_short() {
    for (backend, url) in common::backends("once-per-fire-renewals") {
        let ns = common::unique_namespace("once-renewals");
        let (a, b) = (process(&url, &ns).await, process(&url, &ns).await);
        let term = Duration::from_secs(1);
        let schedule = Schedule::every(Duration::from_secs(4))
            .expect("period")
            .term(term);
        let fire = schedule.next_fire(a.db_now().await.expect("db time"));
        tokio::time::sleep_until(local_instant(&a, fire).await + Duration::from_millis(20)).await;
        // Jobs ending around their third renewal (every term/3): a renewal is often in flight
        // as the job returns, and one landing after the record would end the row a term
        // later, before the next fire.
        let mut jobs = Vec::new();
        for (i, ms) in [980u64, 995, 1000, 1005, 1020].into_iter().enumerate() {
            let a = a.clone();
            jobs.push(tokio::spawn(async move {
                a.jobs()
                    .run_once(&format!("job-{i}"), &schedule, |_| async move {
                        tokio::time::sleep(Duration::from_millis(ms)).await;
                        Ok::<_, ()>(())
                    })
                    .await
                    .expect("run_once")
            }));
        }
        for j in jobs {
            let ran = j.await.expect("job");
            assert!(
                matches!(ran, FireOutcome::Ran { recorded: true, .. }),
                "{backend}: {ran:?}"
            );
        }
        // Past a term after the runs ended, still before the next fire: every fire is done.
        tokio::time::sleep(term + Duration::from_millis(300)).await;
        for i in 0..5 {
            let again = b
                .jobs()
                .run_once(&format!("job-{i}"), &schedule, |_| async {
                    Ok::<_, ()>(())
                })
                .await
                .expect("run_once");
            assert!(
                matches!(&again, FireOutcome::Claimed { until, .. } if *until >= schedule.next_fire(fire)),
                "{backend}: job-{i}'s record was cut short: {again:?}"
            );
        }
        a.shutdown().await.expect("shutdown");
        b.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asks_while_a_run_goes_on_run_nothing() {
    for (backend, url) in common::backends("once-per-fire-busy") {
        let ns = common::unique_namespace("once-busy");
        let (a, b) = (process(&url, &ns).await, process(&url, &ns).await);
        let schedule = Schedule::every(Duration::from_secs(3600))
            .expect("period")
            .term(Duration::from_secs(1));
        let (started_tx, started) = tokio::sync::oneshot::channel();
        let (finish, finished) = tokio::sync::oneshot::channel::<()>();
        let running = {
            let a = a.clone();
            tokio::spawn(async move {
                a.jobs()
                    .run_once(JOB, &schedule, |ctx| async move {
                        let _ = started_tx.send(ctx.token());
                        let _ = finished.await;
                        Ok::<_, ()>(())
                    })
                    .await
                    .expect("run_once")
            })
        };
        let token = started.await.expect("the run started");
        let nothing = |_| async { Ok::<_, ()>(()) };
        let local = a
            .jobs()
            .run_once(JOB, &schedule, nothing)
            .await
            .expect("run_once");
        assert!(
            matches!(local, FireOutcome::HeldLocally),
            "{backend}: {local:?}"
        );
        // Past a term: the run's renewals keep its row.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let other = b
            .jobs()
            .run_once(JOB, &schedule, nothing)
            .await
            .expect("run_once");
        assert!(
            matches!(&other, FireOutcome::Claimed { holder, token: t, .. } if holder == a.holder() && *t == token),
            "{backend}: {other:?}"
        );
        finish.send(()).expect("the job waits");
        let ran = running.await.expect("run");
        assert!(
            matches!(ran, FireOutcome::Ran { recorded: true, token: t, .. } if t == token),
            "{backend}: {ran:?}"
        );
        a.shutdown().await.expect("shutdown");
        b.shutdown().await.expect("shutdown");
    }
}

#[tokio::test]
async fn bad_input_is_refused_before_anything_is_written() {
    let service = LeaseService::builder("sqlite::memory:")
        .build()
        .await
        .expect("service");
    assert!(matches!(
        Schedule::every(Duration::ZERO),
        Err(Error::Invalid(ValidationError::TooShort {
            field: "period",
            ..
        }))
    ));
    let every = Schedule::every(Duration::from_secs(60)).expect("period");
    assert!(matches!(
        every.offset(Duration::from_secs(60)),
        Err(Error::Invalid(ValidationError::Relation {
            field: "offset",
            ..
        }))
    ));
    let job = |_: leasehold::jobs::FireContext| async { Ok::<_, ()>(()) };
    assert!(matches!(
        service.jobs().run_once("", &every, job).await,
        Err(Error::Invalid(ValidationError::Empty { field: "job name" }))
    ));
    assert!(matches!(
        service.jobs().run_once(&"x".repeat(251), &every, job).await,
        Err(Error::Invalid(ValidationError::TooLong { .. }))
    ));
    assert!(matches!(
        service
            .jobs()
            .run_once("j", &every.term(Duration::from_millis(2)), job)
            .await,
        Err(Error::Invalid(ValidationError::Relation {
            field: "ttl",
            ..
        }))
    ));
    assert!(
        service
            .locks()
            .held_with_prefix(service.namespace().as_str(), "")
            .await
            .expect("listing")
            .is_empty(),
        "a refused ask wrote a row"
    );
    service.shutdown().await.expect("shutdown");
}
