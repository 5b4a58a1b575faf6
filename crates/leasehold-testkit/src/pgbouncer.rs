//! A throwaway PgBouncer in front of the test PostgreSQL: started on a spare loopback port with
//! a configuration of its own (PgBouncer's conventional one: only `extra_float_digits` among
//! the ignored startup parameters), stopped by its process id when dropped.
//!
//! PgBouncer refuses to run as root; as root it runs as the `postgres` user.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// PgBouncer's pool mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolMode {
    /// A client keeps its server connection until it disconnects.
    Session,
    /// A client keeps a server connection for one transaction.
    Transaction,
}

impl PoolMode {
    /// The value of `pool_mode`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Session => "session",
            Self::Transaction => "transaction",
        }
    }
}

/// A running PgBouncer (see the module docs).
#[derive(Debug)]
pub struct PgBouncer {
    child: Child,
    port: u16,
    mode: PoolMode,
    dir: PathBuf,
    database: String,
    user: String,
    /// The server behind it, `host:port`.
    upstream: String,
}

/// Why a PgBouncer could not be had.
#[derive(Debug)]
pub enum Unavailable {
    /// The `pgbouncer` binary is not installed.
    NotInstalled,
    /// It is installed but did not start or answer.
    Failed(String),
}

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotInstalled => {
                f.write_str("pgbouncer is not installed (apt-get install pgbouncer)")
            }
            Self::Failed(why) => write!(f, "pgbouncer did not start: {why}"),
        }
    }
}

/// Where Debian installs PgBouncer, then `PATH`.
fn binary() -> Option<PathBuf> {
    let debian = PathBuf::from("/usr/sbin/pgbouncer");
    if debian.exists() {
        return Some(debian);
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("pgbouncer"))
            .find(|p| p.exists())
    })
}

/// The uid and gid of `user`, from `/etc/passwd`.
fn ids_of(user: &str) -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.first() == Some(&user) && fields.len() > 3)
            .then(|| Some((fields[2].parse().ok()?, fields[3].parse().ok()?)))
            .flatten()
    })
}

fn spare_port() -> Result<u16, Unavailable> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| Unavailable::Failed(format!("no spare port: {e}")))
}

/// `host`, `port`, `user` and `database` of a `postgres://user@host:port/database…` URL (no
/// password: the test servers trust loopback).
fn parts(url: &str) -> Result<(String, u16, String, String), Unavailable> {
    let bad = || Unavailable::Failed(format!("cannot read the upstream URL {url}"));
    let rest = url.split_once("://").ok_or_else(bad)?.1;
    let rest = rest.split('?').next().unwrap_or(rest);
    let (user_host, database) = rest.split_once('/').ok_or_else(bad)?;
    let (user, host_port) = user_host
        .rsplit_once('@')
        .unwrap_or(("postgres", user_host));
    let user = user.split(':').next().unwrap_or(user);
    let (host, port) = match host_port.rsplit_once(':') {
        Some((h, p)) => (h, p.parse().map_err(|_| bad())?),
        None => (host_port, 5432),
    };
    Ok((host.to_owned(), port, user.to_owned(), database.to_owned()))
}

impl PgBouncer {
    /// Starts one in `mode` in front of the PostgreSQL of `upstream` (a URL without a password),
    /// with `pool_size` server connections for the database (`default_pool_size`) and a client
    /// wait for a server connection bounded at `query_wait_timeout`.
    ///
    /// # Errors
    /// [`Unavailable::NotInstalled`] without the binary; [`Unavailable::Failed`] when it does
    /// not start and accept connections within 10 s.
    pub fn start(
        upstream: &str,
        mode: PoolMode,
        pool_size: u32,
        query_wait_timeout: Duration,
    ) -> Result<Self, Unavailable> {
        let bin = binary().ok_or(Unavailable::NotInstalled)?;
        let (host, up_port, user, database) = parts(upstream)?;
        let port = spare_port()?;
        let dir =
            std::env::temp_dir().join(format!("leasehold-pgbouncer-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| Unavailable::Failed(e.to_string()))?;
        let wait = query_wait_timeout.as_secs().max(1);
        let config = format!(
            "[databases]\n{database} = host={host} port={up_port} dbname={database}\n\n\
             [pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\n\
             unix_socket_dir =\nauth_type = trust\nauth_file = {auth}\n\
             pool_mode = {mode}\ndefault_pool_size = {pool_size}\nmax_client_conn = 500\n\
             query_wait_timeout = {wait}\n\
             ignore_startup_parameters = extra_float_digits\n\
             logfile = {log}\nadmin_users = {user}\n",
            auth = dir.join("users.txt").display(),
            mode = mode.as_str(),
            log = dir.join("pgbouncer.log").display(),
        );
        let write = |name: &str, text: &str| {
            std::fs::File::create(dir.join(name))
                .and_then(|mut f| f.write_all(text.as_bytes()))
                .map_err(|e| Unavailable::Failed(e.to_string()))
        };
        write("pgbouncer.ini", &config)?;
        // The conformance suite's read-only role logs in too.
        write(
            "users.txt",
            &format!(
                "\"{user}\" \"\"\n\"{}\" \"\"\n",
                crate::conformance::PG_READ_ONLY_ROLE
            ),
        )?;
        let mut command = Command::new(bin);
        command
            .arg(dir.join("pgbouncer.ini"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if is_root() {
            let (uid, gid) = ids_of("postgres").ok_or_else(|| {
                Unavailable::Failed(
                    "pgbouncer refuses root, and there is no `postgres` user".into(),
                )
            })?;
            chown_dir(&dir, uid, gid)?;
            std::os::unix::process::CommandExt::uid(&mut command, uid);
            std::os::unix::process::CommandExt::gid(&mut command, gid);
        }
        let child = command
            .spawn()
            .map_err(|e| Unavailable::Failed(e.to_string()))?;
        let mut bouncer = Self {
            child,
            port,
            mode,
            dir,
            database,
            user,
            upstream: format!("{host}:{up_port}"),
        };
        // Up to 10 s, in steps of 20 ms.
        let mut tries = 0;
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = bouncer.child.try_wait() {
                return Err(Unavailable::Failed(format!(
                    "exited with {status}: {}",
                    bouncer.log()
                )));
            }
            tries += 1;
            if tries > 500 {
                return Err(Unavailable::Failed(format!(
                    "no listener on {port} within 10 s: {}",
                    bouncer.log()
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(bouncer)
    }

    /// The URL of the database through this PgBouncer (without `pooler=…`).
    #[must_use]
    pub fn url(&self) -> String {
        format!(
            "postgres://{}@127.0.0.1:{}/{}",
            self.user, self.port, self.database
        )
    }

    /// The URL that tells the store the pool mode (`pooler=session` or `pooler=transaction`).
    #[must_use]
    pub fn url_saying_mode(&self) -> String {
        format!("{}?pooler={}", self.url(), self.mode.as_str())
    }

    /// [`PgBouncer::url_saying_mode`] with the doorbell's `LISTEN` sent past the pooler to the
    /// server itself (`doorbell_host=…`).
    #[must_use]
    pub fn url_with_doorbell_past(&self) -> String {
        format!("{}&doorbell_host={}", self.url_saying_mode(), self.upstream)
    }

    /// The port it listens on.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its pool mode.
    #[must_use]
    pub fn mode(&self) -> PoolMode {
        self.mode
    }

    /// Its log so far.
    #[must_use]
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("pgbouncer.log")).unwrap_or_default()
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A PgBouncer in `mode` in front of the test PostgreSQL (`LEASEHOLD_TEST_POSTGRES`), for the
/// tests that run through one: `None` (said on stderr) when PostgreSQL is not named or
/// `pgbouncer` is not installed.
///
/// # Panics
/// When `CI` is set and either is missing (in CI a missing pooler fails the run), or when
/// PgBouncer is installed but does not start.
#[must_use]
pub fn for_tests(mode: PoolMode, pool_size: u32) -> Option<PgBouncer> {
    let upstream = crate::backends::backend_url(crate::backends::POSTGRES_ENV)?;
    match PgBouncer::start(&upstream, mode, pool_size, Duration::from_secs(30)) {
        Ok(b) => Some(b),
        Err(Unavailable::NotInstalled) if std::env::var_os("CI").is_none() => {
            eprintln!("SKIPPED: {}", Unavailable::NotInstalled);
            None
        }
        Err(e) => panic!("{e}"),
    }
}

fn is_root() -> bool {
    ids_of_current().is_some_and(|uid| uid == 0)
}

/// The effective uid, from `/proc/self/status`.
fn ids_of_current() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

/// Gives `dir` and its files to `uid`:`gid` (PgBouncer writes its log there).
fn chown_dir(dir: &std::path::Path, uid: u32, gid: u32) -> Result<(), Unavailable> {
    let own = |p: &std::path::Path| {
        std::os::unix::fs::chown(p, Some(uid), Some(gid))
            .map_err(|e| Unavailable::Failed(format!("chown {}: {e}", p.display())))
    };
    own(dir)?;
    for entry in std::fs::read_dir(dir).map_err(|e| Unavailable::Failed(e.to_string()))? {
        let entry = entry.map_err(|e| Unavailable::Failed(e.to_string()))?;
        own(&entry.path())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_the_upstream_url() {
        let (h, p, u, d) = super::parts("postgres://postgres@127.0.0.1:5432/test").expect("parts");
        assert_eq!(
            (h.as_str(), p, u.as_str(), d.as_str()),
            ("127.0.0.1", 5432, "postgres", "test")
        );
        let (_, p, _, d) = super::parts("postgres://app@db/app?sslmode=disable").expect("parts");
        assert_eq!((p, d.as_str()), (5432, "app"));
    }
}
