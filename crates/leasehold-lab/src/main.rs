//! `leasehold-lab`: the lab beside the operator's `leasehold` binary. It shows leasehold working
//! (`demo`), measures it (`bench`, with its `bench-peer` child for the hand-over between
//! processes) and tortures it (`torture`, with its `torture-worker` children under SIGKILL and
//! SIGSTOP), and holds many leases on one database to measure what that costs it (`capacity`,
//! with its `capacity-holder` children). Only this binary counts its heap allocations (for the
//! bench's memory row).
//!
//! Exit codes: 0 done; 1 database error (or the demo saw a double holder); 2 bad arguments;
//! 4 `torture` found a violation. `capacity` exits 1 when a lease was lost.
#![forbid(unsafe_code)]

mod bench;
mod capacity;
mod child;
mod demo;
mod report;
mod torture;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use leasehold_cli::DEFAULT_DB;
use leasehold_cli::duration;

/// The system allocator, counting bytes allocated and freed: `leasehold-lab bench` reads the
/// heap bytes one held lease costs from it (a few relaxed atomic additions per allocation, paid
/// only by this binary, not by the operator's `leasehold`).
#[global_allocator]
static ALLOCATOR: &stats_alloc::StatsAlloc<std::alloc::System> = &stats_alloc::INSTRUMENTED_SYSTEM;

/// Heap bytes live now in this process (Rust allocations; C libraries such as SQLite allocate
/// outside it).
///
/// `stats_alloc` already adds a `realloc`'s growth to `bytes_allocated` (and its shrinking to
/// `bytes_deallocated`); `bytes_reallocated` is the same change again, so it is not added: with
/// it, every buffer grown by `realloc` and later freed stayed counted as live for good (a renew
/// batch's SQL text, a `Vec` grown by `push`), and the figure grew with every batch: by 0.8 KiB
/// per lease on SQLite, 1.6 KiB on PostgreSQL and 3.2 KiB on MariaDB at 100,000 leases
/// (`bench --scale`; without it the count agrees with heaptrack's live bytes at the same
/// instant, docs/benchmarks.md).
pub(crate) fn heap_bytes() -> i64 {
    let s = ALLOCATOR.stats();
    s.bytes_allocated as i64 - s.bytes_deallocated as i64
}

/// See leasehold work, measure it, torture it.
#[derive(Debug, Parser)]
#[command(
    name = "leasehold-lab",
    version,
    about,
    after_help = "Example:\n  cargo run --release -p leasehold-lab -- demo"
)]
struct Lab {
    /// Database URL: sqlite://FILE?mode=rwc, sqlite::memory:, postgres://…, mysql://…
    #[arg(
        long,
        global = true,
        env = "LEASEHOLD_DATABASE_URL",
        hide_env_values = true,
        default_value = DEFAULT_DB
    )]
    db: String,
    /// Table name prefix (the table is PREFIXlease_info).
    #[arg(long, global = true, default_value = "")]
    table_prefix: String,
    /// What to do.
    #[command(subcommand)]
    command: LabCommand,
}

const TORTURE_HELP: &str = "Checked, per lease name, in database-time order (ties by insertion order):\n\
  - accepted fenced writes never go back to a lower token;\n\
  - no token is written by two holders;\n\
  - between the first and last unfenced write of a tenure (holder, token) made while its grant was\n\
    live by the database clock, no live unfenced write of another tenure appears.\n\
Each row records, computed in its own INSERT, whether its grant was still live. Unfenced writes\n\
that landed after their grant ended (a paused or slow holder) are counted as stale_unfenced:\n\
expected under --pause, not a violation: only fencing stops them. Exit 4 on any violation.\n\n\
Example:\n  leasehold-lab --db postgres://postgres@127.0.0.1/test torture --procs 3 --names 2 --secs 20 --kill --pause --term 2s";

#[derive(Debug, Subcommand)]
enum LabCommand {
    /// Three in-process nodes elect a master, shard 12 tasks, take a lock with a fenced write,
    /// survive the master's crash and take the restarted node back. Runs on a temporary SQLite
    /// file unless --db (or LEASEHOLD_DATABASE_URL) is given.
    #[command(
        after_help = "Example:\n  cargo run --release -p leasehold-lab -- demo\n  leasehold-lab --db postgres://postgres@127.0.0.1/test demo"
    )]
    Demo,
    /// Measure this database: store vs raw SQL, locks, renewal cost, failover, has_lease, ring,
    /// memory.
    #[command(
        after_help = "Example:\n  leasehold-lab --db postgres://postgres@127.0.0.1/test bench --quick --json"
    )]
    Bench(bench::BenchArgs),
    /// The other process of the bench's `lock_handoff_processes` row.
    #[command(
        hide = true,
        after_help = "Example:\n  (started by leasehold-lab bench)"
    )]
    BenchPeer(bench::PeerArgs),
    /// Torture test: worker processes compete for names under SIGKILL and SIGSTOP; check the log
    /// of their writes.
    #[command(after_help = TORTURE_HELP)]
    Torture(torture::TortureArgs),
    /// One worker of `torture`.
    #[command(
        hide = true,
        after_help = "Example:\n  (started by leasehold-lab torture)"
    )]
    TortureWorker(torture::WorkerArgs),
    /// Many leases held on one database for a while: leases lost, and what the database spent
    /// per renew interval (server CPU, WAL/redo bytes, commits, rows), with a capacity model.
    #[command(
        after_help = "Example:\n  leasehold-lab --db postgres://postgres@127.0.0.1/test capacity --processes 10 --leases 100000 --term 30s --hold 5m"
    )]
    Capacity(capacity::CapacityArgs),
    /// The figures of docs/benchmarks.md: run `bench` (and `bench --scale`) on each database
    /// given, then write one table per backend, the goals' verdicts and the charts.
    #[command(
        after_help = "Example:\n  leasehold-lab report --run \"sqlite:///tmp/r/l.db?mode=rwc\" --run postgres://postgres@127.0.0.1/test --run mysql://root@127.0.0.1/test"
    )]
    Report(report::ReportArgs),
    /// One holder process of `capacity`.
    #[command(
        hide = true,
        after_help = "Example:\n  (started by leasehold-lab capacity)"
    )]
    CapacityHolder(capacity::HolderArgs),
}

fn main() -> ExitCode {
    let mut logger =
        env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn"));
    if !leasehold_cli::color_allowed() {
        logger.write_style(env_logger::WriteStyle::Never);
    }
    logger.init();
    let lab: Lab = match leasehold_cli::parse_args("leasehold-lab") {
        Ok(parsed) => parsed,
        Err(code) => return code,
    };
    let Lab {
        db,
        table_prefix,
        command,
    } = lab;
    match command {
        LabCommand::Demo => run_on_runtime(async move { run_demo(db, &table_prefix).await }),
        LabCommand::Report(args) => ExitCode::from(report::run(&args)),
        LabCommand::Bench(args) => {
            run_on_runtime(async move { bench::run(&db, &table_prefix, &args).await })
        }
        LabCommand::BenchPeer(args) => {
            run_on_runtime(async move { bench::run_peer(&db, &table_prefix, &args).await })
        }
        LabCommand::Torture(args) => run_on_runtime(torture::run(&db, args)),
        LabCommand::TortureWorker(args) => run_on_runtime(torture::run_worker(&db, args)),
        LabCommand::Capacity(args) => {
            run_on_runtime(async move { capacity::run(&db, &table_prefix, &args).await })
        }
        LabCommand::CapacityHolder(args) => {
            run_on_runtime(async move { capacity::run_holder(&db, &table_prefix, &args).await })
        }
    }
}

/// The demo on `db` when a database was named, else on a SQLite file in a temporary directory
/// removed afterwards.
async fn run_demo(db: String, prefix: &str) -> u8 {
    let explicit = std::env::args().any(|a| a == "--db" || a.starts_with("--db="))
        || std::env::var_os("LEASEHOLD_DATABASE_URL").is_some();
    if explicit {
        return demo::run(db, prefix).await;
    }
    let dir = std::env::temp_dir().join(format!("leasehold-demo-{}", std::process::id()));
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("leasehold-lab: cannot create {}: {e}", dir.display());
        return 2;
    }
    let code = demo::run(
        format!("sqlite://{}?mode=rwc", dir.join("demo.db").display()),
        prefix,
    )
    .await;
    let _ = std::fs::remove_dir_all(dir);
    code
}

fn run_on_runtime(work: impl std::future::Future<Output = u8>) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("leasehold-lab: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    ExitCode::from(runtime.block_on(work))
}
