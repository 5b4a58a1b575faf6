//! Every belief signal of every service, registered by the programs and read by the oracle.
//!
//! Signals: `has_lease` and `has_hold_lock` of every service for every key (derived rows of
//! candidates, hand-overs and asks included), `LeaseTask::has_lease` and `LeaseTask::token`,
//! `PermitTask::has_lease` and `PermitTask::held_slot` (an N-holder lease task's slot, on the
//! slot's permit key), `WorkGuard::is_held` of running work, `ShardedTasks::held`, every
//! tenure's `CancellationToken` handed out (by `on_acquired` callbacks, `LeaseTask::acquired`,
//! `LeaseTask::cancellation_token`, the guards' `cancellation_token`, sharded callbacks,
//! `run_once` fires) that is not cancelled yet, and, through the [`Tenure`] trait, every
//! holding handle's three signals: `is_held`, a `deadline` still ahead, and its
//! `cancellation_token` asked for at the sample. The handles read through [`Tenure`]:
//! `LockGuard` (a semaphore's permits are lock guards), `ReentrantGuard`, `HeldPermit`,
//! `MultiLockGuard` (every key of the set, with the key's token), `LeaseTask`, `PermitTask`
//! (on its held slot's key), and a read-write lock's `SharedLockGuard` (on its read slot) and
//! `ExclusiveLockGuard` (on its gate).
//!
//! Nothing here keeps a service alive: services are read through the program's cell, which the
//! program empties to drop the service; a dropped service's tasks and tokens stay readable.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use leasehold::derived::DerivedKey;
use leasehold::locks::{
    ExclusiveLockGuard, HeldPermit, MultiLockGuard, ReentrantGuard, SharedLockGuard,
};
use leasehold::{
    CancellationToken, FencingToken, HolderId, LeaseKey, LeaseService, LeaseTask, LockGuard,
    PermitTask, ShardedTasks, Tenure, WorkGuard,
};

/// One incarnation of one service: the believer the oracle names.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Owner {
    /// The program slot (service index).
    pub slot: usize,
    /// Which incarnation of the slot (a restart after shutdown or drop is the next).
    pub generation: u32,
    /// Its holder id.
    pub holder: HolderId,
}

impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "service {}#{} ({})",
            self.slot, self.generation, self.holder
        )
    }
}

/// Where a cancellation token came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TokenSource {
    /// `LeaseTaskOptions::on_acquired`.
    OnAcquired,
    /// `LeaseTask::acquired`.
    Acquired,
    /// `LeaseTask::cancellation_token`.
    TaskCancellation,
    /// `LockGuard::cancellation_token`.
    Guard,
    /// `ShardOptions::on_acquired`.
    ShardCallback,
    /// `MultiLockGuard::cancellation_token` (registered for every key of the set).
    MultiLock,
    /// `HeldPermit::cancellation_token`.
    HeldPermit,
    /// `FireContext::cancellation_token` of a `run_once` job.
    Once,
    /// `SharedLockGuard::cancellation_token`: a reader of a read-write lock (registered on its
    /// read slot's key).
    SharedLock,
    /// `ExclusiveLockGuard::cancellation_token`: the writer of a read-write lock (registered on
    /// its gate's key).
    ExclusiveLock,
    /// The cancellation token of an N-holder lease task's slot (`on_acquired`, or
    /// `PermitTask::cancellation_token`), registered on the slot's permit key.
    PermitTask,
}

/// Which signal said "I hold it".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Signal {
    /// `LeaseService::has_lease` (or `LeaseTask::has_lease`).
    HasLease,
    /// `LeaseService::has_hold_lock`.
    HasHoldLock,
    /// `LeaseTask::token` is some.
    TaskToken,
    /// `LockGuard::is_held`.
    GuardIsHeld,
    /// `HeldPermit::is_held`.
    HeldPermitIsHeld,
    /// `PermitTask::has_lease` (on the slot `PermitTask::held_slot` names).
    PermitTaskHasLease,
    /// `PermitTask::held_slot` is some (the slot's key, with its token).
    PermitTaskSlot,
    /// `ShardedTasks::held` lists the name.
    ShardedHeld,
    /// `MultiLockGuard::is_held` (seen for every key of the set).
    MultiIsHeld,
    /// `ReentrantGuard::is_held` (an owner's handle on a lock, `Locks::owned_by`).
    ReentrantIsHeld,
    /// `WorkGuard::is_held` of a piece of work begun under a task (`LeaseTask::begin_work`) and
    /// still running.
    WorkIsHeld,
    /// A tenure's `CancellationToken` is not cancelled.
    Uncancelled(TokenSource),
    /// `Tenure::is_held` of a handle with no signal of its own above (a read-write lock's
    /// reader or writer).
    TenureIsHeld(Handle),
    /// `Tenure::deadline` of a handle is still ahead (read after the deadline).
    Deadline(Handle),
    /// `Tenure::cancellation_token` of a handle, asked for at the sample, is not cancelled.
    TenureUncancelled(Handle),
}

/// Which kind of handle a [`Tenure`] signal was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[allow(missing_docs)] // one variant per `Tenure` implementor, named after it
pub enum Handle {
    LockGuard,
    ReentrantGuard,
    HeldPermit,
    MultiLockGuard,
    LeaseTask,
    PermitTask,
    SharedLockGuard,
    ExclusiveLockGuard,
}

/// One signal believing one key, as read at one sample.
#[derive(Debug, Clone)]
pub struct Sighting {
    /// Who believes.
    pub owner: Owner,
    /// What.
    pub key: LeaseKey,
    /// Through which signal.
    pub signal: Signal,
    /// The tenure, when the signal names it.
    pub token: Option<FencingToken>,
}

/// The program's handle on a service incarnation: emptied to drop the service.
pub type ServiceCell = Mutex<Option<LeaseService>>;
/// The program's handle on a lock guard: emptied when unlocked, dropped or consumed.
pub type GuardCell = Mutex<Option<Arc<LockGuard>>>;
/// The program's handle on a held permit: emptied when released or its handle dropped.
pub type HeldPermitCell = Mutex<Option<Arc<HeldPermit>>>;
/// The program's handle on a multi-lock guard: emptied when unlocked or dropped.
pub type MultiCell = Mutex<Option<Arc<MultiLockGuard>>>;
/// The program's handle on an owner's re-entrant guard: emptied when unlocked or dropped.
pub type ReentrantCell = Mutex<Option<ReentrantGuard>>;
/// The program's handle on a running piece of work: emptied when the work finishes.
pub type WorkCell = Mutex<Option<WorkGuard>>;
/// The program's handle on a read-write lock's reader: emptied when unlocked or dropped.
pub type SharedCell = Mutex<Option<Arc<SharedLockGuard>>>;
/// The program's handle on a read-write lock's writer: emptied when unlocked or dropped.
pub type ExclusiveCell = Mutex<Option<Arc<ExclusiveLockGuard>>>;

/// The signals every [`Tenure`] gives, read from `t` on `key`: its `is_held` (as `held`, when
/// the handle has no signal of its own for it), its deadline still ahead, and its cancellation
/// token (asked for now) not cancelled. Each with the tenure's token.
fn tenure_signals<T: Tenure>(
    t: &T,
    keys: &[LeaseKey],
    o: &Owner,
    handle: Handle,
    held: Option<Signal>,
    f: &mut Seen<'_>,
) {
    let token = t.token();
    let is_held = held.is_some() && t.is_held();
    let deadline = t.deadline();
    let ahead = deadline.is_some_and(|d| d > crate::clock::tokio_now());
    let uncancelled = !t.cancellation_token().is_cancelled();
    for k in keys {
        if let (true, Some(signal)) = (is_held, held) {
            f(o, k, signal, token);
        }
        if ahead {
            f(o, k, Signal::Deadline(handle), token);
        }
        if uncancelled {
            f(o, k, Signal::TenureUncancelled(handle), token);
        }
    }
}

#[derive(Default)]
struct Probes {
    services: Vec<(Owner, Arc<ServiceCell>, Vec<LeaseKey>)>,
    tasks: Vec<(Owner, LeaseTask)>,
    guards: Vec<(Owner, Arc<GuardCell>)>,
    tokens: Vec<(
        Owner,
        LeaseKey,
        Option<FencingToken>,
        CancellationToken,
        TokenSource,
    )>,
    sharded: Vec<(Owner, ShardedTasks)>,
    multis: Vec<(Owner, Arc<MultiCell>)>,
    held_permits: Vec<(Owner, Arc<HeldPermitCell>)>,
    permit_tasks: Vec<(Owner, PermitTask)>,
    works: Vec<(Owner, LeaseKey, Arc<WorkCell>)>,
    reentrant: Vec<(Owner, Arc<ReentrantCell>)>,
    shared: Vec<(Owner, Arc<SharedCell>)>,
    exclusive: Vec<(Owner, Arc<ExclusiveCell>)>,
}

/// The registry of belief signals. Shared by the programs (writers) and the oracle (reader).
#[derive(Default)]
pub struct Beliefs {
    probes: Mutex<Probes>,
}

impl std::fmt::Debug for Beliefs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Beliefs").finish_non_exhaustive()
    }
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Beliefs {
    /// A service incarnation whose `has_lease` / `has_hold_lock` are read for every key of `keys`.
    pub fn service(&self, owner: &Owner, cell: &Arc<ServiceCell>, keys: Vec<LeaseKey>) {
        locked(&self.probes)
            .services
            .push((owner.clone(), Arc::clone(cell), keys));
    }

    /// One more key whose `has_lease` is read on `owner`'s service (a membership lease).
    pub fn service_key(&self, owner: &Owner, key: LeaseKey) {
        let mut probes = locked(&self.probes);
        if let Some((_, _, keys)) = probes.services.iter_mut().find(|(o, _, _)| o == owner)
            && !keys.contains(&key)
        {
            keys.push(key);
        }
    }

    /// The newest incarnation holding as `holder`.
    #[must_use]
    pub fn owner_of(&self, holder: &HolderId) -> Option<Owner> {
        locked(&self.probes)
            .services
            .iter()
            .rev()
            .find(|(o, _, _)| o.holder == *holder)
            .map(|(o, _, _)| o.clone())
    }

    /// A lease task handle (its `has_lease` and `token`).
    pub fn task(&self, owner: &Owner, task: LeaseTask) {
        locked(&self.probes).tasks.push((owner.clone(), task));
    }

    /// A lock guard (its `is_held` and `token`).
    pub fn guard(&self, owner: &Owner, cell: &Arc<GuardCell>) {
        locked(&self.probes)
            .guards
            .push((owner.clone(), Arc::clone(cell)));
    }

    /// A tenure's cancellation token, believing until cancelled.
    pub fn token(
        &self,
        owner: &Owner,
        key: LeaseKey,
        token: Option<FencingToken>,
        cancel: CancellationToken,
        source: TokenSource,
    ) {
        locked(&self.probes)
            .tokens
            .push((owner.clone(), key, token, cancel, source));
    }

    /// A multi-lock guard (its `is_held`, for every key of the set with the key's token).
    pub fn multi(&self, owner: &Owner, cell: &Arc<MultiCell>) {
        locked(&self.probes)
            .multis
            .push((owner.clone(), Arc::clone(cell)));
    }

    /// A held permit's handle (its `is_held` and `token`).
    pub fn held_permit(&self, owner: &Owner, cell: &Arc<HeldPermitCell>) {
        locked(&self.probes)
            .held_permits
            .push((owner.clone(), Arc::clone(cell)));
    }

    /// An N-holder lease task's handle (its `has_lease` and `held_slot`, on the slot's key).
    pub fn permit_task(&self, owner: &Owner, task: PermitTask) {
        locked(&self.probes)
            .permit_tasks
            .push((owner.clone(), task));
    }

    /// A running piece of work under `key` (its `WorkGuard::is_held`, with its token).
    pub fn work(&self, owner: &Owner, key: LeaseKey, cell: &Arc<WorkCell>) {
        locked(&self.probes)
            .works
            .push((owner.clone(), key, Arc::clone(cell)));
    }

    /// An owner's re-entrant guard (its `is_held` and `token`).
    pub fn reentrant(&self, owner: &Owner, cell: &Arc<ReentrantCell>) {
        locked(&self.probes)
            .reentrant
            .push((owner.clone(), Arc::clone(cell)));
    }

    /// A read-write lock's reader (its `Tenure` signals, on its read slot's key).
    pub fn shared(&self, owner: &Owner, cell: &Arc<SharedCell>) {
        locked(&self.probes)
            .shared
            .push((owner.clone(), Arc::clone(cell)));
    }

    /// A read-write lock's writer (its `Tenure` signals, on its gate's key).
    pub fn exclusive(&self, owner: &Owner, cell: &Arc<ExclusiveCell>) {
        locked(&self.probes)
            .exclusive
            .push((owner.clone(), Arc::clone(cell)));
    }

    /// A sharded handle (its `held`).
    pub fn sharded(&self, owner: &Owner, tasks: ShardedTasks) {
        locked(&self.probes).sharded.push((owner.clone(), tasks));
    }

    /// Reads every signal once, in a fixed order (or its exact reverse), and returns those that
    /// believe. Cancelled tokens and emptied guard cells are forgotten.
    pub fn sample(&self, reverse: bool) -> Vec<Sighting> {
        let mut probes = locked(&self.probes);
        probes.tokens.retain(|t| !t.3.is_cancelled());
        probes.guards.retain(|(_, cell)| locked(cell).is_some());
        probes.multis.retain(|(_, cell)| locked(cell).is_some());
        probes
            .held_permits
            .retain(|(_, cell)| locked(cell).is_some());
        probes.works.retain(|(_, _, cell)| locked(cell).is_some());
        probes.reentrant.retain(|(_, cell)| locked(cell).is_some());
        probes.shared.retain(|(_, cell)| locked(cell).is_some());
        probes.exclusive.retain(|(_, cell)| locked(cell).is_some());
        let mut out = Vec::new();
        let mut seen =
            |owner: &Owner, key: &LeaseKey, signal: Signal, token: Option<FencingToken>| {
                out.push(Sighting {
                    owner: owner.clone(),
                    key: key.clone(),
                    signal,
                    token,
                });
            };
        let p = &*probes;
        let steps: [&Step<'_>; 12] = [
            &|f| {
                each(&p.services, reverse, |(o, cell, keys)| {
                    if let Some(s) = locked(cell).as_ref() {
                        for k in ordered(keys, reverse) {
                            if s.has_lease(k.name.as_str()) {
                                f(o, k, Signal::HasLease, None);
                            }
                            if s.has_hold_lock(k.namespace.as_str(), k.name.as_str()) {
                                f(o, k, Signal::HasHoldLock, None);
                            }
                        }
                    }
                })
            },
            &|f| {
                each(&p.tasks, reverse, |(o, t)| {
                    if t.has_lease() {
                        f(o, t.key(), Signal::HasLease, None);
                    }
                    if let Some(token) = t.token() {
                        f(o, t.key(), Signal::TaskToken, Some(token));
                    }
                    let key = std::slice::from_ref(t.key());
                    tenure_signals(t, key, o, Handle::LeaseTask, None, f);
                })
            },
            &|f| {
                each(&p.guards, reverse, |(o, cell)| {
                    if let Some(g) = locked(cell).as_ref() {
                        let (key, held) = (std::slice::from_ref(g.key()), Signal::GuardIsHeld);
                        tenure_signals(&**g, key, o, Handle::LockGuard, Some(held), f);
                    }
                })
            },
            &|f| {
                each(&p.reentrant, reverse, |(o, cell)| {
                    if let Some(g) = locked(cell).as_ref() {
                        let (key, held) = (std::slice::from_ref(g.key()), Signal::ReentrantIsHeld);
                        tenure_signals(g, key, o, Handle::ReentrantGuard, Some(held), f);
                    }
                })
            },
            &|f| {
                each(&p.held_permits, reverse, |(o, cell)| {
                    if let Some(h) = locked(cell).as_ref() {
                        let (key, held) = (std::slice::from_ref(h.key()), Signal::HeldPermitIsHeld);
                        tenure_signals(&**h, key, o, Handle::HeldPermit, Some(held), f);
                    }
                })
            },
            &|f| {
                each(&p.permit_tasks, reverse, |(o, t)| {
                    let slot_key = |slot: u32| DerivedKey::permit(t.key(), slot, t.permits()).ok();
                    if t.has_lease()
                        && let Some((slot, token)) = t.held_slot()
                        && let Some(k) = slot_key(slot)
                    {
                        f(o, &k, Signal::PermitTaskHasLease, Some(token));
                    }
                    if let Some((slot, token)) = t.held_slot()
                        && let Some(k) = slot_key(slot)
                    {
                        f(o, &k, Signal::PermitTaskSlot, Some(token));
                        // The deadline and cancellation token are the slot's: read them while
                        // the same slot is still held, so a sighting names the slot it is of.
                        let mut within = Vec::new();
                        let mut keep =
                            |o: &Owner, k: &LeaseKey, s: Signal, t: Option<FencingToken>| {
                                within.push((o.clone(), k.clone(), s, t));
                            };
                        let key = std::slice::from_ref(&k);
                        tenure_signals(t, key, o, Handle::PermitTask, None, &mut keep);
                        if t.held_slot() == Some((slot, token)) {
                            for (o, k, s, t) in &within {
                                f(o, k, *s, *t);
                            }
                        }
                    }
                })
            },
            &|f| {
                each(&p.tokens, reverse, |(o, k, token, cancel, source)| {
                    if !cancel.is_cancelled() {
                        f(o, k, Signal::Uncancelled(*source), *token);
                    }
                })
            },
            &|f| {
                each(&p.multis, reverse, |(o, cell)| {
                    if let Some(g) = locked(cell).as_ref() {
                        let tokens = g.tokens();
                        if g.is_held() {
                            for (k, t) in ordered(&tokens, reverse) {
                                f(o, k, Signal::MultiIsHeld, Some(*t));
                            }
                        }
                        // The set's deadline and cancellation token believe every key of it.
                        for (k, t) in ordered(&tokens, reverse) {
                            let mut on_key =
                                |o: &Owner, k: &LeaseKey, s: Signal, _: Option<FencingToken>| {
                                    f(o, k, s, Some(*t));
                                };
                            let key = std::slice::from_ref(k);
                            tenure_signals(&**g, key, o, Handle::MultiLockGuard, None, &mut on_key);
                        }
                    }
                })
            },
            &|f| {
                each(&p.shared, reverse, |(o, cell)| {
                    if let Some(g) = locked(cell).as_ref() {
                        let key = std::slice::from_ref(g.guard().key());
                        let held = Signal::TenureIsHeld(Handle::SharedLockGuard);
                        tenure_signals(&**g, key, o, Handle::SharedLockGuard, Some(held), f);
                    }
                })
            },
            &|f| {
                each(&p.exclusive, reverse, |(o, cell)| {
                    if let Some(g) = locked(cell).as_ref() {
                        let key = std::slice::from_ref(g.guard().key());
                        let held = Signal::TenureIsHeld(Handle::ExclusiveLockGuard);
                        tenure_signals(&**g, key, o, Handle::ExclusiveLockGuard, Some(held), f);
                    }
                })
            },
            &|f| {
                each(&p.works, reverse, |(o, k, cell)| {
                    if let Some(w) = locked(cell).as_ref()
                        && w.is_held()
                    {
                        f(o, k, Signal::WorkIsHeld, Some(w.token()));
                    }
                })
            },
            &|f| {
                each(&p.sharded, reverse, |(o, s)| {
                    let held = s.held();
                    for name in ordered(&held, reverse) {
                        let key = LeaseKey::new(s.membership_key().namespace.clone(), name.clone());
                        f(o, &key, Signal::ShardedHeld, None);
                    }
                })
            },
        ];
        for step in ordered(&steps, reverse) {
            step(&mut seen);
        }
        out
    }
}

/// A sighting callback.
type Seen<'a> = dyn FnMut(&Owner, &LeaseKey, Signal, Option<FencingToken>) + 'a;
/// One group of probes, read in order.
type Step<'a> = dyn Fn(&mut Seen<'_>) + 'a;

fn ordered<T>(items: &[T], reverse: bool) -> Box<dyn Iterator<Item = &T> + '_> {
    if reverse {
        Box::new(items.iter().rev())
    } else {
        Box::new(items.iter())
    }
}

fn each<T>(items: &[T], reverse: bool, mut f: impl FnMut(&T)) {
    for item in ordered(items, reverse) {
        f(item);
    }
}
