//! The oracle fails on each known facade bug, put back by the facade's hidden switch
//! (`LeaseServiceBuilder::reintroduce_bug`).

use std::sync::Arc;
use std::time::Duration;

use leasehold::KnownBug;
use leasehold_service_sim::{
    Backend, FaultPlan, Invariant, OpWeights, Signal, SimReport, SimSpec, TokenSource, run,
};

fn none() -> OpWeights {
    OpWeights {
        pause: 1,
        ..OpWeights::none()
    }
}

async fn report(spec: SimSpec) -> SimReport {
    let report = run(spec).await.expect("run");
    eprintln!("{report}");
    report
}

/// "Cancelling a stopped tenure only after the release answer": with release answers slowed
/// down (applied at once, answered late), the stopped tenure's token is still live after the
/// store released it, and another service takes the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_after_release_answer_is_caught() {
    let timeout = Duration::from_millis(100);
    let spec = SimSpec {
        duration: Duration::from_secs(4),
        weights: OpWeights {
            start_lease_task: 10,
            stop_lease_task: 8,
            observe_task: 6,
            hand_over: 0,
            yield_lease: 0,
            ..none()
        },
        faults: Some(FaultPlan {
            slow_answer: 0.4,
            ..FaultPlan::none(timeout)
        }),
        customize: Some(Arc::new(|b| {
            b.reintroduce_bug(KnownBug::CancelAfterReleaseAnswer)
        })),
        ..SimSpec::new(21, Backend::Memory)
    };
    let report = report(spec).await;
    let caught = report.violations.iter().any(|v| {
        matches!(
            v.signal,
            Some(Signal::Uncancelled(_)) | Some(Signal::TaskToken)
        )
    });
    assert!(
        caught,
        "the oracle missed the late cancel: {}",
        report.summary()
    );
}

/// "`shutdown` releasing by holder id without ending guards": a guard still says held (its
/// token uncancelled) after `release_all` freed its row, and another service takes the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_releasing_by_holder_is_caught() {
    let spec = SimSpec {
        duration: Duration::from_secs(4),
        weights: OpWeights {
            lock: 10,
            try_locker: 6,
            shutdown: 3,
            ..none()
        },
        faults: Some(FaultPlan::none(Duration::from_millis(100))),
        customize: Some(Arc::new(|b| {
            b.reintroduce_bug(KnownBug::ShutdownReleasesByHolder)
        })),
        ..SimSpec::new(22, Backend::Memory)
    };
    let report = report(spec).await;
    let caught = report.of(Invariant::BeliefAfterGrant).any(|v| {
        matches!(
            v.signal,
            Some(Signal::GuardIsHeld) | Some(Signal::Uncancelled(TokenSource::Guard))
        )
    });
    assert!(
        caught,
        "the oracle missed the guards released behind their backs: {}",
        report.summary()
    );
}
