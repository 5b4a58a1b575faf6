//! The plain SQL files create a table the store accepts; a missing table, an older schema, a
//! read-only database and bad URLs give typed errors and change nothing.

use std::time::Duration;

use leasehold_storage::{
    AdminStore, Grant, HolderId, LeaseKey, LeaseStore, StoreBuilder, StoreError, Term,
};
use leasehold_testkit::backends::{MYSQL_ENV, POSTGRES_ENV, backend_url};
use leasehold_testkit::conformance::{self};
use sea_orm::{ConnectionTrait, Database};

fn temp_db(tag: &str) -> (std::path::PathBuf, String) {
    let dir = std::env::temp_dir().join(format!("leasehold-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("leases.db");
    let url = format!("sqlite://{}?mode=rwc", path.display());
    (dir, url)
}

/// Runs a plain SQL file (statements separated by `;`, `--` comments) with the table renamed.
async fn run_sql_file(url: &str, file: &str, table: &str) {
    let text = std::fs::read_to_string(format!(
        "{}/../../migrations/sql/{file}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .expect("sql file");
    let text: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("--"))
        .collect::<Vec<_>>()
        .join("\n");
    let text = text.replace("lease_info", table);
    let db = Database::connect(url).await.expect("connect");
    db.execute_unprepared(&format!("DROP TABLE IF EXISTS {table}"))
        .await
        .expect("drop");
    for stmt in text.split(';').map(str::trim).filter(|s| !s.is_empty()) {
        db.execute_unprepared(stmt).await.expect(stmt);
    }
}

async fn plain_sql_accepted(url: &str, file: &str) {
    let table = "sqlfile_lease_info";
    run_sql_file(url, file, table).await;
    let store = StoreBuilder::new(url)
        .table_prefix("sqlfile_")
        .migrate(false)
        .connect()
        .await
        .expect("store on hand-made table");
    let report = conformance::run_matching(store, &format!("sqlfile.{file}"), |n| {
        matches!(
            n,
            "grant_on_empty_table"
                | "list_valid_special_names"
                | "size_limits"
                | "token_grows_after_release"
        )
    })
    .await;
    assert_eq!(report.failed(), 0, "{file}:\n{report}");
    assert_eq!(report.passed(), 4);
}

#[tokio::test]
async fn plain_sql_sqlite() {
    let (dir, url) = temp_db("sqlfile");
    plain_sql_accepted(&url, "sqlite.sql").await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn plain_sql_postgres() {
    let Some(url) = backend_url(POSTGRES_ENV) else {
        return;
    };
    plain_sql_accepted(&url, "postgres.sql").await;
}

#[tokio::test]
async fn plain_sql_mysql() {
    let Some(url) = backend_url(MYSQL_ENV) else {
        return;
    };
    plain_sql_accepted(&url, "mysql.sql").await;
}

#[tokio::test]
async fn missing_table_without_migrate_is_a_schema_error() {
    let (dir, url) = temp_db("missing");
    let err = StoreBuilder::new(&url)
        .migrate(false)
        .connect()
        .await
        .expect_err("no table");
    assert!(
        matches!(err, StoreError::Schema { ref table, .. } if table == "lease_info"),
        "{err}"
    );
    assert!(err.to_string().contains("leasehold migrate"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn older_schema_is_a_schema_error() {
    let (dir, url) = temp_db("older");
    let db = Database::connect(&url).await.expect("connect");
    db.execute_unprepared("CREATE TABLE lease_info (id INTEGER PRIMARY KEY, lease_name TEXT, lease_user_ip TEXT, lease_end_time TEXT)")
        .await
        .expect("old table");
    // Even with migrate(true): the table exists, CREATE TABLE IF NOT EXISTS leaves it, the column
    // check refuses it.
    let err = StoreBuilder::new(&url)
        .connect()
        .await
        .expect_err("old schema");
    assert!(matches!(err, StoreError::Schema { .. }), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn read_only_sqlite_refuses_writes_and_keeps_rows() {
    let (dir, url) = temp_db("readonly");
    let key = LeaseKey::parse("ro", "job").expect("key");
    let a = HolderId::new("a").expect("holder");
    let term = Term::new("term", Duration::from_secs(60)).expect("term");
    let writer = StoreBuilder::new(&url).connect().await.expect("writer");
    writer
        .begin_tenure(&key, &a, Grant::New, term, None)
        .await
        .expect("grant");
    let before = writer.get(&key).await.expect("get").expect("row");
    writer.connection().clone().close().await.expect("close");
    let ro_url = url.replace("mode=rwc", "mode=ro");
    let ro = StoreBuilder::new(&ro_url)
        .connect()
        .await
        .expect("read-only open works for reads");
    assert_eq!(ro.list_valid(None, "").await.expect("reads work").len(), 1);
    let err = ro
        .begin_tenure(
            &key,
            &HolderId::new("b").expect("holder"),
            Grant::New,
            term,
            None,
        )
        .await
        .expect_err("write refused");
    assert!(
        matches!(
            err,
            StoreError::ReadOnly {
                op: "begin_tenure",
                ..
            }
        ),
        "{err}"
    );
    let err = ro.release_all(&a).await.expect_err("write refused");
    assert!(matches!(err, StoreError::ReadOnly { .. }), "{err}");
    let after = ro.get(&key).await.expect("get").expect("row");
    assert_eq!(
        (after.holder, after.token, after.until, after.held),
        (before.holder, before.token, before.until, true)
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn bad_urls_are_typed_errors() {
    let err = StoreBuilder::new("redis://127.0.0.1")
        .connect()
        .await
        .expect_err("unsupported");
    assert!(matches!(err, StoreError::UnsupportedUrl { .. }), "{err}");
    let err = StoreBuilder::new("postgres://u:hunter2@127.0.0.1:1/x")
        .connect_timeout(Duration::from_millis(500))
        .acquire_timeout(Duration::from_millis(500))
        .connect()
        .await
        .expect_err("unreachable");
    assert!(matches!(err, StoreError::Connect { .. }), "{err}");
    assert!(
        !err.to_string().contains("hunter2"),
        "password leaked: {err}"
    );
    let err = StoreBuilder::new("sqlite::memory:")
        .table_prefix("x; DROP TABLE y")
        .connect()
        .await
        .expect_err("prefix");
    assert!(matches!(err, StoreError::Invalid(_)), "{err}");
}

/// Creates, from the backend's plain SQL file, a table with one thing wrong (`from` replaced by
/// `to`) under its own prefix, and asserts that the store refuses it naming what is wrong.
async fn wrong_table_refused(
    url: &str,
    file: &str,
    prefix: &str,
    from: &str,
    to: &str,
    says: &str,
) {
    let text = std::fs::read_to_string(format!(
        "{}/../../migrations/sql/{file}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .expect("sql file");
    assert!(text.contains(from), "{file} has no {from:?}");
    let table = format!("{prefix}lease_info");
    let text: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("--"))
        .collect::<Vec<_>>()
        .join("\n")
        .replace(from, to)
        .replace("lease_info", &table);
    let db = Database::connect(url).await.expect("connect");
    db.execute_unprepared(&format!("DROP TABLE IF EXISTS {table}"))
        .await
        .expect("drop");
    for stmt in text.split(';').map(str::trim).filter(|s| !s.is_empty()) {
        db.execute_unprepared(stmt).await.expect(stmt);
    }
    for migrate in [false, true] {
        let err = StoreBuilder::new(url)
            .table_prefix(prefix)
            .migrate(migrate)
            .connect()
            .await
            .expect_err("a table missing what safety needs is refused");
        assert!(
            matches!(err, StoreError::Schema { table: ref t, .. } if *t == table),
            "{err}"
        );
        assert!(err.to_string().contains(says), "{err}");
    }
    db.execute_unprepared(&format!("DROP TABLE IF EXISTS {table}"))
        .await
        .expect("drop");
}

const NO_KEY_PG: &str = ",\n    CONSTRAINT uk_lease_info_ns_name UNIQUE (namespace, lease_name)";

#[tokio::test]
async fn wrong_tables_sqlite() {
    let (dir, url) = temp_db("wrong");
    wrong_table_refused(&url, "sqlite.sql", "nokey_", NO_KEY_PG, "", "no unique key").await;
    wrong_table_refused(
        &url,
        "sqlite.sql",
        "halfkey_",
        "UNIQUE (namespace, lease_name)",
        "UNIQUE (lease_name)",
        "no unique key",
    )
    .await;
    wrong_table_refused(
        &url,
        "sqlite.sql",
        "texttime_",
        "lease_end_time BIGINT",
        "lease_end_time TEXT",
        "column lease_end_time",
    )
    .await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn wrong_tables_postgres() {
    let Some(url) = backend_url(POSTGRES_ENV) else {
        return;
    };
    wrong_table_refused(
        &url,
        "postgres.sql",
        "nokey_",
        NO_KEY_PG,
        "",
        "no unique key",
    )
    .await;
    wrong_table_refused(
        &url,
        "postgres.sql",
        "texttime_",
        "lease_end_time BIGINT",
        "lease_end_time TEXT",
        "column lease_end_time",
    )
    .await;
}

#[tokio::test]
async fn wrong_tables_mysql() {
    let Some(url) = backend_url(MYSQL_ENV) else {
        return;
    };
    let key = ",\n    UNIQUE KEY uk_lease_info_ns_name (namespace, lease_name)";
    wrong_table_refused(&url, "mysql.sql", "nokey_", key, "", "no unique key").await;
    wrong_table_refused(
        &url,
        "mysql.sql",
        "ci_",
        "utf8mb4_nopad_bin",
        "utf8mb4_general_ci",
        "collation",
    )
    .await;
    wrong_table_refused(
        &url,
        "mysql.sql",
        "padbin_",
        "utf8mb4_nopad_bin",
        "utf8mb4_bin",
        "collation",
    )
    .await;
    wrong_table_refused(
        &url,
        "mysql.sql",
        "texttime_",
        "lease_end_time BIGINT",
        "lease_end_time VARCHAR(32)",
        "column lease_end_time",
    )
    .await;
}
