//! The whole service under faults: several `LeaseService`s over one store, each running a
//! seeded program over every public API, break no invariant of the oracle.
//!
//! `LEASEHOLD_SIM_SEED=<n>` replays one seed, `LEASEHOLD_SIM_SEEDS=<n>` runs seeds `0..n` (on
//! every backend). Default: 3 seeds on the memory store, 1 on a SQLite file, 1 on PostgreSQL and
//! 1 on MySQL/MariaDB when `LEASEHOLD_TEST_POSTGRES` / `LEASEHOLD_TEST_MYSQL` are set (required
//! when `CI` is set). The SQL runs also stall calls inside the database beside another session
//! (`FaultPlan::standard_sql`).

use leasehold_service_sim::{Backend, SimReport, SimSpec, backends, run, seeds};

/// Runs `seeds` on `backend` one after another; the summaries of the runs that found a
/// violation (each printed in full on stderr).
async fn run_seeds(backend: Backend, seeds: &[u64]) -> Vec<String> {
    let mut failed: Vec<SimReport> = Vec::new();
    let (mut grants, mut injected, mut late, mut sightings, mut sessions) = (0, 0, 0, 0, 0);
    for &seed in seeds {
        let report = run(SimSpec::new(seed, backend.clone()))
            .await
            .unwrap_or_else(|e| panic!("seed {seed} on {}: {e}", backend.name()));
        grants += report.grants;
        injected += report.injected;
        late += report.applied_late;
        sightings += report.sightings;
        sessions += report.sql_sessions;
        if !report.is_ok() {
            eprintln!("{report}");
            failed.push(report);
        }
    }
    // A run that granted nothing, injected nothing or saw no belief proves nothing.
    assert!(
        grants > 0 && sightings > 0,
        "nothing was granted or believed"
    );
    assert!(injected > 0 && late > 0, "no faults were injected");
    // On the SQL stores some calls stall inside the database, beside another session.
    assert!(
        sessions > 0 || !backend.is_sql(),
        "{}: no call was stalled by another session",
        backend.name()
    );
    failed.iter().map(brief).collect()
}

/// A failed run's summary and the first line of each violation, for the panic message (the full
/// report with each scenario went to stderr, which a CI log may cut).
fn brief(report: &SimReport) -> String {
    let mut text = report.summary();
    for v in &report.violations {
        text.push_str(&format!(
            "\n  [{:?}] at {:.3?}: {}",
            v.invariant, v.at, v.detail
        ));
    }
    text
}

fn assert_none(failed: &[String]) {
    assert!(
        failed.is_empty(),
        "{} runs broke an invariant (full reports above):\n{}",
        failed.len(),
        failed.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_seeds() {
    assert_none(&run_seeds(Backend::Memory, &seeds(3)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_backends() {
    let mut failed = Vec::new();
    for backend in backends() {
        failed.extend(run_seeds(backend, &seeds(1)).await);
    }
    assert_none(&failed);
}

/// Lease tasks handed over and yielded with work running, contending for the shared names
/// under the default faults, on every backend (seed 0; `LEASEHOLD_SIM_SEEDS` for more).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_over_and_yield_under_faults() {
    use leasehold_service_sim::OpWeights;
    let weights = OpWeights {
        start_lease_task: 10,
        stop_lease_task: 1,
        observe_task: 4,
        hand_over: 5,
        yield_lease: 6,
        pause: 2,
        ..OpWeights::none()
    };
    on_every_backend_3s(&weights).await;
}

/// Semaphore permits, taken once or held (renewed by the engine; released by handle or by
/// name, or their handles dropped), and multi-locks (with plain locks on the same names, guard
/// unlocks, drops and renewals) under the default faults, on every backend: at most `N` believers per
/// semaphore, never two believers of a key, and a multi-lock believed only while every key of
/// its set is granted (seed 0; `LEASEHOLD_SIM_SEEDS` for more).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_and_multi_locks_under_faults() {
    use leasehold_service_sim::OpWeights;
    let weights = OpWeights {
        lock: 4,
        try_locker: 2,
        guard_unlock: 4,
        guard_drop: 3,
        guard_renew: 3,
        unlock_by_name: 2,
        permit: 10,
        hold_permit: 8,
        held_permit_end: 5,
        lock_all: 10,
        multi_end: 6,
        read: 1,
        shutdown: 1,
        drop_service: 1,
        pause: 3,
        ..OpWeights::none()
    };
    on_every_backend_3s(&weights).await;
}

/// N-holder lease tasks (`start_lease_task_with_permits`, two permits over the services),
/// started and stopped, with `on_acquired` panicking now and then, held permits of the same
/// kind on another semaphore, and service shutdowns and drops, under the default faults, on
/// every backend: at most `N` believers of the task by any signal (its handles' `has_lease` and
/// `held_slot`, every slot's cancellation token), never two believers of a slot, no belief past
/// a slot's grant (seed 0; `LEASEHOLD_SIM_SEEDS` for more).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn n_holder_lease_tasks_under_faults() {
    use leasehold_service_sim::OpWeights;
    let weights = OpWeights {
        start_permit_task: 10,
        stop_permit_task: 6,
        hold_permit: 3,
        held_permit_end: 2,
        read: 1,
        shutdown: 1,
        drop_service: 1,
        pause: 3,
        ..OpWeights::none()
    };
    on_every_backend_3s(&weights).await;
}

/// Owners re-entering their locks (`Locks::owned_by`), with plain locks, waits, renewals,
/// releases by name and service ends on the same names, under the default faults, on every
/// backend: never two believers of a key, belief never past the grant, and an owner's last
/// guard given up (unlocked or dropped) leaves no row held (seed 0; `LEASEHOLD_SIM_SEEDS` for
/// more).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentrant_locks_under_faults() {
    use leasehold_service_sim::OpWeights;
    let weights = OpWeights {
        lock: 3,
        try_locker: 2,
        guard_unlock: 2,
        guard_drop: 1,
        guard_renew: 2,
        unlock_by_name: 2,
        reenter: 12,
        reentrant_end: 8,
        read: 1,
        shutdown: 1,
        drop_service: 1,
        pause: 3,
        ..OpWeights::none()
    };
    on_every_backend_3s(&weights).await;
}

/// Once-per-fire jobs (`run_once`: two jobs, a period of one term, runs past their renewals
/// and past the next fire, failing now and then) beside plain locks on other names, with
/// service ends, under the default faults, on every backend: a run's cancellation token is
/// never believed beside another run's or past its grant, and a done fire's row lapses within
/// a term of its run (seed 0; `LEASEHOLD_SIM_SEEDS` for more).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn once_per_fire_jobs_under_faults() {
    use leasehold_service_sim::OpWeights;
    let weights = OpWeights {
        lock: 3,
        guard_unlock: 2,
        guard_drop: 1,
        guard_renew: 1,
        run_once: 12,
        read: 1,
        shutdown: 1,
        drop_service: 1,
        pause: 2,
        ..OpWeights::none()
    };
    on_every_backend_3s(&weights).await;
}

/// Read-write locks (readers and writers, one attempt or waiting, unlocked, dropped or renewed)
/// on the plain lock names, beside plain locks and service ends, under the default faults, on
/// every backend: a writer is never believed beside a reader or another writer of its lock,
/// no reader or writer is believed past its grant, and a gate held by a writer waiting for the
/// readers is not leaked (seed 0; `LEASEHOLD_SIM_SEEDS` for more).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_write_locks_under_faults() {
    use leasehold_service_sim::OpWeights;
    let weights = OpWeights {
        lock: 2,
        guard_unlock: 1,
        guard_drop: 1,
        shared_lock: 12,
        exclusive_lock: 8,
        rw_end: 10,
        read: 1,
        shutdown: 1,
        drop_service: 1,
        pause: 2,
        ..OpWeights::none()
    };
    on_every_backend_3s(&weights).await;
}

/// Fair locks (`acquire_fair_within` queued behind other services' waiters, giving up within
/// half a term or dropped part-way; `acquire_fair`) beside plain locks, waits, renewals and
/// service ends on the same names, under the default faults, on every backend: never two
/// believers of a key, belief never past the grant, and no dispenser or ticket row outliving
/// its waiter by more than the leak window (seed 0; `LEASEHOLD_SIM_SEEDS` for more).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_locks_under_faults() {
    use leasehold_service_sim::OpWeights;
    let weights = OpWeights {
        lock: 3,
        try_locker: 2,
        guard_unlock: 4,
        guard_drop: 2,
        guard_renew: 2,
        unlock_by_name: 1,
        fair_lock: 12,
        read: 1,
        shutdown: 1,
        drop_service: 1,
        pause: 2,
        ..OpWeights::none()
    };
    on_every_backend_3s(&weights).await;
}

/// Runs `weights` for 3 s on the memory store and every backend (seed 0; `LEASEHOLD_SIM_SEEDS`
/// for more): no run may report a violation, and each backend's runs together must grant a few
/// times and, on the SQL stores, stall a call beside another session. With one call in sixteen
/// stalled, a 3 s run of a mix with few calls can draw none (one run in thirty or so); then
/// the next seeds run too, at most `MORE_SEEDS` of them, each checked like the first.
async fn on_every_backend_3s(weights: &leasehold_service_sim::OpWeights) {
    /// How many further seeds a backend may run to show its grants and stalled calls.
    const MORE_SEEDS: u64 = 3;
    let mut failed = Vec::new();
    let runs = std::iter::once(Backend::Memory)
        .chain(backends())
        .flat_map(|b| seeds(1).into_iter().map(move |s| (s, b.clone())));
    for (first, backend) in runs {
        let (mut grants, mut sessions) = (0, 0);
        for seed in first..=first + MORE_SEEDS {
            let shown = grants > 3 && (sessions > 0 || !backend.is_sql());
            if shown {
                break;
            }
            let spec = SimSpec {
                weights: weights.clone(),
                duration: std::time::Duration::from_secs(3),
                ..SimSpec::new(seed, backend.clone())
            };
            let report = run(spec)
                .await
                .unwrap_or_else(|e| panic!("{}: {e}", backend.name()));
            grants += report.grants;
            sessions += report.sql_sessions;
            if !report.is_ok() {
                eprintln!("{report}");
                failed.push(report.summary());
            }
        }
        assert!(
            grants > 3,
            "{}: too few grants to show anything",
            backend.name()
        );
        assert!(
            sessions > 0 || !backend.is_sql(),
            "{}: no call was stalled by another session in {} runs",
            backend.name(),
            MORE_SEEDS + 1
        );
    }
    assert_none(&failed);
}

/// Cooperative revocation: lease tasks (half of them revocable, with a drain timeout up to a
/// term and a half) with work running, asked for by other services (`ask_release`, patience up
/// to two terms, forcing one time in three), beside stops and service ends, under the default
/// faults, on every backend: a holder and its asker are never believed together, nobody
/// believes past its grant, no ask's row is leaked, every ask returns within its patience and
/// the settling bound (seed 0; `LEASEHOLD_SIM_SEEDS` for more).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_release_under_faults() {
    use leasehold_service_sim::OpWeights;
    let weights = OpWeights {
        start_lease_task: 6,
        stop_lease_task: 1,
        observe_task: 3,
        ask_release: 8,
        read: 1,
        shutdown: 1,
        drop_service: 1,
        pause: 2,
        ..OpWeights::none()
    };
    on_every_backend_3s(&weights).await;
}

/// Candidates and priority: lease tasks (half of them candidates with a priority of 0–3, a
/// settle time of half a term to a term and a half, a minimum tenure and a drain up to a term)
/// pre-empting each other, listed with `participants` and handed over to named successors
/// (`hand_over_to`, with work running), beside asks, stops and service ends, under the default
/// faults, on every backend: never two believers (candidacy rows and markers included), nobody
/// believes past its grant, no candidacy row or marker is leaked, every call returns within its
/// bound (seed 0; `LEASEHOLD_SIM_SEEDS` for more).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn candidates_under_faults() {
    use leasehold_service_sim::OpWeights;
    let weights = OpWeights {
        start_lease_task: 6,
        stop_lease_task: 1,
        observe_task: 2,
        ask_release: 1,
        candidate: 6,
        read: 1,
        shutdown: 1,
        drop_service: 1,
        pause: 2,
        ..OpWeights::none()
    };
    on_every_backend_3s(&weights).await;
}
