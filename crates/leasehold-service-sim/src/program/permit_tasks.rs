//! Program steps on N-holder lease tasks: `start_lease_task_with_permits` of one task name with
//! fewer permits than services (so they contend), whose `on_acquired` registers the slot's
//! cancellation token on the slot's permit key and, one time in ten, panics on its first call;
//! and `stop_permit_task`. The handle's `has_lease` and `held_slot` are sampled
//! ([`crate::beliefs`]), so `two_believers`, `belief_after_grant` and `permits` check every
//! slot and the task as a semaphore.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use leasehold::{LeaseKey, LeaseTaskOptions, PermitTask};
use rand::RngExt;

use super::Program;
use crate::beliefs::TokenSource;
use crate::oracle::panics::INTENDED_PANIC;

/// The N-holder task every program runs, and its permits (fewer than the services).
pub(crate) const PERMIT_TASK: &str = "ntask";
pub(crate) const TASK_PERMITS: u32 = 2;

/// The permit key of `task`'s slot `slot`.
fn slot_key(task: &PermitTask, slot: u32) -> Option<LeaseKey> {
    leasehold::derived::DerivedKey::permit(task.key(), slot, task.permits()).ok()
}

impl Program {
    pub(super) async fn start_permit_task(&mut self) {
        let (Some(service), Some(owner)) = (self.service(), self.owner.clone()) else {
            return;
        };
        let handle: Arc<OnceLock<PermitTask>> = Arc::new(OnceLock::new());
        let panics = self.rng.random_bool(0.1);
        let once = Arc::new(AtomicBool::new(panics));
        let (beliefs, o, h) = (
            Arc::clone(&self.ctx.beliefs),
            owner.clone(),
            Arc::clone(&handle),
        );
        let options = LeaseTaskOptions::new().on_acquired(move |token, cancel| {
            // The callback runs once the slot is the task's: its handle names the slot. A
            // tenure begun before the handle was given back is registered after the start.
            let slot = h.get().and_then(|t| {
                let (slot, held) = t.held_slot()?;
                (held == token).then(|| slot_key(t, slot)).flatten()
            });
            if let Some(key) = slot {
                beliefs.token(&o, key, Some(token), cancel, TokenSource::PermitTask);
            }
            if once.swap(false, Ordering::SeqCst) {
                panic!("{INTENDED_PANIC}: on_acquired of {PERMIT_TASK} (token {token})");
            }
        });
        let what = format!(
            "start_lease_task_with_permits {PERMIT_TASK}/{TASK_PERMITS}{}",
            if panics { " (on_acquired panics)" } else { "" }
        );
        // The first attempt (a list, one grant per free slot, a list, the hold), and a stopped
        // task's release waited for.
        let bound = self.ctx.quick() * (TASK_PERMITS + 5);
        let f = async move {
            service
                .tasks()
                .start_with_permits(PERMIT_TASK, TASK_PERMITS, options)
                .await
        };
        let out = self
            .drive(&what, bound, f, |r| {
                format!("{:?}", r.as_ref().map(PermitTask::held_slot))
            })
            .await;
        let Some(Ok(task)) = out else {
            return;
        };
        let _ = handle.set(task.clone());
        // The slot held now, its cancellation token read between two looks at the same slot.
        if let Some((slot, token)) = task.held_slot() {
            let cancel = task.cancellation_token();
            if task.held_slot() == Some((slot, token))
                && let Some(key) = slot_key(&task, slot)
            {
                self.ctx
                    .beliefs
                    .token(&owner, key, Some(token), cancel, TokenSource::PermitTask);
            }
        }
        self.ctx.beliefs.permit_task(&owner, task);
    }

    pub(super) async fn stop_permit_task(&mut self) {
        let Some(service) = self.service() else {
            return;
        };
        let bound = self.ctx.settled();
        let f = async move { service.tasks().stop_with_permits(PERMIT_TASK).await };
        self.drive(&format!("stop_permit_task {PERMIT_TASK}"), bound, f, |r| {
            format!("{r:?}")
        })
        .await;
    }
}
