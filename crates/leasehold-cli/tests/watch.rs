//! `leasehold watch` prints plain change lines when not on a terminal, and with `--json` one
//! JSON object per change.

use std::process::Command;

fn leasehold() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_leasehold"));
    c.env_remove("LEASEHOLD_DATABASE_URL");
    c
}

/// `leasehold lock jobs NAME --holder ops --ttl TTL` on `url`, which must succeed.
fn lock(url: &str, name: &str, ttl: &str) {
    let out = leasehold()
        .args([
            "--db", url, "lock", "jobs", name, "--holder", "ops", "--ttl", ttl,
        ])
        .output()
        .expect("lock");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn watch_prints_changes_as_plain_lines_off_a_terminal() {
    let dir = std::env::temp_dir().join(format!("leasehold-watch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let url = format!("sqlite://{}?mode=rwc", dir.join("w.db").display());
    lock(&url, "report%1", "1m");
    let out = leasehold()
        .args([
            "--db",
            &url,
            "watch",
            "--namespace",
            "jobs",
            "--interval",
            "100ms",
            "--count",
            "2",
        ])
        .output()
        .expect("watch");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "one change (the held lock), then nothing new: {stdout}"
    );
    assert!(
        lines[0].contains("held")
            && lines[0].contains("jobs/report%1")
            && lines[0].contains("holder ops"),
        "{stdout}"
    );
    assert!(
        !stdout.contains('\x1b'),
        "escape codes off a terminal: {stdout:?}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn watch_with_names_prints_the_state_then_each_change() {
    let dir = std::env::temp_dir().join(format!("leasehold-watch-names-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let url = format!("sqlite://{}?mode=rwc", dir.join("w.db").display());
    lock(&url, "nightly", "2s");
    // Three lines: the held lock, the other name's absence (in either order), then the lapse
    // of the lock at the end of its ttl, seen although the poll is far longer.
    let out = leasehold()
        .args([
            "--db",
            &url,
            "watch",
            "--namespace",
            "jobs",
            "--name",
            "nightly",
            "--name",
            "never",
            "--interval",
            "1h",
            "--count",
            "3",
        ])
        .output()
        .expect("watch");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    let held = lines
        .iter()
        .position(|l| l.contains("held") && l.contains("jobs/nightly") && l.contains("holder ops"))
        .expect("the held lock");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("absent") && l.contains("jobs/never")),
        "{stdout}"
    );
    assert!(
        lines[2].contains("ended") && lines[2].contains("jobs/nightly") && held < 2,
        "the lapse comes last: {stdout}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

fn json_lines(stdout: &[u8]) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

#[test]
fn watch_json_prints_one_object_per_change() {
    let dir = std::env::temp_dir().join(format!("leasehold-watch-json-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let url = format!("sqlite://{}?mode=rwc", dir.join("w.db").display());
    lock(&url, "nightly", "2s");
    // The listing: the held lock, then its end once its two seconds ran out.
    let out = leasehold()
        .args([
            "--db",
            &url,
            "watch",
            "--namespace",
            "jobs",
            "--interval",
            "250ms",
            "--count",
            "14",
            "--json",
        ])
        .output()
        .expect("watch");
    assert!(out.status.success(), "{out:?}");
    let events = json_lines(&out.stdout);
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[0]["event"], "held", "{events:?}");
    assert_eq!(events[0]["namespace"], "jobs", "{events:?}");
    assert_eq!(events[0]["name"], "nightly", "{events:?}");
    assert_eq!(events[0]["holder"], "ops", "{events:?}");
    assert_eq!(events[0]["token"], 1, "{events:?}");
    assert!(
        events[0]["time_left_ms"]
            .as_u64()
            .is_some_and(|ms| ms <= 2000),
        "{events:?}"
    );
    assert!(events[0]["db_now_ms"].is_i64(), "{events:?}");
    assert_eq!(events[1]["event"], "ended", "{events:?}");
    assert_eq!(events[1]["token"], 1, "{events:?}");

    // Observing names: the state of each, then the change.
    lock(&url, "nightly", "2s");
    let out = leasehold()
        .args([
            "--db",
            &url,
            "watch",
            "--namespace",
            "jobs",
            "--name",
            "nightly",
            "--name",
            "never",
            "--interval",
            "1h",
            "--count",
            "3",
            "--json",
        ])
        .output()
        .expect("watch");
    assert!(out.status.success(), "{out:?}");
    let events = json_lines(&out.stdout);
    assert_eq!(events.len(), 3, "{events:?}");
    assert!(
        events
            .iter()
            .take(2)
            .any(|e| e["event"] == "absent" && e["name"] == "never" && e.get("holder").is_none()),
        "{events:?}"
    );
    assert!(
        events
            .iter()
            .take(2)
            .any(|e| e["event"] == "held" && e["name"] == "nightly" && e["token"] == 2),
        "{events:?}"
    );
    assert_eq!(events[2]["event"], "ended", "{events:?}");
    assert_eq!(events[2]["name"], "nightly", "{events:?}");
    assert_eq!(events[2]["time_left_ms"], 0, "{events:?}");
    let _ = std::fs::remove_dir_all(dir);
}
