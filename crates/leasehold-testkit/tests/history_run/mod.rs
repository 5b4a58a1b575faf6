//! The runner of the history check: sessions issuing a seeded random mix of lease-store
//! operations on a few keys of one database, each recorded with its window and answer.
//!
//! Every session has its own store (its own pool of connections). Between operations a session
//! stalls for a random few milliseconds; fenced transactions stay open for a while (holding the
//! row locked), and raw transactions insert a held row and sleep before they commit or roll back
//! (an uncommitted insert the others run into). Holder ids are shared between sessions, as the
//! connections of one service share theirs. The keys are renamed every [`GENERATION`] (all
//! sessions rename them together, by the recorder's clock), so that new rows are created under
//! contention all through a run and not only at its start.
//!
//! Terms are drawn per call: most under half a second, some a second or two, a few an hour, so tenures lapse during a run, renewals sometimes come too late and grants take
//! lapsed rows over. Each session reads the database's clock (`db_now`) after every operation:
//! the read before an operation (the one after the session's previous operation) and the read
//! after it bound the database time its statements read (`DbWindow`).

pub mod defect;
mod ops;
pub mod process;
pub mod raw;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use leasehold_storage::{LeaseKey, LeaseStore, SeaOrmStore, Store, StoreError, Term};
use leasehold_testkit::history::{Answer, Call, DbWindow, Op, Recorder};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

/// Every store call is abandoned after this (an unknown outcome).
const CALL_TIMEOUT: Duration = Duration::from_secs(3);
const HOLDERS: [&str; 2] = ["h0", "h1"];
/// How long the sessions work on one set of key names: longer than the short terms, so that
/// rows lapse and are taken over within a generation.
pub const GENERATION: Duration = Duration::from_millis(500);

/// One session: a store of its own, and the SQL store under it for raw statements.
#[derive(Clone)]
pub struct Session {
    /// The store the lease calls go to (possibly a decorator of `sql`).
    pub store: Arc<dyn Store>,
    /// The same database, for fenced and raw transactions.
    pub sql: SeaOrmStore,
}

/// What a run does.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Seeds every session's choices.
    pub seed: u64,
    /// The namespace of the run's keys (unique per run).
    pub namespace: String,
    /// How many keys at a time.
    pub keys: usize,
    /// Operations per session at most.
    pub ops_per_session: usize,
    /// How long the sessions run at most.
    pub budget: Duration,
}

/// The tenures seen so far per key (holder, token), shared by the sessions so they renew,
/// release and fence tenures that may be live.
type Seen = Arc<Mutex<HashMap<String, Vec<(String, i64)>>>>;

struct Worker {
    id: usize,
    session: Session,
    rng: StdRng,
    plan: Plan,
    seen: Seen,
    rec: Arc<Recorder>,
    /// The database's clock read after the session's previous operation: no statement of its
    /// next operation reads an earlier one.
    db_floor: i64,
    /// Numbers the session's all-or-nothing operations.
    joints: u64,
    /// The session's latest short tenure from a single grant: key, holder, token, end (database
    /// milliseconds) and term, for a renewal that may come too late.
    mine: Option<(LeaseKey, String, i64, i64, i64)>,
}

/// When an operation was invoked: on the recorder's clock and the database's.
#[derive(Debug, Clone, Copy)]
pub struct Started {
    invoke: Duration,
    db_lo: i64,
}

/// An operation's window: on the recorder's clock and the database's.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    invoke: Duration,
    respond: Duration,
    db: DbWindow,
}

/// Runs `sessions` by `plan` and returns what they recorded.
pub async fn run(plan: &Plan, sessions: Vec<Session>, rec: Arc<Recorder>) -> Vec<Op> {
    run_from(plan, 0, sessions, rec).await
}

/// [`run`], numbering the sessions from `first`.
pub async fn run_from(
    plan: &Plan,
    first: usize,
    sessions: Vec<Session>,
    rec: Arc<Recorder>,
) -> Vec<Op> {
    let seen: Seen = Arc::default();
    let mut tasks = Vec::new();
    for (i, session) in sessions.into_iter().enumerate() {
        let id = first + i;
        let mut w = Worker {
            id,
            session,
            rng: StdRng::seed_from_u64(plan.seed.wrapping_mul(1_000_003).wrapping_add(id as u64)),
            plan: plan.clone(),
            seen: seen.clone(),
            rec: rec.clone(),
            db_floor: i64::MIN,
            joints: 0,
            mine: None,
        };
        tasks.push(tokio::spawn(async move { w.run().await }));
    }
    for t in tasks {
        t.await.expect("a session panicked");
    }
    rec.ops()
}

/// A term drawn for one call, and its milliseconds: under half a second (four calls in seven),
/// a second or two (two in seven), or an hour.
fn draw_term(rng: &mut StdRng) -> (Term, i64) {
    let ms: u64 = match rng.random_range(0..7) {
        0..4 => rng.random_range(50..400),
        4..6 => rng.random_range(1_000..2_500),
        _ => 3_600_000,
    };
    let term = Term::new("term", Duration::from_millis(ms)).expect("term");
    (term, i64::try_from(ms).expect("ms"))
}

/// A call's answer, or its error or timeout as `None`.
async fn bounded<T>(f: impl Future<Output = Result<T, StoreError>>) -> Option<T> {
    match tokio::time::timeout(CALL_TIMEOUT, f).await {
        Ok(Ok(v)) => Some(v),
        Ok(Err(_)) | Err(_) => None,
    }
}

impl Worker {
    async fn run(&mut self) {
        let deadline = self.rec.now() + self.plan.budget;
        while self.db_floor == i64::MIN && self.rec.now() < deadline {
            if let Some(now) = bounded(self.session.sql.db_now()).await {
                self.db_floor = now.as_millis();
            }
        }
        for _ in 0..self.plan.ops_per_session {
            if self.rec.now() >= deadline {
                break;
            }
            let stall = self.rng.random_range(0..8);
            tokio::time::sleep(Duration::from_millis(stall)).await;
            match self.rng.random_range(0..100) {
                0..13 => self.grant().await,
                13..24 => self.grant_many().await,
                24..30 => self.grant_all().await,
                30..40 => self.renew().await,
                40..50 => self.renew_batch().await,
                50..55 => self.release().await,
                55..62 => self.release_batch().await,
                62..74 => self.fence().await,
                74..76 => self.purge().await,
                76..88 => self.renew_late().await,
                _ => self.insert().await,
            }
        }
    }

    fn holder(&mut self) -> String {
        HOLDERS[self.rng.random_range(0..HOLDERS.len())].to_owned()
    }

    /// The keys of the generation now, or now and then of the one before.
    fn keys(&mut self) -> Vec<LeaseKey> {
        let mut generation = self.rec.now().as_millis() / GENERATION.as_millis();
        if generation > 0 && self.rng.random_bool(0.1) {
            generation -= 1;
        }
        (0..self.plan.keys)
            .map(|i| {
                LeaseKey::parse(&self.plan.namespace, &format!("g{generation}k{i}")).expect("key")
            })
            .collect()
    }

    fn key(&mut self) -> LeaseKey {
        let keys = self.keys();
        keys[self.rng.random_range(0..keys.len())].clone()
    }

    /// A term for one call.
    fn term(&mut self) -> (Term, i64) {
        draw_term(&mut self.rng)
    }

    /// The instants an operation is invoked at.
    fn start(&self) -> Started {
        Started {
            invoke: self.rec.now(),
            db_lo: self.db_floor,
        }
    }

    /// The window of an operation invoked at `s` whose answer has just arrived: the database's
    /// clock is read now (no statement of the operation read a later one).
    async fn finish(&mut self, s: Started) -> Window {
        let respond = self.rec.now();
        let hi = match bounded(self.session.sql.db_now()).await {
            Some(now) => {
                self.db_floor = now.as_millis();
                now.as_millis()
            }
            None => i64::MAX,
        };
        Window {
            invoke: s.invoke,
            respond,
            db: DbWindow::new(s.db_lo, hi),
        }
    }

    /// A new number for an all-or-nothing operation, unique among the sessions of a run.
    fn joint(&mut self) -> u64 {
        self.joints += 1;
        (self.id as u64) << 40 | self.joints
    }

    /// Keys of one generation, in random order; one of them now and then twice.
    fn some_keys(&mut self) -> Vec<LeaseKey> {
        let mut keys: Vec<LeaseKey> = self
            .keys()
            .into_iter()
            .filter(|_| self.rng.random_bool(0.6))
            .collect();
        if keys.is_empty() {
            keys.push(self.key());
        }
        if self.rng.random_bool(0.2) {
            let again = keys[self.rng.random_range(0..keys.len())].clone();
            keys.push(again);
        }
        for i in (1..keys.len()).rev() {
            keys.swap(i, self.rng.random_range(0..=i));
        }
        keys
    }

    /// A tenure of `key` that may be live: mostly the latest seen, sometimes an older or a
    /// made-up token.
    fn tenure(&mut self, key: &LeaseKey) -> (String, i64) {
        let seen = self
            .seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key.name.as_str())
            .cloned()
            .unwrap_or_default();
        if seen.is_empty() || self.rng.random_bool(0.1) {
            return (self.holder(), self.rng.random_range(1..4));
        }
        // Mostly the latest (a holder renewing its tenure), now and then one before it.
        let back = if self.rng.random_bool(0.6) {
            0
        } else {
            self.rng.random_range(0..seen.len().min(3))
        };
        seen[seen.len() - 1 - back].clone()
    }

    fn saw(&self, key: &str, answer: &Answer) {
        let tenure = match answer {
            Answer::HeldBy { holder, token, .. } => (holder.clone(), *token),
            _ => return,
        };
        self.seen_tenure(key, tenure);
    }

    fn seen_tenure(&self, key: &str, tenure: (String, i64)) {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let list = seen.entry(key.to_owned()).or_default();
        if list.last() != Some(&tenure) {
            list.push(tenure);
        }
    }

    fn record(&self, via: &'static str, key: &LeaseKey, call: Call, answer: Answer, w: Window) {
        self.record_in(via, key, call, answer, w, None);
    }

    /// Records one operation (one key of the all-or-nothing operation `group`).
    fn record_in(
        &self,
        via: &'static str,
        key: &LeaseKey,
        call: Call,
        answer: Answer,
        w: Window,
        group: Option<u64>,
    ) {
        self.saw(key.name.as_str(), &answer);
        if let (Call::Grant { holder, .. }, Answer::Acquired { token, .. }) = (&call, &answer) {
            self.seen_tenure(key.name.as_str(), (holder.clone(), *token));
        }
        let known = answer != Answer::Unknown;
        let db = if known {
            w.db
        } else {
            DbWindow::new(w.db.lo, i64::MAX)
        };
        self.rec.push(Op {
            session: self.id,
            via,
            key: key.name.as_str().to_owned(),
            call,
            answer,
            invoke: w.invoke,
            respond: known.then_some(w.respond),
            db,
            group,
        });
    }
}
