//! TLS to PostgreSQL and MariaDB servers of the test's own, which accept TCP connections over
//! TLS only, with a certificate signed by a CA made at test time: `require` and verified
//! connections succeed, a certificate from another CA fails verification, and a client that
//! turned TLS off gets [`StoreError::Tls`] saying the server requires TLS.
//!
//! Over TLS, a statement the caller abandoned while it waited for a row lock gives its pooled
//! connection back once the server ended it: with sqlx's rustls stream the pool's own close of
//! such a connection waited for ever, and its slot was never freed (the renewal pool's two slots
//! went that way under one fenced transaction, and every lease of the service with them).
//!
//! Needs `openssl`, PostgreSQL's server programs and MariaDB's; without one, the backend is
//! skipped (printed `SKIPPED`) unless `CI` is set, which makes it a failure.

mod common;

use std::time::Duration;

use common::require;
use leasehold::engine::Term;
use leasehold::store::{AcquireOutcome, Grant, LeaseStore, RenewOutcome, StoreBuilder, TlsProblem};
use leasehold::{HolderId, LeaseKey, StoreError};
use leasehold_faults::servers::{MariaDb, Postgres, TlsFiles};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// Connects (which creates and checks the lease table: statements over the connection).
async fn connects(url: &str) {
    if let Err(e) = StoreBuilder::new(url)
        .table_prefix("tls_")
        .connect_timeout(Duration::from_secs(10))
        .connect()
        .await
    {
        panic!("{url} should connect: {e}");
    }
}

/// Fails to connect with [`StoreError::Tls`] of `want`, and says TLS.
async fn refused(url: &str, want: TlsProblem) {
    match StoreBuilder::new(url)
        .table_prefix("tls_")
        .connect_timeout(Duration::from_secs(10))
        .connect()
        .await
    {
        Err(e @ StoreError::Tls { problem, .. }) if problem == want => {
            let text = e.to_string();
            assert!(text.contains("TLS"), "{text}");
            assert!(!e.is_transient(), "a TLS refusal needs an operator: {text}");
            eprintln!("{url}: {text}");
        }
        Err(e) => panic!("{url}: expected StoreError::Tls({want:?}), got {e:?}"),
        Ok(_) => panic!("{url}: expected StoreError::Tls({want:?}), but it connected"),
    }
}

/// Abandons a renewal waiting for a row another session holds locked, on a pool of one
/// connection, then asks again once the lock is gone: the answer must come (before the fix the
/// only connection's slot was lost and the second renewal timed out waiting for a connection).
async fn abandoned_statement_frees_its_connection(url: &str) {
    let bound = Duration::from_millis(800);
    let store = StoreBuilder::new(url)
        .table_prefix("tls_")
        .max_connections(1)
        .server_timeout(bound)
        .acquire_timeout(Duration::from_secs(5))
        .connect()
        .await
        .expect("connect");
    let locker = StoreBuilder::new(url)
        .table_prefix("tls_")
        .connect()
        .await
        .expect("connect");
    let ns = format!("tls-abandon-{}", std::process::id());
    let key = LeaseKey::parse(&ns, "locked").expect("key");
    let me = HolderId::new("me").expect("holder");
    let term = Term::new("term", Duration::from_secs(30)).expect("term");
    let AcquireOutcome::Acquired { token, .. } = store
        .begin_tenure(&key, &me, Grant::New, term, None)
        .await
        .expect("grant")
    else {
        panic!("{url}: a fresh lease was not granted");
    };
    let txn = locker
        .begin_fenced(&key, &me, token)
        .await
        .expect("begin fenced")
        .expect("the tenure is live");
    let abandoned = tokio::time::timeout(
        Duration::from_millis(200),
        store.renew(&key, &me, token, term),
    )
    .await;
    assert!(
        abandoned.is_err(),
        "{url}: the renewal should wait for the locked row"
    );
    // The server ends the abandoned statement at its bound; then the row is free again.
    tokio::time::sleep(bound + Duration::from_millis(500)).await;
    txn.rollback().await.expect("rollback");
    let again = tokio::time::timeout(Duration::from_secs(15), store.renew(&key, &me, token, term))
        .await
        .expect("bounded by the acquire timeout");
    assert!(
        matches!(again, Ok(RenewOutcome::Renewed)),
        "{url}: the renewal after an abandoned one must get a connection and renew: {again:?}"
    );
}

#[test]
fn postgres_over_tls_only() {
    let Some(tls) = require("openssl", TlsFiles::generate()) else {
        return;
    };
    let Some(pg) = require("PostgreSQL", Postgres::start_tls_only(&tls)) else {
        return;
    };
    let (port, ca, other) = (pg.port(), tls.ca(), tls.other_ca());
    let base = |host: &str| format!("postgres://postgres@{host}:{port}/test");
    let ip = base("127.0.0.1");
    runtime().block_on(async {
        connects(&format!("{ip}?sslmode=require")).await;
        abandoned_statement_frees_its_connection(&format!("{ip}?sslmode=require")).await;
        connects(&format!(
            "{ip}?sslmode=verify-full&sslrootcert={}",
            ca.display()
        ))
        .await;
        connects(&format!(
            "{}?sslmode=verify-full&sslrootcert={}",
            base("localhost"),
            ca.display()
        ))
        .await;
        refused(
            &format!("{ip}?sslmode=verify-full&sslrootcert={}", other.display()),
            TlsProblem::Handshake,
        )
        .await;
        refused(
            &format!("{ip}?sslmode=disable"),
            TlsProblem::ServerRequiresTls,
        )
        .await;
        // No pg_hba.conf line lets this database in, encrypted or not: PostgreSQL answers "no
        // encryption" all the same, and that is not a TLS problem.
        let elsewhere = format!("postgres://postgres@127.0.0.1:{port}/elsewhere?sslmode=disable");
        match StoreBuilder::new(&elsewhere).connect().await {
            Err(StoreError::Connect { .. }) => {}
            other => panic!("{elsewhere}, which no line lets in: {other:?}"),
        }
    });
}

#[test]
fn mariadb_over_tls_only() {
    let Some(tls) = require("openssl", TlsFiles::generate()) else {
        return;
    };
    let Some(db) = require("MariaDB", MariaDb::start_tls_only(&tls)) else {
        return;
    };
    let url = db.url();
    let (ca, other) = (tls.ca(), tls.other_ca());
    runtime().block_on(async {
        connects(&format!("{url}?ssl-mode=REQUIRED")).await;
        abandoned_statement_frees_its_connection(&format!("{url}?ssl-mode=REQUIRED")).await;
        connects(&format!(
            "{url}?ssl-mode=VERIFY_IDENTITY&ssl-ca={}",
            ca.display()
        ))
        .await;
        refused(
            &format!("{url}?ssl-mode=VERIFY_IDENTITY&ssl-ca={}", other.display()),
            TlsProblem::Handshake,
        )
        .await;
        refused(
            &format!("{url}?ssl-mode=DISABLED"),
            TlsProblem::ServerRequiresTls,
        )
        .await;
        // MariaDB refuses a plain login with "access denied", as for a wrong password: a wrong
        // password stays a connect error, not a TLS one.
        let wrong = url.replace("holder:holder@", "holder:wrong@");
        match StoreBuilder::new(format!("{wrong}?ssl-mode=DISABLED"))
            .connect()
            .await
        {
            Err(StoreError::Connect { .. }) => {}
            other => panic!("a wrong password over a plain connection: {other:?}"),
        }
    });
}
