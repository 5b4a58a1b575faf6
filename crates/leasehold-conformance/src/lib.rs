//! The conformance suite every [`LeaseStore`](leasehold_storage::LeaseStore) passes.
//!
//! A crate of its own, apart from the test support of `leasehold-testkit`, because the operator's
//! `leasehold check` runs it against a scratch table at run time: the command then depends on
//! the suite alone, not on the test tools (the fault proxy, the history checker and their
//! platform-specific dependencies). `leasehold_testkit::conformance` re-exports it.
//!
//! Each check runs in a namespace of its own (`{base}.{check}`), so suites against one database
//! can run side by side with each other and with real traffic. Time-dependent checks use short
//! terms on the database's clock.
//!
//! # Examples
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use leasehold_storage::MemoryStore;
//! let report = leasehold_conformance::run(MemoryStore::new(), "doc").await;
//! assert_eq!(report.failed(), 0, "{report}");
//! # }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use leasehold_core::{
    AcquireOutcome, Clock, FencingToken, HolderId, LeaseKey, LeaseName, MonotonicClock, Namespace,
    Term,
};

use leasehold_storage::{Grant, MemoryStore, SeaOrmStore, Store};

mod batch_items;
mod checks;
mod differential;
mod faults;
pub use faults::PG_READ_ONLY_ROLE;
mod sessions;

/// What one check showed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// The check ran and the store did what it must.
    Passed,
    /// The check could not apply to this store (for example row locks on SQLite): it showed
    /// nothing, so it never counts as passed. The reason.
    Skipped(String),
    /// What went wrong.
    Failed(String),
}

/// The result of one check.
#[derive(Debug, Clone)]
pub struct CheckResult {
    /// The check's name.
    pub name: &'static str,
    /// Passed, skipped (and why) or what went wrong.
    pub outcome: Outcome,
    /// How long it took.
    pub elapsed: Duration,
}

/// The results of a suite run.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// One entry per check, in order.
    pub results: Vec<CheckResult>,
}

impl Report {
    fn count(&self, pick: impl Fn(&Outcome) -> bool) -> usize {
        self.results.iter().filter(|r| pick(&r.outcome)).count()
    }

    /// How many checks passed (a skipped check is not one of them).
    #[must_use]
    pub fn passed(&self) -> usize {
        self.count(|o| *o == Outcome::Passed)
    }

    /// How many checks could not apply to this store and showed nothing.
    #[must_use]
    pub fn skipped(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Skipped(_)))
    }

    /// How many checks failed.
    #[must_use]
    pub fn failed(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Failed(_)))
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for r in &self.results {
            match &r.outcome {
                Outcome::Passed => writeln!(f, "ok      {:<40} {:>8.1?}", r.name, r.elapsed)?,
                Outcome::Skipped(why) => {
                    writeln!(f, "skipped {:<40} {:>8.1?}  {why}", r.name, r.elapsed)?;
                }
                Outcome::Failed(e) => {
                    writeln!(f, "FAIL    {:<40} {:>8.1?}  {e}", r.name, r.elapsed)?;
                }
            }
        }
        write!(
            f,
            "{} passed, {} skipped, {} failed",
            self.passed(),
            self.skipped(),
            self.failed()
        )
    }
}

type CheckFuture = Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;
type CheckFn = fn(Ctx) -> CheckFuture;

/// What the suite runs against: a store, and the SQL store under it when there is one (then the
/// [`SQL_CHECKS`] run too, with faults made on its own database).
#[derive(Clone)]
pub struct Subject {
    store: Arc<dyn Store>,
    sql: Option<SeaOrmStore>,
}

impl Subject {
    /// Any store: the [`CHECKS`].
    #[must_use]
    pub fn store(store: Arc<dyn Store>) -> Self {
        Self { store, sql: None }
    }

    /// A SQL store: the [`CHECKS`] and the [`SQL_CHECKS`].
    #[must_use]
    pub fn sql(store: SeaOrmStore) -> Self {
        Self {
            store: Arc::new(store.clone()),
            sql: Some(store),
        }
    }

    /// `store`, a wrapper around the SQL store `sql` (for example leasehold-testkit's
    /// `CountingStore`): the
    /// [`CHECKS`] through `store`, and the [`SQL_CHECKS`] with their faults made on `sql`.
    #[must_use]
    pub fn wrapping(store: Arc<dyn Store>, sql: SeaOrmStore) -> Self {
        Self {
            store,
            sql: Some(sql),
        }
    }
}

impl From<Arc<dyn Store>> for Subject {
    fn from(store: Arc<dyn Store>) -> Self {
        Self::store(store)
    }
}

impl From<MemoryStore> for Subject {
    fn from(store: MemoryStore) -> Self {
        Self::store(Arc::new(store))
    }
}

impl From<SeaOrmStore> for Subject {
    fn from(store: SeaOrmStore) -> Self {
        Self::sql(store)
    }
}

/// What a check gets: the store, the SQL store under it (if any), a namespace of its own, and
/// where it says that it could not apply.
#[derive(Clone)]
pub struct Ctx {
    store: Arc<dyn Store>,
    sql: Option<SeaOrmStore>,
    ns: Namespace,
    skipped: Arc<std::sync::Mutex<Option<String>>>,
}

impl Ctx {
    /// Marks the check skipped: it cannot apply to this store, so it showed nothing. The check
    /// then returns `Ok(())`, and the report says `skipped` with `why`.
    fn skip(&self, why: &str) -> Result<(), String> {
        if let Ok(mut slot) = self.skipped.lock() {
            *slot = Some(why.to_owned());
        }
        Ok(())
    }

    fn key(&self, name: &str) -> Result<LeaseKey, String> {
        Ok(LeaseKey::new(
            self.ns.clone(),
            LeaseName::new(name).map_err(|e| e.to_string())?,
        ))
    }
}

fn holder(s: &str) -> Result<HolderId, String> {
    HolderId::new(s).map_err(|e| e.to_string())
}

fn term(ms: u64) -> Result<Term, String> {
    Term::new("term", Duration::from_millis(ms)).map_err(|e| e.to_string())
}

fn ensure(cond: bool, what: impl FnOnce() -> String) -> Result<(), String> {
    if cond { Ok(()) } else { Err(what()) }
}

async fn acquired(
    ctx: &Ctx,
    key: &LeaseKey,
    who: &HolderId,
    t: Term,
) -> Result<(FencingToken, leasehold_core::DbInstant), String> {
    match ctx
        .store
        .begin_tenure(key, who, Grant::New, t, None)
        .await
        .map_err(|e| e.to_string())?
    {
        AcquireOutcome::Acquired { token, until } => Ok((token, until)),
        other => Err(format!("{who} expected to acquire {key}, got {other:?}")),
    }
}

/// `(name, check)` pairs whose names are the checks' function names, so that a report names the
/// function to read.
macro_rules! checks {
    ($module:ident: $($check:ident),+ $(,)?) => {
        &[$((stringify!($check), |c| Box::pin($module::$check(c))),)+]
    };
}

/// Every check of the suite, by name.
pub const CHECKS: &[(&str, CheckFn)] = checks![checks:
    grant_on_empty_table,
    second_holder_refused,
    begin_tenure_new_token,
    release_many_exact,
    takeover_after_expiry,
    renew_extends,
    renew_refused_after_lapse,
    stale_token_refused,
    release_by_other_refused,
    token_grows_after_release,
    release_all_only_holder,
    force_release,
    renew_many_1000,
    list_valid_special_names,
    size_limits,
    purge_by_age,
    race_32_tasks_200_rounds,
    begin_tenure_many_like_one_by_one,
    begin_tenure_many_race,
    release_batch_like_one_by_one,
    begin_tenure_all_all_or_nothing,
    begin_tenure_all_crossing_race,
    value_set_at_grant,
    value_change_while_held,
    purge_never_resets_token,
    purge_grant_race,
    batches_answer_as_single_statements,
];

/// The checks that need a SQL store ([`Subject::sql`]): faults made on its own database (an
/// unwritable database, rows held locked by another session). [`run`] adds them for such a
/// subject.
pub const SQL_CHECKS: &[(&str, CheckFn)] = checks![faults:
    failed_commit_never_a_grant,
    blocked_statement_gives_up,
    renew_many_next_to_locked_row,
    release_all_purge_next_to_locked_row,
    group_commit_next_to_locked_row,
    batches_beside_other_sessions,
];

/// The checks that every item of a batch is answered from what the statement did to its own
/// tenure (run on every store, after [`CHECKS`]).
pub const BATCH_ITEM_CHECKS: &[(&str, CheckFn)] = checks![batch_items:
    release_batch_two_tenures_of_one_key,
    renew_batch_two_tenures_of_one_key,
];

/// How many checks [`run`] runs against `subject`.
#[must_use]
pub fn check_count(subject: &Subject) -> usize {
    CHECKS.len() + BATCH_ITEM_CHECKS.len() + subject.sql.as_ref().map_or(0, |_| SQL_CHECKS.len())
}

/// Runs every check against `subject`, each in namespace `{base}.{check}` (`base` is made unique
/// with the database's clock and the process id).
pub async fn run(subject: impl Into<Subject>, base: &str) -> Report {
    run_matching(subject, base, |_| true).await
}

/// Runs the checks whose names satisfy `filter`.
pub async fn run_matching(
    subject: impl Into<Subject>,
    base: &str,
    filter: impl Fn(&str) -> bool,
) -> Report {
    let Subject { store, sql } = subject.into();
    let stamp = match store.db_now().await {
        Ok(t) => t.as_millis(),
        Err(e) => {
            return Report {
                results: vec![CheckResult {
                    name: "db_now",
                    outcome: Outcome::Failed(e.to_string()),
                    elapsed: Duration::ZERO,
                }],
            };
        }
    };
    let mut report = Report::default();
    let sql_checks: &[(&str, CheckFn)] = if sql.is_some() { SQL_CHECKS } else { &[] };
    let all = CHECKS.iter().chain(BATCH_ITEM_CHECKS).chain(sql_checks);
    for (name, check) in all.filter(|(n, _)| filter(n)) {
        let ns = format!("{base}.{}.{stamp}.{name}", std::process::id());
        let start = MonotonicClock.now();
        let skipped = Arc::new(std::sync::Mutex::new(None));
        let result = match Namespace::new(ns) {
            Ok(ns) => {
                check(Ctx {
                    store: store.clone(),
                    sql: sql.clone(),
                    ns,
                    skipped: skipped.clone(),
                })
                .await
            }
            Err(e) => Err(e.to_string()),
        };
        let why = skipped.lock().ok().and_then(|mut slot| slot.take());
        let outcome = match (result, why) {
            (Err(e), _) => Outcome::Failed(e),
            (Ok(()), Some(why)) => Outcome::Skipped(why),
            (Ok(()), None) => Outcome::Passed,
        };
        report.results.push(CheckResult {
            name,
            outcome,
            elapsed: MonotonicClock.now() - start,
        });
    }
    report
}
