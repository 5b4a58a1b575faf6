//! Fencing goes to the service's SQL store, never through the `LeaseStore` trait object: a
//! service built from a URL fences also behind a `store_layer`, one made with `from_sql_store`
//! fences, and one made with `from_store` (no SQL store) answers a store error instead.

mod common;

use std::sync::Arc;
use std::time::Duration;

use leasehold::store::{MemoryStore, Store, StoreBuilder};
use leasehold::{Error, LeaseService};
use leasehold_testkit::counting::CountingStore;

const TTL: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_layered_url_service_fences() {
    let url = common::sqlite_file_url("fence-layer");
    let service = LeaseService::builder(url)
        .store_layer(|inner| Arc::new(CountingStore::new(inner, Arc::default())) as Arc<dyn Store>)
        .build()
        .await
        .expect("service");
    let ns = common::unique_namespace("fence-layer");
    let guard = service
        .lock(&ns, "ledger", TTL)
        .await
        .expect("lock")
        .expect("free");
    let txn = guard.begin_fenced().await.expect("fenced");
    assert!(
        txn.is_some(),
        "a live tenure behind a store layer is fenced"
    );
    drop(txn);
    drop(guard);
    service.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_sql_store_fences_and_from_store_refuses() {
    let store = StoreBuilder::new(common::sqlite_file_url("fence-sql"))
        .connect()
        .await
        .expect("store");
    let sql = leasehold::LeaseServiceBuilder::from_sql_store(store)
        .build()
        .await
        .expect("service");
    let guard = sql
        .lock("fence", "ledger", TTL)
        .await
        .expect("lock")
        .expect("free");
    let txn = guard.begin_fenced().await.expect("fenced");
    assert!(txn.is_some(), "from_sql_store: fenced");
    drop(txn);
    drop(guard);
    sql.shutdown().await.expect("shutdown");

    let memory = leasehold::LeaseServiceBuilder::from_store(Arc::new(MemoryStore::new()))
        .build()
        .await
        .expect("service");
    let guard = memory
        .lock("fence", "ledger", TTL)
        .await
        .expect("lock")
        .expect("free");
    match guard.begin_fenced().await {
        Err(Error::Store(e)) => assert!(e.to_string().contains("no SQL store"), "{e}"),
        other => panic!("from_store has no SQL store to fence on: {other:?}"),
    }
    drop(guard);
    memory.shutdown().await.expect("shutdown");
}
