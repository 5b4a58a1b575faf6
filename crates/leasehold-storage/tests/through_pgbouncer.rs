//! The store through a throwaway PgBouncer (`leasehold_testkit::pgbouncer`, PgBouncer's
//! conventional configuration: only `extra_float_digits` among the ignored startup parameters)
//! in front of the test PostgreSQL, in session and in transaction mode: it connects, passes the
//! conformance suite, keeps its server bound (a statement blocked by a row lock ends on the
//! server, not only in the caller), refuses a URL of transaction pooling that does not say so,
//! and answers within its bounds when the pooler has no server connection to give. Runs where
//! `LEASEHOLD_TEST_POSTGRES` names a server and `pgbouncer` is installed; with `CI` set a missing
//! one fails.

use std::time::Duration;

use leasehold_core::{Clock, MonotonicClock};

use leasehold_core::{HolderId, LeaseKey, Term};
use leasehold_storage::{Grant, LeaseStore, PoolerProblem, SeaOrmStore, StoreBuilder, StoreError};
use leasehold_testkit::backends::{POSTGRES_ENV, backend_url};
use leasehold_testkit::conformance::{self, Subject};
use leasehold_testkit::pgbouncer::{self, PoolMode};
use sea_orm::ConnectionTrait;

const BOUND: Duration = Duration::from_secs(1);

async fn connect(url: &str, prefix: &str) -> SeaOrmStore {
    StoreBuilder::new(url)
        .table_prefix(prefix)
        .server_timeout(BOUND)
        .max_connections(4)
        .connect()
        .await
        .unwrap_or_else(|e| panic!("connect through {url}: {e}"))
}

async fn conformance_through(mode: PoolMode) {
    let Some(bouncer) = pgbouncer::for_tests(mode, 20) else {
        return;
    };
    // Session mode: the URL does not say it (the store finds out it keeps its server
    // connection); transaction mode: it must.
    let url = match mode {
        PoolMode::Session => bouncer.url(),
        PoolMode::Transaction => bouncer.url_saying_mode(),
    };
    let store = connect(&url, &format!("pgb{}_", mode.as_str())).await;
    assert_eq!(store.transaction_pooling(), mode == PoolMode::Transaction);
    let subject = Subject::from(store);
    let expected = conformance::check_count(&subject);
    let label = format!("pgbouncer-{}", mode.as_str());
    let report = conformance::run(subject, &format!("conformance.{label}")).await;
    println!("{label}:\n{report}");
    assert_eq!(report.failed(), 0, "{label}:\n{report}\n{}", bouncer.log());
    assert_eq!(report.passed(), expected, "{label}:\n{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_through_pgbouncer_in_session_mode() {
    conformance_through(PoolMode::Session).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_through_pgbouncer_in_transaction_mode() {
    conformance_through(PoolMode::Transaction).await;
}

/// Whether the server still runs a statement on the lease table of `table` that waits for a
/// lock, seen on a direct connection.
async fn still_waiting(direct: &SeaOrmStore, table: &str) -> bool {
    let row = direct
        .connection()
        .query_one_raw(sea_orm::Statement::from_string(
            sea_orm::DbBackend::Postgres,
            format!(
                "SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
                 AND query LIKE '%{table}%' AND pid <> pg_backend_pid()"
            ),
        ))
        .await
        .expect("read pg_stat_activity")
        .expect("a row");
    row.try_get::<i64>("", "n").expect("n") > 0
}

async fn bound_holds_through(mode: PoolMode) {
    let Some(direct_url) = backend_url(POSTGRES_ENV) else {
        return;
    };
    let Some(bouncer) = pgbouncer::for_tests(mode, 10) else {
        return;
    };
    let prefix = format!("pgbb{}_", mode.as_str());
    let direct = connect(&direct_url, &prefix).await;
    let pooled = connect(&bouncer.url_saying_mode(), &prefix).await;
    let table = pooled.table().to_owned();
    let key = LeaseKey::parse(&format!("bound-{}", std::process::id()), "job").expect("key");
    let (a, b) = (
        HolderId::new("a").expect("holder"),
        HolderId::new("b").expect("holder"),
    );
    let term = Term::new("term", Duration::from_secs(60)).expect("term");
    pooled
        .begin_tenure(&key, &a, Grant::New, term, None)
        .await
        .expect("grant a");
    // Another session keeps the row locked, directly on the server.
    let txn = direct.begin().await.expect("begin");
    txn.execute_unprepared(&format!(
        "SELECT version FROM {table} WHERE namespace = '{}' AND lease_name = 'job' FOR UPDATE",
        key.namespace.as_str()
    ))
    .await
    .expect("lock the row");
    // The caller waits far longer than the bound: only the server can end the statement.
    let t0 = MonotonicClock.now();
    let grant = tokio::time::timeout(
        Duration::from_secs(30),
        pooled.begin_tenure(&key, &b, Grant::New, term, None),
    )
    .await
    .expect("the server ended the statement");
    let took = t0.elapsed();
    assert!(
        matches!(grant, Err(StoreError::ServerTimeout { .. })),
        "{mode:?}: a grant blocked by a row lock answered {grant:?}"
    );
    assert!(
        took < BOUND + Duration::from_secs(1),
        "{mode:?}: the blocked grant ended after {took:?} (bound {BOUND:?})"
    );
    assert!(
        !still_waiting(&direct, &table).await,
        "{mode:?}: a statement still waits on the server after the bound"
    );
    txn.rollback().await.expect("rollback");
    println!("{mode:?}: blocked grant ended by the server after {took:?} (bound {BOUND:?})");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_bound_holds_through_pgbouncer_in_session_mode() {
    bound_holds_through(PoolMode::Session).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_bound_holds_through_pgbouncer_in_transaction_mode() {
    bound_holds_through(PoolMode::Transaction).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transaction_pooling_unsaid_is_refused_at_connect() {
    let Some(bouncer) = pgbouncer::for_tests(PoolMode::Transaction, 10) else {
        return;
    };
    let refused = StoreBuilder::new(bouncer.url())
        .table_prefix("pgbu_")
        .connect()
        .await;
    match refused {
        Err(StoreError::Pooler {
            problem: PoolerProblem::TransactionModeUnsaid,
            ..
        }) => {}
        other => panic!("a transaction-mode URL that does not say so answered {other:?}"),
    }
    let msg = StoreBuilder::new(bouncer.url())
        .connect()
        .await
        .expect_err("refused")
        .to_string();
    assert!(msg.contains("pooler=transaction"), "{msg}");
    // Saying session mode skips the check.
    let said = StoreBuilder::new(format!("{}?pooler=bogus", bouncer.url()))
        .connect()
        .await;
    assert!(matches!(said, Err(StoreError::BadUrl { .. })), "{said:?}");
}

/// A pooler whose only server connection another client keeps: connecting answers within its
/// bounds with a typed error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saturated_pooler_is_answered_within_the_bounds() {
    let Some(bouncer) = pgbouncer::for_tests(PoolMode::Session, 1) else {
        return;
    };
    // Another client takes the only server connection and keeps it (session mode).
    let mut other = {
        use sea_orm::sqlx::Connection;
        sea_orm::sqlx::PgConnection::connect(&bouncer.url())
            .await
            .expect("another client")
    };
    {
        use sea_orm::sqlx::Executor;
        (&mut other).execute("BEGIN").await.expect("begin");
    }
    let t0 = MonotonicClock.now();
    let refused = StoreBuilder::new(bouncer.url_saying_mode())
        .table_prefix("pgbs_")
        .connect_timeout(Duration::from_secs(2))
        .acquire_timeout(Duration::from_secs(2))
        .server_timeout(BOUND)
        .connect()
        .await;
    let took = t0.elapsed();
    println!("connect through a saturated pooler: {refused:?} after {took:?}");
    assert!(
        matches!(
            refused,
            Err(StoreError::Connect { .. } | StoreError::Pooler { .. })
        ),
        "connecting through a saturated pooler answered {refused:?}"
    );
    assert!(
        took < Duration::from_secs(8),
        "connect answered after {took:?}"
    );
    drop(other);
}
