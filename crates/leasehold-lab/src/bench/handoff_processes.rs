//! Lock handoff between two processes (`lock_handoff_processes`): this process and a peer, the
//! same binary started as the hidden `bench-peer` subcommand, play ping-pong on two locks.
//!
//! One round, driven by lines on the peer's stdin and stdout (no shared clock needed):
//!
//! 1. this process holds `ping` and sends `go`;
//! 2. the peer takes `pong`, starts waiting for `ping` in `try_locker` and prints `waiting`;
//! 3. this process starts waiting for `pong` the same way, lets both waiters be refused once and
//!    start waiting (400 ms, as `lock_handoff`), then unlocks `ping` at t0;
//! 4. the peer gets `ping` and at once unlocks `pong`, then `ping`, and prints `done`;
//! 5. this process holds `pong` at t1: t1 − t0 is two handoffs, each a waiter in another process
//!    that was already waiting. The sample is (t1 − t0) / 2.
//!
//! Two names rather than one: a process waiting for the lock it holds would be served by its own
//! service's local queue, and one that starts waiting only after its unlock races the peer for
//! the lock it just released.
//!
//! On PostgreSQL the baseline is the same ping-pong with `PgAdvisoryLock` (each waiter blocked
//! in `pg_advisory_lock` on its own connection); elsewhere it is the in-process `lock_handoff`.
//!
//! The peer is killed when its handle is dropped (error or not), and exits by itself when its
//! stdin closes (this process died).

use crate::child::{LabChild, forward_lines};
use std::time::Duration;

use clap::{Args, ValueEnum};
use leasehold::LeaseService;
use leasehold_storage::Backend;
use sea_orm::sqlx::PgPool;
use sea_orm::sqlx::postgres::{PgAdvisoryLock, PgPoolOptions};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

use super::statements::{R, err};
use super::{Ctx, Row, stats, stopwatch};

const ROW: &str = "lock_handoff_processes";
const TTL: Duration = Duration::from_secs(30);
/// How long a waiter waits in `try_locker` before the round fails.
const WAIT: Duration = Duration::from_secs(20);
/// Time for a waiter to be refused once and start waiting (and LISTEN on PostgreSQL).
const SETTLE: Duration = Duration::from_millis(400);
/// How long this process waits for a line from the peer.
const ANSWER: Duration = Duration::from_secs(40);

/// Which locks a ping-pong uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PeerMode {
    /// `LeaseService::lock` / `try_locker` / `LockGuard::unlock`.
    Service,
    /// `PgAdvisoryLock` (PostgreSQL only).
    Advisory,
}

/// Options of the hidden `bench-peer` subcommand (started by `leasehold-lab bench`).
#[derive(Debug, Clone, Args)]
pub struct PeerArgs {
    /// Namespace of the `ping` and `pong` locks.
    #[arg(long)]
    pub namespace: String,
    /// Which locks to play with.
    #[arg(long, value_enum, default_value = "service")]
    pub mode: PeerMode,
}

/// The peer process, seen from this one. Killed when dropped.
struct Peer(LabChild);

impl Peer {
    fn spawn(ctx: &Ctx, ns: &str, mode: PeerMode) -> R<Self> {
        let mode = match mode {
            PeerMode::Service => "service",
            PeerMode::Advisory => "advisory",
        };
        LabChild::spawn(
            "peer",
            [
                "--db",
                &ctx.url,
                "--table-prefix",
                &ctx.prefix,
                "bench-peer",
                "--namespace",
                ns,
                "--mode",
                mode,
            ],
        )
        .map(Self)
    }

    fn send(&mut self, line: &str) -> R<()> {
        self.0.send(line)
    }

    /// Waits for the line `want`; the peer's `error: …` line or its exit becomes the error.
    async fn expect(&mut self, want: &str) -> R<()> {
        let line = self.0.line(want, ANSWER).await?;
        if line == want {
            Ok(())
        } else {
            Err(self.0.unexpected(&line))
        }
    }
}

/// One round seen from this process: the round trip t1 − t0 (two handoffs).
async fn round(peer: &mut Peer, service: &LeaseService, ns: &str) -> R<Duration> {
    let ping = service
        .lock(ns, "ping", TTL)
        .await
        .map_err(err)?
        .ok_or("ping was held at the start of a round")?;
    peer.send("go")?;
    peer.expect("waiting").await?;
    let waiter = {
        let (service, ns) = (service.clone(), ns.to_owned());
        tokio::spawn(async move {
            let got = service.try_locker(&ns, "pong", Some(WAIT), TTL).await;
            (got, stopwatch())
        })
    };
    tokio::time::sleep(SETTLE).await;
    let t0 = stopwatch();
    ping.unlock().await.map_err(err)?;
    let (got, t1) = waiter.await.map_err(err)?;
    let pong = got.map_err(err)?.ok_or("pong never came back")?;
    pong.unlock().await.map_err(err)?;
    peer.expect("done").await?;
    Ok(t1.saturating_duration_since(t0))
}

/// The same round with `PgAdvisoryLock`.
async fn advisory_round(peer: &mut Peer, pool: &PgPool, ns: &str) -> R<Duration> {
    let (ping, pong) = advisory_locks(ns);
    let conn = pool.acquire().await.map_err(err)?;
    let held = ping.acquire(conn).await.map_err(err)?;
    peer.send("go")?;
    peer.expect("waiting").await?;
    let waiter = {
        let pool = pool.clone();
        tokio::spawn(async move {
            let conn = pool.acquire().await.map_err(err)?;
            let got = pong.acquire(conn).await.map_err(err)?;
            let t1 = stopwatch();
            got.release_now().await.map_err(err)?;
            R::Ok(t1)
        })
    };
    tokio::time::sleep(SETTLE).await;
    let t0 = stopwatch();
    held.release_now().await.map_err(err)?;
    let t1 = waiter.await.map_err(err)??;
    peer.expect("done").await?;
    Ok(t1.saturating_duration_since(t0))
}

fn advisory_locks(ns: &str) -> (PgAdvisoryLock, PgAdvisoryLock) {
    (
        PgAdvisoryLock::new(format!("{ns}/ping")),
        PgAdvisoryLock::new(format!("{ns}/pong")),
    )
}

/// `rounds` round trips against a fresh peer; each sample is half a round trip.
async fn play(ctx: &Ctx, ns: &str, mode: PeerMode, rounds: usize) -> R<Vec<Duration>> {
    let mut peer = Peer::spawn(ctx, ns, mode)?;
    peer.expect("ready").await?;
    let mut halves = Vec::with_capacity(rounds);
    match mode {
        PeerMode::Service => {
            let service = LeaseService::builder(ctx.url.clone())
                .table_prefix(ctx.prefix.clone())
                .holder_id(format!("bench-handoff-parent-{}", std::process::id()))
                .build()
                .await
                .map_err(err)?;
            let mut outcome = Ok(());
            for _ in 0..rounds {
                match round(&mut peer, &service, ns).await {
                    Ok(d) => halves.push(d / 2),
                    Err(e) => {
                        outcome = Err(e);
                        break;
                    }
                }
            }
            let _ = service.shutdown().await;
            outcome?;
        }
        PeerMode::Advisory => {
            let pool = ctx
                .store
                .connection()
                .get_postgres_connection_pool()
                .clone();
            for _ in 0..rounds {
                halves.push(advisory_round(&mut peer, &pool, ns).await? / 2);
            }
        }
    }
    peer.send("quit")?;
    peer.expect("bye").await?;
    Ok(halves)
}

fn ms(d: &[Duration]) -> Vec<f64> {
    d.iter().map(|d| d.as_secs_f64() * 1e3).collect()
}

/// The `lock_handoff_processes` row. `in_process` is the `lock_handoff` row, the baseline off
/// PostgreSQL.
pub(crate) async fn row(ctx: &Ctx, in_process: &Row) -> Row {
    let rounds = if ctx.plan.quick { 3 } else { 20 };
    let ours = match play(
        ctx,
        &ctx.namespace("handoff-proc"),
        PeerMode::Service,
        rounds,
    )
    .await
    {
        Ok(d) => d,
        Err(e) => return Row::skipped(ROW, "ms", format!("not measured: {e}")),
    };
    let (baseline, base, base_note) = if ctx.backend() == Backend::Postgres {
        let ns = ctx.namespace("handoff-proc-base");
        match play(ctx, &ns, PeerMode::Advisory, rounds).await {
            Ok(d) => (
                "PgAdvisoryLock ping-pong between the same two processes".to_owned(),
                stats(&mut ms(&d)),
                String::new(),
            ),
            Err(e) => (String::new(), None, format!("; baseline not measured: {e}")),
        }
    } else {
        let s = in_process.median.zip(in_process.p99);
        (
            "lock_handoff (two services in one process)".to_owned(),
            s.map(|(median, p99)| super::Stats { median, p99 }),
            String::new(),
        )
    };
    Row::new(ROW, "ms")
        .measured(stats(&mut ms(&ours)))
        .against(baseline, base)
        .note(format!(
            "{rounds} ping-pong rounds with a peer process (`bench-peer`), each half a round trip: unlock → the other process's waiting try_locker returns{}{base_note}",
            match ctx.backend() {
                Backend::Postgres => "; woken by the doorbell (NOTIFY)",
                Backend::Sqlite => "; woken by the doorbell (datagram next to the file)",
                _ => "; woken by the doorbell (named lock)",
            },
        ))
}

/// Runs the peer: `ready`, then per `go` line one round (`waiting`, `done`), `bye` on `quit`.
/// Exits at once when stdin closes. Returns the exit code.
pub async fn run(db: &str, table_prefix: &str, args: &PeerArgs) -> u8 {
    if std::env::var_os("RUST_LOG").is_none() {
        log::set_max_level(log::LevelFilter::Error);
    }
    let (tx, mut lines) = unbounded_channel();
    // The parent holds our stdin open; when it goes away (even by SIGKILL) we exit.
    std::thread::spawn(move || {
        forward_lines(std::io::stdin().lock(), &tx);
        std::process::exit(0);
    });
    match serve(db, table_prefix, args, &mut lines).await {
        Ok(()) => {
            println!("bye");
            0
        }
        Err(e) => {
            println!("error: {}", e.replace('\n', " "));
            1
        }
    }
}

/// The peer's locks.
enum Side {
    Service(LeaseService),
    Advisory(PgPool),
}

async fn serve(
    db: &str,
    table_prefix: &str,
    args: &PeerArgs,
    lines: &mut UnboundedReceiver<String>,
) -> R<()> {
    let side = match args.mode {
        PeerMode::Service => Side::Service(
            LeaseService::builder(db.to_owned())
                .table_prefix(table_prefix.to_owned())
                .holder_id(format!("bench-handoff-peer-{}", std::process::id()))
                .build()
                .await
                .map_err(err)?,
        ),
        PeerMode::Advisory => Side::Advisory(
            PgPoolOptions::new()
                .max_connections(2)
                .connect(db)
                .await
                .map_err(err)?,
        ),
    };
    println!("ready");
    let ns = args.namespace.as_str();
    let mut outcome = Ok(());
    while let Some(line) = lines.recv().await {
        let played = match (line.as_str(), &side) {
            ("quit", _) => break,
            ("go", Side::Service(service)) => peer_round(service, ns).await,
            ("go", Side::Advisory(pool)) => peer_advisory_round(pool, ns).await,
            (other, _) => Err(format!("unexpected line {other:?}")),
        };
        if let Err(e) = played {
            outcome = Err(e);
            break;
        }
        println!("done");
    }
    match side {
        Side::Service(service) => {
            service.shutdown().await.map_err(err)?;
        }
        Side::Advisory(pool) => pool.close().await,
    }
    outcome
}

/// One round on the peer: hold `pong`, wait for `ping`, then hand `pong` back at once.
async fn peer_round(service: &LeaseService, ns: &str) -> R<()> {
    let pong = service
        .lock(ns, "pong", TTL)
        .await
        .map_err(err)?
        .ok_or("pong was held at the start of a round")?;
    let waiter = {
        let (service, ns) = (service.clone(), ns.to_owned());
        tokio::spawn(async move {
            let ping = service
                .try_locker(&ns, "ping", Some(WAIT), TTL)
                .await
                .map_err(err)?
                .ok_or("ping never came")?;
            pong.unlock().await.map_err(err)?;
            ping.unlock().await.map_err(err)
        })
    };
    println!("waiting");
    waiter.await.map_err(err)?
}

/// The same with `PgAdvisoryLock`.
async fn peer_advisory_round(pool: &PgPool, ns: &str) -> R<()> {
    let (ping, pong) = advisory_locks(ns);
    let conn = pool.acquire().await.map_err(err)?;
    let held = pong.acquire(conn).await.map_err(err)?;
    let waiter = {
        let pool = pool.clone();
        tokio::spawn(async move {
            let conn = pool.acquire().await.map_err(err)?;
            let got = ping.acquire(conn).await.map_err(err)?;
            held.release_now().await.map_err(err)?;
            got.release_now().await.map_err(err)?;
            R::Ok(())
        })
    };
    println!("waiting");
    waiter.await.map_err(err)?
}
