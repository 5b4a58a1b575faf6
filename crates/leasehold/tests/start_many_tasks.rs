//! `LeaseTasks::start_many` on every backend: many tasks started in one call are each
//! a real tenure (their own token, believed by every signal, the row naming this holder), a
//! name given twice is one task, and a bad call leaves everything as it was — a bad name starts
//! nothing, and a name another owner uses stops again whatever the call had started, across
//! chunk boundaries, while the tasks that ran before keep their tenures.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use leasehold::limits::START_CHUNK;
use leasehold::{Error, LeaseConfig, LeaseService, LeaseTaskOptions};

use common::{backends, unique_namespace};

async fn service(url: &str, ns: &str) -> LeaseService {
    LeaseService::builder(url)
        .namespace(ns)
        .config(
            LeaseConfig::default()
                .with_term(Duration::from_secs(10))
                .with_request_timeout(Duration::from_secs(5)),
        )
        .build()
        .await
        .expect("service")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_tasks_started_in_one_call_each_hold_a_tenure() {
    for (backend, url) in backends("start-many") {
        let ns = unique_namespace("many");
        let service = service(&url, &ns).await;
        // More than two chunks, and one name twice (in different chunks).
        let count = 2 * START_CHUNK + START_CHUNK / 2;
        let mut names: Vec<String> = (0..count).map(|i| format!("n{i:05}")).collect();
        names.push("n00003".to_owned());
        let tasks = service
            .tasks()
            .start_many(&names, LeaseTaskOptions::new())
            .await
            .expect("start");
        assert_eq!(tasks.len(), names.len(), "{backend}: one handle per name");
        let mut tokens = HashSet::new();
        for (name, task) in names.iter().zip(&tasks) {
            assert_eq!(task.key().name.as_str(), name, "{backend}: in order");
            let (token, cancel) = tokio::time::timeout(Duration::from_secs(60), task.acquired())
                .await
                .expect("in time")
                .expect("running");
            assert!(
                service.has_lease(name),
                "{backend}: {name} believed (task: {}, token {:?}, cancelled {})",
                task.has_lease(),
                task.token(),
                cancel.is_cancelled()
            );
            assert!(!cancel.is_cancelled(), "{backend}: {name}'s work goes on");
            assert_eq!(task.token(), Some(token));
            tokens.insert((name.clone(), token));
        }
        assert_eq!(
            tokens.len(),
            count,
            "{backend}: the duplicate is the same tenure"
        );
        assert_eq!(
            service.tasks().list().await.expect("tasks").len(),
            count,
            "{backend}: one task per distinct name"
        );
        for name in names.iter().step_by(97) {
            let record = service
                .current_holder(name)
                .await
                .expect("read")
                .expect("a row");
            assert_eq!(&record.holder, service.holder(), "{backend}: {name}");
            assert!(
                tokens.contains(&(name.clone(), record.token)),
                "{backend}: {name}'s row carries the believed token"
            );
        }
        // Starting them again answers the running tasks.
        let again = service
            .tasks()
            .start_many(&names[..10], LeaseTaskOptions::new())
            .await
            .expect("again");
        for (task, first) in again.iter().zip(&tasks) {
            assert_eq!(task.token(), first.token(), "{backend}: same tenure");
        }
        assert!(service.shutdown().await.expect("shutdown") >= count as u64);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_call_leaves_every_task_and_row_as_it_was() {
    for (backend, url) in backends("start-many-bad") {
        let ns = unique_namespace("many-bad");
        let service = service(&url, &ns).await;
        let before = service
            .start_lease_task("before", LeaseTaskOptions::new())
            .await
            .expect("start");
        let (token, cancel) = before.acquired().await.expect("held");

        // A bad name anywhere: nothing is started.
        let mut names: Vec<String> = (0..START_CHUNK + 10).map(|i| format!("b{i:05}")).collect();
        names.push(String::new());
        let refused = service
            .tasks()
            .start_many(&names, LeaseTaskOptions::new())
            .await;
        assert!(
            matches!(refused, Err(Error::Invalid(_))),
            "{backend}: {refused:?}"
        );
        assert_eq!(service.tasks().list().await.expect("tasks").len(), 1);

        // A name a lock of this service holds, in the second chunk: the first chunk was
        // started, and is stopped again; its rows are released.
        let guard = service
            .lock(&ns, "locked", Duration::from_secs(30))
            .await
            .expect("lock")
            .expect("free");
        names.pop();
        names.push("locked".to_owned());
        let refused = service
            .tasks()
            .start_many(&names, LeaseTaskOptions::new())
            .await;
        assert!(
            matches!(refused, Err(Error::KeyInUse { .. })),
            "{backend}: {refused:?}"
        );
        let left: Vec<_> = service
            .tasks()
            .list()
            .await
            .expect("tasks")
            .into_iter()
            .map(|n| n.as_str().to_owned())
            .collect();
        assert_eq!(left, vec!["before".to_owned()], "{backend}");
        for name in names.iter().take(START_CHUNK).step_by(101) {
            assert!(!service.has_lease(name), "{backend}: {name} not believed");
            let row = service.current_holder(name).await.expect("read");
            assert!(row.is_none(), "{backend}: {name} released: {row:?}");
        }
        // What ran before is untouched: same tenure, work not cancelled, the lock still held.
        assert!(service.has_lease("before"));
        assert_eq!(before.token(), Some(token));
        assert!(!cancel.is_cancelled());
        assert!(guard.is_held(), "{backend}: the lock is still held");
        drop(guard);
        service.shutdown().await.expect("shutdown");
    }
}
