//! PostgreSQL under real faults, on a throwaway server of the test's own (never the shared
//! 5432): fast shutdown and SIGKILL with restart, connections blackholed then resumed
//! (`FaultProxy`) or healed for new connections only, a holder SIGSTOPped inside a fenced
//! transaction, lease rows held `FOR UPDATE` by another session, the database made read-only,
//! and the server saturated by pgbench. Holder processes are watched on CLOCK_MONOTONIC: zero
//! overlaps, zero fencing violations, no phantom grants.

mod common;

use common::{bin, require, selected, summary};
use leasehold_faults::backend::Backend;
use leasehold_faults::scenario::{
    Down, Heal, blackhole, guarded, read_only, rows_locked, saturated, server_down, setup,
    sigstop_in_fenced_txn,
};
use leasehold_faults::servers::Postgres;

#[test]
fn postgres_under_real_faults() {
    let Some(pg) = require("postgres", Postgres::start()) else {
        return;
    };
    let bin = bin();
    setup(&bin, &pg).expect("setup");
    let mut reports = Vec::new();
    let db = &pg;
    let scenarios: Vec<(&str, Box<dyn Fn() -> _>)> = vec![
        (
            "server_stop_fast",
            Box::new(|| server_down(&bin, db, Down::Fast)),
        ),
        (
            "server_sigkill",
            Box::new(|| server_down(&bin, db, Down::Kill)),
        ),
        (
            "blackhole_then_resume",
            Box::new(|| blackhole(&bin, db, Heal::Resume)),
        ),
        (
            "blackhole_then_only_new_connections",
            Box::new(|| blackhole(&bin, db, Heal::NewOnly)),
        ),
        (
            "sigstop_in_fenced_txn",
            Box::new(|| sigstop_in_fenced_txn(&bin, db)),
        ),
        ("rows_held_for_update", Box::new(|| rows_locked(&bin, db))),
        ("read_only", Box::new(|| read_only(&bin, db))),
        ("saturated", Box::new(|| saturated(&bin, db))),
    ];
    for (name, f) in scenarios {
        if selected(name) {
            reports.push(guarded(db.name(), name, f));
        }
    }
    summary(&reports);
}
