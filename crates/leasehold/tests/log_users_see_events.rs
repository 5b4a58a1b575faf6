//! An application that logs through the `log` crate (no `tracing` subscriber) still sees the
//! tenure events: a grant and a release of a lock arrive as log records, each with the lease's
//! fields (no span carries them for a `log` user).

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use leasehold::LeaseService;

/// Collects leasehold's records at info and above (one logger per test binary).
struct Records(Mutex<Vec<(String, String)>>);

impl log::Log for Records {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::Level::Info && metadata.target().starts_with("leasehold")
    }
    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) {
            self.0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((record.target().to_owned(), record.args().to_string()));
        }
    }
    fn flush(&self) {}
}

static LOG: Records = Records(Mutex::new(Vec::new()));

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_and_releases_reach_log() {
    log::set_logger(&LOG).expect("the only logger of this binary");
    log::set_max_level(log::LevelFilter::Info);
    let service = LeaseService::builder("sqlite::memory:")
        .holder_id("node-a")
        .build()
        .await
        .expect("service");
    let locks = service.locks();
    let guard = locks
        .acquire("jobs", "rebuild-index", Duration::from_secs(30))
        .await
        .expect("lock")
        .expect("free");
    let token = guard.token();
    locks
        .release("jobs", "rebuild-index")
        .await
        .expect("release");
    service.shutdown().await.expect("shutdown");

    let records = LOG.0.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let has = |fields: &[&str]| {
        records
            .iter()
            .any(|(_, r)| fields.iter().all(|field| r.contains(field)))
    };
    let token = format!("token={token}");
    for event in ["event=\"acquired\"", "event=\"released\""] {
        let fields = [
            event,
            "namespace=\"jobs\"",
            "name=\"rebuild-index\"",
            "holder=\"node-a\"",
            &token,
        ];
        assert!(has(&fields), "no record with {fields:?} in {records:#?}");
    }
}
