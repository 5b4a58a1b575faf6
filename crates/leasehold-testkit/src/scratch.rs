//! A scratch directory of one test, removed with everything in it when dropped, so that a test
//! leaves nothing in the temporary directory (a SQLite file and its `-wal` and `-shm` files
//! included).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// A new directory under the system's temporary directory, removed when dropped.
///
/// # Examples
/// ```
/// let dir = leasehold_testkit::scratch::ScratchDir::new("doc");
/// let url = dir.sqlite_url("leases.db");
/// assert!(url.starts_with("sqlite://") && url.ends_with("leases.db?mode=rwc"));
/// let path = dir.path().to_owned();
/// assert!(path.is_dir());
/// drop(dir);
/// assert!(!path.exists());
/// ```
#[derive(Debug)]
pub struct ScratchDir(PathBuf);

impl ScratchDir {
    /// An empty directory named after `label`, this process and a counter (a directory left
    /// by an earlier process of the same id is emptied first).
    ///
    /// # Panics
    /// If the directory cannot be created (a test cannot go on without it).
    #[must_use]
    pub fn new(label: &str) -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("leasehold-{label}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| panic!("create the scratch directory {}: {e}", dir.display()));
        Self(dir)
    }

    /// Its path.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// The URL of a SQLite database file `file` in it, created when first opened.
    #[must_use]
    pub fn sqlite_url(&self, file: &str) -> String {
        format!("sqlite://{}?mode=rwc", self.0.join(file).display())
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
