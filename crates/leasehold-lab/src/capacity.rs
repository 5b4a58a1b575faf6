//! `leasehold-lab capacity`: many leases held on one database for a while, and what that costs the
//! database (issue 17 goal 6: "a million leases on one PostgreSQL").
//!
//! This process starts `--processes` holders (the same binary as the hidden `capacity-holder`),
//! each a `LeaseService` running `--leases` lease tasks. Driven by lines on the holders' stdin and
//! stdout:
//!
//! 1. each holder starts its tasks and prints `held <ms>` once every task holds its lease (the
//!    time from its first start), and the token of each task is noted;
//! 2. once all have, this process reads the server's counters (A), waits `--hold`, reads them
//!    again (B) and sends `stop`;
//! 3. each holder prints `result {json}`: tasks that do not hold their lease now or hold it under
//!    another token than at step 1 are *lost* (a lost tenure is never revived: a new grant is a
//!    new token), `Lost` events seen, and its own CPU time over the hold.
//!
//! Server counters (B − A): on PostgreSQL the server's CPU time (the postmaster and its children,
//! from /proc, when the server runs on this machine), WAL bytes (`pg_current_wal_lsn`), commits
//! and rows updated (`pg_stat_database`); on MySQL/MariaDB the server's CPU time (its pid file),
//! redo log bytes (`Innodb_os_log_written`), commits and statements (`Handler_commit`, `Questions`),
//! rows updated (`Handler_update`). From them, per renew interval and per lease, and the
//! capacity model: leases one database core renews at this term, and what 1,000 hosts need.
//!
//! Holders are killed when their handle is dropped, and exit by themselves when their stdin
//! closes.

use crate::child::LabChild;
use std::io::Write as _;
use std::process::Command;
use std::time::Duration;

use clap::Args;
use leasehold::clock::{Clock, MonotonicClock};
use leasehold::{EventKind, FencingToken, LeaseConfig, LeaseService, LeaseTask, LeaseTaskOptions};
use leasehold_cli::duration;
use leasehold_storage::{Backend, SeaOrmStore, StoreBuilder};
use sea_orm::{ConnectionTrait, Statement};
use serde_json::json;

type R<T> = Result<T, String>;

/// The shortest `--term`.
const MIN_TERM: Duration = Duration::from_secs(1);

/// Options of `leasehold-lab capacity`.
#[derive(Debug, Clone, Args)]
pub struct CapacityArgs {
    /// Holder processes.
    #[arg(long, default_value_t = 2)]
    pub processes: usize,
    /// Leases (lease tasks) per process.
    #[arg(long, default_value_t = 10_000)]
    pub leases: usize,
    /// Lease term (renewals every third of it).
    #[arg(long, value_parser = duration::parse, default_value = "30s")]
    pub term: Duration,
    /// How long all leases are held while the server's counters are read.
    #[arg(long, value_parser = duration::parse, default_value = "60s")]
    pub hold: Duration,
    /// How long a holder may take to hold all its leases.
    #[arg(long, value_parser = duration::parse, default_value = "10m")]
    pub settle: Duration,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// Options of the hidden `capacity-holder` subcommand (started by `capacity`).
#[derive(Debug, Clone, Args)]
pub struct HolderArgs {
    /// Namespace of the holder's leases.
    #[arg(long)]
    pub namespace: String,
    /// Leases to hold.
    #[arg(long)]
    pub leases: usize,
    /// Lease term.
    #[arg(long, value_parser = duration::parse)]
    pub term: Duration,
    /// How long to wait for `stop` once every lease is held.
    #[arg(long, value_parser = duration::parse)]
    pub hold: Duration,
    /// How long all leases may take to be held.
    #[arg(long, value_parser = duration::parse)]
    pub settle: Duration,
}

/// How often a holder still short of its leases says how far it got.
const PROGRESS: Duration = Duration::from_secs(10);

fn config(term: Duration) -> LeaseConfig {
    LeaseConfig::default().with_term(term)
}

/// This process's CPU time (user + system), from /proc/self/stat.
pub(crate) fn own_cpu() -> Option<Duration> {
    cpu_of("self").map(|(own, _)| own)
}

/// Clock ticks per second of /proc's CPU fields (`getconf CLK_TCK`; 100 on Linux).
fn ticks_per_second() -> u64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100)
}

/// CPU time of process `pid` (utime + stime), and of its reaped children (cutime + cstime).
fn cpu_of(pid: &str) -> Option<(Duration, Duration)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = text.rsplit_once(')')?.1;
    let f: Vec<u64> = rest
        .split_whitespace()
        .skip(11) // state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
        .take(4)
        .map(|v| v.parse().unwrap_or(0))
        .collect();
    let tick = ticks_per_second();
    let secs = |t: u64| Duration::from_secs_f64(t as f64 / tick as f64);
    Some((secs(f.first()? + f.get(1)?), secs(f.get(2)? + f.get(3)?)))
}

fn ppid_of(pid: &str) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    text.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)
        .map(str::to_owned)
}

/// CPU time of server process `root` and every process whose parent it is (PostgreSQL's
/// backends), including children that have exited.
pub(crate) fn server_cpu(root: &str) -> Option<Duration> {
    let (own, reaped) = cpu_of(root)?;
    let mut total = own + reaped;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str() else { continue };
        if pid.bytes().all(|b| b.is_ascii_digit())
            && ppid_of(pid).as_deref() == Some(root)
            && let Some((own, reaped)) = cpu_of(pid)
        {
            total += own + reaped;
        }
    }
    Some(total)
}

/// What the server has done so far, by its own counters.
#[derive(Debug, Clone, Copy, Default)]
struct ServerCounters {
    cpu: Option<Duration>,
    log_bytes: Option<u64>,
    commits: Option<u64>,
    rows_updated: Option<u64>,
    statements: Option<u64>,
}

async fn scalar(store: &SeaOrmStore, sql: &str) -> Option<String> {
    let backend = store.connection().get_database_backend();
    let row = store
        .connection()
        .query_one_raw(Statement::from_string(backend, sql))
        .await
        .ok()??;
    row.try_get_by_index::<String>(0)
        .ok()
        .or_else(|| row.try_get_by_index::<i64>(0).ok().map(|v| v.to_string()))
}

async fn number(store: &SeaOrmStore, sql: &str) -> Option<u64> {
    scalar(store, sql).await?.trim().parse().ok()
}

/// The server's process id, when its data directory (and pid file) is on this machine.
pub(crate) async fn server_pid(store: &SeaOrmStore) -> Option<String> {
    let file = match store.backend() {
        Backend::Postgres => {
            let dir = scalar(store, "SELECT current_setting('data_directory')").await?;
            format!("{dir}/postmaster.pid")
        }
        Backend::MySql | Backend::MariaDb => scalar(store, "SELECT @@pid_file").await?,
        _ => return None,
    };
    let text = std::fs::read_to_string(file).ok()?;
    text.lines().next().map(|l| l.trim().to_owned())
}

async fn counters(store: &SeaOrmStore, pid: Option<&str>) -> ServerCounters {
    let cpu = pid.and_then(server_cpu);
    match store.backend() {
        Backend::Postgres => {
            // Counters reach pg_stat_database when backends report them (at most once a second
            // while busy): over a window of minutes the lag is noise.
            let stat = |col: &str| {
                format!(
                    "SELECT ({col})::text FROM pg_stat_database WHERE datname = current_database()"
                )
            };
            ServerCounters {
                cpu,
                log_bytes: number(
                    store,
                    "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint::text",
                )
                .await,
                commits: number(store, &stat("xact_commit")).await,
                rows_updated: number(store, &stat("tup_updated")).await,
                statements: None,
            }
        }
        Backend::MySql | Backend::MariaDb => {
            let status = |name: &str| {
                format!(
                    "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = '{name}'"
                )
            };
            ServerCounters {
                cpu,
                log_bytes: number(store, &status("INNODB_OS_LOG_WRITTEN")).await,
                commits: number(store, &status("HANDLER_COMMIT")).await,
                rows_updated: number(store, &status("HANDLER_UPDATE")).await,
                statements: number(store, &status("QUESTIONS")).await,
            }
        }
        _ => ServerCounters {
            cpu,
            ..ServerCounters::default()
        },
    }
}

/// One holder process, seen from here. Killed when dropped.
struct Holder(LabChild);

impl Holder {
    fn spawn(url: &str, prefix: &str, ns: &str, args: &CapacityArgs) -> R<Self> {
        let hold = format!("{}ms", (args.hold + Duration::from_secs(120)).as_millis());
        LabChild::spawn(
            "holder",
            [
                "--db",
                url,
                "--table-prefix",
                prefix,
                "capacity-holder",
                "--namespace",
                ns,
                "--leases",
                &args.leases.to_string(),
                "--term",
                &format!("{}ms", args.term.as_millis()),
                "--hold",
                &hold,
                "--settle",
                &format!("{}ms", args.settle.as_millis()),
            ],
        )
        .map(Self)
    }

    /// The rest of the next line starting with `want ` (within `within`); a holder's `error: …`
    /// line or its exit is the error.
    async fn expect(&mut self, want: &str, within: Duration) -> R<String> {
        let line = self.0.line(want, within).await?;
        match line.strip_prefix(want) {
            Some(rest) => Ok(rest.trim().to_owned()),
            None => Err(self.0.unexpected(&line)),
        }
    }

    fn send(&mut self, line: &str) -> R<()> {
        self.0.send(line)
    }
}

fn delta(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    Some(b?.saturating_sub(a?))
}

/// Runs `capacity`; the exit code (0: every lease held throughout, 1: a lease lost or an error).
pub async fn run(url: &str, prefix: &str, args: &CapacityArgs) -> u8 {
    match measure(url, prefix, args).await {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(e) => {
            eprintln!("leasehold-lab capacity: {e}");
            1
        }
    }
}

async fn measure(url: &str, prefix: &str, args: &CapacityArgs) -> R<bool> {
    if args.processes == 0 || args.leases == 0 {
        return Err("--processes and --leases must be at least 1".into());
    }
    if args.term < MIN_TERM {
        return Err(format!(
            "--term {:?} is below {MIN_TERM:?}: a measurement of renewals needs room for them",
            args.term
        ));
    }
    config(args.term).validate().map_err(|e| e.to_string())?;
    let lower = url.to_ascii_lowercase();
    if lower.contains(":memory:") || lower.contains("mode=memory") {
        return Err(
            "an in-memory SQLite database cannot be shared by holder processes: name a file".into(),
        );
    }
    let store = StoreBuilder::new(url)
        .table_prefix(prefix)
        .connect()
        .await
        .map_err(|e| e.to_string())?;
    let pid = server_pid(&store).await;
    let run = format!("cap-{}", std::process::id());
    let clock = MonotonicClock;
    let mut holders = Vec::new();
    for p in 0..args.processes {
        holders.push(Holder::spawn(url, prefix, &format!("{run}-{p}"), args)?);
    }
    let mut held_ms = Vec::new();
    for h in &mut holders {
        let ms: u64 = h
            .expect("held", args.settle + Duration::from_secs(60))
            .await?
            .parse()
            .map_err(|e| format!("held: {e}"))?;
        held_ms.push(ms);
    }
    let a = counters(&store, pid.as_deref()).await;
    let started = clock.now();
    eprintln!(
        "capacity: {} leases held by {} processes; holding them for {:?}",
        args.leases * args.processes,
        args.processes,
        args.hold
    );
    // Progress on stderr while holding, one line per PROGRESS (stdout carries the report).
    loop {
        let elapsed = clock.now().saturating_duration_since(started);
        if elapsed >= args.hold {
            break;
        }
        tokio::time::sleep(PROGRESS.min(args.hold - elapsed)).await;
        let elapsed = clock.now().saturating_duration_since(started);
        if elapsed < args.hold {
            eprintln!(
                "capacity: held for {} of {}",
                duration::human(elapsed),
                duration::human(args.hold)
            );
        }
    }
    let b = counters(&store, pid.as_deref()).await;
    let window = clock.now().saturating_duration_since(started);
    for h in &mut holders {
        h.send("stop")?;
    }
    let mut results = Vec::new();
    for h in &mut holders {
        let text = h.expect("result", Duration::from_secs(300)).await?;
        let value: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| format!("result: {e}"))?;
        results.push(value);
    }
    drop(holders);

    let sum = |field: &str| -> u64 { results.iter().filter_map(|r| r[field].as_u64()).sum() };
    let lost = sum("lost");
    let lost_events = sum("lost_events");
    let holder_cpu: f64 = results
        .iter()
        .filter_map(|r| r["cpu_seconds"].as_f64())
        .sum();
    let leases = (args.processes * args.leases) as u64;
    let interval = config(args.term).renew_interval();
    let intervals = window.as_secs_f64() / interval.as_secs_f64();
    let renewals = leases as f64 * intervals;
    let server_cpu = match (a.cpu, b.cpu) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a).as_secs_f64()),
        _ => None,
    };
    let cores = server_cpu.map(|c| c / window.as_secs_f64());
    let per_core = cores.map(|c| leases as f64 / c.max(1e-9));
    let per_interval = |d: Option<u64>| d.map(|v| v as f64 / intervals);
    let log = per_interval(delta(a.log_bytes, b.log_bytes));
    let commits = per_interval(delta(a.commits, b.commits));
    let rows = per_interval(delta(a.rows_updated, b.rows_updated));
    let statements = per_interval(delta(a.statements, b.statements));
    let hosts_1000 = per_core.map(|p| 1000.0 * args.leases as f64 / p);
    let report = json!({
        "backend": format!("{:?}", store.backend()),
        "processes": args.processes,
        "leases_per_process": args.leases,
        "leases": leases,
        "term_ms": args.term.as_millis() as u64,
        "renew_interval_ms": interval.as_millis() as u64,
        "held_after_ms_max": held_ms.iter().max(),
        "window_s": window.as_secs_f64(),
        "lost": lost,
        "lost_events": lost_events,
        "renewals_expected": renewals,
        "server_cpu_s": server_cpu,
        "server_cores": cores,
        "holders_cpu_s": holder_cpu,
        "holder_cpu_us_per_renewal": holder_cpu * 1e6 / renewals.max(1.0),
        "per_renew_interval": {
            "log_bytes": log,
            "commits": commits,
            "rows_updated": rows,
            "statements": statements,
        },
        "log_bytes_per_renewal": log.map(|l| l / leases as f64),
        "leases_per_server_core": per_core,
        "server_cores_for_1000_hosts_at_this_many_leases_each": hosts_1000,
    });
    if args.json {
        println!("{report}");
    } else {
        print_report(&report);
    }
    Ok(lost == 0 && lost_events == 0)
}

fn print_report(r: &serde_json::Value) {
    let show = |v: &serde_json::Value| match v {
        serde_json::Value::Null => "n/a (server not on this machine or no such counter)".into(),
        serde_json::Value::Number(n) if n.is_u64() || n.is_i64() => n.to_string(),
        serde_json::Value::Number(n) => n
            .as_f64()
            .map_or_else(|| n.to_string(), |f| format!("{f:.1}")),
        other => other.to_string(),
    };
    println!(
        "capacity on {}: {} processes x {} leases = {} leases, term {} ms (renewals every {} ms)",
        r["backend"].as_str().unwrap_or("?"),
        r["processes"],
        r["leases_per_process"],
        r["leases"],
        r["term_ms"],
        r["renew_interval_ms"]
    );
    for (label, key) in [
        ("all held after (slowest process), ms", "held_after_ms_max"),
        ("window held, s", "window_s"),
        ("leases lost (token changed or not held)", "lost"),
        ("Lost events", "lost_events"),
        ("server CPU over the window, s", "server_cpu_s"),
        ("server cores busy", "server_cores"),
        ("holder processes' CPU, s", "holders_cpu_s"),
        ("holder CPU per renewal, us", "holder_cpu_us_per_renewal"),
        ("WAL/redo bytes per renewal", "log_bytes_per_renewal"),
        (
            "leases per server core at this term",
            "leases_per_server_core",
        ),
        (
            "server cores for 1,000 hosts with this many leases each",
            "server_cores_for_1000_hosts_at_this_many_leases_each",
        ),
    ] {
        println!("  {label:<58} {}", show(&r[key]));
    }
    let per = &r["per_renew_interval"];
    for (label, key) in [
        ("WAL/redo bytes per renew interval", "log_bytes"),
        ("commits per renew interval", "commits"),
        ("rows updated per renew interval", "rows_updated"),
        ("statements per renew interval", "statements"),
    ] {
        println!("  {label:<58} {}", show(&per[key]));
    }
}

/// The hidden `capacity-holder`: holds `--leases` leases until told `stop`, then reports.
pub async fn run_holder(url: &str, prefix: &str, args: &HolderArgs) -> u8 {
    match hold(url, prefix, args).await {
        Ok(()) => 0,
        Err(e) => {
            println!("error: {e}");
            1
        }
    }
}

async fn hold(url: &str, prefix: &str, args: &HolderArgs) -> R<()> {
    let clock = MonotonicClock;
    let service = LeaseService::builder(url)
        .namespace(&args.namespace)
        .table_prefix(prefix)
        .config(config(args.term))
        .build()
        .await
        .map_err(|e| e.to_string())?;
    let mut events = service.subscribe();
    let started = clock.now();
    let mut tasks: Vec<LeaseTask> = Vec::with_capacity(args.leases);
    let mut report_at = started + PROGRESS;
    let names: Vec<String> = (0..args.leases).map(|i| format!("l{i:07}")).collect();
    // Started in slices (one engine round trip per `START_CHUNK` names inside each), reporting
    // between them: under load starting is part of the burst.
    for slice in names.chunks(10_000) {
        if clock.now() >= report_at {
            report_at += PROGRESS;
            eprintln!(
                "holder {}: {} of {} tasks started after {:?}",
                args.namespace,
                tasks.len(),
                args.leases,
                clock.now().saturating_duration_since(started)
            );
        }
        let started_now = service
            .tasks()
            .start_many(slice, LeaseTaskOptions::new())
            .await
            .map_err(|e| e.to_string())?;
        tasks.extend(started_now);
    }
    let deadline = started + args.settle;
    loop {
        if tasks.iter().all(LeaseTask::has_lease) {
            break;
        }
        if clock.now() >= report_at {
            // On stderr, for whoever watches a long burst (the parent reads stdout).
            report_at += PROGRESS;
            let held = tasks.iter().filter(|t| t.has_lease()).count();
            eprintln!(
                "holder {}: {held} of {} held after {:?}",
                args.namespace,
                args.leases,
                clock.now().saturating_duration_since(started)
            );
        }
        if clock.now() >= deadline {
            let held = tasks.iter().filter(|t| t.has_lease()).count();
            return Err(format!(
                "{held} of {} leases held after {:?}",
                args.leases, args.settle
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let held_after = clock.now().saturating_duration_since(started);
    let tokens: Vec<Option<FencingToken>> = tasks.iter().map(LeaseTask::token).collect();
    // Lost events from here on (a lagging receiver is counted apart: it may hide some).
    while events.try_recv().is_ok() {}
    println!("held {}", held_after.as_millis());
    let cpu_before = own_cpu();

    let stop = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        let _ = std::io::stdin().read_line(&mut line);
        line
    });
    let (mut lost_events, mut lagged) = (0u64, 0u64);
    let until = tokio::time::sleep(args.hold);
    tokio::pin!(until);
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut until => break,
            _ = &mut stop => break,
            event = events.recv() => match event {
                Ok(e) if matches!(e.what, EventKind::Lost(_)) => lost_events += 1,
                Ok(_) => {}
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => lagged += n,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
            },
        }
    }
    let cpu = match (cpu_before, own_cpu()) {
        (Some(a), Some(b)) => b.saturating_sub(a).as_secs_f64(),
        _ => 0.0,
    };
    let lost = tasks
        .iter()
        .zip(&tokens)
        .filter(|(t, token)| !t.has_lease() || t.token() != **token)
        .count();
    println!(
        "result {}",
        json!({
            "held_after_ms": held_after.as_millis() as u64,
            "lost": lost,
            "lost_events": lost_events,
            "lagged_events": lagged,
            "cpu_seconds": cpu,
        })
    );
    let _ = std::io::stdout().flush();
    service.shutdown().await.map_err(|e| e.to_string())?;
    Ok(())
}
