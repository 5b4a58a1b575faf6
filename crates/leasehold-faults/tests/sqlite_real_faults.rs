//! SQLite under real faults: the file locked `EXCLUSIVE` by another process, and the disk
//! full (a tmpfs of its own filled to the last byte), with holder processes watched on
//! CLOCK_MONOTONIC. Zero overlaps, zero fencing violations, no grant believed that the file
//! never kept.

mod common;

use common::{bin, require, selected, summary};
use leasehold_faults::scenario::{disk_full, guarded, rows_locked, setup};
use leasehold_faults::servers::SqliteDb;

#[test]
fn sqlite_under_real_faults() {
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
