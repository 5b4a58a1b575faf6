//! The handle on one host's sharded tasks, [`ShardedTasks`], and
//! [`LeaseService::start_sharded`], which joins the ring and starts the coordinator.

use std::sync::{Arc, Mutex, PoisonError};

use leasehold_core::{LeaseKey, LeaseName, Notification};
use leasehold_engine::{Broadcast, Owner, StartTask, StopTask, WatchBroadcasts};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::membership::Membership;
use super::{Coordinator, LastSeen, NameSource, ShardOptions};
use crate::tasks::task::LeaseTask;
use crate::{LeaseService, Result};

/// A handle on the sharded lease tasks of one host, returned by
/// [`LeaseService::start_sharded`]. Cloning is cheap; dropping it does not stop the tasks
/// (use [`ShardedTasks::leave`], or shut the service down).
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
/// use leasehold::LeaseService;
/// use leasehold::shards::ShardOptions;
/// let service = LeaseService::builder("sqlite::memory:").build().await?;
/// let names: Vec<String> = (0..10).map(|i| format!("task-{i}")).collect();
/// let shards = service.start_sharded(names, ShardOptions::new()).await?;
/// // Alone in the ring, this host gets every name.
/// while shards.held().len() < 10 {
///     tokio::time::sleep(std::time::Duration::from_millis(20)).await;
/// }
/// assert_eq!(shards.members().len(), 1);
/// assert!(service.has_lease("task-3"));
/// shards.leave().await?;
/// assert!(!service.has_lease("task-3"));
/// # service.shutdown().await?; Ok(()) }
/// ```
#[derive(Clone)]
pub struct ShardedTasks {
    shared: Arc<Coordinator>,
}

impl std::fmt::Debug for ShardedTasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardedTasks")
            .field("holder", self.shared.holder())
            .field("group", &self.shared.options.group)
            .finish_non_exhaustive()
    }
}

impl ShardedTasks {
    /// Replaces the names with a fixed list and refreshes at once: new names are started
    /// (competed for by their owners), names no longer listed are stopped and released.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// # use leasehold::LeaseService;
    /// # use leasehold::shards::ShardOptions;
    /// # let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// let shards = service.shards().start(vec!["a", "b"], ShardOptions::new()).await?;
    /// shards.set_names(vec!["b", "c"]);
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    pub fn set_names(&self, names: impl Into<NameSource>) {
        *self
            .shared
            .source
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = names.into();
        self.refresh();
    }

    /// Reads the members and reassigns now instead of at the next refresh.
    pub fn refresh(&self) {
        self.shared.poke.notify_one();
    }

    /// The live members (holder ids) in the ring, as last read.
    #[must_use]
    pub fn members(&self) -> Vec<String> {
        self.shared.view().members.clone()
    }

    /// The names this host competes for (the ring assigns them here), as last computed.
    #[must_use]
    pub fn assigned(&self) -> Vec<LeaseName> {
        let view = self.shared.view();
        view.competing
            .iter()
            .filter(|(_, c)| **c)
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// The names this host holds now (memory only, like [`LeaseService::has_lease`]).
    #[must_use]
    pub fn held(&self) -> Vec<LeaseName> {
        let view = self.shared.view();
        view.tasks
            .iter()
            .filter(|(_, t)| t.has_lease())
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// The task handle of one sharded name (to wait for it with [`LeaseTask::acquired`]).
    #[must_use]
    pub fn task(&self, name: &str) -> Option<LeaseTask> {
        let name = LeaseName::new(name).ok()?;
        self.shared.view().tasks.get(&name).cloned()
    }

    /// This host's holder id and the shard group, as the membership lease names them.
    #[must_use]
    pub fn membership_key(&self) -> &LeaseKey {
        &self.shared.membership.key
    }

    /// Leaves the ring gracefully: stops refreshing (a round still reading the members gives
    /// way at once), stops every name and right after them the membership lease, releasing
    /// what is held (the releases go out together), and rings the group's bell. The other
    /// members watch the membership lease, so its release makes them take the names over at
    /// once (the bell, or at worst their next refresh, if that ring is missed). Returns how
    /// many names were held. The service keeps running.
    ///
    /// # Errors
    /// [`Error::ShutDown`](crate::Error::ShutDown) if the service is shut down.
    ///
    /// # Cancel safety
    /// Refreshing stops at the first poll. Dropped later, the membership and the names stopped
    /// so far stay stopped; the names not yet stopped keep running (call `leave` again, or shut
    /// the service down). Every stop already sent completes.
    pub async fn leave(&self) -> Result<usize> {
        let shared = &self.shared;
        shared.stop.cancel();
        shared.finished.cancelled().await;
        self.stop_everything().await
    }

    /// Stops every name and the membership (the names' stops sent first), releasing what is
    /// held; answers how many names were held.
    async fn stop_everything(&self) -> Result<usize> {
        let shared = &self.shared;
        // The names' stops are sent first and the membership's right after, without waiting:
        // their releases go out together, the membership's in the names' statement or after
        // it. The members take the names over when the membership's release is rung (they
        // watch it), so by then every name is free: a name still held would refuse them, and
        // they would wait for its own release's ring.
        let names: Vec<LeaseName> = shared.view().competing.keys().cloned().collect();
        let held = self.held().len();
        let membership = async {
            shared
                .engine
                .send(StopTask {
                    key: shared.membership.key.clone(),
                    owner: Owner::Membership(Arc::clone(&shared.group)),
                })
                .await
        };
        // `join!` polls in order: every name's stop is queued before the membership's.
        let (names, membership) = futures::join!(shared.stop_names(names), membership);
        membership?;
        names?;
        shared.view().members.clear();
        // Membership and names released: the others take them over now, not at their refresh.
        shared.ring_bell().await;
        Ok(held)
    }
}

impl Shards<'_> {
    /// Starts sharded lease tasks: call it on every host with the same names. This host joins
    /// the ring of its namespace and shard group with a membership lease, and competes only for
    /// the names the ring assigns it; the other names wait in standby. Every name has a task
    /// ([`ShardedTasks::task`]) when this returns. Names move when hosts join, leave or die; a
    /// lease is never held by two hosts at once.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use leasehold::LeaseService;
    /// use leasehold::shards::ShardOptions;
    /// let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// let options = ShardOptions::new().on_acquired(|name, token, _cancel| {
    ///     println!("{name}: mine (token {token})");
    /// });
    /// let shards = service.shards().start(vec!["orders/eu", "orders/us"], options).await?;
    /// let (token, _cancel) = shards.task("orders/eu").expect("started").acquired().await?;
    /// assert!(token.get() > 0);
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Invalid`](crate::Error::Invalid) for a bad group or configuration;
    /// [`Error::KeyInUse`](crate::Error::KeyInUse) when a name (or the membership) is used by a
    /// lease task, lock or another group of this service;
    /// [`Error::ShutDown`](crate::Error::ShutDown).
    ///
    /// # Cancel safety
    /// Dropped before it returns, the membership lease and the names started so far keep
    /// running without a handle to `leave` them; they end at shutdown. Await it to completion.
    pub async fn start(
        self,
        names: impl Into<NameSource>,
        options: ShardOptions,
    ) -> Result<ShardedTasks> {
        let (engine, registry, service_config, events) = self.service.parts();
        let config = options
            .config
            .clone()
            .unwrap_or_else(|| service_config.clone());
        config.validate()?;
        let refresh = options.refresh.unwrap_or_else(|| config.term() / 3);
        let membership = Membership::new(
            self.service.namespace().clone(),
            &options.group,
            self.service.holder().clone(),
        )?;
        let poke = Arc::new(Notify::new());
        // Watching before the membership starts, so no ring after its grant is missed.
        let rings = engine
            .send(WatchBroadcasts {
                key: membership.bell.clone(),
            })
            .await?;
        let shared = Arc::new(Coordinator {
            group: Arc::from(options.group.as_str()),
            service_token: self.service.service_token(),
            engine: engine.clone(),
            registry: Arc::clone(registry),
            events: events.clone(),
            namespace: self.service.namespace().clone(),
            membership,
            config: config.clone(),
            refresh,
            options,
            source: Mutex::new(names.into()),
            view: Mutex::new(LastSeen::default()),
            poke: Arc::clone(&poke),
            rings: Mutex::new(rings),
            given_up: Arc::new(Notify::new()),
            releasing: Arc::default(),
            round: tokio::sync::Mutex::new(()),
            stop: CancellationToken::new(),
            finished: CancellationToken::new(),
        });
        // Any change of this host's own membership refreshes the view at once; its grant
        // (committed when it is notified) rings the group's bell, so the members spread the
        // names over it now.
        let (bell_engine, bell) = (engine.clone(), shared.membership.bell.clone());
        let listener: leasehold_engine::Listener = Arc::new(move |_, n| {
            if matches!(n, Notification::Acquired { .. }) {
                bell_engine.do_send(Broadcast { key: bell.clone() });
            }
            poke.notify_one();
        });
        engine
            .send(StartTask {
                owner: Owner::Membership(Arc::clone(&shared.group)),
                ..StartTask::new(shared.membership.key.clone(), config, listener)
            })
            .await??;
        // A first round here, so every name has a task (in standby until this host's
        // membership is live) when this returns.
        let first = shared.reconcile().await;
        if let Err(e) = first {
            // Nothing may keep running without a handle: stop the membership and the names.
            shared.stop.cancel();
            let tasks = ShardedTasks { shared };
            if let Err(stop) = tasks.stop_everything().await {
                tracing::warn!(
                    "sharded tasks that failed to start could not all be stopped: {stop}"
                );
            }
            return Err(e);
        }
        if !self.service.spawn_on_engine(Arc::clone(&shared).run()) {
            return Err(crate::Error::ShutDown);
        }
        Ok(ShardedTasks { shared })
    }
}

/// The sharded tasks of one [`LeaseService`]: start a group of names spread over the live
/// hosts (see [`ShardedTasks`]). Borrowed from the service by [`LeaseService::shards`]; cheap
/// to make. The seeds' name stays on the service ([`LeaseService::start_sharded`]).
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
/// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
/// let shards = service.shards().start(vec!["a", "b"], leasehold::shards::ShardOptions::new()).await?;
/// assert!(shards.task("a").is_some() && shards.task("b").is_some());
/// # service.shutdown().await?; Ok(()) }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Shards<'a> {
    service: &'a LeaseService,
}

impl LeaseService {
    /// The handle on this service's sharded tasks: see [`Shards`].
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// let _shards = service.shards();
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    #[must_use]
    pub fn shards(&self) -> Shards<'_> {
        Shards { service: self }
    }
}
