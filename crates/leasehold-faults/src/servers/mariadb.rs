//! A throwaway MariaDB: `mariadb-install-db` + `mariadbd` in a temp dir on a spare port.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use nix::sys::signal::Signal;

use super::{ServerError, Session, TempDir, free_port, io, run, signal, tail, wait_until, which};

/// A MariaDB server of the suite's own. Holders connect as `holder` (no SUPER privilege, so
/// `read_only` applies to them); the harness administers as root over the server's socket.
/// Dropping it SIGKILLs the server by PID and removes its directory.
#[derive(Debug)]
pub struct MariaDb {
    server: PathBuf,
    client: PathBuf,
    dir: TempDir,
    port: u16,
    child: Mutex<Option<Child>>,
    /// Extra server options.
    options: Vec<String>,
    /// Extra environment of the server process.
    env: Vec<(String, String)>,
}

impl MariaDb {
    /// Installs a data dir and starts the server, with a database `test` and a user `holder`.
    ///
    /// # Errors
    /// [`ServerError::Missing`] without `mariadbd` / `mariadb-install-db` / `mariadb`; the
    /// failing command's output otherwise.
    pub fn start() -> Result<Self, ServerError> {
        Self::start_with(Vec::new())
    }

    /// Like [`MariaDb::start`] with TLS on, using `tls`'s server certificate and key, and
    /// refusing unencrypted TCP connections (`require_secure_transport`; the harness's own socket
    /// connections still work).
    ///
    /// # Errors
    /// As [`MariaDb::start`].
    pub fn start_tls_only(tls: &super::TlsFiles) -> Result<Self, ServerError> {
        Self::start_with(vec![
            format!("--ssl-cert={}", tls.server_cert().display()),
            format!("--ssl-key={}", tls.server_key().display()),
            format!("--ssl-ca={}", tls.ca().display()),
            "--require-secure-transport=ON".to_owned(),
        ])
    }

    /// Like [`MariaDb::start`], the server's wall clock `offset_secs` ahead of the machine's
    /// (behind when negative), by libfaketime preloaded into `mariadbd`: `NOW()` and every
    /// expiry the server judges follow the shifted clock, as on a node whose clock drifted. Its
    /// monotonic clock is left alone, so its timeouts run as usual.
    ///
    /// # Errors
    /// As [`MariaDb::start`]; [`ServerError::Missing`] without libfaketime.
    pub fn start_with_clock_offset(offset_secs: i64) -> Result<Self, ServerError> {
        const LIB: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";
        if !Path::new(LIB).is_file() {
            return Err(ServerError::Missing {
                tool: LIB.to_owned(),
                hint: "install the `libfaketime` package".to_owned(),
            });
        }
        Self::start_env(
            Vec::new(),
            vec![
                ("LD_PRELOAD".to_owned(), LIB.to_owned()),
                ("FAKETIME".to_owned(), format!("{offset_secs:+}")),
                ("FAKETIME_DONT_FAKE_MONOTONIC".to_owned(), "1".to_owned()),
            ],
        )
    }

    fn start_with(options: Vec<String>) -> Result<Self, ServerError> {
        Self::start_env(options, Vec::new())
    }

    fn start_env(options: Vec<String>, env: Vec<(String, String)>) -> Result<Self, ServerError> {
        let install = which("mariadb-install-db", "mariadb-server")?;
        let server = which("mariadbd", "mariadb-server")?;
        let client = which("mariadb", "mariadb-client")?;
        let dir = TempDir::new("maria")?;
        let db = Self {
            server,
            client,
            port: free_port()?,
            dir,
            child: Mutex::new(None),
            options,
            env,
        };
        run(Command::new(install)
            .arg("--no-defaults")
            .arg(format!("--datadir={}", db.data().display()))
            .args([
                "--user=root",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ]))?;
        db.start_again()?;
        db.admin(
            "CREATE DATABASE test; CREATE USER 'holder'@'%' IDENTIFIED BY 'holder'; \
             CREATE USER 'holder'@'localhost' IDENTIFIED BY 'holder'; \
             GRANT ALL ON test.* TO 'holder'@'%'; GRANT ALL ON test.* TO 'holder'@'localhost';",
        )?;
        Ok(db)
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("mysqld.sock")
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    /// The URL holders use.
    #[must_use]
    pub fn url(&self) -> String {
        format!("mysql://holder:holder@127.0.0.1:{}/test", self.port)
    }

    /// The server's port.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's PID.
    #[must_use]
    pub fn pid(&self) -> Option<u32> {
        self.child
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
            .map(Child::id)
    }

    /// Starts (or restarts) the server and waits until root can connect.
    ///
    /// # Errors
    /// The server log when it does not come up.
    pub fn start_again(&self) -> Result<(), ServerError> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log())
            .map_err(io("server log"))?;
        let log2 = log.try_clone().map_err(io("server log"))?;
        let child = Command::new(&self.server)
            .arg("--no-defaults")
            .arg(format!("--datadir={}", self.data().display()))
            .arg(format!("--socket={}", self.socket().display()))
            .arg(format!(
                "--pid-file={}",
                self.dir.path().join("mysqld.pid").display()
            ))
            .arg(format!("--port={}", self.port))
            .args(["--bind-address=127.0.0.1", "--user=root", "--skip-log-bin"])
            .args(["--innodb-buffer-pool-size=32M", "--max-connections=400"])
            .args(["--innodb-flush-log-at-trx-commit=2", "--skip-name-resolve"])
            .args(&self.options)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .map_err(io("spawn mariadbd"))?;
        *self
            .child
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(child);
        wait_until("mariadbd", 60, &self.log(), || {
            self.admin("SELECT 1").is_ok()
        })
    }

    fn stop_with(&self, sig: Signal) {
        let mut slot = self
            .child
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(mut child) = slot.take() {
            signal(child.id(), sig);
            for _ in 0..600 {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// A clean shutdown (SIGTERM), waiting until the server exited.
    pub fn stop_fast(&self) {
        self.stop_with(Signal::SIGTERM);
    }

    /// SIGKILL, waiting until the server is gone.
    pub fn kill9(&self) {
        self.stop_with(Signal::SIGKILL);
    }

    /// Runs SQL as root over the socket; tab-separated rows.
    ///
    /// # Errors
    /// The client's output.
    pub fn admin(&self, sql: &str) -> Result<String, ServerError> {
        run(Command::new(&self.client)
            .arg("--no-defaults")
            .arg(format!("--socket={}", self.socket().display()))
            .args(["-uroot", "-N", "-B", "-e", sql]))
    }

    /// Runs SQL on `test` as root; tab-separated rows.
    ///
    /// # Errors
    /// The client's output.
    pub fn query(&self, sql: &str) -> Result<String, ServerError> {
        self.admin(&format!("USE test; {sql}"))
    }

    /// A client session on `test` (as root) reading statements from stdin.
    ///
    /// # Errors
    /// When the client cannot be started.
    pub fn session(&self, label: &str) -> Result<Session, ServerError> {
        let mut cmd = Command::new(&self.client);
        cmd.arg("--no-defaults")
            .arg(format!("--socket={}", self.socket().display()))
            .args(["-uroot", "-N", "-B", "--unbuffered", "test"]);
        Session::spawn(cmd, &self.dir.path().join(format!("session-{label}.log")))
    }

    /// The end of the server log.
    #[must_use]
    pub fn log_tail(&self) -> String {
        tail(&self.log())
    }
}

impl Drop for MariaDb {
    fn drop(&mut self) {
        self.kill9();
    }
}
