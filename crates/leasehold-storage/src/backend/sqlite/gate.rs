//! One writer at a time per SQLite file within a process, served in arrival order.
//!
//! SQLite lets one connection write at a time. A connection that finds the write lock taken is
//! put to sleep by the busy handler `busy_timeout` installs, which backs off 1, 2, 5, 10, 15,
//! 20, 25 ms… between tries and does not queue: under a steady stream of writes a grant can miss
//! the lock five or seven times in a row and answer 33 or 78 ms late, while writers that came
//! after it are served. Every store of this process on one file therefore shares a gate, a
//! FIFO mutex taken before a write statement or write transaction is sent and dropped once it
//! was answered (committed or rolled back): the process's writers reach SQLite one at a time,
//! in arrival order, and find the write lock free unless another process holds it (that
//! contention is still the busy handler's).
//!
//! The gate is a latency device, never a safety one: every statement still decides on the row
//! under SQLite's own write lock, and a writer that does not take the gate (a connection of the
//! application's own) is only served by the busy handler as before. Reads do not take it (WAL
//! readers do not wait for the writer).
//!
//! SQLite's automatic checkpoint of the write-ahead log runs inside the commit that took the log
//! past 1,000 pages, so that writer holds the gate a few milliseconds longer. It stays there: a
//! checkpoint run beside the writers never catches up with them, and the log is restarted only
//! after a checkpoint that did, so it would grow without end.
//!
//! The wait for the gate is bounded by the store's server bound (the busy timeout its
//! connections were opened with) and ends as that busy timeout would: a
//! [`crate::StoreError::ServerTimeout`], nothing sent.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use sea_orm::{DatabaseConnection, DbErr};
use tokio::sync::OwnedMutexGuard;

/// The wait for the gate of a store opened without a server bound
/// ([`crate::SeaOrmStore::from_connection`]): sqlx's default busy timeout.
const UNBOUNDED_STORE_WAIT: Duration = Duration::from_secs(5);

/// The gate of one SQLite file (see the module docs).
#[derive(Debug)]
pub(crate) struct WriteGate {
    file: PathBuf,
    turn: Arc<tokio::sync::Mutex<()>>,
}

/// A writer's turn: the gate is taken while it lives.
pub(crate) type Turn = OwnedMutexGuard<()>;

/// The gates of the files this process's stores write, by canonical path. Weak: a gate lives
/// while a store of its file does.
static GATES: Mutex<Option<HashMap<PathBuf, Weak<WriteGate>>>> = Mutex::new(None);

impl WriteGate {
    /// The gate of the file `db` writes, shared with every other store of this process on that
    /// file; `None` for an in-memory database (its one connection is its only writer) or a
    /// connection that is not SQLite's.
    pub(crate) fn of(db: &DatabaseConnection) -> Option<Arc<Self>> {
        let file = super::database_file(db)?;
        let mut gates = GATES.lock().unwrap_or_else(PoisonError::into_inner);
        let gates = gates.get_or_insert_with(HashMap::new);
        if let Some(gate) = gates.get(&file).and_then(Weak::upgrade) {
            return Some(gate);
        }
        gates.retain(|_, gate| gate.strong_count() > 0);
        let gate = Arc::new(Self {
            file: file.clone(),
            turn: Arc::default(),
        });
        gates.insert(file, Arc::downgrade(&gate));
        Some(gate)
    }

    /// Waits for this writer's turn, at most `bound` (the store's server bound, or
    /// [`UNBOUNDED_STORE_WAIT`]). The error reads as SQLite's own busy error, so it is judged a
    /// [`crate::StoreError::ServerTimeout`] like the busy timeout it stands in for.
    pub(crate) async fn enter(&self, bound: Option<Duration>) -> Result<Turn, DbErr> {
        let bound = bound.unwrap_or(UNBOUNDED_STORE_WAIT);
        match tokio::time::timeout(bound, Arc::clone(&self.turn).lock_owned()).await {
            Ok(turn) => Ok(turn),
            Err(_) => Err(DbErr::Custom(format!(
                "database is locked: other writers of this process held {} for {bound:?}",
                self.file.display()
            ))),
        }
    }
}

#[cfg(all(test, feature = "sqlite"))]
mod tests {
    use super::*;

    async fn open(url: &str) -> DatabaseConnection {
        sea_orm::Database::connect(url).await.expect("opens")
    }

    /// A directory of its own for one test, removed with its files when dropped (the testkit's
    /// `ScratchDir` is out of reach of this crate's unit tests: the testkit depends on it).
    struct Scratch(PathBuf);

    impl Scratch {
        fn join(&self, file: &str) -> PathBuf {
            self.0.join(file)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn scratch(test: &str) -> Scratch {
        let dir =
            std::env::temp_dir().join(format!("leasehold-gate-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        Scratch(dir)
    }

    #[tokio::test]
    async fn stores_of_one_file_share_one_gate_and_others_have_none() {
        let dir = scratch("share");
        let url = |f: &str| format!("sqlite://{}?mode=rwc", dir.join(f).display());
        let (a, b, c) = (
            open(&url("a.db")).await,
            open(&url("a.db")).await,
            open(&url("c.db")).await,
        );
        let (ga, gb, gc) = (WriteGate::of(&a), WriteGate::of(&b), WriteGate::of(&c));
        let (ga, gb, gc) = (
            ga.expect("a file"),
            gb.expect("a file"),
            gc.expect("a file"),
        );
        assert!(Arc::ptr_eq(&ga, &gb));
        assert!(!Arc::ptr_eq(&ga, &gc));
        assert!(WriteGate::of(&open("sqlite::memory:").await).is_none());
        // Gone with its last store: a later store of the file gets a new one.
        let file = ga.file.clone();
        drop((ga, gb));
        let later = WriteGate::of(&a).expect("a file");
        assert_eq!(later.file, file);
        assert_eq!(Arc::strong_count(&later), 1);
    }

    #[tokio::test]
    async fn a_writer_waits_for_its_turn_at_most_its_bound() {
        let dir = scratch("bound");
        let url = format!("sqlite://{}?mode=rwc", dir.join("g.db").display());
        let gate = WriteGate::of(&open(&url).await).expect("a file");
        let held = gate.enter(None).await.expect("free");
        let err = gate
            .enter(Some(Duration::from_millis(20)))
            .await
            .expect_err("taken");
        let judged = crate::StoreError::db("renew", "t", err);
        assert!(
            matches!(judged, crate::StoreError::ServerTimeout { .. }),
            "{judged:?}"
        );
        drop(held);
        gate.enter(Some(Duration::from_millis(20)))
            .await
            .expect("free again");
    }
}
