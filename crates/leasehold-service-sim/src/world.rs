//! The world of one run: the store the services share, how a service incarnation is built
//! behind its fault layer, and the oracle's own view of the rows.

use std::path::PathBuf;
use std::sync::Arc;

use leasehold::store::{MemoryStore, Store, StoreBuilder};
use leasehold::{LeaseConfig, LeaseRecord, LeaseService, Namespace, StoreError};

use crate::fault::FaultDice;
use crate::session::Sessions;
use crate::spec::{Backend, SimSpec};
use crate::{FaultStore, GrantLog, SimClock};

/// Connections for other sessions: each holds one for at most a few request timeouts.
const SESSION_CONNECTIONS: u32 = 8;

/// Why a run could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    /// The database could not be reached.
    #[error("the simulation's store failed: {0}")]
    Store(StoreError),
    /// A temp dir could not be made.
    #[error("the simulation could not set up: {0}")]
    Io(std::io::Error),
    /// The configuration was refused.
    #[error("the simulation's configuration was refused: {0}")]
    Invalid(leasehold::ValidationError),
}

/// The shared parts of one run.
pub(crate) struct World {
    pub(crate) spec: SimSpec,
    pub(crate) namespace: String,
    pub(crate) config: LeaseConfig,
    pub(crate) clock: SimClock,
    pub(crate) log: Arc<GrantLog>,
    url: Option<String>,
    memory: Option<MemoryStore>,
    /// The oracle's view of the rows: the shared memory store, or a connection of its own.
    pub(crate) rows: Arc<dyn Store>,
    /// The raw SQL store (for row stalls), when there is one.
    pub(crate) sql: Option<leasehold::store::SeaOrmStore>,
    /// Other sessions for the SQL-level faults (connections of their own), on SQL stores.
    sessions: Option<Sessions>,
    temp_dir: Option<PathBuf>,
}

impl World {
    /// Opens the backend of `spec` with a fresh namespace; `term` is the run's lease term.
    pub(crate) async fn open(spec: SimSpec, config: LeaseConfig) -> Result<Self, SimError> {
        config.validate().map_err(SimError::Invalid)?;
        let namespace = format!(
            "sim-{}-{}-{:08x}",
            spec.seed,
            std::process::id(),
            rand::random::<u32>()
        );
        let mut temp_dir = None;
        let url = match &spec.backend {
            Backend::Memory => None,
            Backend::Sqlite => {
                let dir = std::env::temp_dir().join(format!("leasehold-{namespace}"));
                std::fs::create_dir_all(&dir).map_err(SimError::Io)?;
                let url = format!("sqlite://{}?mode=rwc", dir.join("leases.db").display());
                temp_dir = Some(dir);
                Some(url)
            }
            Backend::Postgres(url) | Backend::Mysql(url) => Some(url.clone()),
        };
        let (clock, memory, rows, sql): (_, _, Arc<dyn Store>, _) = match &url {
            None => {
                let clock = SimClock::exact();
                let c = clock.clone();
                let memory = MemoryStore::with_clock(move || c.exact_now()).purge_resets_tokens(
                    spec.store_bug == Some(crate::StoreBug::PurgeResetsTokens),
                );
                (clock, Some(memory.clone()), Arc::new(memory), None)
            }
            Some(url) => {
                let store = StoreBuilder::new(url.clone())
                    .connect()
                    .await
                    .map_err(SimError::Store)?;
                let clock = SimClock::calibrated(&store)
                    .await
                    .map_err(SimError::Store)?;
                (clock, None, Arc::new(store.clone()), Some(store))
            }
        };
        let sessions = match &url {
            Some(url) => {
                let store = StoreBuilder::new(url.clone())
                    .max_connections(SESSION_CONNECTIONS)
                    .connect()
                    .await
                    .map_err(SimError::Store)?;
                let here = tokio::runtime::Handle::current();
                Some(Sessions::new(store, here, config.term()))
            }
            None => None,
        };
        Ok(Self {
            spec,
            namespace,
            config,
            clock,
            log: Arc::new(GrantLog::default()),
            url,
            memory,
            rows,
            sql,
            sessions,
            temp_dir,
        })
    }

    /// Builds one service incarnation as `holder`, its store calls behind `dice`.
    pub(crate) async fn build(
        &self,
        holder: &str,
        dice: Arc<FaultDice>,
    ) -> Result<LeaseService, leasehold::Error> {
        let (log, clock, bug, sessions) = (
            Arc::clone(&self.log),
            self.clock.clone(),
            self.spec.store_bug,
            self.sessions.clone(),
        );
        let builder = match (&self.memory, &self.url) {
            (Some(memory), _) => {
                let late = tokio::runtime::Handle::try_current().ok();
                let store =
                    FaultStore::new(Arc::new(memory.clone()), dice, log, clock, late).with_bug(bug);
                leasehold::LeaseServiceBuilder::from_store(Arc::new(store))
            }
            (None, Some(url)) => LeaseService::builder(url.clone()).store_layer(move |inner| {
                // Late calls run on the engine's runtime, which owns the connections.
                let store = FaultStore::new(
                    inner,
                    Arc::clone(&dice),
                    Arc::clone(&log),
                    clock.clone(),
                    None,
                );
                let store = store.with_bug(bug).with_sessions(sessions.clone());
                Arc::new(store) as Arc<dyn Store>
            }),
            (None, None) => {
                leasehold::LeaseServiceBuilder::from_store(Arc::new(MemoryStore::new()))
            }
        };
        let builder = builder
            .holder_id(holder)
            .namespace(self.namespace.clone())
            .config(self.config.clone());
        let builder = match &self.spec.customize {
            Some(f) => f(builder),
            None => builder,
        };
        let service = builder.build().await?;
        service
            .locks()
            .set_retry_interval(self.config.retry_interval());
        Ok(service)
    }

    /// The live rows of the run's namespace, read without faults.
    pub(crate) async fn live_rows(&self) -> Result<Vec<LeaseRecord>, StoreError> {
        let ns = Namespace::new(self.namespace.clone())?;
        self.rows.list_valid(Some(&ns), "").await
    }
}

impl Drop for World {
    fn drop(&mut self) {
        if let Some(dir) = self.temp_dir.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}
