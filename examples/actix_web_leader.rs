//! An actix-web app whose `/work` endpoint works only on the leader, inside
//! `LeaseTask::begin_work`, and whose `/status` shows the current holder of the leadership
//! lease (read from the database).
//!
//! On SIGTERM (what Kubernetes and systemd send to stop a process) or SIGINT (Ctrl-C) it hands
//! leadership over before it exits (actix-web's own signal handling is off, so the order is
//! ours): no new work, the running `/work` calls return, the lease is released and a standby
//! takes over at once; then the server stops.
//!
//! Start two copies on different ports and the same database; stop the leader (`kill` or
//! Ctrl-C) and watch the other one start answering `/work`. `--db URL` and `--port N` (0: any
//! free port) may also come from `LEASEHOLD_DATABASE_URL` and `PORT`.
//!
//! ```sh
//! cargo run -p leasehold --example actix_web_leader -- --port 8080 --db sqlite:///tmp/leader.db?mode=rwc
//! cargo run -p leasehold --example actix_web_leader -- --port 8081 --db sqlite:///tmp/leader.db?mode=rwc
//! curl localhost:8080/status; curl -X POST localhost:8080/work
//! ```
//!
//! With `--smoke` it binds an ephemeral port, calls its own endpoints once and exits: CI runs it
//! that way.

use std::io::{Read, Write};
use std::time::Duration;

use actix_web::{App, HttpResponse, HttpServer, web};
use leasehold::{LeaseConfig, LeaseService, LeaseTask, LeaseTaskOptions};

const LEADER: &str = "web-leader";

/// How long a hand-over waits for running `/work` calls before it ends the tenure anyway.
const DRAIN: Duration = Duration::from_secs(5);

/// Works only inside a tenure of the leadership lease; 503 elsewhere. `begin_work` is `None` on
/// a standby and while a hand-over drains; its guard, held until the work returns, makes the
/// hand-over wait for this call before it releases the lease.
async fn work(service: web::Data<LeaseService>, task: web::Data<LeaseTask>) -> HttpResponse {
    let Some(work) = task.begin_work() else {
        return HttpResponse::ServiceUnavailable().body(format!(
            "{} is not the leader; try the other instance\n",
            service.holder()
        ));
    };
    // ... the leader-only work, fenced with `work.token()` where it writes ...
    let done = format!(
        "done by the leader {} (token {})\n",
        service.holder(),
        work.token()
    );
    drop(work); // returned: a hand-over may release now
    HttpResponse::Ok().body(done)
}

async fn status(service: web::Data<LeaseService>) -> HttpResponse {
    match service.current_holder(LEADER).await {
        Ok(Some(record)) => HttpResponse::Ok().body(format!(
            "leader: {} (token {}, {:?} left by the database clock); this instance: {}\n",
            record.holder,
            record.token,
            record.time_left(),
            service.holder()
        )),
        Ok(None) => HttpResponse::Ok().body(format!(
            "no leader right now; this instance: {}\n",
            service.holder()
        )),
        Err(e) => HttpResponse::InternalServerError().body(format!("cannot read the lease: {e}\n")),
    }
}

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

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

#[actix_web::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let stop_signal = shutdown_signal()?;
    let smoke = std::env::args().any(|a| a == "--smoke");
    let dir = std::env::temp_dir().join(format!("leasehold-web-{}", std::process::id()));
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
    let data = web::Data::new(service.clone());
    let task_data = web::Data::new(task.clone());
    let server = HttpServer::new(move || {
        App::new()
            .app_data(data.clone())
            .app_data(task_data.clone())
            .route("/work", web::post().to(work))
            .route("/status", web::get().to(status))
    })
    .workers(1)
    // Our handler decides the order at SIGTERM: hand over first, then stop serving.
    .disable_signals()
    .bind(("127.0.0.1", port))?;
    let bound = server.addrs()[0].port();
    println!(
        "listening on http://127.0.0.1:{bound} as {}",
        service.holder()
    );
    let server = server.run();

    if smoke {
        let handle = server.handle();
        tokio::spawn(server);
        tokio::time::timeout(Duration::from_secs(10), task.acquired()).await??;
        let (work, status) = tokio::task::spawn_blocking(move || {
            Ok::<_, std::io::Error>((
                request(bound, "POST", "/work")?,
                request(bound, "GET", "/status")?,
            ))
        })
        .await??;
        print!(
            "POST /work -> {}GET /status -> {}",
            last_line(&work),
            last_line(&status)
        );
        let ok = work.starts_with("HTTP/1.1 200")
            && status.contains(&format!("leader: {}", service.holder()));
        handle.stop(true).await;
        service.shutdown().await?;
        let _ = std::fs::remove_dir_all(&dir);
        if !ok {
            return Err(
                "smoke test: the leader did not answer /work or /status as expected".into(),
            );
        }
        return Ok(());
    }
    let handle = server.handle();
    let serving = tokio::spawn(server);
    let signal = stop_signal.await;
    // Hand over first: no new work, the running calls return, then the release wakes a standby.
    let outcome = service.tasks().hand_over(LEADER, DRAIN).await?;
    println!("{signal}: handed over ({outcome:?})");
    handle.stop(true).await;
    serving.await??;
    service.shutdown().await?;
    Ok(())
}

fn last_line(response: &str) -> String {
    format!("{}\n", response.lines().last().unwrap_or_default())
}
