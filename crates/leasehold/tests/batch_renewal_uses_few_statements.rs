//! 1,000 leases held by one service on SQLite are renewed with `renew_many`, in far fewer
//! statements than leases.

mod common;

use std::sync::Arc;
use std::time::Duration;

use leasehold::{EventKind, LeaseConfig, LeaseService, LeaseTaskOptions};
use leasehold_testkit::counting::{CountingStore, Op, StoreCounts};

const LEASES: usize = 1000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousand_leases_renewed_in_a_handful_of_statements() {
    let counts = Arc::new(StoreCounts::default());
    let layer_counts = Arc::clone(&counts);
    let service = LeaseService::builder(common::sqlite_file_url("batch"))
        .config(
            LeaseConfig::default()
                .with_term(Duration::from_secs(6))
                .with_renew_interval(Duration::from_secs(1)),
        )
        .tuning(leasehold::EngineTuning::new().batch_window(Duration::from_millis(20)))
        .store_layer(move |store| Arc::new(CountingStore::new(store, Arc::clone(&layer_counts))))
        .build()
        .await
        .expect("service");
    let mut events = service.subscribe();
    let names: Vec<String> = (0..LEASES).map(|i| format!("shard-{i:04}")).collect();
    for name in &names {
        service
            .start_lease_task(name, LeaseTaskOptions::new())
            .await
            .expect("start");
    }
    let mut waited = 0;
    while !names.iter().all(|n| service.has_lease(n)) {
        assert!(waited < 600, "all leases acquired within 60 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
        waited += 1;
    }

    let (calls0, items0) = (counts.calls(Op::RenewMany), counts.renew_many_items());
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let calls = counts.calls(Op::RenewMany) - calls0;
    let items = counts.renew_many_items() - items0;

    assert_eq!(counts.calls(Op::Renew), 0, "no single-lease renewals");
    assert!(
        items >= 2 * LEASES as u64,
        "every lease renewed at least twice ({items} renewals)"
    );
    assert!(
        calls * 20 <= items,
        "{calls} renew_many statements for {items} renewals"
    );
    assert!(names.iter().all(|n| service.has_lease(n)), "all still held");
    while let Ok(event) = events.try_recv() {
        assert!(!matches!(event.what, EventKind::Lost(_)), "{event:?}");
    }
    eprintln!("{calls} renew_many statements for {items} renewals of {LEASES} leases");

    assert_eq!(service.shutdown().await.expect("shutdown"), LEASES as u64);
    assert_eq!(
        counts.calls(Op::ReleaseMany),
        1,
        "exactly the held tenures, in one call"
    );
    assert_eq!(
        counts.calls(Op::ReleaseAll),
        0,
        "never every row of the holder id"
    );
    assert_eq!(counts.calls(Op::Release), 0, "released in one statement");
}
