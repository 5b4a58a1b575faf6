//! Throwaway database servers of the suite's own, on spare loopback ports in temp dirs (never
//! the shared 5432/3306 servers), stopped by PID when dropped; SQLite files; and a TCP
//! balancer (HAProxy) in front of them.

use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// Why a server could not be set up or driven.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// A program the suite needs is not installed.
    #[error("{tool} is not installed ({hint})")]
    Missing {
        /// The program.
        tool: String,
        /// Where it was looked for and how to get it.
        hint: String,
    },
    /// A command failed.
    #[error("`{command}` failed: {detail}")]
    Command {
        /// The command line.
        command: String,
        /// Exit status and output.
        detail: String,
    },
    /// A file system or process operation failed.
    #[error("{what}: {cause}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause (its text is in the message; not the error's `source()`).
        cause: std::io::Error,
    },
    /// The server did not come up in time.
    #[error("{what} did not answer within {secs} s; log: {log}")]
    NotReady {
        /// Which server.
        what: String,
        /// How long we waited.
        secs: u64,
        /// The end of its log.
        log: String,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ServerError {
    let what = what.into();
    move |cause| ServerError::Io { what, cause }
}

/// The longest any one command may run before it is killed (every wait is bounded).
const COMMAND_LIMIT: Duration = Duration::from_secs(90);

/// Runs a command to completion (killed after [`COMMAND_LIMIT`]); its stdout, or an error with
/// its output.
fn run(cmd: &mut Command) -> Result<String, ServerError> {
    use std::io::Read;
    let line = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(io(line.clone()))?;
    let pipe = |p: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = String::new();
            if let Some(mut p) = p {
                let _ = p.read_to_string(&mut buf);
            }
            buf
        })
    };
    let out = pipe(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = pipe(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let until = crate::clock::deadline(COMMAND_LIMIT);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if !crate::clock::passed(until) => {
                std::thread::sleep(Duration::from_millis(10))
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let (stdout, stderr) = (
        out.join().unwrap_or_default(),
        err.join().unwrap_or_default(),
    );
    match status {
        Some(s) if s.success() => Ok(stdout),
        Some(s) => Err(ServerError::Command {
            command: line,
            detail: format!("{s}: {stdout}{stderr}"),
        }),
        None => Err(ServerError::Command {
            command: line,
            detail: format!("killed after {COMMAND_LIMIT:?}: {stdout}{stderr}"),
        }),
    }
}

/// The path of `tool` on `PATH`, or [`ServerError::Missing`].
///
/// # Errors
/// [`ServerError::Missing`] naming the tool and the package that has it.
pub fn which(tool: &str, package: &str) -> Result<PathBuf, ServerError> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path).chain(["/usr/sbin".into(), "/sbin".into()]) {
        let p = dir.join(tool);
        if p.is_file() {
            return Ok(p);
        }
    }
    Err(ServerError::Missing {
        tool: tool.to_owned(),
        hint: format!("not on PATH; install the `{package}` package"),
    })
}

/// A spare loopback port (bound and released; another process could take it, rarely).
///
/// # Errors
/// The bind error.
pub fn free_port() -> Result<u16, ServerError> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(io("bind a spare port"))?;
    Ok(l.local_addr().map_err(io("local addr"))?.port())
}

/// A temp directory removed when dropped.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    /// A new empty directory under the system temp dir, named after `label` and this process.
    ///
    /// # Errors
    /// The file system's error.
    pub fn new(label: &str) -> Result<Self, ServerError> {
        let n: u32 = rand::random();
        let p = std::env::temp_dir().join(format!(
            "leasehold-faults-{label}-{}-{n:08x}",
            std::process::id()
        ));
        std::fs::create_dir_all(&p).map_err(io(format!("create {}", p.display())))?;
        Ok(Self(p))
    }

    /// Its path.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tail(path: &Path) -> String {
    let s = std::fs::read_to_string(path).unwrap_or_default();
    let start = s.len().saturating_sub(1500);
    s.get(start..).unwrap_or_default().to_owned()
}

fn wait_until(
    what: &str,
    secs: u64,
    log: &Path,
    ready: impl FnMut() -> bool,
) -> Result<(), ServerError> {
    poll_until(Duration::from_secs(secs), what, || tail(log), ready)
}

/// Asks `ready` every 100 ms until it holds, for at most `within`; then
/// [`ServerError::NotReady`] naming `what`, with the server log `log` gives.
fn poll_until(
    within: Duration,
    what: &str,
    log: impl FnOnce() -> String,
    mut ready: impl FnMut() -> bool,
) -> Result<(), ServerError> {
    let until = crate::clock::deadline(within);
    while !crate::clock::passed(until) {
        if ready() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(ServerError::NotReady {
        what: what.to_owned(),
        secs: within.as_secs(),
        log: log(),
    })
}

/// Sends `signal` to `pid`, ignoring a process already gone.
pub fn signal(pid: u32, signal: Signal) {
    if let Ok(p) = i32::try_from(pid) {
        let _ = kill(Pid::from_raw(p), signal);
    }
}

fn alive(pid: u32) -> bool {
    i32::try_from(pid).is_ok_and(|p| kill(Pid::from_raw(p), None).is_ok())
}

/// A session kept open in a client process (`psql`, `mariadb`, `sqlite3`) reading statements
/// from its stdin: it holds locks and transactions for as long as the test wants.
#[derive(Debug)]
pub struct Session {
    child: Child,
    log: PathBuf,
}

impl Session {
    /// What the client printed so far (its stdout and stderr).
    #[must_use]
    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn spawn(mut cmd: Command, log: &Path) -> Result<Self, ServerError> {
        let err = std::fs::File::create(log).map_err(io("session log"))?;
        let out = err.try_clone().map_err(io("session log"))?;
        let child = cmd
            .stdin(Stdio::piped())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(io(format!("{cmd:?}")))?;
        Ok(Self {
            child,
            log: log.to_owned(),
        })
    }

    /// Sends statements (a line each).
    ///
    /// # Errors
    /// The pipe's error (the client exited).
    pub fn send(&mut self, sql: &str) -> Result<(), ServerError> {
        let stdin = self
            .child
            .stdin
            .as_mut()
            .ok_or_else(|| ServerError::Command {
                command: "session".into(),
                detail: "stdin closed".into(),
            })?;
        stdin
            .write_all(format!("{sql}\n").as_bytes())
            .and_then(|()| stdin.flush())
            .map_err(io("write to the session"))
    }

    /// Closes stdin and waits (at most 10 s) for the client to exit.
    pub fn finish(mut self) {
        drop(self.child.stdin.take());
        let until = crate::clock::deadline(Duration::from_secs(10));
        while !crate::clock::passed(until) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

mod auto_failover;
mod galera;
mod haproxy;
mod mariadb;
mod postgres;
mod sqlite;
mod tls;

pub use auto_failover::Formation;
pub use galera::GaleraCluster;
pub use haproxy::{HaProxy, HaProxyPaths, HealthAgent, ServerState};
pub use mariadb::MariaDb;
pub use postgres::Postgres;
pub use sqlite::SqliteDb;
pub use tls::TlsFiles;

/// The socket address of a loopback port.
#[must_use]
pub fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}
