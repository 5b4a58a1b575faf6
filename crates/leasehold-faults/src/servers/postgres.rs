//! A throwaway PostgreSQL: `initdb` + `pg_ctl` in a temp dir on a spare port.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use nix::sys::signal::Signal;
use nix::unistd::{Uid, User};

use super::{ServerError, Session, TempDir, alive, free_port, io, run, signal, tail, wait_until};

/// A PostgreSQL server of the suite's own. Dropping it stops it (immediate shutdown, then
/// SIGKILL by PID) and removes its directory.
#[derive(Debug)]
pub struct Postgres {
    bin: PathBuf,
    dir: TempDir,
    port: u16,
    /// Run server programs as this user (initdb refuses root).
    user: Option<String>,
    /// Extra `-c name=value` settings.
    settings: Vec<String>,
}

/// The newest `/usr/lib/postgresql/*/bin` holding `initdb`, or `pg_config --bindir`.
pub(super) fn bin_dir() -> Result<PathBuf, ServerError> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_string_lossy().parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").is_file().then_some((v, bin))
        })
        .collect();
    found.sort();
    if let Some((_, b)) = found.pop() {
        return Ok(b);
    }
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
        let b = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if b.join("initdb").is_file() {
            return Ok(b);
        }
    }
    Err(ServerError::Missing {
        tool: "initdb".into(),
        hint: "looked in /usr/lib/postgresql/*/bin and `pg_config --bindir`; install the \
               `postgresql` package"
            .into(),
    })
}

impl Postgres {
    /// Initialises and starts a server on a spare port with a database `test`, trusting
    /// loopback connections (user `postgres`, no password).
    ///
    /// # Errors
    /// [`ServerError::Missing`] without PostgreSQL's server programs; the failing command's
    /// output otherwise.
    pub fn start() -> Result<Self, ServerError> {
        Self::start_with(&[])
    }

    /// Like [`Postgres::start`] with extra `name=value` server settings.
    ///
    /// # Errors
    /// As [`Postgres::start`].
    pub fn start_with(settings: &[&str]) -> Result<Self, ServerError> {
        Self::init(settings)?.create()
    }

    /// Like [`Postgres::start`] with TLS on, using `tls`'s server certificate and key, and
    /// accepting TCP connections over TLS only (`hostssl` lines alone in its `pg_hba.conf`), to
    /// the databases `test` and `postgres` only (no line lets in any other, encrypted or not).
    ///
    /// # Errors
    /// As [`Postgres::start`].
    pub fn start_tls_only(tls: &super::TlsFiles) -> Result<Self, ServerError> {
        let mut server = Self::init(&[])?;
        let dir = server.dir.path().to_path_buf();
        let (cert, key, hba) = (
            dir.join("server.pem"),
            dir.join("server.key"),
            dir.join("hba"),
        );
        std::fs::copy(tls.server_cert(), &cert).map_err(io("copy the server certificate"))?;
        std::fs::copy(tls.server_key(), &key).map_err(io("copy the server key"))?;
        std::fs::write(
            &hba,
            "local all all trust\nhostssl test,postgres all 127.0.0.1/32 trust\n",
        )
        .map_err(io("write pg_hba"))?;
        // The server refuses a key that others can read, or that it does not own.
        std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .map_err(io("chmod the server key"))?;
        if let Some(name) = &server.user
            && let Some(u) = User::from_name(name).ok().flatten()
        {
            for p in [&cert, &key, &hba] {
                std::os::unix::fs::chown(p, Some(u.uid.as_raw()), Some(u.gid.as_raw()))
                    .map_err(io(format!("chown {}", p.display())))?;
            }
        }
        server.settings = vec![
            "ssl=on".to_owned(),
            format!("ssl_cert_file={}", cert.display()),
            format!("ssl_key_file={}", key.display()),
            format!("hba_file={}", hba.display()),
        ];
        server.create()
    }

    /// Runs `initdb` in an empty server directory, starts it and creates database `test`.
    fn create(self) -> Result<Self, ServerError> {
        let server = self;
        let data = server.data_str();
        server.run_as(
            "initdb",
            &[
                "-D",
                &data,
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            ],
        )?;
        server.start_again()?;
        server.psql("postgres", "CREATE DATABASE test")?;
        Ok(server)
    }

    /// A streaming standby of the primary reachable at loopback port `primary_port` (the
    /// primary's own, or a forwarder's in front of it), cloned with `pg_basebackup -R` and
    /// started on a spare port; it connects as `application_name` (name it in
    /// `synchronous_standby_names` for synchronous replication).
    ///
    /// # Errors
    /// The failing command's output.
    pub fn standby_of(primary_port: u16, application_name: &str) -> Result<Self, ServerError> {
        let standby = Self::init(&["hot_standby=on"])?;
        let conninfo = format!(
            "host=127.0.0.1 port={primary_port} user=postgres application_name={application_name}"
        );
        let data = standby.data_str();
        standby.run_as(
            "pg_basebackup",
            &[
                "-d",
                &conninfo,
                "-D",
                &data,
                "-R",
                "-X",
                "stream",
                "-c",
                "fast",
                "--no-sync",
            ],
        )?;
        standby.start_again()?;
        Ok(standby)
    }

    /// Promotes a standby to primary and waits until it accepts writes.
    ///
    /// # Errors
    /// The `pg_ctl` output.
    pub fn promote(&self) -> Result<(), ServerError> {
        self.run_as(
            "pg_ctl",
            &["-D", &self.data_str(), "-w", "-t", "30", "promote"],
        )
        .map(|_| ())
    }

    /// An empty server directory (for [`Postgres::start_with`] and standbys).
    fn init(settings: &[&str]) -> Result<Self, ServerError> {
        let bin = bin_dir()?;
        let dir = TempDir::new("pg")?;
        let user = Uid::effective().is_root().then(|| "postgres".to_owned());
        let server = Self {
            bin,
            dir,
            port: free_port()?,
            user,
            settings: settings.iter().map(|s| (*s).to_owned()).collect(),
        };
        std::fs::create_dir_all(server.data()).map_err(io("create the data dir"))?;
        if let Some(name) = &server.user {
            let u = User::from_name(name)
                .ok()
                .flatten()
                .ok_or_else(|| ServerError::Missing {
                    tool: format!("user {name}"),
                    hint: "initdb refuses root: run as another user or create `postgres`".into(),
                })?;
            for p in [server.dir.path().to_path_buf(), server.data()] {
                std::os::unix::fs::chown(&p, Some(u.uid.as_raw()), Some(u.gid.as_raw()))
                    .map_err(io(format!("chown {}", p.display())))?;
            }
            std::fs::set_permissions(
                server.data(),
                std::os::unix::fs::PermissionsExt::from_mode(0o700),
            )
            .map_err(io("chmod the data dir"))?;
        }
        Ok(server)
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn data_str(&self) -> String {
        self.data().display().to_string()
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    /// Runs a server program (as the `postgres` user when we are root).
    fn run_as(&self, program: &str, args: &[&str]) -> Result<String, ServerError> {
        let exe = self.bin.join(program);
        match &self.user {
            Some(u) => run(Command::new("runuser")
                .args(["-u", u, "--"])
                .arg(&exe)
                .args(args)
                .env("LC_ALL", "C")),
            None => run(Command::new(&exe).args(args).env("LC_ALL", "C")),
        }
    }

    /// The server's port.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of database `test`.
    #[must_use]
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/test", self.port)
    }

    /// The postmaster's PID, from `postmaster.pid`.
    #[must_use]
    pub fn pid(&self) -> Option<u32> {
        std::fs::read_to_string(self.data().join("postmaster.pid"))
            .ok()?
            .lines()
            .next()?
            .trim()
            .parse()
            .ok()
    }

    /// Starts (or restarts) the server and waits until it accepts connections.
    ///
    /// # Errors
    /// The `pg_ctl` output and the server log when it does not come up.
    pub fn start_again(&self) -> Result<(), ServerError> {
        let mut opts = format!(
            "-p {} -c listen_addresses=127.0.0.1 -c unix_socket_directories={} -c fsync=off \
             -c synchronous_commit=off -c full_page_writes=off -c max_connections=300 \
             -c shared_buffers=16MB",
            self.port,
            self.dir.path().display()
        );
        for s in &self.settings {
            opts.push_str(&format!(" -c {s}"));
        }
        let log = self.log().display().to_string();
        // After a SIGKILL the old backends may hold shared memory for a moment: retry.
        let mut last = None;
        for _ in 0..20 {
            match self.run_as(
                "pg_ctl",
                &[
                    "-D",
                    &self.data_str(),
                    "-o",
                    &opts,
                    "-l",
                    &log,
                    "-w",
                    "-t",
                    "30",
                    "start",
                ],
            ) {
                Ok(_) => return Ok(()),
                Err(e) => last = Some(e),
            }
            std::thread::sleep(Duration::from_millis(300));
        }
        Err(last.unwrap_or_else(|| ServerError::NotReady {
            what: "postgres".into(),
            secs: 30,
            log: tail(&self.log()),
        }))
    }

    /// Fast shutdown (`pg_ctl stop -m fast`): sessions are ended, the server waits for nothing.
    ///
    /// # Errors
    /// The `pg_ctl` output.
    pub fn stop_fast(&self) -> Result<(), ServerError> {
        self.run_as(
            "pg_ctl",
            &["-D", &self.data_str(), "-m", "fast", "-w", "stop"],
        )
        .map(|_| ())
    }

    /// SIGKILL to the postmaster; waits until it and its backends are gone.
    pub fn kill9(&self) {
        let Some(pid) = self.pid() else { return };
        signal(pid, Signal::SIGKILL);
        let _ = wait_until("postgres to die", 10, &self.log(), || !alive(pid));
        std::thread::sleep(Duration::from_millis(200));
    }

    /// Runs SQL in `db` with `psql` over loopback; the unaligned output.
    ///
    /// # Errors
    /// The `psql` output.
    pub fn psql(&self, db: &str, sql: &str) -> Result<String, ServerError> {
        run(Command::new(self.bin.join("psql"))
            .args([
                "-X",
                "-q",
                "-At",
                "-F",
                "|",
                "-v",
                "ON_ERROR_STOP=1",
                "-h",
                "127.0.0.1",
            ])
            .args([
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
                "-d",
                db,
                "-c",
                sql,
            ])
            .env("PGOPTIONS", "-c default_transaction_read_only=off"))
    }

    /// A `psql` session on `test` reading statements from stdin.
    ///
    /// # Errors
    /// When `psql` cannot be started.
    pub fn session(&self, label: &str) -> Result<Session, ServerError> {
        let mut cmd = Command::new(self.bin.join("psql"));
        cmd.args(["-X", "-q", "-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["-U", "postgres", "-d", "test"])
            .env("PGOPTIONS", "-c default_transaction_read_only=off");
        Session::spawn(cmd, &self.dir.path().join(format!("session-{label}.log")))
    }

    /// Path of a server program (`pgbench`, `pg_basebackup`).
    #[must_use]
    pub fn program(&self, name: &str) -> PathBuf {
        self.bin.join(name)
    }

    /// The server's directory (for logs).
    #[must_use]
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let pid = self.pid();
        let _ = self.run_as(
            "pg_ctl",
            &[
                "-D",
                &self.data_str(),
                "-m",
                "immediate",
                "-w",
                "-t",
                "10",
                "stop",
            ],
        );
        if let Some(pid) = pid
            && alive(pid)
        {
            signal(pid, Signal::SIGKILL);
        }
    }
}
