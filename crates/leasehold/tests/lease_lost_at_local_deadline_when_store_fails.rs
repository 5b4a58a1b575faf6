//! The actor on tokio's paused time, over a memory store that can be switched to fail or hang:
//! `has_lease` turns false exactly at the local deadline, the loss is reported, and the lease is
//! re-acquired by itself once the store is back.

mod common;

use std::sync::Arc;
use std::time::Duration;

use actix::Actor;
use common::{Mode, Switch};
use leasehold::clock::{Clock, MonotonicClock};
use leasehold::engine::{LeaseActor, Listener, QueryLease, Registry, StartLease, StopLease};
use leasehold::store::MemoryStore;
use leasehold::{DbInstant, HolderId, LeaseConfig, LeaseKey, LossReason};
use leasehold_core::Notification;
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep_until};

const TERM: Duration = Duration::from_secs(3);
const MARGIN: Duration = Duration::from_millis(300);

struct Rig {
    switch: Switch,
    registry: Arc<Registry>,
    key: LeaseKey,
    notes: mpsc::UnboundedReceiver<(Instant, Notification)>,
    actor: actix::Addr<LeaseActor>,
}

/// A memory store whose database clock follows tokio's (paused) clock.
fn paused_memory_store() -> MemoryStore {
    let base = MonotonicClock.now();
    MemoryStore::with_clock(move || {
        let ms = i64::try_from((MonotonicClock.now() - base).as_millis()).unwrap_or(i64::MAX);
        DbInstant(1_700_000_000_000 + ms)
    })
}

fn rig() -> Rig {
    let switch = Switch::default();
    let registry = Arc::new(Registry::new(Arc::new(MonotonicClock)));
    let key = LeaseKey::parse("", "leader").expect("valid key");
    let (tx, notes) = mpsc::unbounded_channel();
    let listener: Listener = Arc::new(move |_key: &LeaseKey, n: &Notification| {
        let _ = tx.send((MonotonicClock.now(), n.clone()));
    });
    let config = LeaseConfig::default()
        .with_term(TERM)
        .with_renew_interval(Duration::from_secs(1))
        .with_retry_interval(Duration::from_millis(200))
        .with_safety_margin(MARGIN);
    let actor = LeaseActor::new(
        key.clone(),
        HolderId::new("holder-a").expect("valid holder"),
        &config,
        7,
        Arc::new(switch.wrap(Arc::new(paused_memory_store()))),
        Arc::clone(&registry),
        listener,
    )
    .expect("valid config")
    .start();
    actor.do_send(StartLease);
    Rig {
        switch,
        registry,
        key,
        notes,
        actor,
    }
}

async fn next(rig: &mut Rig) -> (Instant, Notification) {
    rig.notes.recv().await.expect("the actor is alive")
}

async fn acquired(rig: &mut Rig) -> Instant {
    loop {
        if let (_, Notification::Acquired { local_deadline, .. }) = next(rig).await {
            return local_deadline;
        }
    }
}

async fn lapse_and_recover(mode: Mode) {
    tokio::time::pause();
    let mut rig = rig();
    acquired(&mut rig).await;
    assert!(rig.registry.has_lease(&rig.key));

    // Held across a few renewals.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(rig.registry.has_lease(&rig.key));

    rig.switch.set(mode);
    let deadline = rig
        .registry
        .deadline(&rig.key)
        .expect("a deadline while held");
    // tokio timers tick in whole milliseconds: stop a few short of the deadline.
    sleep_until(deadline - Duration::from_millis(5)).await;
    assert!(
        rig.registry.has_lease(&rig.key),
        "still held just before the deadline"
    );
    sleep_until(deadline).await;
    assert!(
        !rig.registry.has_lease(&rig.key),
        "not held at the deadline"
    );

    let (at, lost) = loop {
        let (at, n) = next(&mut rig).await;
        if matches!(n, Notification::Lost { .. }) {
            break (at, n);
        }
    };
    assert!(
        at >= deadline && at - deadline < Duration::from_millis(5),
        "the loss is reported at the deadline"
    );
    assert!(matches!(
        lost,
        Notification::Lost {
            reason: LossReason::DeadlinePassed,
            ..
        }
    ));

    // Keeps trying while the store is down, without a hot loop, and gets it back afterwards.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(!rig.registry.has_lease(&rig.key));
    rig.switch.set(Mode::Healthy);
    let back = MonotonicClock.now();
    acquired(&mut rig).await;
    assert!(rig.registry.has_lease(&rig.key));
    assert!(
        MonotonicClock.now() - back <= Duration::from_secs(1),
        "re-acquired within the retry backoff (paused time)"
    );
    let status = rig.actor.send(QueryLease).await.expect("actor alive");
    assert!(status.holds && status.token.is_some());

    let (done, stopped) = tokio::sync::oneshot::channel();
    rig.actor.do_send(StopLease { done: Some(done) });
    stopped.await.expect("stopped");
    assert!(!rig.registry.has_lease(&rig.key));
}

#[actix_rt::test]
async fn has_lease_false_at_local_deadline_when_store_fails_then_reacquired() {
    lapse_and_recover(Mode::Failing).await;
}

#[actix_rt::test]
async fn has_lease_false_at_local_deadline_when_store_hangs_then_reacquired() {
    lapse_and_recover(Mode::Hanging).await;
}
