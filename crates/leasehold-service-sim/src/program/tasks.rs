//! Program steps on lease tasks and sharded tasks.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use futures::FutureExt;
use leasehold::LeaseTaskOptions;
use leasehold::shards::ShardOptions;
use rand::RngExt;

use super::Program;

/// The bound of a call documented to wait (as long as it takes).
const NO_BOUND: std::time::Duration = std::time::Duration::from_secs(3600);
use crate::beliefs::TokenSource;
use crate::oracle::panics::INTENDED_PANIC;

impl Program {
    /// `start_lease_task` with an `on_acquired` that registers the tenure's token and, one time
    /// in ten, panics on its first call.
    pub(super) async fn start_lease_task(&mut self) {
        let (Some(service), Some(owner)) = (self.service(), self.owner.clone()) else {
            return;
        };
        let name = self.pick_name();
        let Some(key) = self.ctx.key(&name) else {
            return;
        };
        let panics = self.rng.random_bool(0.1);
        let once = Arc::new(AtomicBool::new(panics));
        let (beliefs, o, k) = (Arc::clone(&self.ctx.beliefs), owner.clone(), key.clone());
        let mut options = LeaseTaskOptions::new().on_acquired(move |token, cancel| {
            beliefs.token(&o, k.clone(), Some(token), cancel, TokenSource::OnAcquired);
            if once.swap(false, Ordering::SeqCst) {
                panic!("{INTENDED_PANIC}: on_acquired of {k} (token {token})");
            }
        });
        // Drawn only when asks are in the program, so other programs replay as before.
        let revocable = (self.ctx.world.spec.weights.ask_release > 0 && self.rng.random_bool(0.5))
            .then(|| self.ctx.term().mul_f64(self.rng.random_range(0.0..1.5)));
        if let Some(drain) = revocable {
            options = options.revocable(leasehold::elections::Revocable::new(drain));
        }
        // Likewise drawn only when candidates are in the program.
        let candidate = (self.ctx.world.spec.weights.candidate > 0 && self.rng.random_bool(0.5))
            .then(|| self.random_candidate());
        if let Some(c) = &candidate {
            options = options.candidate(c.clone());
        }
        let what = format!(
            "start_lease_task {name}{}{}",
            if panics { " (on_acquired panics)" } else { "" },
            revocable.map_or(String::new(), |d| format!(" (revocable, drain {d:?})"))
        ) + &candidate.map_or(String::new(), |c| format!(" ({c:?})"));
        let quick = self.ctx.quick();
        // One time in five through `start_many` (of this one name), its chunked path.
        let out = if self.rng.random_bool(0.2) {
            let names = [name.clone()];
            let f = async move {
                let mut tasks = service.tasks().start_many(&names, options).await?;
                Ok::<_, leasehold::Error>(tasks.pop())
            };
            self.drive(&format!("start_many [{what}]"), quick * 2, f, |r| {
                format!(
                    "{:?}",
                    r.as_ref().map(|t| t.as_ref().map(|t| t.key().to_string()))
                )
            })
            .await
        } else {
            let f = service.start_lease_task(&name, options);
            self.drive(&what, quick, f, |r| {
                format!("{:?}", r.as_ref().map(|t| t.key().to_string()))
            })
            .await
            .map(|r| r.map(Some))
        };
        if let Some(Ok(Some(task))) = out {
            self.ctx.beliefs.task(&owner, task.clone());
            self.tasks.insert(name, task);
        }
    }

    pub(super) async fn stop_lease_task(&mut self) {
        let Some(service) = self.service() else {
            return;
        };
        // Mostly a running task, sometimes any name.
        let name = match self.tasks.keys().next().cloned() {
            Some(n) if self.rng.random_bool(0.8) => {
                let i = self.rng.random_range(0..self.tasks.len());
                self.tasks.keys().nth(i).cloned().unwrap_or(n)
            }
            _ => self.pick_name(),
        };
        let bound = self.ctx.settled();
        let f = service.stop_lease_task(&name);
        let out = self
            .drive(&format!("stop_lease_task {name}"), bound, f, |r| {
                format!("{r:?}")
            })
            .await;
        if out.is_some() {
            self.tasks.remove(&name);
        }
    }

    /// `hand_over` (or `yield_lease`) of a task, mostly a running one, after beginning a piece
    /// of work under it that returns after a random part of a term (sometimes after the
    /// hand-over's timeout).
    pub(super) async fn hand_over(&mut self, yield_it: bool) {
        let Some(service) = self.service() else {
            return;
        };
        let name = match self.tasks.keys().next().cloned() {
            Some(n) if self.rng.random_bool(0.9) => {
                let i = self.rng.random_range(0..self.tasks.len());
                self.tasks.keys().nth(i).cloned().unwrap_or(n)
            }
            _ => self.pick_name(),
        };
        if let Some(task) = self.tasks.get(&name)
            && let Some(work) = task.begin_work()
        {
            let lasts = self.ctx.term().mul_f64(self.rng.random_range(0.0..1.5));
            self.note(format!(
                "work under {name} (token {}) for {lasts:?}",
                work.token()
            ));
            let key = task.key().clone();
            let cell = Arc::new(Mutex::new(Some(work)));
            if let Some(owner) = &self.owner {
                self.ctx.beliefs.work(owner, key, &cell);
            }
            tokio::spawn(async move {
                tokio::time::sleep(lasts).await;
                let work = cell.lock().unwrap_or_else(PoisonError::into_inner).take();
                if let Some(work) = work {
                    work.finish();
                }
            });
        }
        let timeout = self.ctx.term().mul_f64(self.rng.random_range(0.0..1.0));
        let bound = timeout + self.ctx.settled();
        if yield_it {
            let f = service.tasks().yield_lease(&name, timeout);
            let what = format!("yield_lease {name} (timeout {timeout:?})");
            self.drive(&what, bound, f, |r| format!("{r:?}")).await;
        } else {
            let f = service.tasks().hand_over(&name, timeout);
            let what = format!("hand_over {name} (timeout {timeout:?})");
            if self
                .drive(&what, bound, f, |r| format!("{r:?}"))
                .await
                .is_some()
            {
                self.tasks.remove(&name);
            }
        }
    }

    /// Reads a task's tenure: `acquired()` now or never (or waited for a little), and
    /// `cancellation_token()`, registering both.
    pub(super) async fn observe_task(&mut self) {
        let Some(owner) = self.owner.clone() else {
            return;
        };
        if self.tasks.is_empty() {
            return;
        }
        let i = self.rng.random_range(0..self.tasks.len());
        let Some(task) = self.tasks.values().nth(i).cloned() else {
            return;
        };
        let key = task.key().clone();
        if self.rng.random_bool(0.5) {
            if let Some(Ok((token, cancel))) = task.acquired().now_or_never() {
                self.ctx.beliefs.token(
                    &owner,
                    key.clone(),
                    Some(token),
                    cancel,
                    TokenSource::Acquired,
                );
                self.note(format!("acquired() of {key} now: token {token}"));
            }
        } else {
            // A wait with no bound of its own: given up after a while.
            let wait = self.ctx.term().mul_f64(self.rng.random_range(0.1..2.0));
            let mode = super::drive::DropMode::Timeout(wait);
            let out = self
                .drive_as(
                    mode,
                    &format!("acquired {key}"),
                    NO_BOUND,
                    task.acquired(),
                    |r| format!("{:?}", r.as_ref().map(|(t, _)| *t)),
                )
                .await;
            if let Some(Ok((token, cancel))) = out {
                self.ctx.beliefs.token(
                    &owner,
                    key.clone(),
                    Some(token),
                    cancel,
                    TokenSource::Acquired,
                );
            }
        }
        if self.rng.random_bool(0.25) {
            // `set_value`: one statement, fenced by the tenure's token.
            let value = leasehold::LeaseValue::new(format!("{}", owner.holder)).ok();
            let quick = self.ctx.quick();
            let f = task.set_value(value);
            self.drive(&format!("set_value of {key}"), quick, f, |r| {
                format!("{r:?}")
            })
            .await;
        }
        if task.token().is_some() {
            let cancel = task.cancellation_token();
            self.ctx
                .beliefs
                .token(&owner, key, None, cancel, TokenSource::TaskCancellation);
        }
    }

    /// `start_sharded` of the run's shard names (this host joins the ring), with a callback
    /// that registers every tenure and, one time in ten, panics once.
    pub(super) async fn start_sharded(&mut self) {
        let (Some(service), Some(owner)) = (self.service(), self.owner.clone()) else {
            return;
        };
        if self.sharded.is_some() {
            return;
        }
        let panics = self.rng.random_bool(0.1);
        let once = Arc::new(AtomicBool::new(panics));
        let (beliefs, o) = (Arc::clone(&self.ctx.beliefs), owner.clone());
        let ns = self.ctx.world.namespace.clone();
        let options = ShardOptions::new()
            .config(self.ctx.world.config.clone())
            .refresh_interval(self.ctx.term() / 3)
            .on_acquired(move |name, token, cancel| {
                if let Ok(k) = leasehold::LeaseKey::parse(&ns, name) {
                    beliefs.token(&o, k, Some(token), cancel, TokenSource::ShardCallback);
                }
                if once.swap(false, Ordering::SeqCst) {
                    panic!("{INTENDED_PANIC}: sharded on_acquired of {name} (token {token})");
                }
            });
        let bound = self.ctx.timeout() * 3 + super::CALL_SLACK;
        let names = self.ctx.shard_names.clone();
        let what = format!(
            "start_sharded{}",
            if panics { " (on_acquired panics)" } else { "" }
        );
        let f = service.start_sharded(names, options);
        let out = self
            .drive(&what, bound, f, |r| format!("{:?}", r.as_ref().map(|_| ())))
            .await;
        if let Some(Ok(sharded)) = out {
            self.ctx
                .beliefs
                .service_key(&owner, sharded.membership_key().clone());
            self.ctx.beliefs.sharded(&owner, sharded.clone());
            for name in &self.ctx.shard_names {
                if let Some(task) = sharded.task(name) {
                    self.ctx.beliefs.task(&owner, task);
                }
            }
            self.sharded = Some(sharded);
        }
    }

    pub(super) async fn leave(&mut self) {
        let Some(sharded) = self.sharded.take() else {
            return;
        };
        let bound = self.ctx.settled() + self.ctx.term() / 3;
        self.drive("leave", bound, sharded.leave(), |r| format!("{r:?}"))
            .await;
        // The handle is gone either way (a dropped leave may leave the tasks running: the
        // oracle still reads them through its own clone).
    }
}
