//! Fencing at a second database: after a takeover, the new holder's writes through
//! `Fence::admit` commit and the old holder's are refused and rolled back; a lower token that
//! waits for a higher one's transaction is refused once that commits. On every backend, with
//! the lease table in the test database and the resource in another.

use std::time::Duration;

use leasehold_storage::{
    AcquireOutcome, Backend, Fence, FenceError, FenceOutcome, FencingToken, Grant, HolderId,
    LeaseKey, LeaseStore, SeaOrmStore, StoreBuilder, Term,
};
use leasehold_testkit::backends::{MYSQL_ENV, POSTGRES_ENV, backend_url};
use leasehold_testkit::scratch::ScratchDir;
use sea_orm::{ConnectionTrait, Database, DatabaseConnection, Statement, TransactionTrait};

/// The start of the name of the database a test's resources live in, beside the test database:
/// one per test and process (`leasehold_fence_test_<pid>_<tag>`), dropped when the test ends.
const RESOURCE_DB: &str = "leasehold_fence_test_";

async fn grant(store: &SeaOrmStore, key: &LeaseKey, who: &HolderId, ms: u64) -> FencingToken {
    match store
        .begin_tenure(
            key,
            who,
            Grant::New,
            Term::new("term", Duration::from_millis(ms)).expect("term"),
            None,
        )
        .await
        .expect("acquire")
    {
        AcquireOutcome::Acquired { token, .. } => token,
        other => panic!("{who} could not acquire: {other:?}"),
    }
}

/// `url` with its database (the path) replaced by `db`, keeping the query.
fn with_database(url: &str, db: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let start = base.find("://").map_or(0, |i| i + 3);
    let authority_end = base[start..].find('/').map_or(base.len(), |i| start + i);
    let mut out = format!("{}/{db}", &base[..authority_end]);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

/// A resource database of its own on the server `url` names for the test `tag` of this process,
/// created, and its name. Databases of earlier runs whose process is gone (a test that panicked
/// before its end) are dropped first.
async fn resource_database(url: &str, tag: &str) -> (DatabaseConnection, String) {
    let name = format!("{RESOURCE_DB}{}_{tag}", std::process::id());
    let admin = Database::connect(url).await.expect("connect");
    let list = if url.starts_with("postgres") {
        "SELECT datname AS name FROM pg_database"
    } else {
        "SELECT schema_name AS name FROM information_schema.schemata"
    };
    let rows = admin
        .query_all_raw(Statement::from_string(
            admin.get_database_backend(),
            list.to_owned(),
        ))
        .await
        .expect("list databases");
    for row in rows {
        let old: String = row.try_get("", "name").expect("name");
        let pid = old
            .strip_prefix(RESOURCE_DB)
            .and_then(|rest| rest.split('_').next())
            .and_then(|pid| pid.parse::<u32>().ok());
        if pid.is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists()) {
            let _ = admin.execute_unprepared(&drop_statement(url, &old)).await;
        }
    }
    let _ = admin.execute_unprepared(&drop_statement(url, &name)).await;
    admin
        .execute_unprepared(&format!("CREATE DATABASE {name}"))
        .await
        .expect("create database");
    admin.close().await.expect("close");
    let db = Database::connect(with_database(url, &name))
        .await
        .expect("connect to the resource database");
    (db, name)
}

fn drop_statement(url: &str, name: &str) -> String {
    if url.starts_with("postgres") {
        format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    } else {
        format!("DROP DATABASE IF EXISTS {name}")
    }
}

/// Drops the resource database `name` (its connection `db` closed first).
async fn drop_resource_database(url: &str, db: DatabaseConnection, name: &str) {
    db.close().await.expect("close");
    let admin = Database::connect(url).await.expect("connect");
    admin
        .execute_unprepared(&drop_statement(url, name))
        .await
        .expect("drop the resource database");
    admin.close().await.expect("close");
}

async fn scalar(db: &DatabaseConnection, sql: String) -> i64 {
    let row = db
        .query_one_raw(Statement::from_string(db.get_database_backend(), sql))
        .await
        .expect("query")
        .expect("row");
    row.try_get("", "n").expect("n")
}

async fn writes_by(db: &DatabaseConnection, ledger: &str, who: &str) -> i64 {
    scalar(
        db,
        format!("SELECT COUNT(*) AS n FROM {ledger} WHERE writer = '{who}'"),
    )
    .await
}

async fn stored_token(db: &DatabaseConnection, fence: &Fence, resource: &str) -> i64 {
    let table = fence.table_name().expect("table");
    scalar(
        db,
        format!("SELECT token AS n FROM {table} WHERE resource = '{resource}'"),
    )
    .await
}

/// One holder's write to the ledger, fenced: admitted and committed, or refused and rolled
/// back. The insert runs before the admission so that a refusal visibly discards it.
async fn fenced_write(
    db: &DatabaseConnection,
    fence: &Fence,
    ledger: &str,
    who: &str,
    token: FencingToken,
) -> FenceOutcome {
    let txn = db.begin().await.expect("begin");
    txn.execute_unprepared(&format!(
        "INSERT INTO {ledger} (writer, token) VALUES ('{who}', {token})"
    ))
    .await
    .expect("insert");
    let outcome = fence.admit(&txn, "ledger", token).await.expect("admit");
    if outcome.is_admitted() {
        txn.commit().await.expect("commit");
    } else {
        txn.rollback().await.expect("rollback");
    }
    outcome
}

/// a's tenure lapses and b takes over; at the resource database b's writes commit (twice with
/// the same token) and a's are refused and rolled back, whichever order they come in.
async fn takeover_fences_the_old_holder(
    lease_url: &str,
    resource: DatabaseConnection,
    tag: &str,
    backend: Option<Backend>,
) {
    let pid = std::process::id();
    let store = StoreBuilder::new(lease_url).connect().await.expect("store");
    let key = LeaseKey::parse(&format!("resource-fence.{tag}.{pid}"), "ledger").expect("key");
    let (a, b) = (
        HolderId::new("a").expect("a"),
        HolderId::new("b").expect("b"),
    );
    let ta = grant(&store, &key, &a, 300).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let tb = grant(&store, &key, &b, 60_000).await;
    assert!(tb > ta, "takeover token {tb} not above {ta}");

    let mut fence = Fence::new(resource.clone()).table_prefix(format!("t{tag}_{pid}_"));
    if let Some(backend) = backend {
        fence = fence.backend(backend);
    }
    let ledger = format!("ledger_{tag}_{pid}");
    let table = fence.table_name().expect("table");
    for t in [&ledger, &table] {
        resource
            .execute_unprepared(&format!("DROP TABLE IF EXISTS {t}"))
            .await
            .expect("drop");
    }
    resource
        .execute_unprepared(&format!(
            "CREATE TABLE {ledger} (writer VARCHAR(32) NOT NULL, token BIGINT NOT NULL)"
        ))
        .await
        .expect("create ledger");
    fence.create_table().await.expect("create fence table");
    fence
        .create_table()
        .await
        .expect("create fence table again");

    // a wrote once while its tenure was live.
    assert_eq!(
        fenced_write(&resource, &fence, &ledger, "a", ta).await,
        FenceOutcome::Admitted
    );
    assert_eq!(
        fenced_write(&resource, &fence, &ledger, "b", tb).await,
        FenceOutcome::Admitted
    );
    // a wakes up after the takeover.
    assert_eq!(
        fenced_write(&resource, &fence, &ledger, "a", ta).await,
        FenceOutcome::Stale { highest: tb }
    );
    // The same tenure writes again.
    assert_eq!(
        fenced_write(&resource, &fence, &ledger, "b", tb).await,
        FenceOutcome::Admitted
    );
    assert_eq!(
        (
            writes_by(&resource, &ledger, "a").await,
            writes_by(&resource, &ledger, "b").await,
            stored_token(&resource, &fence, "ledger").await,
        ),
        (1, 2, tb.get())
    );
    for t in [&ledger, &table] {
        resource
            .execute_unprepared(&format!("DROP TABLE {t}"))
            .await
            .expect("drop");
    }
}

/// Token 7 admits first and holds its transaction open; token 5's admission waits for it, and
/// once 7 commits 5 is refused: 5 is never stored.
async fn lower_token_waits_then_is_refused(
    resource: DatabaseConnection,
    tag: &str,
    backend: Option<Backend>,
) {
    let pid = std::process::id();
    let mut fence = Fence::new(resource.clone()).table_prefix(format!("c{tag}_{pid}_"));
    if let Some(backend) = backend {
        fence = fence.backend(backend);
    }
    let table = fence.table_name().expect("table");
    resource
        .execute_unprepared(&format!("DROP TABLE IF EXISTS {table}"))
        .await
        .expect("drop");
    fence.create_table().await.expect("create fence table");

    let seven = resource.begin().await.expect("begin");
    assert_eq!(
        fence
            .admit(&seven, "ledger", FencingToken(7))
            .await
            .expect("admit 7"),
        FenceOutcome::Admitted
    );
    let five = tokio::spawn({
        let (resource, fence) = (resource.clone(), fence.clone());
        async move {
            let txn = resource.begin().await.expect("begin");
            let outcome = fence
                .admit(&txn, "ledger", FencingToken(5))
                .await
                .expect("admit 5");
            if outcome.is_admitted() {
                txn.commit().await.expect("commit 5");
            } else {
                txn.rollback().await.expect("rollback 5");
            }
            outcome
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !five.is_finished(),
        "token 5 was answered while token 7's transaction held the resource"
    );
    seven.commit().await.expect("commit 7");
    assert_eq!(
        five.await.expect("task"),
        FenceOutcome::Stale {
            highest: FencingToken(7)
        }
    );
    assert_eq!(stored_token(&resource, &fence, "ledger").await, 7);
    resource
        .execute_unprepared(&format!("DROP TABLE {table}"))
        .await
        .expect("drop");
}

fn sqlite_files(tag: &str) -> (ScratchDir, String, String) {
    let dir = ScratchDir::new(&format!("resource-fence-{tag}"));
    let (lease, resource) = (dir.sqlite_url("lease.db"), dir.sqlite_url("resource.db"));
    (dir, lease, resource)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite() {
    let (dir, lease, resource) = sqlite_files("takeover");
    let db = Database::connect(&resource).await.expect("resource");
    takeover_fences_the_old_holder(&lease, db.clone(), "sqlite", None).await;
    db.close().await.expect("close");
    drop(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_concurrent() {
    let (dir, _, resource) = sqlite_files("concurrent");
    let db = Database::connect(&resource).await.expect("resource");
    lower_token_waits_then_is_refused(db.clone(), "sqlite", None).await;
    db.close().await.expect("close");
    drop(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    let Some(url) = backend_url(POSTGRES_ENV) else {
        return;
    };
    let (db, name) = resource_database(&url, "pg").await;
    takeover_fences_the_old_holder(&url, db.clone(), "pg", None).await;
    lower_token_waits_then_is_refused(db.clone(), "pg", None).await;
    drop_resource_database(&url, db, &name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql() {
    let Some(url) = backend_url(MYSQL_ENV) else {
        return;
    };
    let (db, name) = resource_database(&url, "my").await;
    takeover_fences_the_old_holder(&url, db.clone(), "my", None).await;
    lower_token_waits_then_is_refused(db.clone(), "my", None).await;
    drop_resource_database(&url, db, &name).await;
}

/// The path without `RETURNING` (Oracle MySQL), run on the MySQL-family test server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_read_back() {
    let Some(url) = backend_url(MYSQL_ENV) else {
        return;
    };
    let (db, name) = resource_database(&url, "my8").await;
    takeover_fences_the_old_holder(&url, db.clone(), "my8", Some(Backend::MySql)).await;
    lower_token_waits_then_is_refused(db.clone(), "my8", Some(Backend::MySql)).await;
    a_snapshot_older_than_a_higher_token_is_refused(db.clone(), "my8", Some(Backend::MySql)).await;
    drop_resource_database(&url, db, &name).await;
}

/// MariaDB's path with `RETURNING`, under the same interleaving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_snapshot() {
    let Some(url) = backend_url(MYSQL_ENV) else {
        return;
    };
    let (db, name) = resource_database(&url, "my_snapshot").await;
    a_snapshot_older_than_a_higher_token_is_refused(db.clone(), "my", None).await;
    drop_resource_database(&url, db, &name).await;
}

/// A admits 5 and commits; A opens a REPEATABLE READ transaction and reads the fence row (its
/// snapshot: 5); B admits 6 and commits; A admits 5 in its open transaction. The fence must
/// answer from the newest committed row, not A's snapshot: stale, highest 6.
async fn a_snapshot_older_than_a_higher_token_is_refused(
    db: DatabaseConnection,
    tag: &str,
    backend: Option<Backend>,
) {
    let mut fence = Fence::new(db.clone()).table_prefix(format!("{tag}_snapshot_"));
    if let Some(backend) = backend {
        fence = fence.backend(backend);
    }
    fence.create_table().await.expect("fence table");
    let table = fence.table_name().expect("table");
    let resource = "snapshot";
    db.execute_unprepared(&format!(
        "DELETE FROM {table} WHERE resource = '{resource}'"
    ))
    .await
    .expect("clean");
    let admit_alone = |token: i64| {
        let (db, fence) = (db.clone(), fence.clone());
        async move {
            let txn = db.begin().await.expect("begin");
            let outcome = fence
                .admit(&txn, resource, FencingToken(token))
                .await
                .expect("admit");
            txn.commit().await.expect("commit");
            outcome
        }
    };
    assert_eq!(admit_alone(5).await, FenceOutcome::Admitted);
    let a = db
        .begin_with_config(Some(sea_orm::IsolationLevel::RepeatableRead), None)
        .await
        .expect("begin a");
    let seen = a
        .query_one_raw(Statement::from_string(
            db.get_database_backend(),
            format!("SELECT token AS n FROM {table} WHERE resource = '{resource}'"),
        ))
        .await
        .expect("read")
        .expect("row");
    assert_eq!(seen.try_get::<i64>("", "n").expect("n"), 5);
    assert_eq!(admit_alone(6).await, FenceOutcome::Admitted);
    let late = fence
        .admit(&a, resource, FencingToken(5))
        .await
        .expect("admit in a");
    a.rollback().await.expect("rollback a");
    assert_eq!(
        late,
        FenceOutcome::Stale {
            highest: FencingToken(6)
        },
        "a stale writer was admitted from its transaction's snapshot"
    );
}

#[test]
fn database_replaced_in_urls() {
    assert_eq!(
        with_database("postgres://postgres@127.0.0.1:5432/test", "x"),
        "postgres://postgres@127.0.0.1:5432/x"
    );
    assert_eq!(
        with_database("mysql://root@h/test?ssl-mode=disabled", "x"),
        "mysql://root@h/x?ssl-mode=disabled"
    );
    assert_eq!(with_database("mysql://root@h", "x"), "mysql://root@h/x");
}

/// Bad arguments are refused before any statement; a missing fence table is a database error
/// naming the table.
#[tokio::test]
async fn bad_input_and_missing_table_are_errors() {
    let db = Database::connect("sqlite::memory:").await.expect("connect");
    let fence = Fence::new(db.clone());
    let txn = db.begin().await.expect("begin");
    for resource in ["", &"r".repeat(256), "a\0b"] {
        assert!(
            matches!(
                fence.admit(&txn, resource, FencingToken(1)).await,
                Err(FenceError::Invalid(_))
            ),
            "{resource:?} was not refused"
        );
    }
    match fence.admit(&txn, "ledger", FencingToken(1)).await {
        Err(FenceError::Database { table, .. }) => assert_eq!(table, "leasehold_fence"),
        other => panic!("admit without the table: {other:?}"),
    }
    txn.rollback().await.expect("rollback");
    let bad = Fence::new(db).table_prefix("no-dashes");
    assert!(matches!(
        bad.create_table().await,
        Err(FenceError::Invalid(_))
    ));
}
