//! URLs naming several PostgreSQL servers (libpq's form): the store uses the one that accepts
//! writes, passes over one that does not answer, and says what each server answered when none
//! accepts writes. Following a primary through a real failover is the real-fault suite's
//! (`leasehold-faults/tests/auto_failover.rs`).
#![cfg(feature = "postgres")]

use std::time::Duration;

use leasehold_core::{Clock, MonotonicClock};
use leasehold_storage::{LeaseStore, StoreBuilder, StoreError};
use leasehold_testkit::backends::{POSTGRES_ENV, backend_url};

/// `url` with `first` named before its host.
fn with_host_before(url: &str, first: &str) -> String {
    let start = url
        .find('@')
        .map_or_else(|| url.find("://").map_or(0, |i| i + 3), |i| i + 1);
    format!("{}{first},{}", &url[..start], &url[start..])
}

/// A loopback port nothing listens on.
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

#[tokio::test]
async fn a_host_that_does_not_answer_is_passed_over() {
    let Some(url) = backend_url(POSTGRES_ENV) else {
        return;
    };
    let dead = format!("127.0.0.1:{}", closed_port());
    let both = with_host_before(&url, &dead);
    let both = if both.contains('?') {
        format!("{both}&target_session_attrs=read-write")
    } else {
        format!("{both}?target_session_attrs=read-write")
    };
    let store = StoreBuilder::new(both.clone())
        .table_prefix("multi_host_")
        .connect()
        .await
        .unwrap_or_else(|e| panic!("{both}: {e}"));
    store
        .db_now()
        .await
        .expect("statements go to the host that answers");
}

#[tokio::test]
async fn no_writable_host_is_a_typed_error_naming_each_server() {
    let (a, b) = (closed_port(), closed_port());
    let url = format!("postgres://u:secret@127.0.0.1:{a},127.0.0.1:{b}/db");
    let start = MonotonicClock.now();
    let err = StoreBuilder::new(url.clone())
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .await
        .expect_err("nothing listens");
    let took = start.elapsed();
    let text = err.to_string();
    assert!(matches!(err, StoreError::NoWritableHost { .. }), "{err:?}");
    assert!(err.is_transient(), "a failover may be under way: {err:?}");
    for port in [a, b] {
        assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
    }
    assert!(!text.contains("secret"), "{text}");
    // Every server is asked at once, each within the connect timeout.
    assert!(took < Duration::from_secs(4), "{took:?}");
}

#[tokio::test]
async fn urls_it_cannot_serve_are_refused_before_connecting() {
    for (url, says) in [
        (
            "mysql://root@127.0.0.1:3306,127.0.0.1:3307/test",
            "PostgreSQL only",
        ),
        (
            "postgres://postgres@127.0.0.1:5432,127.0.0.1:5433/test?target_session_attrs=standby",
            "refuses writes",
        ),
        ("postgres://postgres@127.0.0.1:5432,/test", "empty host"),
    ] {
        match StoreBuilder::new(url).connect().await {
            Err(e @ StoreError::BadUrl { .. }) => {
                assert!(e.to_string().contains(says), "{url}: {e}");
            }
            other => panic!("{url}: expected BadUrl, got {other:?}"),
        }
    }
}
