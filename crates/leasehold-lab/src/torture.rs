//! `leasehold-lab torture`: worker processes compete for a few names under SIGKILL and SIGSTOP, log
//! every write they make while they believe they hold a name, and the log is checked at the end.
//! See [`check`] for what is a violation and why.

mod check;
mod log;
mod worker;

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use leasehold::LeaseConfig;
use leasehold_core::{Clock, MonotonicClock};
use leasehold_storage::{SeaOrmStore, StoreBuilder, StoreError};
use rand::RngExt;
use tokio::time::Instant;

use crate::duration;

/// Exit code: the log shows a violation.
pub const VIOLATION: u8 = 4;

/// Arguments of `leasehold-lab torture`.
#[derive(Debug, clap::Args)]
pub struct TortureArgs {
    /// Worker processes.
    #[arg(long, default_value_t = 3)]
    pub procs: u32,
    /// Lease names they compete for.
    #[arg(long, default_value_t = 2)]
    pub names: u32,
    /// How long to run, in seconds.
    #[arg(long, default_value_t = 20)]
    pub secs: u64,
    /// SIGKILL a random worker now and then, and start a new one (a new holder) in its place.
    #[arg(long)]
    pub kill: bool,
    /// SIGSTOP a random worker for longer than the term, then SIGCONT it.
    #[arg(long)]
    pub pause: bool,
    /// Lease term of the workers (renew every third, retry every tenth).
    #[arg(long, default_value = "2s", value_parser = duration::parse, allow_hyphen_values = true)]
    pub term: Duration,
}

/// Arguments of the hidden `leasehold-lab torture-worker`.
#[derive(Debug, Clone, clap::Args)]
pub struct WorkerArgs {
    /// Namespace of the run.
    #[arg(long)]
    pub namespace: String,
    /// Holder id of this worker.
    #[arg(long)]
    pub holder: String,
    /// Names to compete for (`n0`, `n1`, …).
    #[arg(long)]
    pub names: u32,
    /// Lease term.
    #[arg(long, value_parser = duration::parse)]
    pub term: Duration,
}

/// The workers' lease configuration for `term`.
pub fn lease_config(term: Duration) -> LeaseConfig {
    LeaseConfig::default()
        .with_term(term)
        .with_retry_interval(term / 10)
}

/// The `i`-th lease name.
pub fn name_of(i: u32) -> String {
    format!("n{i}")
}

/// Runs a worker (the hidden subcommand). Returns the exit code.
pub async fn run_worker(db: &str, args: WorkerArgs) -> u8 {
    match worker::run(db, args).await {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("leasehold-lab: {e}");
            1
        }
    }
}

/// Runs the torture and prints the figures. Returns the exit code.
pub async fn run(db: &str, args: TortureArgs) -> u8 {
    match torture(db, &args).await {
        Ok(code) => code,
        Err(Failure::Args(msg)) => {
            eprintln!("leasehold-lab: {msg}");
            2
        }
        Err(Failure::Store(e)) => {
            eprintln!("leasehold-lab: {e}");
            1
        }
        Err(Failure::Spawn(e)) => {
            eprintln!("leasehold-lab: cannot start a torture worker: {e}");
            1
        }
    }
}

enum Failure {
    Args(String),
    Store(StoreError),
    Spawn(std::io::Error),
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Invalid(_) | StoreError::UnsupportedUrl { .. } => Self::Args(e.to_string()),
            other => Self::Store(other),
        }
    }
}

/// The live worker processes, by slot.
struct Workers {
    db: String,
    namespace: String,
    names: u32,
    term: Duration,
    slots: Vec<Child>,
    incarnations: Vec<u32>,
}

impl Workers {
    fn spawn(&mut self, slot: usize) -> Result<Child, Failure> {
        let generation = self.incarnations[slot];
        self.incarnations[slot] += 1;
        let exe = std::env::current_exe().map_err(Failure::Spawn)?;
        Command::new(exe)
            .arg("--db")
            .arg(&self.db)
            .arg("torture-worker")
            .arg("--namespace")
            .arg(&self.namespace)
            .arg("--holder")
            .arg(format!("{}.w{slot}.{generation}", self.namespace))
            .arg("--names")
            .arg(self.names.to_string())
            .arg("--term")
            .arg(format!("{}ms", self.term.as_millis()))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(Failure::Spawn)
    }

    /// The slot of the current incarnation holding `holder`'s id, if it is one of ours.
    fn slot_of(&self, holder: &str) -> Option<usize> {
        let rest = holder.strip_prefix(&self.namespace)?.strip_prefix(".w")?;
        let (slot, generation) = rest.split_once('.')?;
        let (slot, generation): (usize, u32) = (slot.parse().ok()?, generation.parse().ok()?);
        (self.incarnations.get(slot)? == &(generation + 1)).then_some(slot)
    }

    fn stop_all(&mut self) {
        for child in &mut self.slots {
            signal("-CONT", child.id());
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Sends a signal with the `kill` binary (the crate forbids unsafe code, so no libc).
fn signal(sig: &str, pid: u32) -> bool {
    Command::new("kill")
        .arg(sig)
        .arg(pid.to_string())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[allow(clippy::disallowed_methods)] // a fresh namespace per run only needs a unique-ish stamp
fn stamp() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

async fn torture(db: &str, args: &TortureArgs) -> Result<u8, Failure> {
    if args.procs < 2 || args.procs > 64 {
        return Err(Failure::Args(format!(
            "--procs {}: between 2 and 64 workers",
            args.procs
        )));
    }
    if args.names == 0 || args.names > 1000 {
        return Err(Failure::Args(format!(
            "--names {}: between 1 and 1000 names",
            args.names
        )));
    }
    if args.secs == 0 {
        return Err(Failure::Args(
            "--secs 0: run for at least one second".into(),
        ));
    }
    if args.term < Duration::from_millis(300) || args.term > Duration::from_secs(600) {
        return Err(Failure::Args(format!(
            "--term {:?}: between 300ms and 10m",
            args.term
        )));
    }
    lease_config(args.term)
        .validate()
        .map_err(|e| Failure::Args(e.to_string()))?;
    let store = StoreBuilder::new(db).connect().await?;
    log::create_table(&store).await?;
    let namespace = format!("torture-{}-{}", std::process::id(), stamp() % 1_000_000_000);
    println!(
        "namespace {namespace}: {} workers, {} names, {} s, term {:?}{}{}",
        args.procs,
        args.names,
        args.secs,
        args.term,
        if args.kill { ", --kill" } else { "" },
        if args.pause { ", --pause" } else { "" }
    );

    let mut workers = Workers {
        db: db.to_owned(),
        namespace: namespace.clone(),
        names: args.names,
        term: args.term,
        slots: Vec::new(),
        incarnations: vec![0; args.procs as usize],
    };
    for slot in 0..args.procs as usize {
        match workers.spawn(slot) {
            Ok(child) => workers.slots.push(child),
            Err(e) => {
                workers.stop_all();
                return Err(e);
            }
        }
    }
    let result = faults(&store, &mut workers, args).await;
    workers.stop_all();
    let faults = result?;

    // Statements a killed client had sent may still be finishing on a server.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let rows = log::read(&store, &namespace).await?;
    let acquisitions: i64 = log::final_tokens(&store, &namespace)
        .await?
        .iter()
        .map(|(_, token)| token)
        .sum();
    let findings = check::check(&rows);
    println!(
        "faults: {} kills, {} pauses; workers that exited by themselves: {}",
        faults.kills, faults.pauses, faults.exits
    );
    println!("{findings}");
    for v in findings.violations.iter().take(20) {
        println!("VIOLATION {v}");
    }
    println!(
        "acquisitions: {acquisitions}  takeovers: {}  stale_fenced_rejected: {}  violations: {}",
        findings.takeovers,
        findings.stale_fenced_rejected,
        findings.violations.len()
    );
    Ok(if findings.violations.is_empty() {
        0
    } else {
        VIOLATION
    })
}

/// What the fault injector did.
struct Faults {
    kills: u64,
    pauses: u64,
    /// Workers that exited without being killed.
    exits: u64,
}

/// How often `torture` says how far it got.
const PROGRESS: Duration = Duration::from_secs(5);

/// Injects faults until the time is up, saying how far it got every [`PROGRESS`].
async fn faults(
    store: &SeaOrmStore,
    workers: &mut Workers,
    args: &TortureArgs,
) -> Result<Faults, Failure> {
    let clock = MonotonicClock;
    let start = clock.now();
    let run_for = Duration::from_secs(args.secs);
    let term_ms = u64::try_from(args.term.as_millis()).unwrap_or(u64::MAX);
    // slot -> when to SIGCONT it
    let mut paused: HashMap<usize, Instant> = HashMap::new();
    let (mut kills, mut pauses, mut exits) = (0_u64, 0_u64, 0_u64);
    let mut report_at = start + PROGRESS;
    while clock.now() - start < run_for {
        let wait = Duration::from_millis(rand::rng().random_range(term_ms / 4..=term_ms / 2));
        tokio::time::sleep(wait).await;
        let now = clock.now();
        if now >= report_at {
            // Progress on stderr (stdout carries the findings).
            report_at += PROGRESS;
            eprintln!(
                "torture: {}s of {}s, {kills} kills, {pauses} pauses, {exits} restarts",
                (now - start).as_secs(),
                args.secs
            );
        }
        // A worker that exited by itself (it could not connect, or it crashed) is restarted and
        // counted: a run where workers die proves less than it seems.
        for slot in 0..workers.slots.len() {
            if let Ok(Some(status)) = workers.slots[slot].try_wait() {
                eprintln!(
                    "leasehold-lab: torture worker {slot} exited by itself ({status}); restarting it"
                );
                exits += 1;
                paused.remove(&slot);
                let child = workers.spawn(slot)?;
                workers.slots[slot] = child;
            }
        }
        paused.retain(|slot, until| {
            if *until <= now {
                signal("-CONT", workers.slots[*slot].id());
                false
            } else {
                true
            }
        });
        // Keep at least one worker running, so takeovers can happen.
        let running: Vec<usize> = (0..workers.slots.len())
            .filter(|s| !paused.contains_key(s))
            .collect();
        if running.len() < 2 {
            continue;
        }
        // Aim at a holder two times in three: faults on standbys prove little.
        let holding: Vec<usize> = log::holders(store, &workers.namespace)
            .await?
            .iter()
            .filter_map(|h| workers.slot_of(h))
            .filter(|s| running.contains(s))
            .collect();
        let slot = if !holding.is_empty() && rand::rng().random_range(0..3) < 2 {
            holding[rand::rng().random_range(0..holding.len())]
        } else {
            running[rand::rng().random_range(0..running.len())]
        };
        let dice = rand::rng().random_range(0..4);
        if args.kill && dice == 0 {
            let _ = workers.slots[slot].kill();
            let _ = workers.slots[slot].wait();
            kills += 1;
            let child = workers.spawn(slot)?;
            workers.slots[slot] = child;
        } else if args.pause && dice == 1 {
            let pid = workers.slots[slot].id();
            if signal("-STOP", pid) {
                pauses += 1;
                let hold = args.term + args.term.mul_f64(rand::rng().random_range(0.2..1.0));
                paused.insert(slot, now + hold);
            }
        }
    }
    for slot in paused.keys() {
        signal("-CONT", workers.slots[*slot].id());
    }
    Ok(Faults {
        kills,
        pauses,
        exits,
    })
}
