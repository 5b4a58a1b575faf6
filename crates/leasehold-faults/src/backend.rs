//! What a scenario needs from a database, per backend: its URL, stopping and killing it,
//! making it read-only, locking lease rows from another session, loading it, and reading back
//! what it kept.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};

use crate::holder::WRITES_TABLE;
use crate::oracle::{CommittedWrite, DbState};
use crate::servers::{
    GaleraCluster, MariaDb, Postgres, ServerError, Session, SqliteDb, loopback, which,
};

/// A database the scenarios run against.
pub trait Backend {
    /// `postgres`, `mariadb`, `sqlite`.
    fn name(&self) -> &'static str;
    /// The URL holders connect to directly.
    fn url(&self) -> String;
    /// The server's address, for proxies (`None` for SQLite).
    fn upstream(&self) -> Option<SocketAddr>;
    /// Runs a query; rows of columns.
    ///
    /// # Errors
    /// The client's error.
    fn rows(&self, sql: &str) -> Result<Vec<Vec<String>>, ServerError>;
    /// Clean (fast) shutdown.
    ///
    /// # Errors
    /// The server's error.
    fn stop_fast(&self) -> Result<(), ServerError>;
    /// SIGKILL.
    fn kill9(&self);
    /// Starts again after a stop or kill.
    ///
    /// # Errors
    /// The server's error.
    fn start_again(&self) -> Result<(), ServerError>;
    /// Makes every new statement of ordinary users read-only (`on`) or writable again.
    ///
    /// # Errors
    /// The server's error.
    fn read_only(&self, on: bool) -> Result<(), ServerError>;
    /// A session that holds every lease row of `namespaces` `FOR UPDATE` until finished.
    ///
    /// # Errors
    /// The client's error.
    fn lock_rows(&self, namespaces: &[&str]) -> Result<Session, ServerError>;
    /// Starts `clients` parallel clients writing as fast as they can; kill the child to stop.
    ///
    /// # Errors
    /// The tool's error.
    fn saturate(&self, clients: u32, secs: u32) -> Result<Child, ServerError>;

    /// The statements that create [`AUDIT_TABLE`] and the triggers filling it from every insert
    /// and update of `lease_info`.
    fn audit_ddl(&self) -> Vec<String>;

    /// Installs the audit triggers (after the lease table exists): every row version the
    /// database ever kept is then known, so grants nobody believed can be counted.
    ///
    /// # Errors
    /// The client's error.
    fn install_audit(&self) -> Result<(), ServerError> {
        for sql in self.audit_ddl() {
            self.rows(&sql)?;
        }
        Ok(())
    }

    /// The committed fenced writes and the lease rows' versions of `namespace` (and its lock
    /// namespace).
    ///
    /// # Errors
    /// The client's error, or a row that does not parse.
    fn db_state(&self, namespace: &str) -> Result<DbState, ServerError> {
        let lock_ns = format!("{namespace}-lock");
        let mut state = DbState::default();
        for row in self.rows(&format!(
            "SELECT id, lease_key, token, holder FROM {WRITES_TABLE} \
             WHERE lease_key LIKE '{namespace}/%' OR lease_key LIKE '{lock_ns}/%' ORDER BY id"
        ))? {
            let [id, key, token, holder] = row.as_slice() else {
                return Err(bad_row(&row));
            };
            state.writes.push(CommittedWrite {
                id: id.parse().map_err(|_| bad_row(&row))?,
                key: key.clone(),
                token: token.parse().map_err(|_| bad_row(&row))?,
                holder: holder.clone(),
            });
        }
        for row in self.rows(&format!(
            "SELECT namespace, lease_name, version FROM lease_info \
             WHERE namespace IN ('{namespace}', '{lock_ns}')"
        ))? {
            let [ns, name, version] = row.as_slice() else {
                return Err(bad_row(&row));
            };
            state.versions.insert(
                format!("{ns}/{name}"),
                version.parse().map_err(|_| bad_row(&row))?,
            );
        }
        // Without the audit table (not installed) there is nothing to add.
        if let Ok(rows) = self.rows(&format!(
            "SELECT namespace, lease_name, holder, version FROM {AUDIT_TABLE} \
             WHERE status = 1 AND namespace IN ('{namespace}', '{lock_ns}') ORDER BY id"
        )) {
            for row in rows {
                let [ns, name, holder, version] = row.as_slice() else {
                    return Err(bad_row(&row));
                };
                let g = (
                    format!("{ns}/{name}"),
                    version.parse().map_err(|_| bad_row(&row))?,
                    holder.clone(),
                );
                if !state.grants.contains(&g) {
                    state.grants.push(g);
                }
            }
            state.audited = true;
        }
        Ok(state)
    }
}

/// The table the audit triggers write every lease row version to.
pub const AUDIT_TABLE: &str = "fault_audit";

const AUDIT_INSERT: &str = "INSERT INTO fault_audit (namespace, lease_name, holder, version, status) \
     VALUES (NEW.namespace, NEW.lease_name, NEW.holder, NEW.version, NEW.status)";

fn bad_row(row: &[String]) -> ServerError {
    ServerError::Command {
        command: "read back".into(),
        detail: format!("unexpected row {row:?}"),
    }
}

pub(crate) fn split(out: &str, sep: char) -> Vec<Vec<String>> {
    out.lines()
        .filter(|l| !l.is_empty())
        .map(|l| l.split(sep).map(str::to_owned).collect())
        .collect()
}

fn spawn_quiet(cmd: &mut Command) -> Result<Child, ServerError> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|cause| ServerError::Io {
            what: format!("{cmd:?}"),
            cause,
        })
}

fn in_list(namespaces: &[&str]) -> String {
    namespaces
        .iter()
        .map(|n| format!("'{n}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// PostgreSQL's audit table and trigger ([`Backend::audit_ddl`]).
pub(crate) fn pg_audit_ddl() -> Vec<String> {
    vec![
        format!("CREATE TABLE {AUDIT_TABLE} (id BIGSERIAL PRIMARY KEY, namespace TEXT, lease_name TEXT, holder TEXT, version BIGINT, status INT)"),
        format!("CREATE FUNCTION fault_audit_fn() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN {AUDIT_INSERT}; RETURN NULL; END $$"),
        "CREATE TRIGGER fault_audit_t AFTER INSERT OR UPDATE ON lease_info FOR EACH ROW EXECUTE FUNCTION fault_audit_fn()".into(),
    ]
}

impl Backend for Postgres {
    fn name(&self) -> &'static str {
        "postgres"
    }
    fn audit_ddl(&self) -> Vec<String> {
        pg_audit_ddl()
    }
    fn url(&self) -> String {
        Postgres::url(self)
    }
    fn upstream(&self) -> Option<SocketAddr> {
        Some(loopback(self.port()))
    }
    fn rows(&self, sql: &str) -> Result<Vec<Vec<String>>, ServerError> {
        Ok(split(&self.psql("test", sql)?, '|'))
    }
    fn stop_fast(&self) -> Result<(), ServerError> {
        Postgres::stop_fast(self)
    }
    fn kill9(&self) {
        Postgres::kill9(self);
    }
    fn start_again(&self) -> Result<(), ServerError> {
        Postgres::start_again(self)
    }
    fn read_only(&self, on: bool) -> Result<(), ServerError> {
        let set = if on {
            "ALTER SYSTEM SET default_transaction_read_only = on"
        } else {
            "ALTER SYSTEM RESET default_transaction_read_only"
        };
        self.psql("test", set)?;
        self.psql("test", "SELECT pg_reload_conf()").map(|_| ())
    }
    fn lock_rows(&self, namespaces: &[&str]) -> Result<Session, ServerError> {
        let mut s = self.session("for-update")?;
        s.send("BEGIN;")?;
        s.send(&format!(
            "SELECT id FROM lease_info WHERE namespace IN ({}) FOR UPDATE;",
            in_list(namespaces)
        ))?;
        Ok(s)
    }
    fn saturate(&self, clients: u32, secs: u32) -> Result<Child, ServerError> {
        let bench = self.program("pgbench");
        if !bench.is_file() {
            return Err(ServerError::Missing {
                tool: "pgbench".into(),
                hint: "install the `postgresql-contrib` (or `postgresql`) package".into(),
            });
        }
        let port = self.port().to_string();
        let base = ["-h", "127.0.0.1", "-p", port.as_str(), "-U", "postgres"];
        let out = Command::new(&bench)
            .args(base)
            .args(["-i", "-q", "-s", "1", "test"])
            .output()
            .map_err(|cause| ServerError::Io {
                what: "pgbench -i".into(),
                cause,
            })?;
        if !out.status.success() {
            return Err(ServerError::Command {
                command: "pgbench -i".into(),
                detail: String::from_utf8_lossy(&out.stderr).into_owned(),
            });
        }
        spawn_quiet(Command::new(&bench).args(base).args([
            "-c",
            &clients.to_string(),
            "-j",
            "2",
            "-T",
            &secs.to_string(),
            "-N",
            "test",
        ]))
    }
}

impl Backend for MariaDb {
    fn name(&self) -> &'static str {
        "mariadb"
    }
    fn audit_ddl(&self) -> Vec<String> {
        mariadb_audit_ddl()
    }
    fn url(&self) -> String {
        MariaDb::url(self)
    }
    fn upstream(&self) -> Option<SocketAddr> {
        Some(loopback(self.port()))
    }
    fn rows(&self, sql: &str) -> Result<Vec<Vec<String>>, ServerError> {
        Ok(split(&self.query(sql)?, '\t'))
    }
    fn stop_fast(&self) -> Result<(), ServerError> {
        MariaDb::stop_fast(self);
        Ok(())
    }
    fn kill9(&self) {
        MariaDb::kill9(self);
    }
    fn start_again(&self) -> Result<(), ServerError> {
        MariaDb::start_again(self)
    }
    fn read_only(&self, on: bool) -> Result<(), ServerError> {
        self.admin(&format!("SET GLOBAL read_only = {}", u8::from(on)))
            .map(|_| ())
    }
    fn lock_rows(&self, namespaces: &[&str]) -> Result<Session, ServerError> {
        let mut s = self.session("for-update")?;
        s.send("BEGIN;")?;
        s.send(&format!(
            "SELECT id FROM lease_info WHERE namespace IN ({}) FOR UPDATE;",
            in_list(namespaces)
        ))?;
        Ok(s)
    }
    fn saturate(&self, clients: u32, secs: u32) -> Result<Child, ServerError> {
        let slap = which("mariadb-slap", "mariadb-client")?;
        let _ = secs; // stopped by the caller
        spawn_quiet(
            Command::new(slap)
                .arg("--no-defaults")
                .args(["-h", "127.0.0.1", "-P", &self.port().to_string()])
                .args(["-uholder", "-pholder", "--create-schema=slap"])
                .arg(format!("--concurrency={clients}"))
                .args(["--auto-generate-sql", "--auto-generate-sql-load-type=write"])
                .args(["--number-of-queries=100000000", "--iterations=1"]),
        )
    }
}

/// MariaDB's audit table and triggers ([`Backend::audit_ddl`]).
fn mariadb_audit_ddl() -> Vec<String> {
    vec![
        format!(
            "CREATE TABLE {AUDIT_TABLE} (id BIGINT AUTO_INCREMENT PRIMARY KEY, namespace VARCHAR(128), lease_name VARCHAR(255), holder VARCHAR(255), version BIGINT, status INT)"
        ),
        format!(
            "CREATE TRIGGER fault_audit_i AFTER INSERT ON lease_info FOR EACH ROW {AUDIT_INSERT}"
        ),
        format!(
            "CREATE TRIGGER fault_audit_u AFTER UPDATE ON lease_info FOR EACH ROW {AUDIT_INSERT}"
        ),
    ]
}

/// A Galera cluster as one database: its URL and address are the first node's, statements run
/// on a node synced with the primary component (any node keeps every committed row), and
/// stopping, killing or starting it acts on every node. Scenarios that fault one node use
/// [`GaleraCluster`]'s own methods.
impl Backend for GaleraCluster {
    fn name(&self) -> &'static str {
        "galera"
    }
    fn audit_ddl(&self) -> Vec<String> {
        mariadb_audit_ddl()
    }
    fn url(&self) -> String {
        self.node_url(0)
    }
    fn upstream(&self) -> Option<SocketAddr> {
        Some(loopback(self.port(0)))
    }
    fn rows(&self, sql: &str) -> Result<Vec<Vec<String>>, ServerError> {
        let node = self.synced_node().unwrap_or_default();
        Ok(split(&self.admin(node, &format!("USE test; {sql}"))?, '\t'))
    }
    fn stop_fast(&self) -> Result<(), ServerError> {
        self.kill_all();
        Ok(())
    }
    fn kill9(&self) {
        self.kill_all();
    }
    fn start_again(&self) -> Result<(), ServerError> {
        self.restart_all().map(|_| ())
    }
    fn read_only(&self, on: bool) -> Result<(), ServerError> {
        for i in 0..self.len() {
            self.admin(i, &format!("SET GLOBAL read_only = {}", u8::from(on)))?;
        }
        Ok(())
    }
    fn lock_rows(&self, _namespaces: &[&str]) -> Result<Session, ServerError> {
        Err(ServerError::Command {
            command: "lock_rows".into(),
            detail: "a row lock holds on one Galera node only".into(),
        })
    }
    fn saturate(&self, _clients: u32, _secs: u32) -> Result<Child, ServerError> {
        Err(ServerError::Command {
            command: "saturate".into(),
            detail: "not part of the Galera scenarios".into(),
        })
    }
}

impl Backend for SqliteDb {
    fn name(&self) -> &'static str {
        "sqlite"
    }
    fn audit_ddl(&self) -> Vec<String> {
        vec![
            format!(
                "CREATE TABLE {AUDIT_TABLE} (id INTEGER PRIMARY KEY AUTOINCREMENT, namespace TEXT, lease_name TEXT, holder TEXT, version INTEGER, status INTEGER)"
            ),
            format!(
                "CREATE TRIGGER fault_audit_i AFTER INSERT ON lease_info BEGIN {AUDIT_INSERT}; END"
            ),
            format!(
                "CREATE TRIGGER fault_audit_u AFTER UPDATE ON lease_info BEGIN {AUDIT_INSERT}; END"
            ),
        ]
    }
    fn url(&self) -> String {
        SqliteDb::url(self)
    }
    fn upstream(&self) -> Option<SocketAddr> {
        None
    }
    fn rows(&self, sql: &str) -> Result<Vec<Vec<String>>, ServerError> {
        Ok(split(&self.query(sql)?, '|'))
    }
    fn stop_fast(&self) -> Result<(), ServerError> {
        Ok(())
    }
    fn kill9(&self) {}
    fn start_again(&self) -> Result<(), ServerError> {
        Ok(())
    }
    fn read_only(&self, _on: bool) -> Result<(), ServerError> {
        Err(ServerError::Command {
            command: "read_only".into(),
            detail: "SQLite has no server to make read-only: see the full-disk scenario".into(),
        })
    }
    fn lock_rows(&self, _namespaces: &[&str]) -> Result<Session, ServerError> {
        let mut s = self.session("exclusive")?;
        s.send(".timeout 5000")?;
        s.send("BEGIN EXCLUSIVE;")?;
        Ok(s)
    }
    fn saturate(&self, clients: u32, _secs: u32) -> Result<Child, ServerError> {
        let _ = clients;
        Err(ServerError::Command {
            command: "saturate".into(),
            detail: "not a server".into(),
        })
    }
}
