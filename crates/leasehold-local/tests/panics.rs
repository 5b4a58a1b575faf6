//! A panicking listener is logged and contained; the service and the other listeners carry on.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use leasehold_local::{Listener, LocalLeases};
use tokio::sync::mpsc;

/// Collects error-level log lines (one logger per test binary).
struct ErrorLog(Mutex<Vec<String>>);

impl log::Log for ErrorLog {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() == log::Level::Error
    }
    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) {
            self.0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(record.args().to_string());
        }
    }
    fn flush(&self) {}
}

static LOG: ErrorLog = ErrorLog(Mutex::new(Vec::new()));

#[tokio::test(start_paused = true)]
async fn a_panicking_listener_does_not_stop_the_others() {
    log::set_logger(&LOG).expect("first logger");
    log::set_max_level(log::LevelFilter::Error);

    let leases = LocalLeases::new();
    let (tx, mut rx) = mpsc::unbounded_channel();
    for i in 0..10_u64 {
        let name = format!("lease-{i}");
        let tx = tx.clone();
        let period = Duration::from_secs(1 + i % 3);
        match i {
            3 => leases.create(&name, period, |_| panic!("sync listener fails")),
            6 => leases.create_async(&name, period, |_| async {
                tokio::task::yield_now().await;
                panic!("async listener fails");
            }),
            7 => leases.create_with(
                &name,
                period,
                Listener::from_async(|_| async { panic!("async listener fails") }),
            ),
            _ => leases.create(&name, period, move |lease| {
                let _ = tx.send(lease.name().to_owned());
            }),
        }
        .expect("created");
    }
    drop(tx);
    let mut fired = Vec::new();
    while let Some(name) = rx.recv().await {
        fired.push(name);
    }
    assert_eq!(fired.len(), 7, "every other listener ran: {fired:?}");

    // The service still works.
    let (tx, rx) = tokio::sync::oneshot::channel();
    leases
        .create("after", Duration::from_secs(1), move |_| {
            let _ = tx.send(());
        })
        .expect("still open");
    rx.await.expect("still dispatching");

    let errors = LOG.0.lock().unwrap_or_else(PoisonError::into_inner).clone();
    assert_eq!(errors.len(), 3, "{errors:?}");
    assert!(
        errors
            .iter()
            .any(|e| e.contains("\"lease-3\"") && e.contains("sync listener fails")),
        "{errors:?}"
    );
    assert!(
        errors
            .iter()
            .any(|e| e.contains("\"lease-6\"") && e.contains("async listener fails")),
        "{errors:?}"
    );
}
