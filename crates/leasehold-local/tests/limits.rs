//! Bad names and periods are refused with typed errors, never panics; the timer's two-year
//! limit is never reached.

use std::time::Duration;

use leasehold_core::{Clock, MonotonicClock};
use leasehold_local::{LocalLeaseError, LocalLeases, MAX_PERIOD};
use tokio::sync::mpsc;

const DAY: Duration = Duration::from_secs(86_400);

#[tokio::test(start_paused = true)]
async fn zero_and_huge_periods_are_refused() {
    let leases = LocalLeases::new();
    for period in [
        Duration::ZERO,
        MAX_PERIOD + Duration::from_nanos(1),
        800 * DAY,
        Duration::MAX,
    ] {
        assert_eq!(
            leases.create("a", period, |_| {}),
            Err(LocalLeaseError::InvalidPeriod {
                period,
                max: MAX_PERIOD
            }),
            "{period:?}"
        );
    }
    assert!(leases.is_empty());
    leases
        .create("a", MAX_PERIOD, |_| {})
        .expect("the maximum itself is fine");
    leases
        .create("b", Duration::from_nanos(1), |_| {})
        .expect("the smallest period is fine");
}

#[tokio::test(start_paused = true)]
async fn empty_names_and_duplicates_are_refused() {
    let leases = LocalLeases::new();
    assert!(matches!(
        leases.create("", Duration::from_secs(1), |_| {}),
        Err(LocalLeaseError::InvalidName { .. })
    ));
    leases
        .create("a", Duration::from_secs(1), |_| {})
        .expect("created");
    assert_eq!(
        leases.create("a", Duration::from_secs(5), |_| {}),
        Err(LocalLeaseError::AlreadyExists { name: "a".into() })
    );
    assert_eq!(leases.len(), 1);
    assert_eq!(
        leases.remaining("a"),
        Ok(Duration::from_secs(1)),
        "the first lease is untouched"
    );
}

/// `DelayQueue` measures deadlines from its own start and panics beyond ~795 days; a service that
/// has run for years must still take year-long leases, and keep the ones it holds.
#[tokio::test(start_paused = true)]
async fn an_old_service_still_takes_long_leases() {
    let leases = LocalLeases::new();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let report = |tx: &mpsc::UnboundedSender<_>| {
        let tx = tx.clone();
        move |lease: leasehold_local::ExpiredLease| {
            drop(tx.send((lease.name().to_owned(), MonotonicClock.now())))
        }
    };
    let t0 = MonotonicClock.now();
    leases
        .create("kept", MAX_PERIOD, report(&tx))
        .expect("created");
    tokio::time::advance(300 * DAY).await;
    leases.renew("kept").expect("renewed"); // due at t0 + 665 days
    tokio::time::advance(300 * DAY).await;
    // Due at t0 + 965 days: past the first timer's reach, so the timer is rebuilt.
    leases
        .create("late", MAX_PERIOD, report(&tx))
        .expect("created without a panic");

    let (name, at) = rx.recv().await.expect("fires");
    assert_eq!((name.as_str(), at), ("kept", t0 + 665 * DAY));
    let (name, at) = rx.recv().await.expect("fires");
    assert_eq!((name.as_str(), at), ("late", t0 + 965 * DAY));

    // Idle for three years, then a year-long lease.
    tokio::time::advance(3 * 365 * DAY).await;
    let deadline = leases
        .create("after-idle", MAX_PERIOD, report(&tx))
        .expect("created without a panic");
    let (name, at) = rx.recv().await.expect("fires");
    assert_eq!((name.as_str(), at), ("after-idle", deadline));
}

/// A clock far ahead of tokio's time (beyond the timer's reach): the lease is armed at the
/// timer's horizon, re-armed when that fires, and fires once at its deadline, without a panic.
#[tokio::test(start_paused = true)]
async fn a_deadline_beyond_the_timer_horizon_is_reached_in_hops() {
    #[derive(Clone, Copy)]
    struct FarAhead;
    impl Clock for FarAhead {
        fn now(&self) -> tokio::time::Instant {
            MonotonicClock.now() + 900 * DAY
        }
    }
    let t0 = MonotonicClock.now();
    let leases = LocalLeases::with_clock(FarAhead);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let deadline = leases
        .create("far", Duration::from_secs(1), move |lease| {
            drop(tx.send((lease, MonotonicClock.now())))
        })
        .expect("created without a panic");
    assert_eq!(deadline, t0 + 900 * DAY + Duration::from_secs(1));
    let (lease, at) = rx.recv().await.expect("fires");
    assert_eq!((lease.deadline(), at), (deadline, deadline));
    tokio::time::sleep(DAY).await;
    assert!(rx.try_recv().is_err(), "once");
}
