//! `leasehold`: operate lease tables from the shell.
//!
//! Exit codes: 0 done; 1 database error; 2 bad arguments; 3 refused (held by another holder, or
//! not ours to unlock); 4 `torture` found a violation; 5 `check`: the clock rates differ too
//! much for the configured margin and term, or could not be shown not to.
#![forbid(unsafe_code)]

mod bench;
mod commands;
mod demo;
mod duration;
mod torture;
mod watch;

use std::process::ExitCode;
use std::time::Duration;

use clap::{ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand};

/// The system allocator, counting bytes allocated and freed: `leasehold bench` reads the heap
/// bytes one held lease costs from it (a few relaxed atomic additions per allocation).
#[global_allocator]
static ALLOCATOR: &stats_alloc::StatsAlloc<std::alloc::System> = &stats_alloc::INSTRUMENTED_SYSTEM;

/// Heap bytes live now in this process (Rust allocations; C libraries such as SQLite allocate
/// outside it).
pub(crate) fn heap_bytes() -> i64 {
    let s = ALLOCATOR.stats();
    s.bytes_allocated as i64 - s.bytes_deallocated as i64 + s.bytes_reallocated as i64
}

/// Default database: a SQLite file in the current directory, created if missing.
pub const DEFAULT_DB: &str = "sqlite://leasehold.db?mode=rwc";

/// Coordinate program instances through the database they already run: leases, locks and
/// fencing tokens on SQLite, PostgreSQL and MySQL/MariaDB.
#[derive(Debug, Parser)]
#[command(
    name = "leasehold",
    version,
    about,
    after_help = "Example:\n  leasehold --db postgres://postgres@127.0.0.1/test ls --namespace jobs"
)]
pub struct Cli {
    /// Database URL: sqlite://FILE?mode=rwc, sqlite::memory:, postgres://…, mysql://…
    #[arg(long, global = true, env = "LEASEHOLD_DATABASE_URL", default_value = DEFAULT_DB)]
    pub db: String,
    /// Table name prefix (the table is PREFIXlease_info).
    #[arg(long, global = true, default_value = "")]
    pub table_prefix: String,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create the lease table if it does not exist.
    #[command(after_help = "Example:\n  leasehold --db mysql://root@127.0.0.1/test migrate")]
    Migrate,
    /// List the held leases, with holder, token and time left by the database clock.
    #[command(after_help = "Example:\n  leasehold ls --namespace jobs --prefix report- --json")]
    Ls {
        /// Only this namespace (default: every namespace).
        #[arg(long)]
        namespace: Option<String>,
        /// Only names starting with this prefix (matched literally: % and _ are not wildcards).
        #[arg(long, default_value = "")]
        prefix: String,
        /// Print JSON (one array of objects with stable field names) instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Take a lock once: prints the fencing token (exit 0), or the holder and time left (exit 3).
    #[command(
        after_help = "Example:\n  leasehold lock jobs nightly-report --holder ops-1 --ttl 30s"
    )]
    Lock {
        /// Namespace ("" for the default one).
        namespace: String,
        /// Lock name.
        name: String,
        /// Holder id to take it as.
        #[arg(long)]
        holder: String,
        /// Time to live, e.g. 30s, 5m, 1h.
        #[arg(long, default_value = "30s", value_parser = duration::parse, allow_hyphen_values = true)]
        ttl: Duration,
    },
    /// Release a lock held by HOLDER with TOKEN (exit 0), or say it is not ours (exit 3).
    #[command(
        after_help = "Example:\n  leasehold unlock jobs nightly-report --holder ops-1 --token 7"
    )]
    Unlock {
        /// Namespace.
        namespace: String,
        /// Lock name.
        name: String,
        /// The holder that took it.
        #[arg(long)]
        holder: String,
        /// The fencing token `lock` printed.
        #[arg(long, allow_hyphen_values = true, value_parser = clap::value_parser!(i64).range(1..))]
        token: i64,
    },
    /// Operator override: mark a lease released whoever holds it (the row stays; tokens keep growing).
    #[command(after_help = "Example:\n  leasehold release --force jobs nightly-report")]
    Release {
        /// Required: this takes the lease away from a holder that may still believe it holds it.
        #[arg(long)]
        force: bool,
        /// Namespace.
        namespace: String,
        /// Lease name.
        name: String,
    },
    /// Delete rows released or expired for longer than the given age.
    #[command(after_help = "Example:\n  leasehold purge --older-than 7d")]
    Purge {
        /// Minimum age since the row's grant ended, e.g. 7d.
        #[arg(long, value_parser = duration::parse, allow_hyphen_values = true)]
        older_than: Duration,
        /// Only this namespace.
        #[arg(long)]
        namespace: Option<String>,
    },
    /// Watch the held leases live: a table redrawn every interval on a terminal (changes
    /// highlighted), one line per change elsewhere.
    #[command(after_help = "Example:\n  leasehold watch --namespace jobs --interval 500ms")]
    Watch {
        /// Only this namespace (default: every namespace).
        #[arg(long)]
        namespace: Option<String>,
        /// Only names starting with this prefix.
        #[arg(long, default_value = "")]
        prefix: String,
        /// Time between refreshes.
        #[arg(long, default_value = "1s", value_parser = duration::parse, allow_hyphen_values = true)]
        interval: Duration,
        /// Stop after this many refreshes (default: run until interrupted).
        #[arg(long)]
        count: Option<u64>,
    },
    /// Three in-process nodes elect a master, shard 12 tasks, take a lock with a fenced write,
    /// survive the master's crash and take the restarted node back. Runs on a temporary SQLite
    /// file unless --db (or LEASEHOLD_DATABASE_URL) is given.
    #[command(
        after_help = "Example:\n  cargo run --release -p leasehold-cli -- demo\n  leasehold --db postgres://postgres@127.0.0.1/test demo"
    )]
    Demo,
    /// Run the conformance suite against the database in a scratch namespace, report the clock
    /// offset and round-trip time, and measure the clock-rate difference between the database
    /// and this host's monotonic clock over a window: exit 5 when it is larger than
    /// safety-margin / term (or cannot be shown smaller).
    #[command(
        after_help = "Example:\n  leasehold --db postgres://postgres@127.0.0.1/test check --term 10s --safety-margin 1s --clock-window 5s"
    )]
    Check {
        /// The lease term the clock-rate verdict is for.
        #[arg(long, default_value = "30s", value_parser = duration::parse, allow_hyphen_values = true)]
        term: Duration,
        /// The safety margin the clock-rate verdict is for (default: term / 10, at most 2 s).
        #[arg(long, value_parser = duration::parse, allow_hyphen_values = true)]
        safety_margin: Option<Duration>,
        /// The window the database clock is sampled over.
        #[arg(long, default_value = "2s", value_parser = duration::parse, allow_hyphen_values = true)]
        clock_window: Duration,
        /// How many samples of the database clock over the window (at least 3).
        #[arg(long, default_value_t = 20)]
        clock_samples: usize,
        /// Only the clock checks: skip the conformance suite (which takes several seconds).
        #[arg(long)]
        clock_only: bool,
    },
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let parsed = parse();
    let cli = match parsed {
        Ok(Parsed::Cli(cli)) => cli,
        Ok(Parsed::Bench(db, prefix, args)) => {
            return run_on_runtime(async move { bench::run(&db, &prefix, &args).await });
        }
        Ok(Parsed::BenchPeer(db, prefix, args)) => {
            return run_on_runtime(async move { bench::run_peer(&db, &prefix, &args).await });
        }
        Ok(Parsed::Torture(db, args)) => return run_on_runtime(torture::run(&db, args)),
        Ok(Parsed::TortureWorker(db, args)) => {
            return run_on_runtime(torture::run_worker(&db, args));
        }
        Err(e) if !e.use_stderr() => {
            // --help and --version
            print!("{e}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            let text = e.to_string();
            let line = text
                .lines()
                .next()
                .unwrap_or("bad arguments")
                .trim_start_matches("error: ");
            eprintln!("leasehold: {line} (see leasehold --help)");
            return ExitCode::from(2);
        }
    };
    run_on_runtime(commands::run(cli))
}

/// What the command line asked for: a `commands` subcommand, or the torture ones (parsed apart so
/// that `commands` stays unaware of them).
enum Parsed {
    Cli(Cli),
    Torture(String, torture::TortureArgs),
    TortureWorker(String, torture::WorkerArgs),
    Bench(String, String, bench::BenchArgs),
    BenchPeer(String, String, bench::PeerArgs),
}

const TORTURE_HELP: &str = "Checked, per lease name, in database-time order (ties by insertion order):\n\
  - accepted fenced writes never go back to a lower token;\n\
  - no token is written by two holders;\n\
  - between the first and last unfenced write of a tenure (holder, token) made while its grant was\n\
    live by the database clock, no live unfenced write of another tenure appears.\n\
Each row records, computed in its own INSERT, whether its grant was still live. Unfenced writes\n\
that landed after their grant ended (a paused or slow holder) are counted as stale_unfenced:\n\
expected under --pause, not a violation: only fencing stops them. Exit 4 on any violation.\n\n\
Example:\n  leasehold --db postgres://postgres@127.0.0.1/test torture --procs 3 --names 2 --secs 20 --kill --pause --term 2s";

fn parse() -> Result<Parsed, clap::Error> {
    let command = Cli::command()
        .subcommand(
            torture::TortureArgs::augment_args(clap::Command::new("torture"))
                .about("Torture test: worker processes compete for names under SIGKILL and SIGSTOP; check the log of their writes")
                .after_help(TORTURE_HELP),
        )
        .subcommand(
            torture::WorkerArgs::augment_args(clap::Command::new("torture-worker"))
                .hide(true)
                .after_help("Example:\n  (started by leasehold torture)"),
        );
    let command = command.subcommand(
        bench::BenchArgs::augment_args(clap::Command::new("bench"))
            .about("Measure this database: store vs raw SQL, locks, renewal cost, failover, has_lease, ring, memory")
            .after_help("Example:\n  leasehold --db postgres://postgres@127.0.0.1/test bench --quick --json"),
    ).subcommand(
        bench::PeerArgs::augment_args(clap::Command::new("bench-peer"))
            .hide(true)
            .after_help("Example:\n  (started by leasehold bench)"),
    );
    let matches = command.try_get_matches()?;
    let prefix = |m: &ArgMatches| {
        m.get_one::<String>("table_prefix")
            .cloned()
            .unwrap_or_default()
    };
    let db = |m: &ArgMatches| {
        m.get_one::<String>("db")
            .cloned()
            .unwrap_or_else(|| DEFAULT_DB.to_owned())
    };
    match matches.subcommand() {
        Some(("torture", sub)) => Ok(Parsed::Torture(
            db(sub),
            torture::TortureArgs::from_arg_matches(sub)?,
        )),
        Some(("torture-worker", sub)) => Ok(Parsed::TortureWorker(
            db(sub),
            torture::WorkerArgs::from_arg_matches(sub)?,
        )),
        Some(("bench", sub)) => Ok(Parsed::Bench(
            db(sub),
            prefix(sub),
            bench::BenchArgs::from_arg_matches(sub)?,
        )),
        Some(("bench-peer", sub)) => Ok(Parsed::BenchPeer(
            db(sub),
            prefix(sub),
            bench::PeerArgs::from_arg_matches(sub)?,
        )),
        _ => Ok(Parsed::Cli(Cli::from_arg_matches(&matches)?)),
    }
}

fn run_on_runtime(work: impl std::future::Future<Output = u8>) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("leasehold: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    ExitCode::from(runtime.block_on(work))
}
