//! Read-write locks on SQLite (file), PostgreSQL and MySQL/MariaDB, between two services (two
//! holders, each with its own engine thread and pool, standing in for two processes): many
//! readers at once; a writer excludes readers and writers; a waiting writer is not starved by a
//! stream of readers; a reader's and a writer's token and cancellation signal agree with
//! `is_held`; a writer's belief ends at its local deadline when its database stops answering;
//! writers' tokens increase.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{Mode, Switch};
use leasehold::store::Store;
use leasehold::{Error, LeaseService};
use leasehold_core::{Clock, MonotonicClock};

const TTL: Duration = Duration::from_secs(30);

async fn service(url: &str) -> LeaseService {
    let s = LeaseService::builder(url).build().await.expect("service");
    s.locks().set_retry_interval(Duration::from_millis(20));
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_and_a_writer_excludes_everyone() {
    for (db, url) in common::backends("rw-share") {
        let ns = common::unique_namespace("rw");
        let (a, b) = (service(&url).await, service(&url).await);

        // Many readers at once, on both services.
        let mut readers = Vec::new();
        for s in [&a, &b, &a, &b, &a, &b] {
            let r = s
                .locks()
                .read_write()
                .acquire_shared(&ns, "catalog", TTL)
                .await
                .expect("reader")
                .unwrap_or_else(|| panic!("{db}: a reader was refused beside readers"));
            readers.push(r);
        }
        assert!(readers.iter().all(|r| r.is_held()), "{db}");
        // A writer is refused while they are in, on either service, and a waiting one times out.
        assert!(
            b.locks()
                .read_write()
                .acquire_exclusive(&ns, "catalog", TTL)
                .await
                .expect("writer")
                .is_none(),
            "{db}: a writer beside readers"
        );
        let waited = a
            .locks()
            .read_write()
            .acquire_exclusive_within(&ns, "catalog", Some(Duration::from_millis(300)), TTL)
            .await
            .expect("writer");
        assert!(waited.is_none(), "{db}: a waiting writer beside readers");
        for r in readers {
            r.unlock().await.expect("reader unlock");
        }

        // One writer: no reader and no other writer, from either service.
        let w = b
            .locks()
            .read_write()
            .acquire_exclusive(&ns, "catalog", TTL)
            .await
            .expect("writer")
            .unwrap_or_else(|| panic!("{db}: the free lock refused a writer"));
        for s in [&a, &b] {
            let locks = s.locks();
            assert!(
                locks
                    .read_write()
                    .acquire_shared(&ns, "catalog", TTL)
                    .await
                    .expect("r")
                    .is_none()
            );
            assert!(
                locks
                    .read_write()
                    .acquire_exclusive(&ns, "catalog", TTL)
                    .await
                    .expect("w")
                    .is_none()
            );
            let waited = locks
                .read_write()
                .acquire_shared_within(&ns, "catalog", Some(Duration::from_millis(200)), TTL)
                .await
                .expect("r");
            assert!(waited.is_none(), "{db}: a reader beside a writer");
        }
        assert!(w.is_held(), "{db}");

        // A reader waiting on the other service gets in once the writer unlocks.
        let a2 = a.clone();
        let ns2 = ns.clone();
        let reader = tokio::spawn(async move {
            a2.locks()
                .read_write()
                .acquire_shared_within(&ns2, "catalog", Some(Duration::from_secs(20)), TTL)
                .await
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            !reader.is_finished(),
            "{db}: a reader got in beside the writer"
        );
        w.unlock().await.expect("writer unlock");
        let r = reader
            .await
            .expect("task")
            .expect("reader")
            .unwrap_or_else(|| panic!("{db}: the reader did not get in after the writer"));
        assert!(r.is_held());
        drop(r);
        a.shutdown().await.expect("shutdown");
        b.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_writer_is_not_starved_by_a_stream_of_readers() {
    for (db, url) in common::backends("rw-starve") {
        let ns = common::unique_namespace("rw");
        let (a, b) = (service(&url).await, service(&url).await);
        let stop = Arc::new(AtomicBool::new(false));
        // Readers on service a, overlapping: each holds 150 ms, a new one every 50 ms, so the
        // lock is never without a reader unless new readers stay out.
        let stream = {
            let (a, ns, stop) = (a.clone(), ns.clone(), Arc::clone(&stop));
            tokio::spawn(async move {
                let mut taken = 0u32;
                let mut held = Vec::new();
                while !stop.load(Ordering::SeqCst) {
                    let got = a
                        .locks()
                        .read_write()
                        .acquire_shared(&ns, "index", TTL)
                        .await
                        .expect("reader");
                    if let Some(r) = got {
                        taken += 1;
                        held.push((MonotonicClock.now(), r));
                    }
                    let now = MonotonicClock.now();
                    held.retain(|(at, _)| now - *at < Duration::from_millis(150));
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                taken
            })
        };
        tokio::time::sleep(Duration::from_millis(600)).await;
        let started = MonotonicClock.now();
        let w = b
            .locks()
            .read_write()
            .acquire_exclusive_within(&ns, "index", Some(Duration::from_secs(10)), TTL)
            .await
            .expect("writer")
            .unwrap_or_else(|| panic!("{db}: a writer starved by readers for 10 s"));
        let waited = started.elapsed();
        assert!(w.is_held());
        // While the writer holds the lock, the stream's readers stay out.
        let before = a
            .locks()
            .read_write()
            .acquire_shared(&ns, "index", TTL)
            .await
            .expect("reader");
        assert!(before.is_none(), "{db}: a reader beside the writer");
        w.unlock().await.expect("writer unlock");
        stop.store(true, Ordering::SeqCst);
        let taken = stream.await.expect("stream");
        eprintln!("{db}: the writer waited {waited:?} behind a stream of {taken} readers");
        assert!(taken > 3, "{db}: the stream took too few readers ({taken})");
        a.shutdown().await.expect("shutdown");
        b.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_agree_and_writers_tokens_increase() {
    for (db, url) in common::backends("rw-signals") {
        let ns = common::unique_namespace("rw");
        let (a, b) = (service(&url).await, service(&url).await);
        let r = a
            .locks()
            .read_write()
            .acquire_shared(&ns, "ledger", TTL)
            .await
            .expect("reader")
            .expect("free");
        let cancel = r.cancellation_token();
        assert!(r.is_held() && !cancel.is_cancelled() && r.token().get() > 0);
        assert!(r.deadline().is_some());
        assert_eq!(r.key().name.as_str(), "ledger");
        assert!(
            r.guard()
                .key()
                .name
                .as_str()
                .starts_with("ledger#read#permit:")
        );
        r.renew().await.expect("renew");
        r.unlock().await.expect("unlock");
        assert!(
            cancel.is_cancelled(),
            "{db}: a reader's token outlived its unlock"
        );

        let mut last = None;
        for s in [&a, &b, &a] {
            let w = s
                .locks()
                .read_write()
                .acquire_exclusive(&ns, "ledger", TTL)
                .await
                .expect("writer")
                .expect("free");
            let cancel = w.cancellation_token();
            assert!(w.is_held() && !cancel.is_cancelled());
            assert_eq!(w.guard().key().name.as_str(), "ledger#rw");
            if let Some(before) = last {
                assert!(w.token() > before, "{db}: a writer's token did not grow");
            }
            last = Some(w.token());
            w.renew().await.expect("renew");
            w.unlock().await.expect("unlock");
            assert!(
                cancel.is_cancelled(),
                "{db}: a writer's token outlived its unlock"
            );
        }
        a.shutdown().await.expect("shutdown");
        b.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writers_belief_ends_at_its_local_deadline_when_its_database_stops_answering() {
    for (db, url) in common::backends("rw-deadline") {
        let ns = common::unique_namespace("rw");
        let switch = Switch::default();
        let layer = switch.clone();
        let a = LeaseService::builder(&url)
            .store_layer(move |inner| Arc::new(layer.wrap(inner)) as Arc<dyn Store>)
            .build()
            .await
            .expect("a");
        let b = service(&url).await;
        let ttl = Duration::from_secs(2);
        let w = a
            .locks()
            .read_write()
            .acquire_exclusive(&ns, "ledger", ttl)
            .await
            .expect("writer")
            .expect("free");
        let (cancel, deadline) = (w.cancellation_token(), w.deadline().expect("held"));
        switch.set(Mode::Hanging);
        // The renewal gets no answer: the writer keeps believing until its deadline, no longer.
        let renewed = w.renew().await;
        assert!(
            renewed.is_err(),
            "{db}: a renewal answered by a hanging store"
        );
        while w.is_held() {
            assert!(
                MonotonicClock.now() < deadline + Duration::from_millis(20),
                "{db}: belief past its deadline"
            );
            assert!(
                !cancel.is_cancelled(),
                "{db}: the token ended before is_held"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        tokio::time::timeout(Duration::from_millis(500), cancel.cancelled())
            .await
            .unwrap_or_else(|_| panic!("{db}: the writer's token outlived its deadline"));
        // The other service gets the lock once the gate's grant has ended by the database clock.
        let next = b
            .locks()
            .read_write()
            .acquire_exclusive_within(&ns, "ledger", Some(Duration::from_secs(10)), ttl)
            .await
            .expect("writer")
            .unwrap_or_else(|| panic!("{db}: the lapsed writer's lock was not free"));
        assert!(next.token() > w.token());
        drop(next);
        switch.set(Mode::Healthy);
        drop(w);
        b.shutdown().await.expect("shutdown");
        a.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_names_and_ttls_are_invalid() {
    let service = service("sqlite::memory:").await;
    let locks = service.locks();
    for result in [
        locks
            .read_write()
            .acquire_shared("ns", "", TTL)
            .await
            .map(|_| ()),
        locks
            .read_write()
            .acquire_exclusive("ns", "", TTL)
            .await
            .map(|_| ()),
        locks
            .read_write()
            .acquire_shared("ns", "x", Duration::ZERO)
            .await
            .map(|_| ()),
        locks
            .read_write()
            .acquire_exclusive_within("ns", "x", None, Duration::ZERO)
            .await
            .map(|_| ()),
        locks
            .read_write()
            .acquire_shared_within("ns", &"n".repeat(300), None, TTL)
            .await
            .map(|_| ()),
    ] {
        assert!(matches!(result, Err(Error::Invalid(_))), "{result:?}");
    }
    service.shutdown().await.expect("shutdown");
}
