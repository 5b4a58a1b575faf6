//! Sharded lease tasks: many named tasks spread over the live hosts by a consistent-hash ring.
//!
//! Every host calls [`LeaseService::start_sharded`] with the same names. Each host announces
//! itself with a membership lease (see `membership.rs`), reads the live members by the
//! database's clock every refresh interval, and builds the same [`HostRing`] from them. A host
//! competes only for the names the ring gives it and keeps the others in standby; the lease
//! engine still decides who holds a name, so there is never more than one holder.
//!
//! When the live set changes, only the names whose owner changed move. A holder that is no
//! longer assigned a name releases it at its next round: the new owner is in the ring only
//! because its membership lease is live, so the name is given up to a host seen alive, and the
//! hand-over takes no more than one refresh interval instead of a full term.
//!
//! The group's bell (`leasehold.members/g`, on the service's doorbell) makes it take less: a
//! host rings it once its membership is granted and once the releases of the names a round gave
//! up have all settled, and every member that hears it runs a round at once and wakes its names waiting to
//! apply. The ring carries nothing: the round reads the members as always, so a missed ring (no
//! doorbell, a dropped connection) only costs the refresh interval, as without it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use actix::Addr;
use futures::future::join_all;
use leasehold_core::{HolderId, LeaseConfig, LeaseKey, LeaseName, Namespace, Notification};
use leasehold_engine::{
    Belief, Broadcast, LeaseEngine, ListLive, Owner, Registry, SetCompeting, StartTask, StopTask,
    WakeTasks, WatchBroadcasts,
};
use tokio::sync::{Notify, broadcast, mpsc};
use tokio_util::sync::CancellationToken;

mod membership;
mod options;
mod plan;

pub use options::{DEFAULT_SHARD_GROUP, NameSource, ShardOptions};

use crate::task::{self, LeaseTask, LeaseTaskOptions};
use crate::{LeaseEvent, LeaseService, Result};
use membership::{MEMBERS_PREFIX, Membership};

/// What the coordinator last saw, for the handle's accessors.
#[derive(Debug, Default)]
struct LastSeen {
    members: Vec<String>,
    /// Every running name and whether this host competes for it.
    competing: BTreeMap<LeaseName, bool>,
    tasks: BTreeMap<LeaseName, LeaseTask>,
}

struct Coordinator {
    /// The shard group, shared by every name's owner in the engine's book.
    group: Arc<str>,
    /// The service's token, parent of every tenure's (not the service itself: that would keep
    /// it alive).
    service_token: CancellationToken,
    engine: Addr<LeaseEngine>,
    registry: Arc<Registry>,
    events: broadcast::Sender<LeaseEvent>,
    namespace: Namespace,
    membership: Membership,
    config: LeaseConfig,
    refresh: Duration,
    options: ShardOptions,
    source: Mutex<NameSource>,
    view: Mutex<LastSeen>,
    poke: Arc<Notify>,
    /// The rings of the group's bell (`None` without a doorbell), taken by `run`.
    rings: Mutex<Option<mpsc::Receiver<()>>>,
    /// Told when the releases of the names the last round gave up have all settled here: `run`
    /// rings the bell (once for them all), so that their new owners apply at once.
    given_up: Arc<Notify>,
    /// How many of those releases have not settled yet.
    releasing: Arc<AtomicUsize>,
    /// One round at a time.
    round: tokio::sync::Mutex<()>,
    stop: CancellationToken,
    finished: CancellationToken,
}

impl Coordinator {
    fn view(&self) -> std::sync::MutexGuard<'_, LastSeen> {
        self.view.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn holder(&self) -> &HolderId {
        &self.membership.holder
    }

    /// The current names, validated; bad or reserved names are logged and skipped.
    fn names(&self) -> BTreeSet<LeaseName> {
        let source = self
            .source
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        source
            .names()
            .into_iter()
            .filter_map(|n| {
                if n.starts_with(MEMBERS_PREFIX) {
                    tracing::warn!(
                        "sharded name {n:?} uses the reserved prefix {MEMBERS_PREFIX:?}"
                    );
                    return None;
                }
                LeaseName::new(n)
                    .map_err(|e| tracing::warn!("sharded name skipped: {e}"))
                    .ok()
            })
            .collect()
    }

    /// The listener of one sharded name: the ordinary task listener with the name's callbacks.
    fn listener(&self, name: &LeaseName, belief: &Arc<Belief>) -> leasehold_engine::Listener {
        let mut options = LeaseTaskOptions::new();
        if let Some(f) = self.options.on_acquired.clone() {
            let n = name.as_str().to_owned();
            options = options.on_acquired(move |token, cancel| f(&n, token, cancel));
        }
        if let Some(f) = self.options.on_lost.clone() {
            let n = name.as_str().to_owned();
            options = options.on_lost(move |reason| f(&n, reason));
        }
        let inner = task::listener(
            self.holder().clone(),
            Arc::clone(belief),
            &options,
            self.events.clone(),
        );
        let (given_up, releasing) = (Arc::clone(&self.given_up), Arc::clone(&self.releasing));
        Arc::new(move |key, n| {
            if matches!(n, Notification::Released { .. })
                && releasing.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
                    left.checked_sub(1)
                }) == Ok(1)
            {
                given_up.notify_one();
            }
            inner(key, n);
        })
    }

    /// Rings the group's bell: every member runs a round now (best effort).
    async fn ring_bell(&self) {
        let key = self.membership.bell.clone();
        if self.engine.send(Broadcast { key }).await.is_err() {
            tracing::debug!(
                "{}: the group's bell was not rung (shut down)",
                self.holder()
            );
        }
    }

    /// Tells the names this host competes for and does not hold to apply now (their holder may
    /// have let them go: the bell rang).
    async fn wake_waiting(&self) -> Result<()> {
        let keys: Vec<LeaseKey> = {
            let view = self.view();
            view.tasks
                .iter()
                .filter(|(n, t)| view.competing.get(*n) == Some(&true) && !t.has_lease())
                .map(|(_, t)| t.key.clone())
                .collect()
        };
        if !keys.is_empty() {
            self.engine
                .send(WakeTasks {
                    owner: self.owner(),
                    keys,
                })
                .await?;
        }
        Ok(())
    }

    /// One round: read the live members, build the ring, start new names, stop removed ones,
    /// and switch the others between competing and standby.
    async fn reconcile(&self) -> Result<()> {
        let _round = self.round.lock().await;
        let self_live = self.registry.has_lease(&self.membership.key);
        let hosts = if self_live {
            let records = self
                .engine
                .send(ListLive {
                    namespace: self.namespace.clone(),
                    prefix: self.membership.prefix.clone(),
                })
                .await??;
            self.membership.live_hosts(&records, true)
        } else {
            BTreeSet::new()
        };
        let names = self.names();
        let running = self.view().competing.clone();
        let plan::Plan {
            switch: changes,
            start: added,
            stop: removed,
        } = plan::plan(self.holder().as_str(), self_live, &hosts, &names, &running);

        // The releases this round sends: the bell rings once they have all settled.
        let releasing = {
            let view = self.view();
            let held = |n: &LeaseName| view.tasks.get(n).is_some_and(LeaseTask::has_lease);
            changes.iter().filter(|(n, c)| !*c && held(n)).count()
                + removed.iter().filter(|n| held(n)).count()
        };
        if releasing > 0 {
            self.releasing.store(releasing, Ordering::SeqCst);
        }
        // Give up first, so a name moving away is released as early as possible.
        if !changes.is_empty() {
            let keyed = changes
                .iter()
                .map(|(n, c)| (self.key(n), *c))
                .collect::<Vec<_>>();
            let owner = self.owner();
            self.engine
                .send(SetCompeting {
                    owner,
                    changes: keyed,
                })
                .await?;
            let mut view = self.view();
            for (n, c) in changes {
                view.competing.insert(n, c);
            }
        }
        for (name, compete) in added {
            let key = self.key(&name);
            let belief = Belief::new(
                self.service_token.clone(),
                Arc::clone(self.registry.clock()),
            );
            let listener = self.listener(&name, &belief);
            let (belief, _) = self
                .engine
                .send(StartTask {
                    key: key.clone(),
                    config: self.config.clone(),
                    listener,
                    owner: self.owner(),
                    compete,
                    belief: Some(belief),
                    value: None,
                })
                .await??;
            let mut view = self.view();
            view.competing.insert(name.clone(), compete);
            view.tasks.insert(
                name,
                LeaseTask {
                    key,
                    belief,
                    deadlines: self.registry.namespace(&self.namespace),
                    engine: self.engine.clone(),
                    owner: self.owner(),
                },
            );
        }
        self.stop_names(removed).await?;
        self.view().members = hosts.into_iter().collect();
        Ok(())
    }

    fn key(&self, name: &LeaseName) -> LeaseKey {
        LeaseKey::new(self.namespace.clone(), name.clone())
    }

    /// The owner of this group's names in the engine's book.
    fn owner(&self) -> Owner {
        Owner::Shard(Arc::clone(&self.group))
    }

    /// Stops the tasks of `names` (releasing what is held) and forgets them.
    async fn stop_names(&self, names: Vec<LeaseName>) -> Result<()> {
        let stops = names.iter().map(|n| {
            self.engine.send(StopTask {
                key: self.key(n),
                owner: self.owner(),
            })
        });
        for stopped in join_all(stops).await {
            stopped?;
        }
        let mut view = self.view();
        for name in names {
            view.competing.remove(&name);
            view.tasks.remove(&name);
        }
        Ok(())
    }

    /// The coordinator: a round now, then at every refresh, poke or ring of the group's bell
    /// (after which the names waiting to apply are woken), until stopped. Releases settled here
    /// ring the bell.
    async fn run(self: Arc<Self>) {
        let _finished = self.finished.clone().drop_guard();
        let mut rings = self
            .rings
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let mut rang = false;
        loop {
            if let Err(e) = self.reconcile().await {
                // The leases themselves keep it safe; try again next round.
                tracing::warn!("{}: sharding refresh failed: {e}", self.holder());
            }
            if std::mem::take(&mut rang)
                && let Err(e) = self.wake_waiting().await
            {
                tracing::debug!("{}: waking the waiting names failed: {e}", self.holder());
            }
            let refresh = tokio::time::sleep(self.refresh);
            tokio::pin!(refresh);
            loop {
                tokio::select! {
                    () = self.stop.cancelled() => return,
                    () = self.poke.notified() => break,
                    () = &mut refresh => break,
                    () = next_ring(&mut rings) => {
                        rang = true;
                        break;
                    }
                    () = self.given_up.notified() => self.ring_bell().await,
                }
            }
        }
    }
}

/// The next ring of the group's bell; never, once the doorbell has gone (or without one).
async fn next_ring(rings: &mut Option<mpsc::Receiver<()>>) {
    if let Some(rx) = rings {
        if rx.recv().await.is_some() {
            return;
        }
        *rings = None;
    }
    std::future::pending::<()>().await;
}

/// A handle on the sharded lease tasks of one host, returned by
/// [`LeaseService::start_sharded`]. Cloning is cheap; dropping it does not stop the tasks
/// (use [`ShardedTasks::leave`], or shut the service down).
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
/// use leasehold::{LeaseService, ShardOptions};
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
    /// # use leasehold::{LeaseService, ShardOptions};
    /// # let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// let shards = service.start_sharded(vec!["a", "b"], ShardOptions::new()).await?;
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

    /// Leaves the ring gracefully: stops refreshing, releases the membership lease first, then
    /// stops every name, releasing what is held, and rings the group's bell so the others take
    /// the names over at once (at their next refresh if the ring is missed). Returns how many
    /// names were held. The service keeps running.
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

    /// Stops the membership first, then every name, releasing what is held; answers how many
    /// names were held.
    async fn stop_everything(&self) -> Result<usize> {
        let shared = &self.shared;
        shared
            .engine
            .send(StopTask {
                key: shared.membership.key.clone(),
                owner: Owner::Membership(Arc::clone(&shared.group)),
            })
            .await?;
        let names: Vec<LeaseName> = shared.view().competing.keys().cloned().collect();
        let held = self.held().len();
        shared.stop_names(names).await?;
        shared.view().members.clear();
        // Membership and names released: the others take them over now, not at their refresh.
        shared.ring_bell().await;
        Ok(held)
    }
}

impl LeaseService {
    /// Starts sharded lease tasks: call it on every host with the same names. This host joins
    /// the ring of its namespace and shard group with a membership lease, and competes only for
    /// the names the ring assigns it; the other names wait in standby. Every name has a task
    /// ([`ShardedTasks::task`]) when this returns. Names move when hosts join, leave or die; a
    /// lease is never held by two hosts at once.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use leasehold::{LeaseService, ShardOptions};
    /// let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// let options = ShardOptions::new().on_acquired(|name, token, _cancel| {
    ///     println!("{name}: mine (token {token})");
    /// });
    /// let shards = service.start_sharded(vec!["orders/eu", "orders/us"], options).await?;
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
    pub async fn start_sharded(
        &self,
        names: impl Into<NameSource>,
        options: ShardOptions,
    ) -> Result<ShardedTasks> {
        let (engine, registry, service_config, events) = self.parts();
        let config = options
            .config
            .clone()
            .unwrap_or_else(|| service_config.clone());
        config.validate()?;
        let refresh = options.refresh.unwrap_or_else(|| config.term() / 3);
        let membership = Membership::new(
            self.namespace().clone(),
            &options.group,
            self.holder().clone(),
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
            service_token: self.service_token(),
            engine: engine.clone(),
            registry: Arc::clone(registry),
            events: events.clone(),
            namespace: self.namespace().clone(),
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
        if !self.spawn_on_engine(Arc::clone(&shared).run()) {
            return Err(crate::Error::ShutDown);
        }
        Ok(ShardedTasks { shared })
    }
}
