//! `leasehold check` given a MySQL/MariaDB URL naming several nodes (a Galera cluster's form)
//! measures each node's clock against the first and exits 6 when one is not shown within the
//! safety margin. Here the test server is named twice: its two "nodes" share one clock, so the
//! offset is within a 2 s margin, and a 1 ms margin cannot hold the measurement's own
//! uncertainty (a millisecond of resolution plus the round trips). Then a throwaway MariaDB
//! whose clock runs 3 s ahead (libfaketime) is named beside the test server: check must measure
//! about +3 s and exit 6 under a 1 s margin, naming the node.

use std::process::Command;

use leasehold_testkit::backends::{MYSQL_ENV, backend_url};

/// `url` with its one `host:port` named twice.
fn twice(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a server URL");
    let (user, rest) = match rest.rsplit_once('@') {
        Some((u, r)) => (format!("{u}@"), r),
        None => (String::new(), rest),
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (host, tail) = rest.split_at(end);
    let host = if host.contains(':') {
        host.to_owned()
    } else {
        format!("{host}:3306")
    };
    format!("{scheme}://{user}{host},{host}{tail}")
}

fn check(url: &str, margin: &str) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .env_remove("LEASEHOLD_DATABASE_URL")
        .args(["--db", url, "--table-prefix", "nodeclocks_", "check"])
        .args(["--term", "30s", "--safety-margin", margin, "--clock-only"])
        .output()
        .expect("run check");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn check_compares_the_clocks_of_every_node_named() {
    let Some(url) = backend_url(MYSQL_ENV) else {
        return;
    };
    let nodes = twice(&url);
    let (code, stdout, stderr) = check(&nodes, "2s");
    println!("{stdout}");
    assert_eq!(code, Some(0), "{nodes}:\n{stdout}\n{stderr}");
    assert!(
        stdout.contains("node 2 clock minus node 1:")
            && stdout.contains("within the safety margin"),
        "{stdout}"
    );
    let (code, stdout, stderr) = check(&nodes, "1ms");
    assert_eq!(code, Some(6), "{nodes}:\n{stdout}\n{stderr}");
    assert!(
        stderr.contains("nodes' clocks are not shown to agree within the safety margin (1ms)"),
        "{stderr}"
    );
}

#[test]
fn check_finds_a_node_whose_clock_runs_ahead() {
    use leasehold_faults::servers::{MariaDb, ServerError};
    let Some(url) = backend_url(MYSQL_ENV) else {
        return;
    };
    let ahead = match MariaDb::start_with_clock_offset(3) {
        Ok(db) => db,
        Err(e @ ServerError::Missing { .. }) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "{e}: CI is set, so a missing tool fails this test (install it in .ci/run)"
            );
            eprintln!("SKIPPED: {e}");
            return;
        }
        Err(e) => panic!("a MariaDB with its clock ahead: {e}"),
    };
    let (scheme_user, rest) = url.rsplit_once('@').expect("a URL with a user");
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (host, tail) = rest.split_at(end);
    let nodes = format!("{scheme_user}@{host},127.0.0.1:{}{tail}", ahead.port());
    // The throwaway server knows `holder`, the test server `root`: both get the same user.
    ahead
        .admin(
            "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1'; \
             GRANT ALL ON *.* TO 'root'@'127.0.0.1';",
        )
        .expect("root over TCP on the throwaway server");
    let (code, stdout, stderr) = check(&nodes, "1s");
    println!("{stdout}\n{stderr}");
    assert_eq!(code, Some(6), "{nodes}:\n{stdout}\n{stderr}");
    let line = stdout
        .lines()
        .find(|l| l.contains("node 2 clock minus node 1:"))
        .unwrap_or_else(|| panic!("no offset for node 2: {stdout}"));
    let ms: f64 = line
        .split("node 2 clock minus node 1:")
        .nth(1)
        .and_then(|t| t.split_whitespace().next())
        .and_then(|t| t.trim_start_matches('+').parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no figure in {line:?}"));
    assert!(
        (2500.0..3500.0).contains(&ms),
        "measured {ms} ms for a clock 3 s ahead: {line}"
    );
    assert!(
        stderr.contains("nodes' clocks are not shown to agree within the safety margin (1s)"),
        "{stderr}"
    );
}
