//! Shutting down: releasing every tenure and stopping the engine thread, or (as a test hook)
//! stopping it without releasing.

use std::sync::PoisonError;

use leasehold_engine::ShutdownAll;

use super::LeaseService;
use crate::runtime::EngineThread;
use crate::{Error, Result};

impl LeaseService {
    /// Ends every tenure of this service at once (every cancellation token is cancelled, every
    /// guard, task and sharded name stops believing), then releases exactly the tenures it
    /// held (by name and token, in one statement where the backend allows: never a row this
    /// service does not believe in), then stops the engine thread. Returns how many leases were
    /// released. Replaces `ILeaseService.shutdown`.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use leasehold::{LeaseService, LeaseTaskOptions};
    /// let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// let (_, cancel) = service.start_lease_task("a", LeaseTaskOptions::new()).await?.acquired().await?;
    /// service.start_lease_task("b", LeaseTaskOptions::new()).await?.acquired().await?;
    /// assert_eq!(service.shutdown().await?, 2);
    /// assert!(!service.has_lease("a") && cancel.is_cancelled());
    /// assert!(matches!(service.db_now().await, Err(leasehold::Error::ShutDown)));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::ShutDown`] if already shut down; [`Error::Store`] if the release failed (the
    /// engine is stopped anyway, and the leases lapse after their term).
    ///
    /// # Cancel safety
    /// Every tenure ends before the first await. Dropping the future part-way may leave the
    /// leases to lapse instead of being released, and the engine thread running until the last
    /// clone of the service is dropped.
    pub async fn shutdown(&self) -> Result<u64> {
        if self.is_shut_down() {
            return Err(Error::ShutDown);
        }
        // The tenures end before the release statement, so no guard outlives its row.
        #[cfg(feature = "known-bugs")]
        let end_first =
            self.inner.bug != Some(leasehold_engine::KnownBug::ShutdownReleasesByHolder);
        #[cfg(not(feature = "known-bugs"))]
        let end_first = true;
        if end_first {
            self.inner.cancel.cancel();
        }
        let released = self.on_engine(ShutdownAll).await;
        let Some(thread) = self.take_thread() else {
            return Err(Error::ShutDown);
        };
        thread.stop().await;
        self.release_claim();
        Ok(released??)
    }

    /// Test hook simulating a crash: ends every tenure here and stops the engine without
    /// telling the database, so the leases lapse after their term and others take over.
    #[doc(hidden)]
    pub async fn abort_without_release(&self) {
        self.inner.cancel.cancel();
        if let Some(thread) = self.take_thread() {
            self.inner.registry.clear();
            thread.stop().await;
        }
        self.release_claim();
    }

    fn take_thread(&self) -> Option<EngineThread> {
        self.inner
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    fn release_claim(&self) {
        self.inner
            .claim
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
    }
}
