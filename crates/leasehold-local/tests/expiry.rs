//! A lease fires once at its deadline, unless renewed (later) or cancelled (never).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use leasehold_core::{Clock, MonotonicClock};
use leasehold_local::{ExpiredLease, ExpiryCause, LocalLeaseError, LocalLeases};
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep};

/// A listener that reports (lease, instant it ran) on a channel.
fn reporter(
    tx: &mpsc::UnboundedSender<(ExpiredLease, Instant)>,
) -> impl FnOnce(ExpiredLease) + Send + 'static {
    let tx = tx.clone();
    move |lease| {
        let _ = tx.send((lease, MonotonicClock.now()));
    }
}

#[tokio::test(start_paused = true)]
async fn fires_once_at_its_deadline() {
    let leases = LocalLeases::new();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let t0 = MonotonicClock.now();
    let deadline = leases
        .create("cursor", Duration::from_secs(5), reporter(&tx))
        .expect("created");
    assert_eq!(deadline, t0 + Duration::from_secs(5));
    assert_eq!(leases.remaining("cursor"), Ok(Duration::from_secs(5)));

    let (lease, fired_at) = rx.recv().await.expect("fired");
    assert_eq!(fired_at, deadline, "fires at the deadline, in paused time");
    assert_eq!(lease.name(), "cursor");
    assert_eq!(lease.deadline(), deadline);
    assert_eq!(lease.cause(), ExpiryCause::DeadlinePassed);

    sleep(Duration::from_secs(3600)).await;
    assert!(rx.try_recv().is_err(), "fires only once");
    assert!(leases.is_empty());
    assert!(matches!(
        leases.renew("cursor"),
        Err(LocalLeaseError::Unknown { .. })
    ));
    // The name is free again.
    leases
        .create("cursor", Duration::from_secs(1), |_| {})
        .expect("name reusable");
}

#[tokio::test(start_paused = true)]
async fn does_not_fire_a_millisecond_early() {
    let leases = LocalLeases::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let c = Arc::clone(&calls);
    leases
        .create("slot", Duration::from_millis(1500), move |_| {
            c.fetch_add(1, Ordering::SeqCst);
        })
        .expect("created");
    sleep(Duration::from_millis(1499)).await;
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert_eq!(leases.remaining("slot"), Ok(Duration::from_millis(1)));
    sleep(Duration::from_millis(1)).await;
    tokio::task::yield_now().await;
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn renew_pushes_the_deadline_back() {
    let leases = LocalLeases::new();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let t0 = MonotonicClock.now();
    leases
        .create("session", Duration::from_secs(10), reporter(&tx))
        .expect("created");
    sleep(Duration::from_secs(6)).await;
    let renewed = leases.renew("session").expect("renewed");
    assert_eq!(renewed, t0 + Duration::from_secs(16));
    sleep(Duration::from_secs(6)).await;
    let renewed = leases.renew("session").expect("renewed again");
    assert_eq!(renewed, t0 + Duration::from_secs(22));
    assert_eq!(leases.remaining("session"), Ok(Duration::from_secs(10)));

    let (lease, fired_at) = rx.recv().await.expect("fired");
    assert_eq!(fired_at, t0 + Duration::from_secs(22));
    assert_eq!(lease.deadline(), fired_at);
    sleep(Duration::from_secs(60)).await;
    assert!(rx.try_recv().is_err());
}

#[tokio::test(start_paused = true)]
async fn cancel_prevents_the_listener() {
    let leases = LocalLeases::new();
    let (tx, mut rx) = mpsc::unbounded_channel();
    leases
        .create("a", Duration::from_secs(5), reporter(&tx))
        .expect("created");
    leases
        .create("b", Duration::from_secs(5), reporter(&tx))
        .expect("created");
    sleep(Duration::from_secs(4)).await;
    leases.cancel("a").expect("cancelled");
    assert_eq!(leases.len(), 1);
    assert!(matches!(
        leases.cancel("a"),
        Err(LocalLeaseError::Unknown { .. })
    ));
    assert!(matches!(
        leases.renew("a"),
        Err(LocalLeaseError::Unknown { .. })
    ));

    let (lease, _) = rx.recv().await.expect("b fires");
    assert_eq!(lease.name(), "b");
    sleep(Duration::from_secs(3600)).await;
    assert!(rx.try_recv().is_err(), "a never fires");
}

#[tokio::test(start_paused = true)]
async fn renew_after_expiry_is_an_error() {
    let leases = LocalLeases::new();
    let (tx, mut rx) = mpsc::unbounded_channel();
    leases
        .create("cursor", Duration::from_secs(1), reporter(&tx))
        .expect("created");
    rx.recv().await.expect("fired");
    assert_eq!(
        leases.renew("cursor"),
        Err(LocalLeaseError::Unknown {
            name: "cursor".into()
        })
    );
    assert_eq!(
        leases.remaining("cursor"),
        Err(LocalLeaseError::Unknown {
            name: "cursor".into()
        })
    );
}

/// A clock running `ahead` of tokio's time: it sees deadlines pass before the timer does, which
/// opens the window between "deadline passed" and "listener dispatched" as wide as we like.
#[derive(Clone, Default)]
struct AheadClock(Arc<std::sync::Mutex<Duration>>);

impl Clock for AheadClock {
    fn now(&self) -> Instant {
        MonotonicClock.now() + *self.0.lock().expect("not poisoned")
    }
}

#[tokio::test(start_paused = true)]
async fn an_expired_lease_not_yet_dispatched_is_decided() {
    let ahead = AheadClock::default();
    let leases = LocalLeases::with_clock(ahead.clone());
    let (tx, mut rx) = mpsc::unbounded_channel();
    let deadline = leases
        .create("cursor", Duration::from_secs(5), reporter(&tx))
        .expect("created");

    *ahead.0.lock().expect("not poisoned") = Duration::from_secs(5); // the clock reaches the deadline
    assert_eq!(
        leases.renew("cursor"),
        Err(LocalLeaseError::Expired {
            name: "cursor".into()
        })
    );
    assert_eq!(
        leases.cancel("cursor"),
        Err(LocalLeaseError::Expired {
            name: "cursor".into()
        })
    );
    assert_eq!(
        leases.remaining("cursor"),
        Err(LocalLeaseError::Expired {
            name: "cursor".into()
        })
    );
    assert!(matches!(
        leases.create("cursor", Duration::from_secs(1), |_| {}),
        Err(LocalLeaseError::AlreadyExists { .. })
    ));
    assert_eq!(leases.len(), 1, "still held until dispatched");

    let (lease, _) = rx.recv().await.expect("the listener still runs");
    assert_eq!(lease.deadline(), deadline);
    sleep(Duration::from_secs(3600)).await;
    assert!(rx.try_recv().is_err(), "exactly once");
    assert!(leases.is_empty());
}
