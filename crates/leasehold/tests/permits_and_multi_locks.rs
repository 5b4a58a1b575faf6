//! Semaphores and multi-locks on SQLite (file), PostgreSQL and MySQL: never more permit holders
//! than permits across services, a token per permit, a count mismatch refused; multi-locks over
//! crossing orders from many tasks finish without a deadlock or a timeout, never with a belief
//! over part of a set.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use leasehold::{Error, LeaseService};
use leasehold_testkit::backends::backend_url;

fn urls() -> Vec<String> {
    let mut urls = vec![common::sqlite_file_url("permits")];
    urls.extend(backend_url("LEASEHOLD_TEST_POSTGRES"));
    urls.extend(backend_url("LEASEHOLD_TEST_MYSQL"));
    urls
}

async fn services(url: &str, n: usize) -> Vec<LeaseService> {
    let mut out = Vec::new();
    for _ in 0..n {
        let s = LeaseService::builder(url).build().await.expect("service");
        s.locks().set_retry_interval(Duration::from_millis(10));
        out.push(s);
    }
    out
}

const TTL: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn permits_never_exceed_n_across_services() {
    const PERMITS: u32 = 3;
    const TASKS: usize = 12;
    const ROUNDS: usize = 6;
    for url in urls() {
        let ns = common::unique_namespace("permits");
        let svcs = services(&url, 4).await;
        let inside = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for t in 0..TASKS {
            let (svc, ns) = (svcs[t % svcs.len()].clone(), ns.clone());
            let (inside, most) = (Arc::clone(&inside), Arc::clone(&most));
            tasks.push(tokio::spawn(async move {
                let mut tokens = Vec::new();
                for _ in 0..ROUNDS {
                    let permit = svc
                        .locks()
                        .permits()
                        .acquire_within(&ns, "pool", PERMITS, Some(Duration::from_secs(60)), TTL)
                        .await
                        .expect("acquire_permit_within")
                        .expect("a permit within a minute");
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    assert!(permit.is_held() && permit.index() < PERMITS);
                    tokens.push((permit.index(), permit.token()));
                    tokio::task::yield_now().await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    permit.unlock().await.expect("unlock");
                }
                tokens
            }));
        }
        let mut by_permit: Vec<Vec<i64>> = vec![Vec::new(); PERMITS as usize];
        for t in tasks {
            for (i, token) in t.await.expect("task") {
                by_permit[i as usize].push(token.get());
            }
        }
        let most = most.load(Ordering::SeqCst);
        assert!(
            most <= PERMITS as usize,
            "{url}: {most} holders of {PERMITS} permits"
        );
        // Each permit is its own lock: its tokens are distinct (one per tenure).
        for tokens in &mut by_permit {
            let n = tokens.len();
            tokens.sort_unstable();
            tokens.dedup();
            assert_eq!(tokens.len(), n, "{url}: a permit's token was given twice");
        }
        let total: usize = by_permit.iter().map(Vec::len).sum();
        assert_eq!(total, TASKS * ROUNDS);
        for s in svcs {
            s.shutdown().await.expect("shutdown");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_all_taken_then_mismatch_refused() {
    for url in urls() {
        let ns = common::unique_namespace("permits-n");
        let svcs = services(&url, 2).await;
        let (a, b) = (&svcs[0], &svcs[1]);
        let p0 = a
            .locks()
            .permits()
            .acquire(&ns, "s", 2, TTL)
            .await
            .expect("p0")
            .expect("free");
        let p1 = b
            .locks()
            .permits()
            .acquire(&ns, "s", 2, TTL)
            .await
            .expect("p1")
            .expect("free");
        assert_ne!(p0.index(), p1.index());
        assert!(
            a.locks()
                .permits()
                .acquire(&ns, "s", 2, TTL)
                .await
                .expect("third")
                .is_none()
        );
        match b.locks().permits().acquire(&ns, "s", 5, TTL).await {
            Err(Error::PermitsMismatch {
                asked: 5, found: 2, ..
            }) => {}
            other => panic!("{url}: another count was not refused: {other:?}"),
        }
        match b.locks().permits().acquire(&ns, "s", 0, TTL).await {
            Err(Error::Invalid(_)) => {}
            other => panic!("{url}: zero permits: {other:?}"),
        }
        p0.unlock().await.expect("unlock");
        p1.unlock().await.expect("unlock");
        // Every permit of the old count released: a new count is fine.
        let p = b
            .locks()
            .permits()
            .acquire(&ns, "s", 5, TTL)
            .await
            .expect("p")
            .expect("free");
        assert_eq!(p.permits(), 5);
        drop(p);
        for s in svcs {
            s.shutdown().await.expect("shutdown");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn multi_locks_in_crossing_orders_finish_without_deadlock() {
    const TASKS: usize = 8;
    const ROUNDS: usize = 5;
    for url in urls() {
        let ns = common::unique_namespace("multi");
        let svcs = services(&url, 4).await;
        let inside = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for t in 0..TASKS {
            let (svc, ns, inside) = (
                svcs[t % svcs.len()].clone(),
                ns.clone(),
                Arc::clone(&inside),
            );
            let names: Vec<&'static str> = if t % 2 == 0 {
                vec!["a", "b", "c"]
            } else {
                vec!["c", "b", "a"]
            };
            tasks.push(tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    let set = svc
                        .locks()
                        .all()
                        .acquire_within(&ns, &names, Some(Duration::from_secs(60)), TTL)
                        .await
                        .expect("acquire_all_within")
                        .expect("the set within a minute: no deadlock");
                    assert!(set.is_held());
                    assert_eq!(set.tokens().len(), 3);
                    assert!(set.guards().iter().all(leasehold::LockGuard::is_held));
                    assert_eq!(
                        inside.fetch_add(1, Ordering::SeqCst),
                        0,
                        "two sets held at once"
                    );
                    tokio::task::yield_now().await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    set.unlock().await.expect("unlock");
                }
            }));
        }
        for t in tasks {
            t.await.expect("task");
        }
        for s in svcs {
            s.shutdown().await.expect("shutdown");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_lock_refused_leaves_nothing_and_one_loss_ends_the_set() {
    for url in urls() {
        let ns = common::unique_namespace("multi-refused");
        let svcs = services(&url, 2).await;
        let (a, b) = (&svcs[0], &svcs[1]);
        let x = a
            .locks()
            .acquire(&ns, "x", TTL)
            .await
            .expect("x")
            .expect("free");
        match b
            .locks()
            .all()
            .attempt(&ns, &["y", "x", "z"], TTL)
            .await
            .expect("attempt")
        {
            leasehold::locks::MultiLockOutcome::HeldBy {
                key, holder, token, ..
            } => {
                assert_eq!(key.name.as_str(), "x");
                assert_eq!(&holder, a.holder());
                assert_eq!(token, x.token());
            }
            other => panic!("{url}: {other:?}"),
        }
        for name in ["y", "z"] {
            let held = a.locks().held_with_prefix(&ns, name).await.expect("list");
            assert!(held.is_empty(), "{url}: {name} left behind: {held:?}");
        }
        x.unlock().await.expect("unlock");
        let set = b
            .locks()
            .all()
            .acquire(&ns, &["y", "x", "z"], TTL)
            .await
            .expect("acquire_all")
            .expect("free now");
        let cancel = set.cancellation_token();
        // One tenure of the set ends (released by name): the belief of the set ends.
        b.locks().release(&ns, "y").await.expect("release y");
        assert!(!set.is_held());
        assert!(cancel.is_cancelled());
        assert!(
            set.guards().iter().any(leasehold::LockGuard::is_held),
            "the others still live"
        );
        drop(set);
        for s in svcs {
            s.shutdown().await.expect("shutdown");
        }
    }
}
