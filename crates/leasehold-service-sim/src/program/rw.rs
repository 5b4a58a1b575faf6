//! Program steps on read-write locks: `acquire_shared` / `acquire_exclusive`, one attempt or
//! waiting, on the plain lock names, and the end of a held reader or writer (unlock, drop or
//! renew). Each guard's cancellation token is registered with the oracle on its tenure's own
//! key (a reader's read slot, a writer's gate), so `two_believers` and `belief_after_grant`
//! check it as any lock, and [`crate::oracle::rw_exclusion`] checks the lock as a whole.

use leasehold::locks::{ExclusiveLockGuard, SharedLockGuard};
use rand::RngExt;

use std::sync::{Arc, Mutex, PoisonError};

use super::Program;
use crate::beliefs::{ExclusiveCell, SharedCell, TokenSource};

/// A reader or a writer this program holds, in the cell the oracle reads it through.
pub(crate) enum RwHeld {
    Shared(Arc<SharedCell>),
    Exclusive(Arc<ExclusiveCell>),
}

/// A reader or a writer taken out of its cell (which the oracle then forgets).
enum RwGuard {
    Shared(SharedLockGuard),
    Exclusive(ExclusiveLockGuard),
}

impl RwHeld {
    /// The guard, out of its cell (`None` if the cell was emptied).
    fn take(&self) -> Option<RwGuard> {
        match self {
            RwHeld::Shared(c) => Arc::try_unwrap(lock(c).take()?).ok().map(RwGuard::Shared),
            RwHeld::Exclusive(c) => Arc::try_unwrap(lock(c).take()?)
                .ok()
                .map(RwGuard::Exclusive),
        }
    }

    fn describe(&self) -> String {
        match self {
            RwHeld::Shared(c) => lock(c)
                .as_ref()
                .map(|g| format!("reader of {} token {}", g.key(), g.token()))
                .unwrap_or_default(),
            RwHeld::Exclusive(c) => lock(c)
                .as_ref()
                .map(|g| format!("writer of {} token {}", g.key(), g.token()))
                .unwrap_or_default(),
        }
    }
}

impl Drop for RwHeld {
    /// The program's reader or writer dropped: its guard is dropped (the oracle only reads it).
    fn drop(&mut self) {
        drop(self.take());
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Program {
    pub(super) async fn shared_lock(&mut self) {
        let Some(service) = self.service() else {
            return;
        };
        let name = self.pick_name();
        let ttl = self.ctx.term().mul_f64(self.rng.random_range(0.5..1.5));
        let ns = self.ctx.world.namespace.clone();
        let wait = self
            .rng
            .random_bool(0.5)
            .then(|| self.ctx.term().mul_f64(self.rng.random_range(0.0..1.0)));
        // Reads of the gate before and after the slot's grant, a list, one grant (or a few on
        // collisions) and a list again, each bounded by the timeout; a waiting reader returns
        // at the end of its wait.
        let bound = match wait {
            Some(w) => w + self.ctx.quick(),
            None => self.ctx.quick() * 8,
        };
        let f = async move {
            let locks = service.locks();
            match wait {
                Some(w) => {
                    locks
                        .read_write()
                        .acquire_shared_within(&ns, &name, Some(w), ttl)
                        .await
                }
                None => locks.read_write().acquire_shared(&ns, &name, ttl).await,
            }
        };
        let what = format!("acquire_shared wait {wait:.0?} ttl {ttl:.0?}");
        let out = self
            .drive(&what, bound, f, |r| match r {
                Ok(Some(g)) => format!("reader {} token {}", g.guard().key(), g.token()),
                other => format!("{:?}", other.as_ref().map(|_| ())),
            })
            .await;
        if let Some(Ok(Some(guard))) = out
            && let Some(owner) = self.owner.clone()
        {
            self.ctx.beliefs.token(
                &owner,
                guard.guard().key().clone(),
                Some(guard.token()),
                guard.cancellation_token(),
                TokenSource::SharedLock,
            );
            let cell = Arc::new(Mutex::new(Some(Arc::new(guard))));
            self.ctx.beliefs.shared(&owner, &cell);
            self.rw.push(RwHeld::Shared(cell));
        }
    }

    pub(super) async fn exclusive_lock(&mut self) {
        let Some(service) = self.service() else {
            return;
        };
        let name = self.pick_name();
        // A writer waiting for readers holds its gate without believing anything: its wait
        // plus its ttl (and a renewal applied up to a timeout late) stays under the leak
        // check's two terms.
        let ttl = self.ctx.term().mul_f64(self.rng.random_range(1.0..1.4));
        let ns = self.ctx.world.namespace.clone();
        let wait = self
            .rng
            .random_bool(0.6)
            .then(|| self.ctx.term().mul_f64(self.rng.random_range(0.0..0.25)));
        // The gate's attempt, a list, a release: each bounded by the timeout; a waiting writer
        // returns at the end of its wait.
        let bound = match wait {
            Some(w) => w + self.ctx.quick(),
            None => self.ctx.quick() * 3,
        };
        let f = async move {
            let locks = service.locks();
            match wait {
                Some(w) => {
                    locks
                        .read_write()
                        .acquire_exclusive_within(&ns, &name, Some(w), ttl)
                        .await
                }
                None => locks.read_write().acquire_exclusive(&ns, &name, ttl).await,
            }
        };
        let what = format!("acquire_exclusive wait {wait:.0?} ttl {ttl:.0?}");
        let out = self
            .drive(&what, bound, f, |r| match r {
                Ok(Some(g)) => format!("writer {} token {}", g.guard().key(), g.token()),
                other => format!("{:?}", other.as_ref().map(|_| ())),
            })
            .await;
        if let Some(Ok(Some(guard))) = out
            && let Some(owner) = self.owner.clone()
        {
            self.ctx.beliefs.token(
                &owner,
                guard.guard().key().clone(),
                Some(guard.token()),
                guard.cancellation_token(),
                TokenSource::ExclusiveLock,
            );
            let cell = Arc::new(Mutex::new(Some(Arc::new(guard))));
            self.ctx.beliefs.exclusive(&owner, &cell);
            self.rw.push(RwHeld::Exclusive(cell));
        }
    }

    /// Unlocks, drops or renews a random held reader or writer.
    pub(super) async fn rw_end(&mut self) {
        if self.rw.is_empty() {
            return;
        }
        let i = self.rng.random_range(0..self.rw.len());
        let held = self.rw.swap_remove(i);
        let quick = self.ctx.quick();
        match self.rng.random_range(0..3) {
            0 => {
                let what = format!("unlock {}", held.describe());
                let Some(guard) = held.take() else {
                    return;
                };
                let f = async move {
                    match guard {
                        RwGuard::Shared(g) => g.unlock().await,
                        RwGuard::Exclusive(g) => g.unlock().await,
                    }
                };
                self.drive(&what, quick, f, |r| format!("{r:?}")).await;
            }
            1 => {
                self.note(format!("drop {}", held.describe()));
                drop(held.take());
            }
            _ => {
                let what = format!("renew {}", held.describe());
                let (shared, exclusive) = match &held {
                    RwHeld::Shared(c) => (lock(c).clone(), None),
                    RwHeld::Exclusive(c) => (None, lock(c).clone()),
                };
                let renewed = async move {
                    match (shared, exclusive) {
                        (Some(g), _) => g.renew().await,
                        (_, Some(g)) => g.renew().await,
                        (None, None) => Ok(()),
                    }
                };
                self.drive(&what, quick, renewed, |r| format!("{r:?}"))
                    .await;
                self.rw.push(held);
            }
        }
    }
}
