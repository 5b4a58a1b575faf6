//! On real threads, renew and cancel racing the timer never lose or duplicate an expiry:
//! for every lease, exactly one of "cancel succeeded" and "the listener ran" happens.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use leasehold_local::{LocalLeaseError, LocalLeases};

const LEASES: usize = 2_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renew_and_cancel_racing_expiry_keep_exactly_once() {
    let leases = LocalLeases::new();
    let calls: Arc<Vec<AtomicU32>> = Arc::new((0..LEASES).map(|_| AtomicU32::new(0)).collect());
    for i in 0..LEASES {
        let calls = Arc::clone(&calls);
        let period = Duration::from_micros(500 + (i as u64 % 7) * 300);
        leases
            .create(&i.to_string(), period, move |_| {
                calls[i].fetch_add(1, Ordering::SeqCst);
            })
            .expect("created");
    }
    let racer = {
        let leases = leases.clone();
        std::thread::spawn(move || {
            let mut cancelled = vec![false; LEASES];
            // Renew everything a few times while the timer fires, then cancel the survivors.
            for round in 0..4 {
                for (i, done) in cancelled.iter_mut().enumerate() {
                    let name = i.to_string();
                    let outcome = if round == 3 || i % 4 == round {
                        leases.cancel(&name)
                    } else {
                        leases.renew(&name).map(drop)
                    };
                    match outcome {
                        Ok(()) if round == 3 || i % 4 == round => *done = true,
                        Ok(())
                        | Err(LocalLeaseError::Expired { .. } | LocalLeaseError::Unknown { .. }) => {
                        }
                        Err(e) => panic!("unexpected {e}"),
                    }
                }
            }
            cancelled
        })
    };
    let cancelled = tokio::task::spawn_blocking(move || racer.join().expect("racer"))
        .await
        .expect("joined");
    // Every lease not cancelled must fire (no timeout here: a lost expiry hangs the test).
    let expected = cancelled.iter().filter(|&&c| !c).count();
    while calls
        .iter()
        .map(|c| c.load(Ordering::SeqCst) as usize)
        .sum::<usize>()
        < expected
    {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!(leases.is_empty());
    // Give a duplicate a chance to show up.
    tokio::time::sleep(Duration::from_millis(20)).await;
    for (i, &was_cancelled) in cancelled.iter().enumerate() {
        let ran = calls[i].load(Ordering::SeqCst);
        assert_eq!(
            (was_cancelled, ran),
            (was_cancelled, u32::from(!was_cancelled)),
            "lease {i}"
        );
    }
}
