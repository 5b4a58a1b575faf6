//! The engine thread: one long-lived actix `System` on which the stores are connected and every
//! actor lives. sqlx connections belong to the runtime that opened them, so both must outlive
//! every lease.

use std::sync::Arc;
use std::time::Duration;

use actix::{Actor, Addr, System};
use leasehold_core::HolderId;
use leasehold_engine::{LeaseEngine, Registry, RenewGroup};
use leasehold_storage::{AdminStore, LeaseStore, SeaOrmStore, Store, StoreBuilder};
use tokio::sync::oneshot;

use crate::{Error, Result};

/// A wrapper the builder puts around the stores (`LeaseServiceBuilder::store_layer`): both ports,
/// so the operator's calls the engine makes (retention's purge) go through it as the tenures' do.
pub(crate) type StoreLayer = Arc<dyn Fn(Arc<dyn Store>) -> Arc<dyn Store> + Send + Sync>;

/// Whether a URL names in-memory SQLite (which cannot be split into two pools).
pub(crate) fn is_memory_sqlite(url: &str) -> bool {
    let lower = url.trim().to_ascii_lowercase();
    lower.starts_with("sqlite:") && (lower.contains(":memory:") || lower.contains("mode=memory"))
}

/// Where the stores come from.
#[allow(clippy::large_enum_variant)] // built once per service
pub(crate) enum StoreSource {
    Url(String),
    /// The request store's builder, the renewal store's builder (same URL), and whether the URL
    /// is in-memory SQLite (then one store serves both).
    Builders(StoreBuilder, StoreBuilder, bool),
    /// A store for requests and renewals, and the SQL store it is (or wraps), if any.
    Store(Arc<dyn Store>, Option<SeaOrmStore>),
    /// A store for requests, one for renewals, and the SQL store of requests, if any.
    Stores(Arc<dyn Store>, Arc<dyn Store>, Option<SeaOrmStore>),
}

/// The opened stores: requests, renewals, and the SQL store under requests (fencing, the
/// doorbell), if any.
type Opened = (Arc<dyn Store>, Arc<dyn Store>, Option<SeaOrmStore>);

pub(crate) struct EngineSpec {
    pub(crate) source: StoreSource,
    pub(crate) holder: HolderId,
    /// Group commit, the renewals' window, notifications in statements (with group commit
    /// only).
    pub(crate) tuning: crate::EngineTuning,
    pub(crate) layer: Option<StoreLayer>,
    pub(crate) reclaim_own_leases: bool,
    #[cfg(feature = "known-bugs")]
    pub(crate) bug: Option<leasehold_engine::KnownBug>,
}

/// The running engine thread.
pub(crate) struct EngineThread {
    pub(crate) system: System,
    pub(crate) exited: oneshot::Receiver<()>,
    pub(crate) thread: std::thread::JoinHandle<()>,
}

/// Whether the store a service opens notifies in its grant and release statements.
#[derive(Debug, Clone, Copy)]
struct Notify {
    /// Asked for ([`crate::EngineTuning::notify_in_statements`]).
    asked: bool,
    /// Group commit is on: without it one notifying commit per request would queue every
    /// request behind the server's notification lock (lock pairs of 16 tasks: 2,266 → 1,162/s).
    group_commit: bool,
}

impl Notify {
    /// Asked for, or through transaction pooling, where a separate `pg_notify` statement after
    /// each release costs a transaction of its own; with group commit either way.
    fn for_store(self, sql: &SeaOrmStore) -> bool {
        self.group_commit && (self.asked || sql.transaction_pooling())
    }
}

/// Opens the stores; `notify`: whether the store it connects itself notifies in its grant and
/// release statements.
async fn open(source: StoreSource, notify: Notify) -> Result<Opened> {
    match source {
        StoreSource::Store(store, sql) => Ok((Arc::clone(&store), store, sql)),
        StoreSource::Stores(store, renew, sql) => Ok((store, renew, sql)),
        StoreSource::Builders(main, renew, memory) => {
            let sql = main.connect().await?;
            let on = notify.for_store(&sql);
            let sql = sql.notify_in_statements(on);
            let store: Arc<dyn Store> = Arc::new(sql.clone());
            if memory {
                return Ok((Arc::clone(&store), store, Some(sql)));
            }
            // The renewal pool goes through the same pooler: no need to find that out twice.
            let renew: Arc<dyn Store> = Arc::new(
                renew
                    .transaction_pooling(sql.transaction_pooling())
                    .migrate(false)
                    .connect()
                    .await?,
            );
            Ok((store, renew, Some(sql)))
        }
        StoreSource::Url(url) => {
            let (main, renew) = (
                StoreBuilder::new(url.clone()),
                StoreBuilder::new(url.clone()),
            );
            Box::pin(open(
                StoreSource::Builders(main, renew, is_memory_sqlite(&url)),
                notify,
            ))
            .await
        }
    }
}

/// Starts the engine thread and, on it, the stores, the batch renewer and the engine.
pub(crate) async fn start(
    spec: EngineSpec,
    registry: Arc<Registry>,
    cancel: tokio_util::sync::CancellationToken,
    request_timeout: Duration,
) -> Result<(Addr<LeaseEngine>, EngineThread)> {
    let (init_tx, init_rx) = oneshot::channel();
    let (exit_tx, exited) = oneshot::channel();
    let thread = std::thread::Builder::new()
        .name("leasehold-engine".to_owned())
        .spawn(move || {
            let runner = System::new();
            let started = runner.block_on(async move {
                // The layer wraps the lease calls; fencing and the doorbell use the SQL store itself.
                let (store, renew_store, sql) = open(
                    spec.source,
                    Notify {
                        asked: spec.tuning.notifies_in_statements(),
                        group_commit: spec.tuning.uses_group_commit(),
                    },
                )
                .await?;
                let (store, renew_store) = match &spec.layer {
                    Some(layer) => (layer(store), layer(renew_store)),
                    None => (store, renew_store),
                };
                // The engine's tenures see the lease port only; retention's purge (and the
                // `known-bugs` shutdown) go through the admin port of the same store.
                let admin: Arc<dyn AdminStore> = Arc::clone(&store) as Arc<dyn AdminStore>;
                let (store, renew_store): (Arc<dyn LeaseStore>, Arc<dyn LeaseStore>) =
                    (store, renew_store);
                let renewer = RenewGroup::new(renew_store, spec.tuning.batch_window_len());
                let pressure = renewer.pressure();
                let engine = LeaseEngine::new(spec.holder, store, renewer.start(), registry)
                    .with_admin_store(admin)
                    .with_renew_pressure(pressure)
                    .with_service_token(cancel)
                    .with_request_timeout(request_timeout)
                    .with_sql_store(sql)
                    .reclaim_own_leases(spec.reclaim_own_leases)
                    .batch_grants(spec.tuning.uses_group_commit());
                #[cfg(feature = "known-bugs")]
                let engine = engine.reintroduce_bug(spec.bug);
                let engine = engine.start();
                Ok::<_, Error>((engine, System::current()))
            });
            match started {
                Ok((engine, system)) => {
                    if init_tx.send(Ok((engine, system))).is_ok() {
                        let stop = runner.stop_future();
                        match runner.block_on(stop) {
                            Ok(0) => {}
                            code => tracing::warn!("leasehold engine thread ended with {code:?}"),
                        }
                    }
                }
                Err(e) => {
                    let _ = init_tx.send(Err(e));
                }
            }
            drop_outside_the_engine(runner);
            let _ = exit_tx.send(());
        })
        .map_err(Error::Thread)?;
    let (engine, system) = init_rx.await.map_err(|_| Error::ShutDown)??;
    Ok((
        engine,
        EngineThread {
            system,
            exited,
            thread,
        },
    ))
}

impl EngineThread {
    /// Stops the system, waits (without blocking) for the thread to leave it, then joins it.
    pub(crate) async fn stop(self) {
        self.system.stop();
        let _ = self.exited.await;
        let thread = self.thread;
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                let _ = handle.spawn_blocking(move || thread.join()).await;
            }
            Err(_) => drop(thread),
        }
    }
}

/// Drops the engine's stopped runtime, and with it the tasks still holding pooled connections
/// (a store call abandoned at its bound, a doorbell's listener). sqlx gives a connection back to
/// its pool by spawning a task, which panics without a Tokio context once the engine's runtime is
/// going away ("this functionality requires a Tokio context"; fatal under `panic = "abort"`). A
/// runtime of its own, never run, is that context: such connections are then just closed.
fn drop_outside_the_engine(runner: actix::SystemRunner) {
    let quiet = tokio::runtime::Builder::new_current_thread().build();
    let _context = quiet.as_ref().ok().map(tokio::runtime::Runtime::enter);
    drop(runner);
}
