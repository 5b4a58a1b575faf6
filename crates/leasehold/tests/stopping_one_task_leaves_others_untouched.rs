//! Several lease tasks in one service: stopping one releases only that one; the others keep
//! their tenure (same token, token not cancelled, no loss) across renewals.

mod common;

use std::time::Duration;

use leasehold::{EventKind, LeaseConfig, LeaseService, LeaseTaskOptions};

fn config() -> LeaseConfig {
    LeaseConfig::default()
        .with_term(Duration::from_secs(1))
        .with_renew_interval(Duration::from_millis(300))
        .with_retry_interval(Duration::from_millis(100))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_one_task_leaves_every_other_untouched() {
    let url = common::sqlite_file_url("independent");
    let service = LeaseService::builder(&url)
        .config(config())
        .build()
        .await
        .expect("service");
    let mut events = service.subscribe();
    let names = ["alpha", "beta", "gamma", "delta"];
    let mut held = Vec::new();
    for name in names {
        let task = service
            .start_lease_task(name, LeaseTaskOptions::new())
            .await
            .expect("start");
        let (token, cancel) = tokio::time::timeout(Duration::from_secs(30), task.acquired())
            .await
            .expect("in time")
            .expect("running");
        held.push((name, task, token, cancel));
    }
    // Starting again is idempotent.
    let again = service
        .start_lease_task("beta", LeaseTaskOptions::new())
        .await
        .expect("start");
    assert_eq!(again.token(), Some(held[1].2));
    assert_eq!(
        service.tasks().list().await.expect("tasks").len(),
        names.len()
    );

    assert!(service.stop_lease_task("beta").await.expect("stop"));
    assert!(
        !service.stop_lease_task("beta").await.expect("stop"),
        "stopped once"
    );
    assert!(!service.has_lease("beta"));
    assert!(held[1].3.is_cancelled());
    assert!(
        service
            .current_holder("beta")
            .await
            .expect("read")
            .is_none()
    );

    // Several renew intervals later the others still hold the very same tenures.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for (name, task, token, cancel) in held.iter().filter(|h| h.0 != "beta") {
        assert!(service.has_lease(name), "{name} still held");
        assert_eq!(task.token(), Some(*token));
        assert!(!cancel.is_cancelled(), "{name}'s work not cancelled");
        let record = service
            .current_holder(name)
            .await
            .expect("read")
            .expect("held");
        assert_eq!(record.token, *token);
        assert_eq!(&record.holder, service.holder());
    }
    let mut renewed = 0;
    while let Ok(event) = events.try_recv() {
        match event.what {
            EventKind::Lost(_) => panic!("{} was lost", event.key),
            EventKind::Released => assert_eq!(event.key.name.as_str(), "beta"),
            EventKind::Renewed => renewed += 1,
            _ => {}
        }
    }
    assert!(renewed >= 3, "renewals went on ({renewed})");
    assert_eq!(
        service.tasks().list().await.expect("tasks").len(),
        names.len() - 1
    );

    // And the stopped one can be started again.
    let beta = service
        .start_lease_task("beta", LeaseTaskOptions::new())
        .await
        .expect("start");
    let (token, _) = beta.acquired().await.expect("running");
    assert!(token > held[1].2);
    assert_eq!(service.shutdown().await.expect("shutdown"), 4);
}
