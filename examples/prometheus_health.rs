//! Health probes and Prometheus metrics for a leasehold service: `/livez` and `/readyz` answer
//! from `LeaseService::health()`, `/metrics` serves every leasehold metric (held leases, "is
//! leader" per name, grants, losses, renewal latency, the clock-rate check) in the Prometheus
//! text format. `docs/grafana-dashboard.json` is a dashboard for them.
//!
//! ```sh
//! cargo run -p leasehold --example prometheus_health -- --port 9898
//! curl localhost:9898/metrics; curl -i localhost:9898/readyz
//! ```
//!
//! The exporter is `metrics-exporter-prometheus` without its HTTP server or push gateway
//! (`default-features = false`: no hyper): it renders the text format, and the application
//! serves it on the server it already has. `leasehold::engine::metrics::describe()` gives every
//! metric its help text and unit and starts the counters at 0.
//!
//! On SIGTERM (what Kubernetes and systemd send to stop a process) or SIGINT (Ctrl-C) it hands
//! its lease over (released, so a standby takes over at once instead of after a term), then
//! stops serving; actix-web's own signal handling is off, so the order is ours. `--db URL` and
//! `--port N` may also come from `LEASEHOLD_DATABASE_URL` and `PORT`.
//!
//! With `--smoke` it binds an ephemeral port, reads its own endpoints once and exits: CI runs it
//! that way.

use std::io::{Read, Write};
use std::time::Duration;

use actix_web::{App, HttpResponse, HttpServer, web};
use leasehold::clock::ClockRateOptions;
use leasehold::{LeaseConfig, LeaseService, LeaseTaskOptions};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

const LEADER: &str = "report-leader";

async fn metrics_text(exporter: web::Data<PrometheusHandle>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(exporter.render())
}

/// Liveness: fails only when the service is shut down or its engine does not answer.
async fn livez(service: web::Data<LeaseService>) -> HttpResponse {
    let health = service.health().await;
    let mut answer = if health.is_live() {
        HttpResponse::Ok()
    } else {
        HttpResponse::ServiceUnavailable()
    };
    answer.body(format!("{health}\n"))
}

/// Readiness: fails while the database is unreachable, renewals are late, or the clock-rate
/// check failed.
async fn readyz(service: web::Data<LeaseService>) -> HttpResponse {
    let health = service.health().await;
    let mut answer = if health.is_ready() {
        HttpResponse::Ok()
    } else {
        HttpResponse::ServiceUnavailable()
    };
    answer.body(format!("{health}\n"))
}

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

/// How long a hand-over waits for running work before it ends the tenure anyway.
const DRAIN: Duration = Duration::from_secs(5);

/// Resolves on SIGTERM or SIGINT (on other platforms, Ctrl-C) and names it. The handlers are
/// installed when this is called, so a signal that arrives while the service starts is kept.
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

/// One plain HTTP/1.1 GET to ourselves (no client dependency for a smoke test).
fn get(port: u16, path: &str) -> std::io::Result<String> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

#[actix_web::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let stop_signal = shutdown_signal()?;
    let exporter = PrometheusBuilder::new().install_recorder()?;
    leasehold::engine::metrics::describe();
    // Without its HTTP server the exporter leaves its periodic upkeep (draining histograms) to
    // the application.
    let upkeep = exporter.clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(5));
        loop {
            every.tick().await;
            upkeep.run_upkeep();
        }
    });

    let smoke = std::env::args().any(|a| a == "--smoke");
    let dir = std::env::temp_dir().join(format!("leasehold-prom-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let url = arg("--db")
        .or_else(|| std::env::var("LEASEHOLD_DATABASE_URL").ok())
        .unwrap_or_else(|| format!("sqlite://{}?mode=rwc", dir.join("leases.db").display()));
    let port: u16 = if smoke {
        0
    } else {
        arg("--port")
            .or_else(|| std::env::var("PORT").ok())
            .and_then(|p| p.parse().ok())
            .unwrap_or(9898)
    };

    let service = LeaseService::builder(&url)
        .config(LeaseConfig::default().with_term(Duration::from_secs(10)))
        // The clock-rate check in the background: 20 reads of the database clock per 2 s.
        .check_clock_rate(ClockRateOptions::new())
        .build()
        .await?;
    let task = service
        .start_lease_task(
            LEADER,
            LeaseTaskOptions::new()
                .on_acquired(|token, _| println!("this instance leads (token {token})")),
        )
        .await?;
    let (service_data, exporter_data) = (web::Data::new(service.clone()), web::Data::new(exporter));
    let server = HttpServer::new(move || {
        App::new()
            .app_data(service_data.clone())
            .app_data(exporter_data.clone())
            .route("/metrics", web::get().to(metrics_text))
            .route("/livez", web::get().to(livez))
            .route("/readyz", web::get().to(readyz))
    })
    .workers(1)
    // Our handler decides the order at SIGTERM: hand over first, then stop serving.
    .disable_signals()
    .bind(("127.0.0.1", port))?;
    let bound = server.addrs()[0].port();
    println!("metrics and probes on http://127.0.0.1:{bound} (/metrics, /livez, /readyz)");
    let server = server.run();

    if smoke {
        let handle = server.handle();
        tokio::spawn(server);
        tokio::time::timeout(Duration::from_secs(10), task.acquired()).await??;
        let (metrics, ready) = tokio::task::spawn_blocking(move || {
            Ok::<_, std::io::Error>((get(bound, "/metrics")?, get(bound, "/readyz")?))
        })
        .await??;
        let leader = format!("leasehold_is_leader{{name=\"{LEADER}\",namespace=\"\"}} 1");
        let leader_other_order =
            format!("leasehold_is_leader{{namespace=\"\",name=\"{LEADER}\"}} 1");
        let found = metrics
            .lines()
            .find(|l| *l == leader || *l == leader_other_order);
        println!("GET /metrics -> {}", found.unwrap_or("(no is_leader line)"));
        println!(
            "GET /readyz -> {}",
            ready.lines().last().unwrap_or_default()
        );
        let ok = found.is_some()
            && metrics.contains("leasehold_leases_held 1")
            && metrics.contains("# HELP leasehold_grants_total")
            && metrics.contains("leasehold_releases_total 0")
            && ready.starts_with("HTTP/1.1 200");
        handle.stop(true).await;
        service.shutdown().await?;
        let _ = std::fs::remove_dir_all(&dir);
        if !ok {
            return Err(format!("smoke test: unexpected answers:\n{metrics}\n{ready}").into());
        }
        println!("ready and leading");
        return Ok(());
    }
    let handle = server.handle();
    let serving = tokio::spawn(server);
    let signal = stop_signal.await;
    let outcome = service.tasks().hand_over(LEADER, DRAIN).await?;
    println!("{signal}: handed over ({outcome:?})");
    handle.stop(true).await;
    serving.await??;
    service.shutdown().await?;
    Ok(())
}
