//! The holder process (`fault-holder`): one `LeaseService` competing for a few names, taking a
//! lock in a loop, writing through fences, and logging every belief interval of every signal.
//!
//! A sampler thread reads every belief signal every [`HolderArgs::sample_us`] (default 2 ms),
//! stamping each sample with [`mono_ns`] before and after, and logs a [`Record::Belief`] when an
//! interval closes. It is a plain thread, not a task, so a busy runtime does not slow it.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use leasehold::store::StoreBuilder;
use leasehold::store::sea_orm::ConnectionTrait;
use leasehold::{
    CancellationToken, EventKind, LeaseConfig, LeaseService, LeaseTask, LeaseTaskOptions,
    LockError, LockGuard,
};

use crate::clock::mono_ns;
use crate::record::{Record, Signal};

/// The table fenced writes go to, in the lease database.
pub const WRITES_TABLE: &str = "fault_writes";

/// Arguments of `fault-holder`.
#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "fault-holder",
    about = "A lease holder that logs every belief signal"
)]
pub struct HolderArgs {
    /// Database URL (possibly through a proxy).
    #[arg(long)]
    pub url: String,
    /// Holder id.
    #[arg(long)]
    pub holder: String,
    /// Namespace of the lease tasks; locks use `<namespace>-lock`.
    #[arg(long)]
    pub namespace: String,
    /// Names to run lease tasks for (comma separated).
    #[arg(long, value_delimiter = ',', default_value = "n0,n1")]
    pub names: Vec<String>,
    /// Lock names to take in a loop with `try_locker` (comma separated; empty for none).
    #[arg(long, value_delimiter = ',', default_value = "l0")]
    pub locks: Vec<String>,
    /// Term (and lock ttl) in milliseconds.
    #[arg(long, default_value_t = 1500)]
    pub term_ms: u64,
    /// Write through `begin_fenced` while believing.
    #[arg(long)]
    pub fenced: bool,
    /// Sleep this long inside each fenced transaction before committing.
    #[arg(long, default_value_t = 0)]
    pub txn_hold_ms: u64,
    /// Run this long, then shut down (or until stdin closes).
    #[arg(long, default_value_t = 10.0)]
    pub secs: f64,
    /// Sampling period in microseconds.
    #[arg(long, default_value_t = 2000)]
    pub sample_us: u64,
    /// Only create the lease table and the fenced-write table, then exit.
    #[arg(long)]
    pub setup: bool,
}

impl HolderArgs {
    /// The lease configuration of this holder: term, renew at term/3, retry 100 ms, margin
    /// term/10, request timeout term/4.
    #[must_use]
    pub fn config(&self) -> LeaseConfig {
        let term = Duration::from_millis(self.term_ms);
        LeaseConfig::default()
            .with_term(term)
            .with_renew_interval(term / 3)
            .with_retry_interval(Duration::from_millis(100).min(term / 6))
            .with_safety_margin(term / 10)
            .with_request_timeout(term / 4)
    }
}

/// Writes records as JSON lines on stdout.
#[derive(Debug, Default)]
struct Log;

impl Log {
    fn emit(&self, record: &Record) {
        let Ok(line) = serde_json::to_string(record) else {
            return;
        };
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }
}

/// The CREATE TABLE of [`WRITES_TABLE`] for the backend of `url`.
fn writes_ddl(url: &str) -> String {
    let id = if url.starts_with("postgres") {
        "BIGSERIAL PRIMARY KEY"
    } else if url.starts_with("mysql") {
        "BIGINT AUTO_INCREMENT PRIMARY KEY"
    } else {
        "INTEGER PRIMARY KEY AUTOINCREMENT"
    };
    format!(
        "CREATE TABLE IF NOT EXISTS {WRITES_TABLE} (id {id}, lease_key VARCHAR(255) NOT NULL, \
         token BIGINT NOT NULL, holder VARCHAR(255) NOT NULL, began BIGINT NOT NULL)"
    )
}

/// Runs the holder; returns the process exit code.
#[must_use]
pub fn run(args: HolderArgs) -> i32 {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("fault-holder: runtime: {e}");
            return 2;
        }
    };
    runtime.block_on(async move {
        if args.setup {
            return setup(&args).await;
        }
        hold(args).await
    })
}

async fn setup(args: &HolderArgs) -> i32 {
    let store = match StoreBuilder::new(&args.url).connect().await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("fault-holder --setup: {e}");
            return 2;
        }
    };
    match store
        .connection()
        .execute_unprepared(&writes_ddl(&args.url))
        .await
    {
        Ok(_) => 0,
        Err(e) => {
            eprintln!("fault-holder --setup: {WRITES_TABLE}: {e}");
            2
        }
    }
}

/// The shared belief sources the sampler reads.
#[derive(Default)]
struct Watched {
    tasks: Vec<(String, LeaseTask)>,
    /// lock name -> its live guard.
    guards: Mutex<HashMap<String, Arc<LockGuard>>>,
}

async fn hold(args: HolderArgs) -> i32 {
    let log = Arc::new(Log);
    let service = match LeaseService::builder(&args.url)
        .namespace(&args.namespace)
        .holder_id(&args.holder)
        .config(args.config())
        .build()
        .await
    {
        Ok(s) => s,
        Err(e) => {
            eprintln!("fault-holder {}: build: {e}", args.holder);
            return 2;
        }
    };
    log.emit(&Record::Start {
        holder: args.holder.clone(),
        pid: std::process::id(),
        at: mono_ns(),
    });
    let stop = Arc::new(AtomicBool::new(false));
    spawn_stdin_watch(Arc::clone(&stop));
    spawn_events(&service, Arc::clone(&log));

    let lock_ns = format!("{}-lock", args.namespace);
    let tenures: Arc<Mutex<HashMap<String, (i64, CancellationToken)>>> = Arc::default();
    let mut tasks = Vec::new();
    for name in args.names.iter().filter(|n| !n.is_empty()) {
        let (tenures, name_c) = (Arc::clone(&tenures), name.clone());
        let options = LeaseTaskOptions::new().on_acquired(move |token, cancel| {
            tenures
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(name_c.clone(), (token.get(), cancel));
        });
        match service.start_lease_task(name, options).await {
            Ok(task) => tasks.push((name.clone(), task)),
            Err(e) => {
                eprintln!("fault-holder {}: start {name}: {e}", args.holder);
                return 2;
            }
        }
    }
    let watched = Arc::new(Watched {
        tasks,
        guards: Mutex::default(),
    });
    // The callback map is the one the sampler reads.
    let watched_tenures = Arc::clone(&tenures);
    let sampler = {
        let (watched, log, stop) = (
            Arc::clone(&watched),
            Arc::clone(&log),
            Arc::new(AtomicBool::new(false)),
        );
        let ns = args.namespace.clone();
        let lock_ns = lock_ns.clone();
        let period = Duration::from_micros(args.sample_us.max(100));
        let stop_c = Arc::clone(&stop);
        let service = service.clone();
        let handle = std::thread::spawn(move || {
            sample_loop(
                &service,
                &watched,
                &watched_tenures,
                &ns,
                &lock_ns,
                &log,
                &stop_c,
                period,
            );
        });
        (handle, stop)
    };

    let mut workers = Vec::new();
    if args.fenced {
        for (name, task) in &watched.tasks {
            workers.push(tokio::spawn(fenced_task_loop(
                service.clone(),
                args.clone(),
                name.clone(),
                task.clone(),
                Arc::clone(&log),
                Arc::clone(&stop),
            )));
        }
    }
    for name in args.locks.iter().filter(|n| !n.is_empty()) {
        workers.push(tokio::spawn(lock_loop(
            service.clone(),
            args.clone(),
            lock_ns.clone(),
            name.clone(),
            Arc::clone(&watched),
            Arc::clone(&log),
            Arc::clone(&stop),
        )));
    }

    let until = crate::clock::deadline(Duration::from_secs_f64(args.secs.max(0.0)));
    while !crate::clock::passed(until) && !stop.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, Ordering::SeqCst);
    let term = Duration::from_millis(args.term_ms);
    for w in workers {
        let _ = tokio::time::timeout(term * 2, w).await;
    }
    if let Err(e) = tokio::time::timeout(term * 2, service.shutdown())
        .await
        .unwrap_or_else(|_| Ok(0))
    {
        log.emit(&Record::Error {
            call: "shutdown".into(),
            error: e.to_string(),
            at: mono_ns(),
        });
    }
    // A few more samples see the end of every belief, then the sampler flushes.
    std::thread::sleep(Duration::from_millis(20));
    sampler.1.store(true, Ordering::SeqCst);
    let _ = sampler.0.join();
    log.emit(&Record::End { at: mono_ns() });
    0
}

/// Sets `stop` when stdin closes (the harness went away or asked us to stop).
fn spawn_stdin_watch(stop: Arc<AtomicBool>) {
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        let mut line = String::new();
        while let Ok(n) = stdin.lock().read_line(&mut line) {
            if n == 0 {
                break;
            }
            line.clear();
        }
        stop.store(true, Ordering::SeqCst);
    });
}

fn spawn_events(service: &LeaseService, log: Arc<Log>) {
    let mut rx = service.subscribe();
    tokio::spawn(async move {
        loop {
            let event = match rx.recv().await {
                Ok(e) => e,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    log.emit(&Record::Error {
                        call: "subscribe".into(),
                        error: format!("lagged by {n} events"),
                        at: mono_ns(),
                    });
                    continue;
                }
                Err(_) => return,
            };
            let at = mono_ns();
            let key = event.key().to_string();
            let token = event.token;
            let record = match event.what {
                EventKind::Acquired => Record::Acquired {
                    key,
                    token: token.get(),
                    at,
                },
                EventKind::Renewed => Record::Renewed {
                    key,
                    token: token.get(),
                    sent: None,
                    at,
                },
                EventKind::Lost(reason) => Record::Lost {
                    key,
                    token: token.get(),
                    reason: format!("{reason:?}"),
                    at,
                },
                _ => continue,
            };
            log.emit(&record);
        }
    });
}

/// An open belief interval of one signal.
struct Open {
    token: i64,
    start: u64,
    last: u64,
    after_stall: bool,
}

/// A gap between two samples longer than this is a stall (SIGSTOP, or the thread not
/// scheduled): every open interval is closed before it and reopened after, because nothing is
/// known about the beliefs in between, and a frozen process cannot act on them.
const STALL_NS: u64 = 50_000_000;

#[allow(clippy::too_many_arguments)]
fn sample_loop(
    service: &LeaseService,
    watched: &Watched,
    tenures: &Mutex<HashMap<String, (i64, CancellationToken)>>,
    ns: &str,
    lock_ns: &str,
    log: &Log,
    stop: &AtomicBool,
    period: Duration,
) {
    let mut open: HashMap<(Signal, String), Open> = HashMap::new();
    // Each lock tenure's last seen local deadline: a later one is a renewal that landed, also
    // one the actor retried after `renew()` had answered its timeout, which no call logs.
    let mut deadlines: HashMap<(String, i64), tokio::time::Instant> = HashMap::new();
    let mut sample: Vec<(Signal, String, Option<i64>)> = Vec::new();
    let mut prev_t0 = mono_ns();
    loop {
        let last = stop.load(Ordering::SeqCst);
        sample.clear();
        let t0 = mono_ns();
        let stalled = t0.saturating_sub(prev_t0) > STALL_NS;
        prev_t0 = t0;
        if stalled {
            for (slot, o) in open.drain() {
                close(log, &slot, &o, None);
            }
        }
        for (name, task) in &watched.tasks {
            let key = format!("{ns}/{name}");
            let has = service.has_lease(name);
            let token = task.token().map(|t| t.get());
            let tenure = tenures
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(name)
                .filter(|(_, c)| !c.is_cancelled())
                .map(|(t, _)| *t);
            let best = token.or(tenure).unwrap_or(0);
            sample.push((Signal::HasLease, key.clone(), has.then_some(best)));
            sample.push((Signal::TaskToken, key.clone(), token));
            sample.push((Signal::TenureToken, key, tenure));
        }
        {
            let guards = watched
                .guards
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            for (name, guard) in guards.iter() {
                let key = format!("{lock_ns}/{name}");
                let token = guard.token().get();
                sample.push((
                    Signal::GuardHeld,
                    key.clone(),
                    guard.is_held().then_some(token),
                ));
                let live = !guard.cancellation_token().is_cancelled();
                if let Some(deadline) = guard.deadline() {
                    let seen = deadlines.insert((key.clone(), token), deadline);
                    if seen.is_some_and(|before| deadline > before) {
                        log.emit(&Record::Renewed {
                            key: key.clone(),
                            token,
                            sent: None,
                            at: t0,
                        });
                    }
                }
                sample.push((Signal::GuardToken, key, live.then_some(token)));
            }
        }
        let t1 = mono_ns();
        // Signals not sampled this time (a guard gone) count as not believing.
        let mut seen: Vec<(Signal, String)> = Vec::with_capacity(sample.len());
        for (signal, key, value) in sample.drain(..) {
            seen.push((signal, key.clone()));
            let slot = (signal, key);
            match (open.get_mut(&slot), value) {
                (Some(o), Some(tok)) if o.token == tok => o.last = t0,
                (cur, value) => {
                    if cur.is_some()
                        && let Some(o) = open.remove(&slot)
                    {
                        close(log, &slot, &o, Some(t0));
                    }
                    if let Some(token) = value {
                        open.insert(
                            slot,
                            Open {
                                token,
                                start: t1,
                                last: t0,
                                after_stall: stalled,
                            },
                        );
                    }
                }
            }
        }
        let gone: Vec<(Signal, String)> =
            open.keys().filter(|k| !seen.contains(k)).cloned().collect();
        for slot in gone {
            if let Some(o) = open.remove(&slot) {
                close(log, &slot, &o, Some(t0));
            }
        }
        if last {
            for (slot, o) in open.drain() {
                close(log, &slot, &o, None);
            }
            return;
        }
        std::thread::sleep(period);
    }
}

fn close(log: &Log, slot: &(Signal, String), o: &Open, next: Option<u64>) {
    log.emit(&Record::Belief {
        signal: slot.0,
        key: slot.1.clone(),
        token: o.token,
        start: o.start,
        end: o.last,
        next,
        after_stall: o.after_stall,
    });
}

/// Inserts one row under a fenced transaction and commits, logging every step.
async fn write_one(
    txn: leasehold::store::FencedTransaction,
    key: &str,
    holder: &str,
    began: u64,
    hold: Duration,
    log: &Log,
) -> String {
    let token = txn.token().get();
    let sql = format!(
        "INSERT INTO {WRITES_TABLE} (lease_key, token, holder, began) VALUES ('{key}', {token}, '{holder}', {began})"
    );
    if let Err(e) = txn.execute_unprepared(&sql).await {
        return format!("insert: {e}");
    }
    log.emit(&Record::TxnOpen {
        key: key.to_owned(),
        token,
        at: mono_ns(),
    });
    if !hold.is_zero() {
        tokio::time::sleep(hold).await;
    }
    match txn.commit().await {
        Ok(()) => "committed".into(),
        Err(e) => format!("commit: {e}"),
    }
}

async fn fenced_task_loop(
    service: LeaseService,
    args: HolderArgs,
    name: String,
    task: LeaseTask,
    log: Arc<Log>,
    stop: Arc<AtomicBool>,
) {
    let key = format!("{}/{name}", args.namespace);
    let term = Duration::from_millis(args.term_ms);
    let hold = Duration::from_millis(args.txn_hold_ms);
    while !stop.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let Some(token) = task.token() else { continue };
        let began = mono_ns();
        let attempt = async {
            match service
                .locks()
                .begin_fenced(&args.namespace, &name, token)
                .await
            {
                Ok(Some(txn)) => write_one(txn, &key, &args.holder, began, hold, &log).await,
                Ok(None) => "refused".into(),
                Err(e) => format!("begin: {e}"),
            }
        };
        let outcome = tokio::time::timeout(term * 3 + hold, attempt)
            .await
            .unwrap_or_else(|_| "timed out".into());
        log.emit(&Record::Write {
            key: key.clone(),
            token: token.get(),
            outcome,
            began,
            at: mono_ns(),
        });
    }
}

async fn lock_loop(
    service: LeaseService,
    args: HolderArgs,
    lock_ns: String,
    name: String,
    watched: Arc<Watched>,
    log: Arc<Log>,
    stop: Arc<AtomicBool>,
) {
    let key = format!("{lock_ns}/{name}");
    let term = Duration::from_millis(args.term_ms);
    let hold = Duration::from_millis(args.txn_hold_ms);
    while !stop.load(Ordering::SeqCst) {
        let got = tokio::time::timeout(
            term * 3,
            service.try_locker(&lock_ns, &name, Some(term), term),
        )
        .await;
        let guard = match got {
            Ok(Ok(Some(g))) => g,
            Ok(Ok(None)) => continue,
            Ok(Err(e)) => {
                log.emit(&Record::Error {
                    call: "try_locker".into(),
                    error: e.to_string(),
                    at: mono_ns(),
                });
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            Err(_) => {
                log.emit(&Record::Error {
                    call: "try_locker".into(),
                    error: "no answer within 3 terms".into(),
                    at: mono_ns(),
                });
                continue;
            }
        };
        let token = guard.token().get();
        log.emit(&Record::Acquired {
            key: key.clone(),
            token,
            at: mono_ns(),
        });
        let guard = Arc::new(guard);
        watched
            .guards
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.clone(), Arc::clone(&guard));
        // Hold about one term: renew at ttl/3, write through the fence after each renewal.
        for _ in 0..3 {
            if stop.load(Ordering::SeqCst) {
                break;
            }
            tokio::time::sleep(term / 3).await;
            let sent = mono_ns();
            match tokio::time::timeout(term, guard.renew()).await {
                Ok(Ok(())) => log.emit(&Record::Renewed {
                    key: key.clone(),
                    token,
                    sent: Some(sent),
                    at: mono_ns(),
                }),
                Ok(Err(LockError::LockLost { .. })) => {
                    log.emit(&Record::Lost {
                        key: key.clone(),
                        token,
                        reason: "renew: lock lost".into(),
                        at: mono_ns(),
                    });
                    break;
                }
                Ok(Err(e)) => log.emit(&Record::Error {
                    call: "renew".into(),
                    error: e.to_string(),
                    at: mono_ns(),
                }),
                Err(_) => log.emit(&Record::Error {
                    call: "renew".into(),
                    error: "no answer within a term".into(),
                    at: mono_ns(),
                }),
            }
            if args.fenced && guard.is_held() {
                let began = mono_ns();
                let attempt = async {
                    match guard.begin_fenced().await {
                        Ok(Some(txn)) => {
                            write_one(txn, &key, &args.holder, began, hold, &log).await
                        }
                        Ok(None) => "refused".into(),
                        Err(e) => format!("begin: {e}"),
                    }
                };
                let outcome = tokio::time::timeout(term * 3 + hold, attempt)
                    .await
                    .unwrap_or_else(|_| "timed out".into());
                log.emit(&Record::Write {
                    key: key.clone(),
                    token,
                    outcome,
                    began,
                    at: mono_ns(),
                });
            }
        }
        let removed = watched
            .guards
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&name);
        drop(removed);
        if let Ok(guard) = Arc::try_unwrap(guard) {
            match tokio::time::timeout(term, guard.unlock()).await {
                Ok(Ok(())) => {}
                Ok(Err(LockError::LockLost { .. })) => log.emit(&Record::Lost {
                    key: key.clone(),
                    token,
                    reason: "unlock: lock had been lost".into(),
                    at: mono_ns(),
                }),
                Ok(Err(e)) => log.emit(&Record::Error {
                    call: "unlock".into(),
                    error: e.to_string(),
                    at: mono_ns(),
                }),
                Err(_) => log.emit(&Record::Error {
                    call: "unlock".into(),
                    error: "no answer within a term".into(),
                    at: mono_ns(),
                }),
            }
        }
        let pause = rand::random_range(50..250);
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
}
