//! The service works from inside an actix `System` (as in actix-web apps), next to its own
//! engine thread, and from a plain current-thread tokio runtime.

use std::time::Duration;

use leasehold::{LeaseService, LeaseTaskOptions};

async fn acquire_and_shut_down() {
    let service = LeaseService::builder("sqlite::memory:")
        .build()
        .await
        .expect("service");
    let task = service
        .start_lease_task("leader", LeaseTaskOptions::new())
        .await
        .expect("start");
    let (_, cancel) = tokio::time::timeout(Duration::from_secs(30), task.acquired())
        .await
        .expect("in time")
        .expect("running");
    assert!(service.has_lease("leader"));
    assert_eq!(service.shutdown().await.expect("shutdown"), 1);
    assert!(cancel.is_cancelled());
    assert!(!service.has_lease("leader"));
    assert!(matches!(
        service.shutdown().await,
        Err(leasehold::Error::ShutDown)
    ));
}

#[actix_rt::test]
async fn inside_an_actix_system() {
    acquire_and_shut_down().await;
}

#[tokio::test(flavor = "current_thread")]
async fn on_a_current_thread_tokio_runtime() {
    acquire_and_shut_down().await;
}

#[tokio::test(flavor = "current_thread")]
async fn invalid_names_and_config_are_typed_errors() {
    let bad = LeaseService::builder("sqlite::memory:")
        .config(leasehold::LeaseConfig::default().with_renew_interval(Duration::from_secs(60)))
        .build()
        .await;
    assert!(matches!(bad, Err(leasehold::Error::Invalid(_))));
    let unreachable = LeaseService::builder("postgres://nobody@127.0.0.1:1/none")
        .build()
        .await;
    assert!(matches!(unreachable, Err(leasehold::Error::Store(_))));
    let unsupported = LeaseService::builder("oracle://db").build().await;
    assert!(matches!(unsupported, Err(leasehold::Error::Store(_))));
    let service = LeaseService::builder("sqlite::memory:")
        .build()
        .await
        .expect("service");
    let empty = service.start_lease_task("", LeaseTaskOptions::new()).await;
    assert!(matches!(empty, Err(leasehold::Error::Invalid(_))));
    assert!(!service.has_lease(""));
    service.shutdown().await.expect("shutdown");
}
