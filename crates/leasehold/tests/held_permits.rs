//! Held permits (`Semaphores::hold`) on SQLite (file), PostgreSQL and MySQL: renewed by the
//! engine past many ttls; never more holders than permits across services; ended at the local
//! deadline when the database fails, every belief signal agreeing; a release frees the slot
//! at once; each slot's tokens grow.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Mode, Switch};
use leasehold::clock::{Clock, MonotonicClock};
use leasehold::store::Store;
use leasehold::{Error, LeaseService, LockError};

const SEMAPHORE: &str = "pool";
const PREFIX: &str = "pool#permit:";

/// A service on `url` whose store `switch` can make fail.
async fn switched(url: &str, switch: &Switch) -> LeaseService {
    let layer = switch.clone();
    LeaseService::builder(url)
        .store_layer(move |inner| Arc::new(layer.wrap(inner)) as Arc<dyn Store>)
        .build()
        .await
        .expect("service")
}

async fn plain(url: &str) -> LeaseService {
    LeaseService::builder(url).build().await.expect("service")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_permit_outlives_many_ttls_without_a_manual_renewal() {
    for (backend, url) in common::backends("held-permits-renew") {
        let ns = common::unique_namespace("held-permit-renew");
        let (a, b) = (plain(&url).await, plain(&url).await);
        let ttl = Duration::from_millis(900);
        let permit = a
            .locks()
            .permits()
            .hold(&ns, SEMAPHORE, 1, ttl)
            .await
            .expect("hold_permit")
            .expect("free");
        let cancelled = permit.cancellation_token();
        // Every sample over four ttls: all three signals say held.
        let clock = MonotonicClock;
        let until = clock.now() + ttl * 4;
        while clock.now() < until {
            assert!(
                permit.is_held()
                    && !cancelled.is_cancelled()
                    && a.locks().permits().is_holding(&ns, SEMAPHORE),
                "{backend}: the held permit was not renewed by itself"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // The database agrees: the row is live, ours, with the token of the first grant.
        let rows = b
            .locks()
            .held_with_prefix(&ns, PREFIX)
            .await
            .expect("listing");
        assert!(
            rows.iter()
                .any(|r| r.held && &r.holder == a.holder() && r.token == permit.token()),
            "{backend}: no live row of the held permit after four ttls: {rows:?}"
        );
        assert!(
            b.locks()
                .permits()
                .acquire(&ns, SEMAPHORE, 1, ttl)
                .await
                .expect("acquire_permit")
                .is_none(),
            "{backend}: another holder got the only permit of a live hold"
        );
        permit.release().await.expect("release");
        a.shutdown().await.expect("shutdown");
        b.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn never_more_holders_than_permits_across_two_services() {
    const PERMITS: u32 = 3;
    const CONTENDERS: usize = 8;
    for (backend, url) in common::backends("held-permits-n") {
        let ns = common::unique_namespace("held-permit-n");
        let svcs = [plain(&url).await, plain(&url).await];
        let ttl = Duration::from_secs(30);
        // Eight calls at once, four from each service.
        let mut racing = Vec::new();
        for i in 0..CONTENDERS {
            let (svc, ns) = (svcs[i % 2].clone(), ns.clone());
            racing.push(tokio::spawn(async move {
                let got = svc
                    .locks()
                    .permits()
                    .hold(&ns, SEMAPHORE, PERMITS, ttl)
                    .await;
                (i % 2, got.expect("hold_permit"))
            }));
        }
        let mut held = Vec::new();
        for r in racing {
            let (from, got) = r.await.expect("task");
            held.extend(got.map(|p| (from, p)));
        }
        assert!(
            held.len() <= PERMITS as usize,
            "{backend}: {} holders of {PERMITS} permits",
            held.len()
        );
        // Fill the slots the race left free, if any: then every one is taken, once.
        while let Some(p) = svcs[0]
            .locks()
            .permits()
            .hold(&ns, SEMAPHORE, PERMITS, ttl)
            .await
            .expect("hold_permit")
        {
            held.push((0, p));
            assert!(held.len() <= PERMITS as usize, "{backend}: too many");
        }
        let mut indices: Vec<u32> = held.iter().map(|(_, p)| p.index()).collect();
        indices.sort_unstable();
        assert_eq!(indices, vec![0, 1, 2], "{backend}: each slot held once");
        assert!(
            held.iter()
                .all(|(_, p)| p.is_held() && p.permits() == PERMITS)
        );
        for (i, svc) in svcs.iter().enumerate() {
            let holds = held.iter().any(|(from, _)| *from == i);
            assert_eq!(
                svc.locks().permits().is_holding(&ns, SEMAPHORE),
                holds,
                "{backend}: is_holding_permit of service {i}"
            );
            assert!(
                svc.locks()
                    .permits()
                    .hold(&ns, SEMAPHORE, PERMITS, ttl)
                    .await
                    .expect("hold_permit")
                    .is_none(),
                "{backend}: a fourth holder"
            );
        }
        // Another count, and a ttl too short to renew, are refused.
        match svcs[1].locks().permits().hold(&ns, SEMAPHORE, 4, ttl).await {
            Err(Error::PermitsMismatch {
                asked: 4, found: 3, ..
            }) => {}
            other => panic!("{backend}: another count was not refused: {other:?}"),
        }
        match svcs[1]
            .locks()
            .permits()
            .hold(&ns, "other", 2, Duration::from_millis(1))
            .await
        {
            Err(Error::Invalid(_)) => {}
            other => panic!("{backend}: a 1 ms hold was not refused: {other:?}"),
        }
        for (_, p) in held {
            p.release().await.expect("release");
        }
        for s in svcs {
            s.shutdown().await.expect("shutdown");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_store_ends_the_permit_at_its_local_deadline_and_every_signal_agrees() {
    for (backend, url) in common::backends("held-permits-fail") {
        let ns = common::unique_namespace("held-permit-fail");
        let switch = Switch::default();
        let a = switched(&url, &switch).await;
        let b = plain(&url).await;
        let ttl = Duration::from_millis(900);
        let permit = a
            .locks()
            .permits()
            .hold(&ns, SEMAPHORE, 1, ttl)
            .await
            .expect("hold_permit")
            .expect("free");
        let cancelled = permit.cancellation_token();
        tokio::time::sleep(ttl * 2).await;
        assert!(permit.is_held() && !cancelled.is_cancelled(), "{backend}");

        // The database goes away: no renewal succeeds, the tenure ends at its local deadline
        // (within one ttl of the last renewal; the bound below is only for liveness).
        switch.set(Mode::Failing);
        tokio::time::timeout(ttl * 4, cancelled.cancelled())
            .await
            .unwrap_or_else(|_| panic!("{backend}: the token outlived the local deadline"));
        assert!(
            !permit.is_held() && !a.locks().permits().is_holding(&ns, SEMAPHORE),
            "{backend}: a signal still believes after the token was cancelled"
        );
        assert!(
            matches!(permit.release().await, Err(LockError::LockLost { .. })),
            "{backend}: the release of a lost permit must say it was lost"
        );
        // Once the database is back, another holder gets the slot when the lost grant has
        // lapsed there.
        switch.set(Mode::Healthy);
        let taken = b
            .locks()
            .permits()
            .acquire_within(&ns, SEMAPHORE, 1, Some(Duration::from_secs(10)), ttl)
            .await
            .expect("acquire_permit_within");
        assert!(
            taken.is_some(),
            "{backend}: the lost permit's slot stayed taken"
        );
        drop(taken);
        a.shutdown().await.expect("shutdown");
        b.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_frees_the_slot_for_another_holder_at_once() {
    for (backend, url) in common::backends("held-permits-release") {
        let ns = common::unique_namespace("held-permit-release");
        let (a, b) = (plain(&url).await, plain(&url).await);
        // Far longer than the test: only a release can free the slot.
        let ttl = Duration::from_secs(60);
        let hold = |s: &LeaseService| {
            let (s, ns) = (s.clone(), ns.clone());
            async move {
                s.locks()
                    .permits()
                    .hold(&ns, SEMAPHORE, 1, ttl)
                    .await
                    .expect("hold_permit")
            }
        };

        let first = hold(&a).await.expect("free");
        assert!(hold(&b).await.is_none(), "{backend}: the slot is taken");
        let cancelled = first.cancellation_token();
        first.release().await.expect("release");
        assert!(cancelled.is_cancelled(), "{backend}");
        assert!(!a.locks().permits().is_holding(&ns, SEMAPHORE), "{backend}");

        // One attempt, no wait: the slot is free as soon as the release answered.
        let second = hold(&b).await.expect("free at once after the release");
        b.locks()
            .permits()
            .release(&ns, SEMAPHORE, second.index())
            .await
            .expect("release_permit");
        assert!(!second.is_held() && second.cancellation_token().is_cancelled());
        assert!(matches!(
            b.locks()
                .permits()
                .release(&ns, SEMAPHORE, second.index())
                .await,
            Err(LockError::NotHeld { .. })
        ));
        assert!(matches!(
            second.release().await,
            Err(LockError::NotHeld { .. })
        ));

        // Shutdown releases what it held, too.
        let third = hold(&a).await.expect("free at once after release_permit");
        a.shutdown().await.expect("shutdown");
        assert!(!third.is_held(), "{backend}");
        assert!(
            hold(&b).await.is_some(),
            "{backend}: the slot is free at once after shutdown"
        );
        b.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_slot_s_tokens_grow_with_every_tenure() {
    const PERMITS: u32 = 2;
    for (backend, url) in common::backends("held-permits-tokens") {
        let ns = common::unique_namespace("held-permit-tokens");
        let svcs = [plain(&url).await, plain(&url).await];
        let ttl = Duration::from_secs(30);
        let mut last: Vec<Option<i64>> = vec![None; PERMITS as usize];
        for round in 0..8 {
            let svc = &svcs[round % 2];
            let permit = svc
                .locks()
                .permits()
                .hold(&ns, SEMAPHORE, PERMITS, ttl)
                .await
                .expect("hold_permit")
                .expect("free");
            let (slot, token) = (permit.index() as usize, permit.token().get());
            if let Some(before) = last[slot] {
                assert!(
                    token > before,
                    "{backend}: slot {slot} went from token {before} to {token}"
                );
            }
            last[slot] = Some(token);
            permit.release().await.expect("release");
        }
        for s in svcs {
            s.shutdown().await.expect("shutdown");
        }
    }
}
