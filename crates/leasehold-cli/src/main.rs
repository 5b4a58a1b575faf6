//! `leasehold`: operate lease tables from the shell.
//!
//! The operator's tools only: the demo, the bench and the torture test are `leasehold-lab`.
//!
//! Exit codes (`exit.rs` holds them): 0 done; 1 database error; 2 bad arguments; 3 refused
//! (held by another holder, not ours to unlock, not held, or an ask that moved nothing); 5
//! `check`: the clock rates differ too much for the configured margin and term, or could not be
//! shown not to; 6 `check` of several MySQL/MariaDB nodes: two nodes' clocks are not shown to
//! agree within the safety margin; 130 `check` interrupted (Ctrl-C), its scratch table dropped.
#![forbid(unsafe_code)]

mod ask;
mod check;
mod commands;
mod exit;
mod print;
mod purge;
mod watch;

use std::process::ExitCode;
use std::time::Duration;

use clap::{CommandFactory, Parser, Subcommand};
use leasehold_cli::duration;

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
    /// Database URL: sqlite://FILE?mode=rwc, sqlite::memory:, postgres://…, mysql://… (default:
    /// the SQLite file leasehold.db in the working directory, created if missing; the command
    /// then says so on stderr).
    #[arg(
        long,
        global = true,
        env = "LEASEHOLD_DATABASE_URL",
        hide_env_values = true
    )]
    pub db: Option<String>,
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
    Migrate {
        /// Print one JSON object (`table`, `ready`) instead of text.
        #[arg(long)]
        json: bool,
    },
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
    /// Take a lock once, as a new tenure: prints the fencing token (exit 0), or, when it is held
    /// (by HOLDER too: a live lock is never extended), its holder, token and time left (exit 3).
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
        /// Print one JSON object (`acquired`, and the token or the holder) instead of text.
        #[arg(long)]
        json: bool,
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
        /// Print one JSON object (`released`, and why not) instead of text.
        #[arg(long)]
        json: bool,
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
        /// Print one JSON object (`released`, and `not_held` when it was not) instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Ask the holder of a lease to hand it over (cooperative revocation): takes the ask's row
    /// NAME#ask for the wait, then waits for the holder's tenure to end. Only a holder that
    /// opted in (a revocable lease task) answers: it finishes its running work, gives the lease
    /// up and stays out while the ask is live. Exit 0 when the tenure ended, 3 when nothing
    /// changed (not held, another ask live, or the wait ran out). The ask is withdrawn on exit.
    #[command(
        after_help = "Example:\n  leasehold ask-release jobs nightly-report --wait 30s --force-after 20s"
    )]
    AskRelease {
        /// Namespace ("" for the default one).
        namespace: String,
        /// Lease name.
        name: String,
        /// How long to wait for the holder to hand over.
        #[arg(long, default_value = "30s", value_parser = duration::parse, allow_hyphen_values = true)]
        wait: Duration,
        /// From this far into the wait, a revocable holder ends its tenure even with work still
        /// running (only fencing protects from that work). Shorter than --wait.
        #[arg(long, value_parser = duration::parse, allow_hyphen_values = true)]
        force_after: Option<Duration>,
        /// Holder id to ask as (default: ask-release:PID).
        #[arg(long)]
        holder: Option<String>,
        /// Print one JSON object (`outcome`: handed_over, timed_out, not_held, already_asked).
        #[arg(long)]
        json: bool,
    },
    /// List the participants of a lease: its holder and every live candidate (lease tasks
    /// started as candidates), with priority, value and the holder's token, read from the
    /// candidacy rows NAME#cand:HOLDER. The holder first, then by priority, highest first.
    #[command(after_help = "Example:\n  leasehold participants jobs scheduler --json")]
    Participants {
        /// Namespace ("" for the default one).
        namespace: String,
        /// Lease name.
        name: String,
        /// Print JSON (one array of objects: holder, priority, value, holder_of_lease, token).
        #[arg(long)]
        json: bool,
    },
    /// Delete rows released or expired for longer than the given age. A held row is never
    /// purged, and tokens never go back: a name created again starts above every token it had.
    #[command(
        after_help = "Examples:\n  leasehold purge --older-than 7d --dry-run\n  leasehold purge --older-than 7d --namespace jobs --json"
    )]
    Purge {
        /// Minimum age since the row's grant ended, e.g. 7d.
        #[arg(long, value_parser = duration::parse, allow_hyphen_values = true)]
        older_than: Duration,
        /// Only this namespace.
        #[arg(long)]
        namespace: Option<String>,
        /// Delete nothing: say how many rows would be purged now, and name the first ones.
        #[arg(long)]
        dry_run: bool,
        /// Print one JSON object (`purged`, or with --dry-run `purgeable` and `rows`) instead of
        /// text.
        #[arg(long)]
        json: bool,
    },
    /// Watch the held leases live: a table redrawn every interval on a terminal (changes
    /// highlighted), one line per change elsewhere. With --name, observe those names: their
    /// state, then one line per change (what services' doorbells push at once, the rest polled
    /// every interval).
    #[command(
        after_help = "Examples:\n  leasehold watch --namespace jobs --interval 500ms\n  leasehold watch --namespace jobs --name nightly --name hourly"
    )]
    Watch {
        /// Only this namespace (default: every namespace; with --name, the default namespace).
        #[arg(long)]
        namespace: Option<String>,
        /// Observe this name (repeatable) instead of listing: one line per change.
        #[arg(long = "name")]
        names: Vec<String>,
        /// Only names starting with this prefix.
        #[arg(long, default_value = "")]
        prefix: String,
        /// Time between refreshes (with --name: the longest wait between two reads).
        #[arg(long, default_value = "1s", value_parser = duration::parse, allow_hyphen_values = true)]
        interval: Duration,
        /// Stop after this many refreshes, or with --name this many lines (default: run until
        /// interrupted).
        #[arg(long)]
        count: Option<u64>,
        /// Print one JSON object per line for each change (`event`: held, renewed, taken_over,
        /// ended, absent, unreachable), also on a terminal, instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Run the conformance suite against the database in a scratch table made for the run and
    /// dropped after it (the real table is never touched), report the clock offset and
    /// round-trip time, and measure the clock-rate difference between the database and this
    /// host's monotonic clock over a window: exit 5 when it is larger than safety-margin / term
    /// (or cannot be shown smaller). A check that cannot apply to the database says `skipped`
    /// and is not counted as passed. A MySQL/MariaDB URL naming several nodes (a Galera
    /// cluster, `mysql://u:p@h1:3306,h2:3306,h3:3306/db`) runs the checks on the first and
    /// measures every other node's clock against it: exit 6 when one is not shown within the
    /// safety margin (each node judges expiry by its own clock).
    #[command(
        after_help = "Examples:\n  leasehold --db postgres://postgres@127.0.0.1/test check --term 10s --safety-margin 1s --clock-window 5s\n  leasehold --db mysql://app:pw@db1:3306,db2:3306,db3:3306/app check --clock-only --safety-margin 1s"
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
        /// Print one JSON object (clock, verdict, each check's outcome, counts) instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Print a shell completion script for SHELL on stdout.
    #[command(
        after_help = "Examples:\n  leasehold completions bash > /etc/bash_completion.d/leasehold\n  leasehold completions zsh > \"${fpath[1]}/_leasehold\""
    )]
    Completions {
        /// The shell: bash, elvish, fish, powershell or zsh.
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff) on stdout.
    #[command(after_help = "Example:\n  leasehold man > /usr/local/share/man/man1/leasehold.1")]
    Man,
}

fn main() -> ExitCode {
    let mut logger =
        env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn"));
    if !leasehold_cli::color_allowed() {
        logger.write_style(env_logger::WriteStyle::Never);
    }
    logger.init();
    let cli: Cli = match leasehold_cli::parse_args("leasehold") {
        Ok(parsed) => parsed,
        Err(code) => return code,
    };
    match &cli.command {
        Command::Completions { shell } => {
            clap_complete::generate(
                *shell,
                &mut Cli::command(),
                "leasehold",
                &mut std::io::stdout(),
            );
            ExitCode::SUCCESS
        }
        Command::Man => {
            match clap_mangen::Man::new(Cli::command()).render(&mut std::io::stdout()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("leasehold: cannot write the manual page: {e}");
                    ExitCode::from(1)
                }
            }
        }
        _ => run_on_runtime(commands::run(cli)),
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
