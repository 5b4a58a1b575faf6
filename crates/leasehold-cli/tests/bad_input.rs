//! Bad input through the `leasehold` command: every refusal exits 2 (bad arguments) or 1
//! (database), with one line on stderr that names the problem, no panic, and no row changed.
//! Odd but valid names (unicode, emoji, quotes, `%`, `_`, `\`, 255 bytes) are stored and listed
//! literally. And every subcommand's `--help` shows an example.
#![allow(clippy::disallowed_methods)] // the tests time the command from outside

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use leasehold_testkit::backends::{MYSQL_ENV, POSTGRES_ENV, backend_url};
use sea_orm::{ConnectionTrait, Database, DbBackend, Statement};

const BAD_ARGS: i32 = 2;
const DB_ERROR: i32 = 1;

fn leasehold(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(args)
        .env_remove("LEASEHOLD_DATABASE_URL")
        .env_remove("RUST_LOG")
        .output()
        .expect("leasehold runs")
}

/// A fresh directory and the URL of a SQLite file in it (not created yet).
fn temp_db(name: &str) -> (PathBuf, String) {
    let dir =
        std::env::temp_dir().join(format!("leasehold-bad-input-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let url = format!("sqlite://{}", dir.join("l.db").display());
    (dir, url)
}

fn rwc(url: &str) -> String {
    format!("{url}?mode=rwc")
}

/// Asserts a refusal: the exit code, one stderr line containing `needle`, no panic.
fn refused(out: &Output, code: i32, needle: &str, what: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{what}: {stderr}");
    assert_eq!(out.status.code(), Some(code), "{what}: {stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{what}: one line expected: {stderr}");
    assert!(
        lines[0].contains(needle),
        "{what}: {needle:?} expected in {stderr}"
    );
}

fn ok(out: &Output, what: &str) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{what}: {stderr}");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{what}: {stderr}{}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs one query on a SQLite file and returns its single text column, row by row.
fn query(url: &str, sql: &str) -> Vec<String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let db = Database::connect(format!("{url}?mode=ro"))
            .await
            .expect("connect");
        let rows = db
            .query_all_raw(Statement::from_string(DbBackend::Sqlite, sql))
            .await
            .expect("query");
        let out = rows
            .iter()
            .map(|r| r.try_get::<String>("", "r").expect("text column r"))
            .collect();
        db.close().await.expect("close");
        out
    })
}

/// Every lease row, whole, and the list of tables: what a refused command must not change.
fn snapshot(url: &str) -> Vec<String> {
    let mut rows = query(
        url,
        "SELECT 'table ' || name AS r FROM sqlite_master WHERE type = 'table' ORDER BY name",
    );
    if rows.iter().any(|t| t == "table lease_info") {
        rows.extend(query(
            url,
            "SELECT id || '|' || namespace || '|' || lease_name || '|' || holder || '|' || version \
             || '|' || lease_end_time || '|' || status || '|' || gmt_modified AS r FROM lease_info ORDER BY id",
        ));
    }
    rows
}

fn json_names(stdout: &str) -> Vec<(String, String)> {
    let v: serde_json::Value = serde_json::from_str(stdout).expect("json");
    v.as_array()
        .expect("array")
        .iter()
        .map(|o| {
            (
                o["namespace"].as_str().expect("namespace").to_owned(),
                o["name"].as_str().expect("name").to_owned(),
            )
        })
        .collect()
}

#[test]
fn bad_names_are_refused_and_change_nothing() {
    let (dir, url) = temp_db("names");
    let db = rwc(&url);
    ok(
        &leasehold(&[
            "--db", &db, "lock", "ns", "taken", "--holder", "a", "--ttl", "1h",
        ]),
        "setup",
    );
    let before = snapshot(&url);
    let n256 = "x".repeat(256);
    let ns129 = "n".repeat(129);
    let h256 = "h".repeat(256);
    // 63 four-byte crabs and four bytes more: 256 bytes in 67 characters.
    let crabs256 = format!("{}abcd", "🦀".repeat(63));
    let cases: [(&[&str], &str); 8] = [
        (
            &["lock", "ns", "", "--holder", "a"],
            "lease_name must not be empty",
        ),
        (
            &["lock", "ns", &n256, "--holder", "a"],
            "lease_name is 256 bytes",
        ),
        (
            &["lock", "ns", &crabs256, "--holder", "a"],
            "lease_name is 256 bytes",
        ),
        (
            &["lock", &ns129, "n", "--holder", "a"],
            "namespace is 129 bytes",
        ),
        (
            &["lock", "ns", "n", "--holder", ""],
            "holder must not be empty",
        ),
        (
            &["lock", "ns", "n", "--holder", &h256],
            "holder is 256 bytes",
        ),
        (
            &["unlock", "ns", &n256, "--holder", "a", "--token", "1"],
            "lease_name is 256 bytes",
        ),
        (
            &["release", "--force", "ns", ""],
            "lease_name must not be empty",
        ),
    ];
    for (args, needle) in cases {
        let mut full = vec!["--db", &db];
        full.extend_from_slice(args);
        refused(&leasehold(&full), BAD_ARGS, needle, &format!("{args:?}"));
    }
    assert_eq!(snapshot(&url), before, "a refused command changed a row");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_nul_byte_cannot_even_reach_the_command() {
    // argv entries are C strings: the OS (and std) refuse a NUL before leasehold runs. The same
    // holds for LEASEHOLD_DATABASE_URL. So a NUL can only come from a library caller, where
    // leasehold-core's validation refuses it.
    let err = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["lock", "ns", "a\0b", "--holder", "h"])
        .output()
        .expect_err("a NUL in argv cannot be passed");
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput, "{err}");
}

/// Locks odd names and namespaces under `base` and lists them back, literally.
fn odd_names_round_trip(db: &str, base: &str) {
    let odd = format!("{base}odd");
    let n255 = "y".repeat(255);
    let names = [
        "%",
        "_",
        "a\\b",
        "it's \"quoted\"",
        "é漢字",
        "🦀 crab",
        "50%_off",
        n255.as_str(),
    ];
    for name in names {
        let out = ok(
            &leasehold(&["--db", db, "lock", &odd, name, "--holder", "h"]),
            name,
        );
        // 1 on a table never purged; one above the table's token floor on a shared one.
        let token: i64 = out.trim().parse().expect("lock prints the token");
        assert!(token >= 1, "{name}: the first token is {token}");
    }
    let all = json_names(&ok(
        &leasehold(&["--db", db, "ls", "--namespace", &odd, "--json"]),
        "ls",
    ));
    let mut listed: Vec<&str> = all.iter().map(|(_, n)| n.as_str()).collect();
    let mut expected = names.to_vec();
    listed.sort_unstable();
    expected.sort_unstable();
    assert_eq!(listed, expected, "{db}");
    for (prefix, only) in [
        ("%", vec!["%"]),
        ("_", vec!["_"]),
        ("a\\", vec!["a\\b"]),
        ("50%_", vec!["50%_off"]),
        ("🦀", vec!["🦀 crab"]),
        ("é", vec!["é漢字"]),
    ] {
        let got = json_names(&ok(
            &leasehold(&[
                "--db",
                db,
                "ls",
                "--namespace",
                &odd,
                "--prefix",
                prefix,
                "--json",
            ]),
            prefix,
        ));
        let got: Vec<&str> = got.iter().map(|(_, n)| n.as_str()).collect();
        assert_eq!(got, only, "{db}: prefix {prefix:?} is literal");
    }
    let namespaces: Vec<String> = ["%", "_", "\\", " ünï 🦀"]
        .iter()
        .map(|s| format!("{base}{s}"))
        .collect();
    for ns in &namespaces {
        ok(
            &leasehold(&["--db", db, "lock", ns, "n", "--holder", "h"]),
            ns,
        );
    }
    for ns in &namespaces {
        let got = json_names(&ok(
            &leasehold(&["--db", db, "ls", "--namespace", ns, "--json"]),
            ns,
        ));
        assert_eq!(
            got,
            vec![(ns.clone(), "n".to_owned())],
            "{db}: namespace {ns:?} is literal"
        );
    }
}

#[test]
fn odd_but_valid_names_are_stored_and_listed_literally() {
    let (dir, url) = temp_db("odd");
    let db = rwc(&url);
    odd_names_round_trip(&db, "");
    // The default namespace is the empty string.
    ok(
        &leasehold(&["--db", &db, "lock", "", "n", "--holder", "h"]),
        "empty namespace",
    );
    let got = json_names(&ok(
        &leasehold(&["--db", &db, "ls", "--namespace", "", "--json"]),
        "ls",
    ));
    assert_eq!(got, vec![(String::new(), "n".to_owned())]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn odd_but_valid_names_round_trip_on_postgres_and_mysql() {
    for var in [POSTGRES_ENV, MYSQL_ENV] {
        if let Some(url) = backend_url(var) {
            let base = format!("bad-input-{}-", std::process::id());
            odd_names_round_trip(&url, &base);
        }
    }
}

#[test]
fn bad_durations_and_tokens_are_refused_and_change_nothing() {
    let (dir, url) = temp_db("durations");
    let db = rwc(&url);
    ok(
        &leasehold(&[
            "--db", &db, "lock", "ns", "n", "--holder", "a", "--ttl", "1h",
        ]),
        "setup",
    );
    let before = snapshot(&url);
    let cases: [(&[&str], &str); 10] = [
        (
            &["lock", "ns", "m", "--holder", "a", "--ttl", "0"],
            "at least 1ms",
        ),
        (
            &["lock", "ns", "m", "--holder", "a", "--ttl", "0s"],
            "at least 1ms",
        ),
        (
            &["lock", "ns", "m", "--holder", "a", "--ttl", "-5s"],
            "negative duration",
        ),
        (
            &["lock", "ns", "m", "--holder", "a", "--ttl", "36500d"],
            "at most",
        ),
        (
            &[
                "lock",
                "ns",
                "m",
                "--holder",
                "a",
                "--ttl",
                "99999999999999999999s",
            ],
            "too large",
        ),
        (
            &["lock", "ns", "m", "--holder", "a", "--ttl", "5parsecs"],
            "unknown unit",
        ),
        (
            &["lock", "ns", "m", "--holder", "a", "--ttl", ""],
            "empty duration",
        ),
        (&["purge", "--older-than", "0"], "at least 1ms"),
        (&["purge", "--older-than", "-1d"], "negative duration"),
        (
            &["unlock", "ns", "n", "--holder", "a", "--token", "-1"],
            "'-1' for '--token",
        ),
    ];
    for (args, needle) in cases {
        let mut full = vec!["--db", &db];
        full.extend_from_slice(args);
        refused(&leasehold(&full), BAD_ARGS, needle, &format!("{args:?}"));
    }
    assert_eq!(snapshot(&url), before, "a refused command changed a row");

    // 1 ms is the shortest legal term: granted, and lapsed almost at once.
    let out = ok(
        &leasehold(&[
            "--db", &db, "lock", "ns", "tiny", "--holder", "a", "--ttl", "1ms",
        ]),
        "1ms",
    );
    assert_eq!(out.trim(), "1");
    std::thread::sleep(Duration::from_millis(20));
    let out = ok(
        &leasehold(&["--db", &db, "lock", "ns", "tiny", "--holder", "b"]),
        "after 1ms",
    );
    assert_eq!(
        out.trim(),
        "2",
        "a 1 ms lock has lapsed: the next holder gets token 2"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn wrong_urls_are_bad_arguments() {
    for url in ["foo://x", "garbage", "", "http://127.0.0.1/db"] {
        refused(
            &leasehold(&["--db", url, "ls"]),
            BAD_ARGS,
            "unsupported database URL",
            url,
        );
    }
}

#[test]
fn bad_host_lists_are_bad_arguments() {
    for (url, needle) in [
        ("postgres://postgres@h1,,h2/test", "empty host"),
        (
            "postgres://postgres@h1,h2/test?target_session_attrs=standby",
            "refuses writes",
        ),
        ("mysql://root@h1:3306,h2:3306/test", "PostgreSQL only"),
    ] {
        refused(&leasehold(&["--db", url, "ls"]), BAD_ARGS, needle, url);
    }
}

/// A PostgreSQL URL naming a closed port first and the test server second: the command uses
/// the server that accepts writes. Two closed ports: a database error naming both.
#[test]
fn host_lists_reach_the_writable_server() {
    let Some(url) = backend_url(POSTGRES_ENV) else {
        return;
    };
    let at = url
        .find('@')
        .map_or_else(|| url.find("://").map_or(0, |i| i + 3), |i| i + 1);
    let list = format!("{}127.0.0.1:1,{}", &url[..at], &url[at..]);
    let list = if list.contains('?') {
        format!("{list}&target_session_attrs=read-write")
    } else {
        format!("{list}?target_session_attrs=read-write")
    };
    ok(
        &leasehold(&["--db", &list, "--table-prefix", "cli_hosts_", "migrate"]),
        &list,
    );
    ok(
        &leasehold(&["--db", &list, "--table-prefix", "cli_hosts_", "ls"]),
        &list,
    );
    refused(
        &leasehold(&[
            "--db",
            "postgres://postgres@127.0.0.1:1,127.0.0.1:2/test",
            "ls",
        ]),
        DB_ERROR,
        "no server of postgres://postgres@127.0.0.1:1,127.0.0.1:2/test accepts writes",
        "two closed ports",
    );
}

#[test]
fn unreachable_hosts_are_database_errors() {
    // Port 1 on loopback: closed, so the connection is refused at once, and the command fails
    // at once too (not after the pool's 10 s acquire timeout).
    let mut urls = vec!["sqlite:///nonexistent-leasehold-dir/x.db?mode=rwc".to_owned()];
    if backend_url(POSTGRES_ENV).is_some() {
        urls.push("postgres://postgres@127.0.0.1:1/test".to_owned());
    }
    if backend_url(MYSQL_ENV).is_some() {
        urls.push("mysql://root@127.0.0.1:1/test".to_owned());
    }
    let runs: Vec<_> = urls
        .into_iter()
        .map(|url| {
            std::thread::spawn(move || {
                let start = Instant::now();
                let out = leasehold(&["--db", &url, "ls"]);
                (url, out, start.elapsed())
            })
        })
        .collect();
    for run in runs {
        let (url, out, took) = run.join().expect("thread");
        refused(&out, DB_ERROR, "cannot connect to", &url);
        assert!(took < Duration::from_secs(8), "{url}: took {took:?}");
    }
}

#[test]
fn a_database_without_the_table_is_a_database_error_and_stays_untouched() {
    let (dir, url) = temp_db("no-table");
    let db = rwc(&url);
    // Create the file with an unrelated table, so the snapshot can read it.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let conn = Database::connect(db.clone()).await.expect("connect");
        conn.execute_unprepared("CREATE TABLE other (x INTEGER)")
            .await
            .expect("create");
        conn.close().await.expect("close");
    });
    let before = snapshot(&url);
    for args in [
        &["ls"][..],
        &["ls", "--json"],
        &["unlock", "ns", "n", "--holder", "a", "--token", "1"],
        &["release", "--force", "ns", "n"],
        &["purge", "--older-than", "7d"],
    ] {
        let mut full = vec!["--db", &db];
        full.extend_from_slice(args);
        refused(
            &leasehold(&full),
            DB_ERROR,
            "table lease_info is missing",
            &format!("{args:?}"),
        );
    }
    assert_eq!(snapshot(&url), before, "no table was created");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_read_only_database_refuses_writes_and_keeps_its_rows() {
    let (dir, url) = temp_db("ro");
    let db = rwc(&url);
    ok(
        &leasehold(&[
            "--db", &db, "lock", "ns", "n", "--holder", "a", "--ttl", "1h",
        ]),
        "setup",
    );
    ok(
        &leasehold(&[
            "--db", &db, "lock", "ns", "old", "--holder", "a", "--ttl", "1ms",
        ]),
        "setup",
    );
    let before = snapshot(&url);
    let ro = format!("{url}?mode=ro");
    for args in [
        &["lock", "ns", "m", "--holder", "b"][..],
        &["lock", "ns", "old", "--holder", "b"],
        &["unlock", "ns", "n", "--holder", "a", "--token", "1"],
        &["release", "--force", "ns", "n"],
    ] {
        let mut full = vec!["--db", &ro];
        full.extend_from_slice(args);
        refused(
            &leasehold(&full),
            DB_ERROR,
            "read-only",
            &format!("{args:?}"),
        );
    }
    // Reading works.
    let listed = json_names(&ok(&leasehold(&["--db", &ro, "ls", "--json"]), "ls"));
    assert_eq!(listed, vec![("ns".to_owned(), "n".to_owned())]);
    assert_eq!(snapshot(&url), before, "a read-only database changed");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_table_from_an_older_schema_is_a_database_error_and_stays_untouched() {
    let (dir, url) = temp_db("old-schema");
    let db = rwc(&url);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let conn = Database::connect(db.clone()).await.expect("connect");
        // The seeds' table: lease_user_ip instead of holder, no version, text times.
        conn.execute_unprepared(
            "CREATE TABLE lease_info (id INTEGER PRIMARY KEY, lease_name TEXT, \
             lease_user_ip TEXT, lease_end_time TEXT); \
             INSERT INTO lease_info VALUES (1, 'n', '10.0.0.1', '2020-01-01 00:00:00')",
        )
        .await
        .expect("create");
        conn.close().await.expect("close");
    });
    let old_rows = |url: &str| {
        query(
            url,
            "SELECT id || '|' || lease_name || '|' || lease_user_ip || '|' || lease_end_time AS r \
             FROM lease_info ORDER BY id",
        )
    };
    let before = old_rows(&url);
    assert_eq!(before.len(), 1);
    for args in [
        &["ls"][..],
        &["migrate"],
        &["lock", "", "n", "--holder", "a"],
        &["unlock", "", "n", "--holder", "a", "--token", "1"],
        &["release", "--force", "", "n"],
        &["purge", "--older-than", "1d"],
    ] {
        let mut full = vec!["--db", &db];
        full.extend_from_slice(args);
        refused(
            &leasehold(&full),
            DB_ERROR,
            "lease_info",
            &format!("{args:?}"),
        );
    }
    assert_eq!(old_rows(&url), before, "the old table changed");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn every_subcommand_help_shows_an_example() {
    let top = ok(&leasehold(&["--help"]), "--help");
    assert!(top.contains("Example"), "{top}");
    let commands: Vec<String> = top
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .filter(|c| c != "help")
        .collect();
    // The operator's tools, and only those: the lab's commands are `leasehold-lab`'s.
    let mut sorted = commands.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        [
            "ask-release",
            "check",
            "completions",
            "lock",
            "ls",
            "man",
            "migrate",
            "participants",
            "purge",
            "release",
            "unlock",
            "watch"
        ],
        "{top}"
    );
    for command in commands.iter().map(String::as_str) {
        let help = ok(&leasehold(&[command, "--help"]), command);
        assert!(
            help.lines().any(|l| l.trim_start().starts_with("Example")),
            "{command} --help has no Example line:\n{help}"
        );
    }
}
