//! `close` in both modes, and dropping the last handle.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use leasehold_local::{CloseMode, ExpiryCause, LocalLeaseError, LocalLeases};
use tokio::sync::mpsc;
use tokio::time::sleep;

/// Counts its own drops.
struct DropCounter(Arc<AtomicUsize>);

impl Drop for DropCounter {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn assert_closed(leases: &LocalLeases) {
    assert!(matches!(
        leases.create("new", Duration::from_secs(1), |_| {}),
        Err(LocalLeaseError::Closed)
    ));
    assert_eq!(leases.renew("a"), Err(LocalLeaseError::Closed));
    assert_eq!(leases.cancel("a"), Err(LocalLeaseError::Closed));
    assert_eq!(leases.remaining("a"), Err(LocalLeaseError::Closed));
    assert!(leases.is_empty());
}

#[tokio::test(start_paused = true)]
async fn expire_all_calls_every_listener_with_cause_closed_in_deadline_order() {
    let leases = LocalLeases::new();
    let (tx, mut rx) = mpsc::unbounded_channel();
    for (name, secs) in [("c", 30), ("a", 10), ("b", 20)] {
        let tx = tx.clone();
        leases
            .create(name, Duration::from_secs(secs), move |lease| {
                let _ = tx.send((lease.name().to_owned(), lease.cause()));
            })
            .expect("created");
    }
    drop(tx);
    assert_eq!(leases.close(CloseMode::ExpireAll), 3);
    assert_closed(&leases);
    assert_eq!(
        leases.close(CloseMode::ExpireAll),
        0,
        "closing twice is a no-op"
    );

    let mut got = Vec::new();
    while let Some(item) = rx.recv().await {
        got.push(item);
    }
    let closed = ExpiryCause::Closed;
    assert_eq!(
        got,
        [
            ("a".to_owned(), closed),
            ("b".to_owned(), closed),
            ("c".to_owned(), closed)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn drop_all_drops_listeners_uncalled() {
    let leases = LocalLeases::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let drops = Arc::new(AtomicUsize::new(0));
    for name in ["a", "b"] {
        let (calls, guard) = (Arc::clone(&calls), DropCounter(Arc::clone(&drops)));
        leases
            .create(name, Duration::from_secs(1), move |_| {
                let _guard = guard;
                calls.fetch_add(1, Ordering::SeqCst);
            })
            .expect("created");
    }
    assert_eq!(leases.close(CloseMode::DropAll), 2);
    assert_eq!(
        drops.load(Ordering::SeqCst),
        2,
        "listeners dropped at close"
    );
    assert_closed(&leases);
    sleep(Duration::from_secs(60)).await;
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn dropping_the_last_handle_drops_listeners_uncalled() {
    let leases = LocalLeases::new();
    let clone = leases.clone();
    let calls = Arc::new(AtomicUsize::new(0));
    let drops = Arc::new(AtomicUsize::new(0));
    let (c, guard) = (Arc::clone(&calls), DropCounter(Arc::clone(&drops)));
    leases
        .create("a", Duration::from_secs(1), move |_| {
            let _guard = guard;
            c.fetch_add(1, Ordering::SeqCst);
        })
        .expect("created");
    drop(leases);
    assert_eq!(clone.len(), 1, "a clone keeps the service open");
    drop(clone);
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    sleep(Duration::from_secs(60)).await;
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

/// A listener's captures may call back into the service when dropped; that must not deadlock.
struct CallsBack(LocalLeases);

impl Drop for CallsBack {
    fn drop(&mut self) {
        let _ = self.0.len();
        let _ = self.0.cancel("other");
    }
}

#[tokio::test(start_paused = true)]
async fn dropping_a_listener_may_call_back_into_the_service() {
    let leases = LocalLeases::new();
    leases
        .create("other", Duration::from_secs(100), |_| {})
        .expect("created");
    let back = CallsBack(leases.clone());
    leases
        .create("a", Duration::from_secs(1), move |_| drop(back))
        .expect("created");
    leases.cancel("a").expect("cancelled");
    assert!(leases.is_empty(), "the dropped listener cancelled `other`");

    let back = CallsBack(leases.clone());
    leases
        .create("b", Duration::from_secs(1), move |_| drop(back))
        .expect("created");
    assert_eq!(leases.close(CloseMode::DropAll), 1);
}

#[test]
fn a_runtime_shutdown_closes_the_service() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime");
    let leases = LocalLeases::on(runtime.handle(), leasehold_core::MonotonicClock);
    leases
        .create("a", Duration::from_secs(1), |_| {})
        .expect("created");
    drop(runtime);
    assert_closed(&leases);
}
