//! The actix actor forwards to the service.

use std::time::Duration;

use actix::Actor;
use leasehold_local::{
    Cancel, Create, LocalLeaseError, LocalLeases, LocalLeasesActor, Remaining, Renew,
};
use tokio::sync::mpsc;

#[actix_rt::test]
async fn the_actor_creates_renews_cancels_and_reports() {
    tokio::time::pause();
    let leases = LocalLeases::new();
    let addr = LocalLeasesActor::new(leases.clone()).start();
    let (tx, mut rx) = mpsc::unbounded_channel();

    let tx1 = tx.clone();
    let first = addr
        .send(Create::new("a", Duration::from_secs(10), move |lease| {
            drop(tx1.send(lease.name().to_owned()))
        }))
        .await
        .expect("actor alive")
        .expect("created");
    addr.send(Create::new("b", Duration::from_secs(10), move |lease| {
        drop(tx.send(lease.name().to_owned()))
    }))
    .await
    .expect("actor alive")
    .expect("created");
    let dup = addr
        .send(Create::new("a", Duration::from_secs(10), |_| {}))
        .await
        .expect("actor alive");
    assert_eq!(
        dup,
        Err(LocalLeaseError::AlreadyExists { name: "a".into() })
    );

    tokio::time::advance(Duration::from_secs(4)).await;
    let renewed = addr
        .send(Renew::new("a"))
        .await
        .expect("actor alive")
        .expect("renewed");
    assert_eq!(renewed - first, Duration::from_secs(4));
    let left = addr.send(Remaining::new("a")).await.expect("actor alive");
    assert_eq!(left, Ok(Duration::from_secs(10)));
    addr.send(Cancel::new("b"))
        .await
        .expect("actor alive")
        .expect("cancelled");
    assert_eq!(
        leases.len(),
        1,
        "the actor and the handle share one service"
    );

    assert_eq!(rx.recv().await.as_deref(), Some("a"));
    assert!(
        rx.recv().await.is_none(),
        "b was cancelled and its listener dropped"
    );
    let gone = addr.send(Renew::new("a")).await.expect("actor alive");
    assert_eq!(gone, Err(LocalLeaseError::Unknown { name: "a".into() }));
}
