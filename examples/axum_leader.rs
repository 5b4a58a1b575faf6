//! An axum app with the `LeaseService` and its leadership task in its state: `/work` works
//! only on the leader, inside `LeaseTask::begin_work`, and answers 503 elsewhere; `/livez` and
//! `/readyz` answer from `LeaseService::health()`.
//!
//! On SIGTERM (what Kubernetes and systemd send to stop a process) or SIGINT (Ctrl-C) it hands
//! leadership over before it exits: no new work is taken, the running `/work` calls return,
//! the lease is released, and a standby takes over at once instead of after a lease term.
//!
//! Start two copies on different ports and the same database; stop the leader (`kill` or
//! Ctrl-C) and watch the other one start answering `/work`. `--db URL` and `--port N` (0: any
//! free port) may also come from `LEASEHOLD_DATABASE_URL` and `PORT`.
//!
//! ```sh
//! cargo run -p leasehold --example axum_leader -- --port 8080 --db sqlite:///tmp/leader.db?mode=rwc
//! cargo run -p leasehold --example axum_leader -- --port 8081 --db sqlite:///tmp/leader.db?mode=rwc
//! curl -X POST localhost:8080/work; curl -i localhost:8081/readyz
//! ```
//!
//! `tests/axum_leader.rs` builds [`router`] for a leader and a standby and calls both;
//! `tests/rollout_hands_over.rs` runs two copies and stops the leader with SIGTERM. With
//! `--smoke` it binds an ephemeral port, calls its own endpoints once and exits: CI runs it
//! that way.

use std::io::{Read, Write};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use leasehold::{LeaseConfig, LeaseService, LeaseTask, LeaseTaskOptions};

/// The leadership lease: whoever holds it does `/work`.
pub const LEADER: &str = "web-leader";

/// How long a hand-over waits for running `/work` calls before it ends the tenure anyway.
const DRAIN: Duration = Duration::from_secs(5);

/// What every handler reads: the service, and the lease task of [`LEADER`].
#[derive(Clone)]
pub struct App {
    /// The session: health, holder, shutdown.
    pub service: LeaseService,
    /// The leadership task: leader-only work begins on it.
    pub task: LeaseTask,
}

/// The app's routes over its state.
pub fn router(service: LeaseService, task: LeaseTask) -> Router {
    Router::new()
        .route("/work", post(work))
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .with_state(App { service, task })
}

/// Works only inside a tenure of [`LEADER`]; 503 elsewhere, so a load balancer can retry on the
/// leader. `begin_work` (a memory lookup, no database round trip) is `None` on a standby and
/// while a hand-over drains; its guard, held until the work returns, makes the hand-over wait
/// for this call before it releases the lease, so the successor never overlaps it.
async fn work(State(app): State<App>) -> (StatusCode, String) {
    let holder = app.service.holder();
    let Some(work) = app.task.begin_work() else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{holder} is not the leader; try the other instance\n"),
        );
    };
    // ... the leader-only work, fenced with `work.token()` where it writes ...
    let done = format!("done by the leader {holder} (token {})\n", work.token());
    drop(work); // returned: a hand-over may release now
    (StatusCode::OK, done)
}

/// Liveness: fails only when the service is shut down or its engine does not answer.
async fn livez(State(App { service, .. }): State<App>) -> (StatusCode, String) {
    let health = service.health().await;
    let code = if health.is_live() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, format!("{health}\n"))
}

/// Readiness: fails while the database is unreachable or renewals are late.
async fn readyz(State(App { service, .. }): State<App>) -> (StatusCode, String) {
    let health = service.health().await;
    let code = if health.is_ready() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, format!("{health}\n"))
}

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

/// Resolves on SIGTERM or SIGINT (on other platforms, Ctrl-C) and names it. The handlers are
/// installed when this is called, not when it is first polled: a signal that arrives while the
/// service starts is kept for the wait instead of killing the process without a hand-over.
///
/// # Errors
/// When a handler cannot be installed.
fn shutdown_signal() -> std::io::Result<impl Future<Output = &'static str>> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        Ok(async move {
            tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
            }
        })
    }
    #[cfg(not(unix))]
    {
        Ok(async {
            let _ = tokio::signal::ctrl_c().await;
            "Ctrl-C"
        })
    }
}

/// One plain HTTP/1.1 request to ourselves (no client dependency for a smoke test).
fn request(port: u16, method: &str, path: &str) -> std::io::Result<String> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let stop_signal = shutdown_signal()?;
    let smoke = std::env::args().any(|a| a == "--smoke");
    let dir = std::env::temp_dir().join(format!("leasehold-axum-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let url = arg("--db")
        .or_else(|| std::env::var("LEASEHOLD_DATABASE_URL").ok())
        .unwrap_or_else(|| format!("sqlite://{}?mode=rwc", dir.join("leader.db").display()));
    let port: u16 = if smoke {
        0
    } else {
        arg("--port")
            .or_else(|| std::env::var("PORT").ok())
            .and_then(|p| p.parse().ok())
            .unwrap_or(8080)
    };

    let service = LeaseService::builder(&url)
        .config(LeaseConfig::default().with_term(Duration::from_secs(10)))
        .build()
        .await?;
    let task = service
        .start_lease_task(
            LEADER,
            LeaseTaskOptions::new()
                .on_acquired(|token, _| println!("this instance leads (token {token})")),
        )
        .await?;
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    let bound = listener.local_addr()?.port();
    println!(
        "listening on http://127.0.0.1:{bound} as {}",
        service.holder()
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(
        axum::serve(listener, router(service.clone(), task.clone()))
            .with_graceful_shutdown(async move {
                let _ = stopped.await;
            })
            .into_future(),
    );

    if smoke {
        tokio::time::timeout(Duration::from_secs(10), task.acquired()).await??;
        let (work, ready) = tokio::task::spawn_blocking(move || {
            Ok::<_, std::io::Error>((
                request(bound, "POST", "/work")?,
                request(bound, "GET", "/readyz")?,
            ))
        })
        .await??;
        let last = |r: &str| r.lines().last().unwrap_or_default().to_owned();
        println!("POST /work -> {}", last(&work));
        println!("GET /readyz -> {}", last(&ready));
        let ok = work.starts_with("HTTP/1.1 200") && ready.starts_with("HTTP/1.1 200");
        let _ = stop.send(());
        server.await??;
        service.shutdown().await?;
        let _ = std::fs::remove_dir_all(&dir);
        if !ok {
            return Err("smoke test: the leader did not answer /work or /readyz with 200".into());
        }
        return Ok(());
    }
    let signal = stop_signal.await;
    // Hand over first: no new work, the running calls return, then the release wakes a standby.
    // The server keeps answering meanwhile (503 for /work), so no request is refused.
    let outcome = service.tasks().hand_over(LEADER, DRAIN).await?;
    println!("{signal}: handed over ({outcome:?})");
    let _ = stop.send(());
    server.await??;
    service.shutdown().await?;
    Ok(())
}
