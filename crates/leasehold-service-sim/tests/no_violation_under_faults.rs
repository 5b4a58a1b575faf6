//! The whole service under faults: several `LeaseService`s over one store, each running a
//! seeded program over every public API, break no invariant of the oracle.
//!
//! `LEASEHOLD_SIM_SEED=<n>` replays one seed, `LEASEHOLD_SIM_SEEDS=<n>` runs seeds `0..n` (on
//! every backend). Default: 3 seeds on the memory store, 1 on a SQLite file, 1 on PostgreSQL and
//! 1 on MySQL/MariaDB when `LEASEHOLD_TEST_POSTGRES` / `LEASEHOLD_TEST_MYSQL` are set (required
//! when `CI` is set).

use leasehold_service_sim::{Backend, SimReport, SimSpec, backends, run, seeds};

/// Runs `seeds` on `backend` one after another; the summaries of the runs that found a
/// violation (each printed in full on stderr).
async fn run_seeds(backend: Backend, seeds: &[u64]) -> Vec<String> {
    let mut failed: Vec<SimReport> = Vec::new();
    let (mut grants, mut injected, mut late, mut sightings) = (0, 0, 0, 0);
    for &seed in seeds {
        let report = run(SimSpec::new(seed, backend.clone()))
            .await
            .unwrap_or_else(|e| panic!("seed {seed} on {}: {e}", backend.name()));
        grants += report.grants;
        injected += report.injected;
        late += report.applied_late;
        sightings += report.sightings;
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
    failed.iter().map(SimReport::summary).collect()
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
