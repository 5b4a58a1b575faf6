//! The README's main command: `leasehold-lab demo` finishes by itself with a failover, moved
//! tasks, a drained graceful hand-over and no double holder.

use std::process::Command;

fn lab() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_leasehold-lab"));
    c.env_remove("LEASEHOLD_DATABASE_URL");
    c
}

fn summary_field(line: &str, field: &str) -> u64 {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{field}=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {field}= in {line:?}"))
}

#[test]
fn demo_fails_over_moves_tasks_and_never_has_two_holders() {
    let out = lab().arg("demo").output().expect("run demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "demo failed: {stdout}\n{stderr}");
    let line = stdout
        .lines()
        .find(|l| l.starts_with("demo: "))
        .expect("summary line");
    assert_eq!(summary_field(line, "double_holders"), 0, "{stdout}");
    assert!(summary_field(line, "failovers") >= 1, "{line}");
    assert!(summary_field(line, "tasks_moved") >= 1, "{line}");
    assert!(summary_field(line, "masters") >= 2, "{line}");
    assert!(
        stdout.contains("REJECTED"),
        "the stale fenced write was not shown rejected:\n{stdout}"
    );
    assert!(
        stdout.contains("its work returned, then it released the master lease"),
        "the graceful hand-over did not drain:\n{stdout}"
    );
}
