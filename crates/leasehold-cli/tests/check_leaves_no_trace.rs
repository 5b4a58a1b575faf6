//! `leasehold check` leaves no trace, on every backend: after a full run the real table has the
//! same rows and token floor as before, and the scratch table the run worked in is gone. A
//! check that cannot apply (row locks on SQLite) says `skipped` and is not counted as passed.
//! `--json` on `check`, `lock` and `unlock` prints one parseable object. `check` says each step
//! on stderr as it starts, the conformance suite check by check, never on stdout.

use std::process::{Command, Output};
use std::time::Duration;

use leasehold_storage::{
    AdminStore, Grant, HolderId, LeaseKey, LeaseStore, LeaseValue, Namespace, SeaOrmStore,
    StoreBuilder, Term,
};
use leasehold_testkit::backends::{MYSQL_ENV, POSTGRES_ENV, backend_url};
use sea_orm::{ConnectionTrait, Statement};

fn urls() -> Vec<String> {
    let dir = std::env::temp_dir().join(format!("leasehold-notrace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let mut all = vec![format!(
        "sqlite://{}?mode=rwc",
        dir.join("check.db").display()
    )];
    all.extend(backend_url(POSTGRES_ENV));
    all.extend(backend_url(MYSQL_ENV));
    all
}

fn leasehold(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .env_remove("LEASEHOLD_DATABASE_URL")
        .env_remove("RUST_LOG")
        .args(args)
        .output()
        .expect("leasehold runs")
}

/// Every row of the lease table and the token floor, as text, in key order.
async fn snapshot(store: &SeaOrmStore) -> (Vec<String>, i64) {
    let db = store.connection();
    let backend = db.get_database_backend();
    let rows = db
        .query_all_raw(Statement::from_string(
            backend,
            format!(
                "SELECT namespace, lease_name, holder, version, status, lease_end_time, \
                 lease_value FROM {} ORDER BY namespace, lease_name",
                store.table()
            ),
        ))
        .await
        .expect("read the lease table");
    let rows = rows
        .iter()
        .map(|r| {
            let text = |c: &str| r.try_get::<String>("", c).expect(c);
            // Integer columns are of several widths across backends (status is a SMALLINT on
            // PostgreSQL).
            let int = |c: &str| {
                r.try_get::<i64>("", c)
                    .or_else(|_| r.try_get::<i32>("", c).map(i64::from))
                    .or_else(|_| r.try_get::<i16>("", c).map(i64::from))
                    .or_else(|_| r.try_get::<i8>("", c).map(i64::from))
                    .expect(c)
            };
            format!(
                "{}/{} {} v{} s{} until {} value {:?}",
                text("namespace"),
                text("lease_name"),
                text("holder"),
                int("version"),
                int("status"),
                int("lease_end_time"),
                r.try_get::<Option<String>>("", "lease_value")
                    .expect("lease_value"),
            )
        })
        .collect();
    let floor = db
        .query_one_raw(Statement::from_string(
            backend,
            format!("SELECT version FROM {}_floor", store.table()),
        ))
        .await
        .expect("read the floor")
        .expect("the floor row")
        .try_get::<i64>("", "version")
        .expect("floor version");
    (rows, floor)
}

/// How many tables of the scratch prefix of the check process `pid` exist.
async fn scratch_tables(store: &SeaOrmStore, pid: u32) -> i64 {
    let db = store.connection();
    let backend = db.get_database_backend();
    let like = format!("lh_check_{pid}_%");
    let sql = match backend {
        sea_orm::DbBackend::Sqlite => format!(
            "SELECT COUNT(*) AS n FROM sqlite_master WHERE type = 'table' AND name LIKE '{like}'"
        ),
        sea_orm::DbBackend::Postgres => format!(
            "SELECT COUNT(*) AS n FROM information_schema.tables WHERE table_name LIKE '{like}'"
        ),
        _ => format!(
            "SELECT COUNT(*) AS n FROM information_schema.tables \
             WHERE table_schema = DATABASE() AND table_name LIKE '{like}'"
        ),
    };
    db.query_one_raw(Statement::from_string(backend, sql))
        .await
        .expect("catalog")
        .expect("a count")
        .try_get::<i64>("", "n")
        .expect("count")
}

/// A real table with a held lease, a released one and a raised token floor.
async fn real_table(url: &str, prefix: &str) -> SeaOrmStore {
    let store = StoreBuilder::new(url)
        .table_prefix(prefix)
        .connect()
        .await
        .expect("store");
    let ns = Namespace::new("jobs").expect("ns");
    let term = Term::new("term", Duration::from_secs(600)).expect("term");
    let me = HolderId::new("a").expect("holder");
    let held = LeaseKey::parse("jobs", "held").expect("key");
    let value = LeaseValue::new("10.0.0.7:8080").expect("value");
    store
        .begin_tenure(&held, &me, Grant::New, term, Some(&value))
        .await
        .expect("grant");
    for name in ["gone", "released"] {
        let key = LeaseKey::parse("jobs", name).expect("key");
        let (token, _) = match store.begin_tenure(&key, &me, Grant::New, term, None).await {
            Ok(leasehold_storage::AcquireOutcome::Acquired { token, until }) => (token, until),
            other => panic!("grant {name}: {other:?}"),
        };
        store.release(&key, &me, token).await.expect("release");
    }
    // Purge "gone" so that the floor is above zero, then leave "released" released.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let gone = LeaseKey::parse("jobs", "gone").expect("key");
    let purged = store
        .purge(Some(&ns), Duration::from_millis(1))
        .await
        .expect("purge");
    assert!(purged >= 1, "purged {purged}");
    assert!(store.get(&gone).await.expect("get").is_none());
    store
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_leaves_the_real_table_as_it_was() {
    for url in urls() {
        let prefix = format!("notrace_{}_", std::process::id());
        let store = real_table(&url, &prefix).await;
        let before = snapshot(&store).await;
        assert!(
            before.1 > 0,
            "{url}: the floor should be raised: {before:?}"
        );
        let child = Command::new(env!("CARGO_BIN_EXE_leasehold"))
            .env_remove("LEASEHOLD_DATABASE_URL")
            .env_remove("RUST_LOG")
            .args(["--db", &url, "--table-prefix", &prefix, "check"])
            .args(["--clock-window", "300ms", "--clock-samples", "4"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn check");
        let pid = child.id();
        let out = child.wait_with_output().expect("check runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{url}:\n{stdout}\n{stderr}");
        assert!(
            stdout.contains("scratch table lh_check_"),
            "{url}: {stdout}"
        );
        let summary = stdout
            .lines()
            .find(|l| l.ends_with(" failed"))
            .unwrap_or_else(|| panic!("{url}: no summary in {stdout}"));
        let skipped_lines = stdout.lines().filter(|l| l.starts_with("skipped ")).count();
        assert!(
            summary.contains(&format!(", {skipped_lines} skipped, 0 failed")),
            "{url}: {summary}\n{stdout}"
        );
        assert_progress(&stdout, &stderr, &url);
        if url.starts_with("sqlite") {
            // SQLite has no row locks: those checks say so and are not counted as passed.
            assert!(skipped_lines >= 3, "{url}: {stdout}");
            assert!(
                stdout.contains("SQLite has no row locks"),
                "{url}: {stdout}"
            );
        } else {
            assert_eq!(skipped_lines, 0, "{url}: {stdout}");
        }
        let after = snapshot(&store).await;
        assert_eq!(before, after, "{url}: check changed the real table");
        assert_eq!(
            scratch_tables(&store, pid).await,
            0,
            "{url}: the scratch table of check {pid} is still there"
        );
        store.drop_table().await.expect("drop the test table");
    }
}

/// The steps said on stderr (stderr is not a terminal here: a line each), none on stdout: the
/// clock reads, then the suite's checks numbered up to their total.
fn assert_progress(stdout: &str, stderr: &str, url: &str) {
    assert!(!stdout.contains("leasehold check:"), "{url}: {stdout}");
    let steps: Vec<&str> = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("leasehold check: "))
        .collect();
    assert!(
        steps
            .first()
            .is_some_and(|s| s.starts_with("reading the database clock")),
        "{url}: {stderr}"
    );
    let total: usize = steps
        .iter()
        .find_map(|s| s.strip_prefix("the conformance suite, "))
        .and_then(|s| s.strip_suffix(" checks"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{url}: no suite step in {stderr}"));
    let numbered = steps.iter().filter(|s| s.starts_with('[')).count();
    assert_eq!(numbered, total, "{url}: {stderr}");
    assert!(
        steps
            .iter()
            .any(|s| s.starts_with(&format!("[{total}/{total}] "))),
        "{url}: {stderr}"
    );
}

/// The full check with `--json` on SQLite: stdout is the one object (nothing else the suite
/// does reaches it), the progress is on stderr.
#[test]
fn check_json_keeps_stdout_to_one_object() {
    let dir = std::env::temp_dir().join(format!("leasehold-check-json-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let url = format!("sqlite://{}?mode=rwc", dir.join("check.db").display());
    let out = leasehold(&[
        "--db",
        &url,
        "check",
        "--json",
        "--clock-window",
        "300ms",
        "--clock-samples",
        "4",
    ]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let report: serde_json::Value =
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(report["failed"], 0, "{report}");
    let checks = report["checks"].as_array().expect("checks").len();
    assert_progress(&stdout, &stderr, &url);
    assert!(
        stderr.contains(&format!("[{checks}/{checks}] ")),
        "as many steps as checks reported: {stderr}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn check_lock_and_unlock_print_json() {
    let dir = std::env::temp_dir().join(format!("leasehold-json-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let url = format!("sqlite://{}?mode=rwc", dir.join("json.db").display());
    let json = |out: &Output| -> serde_json::Value {
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
    };
    let out = leasehold(&["--db", &url, "check", "--json", "--clock-only"]);
    let check = json(&out);
    assert_eq!(out.status.code(), Some(0), "{check}");
    assert_eq!(check["exit_code"], 0, "{check}");
    assert_eq!(check["backend"], "Sqlite", "{check}");
    assert_eq!(check["clock_rate"]["verdict"], "within", "{check}");
    assert!(check["checks"].is_null(), "{check}");

    let lock = [
        "--db", &url, "lock", "jobs", "nightly", "--ttl", "1m", "--json",
    ];
    let out = leasehold(&[&lock[..], &["--holder", "ops-1"]].concat());
    let granted = json(&out);
    assert_eq!(out.status.code(), Some(0), "{granted}");
    assert_eq!(granted["acquired"], true, "{granted}");
    let token = granted["token"].as_i64().expect("token");
    let out = leasehold(&[&lock[..], &["--holder", "ops-2"]].concat());
    let refused = json(&out);
    assert_eq!(out.status.code(), Some(3), "{refused}");
    assert_eq!(refused["acquired"], false, "{refused}");
    assert_eq!(refused["holder"], "ops-1", "{refused}");
    assert_eq!(refused["token"], token, "{refused}");
    // A live lock is never extended, not even for its own holder: `lock` takes a new tenure.
    let out = leasehold(&[&lock[..], &["--holder", "ops-1"]].concat());
    let again = json(&out);
    assert_eq!(out.status.code(), Some(3), "{again}");
    assert_eq!(again["acquired"], false, "{again}");
    assert_eq!(again["holder"], "ops-1", "{again}");
    assert_eq!(again["token"], token, "{again}");

    let token = token.to_string();
    let unlock = |holder: &str| {
        leasehold(&[
            "--db", &url, "unlock", "jobs", "nightly", "--holder", holder, "--token", &token,
            "--json",
        ])
    };
    let out = unlock("ops-2");
    let not_ours = json(&out);
    assert_eq!(out.status.code(), Some(3), "{not_ours}");
    assert_eq!(not_ours["released"], false, "{not_ours}");
    assert_eq!(not_ours["reason"], "held_by_another", "{not_ours}");
    let out = unlock("ops-1");
    let released = json(&out);
    assert_eq!(out.status.code(), Some(0), "{released}");
    assert_eq!(released["released"], true, "{released}");
    assert_eq!(released["name"], "nightly", "{released}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn completions_and_man_page_are_printed() {
    let out = leasehold(&["completions", "bash"]);
    assert!(out.status.success(), "{out:?}");
    let script = String::from_utf8_lossy(&out.stdout);
    assert!(script.contains("_leasehold()"), "{script}");
    assert!(script.contains("unlock"), "{script}");
    let out = leasehold(&["man"]);
    assert!(out.status.success(), "{out:?}");
    let page = String::from_utf8_lossy(&out.stdout);
    assert!(
        page.starts_with(".ie") || page.contains(".TH leasehold"),
        "{page}"
    );
    assert!(page.contains("check"), "{page}");
}
