//! Locks on SQLite (file), PostgreSQL and MySQL: mutual exclusion across tasks and holders,
//! try_locker's waits and cancel safety, unlock refusals, prefix queries, and the fencing example.
//!
//! Separate services in one process stand in for separate OS processes (each is its own holder
//! with its own engine thread and connection pools).

mod common;

#[path = "../../../examples/fencing.rs"]
mod fencing;

use std::time::Duration;

use leasehold::store::StoreBuilder;
use leasehold::store::sea_orm::{ConnectionTrait, DbBackend, Statement};
use leasehold::{LeaseService, LockError};
use leasehold_testkit::backends::backend_url;

fn urls() -> Vec<String> {
    let mut urls = vec![common::sqlite_file_url("locks")];
    urls.extend(backend_url("LEASEHOLD_TEST_POSTGRES"));
    urls.extend(backend_url("LEASEHOLD_TEST_MYSQL"));
    urls
}

async fn service(url: &str) -> LeaseService {
    let s = LeaseService::builder(url).build().await.expect("service");
    s.locks().set_retry_interval(Duration::from_millis(20));
    s
}

fn stmt(db: DbBackend, sql: &str, values: Vec<leasehold::store::sea_orm::Value>) -> Statement {
    let sql = if db == DbBackend::Postgres {
        let mut n = 0;
        sql.chars()
            .map(|c| {
                if c == '?' {
                    n += 1;
                    format!("${n}")
                } else {
                    c.to_string()
                }
            })
            .collect()
    } else {
        sql.to_owned()
    };
    Statement::from_sql_and_values(db, sql, values)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mutual_exclusion_16_tasks_over_4_services_1000_increments() {
    for url in urls() {
        let ns = common::unique_namespace("lock-mutex");
        let tag = ns.replace(|c: char| !c.is_ascii_alphanumeric(), "_");
        let store = StoreBuilder::new(url.clone())
            .connect()
            .await
            .expect("store");
        let db = store.connection().clone();
        let backend = db.get_database_backend();
        let (counter, events) = (format!("counter_{tag}"), format!("events_{tag}"));
        db.execute_unprepared(&format!("CREATE TABLE {counter} (n BIGINT NOT NULL)"))
            .await
            .expect("counter table");
        db.execute_unprepared(&format!("INSERT INTO {counter} (n) VALUES (0)"))
            .await
            .expect("counter row");
        let id = match backend {
            DbBackend::Postgres => "BIGSERIAL PRIMARY KEY",
            DbBackend::MySql => "BIGINT AUTO_INCREMENT PRIMARY KEY",
            _ => "INTEGER PRIMARY KEY AUTOINCREMENT",
        };
        db.execute_unprepared(&format!(
            "CREATE TABLE {events} (id {id}, worker BIGINT NOT NULL, kind BIGINT NOT NULL)"
        ))
        .await
        .expect("events table");

        let services: Vec<LeaseService> =
            futures::future::join_all((0..4).map(|_| service(&url))).await;
        let mut tasks = Vec::new();
        for worker in 0..16_i64 {
            let svc = services[usize::try_from(worker % 4).expect("small")].clone();
            let (db, ns, counter, events) =
                (db.clone(), ns.clone(), counter.clone(), events.clone());
            let rounds = if worker < 8 { 63 } else { 62 }; // 8*63 + 8*62 = 1000
            tasks.push(tokio::spawn(async move {
                for _ in 0..rounds {
                    let guard = svc
                        .try_locker(&ns, "counter", None, Duration::from_secs(30))
                        .await
                        .expect("try_locker")
                        .expect("waits forever");
                    let ins = format!("INSERT INTO {events} (worker, kind) VALUES (?, ?)");
                    db.execute_raw(stmt(backend, &ins, vec![worker.into(), 1_i64.into()]))
                        .await
                        .expect("enter");
                    let row = db
                        .query_one_raw(Statement::from_string(
                            backend,
                            format!("SELECT n FROM {counter}"),
                        ))
                        .await
                        .expect("read")
                        .expect("row");
                    let n: i64 = row.try_get("", "n").expect("n");
                    tokio::task::yield_now().await;
                    db.execute_raw(stmt(
                        backend,
                        &format!("UPDATE {counter} SET n = ?"),
                        vec![(n + 1).into()],
                    ))
                    .await
                    .expect("write");
                    db.execute_raw(stmt(backend, &ins, vec![worker.into(), 2_i64.into()]))
                        .await
                        .expect("exit");
                    guard.unlock().await.expect("unlock");
                }
            }));
        }
        for t in tasks {
            t.await.expect("task");
        }
        let row = db
            .query_one_raw(Statement::from_string(
                backend,
                format!("SELECT n FROM {counter}"),
            ))
            .await
            .expect("read")
            .expect("row");
        assert_eq!(row.try_get::<i64>("", "n").expect("n"), 1000, "{url}");
        let rows = db
            .query_all_raw(Statement::from_string(
                backend,
                format!("SELECT worker, kind FROM {events} ORDER BY id"),
            ))
            .await
            .expect("events");
        assert_eq!(rows.len(), 2000);
        for pair in rows.chunks(2) {
            let (w0, k0): (i64, i64) = (
                pair[0].try_get("", "worker").expect("w"),
                pair[0].try_get("", "kind").expect("k"),
            );
            let (w1, k1): (i64, i64) = (
                pair[1].try_get("", "worker").expect("w"),
                pair[1].try_get("", "kind").expect("k"),
            );
            assert_eq!(
                (k0, k1, w0),
                (1, 2, w1),
                "{url}: critical sections overlapped"
            );
        }
        for s in services {
            s.shutdown().await.expect("shutdown");
        }
        db.execute_unprepared(&format!("DROP TABLE {counter}"))
            .await
            .expect("drop");
        db.execute_unprepared(&format!("DROP TABLE {events}"))
            .await
            .expect("drop");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_locker_times_out_waits_forever_and_is_cancel_safe() {
    for url in urls() {
        let ns = common::unique_namespace("lock-wait");
        let (a, b) = (service(&url).await, service(&url).await);
        let held = a
            .lock(&ns, "x", Duration::from_secs(30))
            .await
            .expect("lock")
            .expect("free");

        // Times out at `wait` (generous bounds).
        let start = leasehold::clock::Clock::now(&leasehold::clock::MonotonicClock);
        let none = b
            .try_locker(
                &ns,
                "x",
                Some(Duration::from_millis(500)),
                Duration::from_secs(30),
            )
            .await
            .expect("try_locker");
        let took = start.elapsed();
        assert!(none.is_none(), "{url}");
        assert!(
            took >= Duration::from_millis(450) && took < Duration::from_secs(10),
            "{url}: {took:?}"
        );

        // Cancel safety: drop waiting futures, locally queued and at the head.
        for _ in 0..3 {
            let _ = tokio::time::timeout(
                Duration::from_millis(150),
                b.try_locker(&ns, "x", None, Duration::from_secs(30)),
            )
            .await;
        }

        // Waits forever, released after 1 s.
        let releaser = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            held.unlock().await.expect("unlock");
        });
        let got = b
            .try_locker(&ns, "x", None, Duration::from_secs(30))
            .await
            .expect("try_locker")
            .expect("waits forever");
        releaser.await.expect("releaser");
        let record = b.current_holder_in(&ns, "x").await;
        assert_eq!(record.as_deref(), Some(b.holder().as_str()), "{url}");
        got.unlock().await.expect("unlock");
        // Nothing left held by the cancelled waiters.
        assert!(
            a.lock(&ns, "x", Duration::from_secs(30))
                .await
                .expect("lock")
                .is_some(),
            "{url}"
        );
        a.shutdown().await.expect("shutdown");
        b.shutdown().await.expect("shutdown");
    }
}

trait HolderOf {
    async fn current_holder_in(&self, ns: &str, name: &str) -> Option<String>;
}

impl HolderOf for LeaseService {
    async fn current_holder_in(&self, ns: &str, name: &str) -> Option<String> {
        self.query_locked_instance_by_name_prefix(ns, name)
            .await
            .expect("query")
            .into_iter()
            .find(|r| r.key.name.as_str() == name)
            .map(|r| r.holder.as_str().to_owned())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlock_after_expiry_is_lock_lost_and_foreign_unlock_is_refused() {
    for url in urls() {
        let ns = common::unique_namespace("lock-unlock");
        let (a, b) = (service(&url).await, service(&url).await);
        let guard = a
            .lock(&ns, "short", Duration::from_millis(300))
            .await
            .expect("lock")
            .expect("free");
        tokio::time::sleep(Duration::from_millis(800)).await;
        assert!(!guard.is_held());
        assert!(
            matches!(guard.unlock().await, Err(LockError::LockLost { .. })),
            "{url}"
        );

        let _held = a
            .lock(&ns, "mine", Duration::from_secs(30))
            .await
            .expect("lock")
            .expect("free");
        let before = a
            .query_locked_instance_by_name_prefix(&ns, "mine")
            .await
            .expect("q");
        assert!(
            matches!(b.unlock(&ns, "mine").await, Err(LockError::NotHeld { .. })),
            "{url}"
        );
        let after = a
            .query_locked_instance_by_name_prefix(&ns, "mine")
            .await
            .expect("q");
        assert_eq!(
            before
                .iter()
                .map(|r| (&r.holder, r.token))
                .collect::<Vec<_>>(),
            after
                .iter()
                .map(|r| (&r.holder, r.token))
                .collect::<Vec<_>>(),
            "{url}"
        );
        a.unlock(&ns, "mine").await.expect("ours");
        a.shutdown().await.expect("shutdown");
        b.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefix_query_treats_wildcards_and_quotes_literally() {
    for url in urls() {
        let ns = common::unique_namespace("lock-prefix");
        let a = service(&url).await;
        let names = [
            "a%b-1", "a%b-2", "axb-3", "a_c-1", "abc-1", "o'q-1", "o\"q-2",
        ];
        let mut guards = Vec::new();
        for n in names {
            guards.push(
                a.lock(&ns, n, Duration::from_secs(30))
                    .await
                    .expect("lock")
                    .expect("free"),
            );
        }
        let names_of = |prefix: &'static str| {
            let a = a.clone();
            let ns = ns.clone();
            async move {
                a.query_locked_instance_by_name_prefix(&ns, prefix)
                    .await
                    .expect("query")
                    .into_iter()
                    .map(|r| {
                        assert!(r.time_left() > Duration::from_secs(10));
                        r.key.name.as_str().to_owned()
                    })
                    .collect::<Vec<_>>()
            }
        };
        assert_eq!(names_of("a%").await, ["a%b-1", "a%b-2"], "{url}");
        assert_eq!(names_of("a_").await, ["a_c-1"], "{url}");
        assert_eq!(names_of("o'").await, ["o'q-1"], "{url}");
        assert_eq!(names_of("o\"").await, ["o\"q-2"], "{url}");
        drop(guards);
        a.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_example_rejects_the_stale_write() {
    for url in urls() {
        let ns = common::unique_namespace("lock-fence");
        let entries = fencing::run(&url, &ns).await.expect("scenario");
        assert_eq!(entries, ["written by B"], "{url}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_at_least_for_keeps_an_early_unlock_held_until_the_minimum() {
    for url in urls() {
        let ns = common::unique_namespace("lock-least");
        let (a, b) = (service(&url).await, service(&url).await);
        let ttl = Duration::from_secs(60);
        let guard = a
            .lock(&ns, "job", ttl)
            .await
            .expect("lock")
            .expect("free")
            .lock_at_least_for(Duration::from_millis(1500));
        guard.unlock().await.expect("unlock");
        assert!(
            b.lock(&ns, "job", ttl).await.expect("lock").is_none(),
            "{url}: released early"
        );
        let got = b
            .try_locker(&ns, "job", Some(Duration::from_secs(20)), ttl)
            .await
            .expect("try_locker");
        assert!(
            got.is_some(),
            "{url}: still held long after the minimum (not the ttl)"
        );
        drop(got);
        a.shutdown().await.expect("shutdown");
        b.shutdown().await.expect("shutdown");
    }
}
