//! Program steps of cooperative revocation: `ask_release` of a lease task's name, after
//! beginning a piece of work under one of this program's own tasks (so the holders that other
//! programs ask have work running).

use std::sync::{Arc, Mutex, PoisonError};

use leasehold::elections::AskOptions;
use rand::RngExt;

use super::Program;

impl Program {
    /// Begins a piece of work under one of this program's tasks that returns after a random
    /// part of a term (sometimes after the drain timeout of a revocable one), and asks for a
    /// name, mostly one of another program's tasks: patience up to two terms, forcing after a
    /// random part of it one time in three.
    pub(super) async fn ask_release(&mut self) {
        let Some(service) = self.service() else {
            return;
        };
        if !self.tasks.is_empty() {
            let i = self.rng.random_range(0..self.tasks.len());
            let task = self.tasks.values().nth(i).cloned();
            if let Some(task) = task
                && let Some(work) = task.begin_work()
            {
                let lasts = self.ctx.term().mul_f64(self.rng.random_range(0.0..1.5));
                let key = task.key().clone();
                self.note(format!(
                    "work under {key} (token {}) for {lasts:?}",
                    work.token()
                ));
                let cell = Arc::new(Mutex::new(Some(work)));
                if let Some(owner) = &self.owner {
                    self.ctx.beliefs.work(owner, key, &cell);
                }
                tokio::spawn(async move {
                    tokio::time::sleep(lasts).await;
                    let work = cell.lock().unwrap_or_else(PoisonError::into_inner).take();
                    drop(work);
                });
            }
        }
        let name = self.pick_name();
        let patience = self.ctx.term().mul_f64(self.rng.random_range(0.05..2.0));
        let mut options = AskOptions::new(patience);
        if self.rng.random_bool(0.33) {
            options = options.force_after(patience.mul_f64(self.rng.random_range(0.0..0.9)));
        }
        let bound = patience + self.ctx.settled();
        let what = format!("ask_release {name} ({options:?})");
        let f = service.elections().ask_release_with(&name, &options);
        self.drive(&what, bound, f, |r| format!("{r:?}")).await;
    }
}
