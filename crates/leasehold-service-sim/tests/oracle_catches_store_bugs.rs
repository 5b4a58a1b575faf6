//! The oracle fails on each known storage bug, put back by the fault layer.
//!
//! Each test runs a short, focused program (lease tasks and locks contending for two names)
//! with one bug put back, and asserts the violation that bug must cause.

use std::time::Duration;

use leasehold_service_sim::{
    Backend, FaultPlan, Invariant, OpWeights, SimReport, SimSpec, StoreBug, backends, run,
};

/// Lease tasks started and stopped, and locks taken and released, on the shared names.
fn contention() -> OpWeights {
    OpWeights {
        start_lease_task: 10,
        stop_lease_task: 6,
        observe_task: 4,
        lock: 8,
        try_locker: 4,
        guard_unlock: 6,
        guard_drop: 2,
        guard_renew: 3,
        pause: 2,
        ..OpWeights::none()
    }
}

fn spec(seed: u64, bug: StoreBug, faults: FaultPlan) -> SimSpec {
    SimSpec {
        duration: Duration::from_secs(3),
        weights: contention(),
        store_bug: Some(bug),
        faults: Some(faults),
        ..SimSpec::new(seed, Backend::Memory)
    }
}

async fn report(spec: SimSpec) -> SimReport {
    let report = run(spec).await.expect("run");
    eprintln!("{report}");
    report
}

/// "A write whose failed commit is reported as success": refused grants answered `Acquired`.
/// Each such guard or task believes a tenure the store never granted to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_commit_reported_as_success_is_caught() {
    let bug = StoreBug::FailedCommitReportedAsSuccess { rate: 0.5 };
    let report = report(spec(11, bug, FaultPlan::none(Duration::from_millis(100)))).await;
    let caught = report
        .of(Invariant::BeliefAfterGrant)
        .any(|v| v.detail.contains("never granted") || v.detail.contains("not to the believer"))
        || report.of(Invariant::TwoBelievers).next().is_some();
    assert!(caught, "the oracle missed the lie: {}", report.summary());
}

/// "A grant taking over one's own live row": grants applied late (after the engine abandoned
/// them) end the live tenure their holder believes in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grant_over_own_live_row_is_caught() {
    let timeout = Duration::from_millis(100);
    let faults = FaultPlan {
        apply_late: 0.3,
        ..FaultPlan::none(timeout)
    };
    let report = report(spec(12, StoreBug::GrantOverOwnLiveRow, faults)).await;
    let caught = report
        .of(Invariant::BeliefAfterGrant)
        .any(|v| v.detail.contains("its grant ended"));
    assert!(
        caught,
        "the oracle missed a belief in a replaced tenure: {}",
        report.summary()
    );
}

/// "A purged name starts again at token 1": with the run's namespace purged at every row check,
/// a name released, purged and granted again gives out a token it had given out before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_resetting_tokens_is_caught() {
    let report = report(spec(
        13,
        StoreBug::PurgeResetsTokens,
        FaultPlan::none(Duration::from_millis(100)),
    ))
    .await;
    assert!(
        report.of(Invariant::TokenRepeated).next().is_some(),
        "the oracle missed a token given out twice: {}",
        report.summary()
    );
}

/// Lease tasks and sharded tasks of one service asking for several names at once, so its grants
/// go out batched (`begin_tenure_many`), with a few locks on the same names.
fn batched_grants() -> OpWeights {
    OpWeights {
        start_lease_task: 10,
        stop_lease_task: 3,
        start_sharded: 8,
        leave: 2,
        lock: 3,
        guard_unlock: 2,
        pause: 2,
        ..no_ops()
    }
}

fn no_ops() -> OpWeights {
    OpWeights {
        lock: 0,
        try_locker: 0,
        guard_unlock: 0,
        guard_drop: 0,
        guard_renew: 0,
        pause: 0,
        start_lease_task: 0,
        stop_lease_task: 0,
        ..contention()
    }
}

/// "A batched grant answering another session's row of its own holder id as granted" (the
/// MySQL batched grant's defect, put back on every SQL backend): only statements stalled inside
/// the database expose it. Another session grants a key of the call to the caller's own holder
/// id, uncommitted, and commits while the batch waits for the row; the batch answers that row
/// `Acquired` and the service believes a tenure no statement of its own was confirmed for (or
/// one its own abandoned grant committed and the coalescer then released). Each backend runs
/// seeds in order until the oracle reports it, at most [`SEEDS_PER_BACKEND`].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_grant_answering_own_row_is_caught() {
    const SEEDS_PER_BACKEND: u64 = 6;
    let timeout = Duration::from_millis(100);
    let faults = FaultPlan {
        uncommitted: 0.6,
        session_own: 1.0,
        session_commits: 1.0,
        session_hold: Duration::from_millis(5)..Duration::from_millis(30),
        ..FaultPlan::none(timeout)
    };
    for backend in backends() {
        let mut tried = Vec::new();
        let caught = 'seeds: {
            for seed in 0..SEEDS_PER_BACKEND {
                let report = report(SimSpec {
                    backend: backend.clone(),
                    weights: batched_grants(),
                    ..spec(seed, StoreBug::BatchGrantAnswersOwnRow, faults.clone())
                })
                .await;
                assert!(
                    report.sql_sessions > 0,
                    "{}: no call was stalled by another session",
                    backend.name()
                );
                let found = report
                    .of(Invariant::BeliefAfterGrant)
                    .next()
                    .or_else(|| report.of(Invariant::TwoBelievers).next())
                    .is_some();
                tried.push(report.summary());
                if found {
                    break 'seeds true;
                }
            }
            false
        };
        assert!(
            caught,
            "{}: the oracle missed a batch answering its own holder's row as granted:\n{}",
            backend.name(),
            tried.join("\n")
        );
    }
}
