//! `leasehold-lab torture` on every backend: worker processes killed with SIGKILL and frozen with
//! SIGSTOP past their term compete for two names; the run must see takeovers (a run without one
//! proves nothing) and no violation of the log invariants.
#![allow(clippy::disallowed_methods)] // the tests time the command from outside

use std::process::Command;
use std::time::{Duration, Instant};

use leasehold_testkit::backends::{MYSQL_ENV, POSTGRES_ENV, backend_url};

/// Figures printed on the last line.
#[derive(Debug)]
struct Figures {
    acquisitions: u64,
    takeovers: u64,
    stale_fenced_rejected: u64,
    violations: u64,
}

fn figure(line: &str, label: &str) -> u64 {
    let rest = line
        .split(&format!("{label}: "))
        .nth(1)
        .unwrap_or_else(|| panic!("no {label} in {line:?}"));
    rest.split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("bad {label} in {line:?}"))
}

fn torture(url: &str, secs: u64) -> Figures {
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold-lab"))
        .args(["--db", url, "torture", "--procs", "3", "--names", "2"])
        .args([
            "--secs",
            &secs.to_string(),
            "--kill",
            "--pause",
            "--term",
            "1s",
        ])
        .env_remove("LEASEHOLD_DATABASE_URL")
        .env("RUST_LOG", "error")
        .output()
        .expect("leasehold runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{url}:\n{stdout}{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(
        started.elapsed() < Duration::from_secs(secs + 30),
        "took {:?}",
        started.elapsed()
    );
    let line = stdout
        .lines()
        .find(|l| l.starts_with("acquisitions: "))
        .unwrap_or_else(|| panic!("no figures in {stdout}"));
    let figures = Figures {
        acquisitions: figure(line, "acquisitions"),
        takeovers: figure(line, "takeovers"),
        stale_fenced_rejected: figure(line, "stale_fenced_rejected"),
        violations: figure(line, "violations"),
    };
    assert_eq!(figures.violations, 0, "{stdout}");
    assert!(
        stdout.contains("workers that exited by themselves: 0"),
        "a worker died without being killed: {stdout}{stderr}"
    );
    assert!(figures.takeovers > 0, "no takeover happened: {stdout}");
    assert!(
        figures.acquisitions > figures.takeovers,
        "every takeover is an acquisition after the first: {figures:?}"
    );
    figures
}

#[test]
fn sqlite_file_survives_kills_and_pauses() {
    let dir = std::env::temp_dir().join(format!("leasehold-torture-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let url = format!("sqlite://{}?mode=rwc", dir.join("torture.db").display());
    let figures = torture(&url, 15);
    eprintln!(
        "sqlite: {figures:?} ({} fenced refusals)",
        figures.stale_fenced_rejected
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn postgres_survives_kills_and_pauses() {
    if let Some(url) = backend_url(POSTGRES_ENV) {
        torture(&url, 15);
    }
}

#[test]
fn mysql_survives_kills_and_pauses() {
    if let Some(url) = backend_url(MYSQL_ENV) {
        torture(&url, 15);
    }
}

#[test]
fn bad_torture_arguments_are_refused_before_anything_starts() {
    for (args, needle) in [
        (&["--procs", "1"][..], "--procs"),
        (&["--names", "0"][..], "--names"),
        (&["--secs", "0"][..], "--secs"),
        (&["--term", "10ms"][..], "--term"),
        (&["--term", "-1s"][..], "negative"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_leasehold-lab"))
            .args(["--db", "sqlite::memory:", "torture"])
            .args(args)
            .env_remove("LEASEHOLD_DATABASE_URL")
            .output()
            .expect("leasehold runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?} started a run");
    }
}
