//! An axum app with the `LeaseService` in its state: `/work` works only on the leader and
//! answers 503 elsewhere, `/livez` and `/readyz` answer from `LeaseService::health()`.
//!
//! Start two copies on different ports and the same database; stop the leader and watch the
//! other one start answering `/work`.
//!
//! ```sh
//! cargo run -p leasehold --example axum_leader -- --port 8080 --db sqlite:///tmp/leader.db?mode=rwc
//! cargo run -p leasehold --example axum_leader -- --port 8081 --db sqlite:///tmp/leader.db?mode=rwc
//! curl -X POST localhost:8080/work; curl -i localhost:8081/readyz
//! ```
//!
//! `tests/axum_leader.rs` builds [`router`] for a leader and a standby and calls both. With
//! `--smoke` it binds an ephemeral port, calls its own endpoints once and exits: CI runs it
//! that way.

use std::io::{Read, Write};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use leasehold::{LeaseConfig, LeaseService, LeaseTaskOptions};

/// The leadership lease: whoever holds it does `/work`.
pub const LEADER: &str = "web-leader";

/// The app: the service is the state every handler reads.
pub fn router(service: LeaseService) -> Router {
    Router::new()
        .route("/work", post(work))
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .with_state(service)
}

/// Works only while this instance holds [`LEADER`] (a memory lookup, no database round trip);
/// 503 elsewhere, so a load balancer can retry on the leader.
async fn work(State(service): State<LeaseService>) -> (StatusCode, String) {
    if service.has_lease(LEADER) {
        (
            StatusCode::OK,
            format!("done by the leader {}\n", service.holder()),
        )
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "{} is not the leader; try the other instance\n",
                service.holder()
            ),
        )
    }
}

/// Liveness: fails only when the service is shut down or its engine does not answer.
async fn livez(State(service): State<LeaseService>) -> (StatusCode, String) {
    let health = service.health().await;
    let code = if health.is_live() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, format!("{health}\n"))
}

/// Readiness: fails while the database is unreachable or renewals are late.
async fn readyz(State(service): State<LeaseService>) -> (StatusCode, String) {
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
    let smoke = std::env::args().any(|a| a == "--smoke");
    let dir = std::env::temp_dir().join(format!("leasehold-axum-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let url = arg("--db")
        .unwrap_or_else(|| format!("sqlite://{}?mode=rwc", dir.join("leader.db").display()));
    let port: u16 = if smoke {
        0
    } else {
        arg("--port").and_then(|p| p.parse().ok()).unwrap_or(8080)
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
        axum::serve(listener, router(service.clone()))
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
    tokio::signal::ctrl_c().await?;
    let _ = stop.send(());
    server.await??;
    service.shutdown().await?;
    Ok(())
}
