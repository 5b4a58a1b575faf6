//! A throwaway HAProxy: one process in the foreground (`-db`) on a spare loopback port, with a
//! config file the caller writes into a temp dir of its own, a stats socket there, and its log
//! on stderr into that dir; stopped by PID (SIGTERM, then SIGKILL) when dropped. And
//! [`HealthAgent`], the HTTP health check HAProxy asks about a server (`option httpchk` with
//! `check port`), answering from a function of the test's.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use nix::sys::signal::Signal;

use super::{ServerError, TempDir, free_port, io, poll_until, signal, tail, which};

/// The paths and port a config is written for.
#[derive(Debug, Clone)]
pub struct HaProxyPaths {
    /// The port clients connect to (the frontend's `bind`).
    pub port: u16,
    /// The stats socket (`stats socket` in `global`), read by [`HaProxy::server`].
    pub stats: PathBuf,
}

/// A running HAProxy. Dropping it stops the process and removes its dir.
#[derive(Debug)]
pub struct HaProxy {
    dir: TempDir,
    port: u16,
    config: String,
    child: Option<Child>,
}

/// One server's state as the stats socket shows it (`show stat`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerState {
    /// `UP`, `DOWN`, `UP 1/2` (going down), `DOWN 1/2` (coming up), `MAINT`, `no check`.
    pub status: String,
    /// Sessions open to it now (`scur`).
    pub current: u64,
    /// Sessions it was given since the start (`stot`).
    pub total: u64,
}

impl ServerState {
    /// Whether HAProxy has taken it out of rotation (`DOWN 1/2` is down, on its way back up).
    #[must_use]
    pub fn is_down(&self) -> bool {
        self.status.starts_with("DOWN") || self.status.starts_with("MAINT")
    }
}

impl HaProxy {
    /// Writes the config `config` builds for a spare port and a stats socket in a new temp
    /// dir, checks it (`haproxy -c`), starts HAProxy in the foreground and waits until its
    /// stats socket answers.
    ///
    /// # Errors
    /// [`ServerError::Missing`] without `haproxy`; the check's output, or the log of a process
    /// that exited or did not answer within 10 s.
    pub fn start(config: impl FnOnce(&HaProxyPaths) -> String) -> Result<Self, ServerError> {
        let bin = which("haproxy", "haproxy")?;
        let dir = TempDir::new("haproxy")?;
        let paths = HaProxyPaths {
            port: free_port()?,
            stats: dir.path().join("stats.sock"),
        };
        let text = config(&paths);
        let file = dir.path().join("haproxy.cfg");
        std::fs::write(&file, &text).map_err(io("write haproxy.cfg"))?;
        super::run(Command::new(&bin).arg("-c").arg("-q").arg("-f").arg(&file))?;
        let log = std::fs::File::create(dir.path().join("haproxy.log"))
            .map_err(io("create haproxy.log"))?;
        let child = Command::new(&bin)
            .arg("-db")
            .arg("-f")
            .arg(&file)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(io("haproxy.log"))?)
            .stderr(log)
            .spawn()
            .map_err(io("spawn haproxy"))?;
        let mut proxy = Self {
            dir,
            port: paths.port,
            config: text,
            child: Some(child),
        };
        let log_path = proxy.dir.path().join("haproxy.log");
        poll_until(
            Duration::from_secs(10),
            "haproxy's stats socket",
            || tail(&log_path),
            || proxy.exited() || proxy.stat().is_some(),
        )?;
        if proxy.exited() {
            return Err(ServerError::Command {
                command: "haproxy -db".into(),
                detail: format!("exited at start: {}", proxy.log()),
            });
        }
        Ok(proxy)
    }

    fn exited(&mut self) -> bool {
        self.child
            .as_mut()
            .is_none_or(|c| matches!(c.try_wait(), Ok(Some(_))))
    }

    /// The port clients connect to.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The config it runs with.
    #[must_use]
    pub fn config(&self) -> &str {
        &self.config
    }

    /// The end of its log (health check transitions, alerts).
    #[must_use]
    pub fn log(&self) -> String {
        tail(&self.dir.path().join("haproxy.log"))
    }

    /// `show stat` on the stats socket: the CSV, its header line first.
    fn stat(&self) -> Option<String> {
        let mut s = UnixStream::connect(self.dir.path().join("stats.sock")).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        s.write_all(b"show stat\n").ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).ok()?;
        out.starts_with("# pxname").then_some(out)
    }

    /// Server `server` of backend (or `listen` section) `backend`, as the stats socket shows it.
    #[must_use]
    pub fn server(&self, backend: &str, server: &str) -> Option<ServerState> {
        let csv = self.stat()?;
        let mut lines = csv.lines();
        let header: Vec<&str> = lines.next()?.trim_start_matches("# ").split(',').collect();
        let col = |name: &str| header.iter().position(|h| *h == name);
        let (status, scur, stot) = (col("status")?, col("scur")?, col("stot")?);
        lines
            .map(|l| l.split(',').collect::<Vec<_>>())
            .find_map(|f| {
                (f.first() == Some(&backend) && f.get(1) == Some(&server)).then(|| ServerState {
                    status: f.get(status).copied().unwrap_or_default().to_owned(),
                    current: f.get(scur).and_then(|v| v.parse().ok()).unwrap_or(0),
                    total: f.get(stot).and_then(|v| v.parse().ok()).unwrap_or(0),
                })
            })
    }
}

impl Drop for HaProxy {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            signal(child.id(), Signal::SIGTERM);
            let until = crate::clock::deadline(Duration::from_secs(5));
            while !crate::clock::passed(until) {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// An HTTP health check of one server on a spare loopback port, as a `clustercheck` script
/// behind xinetd serves one on port 9200: every request is answered `200` when `healthy()`
/// holds and `503` otherwise, then the connection is closed. Requests are served one at a time,
/// so a slow answer delays only this server's next check (HAProxy's `timeout check` bounds it).
/// Dropping it stops serving.
#[derive(Debug)]
pub struct HealthAgent {
    port: u16,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl HealthAgent {
    /// Serves `healthy` on a spare port.
    ///
    /// # Errors
    /// The bind error.
    pub fn start(healthy: impl Fn() -> bool + Send + 'static) -> Result<Self, ServerError> {
        let listener = TcpListener::bind("127.0.0.1:0").map_err(io("bind a health check"))?;
        let port = listener.local_addr().map_err(io("local addr"))?.port();
        listener
            .set_nonblocking(true)
            .map_err(io("health check listener"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            while !stopped.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((conn, _)) => answer(conn, healthy()),
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        Ok(Self {
            port,
            stop,
            thread: Some(thread),
        })
    }

    /// The port HAProxy checks (`check port`).
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }
}

/// Reads the request's head (at most a second) and answers it.
fn answer(mut conn: TcpStream, healthy: bool) {
    let _ = conn.set_nonblocking(false);
    let _ = conn.set_read_timeout(Some(Duration::from_secs(1)));
    let mut buf = [0u8; 1024];
    let mut head = Vec::new();
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match conn.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let (status, body) = if healthy {
        ("200 OK", "synced\n")
    } else {
        ("503 Service Unavailable", "not synced\n")
    };
    let _ = conn.write_all(
        format!(
            "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    );
}

impl Drop for HealthAgent {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
