//! How the fault layer injects the drawn fault into one call, the SQL-level ones included.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::time::Duration;

use leasehold::{HolderId, LeaseKey, StoreError};

use super::{FaultStore, injected};
use crate::fault::{Fault, HANG_CAP};
use crate::session::{OTHER_HOLDER, Other};

impl FaultStore {
    /// Runs `call` under the next drawn fault; `touch` is the key the call touches (the first
    /// one of a batch) and the calling holder, for the SQL-level faults.
    pub(super) async fn faulty<T, F>(
        &self,
        op: &'static str,
        touch: Option<(&LeaseKey, &HolderId)>,
        call: F,
    ) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        match self.dice.draw() {
            Fault::None => call.await,
            Fault::RowLocked(hold) => {
                if let Some((key, _)) = touch {
                    self.beside(key, Other::Lock, hold).await;
                }
                call.await
            }
            Fault::Uncommitted { hold, own, commit } => {
                let other = HolderId::new(OTHER_HOLDER).ok();
                if let Some((key, holder)) = touch
                    && let Some(holder) = if own { Some(holder.clone()) } else { other }
                {
                    // The caller's own holder id: its own abandoned grant, which the engine
                    // releases once it answers; another's: that holder's grant.
                    let release = own;
                    let other = Other::Grant {
                        holder,
                        commit,
                        release,
                    };
                    self.beside(key, other, hold).await;
                }
                call.await
            }
            Fault::Delay(d) => {
                tokio::time::sleep(d).await;
                call.await
            }
            Fault::Hang => {
                tokio::time::sleep(HANG_CAP).await;
                Err(injected(op, "hung until the cap"))
            }
            Fault::Fail => Err(injected(op, "failed before applying")),
            Fault::LoseAnswer => {
                let _ = call.await;
                Err(injected(op, "answer lost after applying"))
            }
            Fault::SlowAnswer(d) => {
                let out = call.await;
                tokio::time::sleep(d).await;
                out
            }
            Fault::ApplyLate(d) => {
                let late = async move {
                    tokio::time::sleep(d).await;
                    let _ = call.await;
                };
                match &self.late {
                    Some(h) => drop(h.spawn(late)),
                    None => drop(tokio::spawn(late)),
                }
                Err(StoreError::TimedOut {
                    op,
                    after: Duration::ZERO,
                })
            }
        }
    }

    /// Opens another session doing `other` on `key` for `hold` and counts it (or its failure).
    async fn beside(&self, key: &LeaseKey, other: Other, hold: Duration) {
        let Some(sessions) = &self.sessions else {
            return;
        };
        let counts = &self.dice.counts;
        let count = match other {
            Other::Lock => &counts.row_locks,
            Other::Grant { .. } => &counts.uncommitted,
        };
        if sessions.stall(key, other, hold).await {
            count.fetch_add(1, Ordering::Relaxed);
        } else {
            counts.sessions_failed.fetch_add(1, Ordering::Relaxed);
        }
    }
}
