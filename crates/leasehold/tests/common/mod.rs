//! Shared test helpers: a store switch (healthy, failing, hanging), a sampler that looks for two
//! holders of one name, unique namespaces and SQLite files. Counting stores come from
//! `leasehold_testkit::counting::CountingStore`.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::Duration;

use leasehold::store::Store;
use leasehold::{DbInstant, LeaseService, StoreError};
use leasehold_testkit::backends::backend_urls;
use leasehold_testkit::counting::{CountingStore, Op};

/// How the stores of a [`Switch`] behave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Mode {
    /// Pass every call through.
    Healthy = 0,
    /// Fail every call at once.
    Failing = 1,
    /// Never answer.
    Hanging = 2,
}

/// Switches the stores it wrapped between healthy, failing and hanging. Clones share the mode.
#[derive(Clone, Default)]
pub struct Switch(Arc<AtomicU8>);

impl Switch {
    pub fn set(&self, mode: Mode) {
        self.0.store(mode as u8, Ordering::SeqCst);
    }

    /// `inner` behind this switch: while failing, every call is answered
    /// `StoreError::Unexpected` ("injected failure"); while hanging, never answered.
    pub fn wrap(&self, inner: Arc<dyn Store>) -> CountingStore {
        let mode = Arc::clone(&self.0);
        CountingStore::new(inner, Arc::default()).before_call(move |op| {
            let mode = mode.load(Ordering::SeqCst);
            async move {
                match mode {
                    1 => Err(StoreError::Unexpected {
                        op: match op {
                            Op::BeginTenure | Op::BeginTenureMany => "acquire",
                            other => other.name(),
                        },
                        detail: "injected failure".to_owned(),
                    }),
                    2 => futures::future::pending().await,
                    _ => Ok(()),
                }
            }
        })
    }
}

/// Which sightings of two holders a [`DoubleHolderSampler`] records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Doubles {
    /// Every sample in which more than one service held the name.
    AsSeen,
    /// Only those where reading every service again at once still shows more than one holder.
    Reread,
}

/// What a [`DoubleHolderSampler`] saw.
#[derive(Debug)]
pub struct Sampled {
    /// Rounds over every name.
    pub rounds: u64,
    /// Per name, the database time of every recorded sample with more than one holder.
    pub doubles: BTreeMap<String, Vec<DbInstant>>,
}

/// Samples every service's `has_lease` for every name, a round every `every`, until stopped;
/// records the database time (read on `observer`) of samples with more than one holder.
pub struct DoubleHolderSampler {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Sampled>,
}

impl DoubleHolderSampler {
    pub fn start(
        services: Vec<LeaseService>,
        observer: LeaseService,
        names: Vec<String>,
        every: Duration,
        doubles: Doubles,
    ) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let task = tokio::spawn(async move {
            let mut sampled = Sampled {
                rounds: 0,
                doubles: BTreeMap::new(),
            };
            while !stopped.load(Ordering::SeqCst) {
                for n in &names {
                    let count = || services.iter().filter(|s| s.has_lease(n)).count();
                    if count() > 1 && (doubles == Doubles::AsSeen || count() > 1) {
                        let at = observer.db_now().await.expect("db time");
                        sampled.doubles.entry(n.clone()).or_default().push(at);
                    }
                }
                sampled.rounds += 1;
                tokio::time::sleep(every).await;
            }
            sampled
        });
        Self { stop, task }
    }

    /// Stops sampling and returns what was seen.
    pub async fn stop(self) -> Sampled {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.expect("sampler")
    }
}

/// A namespace no other test (or run) uses.
pub fn unique_namespace(prefix: &str) -> String {
    format!(
        "{prefix}-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    )
}

/// A fresh SQLite database file URL in the system temp dir.
pub fn sqlite_file_url(name: &str) -> String {
    let dir = std::env::temp_dir().join(unique_namespace(&format!("leasehold-{name}")));
    std::fs::create_dir_all(&dir).expect("temp dir");
    format!("sqlite://{}?mode=rwc", dir.join("leases.db").display())
}

/// Every backend this run has: an SQLite file always, PostgreSQL and MariaDB when named (with
/// `CI` set a missing one fails the run: `backend_url`).
pub fn backends(name: &str) -> Vec<(&'static str, String)> {
    backend_urls(sqlite_file_url(name))
}
