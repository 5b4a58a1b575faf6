//! `leasehold check` measures the clock-rate difference over a window and exits 5, saying why,
//! when it cannot show it within `safety-margin / term`: here with a 1 ms margin on a 30 s term
//! (a tolerance of 3.3e-5, finer than a millisecond clock shows in 0.3 s), on every backend.
//! The passing verdict is tested by `leasehold`'s `clock_rate_check` (library) on every backend.
//! `--clock-only` skips the conformance suite (tens of seconds on PostgreSQL and MariaDB).

use std::process::Command;

use leasehold_testkit::backends::{MYSQL_ENV, POSTGRES_ENV, backend_url};

fn urls() -> Vec<String> {
    let dir = std::env::temp_dir().join(format!("leasehold-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let mut all = vec![format!(
        "sqlite://{}?mode=rwc",
        dir.join("check.db").display()
    )];
    all.extend(backend_url(POSTGRES_ENV));
    all.extend(backend_url(MYSQL_ENV));
    all
}

#[test]
fn check_exits_5_when_the_clock_rate_cannot_be_shown_within_the_margin() {
    for url in urls() {
        let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
            .env_remove("LEASEHOLD_DATABASE_URL")
            .args(["--db", &url, "--table-prefix", "clockcheck_", "check"])
            .args(["--term", "30s", "--safety-margin", "1ms"])
            .args([
                "--clock-window",
                "300ms",
                "--clock-samples",
                "4",
                "--clock-only",
            ])
            .output()
            .expect("run check");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(5), "{url}:\n{stdout}\n{stderr}");
        assert!(
            stdout.contains(
                "clock rate (term 30s, safety margin 1ms): database clock rate minus monotonic ="
            ),
            "{url}: {stdout}"
        );
        assert!(stdout.contains("4 samples"), "{url}: {stdout}");
        assert!(
            stderr.contains("cannot be shown within the tolerated 0.000033 (safety_margin / term)"),
            "{url}: {stderr}"
        );
        // The same measurement with the default margin (2 s of 30 s) passes.
        let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
            .env_remove("LEASEHOLD_DATABASE_URL")
            .args([
                "--db",
                &url,
                "--table-prefix",
                "clockcheck_",
                "check",
                "--clock-only",
            ])
            .args(["--clock-window", "300ms", "--clock-samples", "4"])
            .output()
            .expect("run check");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{url}: {stdout}");
        assert!(
            stdout.contains("within the tolerated 0.066667"),
            "{url}: {stdout}"
        );
    }
}

#[test]
fn check_refuses_bad_clock_options_before_connecting() {
    for args in [["--clock-samples", "2"], ["--clock-window", "1ms"]] {
        let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
            .env_remove("LEASEHOLD_DATABASE_URL")
            .args(["--db", "postgres://nobody@127.0.0.1:1/none", "check"])
            .args(args)
            .output()
            .expect("run check");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("clock-rate"), "{args:?}: {stderr}");
    }
}
