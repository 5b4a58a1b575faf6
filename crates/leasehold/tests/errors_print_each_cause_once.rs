//! An error printed the way anyhow's `{:#}` and eyre print a chain (each `source()` after the
//! message, joined by ": ") shows its root cause once: no message repeats the text of an error
//! it also returns from `source()`.

use std::error::Error as StdError;

use leasehold::store::StoreBuilder;
use leasehold::{Error, LeaseService, StoreError, ValidationError};

/// The chain as anyhow's `{:#}` prints it.
fn report(e: &(dyn StdError + 'static)) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        out.push_str(": ");
        out.push_str(&cause.to_string());
        next = cause.source();
    }
    out
}

/// The text of the deepest error under `e`, walking `source()` to its end.
fn deepest(e: &(dyn StdError + 'static)) -> String {
    let mut last = e;
    while let Some(cause) = last.source() {
        last = cause;
    }
    last.to_string()
}

/// The driver's root cause under a store error: the sqlx error under SeaORM's wrappers, walked
/// to its end (SeaORM holds it behind an `Arc` that is not a `source()`, so it is reached by
/// matching).
fn driver_root(e: &StoreError) -> String {
    let cause = match e {
        StoreError::Connect { cause, .. }
        | StoreError::Schema { cause, .. }
        | StoreError::Database { cause, .. } => cause,
        other => panic!("expected a driver error, got {other:?}"),
    };
    match cause {
        leasehold::store::sea_orm::DbErr::Conn(
            leasehold::store::sea_orm::RuntimeErr::SqlxError(sqlx),
        )
        | leasehold::store::sea_orm::DbErr::Exec(
            leasehold::store::sea_orm::RuntimeErr::SqlxError(sqlx),
        )
        | leasehold::store::sea_orm::DbErr::Query(
            leasehold::store::sea_orm::RuntimeErr::SqlxError(sqlx),
        ) => deepest(sqlx.as_ref()),
        other => deepest(other),
    }
}

fn assert_once(printed: &str, root: &str) {
    assert!(!root.is_empty(), "no root cause to look for in {printed:?}");
    assert_eq!(
        printed.matches(root).count(),
        1,
        "the root cause {root:?} must appear exactly once in {printed:?}"
    );
}

#[tokio::test]
async fn refused_connection_prints_its_cause_once() {
    // Port 1 on the loopback: nothing listens there, so the connection is refused at once.
    let err = LeaseService::builder("postgres://postgres@127.0.0.1:1/test")
        .build()
        .await
        .expect_err("nothing listens on port 1");
    let Error::Store(store) = &err else {
        panic!("expected a store error, got {err:?}");
    };
    let root = driver_root(store);
    assert!(
        root.to_ascii_lowercase().contains("refused"),
        "the driver's root cause should say the connection was refused: {root:?}"
    );
    let printed = report(&err);
    assert_once(&printed, &root);
    assert!(
        printed.contains("cannot connect to postgres://postgres@127.0.0.1:1/test"),
        "{printed}"
    );
    assert_once(&err.to_string(), &root);
}

#[tokio::test]
async fn missing_table_prints_its_cause_once() {
    let err = StoreBuilder::new("sqlite::memory:")
        .migrate(false)
        .connect()
        .await
        .expect_err("an empty database has no lease table");
    assert!(matches!(err, StoreError::Schema { .. }), "{err:?}");
    let root = driver_root(&err);
    assert!(root.contains("no such table"), "{root:?}");
    let wrapped = Error::from(err);
    assert_once(&report(&wrapped), &root);
    assert_once(&wrapped.to_string(), &root);
}

#[test]
fn refused_argument_and_thread_errors_print_their_cause_once() {
    let invalid = Error::from(ValidationError::Empty { field: "name" });
    assert_once(&report(&invalid), "name must not be empty");
    let store_invalid = Error::from(StoreError::from(ValidationError::Empty { field: "holder" }));
    assert_once(&report(&store_invalid), "holder must not be empty");
    let thread = Error::Thread(std::io::Error::other("no threads left"));
    assert_once(&report(&thread), "no threads left");
}
