//! Sharded lease tasks: many named tasks spread over the live hosts by a consistent-hash ring.
//!
//! Every host calls [`Shards::start`] with the same names. Each host announces
//! itself with a membership lease (see `membership.rs`), reads the live members by the
//! database's clock every refresh interval, and builds the same `HostRing` from them. A host
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
//!
//! A leaver is seen sooner still: every member watches the membership lease of every other
//! member it last read (`Doorbell::watch`, as a lock's waiter does), and a leaver stops its
//! names and right after them its membership, so the releases go out together (one statement
//! of the release group commit when no other release is out) and the membership's commits
//! with the names' or after them.
//! The membership's release is pushed like any lease's once it has committed, so the members
//! run a round at once (reading the members: a ring is a hint, and a spurious one must not
//! drop a live member) and compete for the names the ring now gives them; a name the leaver
//! still holds (a release that failed) refuses them, and they wait on its own release,
//! pushed the same way. On MySQL/MariaDB this is what avoids the bell's hold
//! (`BELL_HOLD`); each watched member there takes turns on the doorbell's few waiting
//! connections (`MAX_WAITING`, shared with the service's other waits), so in a large group a
//! leave may still be heard at the bell. A missed ring costs what it did before: the bell, or
//! the refresh interval.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Poll;
use std::time::Duration;

use actix::Addr;
use futures::future::join_all;
use leasehold_core::{HolderId, LeaseConfig, LeaseKey, LeaseName, Namespace, Notification};
use leasehold_engine::{
    Belief, Broadcast, LeaseEngine, ListLive, Owner, Registry, SetCompeting, StartTask, StopTask,
    WakeTasks, WatchReleases,
};
use tokio::sync::{Notify, broadcast, mpsc};
use tokio_util::sync::CancellationToken;

mod handle;
mod membership;
mod options;
mod plan;

pub use handle::{ShardedTasks, Shards};
pub use options::{DEFAULT_SHARD_GROUP, NameSource, ShardOptions};

#[cfg(doc)]
use crate::LeaseService;
use crate::tasks::task::{self, LeaseTask, LeaseTaskOptions};
use crate::{LeaseEvent, Result};
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
                LeaseName::parse(n)
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
            let list = self.engine.send(ListLive {
                namespace: self.namespace.clone(),
                prefix: self.membership.prefix.clone(),
            });
            // A round that has changed nothing yet gives way to `leave`, which waits for the
            // round in progress: the read goes on in the engine's task and its answer is dropped.
            let records = tokio::select! {
                records = list => records??,
                () = self.stop.cancelled() => return Ok(()),
            };
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
                    dispatch: leasehold_engine::caller_dispatch(),
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
                    holder: self.holder().clone(),
                },
            );
        }
        self.stop_names(removed).await?;
        self.view().members = hosts.into_iter().collect();
        Ok(())
    }

    /// Watches the membership lease of every other member last read, and of no one else: its
    /// release is pushed like any lease's (the doorbell rings once it has committed), so a
    /// leaver is seen at once, without waiting for the group's bell.
    async fn watch_members(&self, watches: &mut MemberWatches) {
        let others: BTreeSet<String> = self
            .view()
            .members
            .iter()
            .filter(|m| m.as_str() != self.holder().as_str())
            .cloned()
            .collect();
        watches.retain(|m, _| others.contains(m));
        for member in others {
            if watches.contains_key(&member) {
                continue;
            }
            let Ok(name) = LeaseName::new(format!("{}{member}", self.membership.prefix)) else {
                continue;
            };
            let key = LeaseKey::new(self.namespace.clone(), name);
            match self.engine.send(WatchReleases { key }).await {
                Ok(Some(rx)) => {
                    watches.insert(member, rx);
                }
                // No doorbell, or shut down: the bell and the refresh still come.
                Ok(None) | Err(_) => return,
            }
        }
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
        // Without a doorbell nothing is pushed: no member is watched either.
        let doorbell = rings.is_some();
        let mut members = MemberWatches::new();
        let mut rang = false;
        loop {
            if let Err(e) = self.reconcile().await {
                // The leases themselves keep it safe; try again next round.
                tracing::warn!("{}: sharding refresh failed: {e}", self.holder());
            }
            if self.stop.is_cancelled() {
                return;
            }
            if std::mem::take(&mut rang)
                && let Err(e) = self.wake_waiting().await
            {
                tracing::debug!("{}: waking the waiting names failed: {e}", self.holder());
            }
            if doorbell {
                self.watch_members(&mut members).await;
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
                    () = next_member_ring(&mut members) => {
                        rang = true;
                        break;
                    }
                    () = self.given_up.notified() => self.ring_bell().await,
                }
            }
        }
    }
}

/// The rings of the other members' membership leases, by holder.
type MemberWatches = BTreeMap<String, mpsc::Receiver<()>>;

/// The next ring of any member's membership lease (a release: that member left); never while
/// none is watched. A watch whose doorbell has gone is dropped (the next round watches again).
async fn next_member_ring(watches: &mut MemberWatches) {
    std::future::poll_fn(|cx| {
        let mut rang = false;
        watches.retain(|_, rx| match rx.poll_recv(cx) {
            Poll::Ready(Some(())) => {
                rang = true;
                true
            }
            Poll::Ready(None) => false,
            Poll::Pending => true,
        });
        if rang { Poll::Ready(()) } else { Poll::Pending }
    })
    .await;
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
