//! The examples that finish by themselves run and exit 0. `cargo test` builds every example
//! before it runs the tests; this test runs the built binaries.

use std::path::PathBuf;
use std::process::Command;

fn example(name: &str) -> PathBuf {
    // target/<profile>/deps/examples_run-… → target/<profile>/examples/<name>
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target dir")
        .join("examples");
    let path = dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.exists(),
        "{} is not built: run the whole `cargo test -p leasehold` (it builds the examples), not only this test",
        path.display()
    );
    path
}

fn runs(name: &str, args: &[&str], expect: &str) {
    let out = Command::new(example(name))
        .args(args)
        .env_remove("LEASEHOLD_DATABASE_URL")
        .output()
        .expect("run example");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{name} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(expect),
        "{name} did not print {expect:?}:\n{stdout}"
    );
}

#[test]
fn master_standby_fails_over() {
    runs("master_standby", &[], "took over");
}

#[test]
fn local_leases_expire_and_close() {
    runs("local_leases", &[], "session of carol expired");
}

#[test]
fn actix_web_leader_serves_work_only_as_leader() {
    runs("actix_web_leader", &["--smoke"], "done by the leader");
}

#[test]
fn shard_tasks_resplit_when_a_host_leaves() {
    runs("shard_tasks", &[], "host-b leaves gracefully");
}

#[test]
fn observe_leader_sees_the_hand_over_and_the_lapse() {
    runs(
        "observe_leader",
        &[],
        "the observer saw the lapse of node-b's tenure",
    );
}

#[test]
fn fencing_rejects_the_stale_write() {
    runs("fencing", &[], "stale write");
}

#[test]
fn fence_second_database_refuses_the_stale_write() {
    runs(
        "fence_second_database",
        &[],
        "refused at the second database",
    );
}

#[test]
fn prometheus_health_serves_metrics_and_probes() {
    runs("prometheus_health", &["--smoke"], "ready and leading");
}

#[test]
fn graceful_hand_over_lets_the_last_job_finish_first() {
    runs(
        "graceful_hand_over",
        &[],
        "handed over after the last job finished",
    );
}

#[test]
fn ask_release_moves_the_lease_after_the_last_job() {
    runs(
        "ask_release",
        &[],
        "node-b took over from tenure 1 with token 2, after node-a's last job",
    );
}

#[test]
fn candidates_preferred_node_takes_over() {
    runs(
        "candidates",
        &[],
        "node-c took over from tenure 1 with token",
    );
}

#[test]
fn axum_leader_serves_work_as_leader() {
    runs(
        "axum_leader",
        &["--smoke"],
        "POST /work -> done by the leader",
    );
}

#[test]
fn held_permits_hand_a_released_slot_over_at_once() {
    runs("held_permits", &[], "worker-c got permit");
}

#[test]
fn n_holder_tasks_hand_a_stopped_slot_to_the_standby() {
    runs("n_holder_tasks", &[], "two nodes crawl again");
}

#[test]
fn read_write_lock_lets_readers_share_and_the_writer_write_alone() {
    runs("read_write_lock", &[], "reader-b reads the rebuilt catalog");
}

#[test]
fn fair_lock_serves_the_workers_in_arrival_order() {
    runs("fair_lock", &[], "served in arrival order");
}

#[test]
fn once_per_fire_runs_each_fire_once_and_a_crashed_fire_again() {
    runs(
        "once_per_fire",
        &[],
        "node-b ran the crashed fire again after the term",
    );
}

/// The lease task's and the lock's events appear inside their `lease` spans, with the fields.
#[test]
fn tracing_events_show_spans_and_fields() {
    let out = Command::new(example("tracing_events"))
        .output()
        .expect("run example");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "tracing_events failed:\n{stdout}");
    for expect in [
        "lease{namespace=\"\" name=\"report-leader\" holder=\"node-a\" token=",
        "lease{namespace=\"jobs\" name=\"rebuild-index\" holder=\"node-a\" token=",
        "event=\"acquired\"",
        "event=\"released\"",
        "traced a lease task and a lock",
    ] {
        assert!(stdout.contains(expect), "no {expect:?} in:\n{stdout}");
    }
}
