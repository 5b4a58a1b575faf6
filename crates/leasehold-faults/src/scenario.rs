//! Scenarios: holders started, a fault injected at a known `CLOCK_MONOTONIC` instant, healed,
//! and the logs handed to the [`crate::oracle`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::backend::Backend;
use crate::clock::{mono_ns, ms_between};
use crate::fleet::{Holder, HolderSpec, wait_for};
use crate::oracle::{Report, analyse};
use crate::record::Record;
use crate::servers::{ServerError, TempDir};

/// The lease term of every scenario (and the locks' ttl).
pub const TERM_MS: u64 = 1500;

/// How long the phases of a scenario last. [`Pace::ci`] keeps the whole suite within CI's
/// budget; `LEASEHOLD_FAULTS_LONG=1` ([`Pace::get`]) makes every fault last longer, gives the
/// holders longer to recover and repeats the SIGSTOP freeze more often.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pace {
    /// Holders running before the fault (ms).
    pub warm_ms: u64,
    /// How long a fault lasts (ms): two terms in CI, past every lease's end.
    pub fault_ms: u64,
    /// Holders running after the heal (ms), to be granted again.
    pub tail_ms: u64,
    /// SIGSTOP freezes in `sigstop_in_fenced_txn`.
    pub freezes: u32,
}

impl Pace {
    /// The pace in CI: two-term faults, two-term recoveries, three freezes.
    #[must_use]
    pub const fn ci() -> Self {
        Self {
            warm_ms: 1200,
            fault_ms: 2 * TERM_MS,
            tail_ms: 3000,
            freezes: 3,
        }
    }

    /// The long pace: four-term faults, four-term recoveries, ten freezes.
    #[must_use]
    pub const fn long() -> Self {
        Self {
            warm_ms: 3000,
            fault_ms: 4 * TERM_MS,
            tail_ms: 6000,
            freezes: 10,
        }
    }

    /// [`Pace::long`] when `LEASEHOLD_FAULTS_LONG` is set (to anything but `0` or empty),
    /// [`Pace::ci`] otherwise.
    #[must_use]
    pub fn get() -> Self {
        match std::env::var("LEASEHOLD_FAULTS_LONG") {
            Ok(v) if !v.trim().is_empty() && v.trim() != "0" => Self::long(),
            _ => Self::ci(),
        }
    }
}

/// One scenario being run.
#[derive(Debug)]
pub struct Run {
    bin: PathBuf,
    scenario: String,
    backend: &'static str,
    /// The namespace of this scenario's leases (its locks use `<namespace>-lock`).
    pub namespace: String,
    logs: TempDir,
    /// The holders, in spawn order.
    pub holders: Vec<Holder>,
    notes: Vec<String>,
    t0: u64,
}

impl Run {
    /// A scenario `name` on `backend`, with holders from `bin`.
    ///
    /// # Errors
    /// When the log directory cannot be made.
    pub fn new(bin: &Path, backend: &dyn Backend, name: &str) -> Result<Self, ServerError> {
        Ok(Self {
            bin: bin.to_owned(),
            scenario: name.to_owned(),
            backend: backend.name(),
            namespace: name.replace('_', "-"),
            logs: TempDir::new(&format!("logs-{name}"))?,
            holders: Vec::new(),
            notes: Vec::new(),
            t0: mono_ns(),
        })
    }

    /// Spawns a holder and waits (up to 20 s) until it has started.
    ///
    /// # Errors
    /// When it cannot be spawned or does not start.
    pub fn spawn(&mut self, spec: HolderSpec) -> Result<&Holder, ServerError> {
        let h = Holder::spawn(&self.bin, &spec, &self.namespace, TERM_MS, self.logs.path())?;
        self.holders.push(h);
        let n = self.holders.len() - 1;
        let ok = wait_for(&self.holders[n..], Duration::from_secs(20), |_, r| {
            matches!(r, Record::Start { .. })
        });
        if ok.is_none() {
            let err =
                std::fs::read_to_string(self.logs.path().join(format!("{}.err", spec.holder)))
                    .unwrap_or_default();
            return Err(ServerError::NotReady {
                what: format!("holder {}", spec.holder),
                secs: 20,
                log: err,
            });
        }
        if self.holders[n].shares_our_clock() == Some(false) {
            self.note("holder's CLOCK_MONOTONIC is not ours: overlaps cannot be judged");
        }
        Ok(&self.holders[n])
    }

    /// Waits until holder `i` has been granted `name` (a lease task's name), at most 10 s.
    pub fn wait_granted(&self, i: usize, name: &str) -> bool {
        let key = format!("{}/{name}", self.namespace);
        wait_for(
            &self.holders[i..=i],
            Duration::from_secs(10),
            |_, r| matches!(r, Record::Acquired { key: k, .. } if *k == key),
        )
        .is_some()
    }

    /// Records a note, stamped with the time since the scenario began.
    pub fn note(&mut self, text: &str) {
        let at = ms_between(self.t0, mono_ns()) / 1000.0;
        self.notes.push(format!("t={at:.2}s {text}"));
    }

    /// Sleeps.
    pub fn sleep_ms(&self, ms: u64) {
        std::thread::sleep(Duration::from_millis(ms));
    }

    /// Stops every holder, reads what the database kept and analyses the logs.
    #[must_use]
    pub fn finish(self, backend: &dyn Backend) -> Report {
        let logs: Vec<_> = self
            .holders
            .into_iter()
            .map(|h| h.finish(Duration::from_secs(15)))
            .collect();
        if let Some(dir) = std::env::var_os("LEASEHOLD_FAULTS_KEEP") {
            keep_logs(Path::new(&dir), self.backend, &self.scenario, &logs);
        }
        let (db, mut notes) = match backend.db_state(&self.namespace) {
            Ok(db) => (db, self.notes),
            Err(e) => {
                let mut n = self.notes;
                n.push(format!("could not read the database back: {e}"));
                (Default::default(), n)
            }
        };
        let mut report = analyse(
            &self.scenario,
            self.backend,
            &logs,
            &db,
            TERM_MS * 1_000_000,
        );
        if !report.unbelieved_grants.is_empty() {
            let list = report.unbelieved_grants.join(", ");
            notes.push(format!(
                "{} grant(s) the database kept that no holder was told of: {list}",
                report.unbelieved_grants.len()
            ));
        }
        if let Some(lag) = report.token_lag_after_resume_ms {
            notes.push(format!(
                "a cancellation token stayed live {lag:.1} ms after the holder resumed, past its grant (paused-process window)"
            ));
        }
        for o in &report.resume_overlaps {
            notes.push(format!(
                "paused-process window on {}: {} {:?} token {} (just resumed) and {} {:?} token {} for {:.1} ms",
                o.key, o.a.0, o.a.1, o.a.2, o.b.0, o.b.1, o.b.2, o.ms
            ));
        }
        for o in &report.overlaps {
            let seq: Vec<String> = db
                .grants
                .iter()
                .filter(|(k, _, _)| *k == o.key)
                .map(|(_, t, h)| format!("{t}:{h}"))
                .collect();
            notes.push(format!(
                "row versions of {} by the audit: {}",
                o.key,
                seq.join(" ")
            ));
        }
        for u in &report.unfinished {
            notes.push(format!("holder {u} did not finish its log"));
        }
        report.notes.append(&mut notes);
        let errors: Vec<String> = logs
            .iter()
            .flat_map(|l| {
                l.records.iter().filter_map(move |r| match r {
                    Record::Error { call, error, .. } => {
                        Some(format!("{} {call}: {error}", l.holder))
                    }
                    _ => None,
                })
            })
            .collect();
        let mut distinct: Vec<String> = Vec::new();
        for e in errors {
            let short: String = e.chars().take(160).collect();
            if !distinct.contains(&short) && distinct.len() < 6 {
                distinct.push(short);
            }
        }
        report
            .notes
            .extend(distinct.into_iter().map(|e| format!("error seen: {e}")));
        print_report(&report);
        report
    }
}

/// Writes every holder's records as JSON lines to `<dir>/<backend>-<scenario>-<holder>.jsonl`
/// (set `LEASEHOLD_FAULTS_KEEP=dir` to keep them).
fn keep_logs(dir: &Path, backend: &str, scenario: &str, logs: &[crate::oracle::HolderLog]) {
    let _ = std::fs::create_dir_all(dir);
    for l in logs {
        let body: String = l
            .records
            .iter()
            .filter_map(|r| serde_json::to_string(r).ok())
            .map(|s| s + "\n")
            .collect();
        let _ = std::fs::write(
            dir.join(format!("{backend}-{scenario}-{}.jsonl", l.holder)),
            body,
        );
    }
}

/// Prints a report: the table row, notes, violations.
pub fn print_report(r: &Report) {
    println!("{}", Report::header().lines().next().unwrap_or_default());
    println!("{}", r.row());
    for n in &r.notes {
        println!("    note: {n}");
    }
    for v in r.violations() {
        println!("    VIOLATION: {v}");
    }
}

/// Runs `f`; a setup failure becomes a report with that failure as a violation.
pub fn guarded(
    backend: &str,
    name: &str,
    f: impl FnOnce() -> Result<Report, ServerError>,
) -> Report {
    match f() {
        Ok(r) => r,
        Err(e) => {
            let r = Report {
                scenario: name.to_owned(),
                backend: backend.to_owned(),
                token_violations: vec![format!("scenario could not run: {e}")],
                ..Report::default()
            };
            print_report(&r);
            r
        }
    }
}

/// Runs the setup holder once per database: creates the lease table and the fenced-write table.
///
/// # Errors
/// The holder's stderr when it fails.
pub fn setup(bin: &Path, db: &dyn Backend) -> Result<(), ServerError> {
    let url = db.url();
    let url = url.as_str();
    let out = std::process::Command::new(bin)
        .args([
            "--setup",
            "--url",
            url,
            "--holder",
            "setup",
            "--namespace",
            "setup",
        ])
        .output()
        .map_err(|cause| ServerError::Io {
            what: "fault-holder --setup".into(),
            cause,
        })?;
    if out.status.success() {
        // The audit triggers record every row version the database committed, so a grant a
        // holder was told of and the database never kept is caught even when a later grant
        // overwrote the row. LEASEHOLD_FAULTS_AUDIT=0 leaves them out.
        if std::env::var("LEASEHOLD_FAULTS_AUDIT").map_or(true, |v| v.trim() != "0") {
            db.install_audit()?;
        }
        Ok(())
    } else {
        Err(ServerError::Command {
            command: "fault-holder --setup".into(),
            detail: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }
}

/// How a server goes away in [`server_down`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Down {
    /// Fast shutdown (PostgreSQL `-m fast`, MariaDB SIGTERM).
    Fast,
    /// SIGKILL.
    Kill,
}

/// Three holders; the server is stopped (or killed) for two terms and started again.
///
/// # Errors
/// Setup failures.
pub fn server_down(bin: &Path, db: &dyn Backend, how: Down) -> Result<Report, ServerError> {
    let pace = Pace::get();
    let name = match how {
        Down::Fast => "server_stop_fast",
        Down::Kill => "server_sigkill",
    };
    let mut run = Run::new(bin, db, name)?;
    let url = db.url();
    run.spawn(HolderSpec::new("a", &url))?;
    run.wait_granted(0, "n0");
    run.spawn(HolderSpec::new("b", &url))?;
    run.spawn(HolderSpec::new("c", &url))?;
    run.sleep_ms(pace.warm_ms);
    run.note(match how {
        Down::Fast => "server stopped (fast)",
        Down::Kill => "server SIGKILLed",
    });
    match how {
        Down::Fast => db.stop_fast()?,
        Down::Kill => db.kill9(),
    }
    run.sleep_ms(pace.fault_ms);
    db.start_again()?;
    run.note("server up again");
    run.sleep_ms(pace.tail_ms);
    Ok(run.finish(db))
}

/// How the network heals in [`blackhole`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heal {
    /// Held bytes flow on (late statements arrive): `FaultProxy` `Blackhole` → `Pass`.
    Resume,
    /// Open connections stay dead, new ones work.
    NewOnly,
}

/// Holder `a` (the first holder of everything) through a proxy, `b` direct; `a`'s traffic is
/// blackholed for two terms, then healed.
///
/// # Errors
/// Setup failures.
pub fn blackhole(bin: &Path, db: &dyn Backend, heal: Heal) -> Result<Report, ServerError> {
    let pace = Pace::get();
    let upstream = db.upstream().ok_or_else(|| ServerError::Command {
        command: "blackhole".into(),
        detail: "no network between holder and database".into(),
    })?;
    let name = match heal {
        Heal::Resume => "blackhole_then_resume",
        Heal::NewOnly => "blackhole_then_only_new_connections",
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|cause| ServerError::Io {
            what: "proxy runtime".into(),
            cause,
        })?;
    let url = db.url();
    let mut run = Run::new(bin, db, name)?;
    match heal {
        Heal::Resume => {
            let proxy = rt
                .block_on(leasehold_testkit::FaultProxy::start(upstream))
                .map_err(|cause| ServerError::Io {
                    what: "FaultProxy".into(),
                    cause,
                })?;
            run.spawn(HolderSpec::new("a", &proxy.url_for(&url, upstream)))?;
            run.wait_granted(0, "n0");
            run.spawn(HolderSpec::new("b", &url))?;
            run.sleep_ms(pace.warm_ms);
            run.note("a blackholed (FaultProxy)");
            proxy.set(leasehold_testkit::Fault::Blackhole);
            run.sleep_ms(pace.fault_ms);
            proxy.set(leasehold_testkit::Fault::Pass);
            run.note("a's connections resume (held bytes delivered)");
            run.sleep_ms(pace.tail_ms);
            let report = run.finish(db);
            drop(proxy);
            Ok(report)
        }
        Heal::NewOnly => {
            let proxy = rt
                .block_on(leasehold_testkit::FaultProxy::start(upstream))
                .map_err(|cause| ServerError::Io {
                    what: "FaultProxy".into(),
                    cause,
                })?;
            run.spawn(HolderSpec::new("a", &proxy.url_for(&url, upstream)))?;
            run.wait_granted(0, "n0");
            run.spawn(HolderSpec::new("b", &url))?;
            run.sleep_ms(pace.warm_ms);
            run.note("a blackholed");
            proxy.set(leasehold_testkit::Fault::Partition);
            run.sleep_ms(pace.fault_ms);
            proxy.heal_new_only();
            run.note("healed for new connections only");
            run.sleep_ms(pace.tail_ms + TERM_MS);
            let report = run.finish(db);
            drop(proxy);
            Ok(report)
        }
    }
}

/// Two holders whose fenced transactions stay open 300 ms; three times, the holder of `n0` is frozen
/// with SIGSTOP inside one for two terms, then thawed.
///
/// # Errors
/// Setup failures.
pub fn sigstop_in_fenced_txn(bin: &Path, db: &dyn Backend) -> Result<Report, ServerError> {
    let pace = Pace::get();
    let mut run = Run::new(bin, db, "sigstop_in_fenced_txn")?;
    let url = db.url();
    let spec = |h: &str| HolderSpec::new(h, &url).arg(&["--txn-hold-ms", "300"]);
    run.spawn(spec("a"))?;
    run.wait_granted(0, "n0");
    run.spawn(spec("b"))?;
    run.sleep_ms(1000);
    let key = format!("{}/n0", run.namespace);
    for _round in 0..pace.freezes {
        let since = mono_ns();
        let who = wait_for(
            &run.holders,
            Duration::from_secs(5),
            |_, r| matches!(r, Record::TxnOpen { key: k, at, .. } if *k == key && *at > since),
        );
        let Some(i) = who else {
            run.note("no fenced transaction opened on n0 within 5 s: nobody frozen");
            continue;
        };
        run.holders[i].freeze();
        let id = run.holders[i].id.clone();
        run.note(&format!(
            "{id} SIGSTOPped inside a fenced transaction on n0"
        ));
        run.sleep_ms(pace.fault_ms);
        run.holders[i].thaw();
        run.note(&format!("{id} SIGCONTinued"));
        run.sleep_ms(2500);
    }
    run.sleep_ms(1000);
    Ok(run.finish(db))
}

/// Two holders; another session holds every lease row `FOR UPDATE` (SQLite: `BEGIN
/// EXCLUSIVE` from another process) for three terms.
///
/// # Errors
/// Setup failures.
pub fn rows_locked(bin: &Path, db: &dyn Backend) -> Result<Report, ServerError> {
    let pace = Pace::get();
    let name = if db.name() == "sqlite" {
        "file_locked_exclusive"
    } else {
        "rows_held_for_update"
    };
    let mut run = Run::new(bin, db, name)?;
    let url = db.url();
    run.spawn(HolderSpec::new("a", &url))?;
    run.wait_granted(0, "n0");
    run.spawn(HolderSpec::new("b", &url))?;
    run.sleep_ms(pace.warm_ms);
    let lock_ns = format!("{}-lock", run.namespace);
    let session = db.lock_rows(&[run.namespace.as_str(), lock_ns.as_str()])?;
    run.sleep_ms(200);
    let said = session.output();
    if said.to_ascii_lowercase().contains("error") {
        return Err(ServerError::Command {
            command: "lock the lease rows from another session".into(),
            detail: said,
        });
    }
    run.note("rows locked by another session");
    run.sleep_ms(pace.fault_ms + TERM_MS);
    let mut session = session;
    let _ = session.send("COMMIT;");
    session.finish();
    run.note("other session committed");
    run.sleep_ms(pace.tail_ms);
    Ok(run.finish(db))
}

/// Two holders; the database refuses writes for two terms.
///
/// # Errors
/// Setup failures.
pub fn read_only(bin: &Path, db: &dyn Backend) -> Result<Report, ServerError> {
    let pace = Pace::get();
    let mut run = Run::new(bin, db, "read_only")?;
    let url = db.url();
    run.spawn(HolderSpec::new("a", &url))?;
    run.wait_granted(0, "n0");
    run.spawn(HolderSpec::new("b", &url))?;
    run.sleep_ms(pace.warm_ms);
    db.read_only(true)?;
    run.note("database read-only");
    run.sleep_ms(pace.fault_ms);
    db.read_only(false)?;
    run.note("database writable again");
    run.sleep_ms(pace.tail_ms);
    Ok(run.finish(db))
}

/// Three holders while 32 clients write as fast as they can for most of the run.
///
/// # Errors
/// Setup failures.
pub fn saturated(bin: &Path, db: &dyn Backend) -> Result<Report, ServerError> {
    let pace = Pace::get();
    let mut run = Run::new(bin, db, "saturated")?;
    let url = db.url();
    run.spawn(HolderSpec::new("a", &url))?;
    run.wait_granted(0, "n0");
    run.spawn(HolderSpec::new("b", &url))?;
    run.spawn(HolderSpec::new("c", &url))?;
    run.sleep_ms(1000);
    let load_ms = 2 * pace.fault_ms;
    let mut load = db.saturate(32, u32::try_from(load_ms / 1000 + 1).unwrap_or(60))?;
    run.note("32 writing clients started");
    run.sleep_ms(load_ms);
    let _ = load.kill();
    let _ = load.wait();
    run.note("load stopped");
    run.sleep_ms(TERM_MS);
    Ok(run.finish(db))
}

/// SQLite on a tmpfs of its own, filled to the last byte for two terms, then freed.
///
/// # Errors
/// Setup failures.
pub fn disk_full(bin: &Path, db: &crate::servers::SqliteDb) -> Result<Report, ServerError> {
    let pace = Pace::get();
    let mut run = Run::new(bin, db, "disk_full")?;
    let url = crate::servers::SqliteDb::url(db);
    run.spawn(HolderSpec::new("a", &url))?;
    run.wait_granted(0, "n0");
    run.spawn(HolderSpec::new("b", &url))?;
    run.sleep_ms(pace.warm_ms);
    let bytes = db.fill_disk()?;
    run.note(&format!("disk full ({bytes} filler bytes)"));
    run.sleep_ms(pace.fault_ms);
    db.free_disk();
    run.note("disk space freed");
    run.sleep_ms(pace.tail_ms);
    Ok(run.finish(db))
}

/// How the standby of [`failover`] replicates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replication {
    /// `synchronous_standby_names` names the standby: a commit returns once the standby has
    /// flushed it.
    Synchronous,
    /// Asynchronous streaming; before the failover the replication connection is blackholed
    /// for `lag_ms` (replication lag), so the commits the primary acknowledged meanwhile are
    /// lost.
    Asynchronous {
        /// How long the standby falls behind before the primary dies.
        lag_ms: u64,
    },
}

/// A PostgreSQL primary with a streaming standby, three holders connected through a forwarder
/// (a virtual IP); the primary is SIGKILLed, the standby promoted, the forwarder switched to it.
///
/// # Errors
/// Setup failures.
pub fn failover(bin: &Path, replication: Replication) -> Result<Report, ServerError> {
    use crate::servers::{Postgres, loopback};
    let pace = Pace::get();
    let (name, settings): (&str, &[&str]) = match replication {
        Replication::Synchronous => ("failover_synchronous", &["synchronous_commit=on"]),
        Replication::Asynchronous { .. } => ("failover_asynchronous", &["synchronous_commit=on"]),
    };
    let primary = Postgres::start_with(settings)?;
    setup(bin, &primary)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|cause| ServerError::Io {
            what: "proxy runtime".into(),
            cause,
        })?;
    let up = loopback(primary.port());
    let start_proxy = |to| {
        rt.block_on(leasehold_testkit::FaultProxy::start(to))
            .map_err(|cause| ServerError::Io {
                what: "FaultProxy".into(),
                cause,
            })
    };
    // The standby replicates through a forwarder of its own, so the lag can be made real.
    let wire = start_proxy(up)?;
    let standby = Postgres::standby_of(wire.addr().port(), "standby1")?;
    let streaming = (0..100).any(|_| {
        let n = primary.psql(
            "postgres",
            "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'",
        );
        if n.is_ok_and(|n| n.trim() == "1") {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
        false
    });
    if !streaming {
        return Err(ServerError::NotReady {
            what: "the standby's streaming".into(),
            secs: 10,
            log: String::new(),
        });
    }
    // Named only now: with no standby connected a synchronous commit would wait forever.
    if replication == Replication::Synchronous {
        primary.psql(
            "postgres",
            "ALTER SYSTEM SET synchronous_standby_names = 'standby1'",
        )?;
        primary.psql("postgres", "SELECT pg_reload_conf()")?;
        let sync = (0..100).any(|_| {
            let s = primary.psql(
                "postgres",
                "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'",
            );
            if s.is_ok_and(|s| s.trim() == "1") {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
            false
        });
        if !sync {
            return Err(ServerError::NotReady {
                what: "synchronous replication".into(),
                secs: 10,
                log: String::new(),
            });
        }
    }
    let vip = start_proxy(up)?;
    let url = vip.url_for(&primary.url(), up);
    let mut run = Run::new(bin, &standby, name)?;
    run.spawn(HolderSpec::new("a", &url))?;
    run.wait_granted(0, "n0");
    run.spawn(HolderSpec::new("b", &url))?;
    run.spawn(HolderSpec::new("c", &url))?;
    run.sleep_ms(2000);
    if let Replication::Asynchronous { lag_ms } = replication {
        wire.set(leasehold_testkit::Fault::Partition);
        run.note(&format!(
            "replication connection blackholed for {lag_ms} ms"
        ));
        run.sleep_ms(lag_ms);
    }
    primary.kill9();
    run.note("primary SIGKILLed");
    standby.promote()?;
    vip.switch_upstream(loopback(standby.port()));
    let promoted = mono_ns();
    run.note("standby promoted, forwarder switched to it");
    // A holder that starts now (a restarted instance) knows nothing of the old primary's
    // grants: it is the one that meets a grant the new primary lost.
    run.spawn(HolderSpec::new("d", &url))?;
    run.note("holder d started on the new primary");
    run.sleep_ms(pace.tail_ms);
    // The service recovers by itself: some holder is granted a name on the new primary.
    let recovered = wait_for(
        &run.holders,
        Duration::from_secs(3 * TERM_MS / 1000),
        |_, r| matches!(r, Record::Acquired { at, .. } if *at > promoted),
    )
    .is_some();
    let mut report = run.finish(&standby);
    if !recovered {
        report
            .unrecovered
            .push("no holder was granted anything on the promoted standby".into());
    }
    drop((vip, wire, primary));
    Ok(report)
}
