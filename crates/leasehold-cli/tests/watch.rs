//! `leasehold watch` prints plain change lines when not on a terminal.

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
