//! Every backend under real faults, with holder processes watched on CLOCK_MONOTONIC: zero
//! overlaps, zero fencing violations, no phantom grants (no grant believed that the database
//! never kept).
//!
//! - PostgreSQL and MariaDB, each on a throwaway server of the test's own (never the shared 5432
//!   or 3306), run the same scenarios (`server_faults`): fast shutdown and SIGKILL with
//!   restart, connections blackholed then resumed (`FaultProxy`) or healed for new connections
//!   only, a holder SIGSTOPped inside a fenced transaction, lease rows held `FOR UPDATE` by
//!   another session, the database made read-only, and the server saturated (pgbench,
//!   mariadb-slap).
//! - SQLite: the file locked `EXCLUSIVE` by another process, and the disk full (a tmpfs of its
//!   own filled to the last byte).
//!
//! The backends run one after another (one lock for this file's tests): the scenarios time
//! holders against terms, and two servers under load at once would bend those timings.

mod common;

use std::sync::{Mutex, MutexGuard, PoisonError};

use common::{bin, require, selected, summary};
use leasehold_faults::backend::Backend;
use leasehold_faults::scenario::{
    Down, Heal, blackhole, disk_full, guarded, read_only, rows_locked, saturated, server_down,
    setup, sigstop_in_fenced_txn,
};
use leasehold_faults::servers::{MariaDb, Postgres, SqliteDb};

/// One backend at a time (a failed test's poisoned lock still serialises the others).
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Sets up `db` and runs the scenarios every database server runs against it: fails the test on
/// any violation.
fn server_faults(db: &dyn Backend) {
    let bin = bin();
    setup(&bin, db).expect("setup");
    let mut reports = Vec::new();
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

#[test]
fn postgres_under_real_faults() {
    let _turn = one_at_a_time();
    if let Some(pg) = require("postgres", Postgres::start()) {
        server_faults(&pg);
    }
}

#[test]
fn mariadb_under_real_faults() {
    let _turn = one_at_a_time();
    if let Some(maria) = require("mariadb", MariaDb::start()) {
        server_faults(&maria);
    }
}

#[test]
fn sqlite_under_real_faults() {
    let _turn = one_at_a_time();
    let bin = bin();
    let mut reports = Vec::new();
    if selected("file_locked_exclusive") {
        let db = SqliteDb::new().expect("temp dir");
        if require(
            "sqlite3",
            leasehold_faults::servers::which("sqlite3", "sqlite3"),
        )
        .is_some()
        {
            setup(&bin, &db).expect("setup");
            reports.push(guarded("sqlite", "file_locked_exclusive", || {
                rows_locked(&bin, &db)
            }));
        }
    }
    if selected("disk_full") {
        // A tmpfs needs `mount` (root with CAP_SYS_ADMIN); elsewhere this is a missing tool.
        let small = SqliteDb::on_small_disk(16 * 1024).map_err(|e| {
            leasehold_faults::servers::ServerError::Missing {
                tool: "a mountable tmpfs".into(),
                hint: format!("the disk-full scenario mounts one: {e}"),
            }
        });
        if let Some(db) = require("disk_full", small) {
            setup(&bin, &db).expect("setup");
            reports.push(guarded("sqlite", "disk_full", || disk_full(&bin, &db)));
        }
    }
    summary(&reports);
}
