//! The conformance suite on every store: in memory and SQLite always, PostgreSQL and MySQL when
//! `LEASEHOLD_TEST_POSTGRES` / `LEASEHOLD_TEST_MYSQL` are set (required when `CI` is set).

use std::time::Duration;

use leasehold_storage::{Backend, MemoryStore, StoreBuilder};
use leasehold_testkit::backends::{MYSQL_ENV, POSTGRES_ENV, backend_url};
use leasehold_testkit::conformance::{self, Subject};

/// The server-side bound of every SQL store here: short, so the checks of statements blocked
/// behind a locked row are quick.
const BOUND: Duration = Duration::from_secs(1);

async fn check(subject: impl Into<Subject>, label: &str) {
    let subject = subject.into();
    let expected = conformance::check_count(&subject);
    let report = conformance::run(subject, &format!("conformance.{label}")).await;
    println!("{label}:\n{report}");
    assert_eq!(report.failed(), 0, "{label}:\n{report}");
    assert_eq!(
        report.passed() + report.skipped(),
        expected,
        "{label}:\n{report}"
    );
    // Only SQLite lacks what some checks need (row locks; a second connection in memory):
    // every other store runs every check.
    if !label.starts_with("sqlite") {
        assert_eq!(report.skipped(), 0, "{label}:\n{report}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store() {
    check(MemoryStore::new(), "memory").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_in_memory() {
    let store = StoreBuilder::new("sqlite::memory:")
        .server_timeout(BOUND)
        .connect()
        .await
        .expect("connect");
    check(store, "sqlite-memory").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_file_wal() {
    let dir = std::env::temp_dir().join(format!("leasehold-conformance-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("leases.db");
    let store = StoreBuilder::new(format!("sqlite://{}?mode=rwc", path.display()))
        .server_timeout(BOUND)
        .connect()
        .await
        .expect("connect");
    check(store, "sqlite-file").await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    let Some(url) = backend_url(POSTGRES_ENV) else {
        return;
    };
    let store = StoreBuilder::new(url)
        .server_timeout(BOUND)
        .connect()
        .await
        .expect("connect to PostgreSQL");
    assert_eq!(store.backend(), Backend::Postgres);
    check(store, "postgres").await;
}

/// The statements of a service with `notify_in_statements`: grants and releases with their
/// doorbell notifications (`SeaOrmStore::notify_in_statements`). A table of its own: two first
/// migrations of one table at once race in PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_notifying_in_statements() {
    let Some(url) = backend_url(POSTGRES_ENV) else {
        return;
    };
    let store = StoreBuilder::new(url)
        .table_prefix("conf_notify_")
        .server_timeout(BOUND)
        .connect()
        .await
        .expect("connect to PostgreSQL")
        .notify_in_statements(true);
    assert!(store.notifies_in_statements());
    check(store, "postgres-notifying").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql() {
    let Some(url) = backend_url(MYSQL_ENV) else {
        return;
    };
    let store = StoreBuilder::new(url)
        .server_timeout(BOUND)
        .connect()
        .await
        .expect("connect to MySQL");
    check(store, "mysql").await;
}

/// The Oracle MySQL 8 path (grant = upsert + read in a transaction), run on whatever MySQL-family
/// server the test URL names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_without_returning() {
    let Some(url) = backend_url(MYSQL_ENV) else {
        return;
    };
    let store = StoreBuilder::new(url)
        .table_prefix("mysql8path_")
        .server_timeout(BOUND)
        .connect()
        .await
        .expect("connect to MySQL");
    let store = store.speaking(Backend::MySql);
    check(store, "mysql-8-path").await;
}
