//! 100,000 leases with random periods all fire exactly once, at their deadlines, in deadline order.
//!
//! The timer has millisecond resolution: a deadline fires at the next whole millisecond (counted
//! from the service's start), and deadlines within the same millisecond are ties.

use std::time::Duration;

use leasehold_core::{Clock, MonotonicClock};
use leasehold_local::LocalLeases;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tokio::sync::mpsc;
use tokio::time::Instant;

const LEASES: usize = 100_000;

#[tokio::test(start_paused = true)]
async fn hundred_thousand_leases_fire_once_in_deadline_order() {
    let t0 = MonotonicClock.now();
    let leases = LocalLeases::new();
    let tick = |deadline: Instant| {
        t0 + Duration::from_millis((deadline - t0).as_nanos().div_ceil(1_000_000) as u64)
    };
    let mut rng = StdRng::seed_from_u64(0x1ea5e);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut deadlines = Vec::with_capacity(LEASES);
    for i in 0..LEASES {
        // Milliseconds to an hour, plus sub-millisecond parts, with plenty of ties.
        let period = Duration::from_micros(rng.random_range(1_000..=3_600_000_000));
        let tx = tx.clone();
        let deadline = leases
            .create(&format!("lease-{i}"), period, move |lease| {
                let _ = tx.send((i, lease.deadline(), MonotonicClock.now()));
            })
            .expect("created");
        deadlines.push(deadline);
    }
    drop(tx);
    assert_eq!(leases.len(), LEASES);

    let mut fired = vec![0_u32; LEASES];
    let mut previous = None;
    for _ in 0..LEASES {
        let (i, deadline, fired_at) = rx.recv().await.expect("every lease fires");
        fired[i] += 1;
        assert_eq!(deadline, deadlines[i]);
        assert_eq!(
            fired_at,
            tick(deadline),
            "lease-{i} fired at the wrong instant"
        );
        if let Some(previous) = previous {
            assert!(
                tick(deadline) >= previous,
                "lease-{i} fired out of deadline order"
            );
        }
        previous = Some(tick(deadline));
    }
    assert!(fired.iter().all(|&n| n == 1));
    assert!(leases.is_empty());
    tokio::time::sleep(Duration::from_secs(7200)).await;
    assert!(rx.try_recv().is_err(), "nothing fires twice");
}
