//! Mutual exclusion across real OS processes: the test binary starts itself three times as a
//! child (selected by `LEASEHOLD_LOCK_CHILD`), each child a service of its own incrementing a
//! shared counter under one lock, alongside the parent's tasks. The counter must end exact and
//! the recorded critical sections must never interleave.

mod common;

use std::process::Stdio;
use std::time::Duration;

use leasehold::LeaseService;
use leasehold::store::StoreBuilder;
use leasehold::store::sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, Statement, Value};
use leasehold_testkit::backends::backend_url;

const CHILDREN: usize = 3;
const PARENT_TASKS: usize = 4;
const ROUNDS: i64 = 50; // per child and per parent task: (3 + 4) * 50 = 350 increments

fn urls() -> Vec<String> {
    let mut urls = vec![common::sqlite_file_url("lockproc")];
    urls.extend(backend_url("LEASEHOLD_TEST_POSTGRES"));
    urls.extend(backend_url("LEASEHOLD_TEST_MYSQL"));
    urls
}

fn stmt(db: DbBackend, sql: &str, values: Vec<Value>) -> Statement {
    let mut n = 0;
    let sql: String = sql
        .chars()
        .map(|c| match c {
            '?' if db == DbBackend::Postgres => {
                n += 1;
                format!("${n}")
            }
            c => c.to_string(),
        })
        .collect();
    Statement::from_sql_and_values(db, sql, values)
}

async fn increments(svc: &LeaseService, db: &DatabaseConnection, ns: &str, tag: &str, worker: i64) {
    let backend = db.get_database_backend();
    let ins = format!("INSERT INTO events_{tag} (worker, kind) VALUES (?, ?)");
    for _ in 0..ROUNDS {
        let guard = svc
            .try_locker(ns, "counter", None, Duration::from_secs(30))
            .await
            .expect("try_locker")
            .expect("waits forever");
        db.execute_raw(stmt(backend, &ins, vec![worker.into(), 1_i64.into()]))
            .await
            .expect("enter");
        let row = db
            .query_one_raw(Statement::from_string(
                backend,
                format!("SELECT n FROM counter_{tag}"),
            ))
            .await
            .expect("read")
            .expect("row");
        let n: i64 = row.try_get("", "n").expect("n");
        tokio::task::yield_now().await;
        let upd = format!("UPDATE counter_{tag} SET n = ?");
        db.execute_raw(stmt(backend, &upd, vec![(n + 1).into()]))
            .await
            .expect("write");
        db.execute_raw(stmt(backend, &ins, vec![worker.into(), 2_i64.into()]))
            .await
            .expect("exit");
        guard.unlock().await.expect("unlock");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_excludes_across_os_processes() {
    if let Ok(spec) = std::env::var("LEASEHOLD_LOCK_CHILD") {
        // Child: url \n namespace \n tag \n worker
        let parts: Vec<&str> = spec.split('\n').collect();
        let (url, ns, tag) = (parts[0], parts[1], parts[2]);
        let worker: i64 = parts[3].parse().expect("worker");
        let svc = LeaseService::builder(url).build().await.expect("service");
        svc.locks().set_retry_interval(Duration::from_millis(20));
        let db = StoreBuilder::new(url)
            .connect()
            .await
            .expect("store")
            .connection()
            .clone();
        increments(&svc, &db, ns, tag, worker).await;
        svc.shutdown().await.expect("shutdown");
        return;
    }
    for url in urls() {
        let ns = common::unique_namespace("lock-proc");
        let tag = ns.replace(|c: char| !c.is_ascii_alphanumeric(), "_");
        let db = StoreBuilder::new(url.clone())
            .connect()
            .await
            .expect("store")
            .connection()
            .clone();
        let backend = db.get_database_backend();
        let id = match backend {
            DbBackend::Postgres => "BIGSERIAL PRIMARY KEY",
            DbBackend::MySql => "BIGINT AUTO_INCREMENT PRIMARY KEY",
            _ => "INTEGER PRIMARY KEY AUTOINCREMENT",
        };
        for sql in [
            format!("CREATE TABLE counter_{tag} (n BIGINT NOT NULL)"),
            format!("INSERT INTO counter_{tag} (n) VALUES (0)"),
            format!(
                "CREATE TABLE events_{tag} (id {id}, worker BIGINT NOT NULL, kind BIGINT NOT NULL)"
            ),
        ] {
            db.execute_unprepared(&sql).await.expect("setup");
        }
        let exe = std::env::current_exe().expect("test binary");
        let children: Vec<_> = (0..CHILDREN)
            .map(|i| {
                std::process::Command::new(&exe)
                    .args([
                        "--exact",
                        "lock_excludes_across_os_processes",
                        "--nocapture",
                    ])
                    .env(
                        "LEASEHOLD_LOCK_CHILD",
                        format!("{url}\n{ns}\n{tag}\n{}", 100 + i),
                    )
                    .stdout(Stdio::null())
                    .spawn()
                    .expect("spawn child")
            })
            .collect();
        let svc = LeaseService::builder(url.clone())
            .build()
            .await
            .expect("service");
        svc.locks().set_retry_interval(Duration::from_millis(20));
        let tasks: Vec<_> = (0..PARENT_TASKS)
            .map(|w| {
                let (svc, db, ns, tag) = (svc.clone(), db.clone(), ns.clone(), tag.clone());
                tokio::spawn(async move {
                    increments(&svc, &db, &ns, &tag, i64::try_from(w).expect("small")).await;
                })
            })
            .collect();
        for t in tasks {
            t.await.expect("task");
        }
        for mut child in children {
            let status = tokio::task::spawn_blocking(move || child.wait())
                .await
                .expect("join")
                .expect("wait");
            assert!(status.success(), "{url}: a child failed: {status}");
        }
        let row = db
            .query_one_raw(Statement::from_string(
                backend,
                format!("SELECT n FROM counter_{tag}"),
            ))
            .await
            .expect("read")
            .expect("row");
        let expected = i64::try_from(CHILDREN + PARENT_TASKS).expect("small") * ROUNDS;
        assert_eq!(row.try_get::<i64>("", "n").expect("n"), expected, "{url}");
        let rows = db
            .query_all_raw(Statement::from_string(
                backend,
                format!("SELECT worker, kind FROM events_{tag} ORDER BY id"),
            ))
            .await
            .expect("events");
        assert_eq!(rows.len(), usize::try_from(expected * 2).expect("small"));
        for pair in rows.chunks(2) {
            let get = |r: &leasehold::store::sea_orm::QueryResult, c: &str| {
                r.try_get::<i64>("", c).expect("col")
            };
            assert_eq!(
                (
                    get(&pair[0], "kind"),
                    get(&pair[1], "kind"),
                    get(&pair[0], "worker")
                ),
                (1, 2, get(&pair[1], "worker")),
                "{url}: critical sections overlapped"
            );
        }
        svc.shutdown().await.expect("shutdown");
        db.execute_unprepared(&format!("DROP TABLE counter_{tag}"))
            .await
            .expect("drop");
        db.execute_unprepared(&format!("DROP TABLE events_{tag}"))
            .await
            .expect("drop");
    }
}
