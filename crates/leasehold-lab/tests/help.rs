//! `leasehold-lab --help` lists the lab's commands, and every one of them (the hidden children
//! too) shows an example; a bad argument exits 2 with one line naming it.

use std::process::{Command, Output};

fn lab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_leasehold-lab"))
        .args(args)
        .env_remove("LEASEHOLD_DATABASE_URL")
        .env_remove("RUST_LOG")
        .output()
        .expect("leasehold-lab runs")
}

fn ok(out: &Output, what: &str) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{what}: {stderr}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn every_lab_command_help_shows_an_example() {
    let top = ok(&lab(&["--help"]), "--help");
    assert!(top.contains("Example"), "{top}");
    let mut commands: Vec<String> = top
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .filter(|c| c != "help")
        .collect();
    commands.sort();
    assert_eq!(
        commands,
        ["bench", "capacity", "demo", "report", "torture"],
        "{top}"
    );
    for command in commands.iter().map(String::as_str).chain([
        "bench-peer",
        "torture-worker",
        "capacity-holder",
    ]) {
        let help = ok(&lab(&[command, "--help"]), command);
        assert!(
            help.lines().any(|l| l.trim_start().starts_with("Example")),
            "{command} --help has no Example line:\n{help}"
        );
    }
}

#[test]
fn a_bad_argument_exits_2_with_one_line() {
    let out = lab(&["torture", "--procs", "many"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("leasehold-lab: "), "{stderr}");
    assert!(stderr.contains("many"), "{stderr}");
}
