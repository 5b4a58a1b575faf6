//! A database that cannot be reached is a `StoreError::Connect` at once, naming the URL without
//! its password, instead of after the pool's acquire timeout (10 s by default, kept here).
//!
//! The closed-port and unknown-host cases need no server; the unknown-database cases run against
//! the servers named by `LEASEHOLD_TEST_POSTGRES` / `LEASEHOLD_TEST_MYSQL`.
#![cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]

use std::time::Duration;

use leasehold_core::{Clock, MonotonicClock};
use leasehold_storage::{StoreBuilder, StoreError};

/// Far below the 10 s acquire timeout, far above a refused connection on a loaded machine.
const FAST: Duration = Duration::from_secs(5);

/// Connects to `url` with the default timeouts and checks the error is a quick, typed
/// `Connect` that shows `shown` (the URL as it should appear) and never `secret`.
async fn fails_fast(url: &str, shown: &str, secret: Option<&str>) {
    let start = MonotonicClock.now();
    let err = StoreBuilder::new(url)
        .connect()
        .await
        .expect_err("the database is unreachable");
    let took = start.elapsed();
    eprintln!("{shown}: {err} ({took:?})");
    assert!(
        matches!(&err, StoreError::Connect { url, .. } if url == shown),
        "{url}: expected StoreError::Connect for {shown}, got {err:?}"
    );
    assert!(
        took < FAST,
        "{url}: the error took {took:?}, as if it waited for the pool"
    );
    let message = err.to_string();
    assert!(message.contains(shown), "{url}: URL missing in {message}");
    if let Some(secret) = secret {
        assert!(!message.contains(secret), "password leaked: {message}");
        assert!(
            !format!("{err:?}").contains(secret),
            "password leaked: {err:?}"
        );
    }
}

/// `url` with its database (the last path segment, before any query) replaced by `db`.
#[cfg(any(feature = "postgres", feature = "mysql"))]
fn with_database(url: &str, db: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let base = base.rsplit_once('/').map_or(base, |(head, _)| head);
    match query {
        Some(q) => format!("{base}/{db}?{q}"),
        None => format!("{base}/{db}"),
    }
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn postgres_closed_port() {
    fails_fast(
        "postgres://app:hunter2@127.0.0.1:1/test",
        "postgres://app:***@127.0.0.1:1/test",
        Some("hunter2"),
    )
    .await;
}

#[cfg(feature = "mysql")]
#[tokio::test]
async fn mysql_closed_port() {
    fails_fast(
        "mysql://root:hunter2@127.0.0.1:1/test",
        "mysql://root:***@127.0.0.1:1/test",
        Some("hunter2"),
    )
    .await;
}

/// `.invalid` never resolves (RFC 6761).
#[cfg(feature = "postgres")]
#[tokio::test]
async fn postgres_unknown_host() {
    let url = "postgres://postgres@leasehold-no-such-host.invalid:5432/test";
    fails_fast(url, url, None).await;
}

/// A server that answers but has no such database: refused at once, typed, and the message
/// names the database.
#[cfg(any(feature = "postgres", feature = "mysql"))]
async fn unknown_database_fails_fast(env: &str) {
    let Some(url) = leasehold_testkit::backends::backend_url(env) else {
        return;
    };
    let url = with_database(&url, "leasehold_no_such_database");
    let start = MonotonicClock.now();
    let err = StoreBuilder::new(url.as_str())
        .connect()
        .await
        .expect_err("no such database");
    eprintln!("{err} ({:?})", start.elapsed());
    assert!(matches!(err, StoreError::Connect { .. }), "{err:?}");
    assert!(start.elapsed() < FAST, "took {:?}", start.elapsed());
    assert!(
        err.to_string().contains("leasehold_no_such_database"),
        "{err}"
    );
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn postgres_unknown_database() {
    unknown_database_fails_fast(leasehold_testkit::backends::POSTGRES_ENV).await;
}

#[cfg(feature = "mysql")]
#[tokio::test]
async fn mysql_unknown_database() {
    unknown_database_fails_fast(leasehold_testkit::backends::MYSQL_ENV).await;
}

/// SQLite: a file that cannot be created is as quick and as typed.
#[cfg(feature = "sqlite")]
#[tokio::test]
async fn sqlite_in_a_missing_directory() {
    let url = "sqlite:///leasehold-no-such-dir/x.db?mode=rwc";
    fails_fast(url, url, None).await;
}
