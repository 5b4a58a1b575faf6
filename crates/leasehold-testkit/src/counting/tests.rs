//! Unit tests of [`CountingStore`](super::CountingStore).

use std::sync::Mutex;

use super::*;
use leasehold_storage::{AdminStore, Grant, LeaseStore, MemoryStore, TenureRef};

fn store() -> (CountingStore, Arc<StoreCounts>) {
    let counts = Arc::new(StoreCounts::default());
    let store = CountingStore::new(Arc::new(MemoryStore::new()), Arc::clone(&counts));
    (store, counts)
}

#[test]
fn op_indices_follow_all() {
    for (i, op) in Op::ALL.iter().enumerate() {
        assert_eq!(*op as usize, i, "{op}");
    }
}

#[tokio::test]
async fn counts_each_method_and_renew_many_items() -> Result<(), Box<dyn std::error::Error>> {
    let (store, counts) = store();
    let me = HolderId::new("a")?;
    let term = Term::new("term", Duration::from_secs(60))?;
    let mut items = Vec::new();
    for name in ["x", "y", "z"] {
        let key = LeaseKey::parse("ns", name)?;
        let AcquireOutcome::Acquired { token, .. } = store
            .begin_tenure(&key, &me, Grant::New, term, None)
            .await?
        else {
            return Err("not granted".into());
        };
        items.push(TenureRef { key, token });
    }
    store.renew_many(&me, &items, term).await?;
    store.renew_many(&me, &items[..1], term).await?;
    store.release_all(&me).await?;
    assert_eq!(counts.calls(Op::BeginTenure), 3);
    assert_eq!(counts.calls(Op::RenewMany), 2);
    assert_eq!(counts.renew_many_items(), 4);
    assert_eq!(counts.calls(Op::ReleaseAll), 1);
    assert_eq!(counts.time(Op::Renew), Duration::ZERO);
    Ok(())
}

#[tokio::test]
async fn a_refused_call_is_answered_by_the_hook_and_not_counted() {
    let (store, counts) = store();
    let store = store.before_call(|op| async move {
        Err(StoreError::Unexpected {
            op: op.name(),
            detail: "injected failure".to_owned(),
        })
    });
    let err = store.db_now().await.expect_err("refused");
    assert!(matches!(err, StoreError::Unexpected { op: "db_now", .. }));
    assert_eq!(counts.calls(Op::DbNow), 0);
}

#[tokio::test(start_paused = true)]
async fn the_observer_sees_every_answered_call() {
    let seen: Arc<Mutex<Vec<Call>>> = Arc::default();
    let log = Arc::clone(&seen);
    let (store, counts) = store();
    let store = store
        .before_call(|_| async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            Ok(())
        })
        .after_call(move |call| log.lock().expect("log").push(*call));
    store.db_now().await.expect("answered");
    let seen = seen.lock().expect("log").clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        (seen[0].op, seen[0].items, seen[0].ok),
        (Op::DbNow, 0, true)
    );
    assert!(
        seen[0].elapsed < Duration::from_secs(1),
        "the hook's delay is not the store's time"
    );
    assert_eq!(counts.time(Op::DbNow), seen[0].elapsed);
}
