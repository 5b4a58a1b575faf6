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
//! The exporter is the small `TextRecorder` below (about 100 lines) rather than
//! `metrics-exporter-prometheus`: that crate brings its own HTTP server stack (hyper) and a
//! histogram library for a job an application usually does with the server it already has, and
//! leasehold's metrics need only counters, gauges and sum/count summaries. With
//! `metrics-exporter-prometheus` installed as the recorder instead, the same names appear.
//!
//! With `--smoke` it binds an ephemeral port, reads its own endpoints once and exits: CI runs it
//! that way.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use actix_web::{App, HttpResponse, HttpServer, web};
use leasehold::{ClockRateOptions, LeaseConfig, LeaseService, LeaseTaskOptions};
use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};

const LEADER: &str = "report-leader";

/// One series: a counter's value, a gauge's value (f64 bits), or a summary's sum (f64 bits)
/// and count.
#[derive(Default)]
struct Series {
    value: AtomicU64,
    count: AtomicU64,
}

impl Series {
    fn add(&self, by: f64) {
        let _ = self
            .value
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some((f64::from_bits(v) + by).to_bits())
            });
    }
}

impl CounterFn for Series {
    fn increment(&self, by: u64) {
        self.value.fetch_add(by, Ordering::Relaxed);
    }
    fn absolute(&self, value: u64) {
        self.value.fetch_max(value, Ordering::Relaxed);
    }
}

impl GaugeFn for Series {
    fn increment(&self, by: f64) {
        self.add(by);
    }
    fn decrement(&self, by: f64) {
        self.add(-by);
    }
    fn set(&self, value: f64) {
        self.value.store(value.to_bits(), Ordering::Relaxed);
    }
}

impl HistogramFn for Series {
    fn record(&self, value: f64) {
        self.add(value);
        self.count.fetch_add(1, Ordering::Relaxed);
    }
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Counter,
    Gauge,
    Summary,
}

/// Every series, by (metric name, rendered labels).
type SeriesMap = BTreeMap<(String, String), (Kind, Arc<Series>)>;

/// A `metrics` recorder that renders the Prometheus text exposition format.
#[derive(Default, Clone)]
struct TextRecorder {
    series: Arc<Mutex<SeriesMap>>,
}

impl TextRecorder {
    fn register(&self, key: &Key, kind: Kind) -> Arc<Series> {
        let labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}=\"{}\"", l.key(), escape(l.value())))
            .collect();
        let id = (key.name().to_owned(), labels.join(","));
        let mut map = self.series.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(&map.entry(id).or_insert_with(|| (kind, Arc::default())).1)
    }

    fn render(&self) -> String {
        let map = self.series.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out = String::new();
        let mut typed = String::new();
        for ((name, labels), (kind, s)) in map.iter() {
            if *name != typed {
                let kind = match kind {
                    Kind::Counter => "counter",
                    Kind::Gauge => "gauge",
                    Kind::Summary => "summary",
                };
                let _ = writeln!(out, "# TYPE {name} {kind}");
                typed.clone_from(name);
            }
            let braced = |suffix: &str| {
                if labels.is_empty() {
                    format!("{name}{suffix}")
                } else {
                    format!("{name}{suffix}{{{labels}}}")
                }
            };
            let value = s.value.load(Ordering::Relaxed);
            let _ = match kind {
                Kind::Counter => writeln!(out, "{} {value}", braced("")),
                Kind::Gauge => writeln!(out, "{} {}", braced(""), f64::from_bits(value)),
                Kind::Summary => writeln!(
                    out,
                    "{} {}\n{} {}",
                    braced("_sum"),
                    f64::from_bits(value),
                    braced("_count"),
                    s.count.load(Ordering::Relaxed)
                ),
            };
        }
        out
    }
}

fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl Recorder for TextRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.register(key, Kind::Counter))
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.register(key, Kind::Gauge))
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(self.register(key, Kind::Summary))
    }
}

async fn metrics_text(recorder: web::Data<TextRecorder>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(recorder.render())
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
    let recorder = TextRecorder::default();
    metrics::set_global_recorder(recorder.clone())?;

    let smoke = std::env::args().any(|a| a == "--smoke");
    let dir = std::env::temp_dir().join(format!("leasehold-prom-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let url = arg("--db")
        .unwrap_or_else(|| format!("sqlite://{}?mode=rwc", dir.join("leases.db").display()));
    let port: u16 = if smoke {
        0
    } else {
        arg("--port").and_then(|p| p.parse().ok()).unwrap_or(9898)
    };

    let service = LeaseService::builder(&url)
        .config(LeaseConfig::default().with_term(Duration::from_secs(10)))
        // The clock-rate check in the background: 20 reads of the database clock per 2 s.
        .check_clock_rate(ClockRateOptions::new())
        .build()
        .await?;
    let task = service
        .start_lease_task(LEADER, LeaseTaskOptions::new())
        .await?;
    let (service_data, recorder_data) = (web::Data::new(service.clone()), web::Data::new(recorder));
    let server = HttpServer::new(move || {
        App::new()
            .app_data(service_data.clone())
            .app_data(recorder_data.clone())
            .route("/metrics", web::get().to(metrics_text))
            .route("/livez", web::get().to(livez))
            .route("/readyz", web::get().to(readyz))
    })
    .workers(1)
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
    server.await?;
    service.shutdown().await?;
    Ok(())
}
