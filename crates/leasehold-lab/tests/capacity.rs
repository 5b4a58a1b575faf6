//! `leasehold-lab capacity` on every backend, small: two holder processes hold their leases through
//! several renew intervals without losing one, and the report carries the server's counters where
//! the backend has them.

use std::process::Command;

use leasehold_testkit::backends::{MYSQL_ENV, POSTGRES_ENV, backend_url};

fn capacity(url: &str, prefix: &str) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold-lab"))
        .args(["--db", url, "--table-prefix", prefix, "capacity"])
        .args(["--processes", "2", "--leases", "150"])
        .args(["--term", "1500ms", "--hold", "2500ms", "--json"])
        .env_remove("LEASEHOLD_DATABASE_URL")
        .output()
        .expect("run capacity");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "capacity failed: {stdout}\n{stderr}");
    let report: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    assert_eq!(report["leases"], 300, "{report}");
    assert_eq!(report["lost"], 0, "{report}");
    assert_eq!(report["lost_events"], 0, "{report}");
    // 2.5 s at a renewal every 500 ms: about five renewals of each lease were expected.
    let expected = report["renewals_expected"].as_f64().expect("renewals");
    assert!(expected >= 300.0 * 4.0, "{report}");
    report
}

#[test]
fn sqlite_file_holds_every_lease() {
    let dir = std::env::temp_dir().join(format!("leasehold-capacity-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let url = format!("sqlite://{}?mode=rwc", dir.join("capacity.db").display());
    let report = capacity(&url, "");
    assert!(report["server_cpu_s"].is_null(), "no server: {report}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn postgres_holds_every_lease_and_reports_wal_and_commits() {
    if let Some(url) = backend_url(POSTGRES_ENV) {
        let report = capacity(&url, "labcap_");
        let per = &report["per_renew_interval"];
        assert!(
            per["log_bytes"].as_f64().is_some_and(|b| b > 0.0),
            "{report}"
        );
        assert!(per["commits"].as_f64().is_some_and(|c| c > 0.0), "{report}");
    }
}

#[test]
fn mysql_holds_every_lease_and_reports_redo_and_statements() {
    if let Some(url) = backend_url(MYSQL_ENV) {
        let report = capacity(&url, "labcap_");
        let per = &report["per_renew_interval"];
        assert!(
            per["log_bytes"].as_f64().is_some_and(|b| b > 0.0),
            "{report}"
        );
        assert!(
            per["statements"].as_f64().is_some_and(|s| s > 0.0),
            "{report}"
        );
    }
}

#[test]
fn bad_capacity_arguments_are_refused_before_anything_starts() {
    let file = "sqlite:///nonexistent-dir/never-created.db";
    for (db, args, needle) in [
        (file, &["--processes", "0"][..], "--processes"),
        (file, &["--leases", "0"][..], "--leases"),
        (file, &["--term", "10ms"][..], "--term"),
        ("sqlite::memory:", &[][..], "in-memory"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_leasehold-lab"))
            .args(["--db", db, "capacity"])
            .args(args)
            .env_remove("LEASEHOLD_DATABASE_URL")
            .output()
            .expect("run capacity");
        assert!(!out.status.success(), "{args:?} accepted");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
}
