//! SQLite: the writers of one process at one file pass a gate one at a time, in arrival order
//! (`backend/sqlite/gate.rs`). Without it each writer that found the write lock taken slept in
//! SQLite's busy handler, whose growing back-off (1, 2, 5, 10, 15, 20, 25 ms…) served the
//! latest arrival first and answered a waiting grant tens of milliseconds after the lock was
//! free. The gate's wait is bounded by the store's server bound and ends as a busy timeout does,
//! with nothing written; reads never wait for it.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use leasehold_storage::{
    AcquireOutcome, Grant, HolderId, LeaseKey, LeaseStore, SeaOrmStore, StoreBuilder, StoreError,
    Term,
};
use leasehold_testkit::scratch::ScratchDir;

fn term() -> Term {
    Term::new("term", Duration::from_secs(30)).expect("term")
}

/// A file of its own for one test, in a directory removed when the first is dropped.
fn url(test: &str) -> (ScratchDir, String) {
    let dir = ScratchDir::new(&format!("write-gate-{test}"));
    let url = dir.sqlite_url("leases.db");
    (dir, url)
}

async fn store(url: &str, bound: Duration) -> SeaOrmStore {
    StoreBuilder::new(url)
        .server_timeout(bound)
        .connect()
        .await
        .expect("connect")
}

fn key(name: &str) -> LeaseKey {
    LeaseKey::parse("gate", name).expect("key")
}

fn holder(name: &str) -> HolderId {
    HolderId::new(name).expect("holder")
}

/// Opens a fenced transaction of `store` on a tenure of its own: it holds the file's write lock
/// (and, in this process, the gate) until it is committed or dropped.
async fn fenced(store: &SeaOrmStore) -> leasehold_storage::FencedTransaction {
    let (k, me) = (key("fenced"), holder("fencer"));
    let AcquireOutcome::Acquired { token, .. } = store
        .begin_tenure(&k, &me, Grant::New, term(), None)
        .await
        .expect("grant")
    else {
        panic!("the fenced key was not granted");
    };
    store
        .begin_fenced(&k, &me, token)
        .await
        .expect("begin fenced")
        .expect("live")
}

// Current-thread runtime: a spawned writer runs up to its wait at the gate (no I/O comes
// before it) whenever the test task sleeps, so the writers arrive in the order they are spawned.
#[tokio::test]
async fn writers_of_one_process_are_served_in_arrival_order() {
    let (_dir, url) = url("order");
    let bound = Duration::from_secs(10);
    let first = store(&url, bound).await;
    let txn = fenced(&first).await;
    let served = Arc::new(Mutex::new(Vec::new()));
    let mut writers = Vec::new();
    for i in 0..6 {
        let (store, served) = (store(&url, bound).await, Arc::clone(&served));
        writers.push(tokio::spawn(async move {
            let got = store
                .begin_tenure(
                    &key(&format!("w{i}")),
                    &holder(&format!("w{i}")),
                    Grant::New,
                    term(),
                    None,
                )
                .await;
            served
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(i);
            got
        }));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A read does not wait for the writers' gate (WAL readers do not wait for the writer).
    let read = tokio::time::timeout(bound, first.get(&key("fenced"))).await;
    assert!(
        matches!(read, Ok(Ok(Some(ref rec))) if rec.held),
        "a read waited for the gate or failed: {read:?}"
    );
    assert!(
        served
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_empty(),
        "a writer passed the fenced transaction"
    );
    txn.commit().await.expect("commit");
    for w in writers {
        let got = w.await.expect("writer");
        assert!(
            matches!(got, Ok(AcquireOutcome::Acquired { .. })),
            "{got:?}"
        );
    }
    let served = served
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    assert_eq!(
        served,
        (0..6).collect::<Vec<_>>(),
        "not served in arrival order"
    );
}

#[tokio::test]
async fn a_writer_kept_from_the_gate_past_its_bound_is_told_and_writes_nothing() {
    let (_dir, url) = url("bound");
    let first = store(&url, Duration::from_secs(10)).await;
    let txn = fenced(&first).await;
    let late = store(&url, Duration::from_millis(300)).await;
    let (k, me) = (key("late"), holder("late"));
    let got = late.begin_tenure(&k, &me, Grant::New, term(), None).await;
    assert!(
        matches!(got, Err(StoreError::ServerTimeout { .. })),
        "{got:?}"
    );
    assert!(got.expect_err("timed out").is_transient());
    txn.commit().await.expect("commit");
    assert!(
        late.get(&k).await.expect("read").is_none(),
        "the writer that timed out wrote its row"
    );
    let again = late.begin_tenure(&k, &me, Grant::New, term(), None).await;
    assert!(
        matches!(again, Ok(AcquireOutcome::Acquired { .. })),
        "{again:?}"
    );
}
