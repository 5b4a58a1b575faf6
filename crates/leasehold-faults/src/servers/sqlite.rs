//! SQLite files in temp dirs; a tiny tmpfs to fill up; `sqlite3` sessions holding locks.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{ServerError, Session, TempDir, io, run, which};

/// A SQLite database file in a temp dir, optionally on a tmpfs of its own (so the disk can be
/// made full). Dropping it unmounts and removes everything.
#[derive(Debug)]
pub struct SqliteDb {
    dir: TempDir,
    mount: Option<PathBuf>,
    file: PathBuf,
}

impl SqliteDb {
    /// A database file in a fresh temp dir.
    ///
    /// # Errors
    /// The file system's error.
    pub fn new() -> Result<Self, ServerError> {
        let dir = TempDir::new("sqlite")?;
        let file = dir.path().join("leases.db");
        Ok(Self {
            dir,
            mount: None,
            file,
        })
    }

    /// A database file on a tmpfs of `size_kib` KiB of its own (needs `mount`: root with
    /// CAP_SYS_ADMIN), so [`SqliteDb::fill_disk`] can make it full.
    ///
    /// # Errors
    /// [`ServerError::Command`] when the tmpfs cannot be mounted.
    pub fn on_small_disk(size_kib: u32) -> Result<Self, ServerError> {
        let dir = TempDir::new("sqlite-full")?;
        let mnt = dir.path().join("mnt");
        std::fs::create_dir_all(&mnt).map_err(io("create the mount point"))?;
        run(Command::new(which("mount", "mount")?)
            .args(["-t", "tmpfs", "-o", &format!("size={size_kib}k"), "tmpfs"])
            .arg(&mnt))?;
        let file = mnt.join("leases.db");
        Ok(Self {
            dir,
            mount: Some(mnt),
            file,
        })
    }

    /// The URL holders use.
    #[must_use]
    pub fn url(&self) -> String {
        format!("sqlite://{}?mode=rwc", self.file.display())
    }

    /// The database file.
    #[must_use]
    pub fn file(&self) -> &Path {
        &self.file
    }

    fn filler(&self) -> PathBuf {
        self.file.with_file_name("filler")
    }

    /// Fills the tmpfs until no byte is left (the database's next growth fails with
    /// `SQLITE_FULL`); returns the bytes written.
    ///
    /// # Errors
    /// When the database is not on a disk of its own.
    pub fn fill_disk(&self) -> Result<u64, ServerError> {
        if self.mount.is_none() {
            return Err(ServerError::Command {
                command: "fill_disk".into(),
                detail: "the database is not on a disk of its own (use on_small_disk)".into(),
            });
        }
        let mut f = std::fs::File::create(self.filler()).map_err(io("create the filler"))?;
        let chunk = vec![0u8; 4096];
        let mut written = 0u64;
        for _ in 0..1_000_000 {
            match f.write(&chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => written += n as u64,
            }
        }
        let _ = f.sync_all();
        Ok(written)
    }

    /// Frees the space [`SqliteDb::fill_disk`] took.
    pub fn free_disk(&self) {
        let _ = std::fs::remove_file(self.filler());
    }

    /// A `sqlite3` session on the file reading statements from stdin.
    ///
    /// # Errors
    /// [`ServerError::Missing`] without `sqlite3`.
    pub fn session(&self, label: &str) -> Result<Session, ServerError> {
        let mut cmd = Command::new(which("sqlite3", "sqlite3")?);
        cmd.arg(&self.file);
        Session::spawn(cmd, &self.dir.path().join(format!("session-{label}.log")))
    }

    /// Runs SQL with `sqlite3`; `|`-separated rows.
    ///
    /// # Errors
    /// The client's output.
    pub fn query(&self, sql: &str) -> Result<String, ServerError> {
        run(Command::new(which("sqlite3", "sqlite3")?)
            .args(["-cmd", ".timeout 5000"])
            .arg(&self.file)
            .arg(sql))
    }

    /// Whether another connection can take a write lock now (`BEGIN IMMEDIATE` without
    /// waiting).
    #[must_use]
    pub fn writable_now(&self) -> bool {
        which("sqlite3", "sqlite3").is_ok_and(|bin| {
            run(Command::new(bin)
                .arg(&self.file)
                .arg("BEGIN IMMEDIATE; ROLLBACK;"))
            .is_ok()
        })
    }
}

impl Drop for SqliteDb {
    fn drop(&mut self) {
        if let Some(m) = &self.mount {
            let _ = Command::new("umount").arg("-l").arg(m).status();
        }
    }
}
