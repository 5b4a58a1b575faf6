//! The seeded random program of one service slot: every public API of `LeaseService`, with
//! futures dropped at random points, callbacks that panic, shutdowns, drops and restarts.
//!
//! Each slot runs a sequence of service incarnations (a restart after `shutdown` or a drop is
//! the next generation, with a new holder id, or now and then the same one once the old
//! incarnation is gone). Every belief signal a step creates is registered with the oracle
//! ([`crate::beliefs`]).

mod ask;
mod candidate;
mod drive;
mod fair;
mod locks;
mod once;
mod permit_tasks;
mod rw;
mod sets;
mod tasks;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use leasehold::{LeaseKey, LeaseService, LeaseTask, ShardedTasks};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use crate::beliefs::{
    Beliefs, GuardCell, HeldPermitCell, MultiCell, Owner, ReentrantCell, ServiceCell,
};
use crate::fault::{FaultDice, FaultPlan};
use crate::journal::Journal;
use crate::oracle::Oracle;
use crate::oracle::call_bounds::CALL_SLACK;
use crate::spec::OpWeights;
use crate::world::World;

/// What every program of a run shares.
pub(crate) struct Ctx {
    pub(crate) world: World,
    pub(crate) beliefs: Arc<Beliefs>,
    pub(crate) oracle: Arc<Oracle>,
    pub(crate) journal: Arc<Journal>,
    pub(crate) clock: crate::SimClock,
    pub(crate) plan: FaultPlan,
    /// Names of lease tasks, locks and holds (some shared with the sharded names).
    pub(crate) keys: Vec<String>,
    /// The names every host shards.
    pub(crate) shard_names: Vec<String>,
    /// Every fault dice handed out, to turn them off at the end.
    pub(crate) dice: Mutex<Vec<Arc<FaultDice>>>,
}

impl Ctx {
    pub(crate) fn term(&self) -> Duration {
        self.world.config.term()
    }

    pub(crate) fn timeout(&self) -> Duration {
        self.world.config.request_timeout()
    }

    /// One store round trip plus slack.
    pub(crate) fn quick(&self) -> Duration {
        self.timeout() + CALL_SLACK
    }

    /// Documented to wait for a settlement (at the local deadline at the latest).
    pub(crate) fn settled(&self) -> Duration {
        self.term() + 2 * self.timeout() + CALL_SLACK
    }

    pub(crate) fn key(&self, name: &str) -> Option<LeaseKey> {
        LeaseKey::parse(&self.world.namespace, name).ok()
    }

    /// The longest term or ttl a program uses (for the leak check).
    pub(crate) fn max_term(&self) -> Duration {
        self.term() * 2
    }
}

/// The program of one slot.
pub(crate) struct Program {
    ctx: Arc<Ctx>,
    slot: usize,
    rng: StdRng,
    generation: u32,
    owner: Option<Owner>,
    cell: Arc<ServiceCell>,
    tasks: BTreeMap<String, LeaseTask>,
    /// Lock guards, with the incarnation that took them (a guard may outlive it).
    guards: Vec<(Owner, Arc<GuardCell>)>,
    /// Multi-lock guards, likewise.
    multis: Vec<(Owner, Arc<MultiCell>)>,
    /// Owners' re-entrant guards (`Locks::owned_by`), likewise.
    reentrant: Vec<(Owner, Arc<ReentrantCell>)>,
    /// Held permits' handles, likewise.
    held_permits: Vec<(Owner, Arc<HeldPermitCell>)>,
    /// Read-write lock guards (readers and writers), likewise.
    rw: Vec<rw::RwHeld>,
    holds: BTreeSet<String>,
    sharded: Option<ShardedTasks>,
    /// The last holder id and whether its incarnation is fully gone (so it may be reused).
    last_holder: Option<(String, bool)>,
}

#[derive(Debug, Clone, Copy)]
enum Op {
    StartLeaseTask,
    StopLeaseTask,
    ObserveTask,
    HandOver,
    YieldLease,
    AskRelease,
    Candidate,
    Lock,
    TryLocker,
    GuardUnlock,
    GuardDrop,
    GuardRenew,
    GuardAtLeast,
    GuardFenced,
    UnlockByName,
    HoldLock,
    Permit,
    HoldPermit,
    HeldPermitEnd,
    StartPermitTask,
    StopPermitTask,
    RunOnce,
    SharedLock,
    ExclusiveLock,
    RwEnd,
    LockAll,
    MultiEnd,
    Reenter,
    ReentrantEnd,
    FairLock,
    Observe,
    StartSharded,
    ShardPeek,
    Leave,
    Read,
    Shutdown,
    DropService,
    Pause,
}

fn menu(w: &OpWeights) -> [(Op, u32); 38] {
    [
        (Op::StartLeaseTask, w.start_lease_task),
        (Op::StopLeaseTask, w.stop_lease_task),
        (Op::ObserveTask, w.observe_task),
        (Op::HandOver, w.hand_over),
        (Op::YieldLease, w.yield_lease),
        (Op::AskRelease, w.ask_release),
        (Op::Candidate, w.candidate),
        (Op::Lock, w.lock),
        (Op::TryLocker, w.try_locker),
        (Op::GuardUnlock, w.guard_unlock),
        (Op::GuardDrop, w.guard_drop),
        (Op::GuardRenew, w.guard_renew),
        (Op::GuardAtLeast, w.guard_at_least),
        (Op::GuardFenced, w.guard_fenced),
        (Op::UnlockByName, w.unlock_by_name),
        (Op::HoldLock, w.hold_lock),
        (Op::Permit, w.permit),
        (Op::HoldPermit, w.hold_permit),
        (Op::HeldPermitEnd, w.held_permit_end),
        (Op::StartPermitTask, w.start_permit_task),
        (Op::StopPermitTask, w.stop_permit_task),
        (Op::RunOnce, w.run_once),
        (Op::SharedLock, w.shared_lock),
        (Op::ExclusiveLock, w.exclusive_lock),
        (Op::RwEnd, w.rw_end),
        (Op::LockAll, w.lock_all),
        (Op::MultiEnd, w.multi_end),
        (Op::Reenter, w.reenter),
        (Op::ReentrantEnd, w.reentrant_end),
        (Op::FairLock, w.fair_lock),
        (Op::Observe, w.observe),
        (Op::StartSharded, w.start_sharded),
        (Op::ShardPeek, w.shard_peek),
        (Op::Leave, w.leave),
        (Op::Read, w.read),
        (Op::Shutdown, w.shutdown),
        (Op::DropService, w.drop_service),
        (Op::Pause, w.pause),
    ]
}

impl Program {
    pub(crate) fn new(ctx: Arc<Ctx>, slot: usize) -> Self {
        let seed = ctx.world.spec.seed;
        Self {
            rng: StdRng::seed_from_u64(
                seed ^ (slot as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15),
            ),
            ctx,
            slot,
            generation: 0,
            owner: None,
            cell: Arc::new(Mutex::new(None)),
            tasks: BTreeMap::new(),
            guards: Vec::new(),
            multis: Vec::new(),
            reentrant: Vec::new(),
            held_permits: Vec::new(),
            rw: Vec::new(),
            holds: BTreeSet::new(),
            sharded: None,
            last_holder: None,
        }
    }

    fn note(&self, step: impl Into<String>) {
        self.ctx.journal.note(self.slot, step);
    }

    fn service(&self) -> Option<LeaseService> {
        self.cell
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn pick_name(&mut self) -> String {
        let i = self.rng.random_range(0..self.ctx.keys.len());
        self.ctx.keys[i].clone()
    }

    /// Runs steps until `until`; the last incarnation is left running for the wind-down.
    pub(crate) async fn run(mut self, until: Instant) -> Self {
        let menu = menu(&self.ctx.world.spec.weights);
        let total: u32 = menu.iter().map(|(_, w)| w).sum();
        for _ in 0..100_000 {
            if self.ctx.clock.instant() >= until || total == 0 {
                break;
            }
            if self.owner.is_none() && !self.start_service().await {
                tokio::time::sleep(self.ctx.timeout()).await;
                continue;
            }
            let mut x = self.rng.random_range(0..total);
            let op = menu
                .iter()
                .find(|(_, w)| {
                    let hit = x < *w;
                    x = x.saturating_sub(*w);
                    hit
                })
                .map_or(Op::Pause, |(op, _)| *op);
            self.step(op).await;
            let pause = self.rng.random_range(0..20);
            tokio::time::sleep(Duration::from_millis(pause)).await;
        }
        self
    }

    async fn step(&mut self, op: Op) {
        match op {
            Op::StartLeaseTask => self.start_lease_task().await,
            Op::StopLeaseTask => self.stop_lease_task().await,
            Op::ObserveTask => self.observe_task().await,
            Op::HandOver => self.hand_over(false).await,
            Op::YieldLease => self.hand_over(true).await,
            Op::AskRelease => self.ask_release().await,
            Op::Candidate => self.candidate_step().await,
            Op::Lock => self.lock().await,
            Op::TryLocker => self.try_locker().await,
            Op::GuardUnlock => self.guard_unlock().await,
            Op::GuardDrop => self.guard_drop(),
            Op::GuardRenew => self.guard_renew().await,
            Op::GuardAtLeast => self.guard_at_least(),
            Op::GuardFenced => self.guard_fenced().await,
            Op::UnlockByName => self.unlock_by_name().await,
            Op::HoldLock => self.hold_lock().await,
            Op::Permit => self.permit().await,
            Op::HoldPermit => self.hold_permit().await,
            Op::HeldPermitEnd => self.held_permit_end().await,
            Op::StartPermitTask => self.start_permit_task().await,
            Op::StopPermitTask => self.stop_permit_task().await,
            Op::RunOnce => self.run_once().await,
            Op::SharedLock => self.shared_lock().await,
            Op::ExclusiveLock => self.exclusive_lock().await,
            Op::RwEnd => self.rw_end().await,
            Op::LockAll => self.lock_all().await,
            Op::MultiEnd => self.multi_end().await,
            Op::Reenter => self.reenter().await,
            Op::ReentrantEnd => self.reentrant_end().await,
            Op::FairLock => self.fair_lock().await,
            Op::Observe => self.observe().await,
            Op::StartSharded => self.start_sharded().await,
            Op::ShardPeek => self.shard_peek(),
            Op::Leave => self.leave().await,
            Op::Read => self.read().await,
            Op::Shutdown => self.shutdown().await,
            Op::DropService => self.drop_service(),
            Op::Pause => {
                let ms = self
                    .rng
                    .random_range(0..self.ctx.term().as_millis().max(1) as u64);
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
        }
    }

    /// Starts the next incarnation of this slot; false if it could not be built.
    async fn start_service(&mut self) -> bool {
        self.generation += 1;
        let holder = match &self.last_holder {
            Some((h, true)) if self.rng.random_bool(0.3) => h.clone(),
            _ => format!("s{}g{}", self.slot, self.generation),
        };
        let seed = self.ctx.world.spec.seed;
        let dice_seed = seed ^ ((self.slot as u64) << 32 | u64::from(self.generation));
        let dice = Arc::new(FaultDice::new(dice_seed, self.ctx.plan.clone()));
        self.ctx
            .dice
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Arc::clone(&dice));
        let built = self.ctx.world.build(&holder, dice).await;
        let service = match built {
            Ok(s) => s,
            Err(e) => {
                self.note(format!("build {holder} failed: {e}"));
                return false;
            }
        };
        let owner = Owner {
            slot: self.slot,
            generation: self.generation,
            holder: service.holder().clone(),
        };
        self.cell = Arc::new(Mutex::new(Some(service)));
        let mut keys: Vec<LeaseKey> = Vec::new();
        // This host's membership lease (`leasehold.members/{group}/{holder}`), read from the
        // start: a failed `start_sharded` may leave it running.
        let membership = format!(
            "leasehold.members/{}/{}",
            leasehold::limits::DEFAULT_SHARD_GROUP,
            owner.holder
        );
        for name in self
            .ctx
            .keys
            .iter()
            .chain(&self.ctx.shard_names)
            .chain([&membership])
        {
            if let Some(k) = self.ctx.key(name)
                && !keys.contains(&k)
            {
                keys.push(k);
            }
        }
        if self.ctx.world.spec.weights.candidate > 0 {
            // A candidate task's row, a hand-over's marker and a candidate's ask are believed
            // through has_lease while their service lives.
            use leasehold::derived::DerivedKey;
            for name in &self.ctx.keys {
                let Some(base) = self.ctx.key(name) else {
                    continue;
                };
                keys.extend(
                    [
                        DerivedKey::candidacy(&base, &owner.holder),
                        DerivedKey::successor(&base),
                        DerivedKey::ask(&base),
                    ]
                    .into_iter()
                    .flatten(),
                );
            }
        }
        self.ctx.beliefs.service(&owner, &self.cell, keys);
        self.note(format!("started {owner}"));
        self.owner = Some(owner);
        self.last_holder = Some((holder, false));
        true
    }

    /// Forgets the incarnation's handles (dropping them), after a shutdown or to drop it.
    /// With `keep_guards`, its lock guards stay (as a user's would after a shutdown): they must
    /// say "not held" by themselves.
    fn forget_incarnation(&mut self, keep_guards: bool) -> Option<LeaseService> {
        let service = self
            .cell
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if !keep_guards {
            for (_, g) in self.guards.drain(..) {
                drop(g.lock().unwrap_or_else(PoisonError::into_inner).take());
            }
            for (_, m) in self.multis.drain(..) {
                drop(m.lock().unwrap_or_else(PoisonError::into_inner).take());
            }
            for (_, r) in self.reentrant.drain(..) {
                drop(r.lock().unwrap_or_else(PoisonError::into_inner).take());
            }
            for (_, p) in self.held_permits.drain(..) {
                drop(p.lock().unwrap_or_else(PoisonError::into_inner).take());
            }
            self.rw.clear();
        }
        self.tasks.clear();
        self.holds.clear();
        self.sharded = None;
        self.owner = None;
        service
    }

    async fn shutdown(&mut self) {
        let Some(service) = self.service() else {
            return;
        };
        let bound = self.ctx.timeout() * 2 + CALL_SLACK;
        let out = self
            .drive("shutdown", bound, service.shutdown(), |r| format!("{r:?}"))
            .await;
        drop(service);
        // A shutdown that returned stopped the engine: its guards stay, as a user's would. One
        // dropped part-way leaves the engine running until the last clone is dropped: drop
        // the guards too, so it is (the oracle no longer reads a forgotten service).
        drop(self.forget_incarnation(out.is_some()));
        if let Some((_, gone)) = &mut self.last_holder {
            *gone = matches!(out, Some(Ok(_)));
        }
    }

    fn drop_service(&mut self) {
        let service = self.forget_incarnation(false);
        self.note("dropped the service (no shutdown)");
        drop(service);
        // Its engine stops in the background: do not reuse its holder id.
    }

    async fn read(&mut self) {
        let Some(service) = self.service() else {
            return;
        };
        let name = self.pick_name();
        let ns = self.ctx.world.namespace.clone();
        let quick = self.ctx.quick();
        match self.rng.random_range(0..5) {
            4 => {
                let every = self.ctx.term();
                let f = async move {
                    let schedule = leasehold::jobs::Schedule::every(every)?;
                    service.jobs().next_fire(&schedule).await
                };
                self.drive("next_fire", quick, f, |r| format!("{r:?}"))
                    .await;
            }
            0 => {
                let f = service.current_holder(&name);
                self.drive(&format!("current_holder {name}"), quick, f, |r| {
                    format!(
                        "{:?}",
                        r.as_ref().map(|o| o.as_ref().map(|r| (&r.holder, r.token)))
                    )
                })
                .await;
            }
            1 => {
                let f = service.db_now();
                self.drive("db_now", quick, f, |r| format!("{r:?}")).await;
            }
            2 => {
                let f = service.tasks().list();
                self.drive("lease_tasks", quick, f, |r| format!("{r:?}"))
                    .await;
            }
            _ => {
                let f = service.query_locked_instance_by_name_prefix(&ns, "k");
                self.drive("query_locked_instance_by_name_prefix", quick, f, |r| {
                    format!("{:?}", r.as_ref().map(Vec::len))
                })
                .await;
            }
        }
    }

    /// `observe` of a name (polling every quarter term, reads bounded by the request
    /// timeout): its first observation (the state now) within a read, then the next change if
    /// one comes within a random part of a term (changes have no bound: they come when they
    /// come); then the observer is dropped.
    async fn observe(&mut self) {
        let Some(service) = self.service() else {
            return;
        };
        let name = self.pick_name();
        let poll = self.ctx.term() / 4;
        let options = leasehold::elections::ObserveOptions::new()
            .poll(poll)
            .read_timeout(self.ctx.timeout());
        // The first read, or a failed read answered as unreachable at its bound.
        let bound = self.ctx.quick() * 2;
        let f = async move {
            let mut observer = service.elections().observe_with(&name, options).await?;
            let first = observer.next().await;
            Ok::<_, leasehold::Error>((observer, first))
        };
        let out = self
            .drive("observe", bound, f, |r| {
                format!("{:?}", r.as_ref().map(|(_, first)| first))
            })
            .await;
        let Some(Ok((mut observer, _))) = out else {
            return;
        };
        let wait = self.ctx.term().mul_f64(self.rng.random_range(0.1..1.0));
        let next = async move { observer.next().await };
        let mode = drive::DropMode::Timeout(wait);
        let no_bound = Duration::from_secs(3600);
        self.drive_as(mode, "observe: the next change", no_bound, next, |r| {
            format!("{r:?}")
        })
        .await;
    }

    /// A look at the sharded handle, if this incarnation has one.
    fn shard_peek(&mut self) {
        let Some(sharded) = self.sharded.clone() else {
            return;
        };
        let what = match self.rng.random_range(0..6) {
            0 => format!("members {:?}", sharded.members()),
            1 => format!("assigned {:?}", sharded.assigned()),
            2 => format!("held {:?}", sharded.held()),
            3 => {
                let name =
                    &self.ctx.shard_names[self.rng.random_range(0..self.ctx.shard_names.len())];
                format!("task {name}: {:?}", sharded.task(name).map(|t| t.token()))
            }
            4 => {
                sharded.refresh();
                "refresh".to_owned()
            }
            _ => {
                sharded.set_names(self.ctx.shard_names.clone());
                "set_names (the same names)".to_owned()
            }
        };
        self.note(what);
    }

    /// Shuts the last incarnation down at the end of the run (faults are off by then); its
    /// guards are given back, to be dropped after a last stretch of sampling.
    pub(crate) async fn finish(mut self) -> Vec<(Owner, Arc<GuardCell>)> {
        if let Some(service) = self.service() {
            let bound = self.ctx.timeout() * 2 + CALL_SLACK;
            self.drive_as(
                drive::DropMode::Complete,
                "final shutdown",
                bound,
                service.shutdown(),
                |r| format!("{r:?}"),
            )
            .await;
        }
        drop(self.forget_incarnation(true));
        std::mem::take(&mut self.guards)
    }
}
