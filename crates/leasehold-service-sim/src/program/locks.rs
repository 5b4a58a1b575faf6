//! Program steps on locks: `lock`, `try_locker`, guards (unlock, drop, renew,
//! `lock_at_least_for`, `begin_fenced`), `unlock` by name, `hold_lock`, and re-entry by an
//! owner (`owned_by`: acquire, then unlock or drop one of the owner's guards).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use leasehold::LockGuard;
use rand::RngExt;

use super::Program;
use crate::beliefs::{GuardCell, Owner, ReentrantCell, TokenSource};

/// The owners a program takes locks for: few, so an owner often re-enters its own lock.
const OWNERS: [&str; 2] = ["job-a", "job-b"];

impl Program {
    /// A ttl between one and two terms.
    pub(super) fn ttl(&mut self) -> Duration {
        self.ctx.term().mul_f64(self.rng.random_range(1.0..2.0))
    }

    /// Keeps a new guard: its cell is read by the oracle, its cancellation token registered.
    pub(super) fn keep_guard(&mut self, guard: LockGuard) {
        let Some(owner) = self.owner.clone() else {
            return;
        };
        let cancel = guard.cancellation_token();
        self.ctx.beliefs.token(
            &owner,
            guard.key().clone(),
            Some(guard.token()),
            cancel,
            TokenSource::Guard,
        );
        let cell: Arc<GuardCell> = Arc::new(Mutex::new(Some(Arc::new(guard))));
        self.ctx.beliefs.guard(&owner, &cell);
        self.guards.push((owner, cell));
    }

    /// A random live guard's cell index.
    fn pick_guard(&mut self) -> Option<usize> {
        self.guards
            .retain(|(_, c)| c.lock().unwrap_or_else(PoisonError::into_inner).is_some());
        if self.guards.is_empty() {
            return None;
        }
        Some(self.rng.random_range(0..self.guards.len()))
    }

    /// Takes a guard out of its cell (the oracle stops reading it as a guard; its token stays
    /// registered).
    fn take_guard(&mut self) -> Option<(Owner, LockGuard)> {
        let i = self.pick_guard()?;
        let (owner, cell) = self.guards.remove(i);
        let taken = cell.lock().unwrap_or_else(PoisonError::into_inner).take()?;
        Arc::try_unwrap(taken).ok().map(|g| (owner, g))
    }

    pub(super) async fn lock(&mut self) {
        let Some(service) = self.service() else {
            return;
        };
        let (name, ttl) = (self.pick_name(), self.ttl());
        let ns = self.ctx.world.namespace.clone();
        let quick = self.ctx.quick();
        let f = service.lock(&ns, &name, ttl);
        let out = self
            .drive(&format!("lock {name} ttl {ttl:.0?}"), quick, f, describe)
            .await;
        if let Some(Ok(Some(guard))) = out {
            self.keep_guard(guard);
        }
    }

    pub(super) async fn try_locker(&mut self) {
        let Some(service) = self.service() else {
            return;
        };
        let (name, ttl) = (self.pick_name(), self.ttl());
        let wait = self.ctx.term().mul_f64(self.rng.random_range(0.0..2.0));
        let ns = self.ctx.world.namespace.clone();
        let bound = wait + self.ctx.quick();
        let f = service.try_locker(&ns, &name, Some(wait), ttl);
        let what = format!("try_locker {name} wait {wait:.0?} ttl {ttl:.0?}");
        let out = self.drive(&what, bound, f, describe).await;
        if let Some(Ok(Some(guard))) = out {
            self.keep_guard(guard);
        }
    }

    pub(super) async fn guard_unlock(&mut self) {
        let Some((_, guard)) = self.take_guard() else {
            return;
        };
        let what = format!("guard.unlock {} token {}", guard.key(), guard.token());
        let quick = self.ctx.quick();
        self.drive(&what, quick, guard.unlock(), |r| format!("{r:?}"))
            .await;
    }

    pub(super) fn guard_drop(&mut self) {
        if let Some((_, guard)) = self.take_guard() {
            self.note(format!(
                "drop guard {} token {}",
                guard.key(),
                guard.token()
            ));
            drop(guard);
        }
    }

    pub(super) async fn guard_renew(&mut self) {
        let Some(i) = self.pick_guard() else {
            return;
        };
        let guard = self.guards[i]
            .1
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let Some(guard) = guard else {
            return;
        };
        let what = format!("guard.renew {} token {}", guard.key(), guard.token());
        let quick = self.ctx.quick();
        self.drive(&what, quick, guard.renew(), |r| format!("{r:?}"))
            .await;
    }

    /// `lock_at_least_for` on a guard (then usually unlocked soon by a later step).
    pub(super) fn guard_at_least(&mut self) {
        let Some((owner, guard)) = self.take_guard() else {
            return;
        };
        let min = self.ctx.term().mul_f64(self.rng.random_range(0.1..0.9));
        self.note(format!(
            "lock_at_least_for {min:.0?} on {} token {}",
            guard.key(),
            guard.token()
        ));
        let guard = guard.lock_at_least_for(min);
        let cell: Arc<GuardCell> = Arc::new(Mutex::new(Some(Arc::new(guard))));
        self.ctx.beliefs.guard(&owner, &cell);
        self.guards.push((owner, cell));
    }

    /// `begin_fenced` on a guard (SQL stores only), held a few ms, then committed.
    pub(super) async fn guard_fenced(&mut self) {
        if !self.ctx.world.spec.backend.is_sql() {
            return;
        }
        let Some(i) = self.pick_guard() else {
            return;
        };
        let guard = self.guards[i]
            .1
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let Some(guard) = guard else {
            return;
        };
        let what = format!("guard.begin_fenced {} token {}", guard.key(), guard.token());
        let quick = self.ctx.quick();
        let out = self
            .drive(&what, quick, guard.begin_fenced(), |r| {
                format!("{:?}", r.as_ref().map(Option::is_some))
            })
            .await;
        drop(guard);
        if let Some(Ok(Some(txn))) = out {
            let hold = Duration::from_millis(self.rng.random_range(0..30));
            tokio::time::sleep(hold).await;
            self.drive("fenced commit", quick, txn.commit(), |r| format!("{r:?}"))
                .await;
        }
    }

    pub(super) async fn unlock_by_name(&mut self) {
        let Some(service) = self.service() else {
            return;
        };
        let name = match self.holds.iter().next().cloned() {
            Some(h) if self.rng.random_bool(0.5) => h,
            _ => self.pick_name(),
        };
        let ns = self.ctx.world.namespace.clone();
        let bound = self.ctx.settled();
        let f = service.unlock(&ns, &name);
        let out = self
            .drive(&format!("unlock {name}"), bound, f, |r| format!("{r:?}"))
            .await;
        if out.is_some() {
            self.holds.remove(&name);
        }
    }

    pub(super) async fn hold_lock(&mut self) {
        let Some(service) = self.service() else {
            return;
        };
        let (name, ttl) = (self.pick_name(), self.ttl());
        let ns = self.ctx.world.namespace.clone();
        // One attempt, then up to the ttl for the background task's grant.
        let bound = ttl + self.ctx.timeout() + self.ctx.quick();
        let f = service.hold_lock(&ns, &name, ttl);
        let out = self
            .drive(&format!("hold_lock {name} ttl {ttl:.0?}"), bound, f, |r| {
                format!("{r:?}")
            })
            .await;
        if let Some(Ok(Some(_))) = out {
            self.holds.insert(name);
        }
    }
}

impl Program {
    /// Takes a lock for one of two owners, often re-entering one the owner holds (a waiting or
    /// a single attempt).
    pub(super) async fn reenter(&mut self) {
        let Some(service) = self.service() else {
            return;
        };
        let Some(owner) = self.owner.clone() else {
            return;
        };
        let who = OWNERS[self.rng.random_range(0..OWNERS.len())];
        let (name, ttl) = (self.pick_name(), self.ttl());
        let ns = self.ctx.world.namespace.clone();
        let locks = service.locks();
        let Ok(owned) = locks.owned_by(who) else {
            return;
        };
        let out = if self.rng.random_bool(0.5) {
            let quick = self.ctx.quick();
            let what = format!("owned_by({who}).acquire {name} ttl {ttl:.0?}");
            self.drive(
                &what,
                quick,
                owned.acquire(&ns, &name, ttl),
                describe_reentrant,
            )
            .await
        } else {
            let wait = self.ctx.term().mul_f64(self.rng.random_range(0.0..1.0));
            let bound = wait + self.ctx.quick();
            let what =
                format!("owned_by({who}).acquire_within {name} wait {wait:.0?} ttl {ttl:.0?}");
            let f = owned.acquire_within(&ns, &name, Some(wait), ttl);
            self.drive(&what, bound, f, describe_reentrant).await
        };
        if let Some(Ok(Some(guard))) = out {
            self.ctx.beliefs.token(
                &owner,
                guard.key().clone(),
                Some(guard.token()),
                guard.cancellation_token(),
                TokenSource::Guard,
            );
            let cell: Arc<ReentrantCell> = Arc::new(Mutex::new(Some(guard)));
            self.ctx.beliefs.reentrant(&owner, &cell);
            self.reentrant.push((owner, cell));
        }
    }

    /// Gives one of an owner's guards up: unlocked (awaited) or dropped.
    pub(super) async fn reentrant_end(&mut self) {
        self.reentrant
            .retain(|(_, c)| c.lock().unwrap_or_else(PoisonError::into_inner).is_some());
        if self.reentrant.is_empty() {
            return;
        }
        let i = self.rng.random_range(0..self.reentrant.len());
        let (_, cell) = self.reentrant.remove(i);
        let Some(guard) = cell.lock().unwrap_or_else(PoisonError::into_inner).take() else {
            return;
        };
        let what = format!(
            "{} guard of {} on {} token {} (depth {})",
            if self.rng.random_bool(0.5) {
                "unlock"
            } else {
                "drop"
            },
            guard.owner(),
            guard.key(),
            guard.token(),
            guard.depth()
        );
        if what.starts_with("unlock") {
            let quick = self.ctx.quick();
            self.drive(&what, quick, guard.unlock(), |r| format!("{r:?}"))
                .await;
        } else {
            self.note(what);
            drop(guard);
        }
    }
}

fn describe_reentrant(r: &leasehold::Result<Option<leasehold::locks::ReentrantGuard>>) -> String {
    match r {
        Ok(Some(g)) => format!("token {} depth {}", g.token(), g.depth()),
        Ok(None) => "not acquired".to_owned(),
        Err(e) => format!("error: {e}"),
    }
}

pub(super) fn describe(r: &leasehold::Result<Option<LockGuard>>) -> String {
    match r {
        Ok(Some(g)) => format!("token {}", g.token()),
        Ok(None) => "not acquired".to_owned(),
        Err(e) => format!("error: {e}"),
    }
}
