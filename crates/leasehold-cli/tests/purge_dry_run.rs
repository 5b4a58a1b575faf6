//! `leasehold purge --dry-run` on every backend: it counts and names what a purge would delete
//! (released and expired rows past the age, never a held one, bounded to the first 20 names)
//! and deletes nothing: every row and the token floor stay. The purge after it deletes exactly
//! the rows counted, and says so in JSON.

use std::process::{Command, Output};
use std::time::Duration;

use leasehold_storage::{Grant, HolderId, LeaseKey, LeaseStore, SeaOrmStore, StoreBuilder, Term};
use leasehold_testkit::backends::{MYSQL_ENV, POSTGRES_ENV, backend_url};
use sea_orm::{ConnectionTrait, Statement};

fn leasehold(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .env_remove("LEASEHOLD_DATABASE_URL")
        .env_remove("RUST_LOG")
        .args(args)
        .output()
        .expect("leasehold runs")
}

fn json(out: &Output) -> serde_json::Value {
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"))
}

/// Every row of the table and its token floor, as text in key order.
async fn snapshot(store: &SeaOrmStore) -> (Vec<String>, i64) {
    let db = store.connection();
    let backend = db.get_database_backend();
    let rows = db
        .query_all_raw(Statement::from_string(
            backend,
            format!(
                "SELECT namespace, lease_name, holder, version, lease_end_time FROM {} \
                 ORDER BY namespace, lease_name",
                store.table()
            ),
        ))
        .await
        .expect("read the table")
        .iter()
        .map(|r| {
            format!(
                "{}/{} {} v{} until {}",
                r.try_get::<String>("", "namespace").expect("namespace"),
                r.try_get::<String>("", "lease_name").expect("lease_name"),
                r.try_get::<String>("", "holder").expect("holder"),
                r.try_get::<i64>("", "version").expect("version"),
                r.try_get::<i64>("", "lease_end_time").expect("end"),
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
        .expect("floor");
    (rows, floor)
}

/// In a table of its own (other tests purge the shared databases' default table): one held
/// row, one expired, and 24 released; a dry run, then the purge.
async fn dry_run_then_purge(url: &str) {
    let prefix = format!("cli_dry_{}_", std::process::id());
    let store = StoreBuilder::new(url)
        .table_prefix(&prefix)
        .connect()
        .await
        .expect("store");
    let me = HolderId::new("ops").expect("holder");
    let long = Term::new("term", Duration::from_secs(600)).expect("term");
    let key = |name: &str| LeaseKey::parse("jobs", name).expect("key");
    store
        .begin_tenure(&key("held"), &me, Grant::New, long, None)
        .await
        .expect("grant");
    let short = Term::new("term", Duration::from_millis(1)).expect("term");
    store
        .begin_tenure(&key("expired"), &me, Grant::New, short, None)
        .await
        .expect("grant");
    for i in 0..24 {
        let k = key(&format!("released-{i:02}"));
        match store.begin_tenure(&k, &me, Grant::New, long, None).await {
            Ok(leasehold_storage::AcquireOutcome::Acquired { token, .. }) => {
                store.release(&k, &me, token).await.expect("release");
            }
            other => panic!("{url}: grant {k}: {other:?}"),
        }
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let before = snapshot(&store).await;
    assert_eq!(before.0.len(), 26, "{url}: {before:?}");

    let base = ["--db", url, "--table-prefix", &prefix, "purge"];
    let args = |extra: &[&'static str]| -> Vec<String> {
        base.iter()
            .chain(["--older-than", "1ms", "--namespace", "jobs"].iter())
            .chain(extra)
            .map(|s| (*s).to_owned())
            .collect()
    };
    let run = |extra: &[&'static str]| {
        let a = args(extra);
        leasehold(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };

    let preview = json(&run(&["--dry-run", "--json"]));
    assert_eq!(preview["dry_run"], true, "{url}: {preview}");
    assert_eq!(preview["purgeable"], 25, "{url}: {preview}");
    assert_eq!(preview["namespace"], "jobs", "{url}: {preview}");
    let names: Vec<&str> = preview["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| r["name"].as_str().expect("name"))
        .collect();
    let mut expected = vec!["expired".to_owned()];
    expected.extend((0..19).map(|i| format!("released-{i:02}")));
    assert_eq!(names, expected, "{url}: the first 20 by name: {preview}");
    let first = &preview["rows"][0];
    assert_eq!(first["holder"], "ops", "{url}: {preview}");
    assert!(first["token"].as_i64().is_some_and(|t| t >= 1), "{url}");
    assert!(
        first["ended_ago_ms"].as_i64().is_some_and(|ms| ms >= 1),
        "{url}: {preview}"
    );

    let text = run(&["--dry-run"]);
    assert_eq!(text.status.code(), Some(0), "{url}: {text:?}");
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.starts_with("would purge 25 rows in namespace jobs")
            && text.contains("nothing deleted"),
        "{url}: {text}"
    );
    assert!(text.contains("  jobs/expired  holder ops"), "{url}: {text}");
    assert!(text.contains("… and 5 more"), "{url}: {text}");
    assert!(
        !text.contains("jobs/held"),
        "{url}: a held row is never purged: {text}"
    );

    assert_eq!(
        snapshot(&store).await,
        before,
        "{url}: a dry run changed the table or its floor"
    );

    let purged = json(&run(&["--json"]));
    assert_eq!(purged["dry_run"], false, "{url}: {purged}");
    assert_eq!(
        purged["purged"], 25,
        "{url}: the rows the dry run counted: {purged}"
    );
    let after = snapshot(&store).await;
    assert_eq!(
        after.0.len(),
        1,
        "{url}: only the held row stays: {after:?}"
    );
    assert!(after.0[0].starts_with("jobs/held "), "{url}: {after:?}");
    assert!(after.1 > before.1, "{url}: the purge raised the floor");
    let again = json(&run(&["--dry-run", "--json"]));
    assert_eq!(again["purgeable"], 0, "{url}: {again}");
    assert_eq!(again["rows"], serde_json::json!([]), "{url}: {again}");
    store.drop_table().await.expect("drop the test table");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_dry_run_deletes_nothing() {
    let dir = std::env::temp_dir().join(format!("leasehold-dry-run-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    dry_run_then_purge(&format!("sqlite://{}?mode=rwc", dir.join("l.db").display())).await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_dry_run_deletes_nothing() {
    let Some(url) = backend_url(POSTGRES_ENV) else {
        return;
    };
    dry_run_then_purge(&url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_dry_run_deletes_nothing() {
    let Some(url) = backend_url(MYSQL_ENV) else {
        return;
    };
    dry_run_then_purge(&url).await;
}
