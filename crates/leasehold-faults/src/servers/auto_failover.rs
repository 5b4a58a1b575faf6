//! A throwaway pg_auto_failover formation: a monitor and two data nodes on spare ports in a temp
//! dir, each run by its own `pg_autoctl run` (the keeper, which starts and stops its
//! PostgreSQL) in a process group of its own, so a node is killed, frozen and thawed whole, as a
//! machine would be. Synchronous replication is the formation's default (`number_sync_standbys`
//! 0 with two nodes: the standby is named in `synchronous_standby_names`).
//!
//! The monitor's health checks are shortened (a check every second, a node unhealthy after two)
//! and so is `primary_demote_timeout` (how long the monitor waits for an unreachable primary to
//! demote itself before the standby takes writes), so a failover takes seconds, not the
//! defaults' half a minute.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nix::sys::signal::Signal;
use nix::unistd::{Pid, Uid, User};

use super::{ServerError, TempDir, free_port, io, run, which};

/// The monitor's settings for a fast failover (milliseconds).
const MONITOR_SETTINGS: [(&str, u32); 6] = [
    ("health_check_period", 1000),
    ("health_check_timeout", 1000),
    ("health_check_max_retries", 1),
    ("health_check_retry_delay", 500),
    ("node_considered_unhealthy_timeout", 2000),
    ("primary_demote_timeout", 4000),
];

/// One `pg_autoctl run` and the PostgreSQL it runs.
#[derive(Debug)]
struct Keeper {
    name: String,
    port: u16,
    pgdata: PathBuf,
    child: Option<Child>,
}

/// A monitor and two data nodes. Dropping it kills every process group and removes the dir.
#[derive(Debug)]
pub struct Formation {
    dir: TempDir,
    bin: PathBuf,
    autoctl: PathBuf,
    user: Option<String>,
    monitor: Keeper,
    nodes: Vec<Keeper>,
    synchronous: bool,
    /// The iptables rules in place ([`Formation::blackhole_node`]).
    blackholed: Vec<(&'static str, u16)>,
    /// Each data node's keeper reaches the monitor through a forwarder of its own, so its link
    /// can be cut with its node's port ([`Formation::blackhole_node`]).
    links: Vec<leasehold_testkit::FaultProxy>,
    /// Runs the forwarders.
    rt: tokio::runtime::Runtime,
}

impl Formation {
    /// Creates and starts the monitor and `nodes` data nodes (the first becomes the primary),
    /// and waits until the formation reports a primary and its secondaries.
    ///
    /// # Errors
    /// [`ServerError::Missing`] without `pg_autoctl` (Debian: `postgresql-15-auto-failover`
    /// and `pg-auto-failover-cli`); the failing command's output otherwise.
    pub fn start(nodes: usize) -> Result<Self, ServerError> {
        let autoctl = which("pg_autoctl", "pg-auto-failover-cli")?;
        let bin = super::postgres::bin_dir()?;
        // The monitor's extension, beside the server programs' version.
        if !bin
            .parent()
            .is_some_and(|v| v.join("lib/pgautofailover.so").is_file())
        {
            return Err(ServerError::Missing {
                tool: "pgautofailover.so".into(),
                hint: "install `postgresql-<version>-auto-failover`".into(),
            });
        }
        let dir = TempDir::new("paf")?;
        let user = Uid::effective().is_root().then(|| "postgres".to_owned());
        if let Some(name) = &user {
            let u = User::from_name(name)
                .ok()
                .flatten()
                .ok_or_else(|| ServerError::Missing {
                    tool: format!("user {name}"),
                    hint: "pg_autoctl refuses root: create `postgres`".into(),
                })?;
            std::os::unix::fs::chown(dir.path(), Some(u.uid.as_raw()), Some(u.gid.as_raw()))
                .map_err(io("chown the formation dir"))?;
        }
        let keeper = |name: &str| -> Result<Keeper, ServerError> {
            Ok(Keeper {
                name: name.to_owned(),
                port: free_port()?,
                pgdata: dir.path().join(name),
                child: None,
            })
        };
        let monitor = keeper("monitor")?;
        let data = (1..=nodes)
            .map(|i| keeper(&format!("node{i}")))
            .collect::<Result<Vec<_>, _>>()?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .map_err(io("the forwarders' runtime"))?;
        let mut f = Self {
            dir,
            bin,
            autoctl,
            user,
            monitor,
            nodes: data,
            synchronous: true,
            blackholed: Vec::new(),
            links: Vec::new(),
            rt,
        };
        f.create_monitor()?;
        for i in 0..f.nodes.len() {
            f.create_node(i)?;
        }
        f.wait_settled(Duration::from_secs(60))?;
        Ok(f)
    }

    fn pg_ctl(&self) -> String {
        self.bin.join("pg_ctl").display().to_string()
    }

    /// `pg_autoctl` with `args`, as the `postgres` user when we are root, its files under the
    /// formation's dir.
    fn autoctl(&self, args: &[&str]) -> Command {
        let d = self.dir.path();
        let mut cmd = match &self.user {
            Some(u) => {
                let mut c = Command::new("runuser");
                c.args(["-u", u, "--", "env"]);
                c
            }
            None => Command::new("env"),
        };
        cmd.arg(format!("XDG_CONFIG_HOME={}", d.join("cfg").display()))
            .arg(format!("XDG_DATA_HOME={}", d.join("share").display()))
            .arg(format!("XDG_RUNTIME_DIR={}", d.join("run").display()))
            .arg("LC_ALL=C")
            .arg(&self.autoctl)
            .args(args);
        cmd
    }

    /// The monitor's URI through a new forwarder (kept in `links`).
    fn monitor_uri(&mut self) -> Result<String, ServerError> {
        let link = self
            .rt
            .block_on(leasehold_testkit::FaultProxy::start(super::loopback(
                self.monitor.port,
            )))
            .map_err(io("a forwarder to the monitor"))?;
        let port = link.addr().port();
        self.links.push(link);
        Ok(format!(
            "postgres://autoctl_node@127.0.0.1:{port}/pg_auto_failover?sslmode=disable"
        ))
    }

    fn create_monitor(&mut self) -> Result<(), ServerError> {
        let (pgdata, port) = (
            self.monitor.pgdata.display().to_string(),
            self.monitor.port.to_string(),
        );
        let pg_ctl = self.pg_ctl();
        run(&mut self.autoctl(&[
            "create",
            "monitor",
            "--pgdata",
            &pgdata,
            "--pgport",
            &port,
            "--hostname",
            "127.0.0.1",
            "--auth",
            "trust",
            "--no-ssl",
            "--pgctl",
            &pg_ctl,
        ]))?;
        self.spawn_keeper(None)?;
        wait(Duration::from_secs(30), "the monitor", || {
            self.psql(self.monitor.port, "pg_auto_failover", "SELECT 1")
                .is_ok()
        })?;
        for (name, value) in MONITOR_SETTINGS {
            self.psql(
                self.monitor.port,
                "pg_auto_failover",
                &format!("ALTER SYSTEM SET pgautofailover.{name} = {value}"),
            )?;
        }
        self.psql(
            self.monitor.port,
            "pg_auto_failover",
            "SELECT pg_reload_conf()",
        )?;
        Ok(())
    }

    fn create_node(&mut self, i: usize) -> Result<(), ServerError> {
        let monitor = self.monitor_uri()?;
        let n = &self.nodes[i];
        let (pgdata, port, name) = (
            n.pgdata.display().to_string(),
            n.port.to_string(),
            n.name.clone(),
        );
        let pg_ctl = self.pg_ctl();
        run(&mut self.autoctl(&[
            "create",
            "postgres",
            "--pgdata",
            &pgdata,
            "--pgport",
            &port,
            "--hostname",
            "127.0.0.1",
            "--auth",
            "trust",
            "--no-ssl",
            "--monitor",
            &monitor,
            "--name",
            &name,
            "--dbname",
            "test",
            "--pgctl",
            &pg_ctl,
        ]))?;
        self.spawn_keeper(Some(i))?;
        // A standby is created from the primary once the primary's keeper runs.
        wait(Duration::from_secs(60), &format!("{name} to run"), || {
            self.psql(self.nodes[i].port, "test", "SELECT 1").is_ok()
        })
    }

    /// Starts `pg_autoctl run` for the monitor (`None`) or node `i`, in a process group of its
    /// own.
    fn spawn_keeper(&mut self, i: Option<usize>) -> Result<(), ServerError> {
        use std::os::unix::process::CommandExt;
        let k = match i {
            Some(i) => &self.nodes[i],
            None => &self.monitor,
        };
        let pgdata = k.pgdata.display().to_string();
        let log = std::fs::File::create(self.dir.path().join(format!("{}.log", k.name)))
            .map_err(io("create a keeper log"))?;
        let err = log.try_clone().map_err(io("clone a keeper log"))?;
        let child = self
            .autoctl(&["run", "--pgdata", &pgdata])
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .process_group(0)
            .spawn()
            .map_err(io("spawn pg_autoctl run"))?;
        let k = match i {
            Some(i) => &mut self.nodes[i],
            None => &mut self.monitor,
        };
        k.child = Some(child);
        Ok(())
    }

    /// Runs SQL on the server at `port` with `psql`; the unaligned output.
    fn psql(&self, port: u16, db: &str, sql: &str) -> Result<String, ServerError> {
        run(Command::new(self.bin.join("psql"))
            .args(["-X", "-q", "-At", "-F", "|", "-v", "ON_ERROR_STOP=1"])
            .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "postgres"])
            .args(["-d", db, "-c", sql])
            .env("PGCONNECT_TIMEOUT", "2"))
    }

    /// Waits until the monitor reports one primary and every running node settled (its
    /// reported state is its assigned one).
    fn wait_settled(&self, within: Duration) -> Result<(), ServerError> {
        wait(within, "the formation to settle", || {
            self.psql(
                self.monitor.port,
                "pg_auto_failover",
                "SELECT count(*) FILTER (WHERE reportedstate = 'primary'), \
                 count(*) FILTER (WHERE reportedstate <> goalstate) \
                 FROM pgautofailover.node",
            )
            .is_ok_and(|s| s.trim() == "1|0")
        })
    }

    /// The libpq URL naming every node, asking for the one that accepts writes.
    #[must_use]
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!(
            "postgres://postgres@{}/test?target_session_attrs=read-write",
            hosts.join(",")
        )
    }

    /// The node that accepts writes now, if one does.
    #[must_use]
    pub fn primary(&self) -> Option<usize> {
        (0..self.nodes.len()).find(|&i| {
            self.psql(
                self.nodes[i].port,
                "test",
                "SELECT NOT pg_is_in_recovery() AND current_setting('transaction_read_only') = 'off'",
            )
            .is_ok_and(|s| s.trim() == "t")
        })
    }

    /// Waits until node `i` accepts writes.
    ///
    /// # Errors
    /// [`ServerError::NotReady`] with the keepers' logs.
    pub fn wait_primary(&self, i: usize, within: Duration) -> Result<(), ServerError> {
        wait(
            within,
            &format!("{} to accept writes", self.nodes[i].name),
            || self.primary() == Some(i),
        )
        .map_err(|e| self.with_logs(e))
    }

    /// Waits until every node runs and the monitor reports them settled (a rejoined node is a
    /// secondary again).
    ///
    /// # Errors
    /// [`ServerError::NotReady`] with the keepers' logs.
    pub fn wait_healthy(&self, within: Duration) -> Result<(), ServerError> {
        self.wait_settled(within).map_err(|e| self.with_logs(e))
    }

    fn with_logs(&self, e: ServerError) -> ServerError {
        match e {
            ServerError::NotReady { what, secs, .. } => ServerError::NotReady {
                what,
                secs,
                log: self.logs(),
            },
            other => other,
        }
    }

    /// The end of every keeper's log.
    #[must_use]
    pub fn logs(&self) -> String {
        std::iter::once(&self.monitor)
            .chain(&self.nodes)
            .map(|k| {
                format!(
                    "--- {}:\n{}",
                    k.name,
                    super::tail(&self.dir.path().join(format!("{}.log", k.name)))
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Sends `signal` to every process of node `i`: its keeper's process group and every
    /// descendant of it. PostgreSQL's children each call `setsid()`, so a process group alone
    /// would leave the backends, the WAL sender and writer running: a "frozen" primary would
    /// still answer its sessions and replicate.
    fn group(&self, i: usize, signal: Signal) {
        if let Some(c) = &self.nodes[i].child {
            signal_tree(c.id(), signal);
        }
    }

    /// SIGKILLs node `i` whole (its keeper and its PostgreSQL), as a machine dies.
    pub fn kill_node(&mut self, i: usize) {
        self.group(i, Signal::SIGCONT);
        self.group(i, Signal::SIGKILL);
        if let Some(mut c) = self.nodes[i].child.take() {
            let _ = c.wait();
        }
        // The postmaster's backends go with it; wait until its port is free.
        let port = self.nodes[i].port;
        let _ = wait(Duration::from_secs(10), "the killed node's port", || {
            std::net::TcpStream::connect(super::loopback(port)).is_err()
        });
    }

    /// SIGSTOPs node `i` whole: nothing it holds answers, its connections stay open and silent
    /// (to everyone else, as a network blackhole would look).
    pub fn freeze_node(&self, i: usize) {
        self.group(i, Signal::SIGSTOP);
    }

    /// SIGCONTs node `i`.
    pub fn thaw_node(&self, i: usize) {
        self.group(i, Signal::SIGCONT);
    }

    /// Stops (SIGSTOP) node `i`'s WAL receiver: a standby that stops reading the primary's WAL
    /// while everything else of both nodes runs (its keeper reports it healthy). With
    /// asynchronous replication the primary commits on alone; with synchronous replication its
    /// commits wait for the standby. What the primary sends meanwhile waits unread in the
    /// receiver's socket: [`Formation::resume_replication`] reads it,
    /// [`Formation::kill_replication`] loses it.
    ///
    /// # Errors
    /// [`ServerError::NotReady`] when node `i` runs no WAL receiver (it is not a standby).
    pub fn stall_replication(&self, i: usize) -> Result<(), ServerError> {
        self.signal_receiver(i, Signal::SIGSTOP)
    }

    /// Resumes node `i`'s WAL receiver (SIGCONT).
    ///
    /// # Errors
    /// As [`Formation::stall_replication`].
    pub fn resume_replication(&self, i: usize) -> Result<(), ServerError> {
        self.signal_receiver(i, Signal::SIGCONT)
    }

    /// SIGKILLs node `i`'s WAL receiver: the WAL it had not read yet is lost with it, and its
    /// postmaster restarts the standby's processes (crash recovery from what is on disk).
    ///
    /// # Errors
    /// As [`Formation::stall_replication`].
    pub fn kill_replication(&self, i: usize) -> Result<(), ServerError> {
        self.signal_receiver(i, Signal::SIGKILL)
    }

    fn signal_receiver(&self, i: usize, signal: Signal) -> Result<(), ServerError> {
        let receivers: Vec<i32> = self.nodes[i]
            .child
            .as_ref()
            .map(|c| node_pids(c.id()))
            .unwrap_or_default()
            .into_iter()
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| String::from_utf8_lossy(&c).contains("walreceiver"))
            })
            .collect();
        if receivers.is_empty() {
            return Err(ServerError::NotReady {
                what: format!("a WAL receiver on node {i}"),
                secs: 0,
                log: self.logs(),
            });
        }
        for pid in receivers {
            let _ = nix::sys::signal::kill(Pid::from_raw(pid), signal);
        }
        Ok(())
    }

    /// Cuts node `i` off the network: its PostgreSQL port blackholed (iptables: every loopback
    /// packet to or from it dropped, both ways: its clients, the monitor's health checks and
    /// its standby's replication hear nothing) and its keeper's link to the monitor partitioned.
    /// The node itself runs on.
    ///
    /// # Errors
    /// [`ServerError::Missing`] without `iptables`; its output when it fails.
    pub fn blackhole_node(&mut self, i: usize) -> Result<(), ServerError> {
        let iptables = which("iptables", "iptables")?;
        let port = self.nodes[i].port.to_string();
        for dir in ["--dport", "--sport"] {
            run(Command::new(&iptables).args([
                "-I", "INPUT", "-i", "lo", "-p", "tcp", dir, &port, "-j", "DROP",
            ]))?;
            self.blackholed.push((dir, self.nodes[i].port));
        }
        self.links[i].set(leasehold_testkit::Fault::Partition);
        Ok(())
    }

    /// Lifts every cut of [`Formation::blackhole_node`].
    pub fn heal(&mut self) {
        for link in &self.links {
            link.set(leasehold_testkit::Fault::Pass);
        }
        let Ok(iptables) = which("iptables", "iptables") else {
            return;
        };
        for (dir, port) in std::mem::take(&mut self.blackholed) {
            let port = port.to_string();
            let _ = run(Command::new(&iptables).args([
                "-D", "INPUT", "-i", "lo", "-p", "tcp", dir, &port, "-j", "DROP",
            ]));
        }
    }

    /// Starts node `i`'s keeper again (after [`Formation::kill_node`]): it rejoins as a
    /// secondary (pg_rewind when needed).
    ///
    /// # Errors
    /// When it cannot be spawned.
    pub fn restart_node(&mut self, i: usize) -> Result<(), ServerError> {
        // The killed postmaster's pid file would stop the keeper's start.
        let _ = std::fs::remove_file(self.nodes[i].pgdata.join("postmaster.pid"));
        self.spawn_keeper(Some(i))
    }

    /// A planned switchover (`pg_autoctl perform switchover`), waiting for its end.
    ///
    /// # Errors
    /// The command's output.
    pub fn switchover(&self) -> Result<(), ServerError> {
        let pgdata = self.monitor.pgdata.display().to_string();
        run(&mut self.autoctl(&["perform", "switchover", "--pgdata", &pgdata]))
            .map(|_| ())
            .map_err(|e| self.with_logs(e))
    }

    /// Replication of every standby: synchronous (`true`, the default) or asynchronous (each
    /// node's `replication-quorum` off).
    ///
    /// # Errors
    /// The command's output.
    pub fn set_synchronous(&mut self, on: bool) -> Result<(), ServerError> {
        self.synchronous = on;
        for n in &self.nodes {
            let pgdata = n.pgdata.display().to_string();
            run(&mut self.autoctl(&[
                "set",
                "node",
                "replication-quorum",
                if on { "true" } else { "false" },
                "--pgdata",
                &pgdata,
            ]))?;
        }
        self.wait_settled(Duration::from_secs(30))?;
        // The primary's keeper applies the monitor's new `synchronous_standby_names` on its
        // next round: until then commits still wait for the standby.
        wait(
            Duration::from_secs(30),
            "the primary's synchronous_standby_names to follow",
            || {
                self.rows_on_primary("SHOW synchronous_standby_names")
                    .is_ok_and(|names| names.trim().is_empty() != on)
            },
        )
    }

    /// Whether replication is synchronous ([`Formation::set_synchronous`]).
    #[must_use]
    pub fn synchronous(&self) -> bool {
        self.synchronous
    }

    /// Rows of a query on the node that accepts writes now.
    ///
    /// # Errors
    /// When no node accepts writes, or the client's error.
    pub fn rows_on_primary(&self, sql: &str) -> Result<String, ServerError> {
        let i = self.primary().ok_or_else(|| ServerError::NotReady {
            what: "a primary".into(),
            secs: 0,
            log: self.logs(),
        })?;
        self.psql(self.nodes[i].port, "test", sql)
    }

    /// Node `i`'s PostgreSQL port.
    #[must_use]
    pub fn port(&self, i: usize) -> u16 {
        self.nodes[i].port
    }

    /// The number of data nodes.
    #[must_use]
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether there are no data nodes.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}

impl Drop for Formation {
    fn drop(&mut self) {
        self.heal();
        for i in 0..self.nodes.len() {
            self.kill_node(i);
        }
        if let Some(c) = &self.monitor.child {
            signal_tree(c.id(), Signal::SIGKILL);
        }
        if let Some(mut c) = self.monitor.child.take() {
            let _ = c.wait();
        }
    }
}

fn wait(within: Duration, what: &str, ready: impl FnMut() -> bool) -> Result<(), ServerError> {
    super::poll_until(within, what, String::new, ready)
}

/// The formation as one database: statements go to the node that accepts writes now. Only the
/// faults a formation has are offered (a node killed, frozen, switched over: [`Formation`]'s
/// own methods); the single-server faults are refused.
impl crate::backend::Backend for Formation {
    fn name(&self) -> &'static str {
        "pg_auto_failover"
    }
    fn url(&self) -> String {
        Formation::url(self)
    }
    fn upstream(&self) -> Option<std::net::SocketAddr> {
        None
    }
    fn rows(&self, sql: &str) -> Result<Vec<Vec<String>>, ServerError> {
        Ok(crate::backend::split(&self.rows_on_primary(sql)?, '|'))
    }
    fn stop_fast(&self) -> Result<(), ServerError> {
        Err(not_here("stop_fast"))
    }
    fn kill9(&self) {}
    fn start_again(&self) -> Result<(), ServerError> {
        Err(not_here("start_again"))
    }
    fn read_only(&self, _on: bool) -> Result<(), ServerError> {
        Err(not_here("read_only"))
    }
    fn lock_rows(&self, _namespaces: &[&str]) -> Result<super::Session, ServerError> {
        Err(not_here("lock_rows"))
    }
    fn saturate(&self, _clients: u32, _secs: u32) -> Result<Child, ServerError> {
        Err(not_here("saturate"))
    }
    fn audit_ddl(&self) -> Vec<String> {
        crate::backend::pg_audit_ddl()
    }
}

fn not_here(what: &str) -> ServerError {
    ServerError::Command {
        command: what.to_owned(),
        detail: "a formation's faults are its nodes' (kill_node, freeze_node, switchover)".into(),
    }
}

/// Sends `signal` to every process of the keeper `keeper` (see [`Formation::group`]).
fn signal_tree(keeper: u32, signal: Signal) {
    for pid in node_pids(keeper) {
        let _ = nix::sys::signal::kill(Pid::from_raw(pid), signal);
    }
}

/// Every process of the keeper `keeper`: its process group and every descendant of it.
fn node_pids(keeper: u32) -> std::collections::BTreeSet<i32> {
    let Ok(keeper) = i32::try_from(keeper) else {
        return std::collections::BTreeSet::new();
    };
    let procs: Vec<(i32, i32, i32)> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_str()?.parse::<i32>().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            // pid (comm) state ppid pgrp …: comm may hold spaces, so split after ')'.
            let mut f = stat.get(stat.rfind(')')? + 2..)?.split(' ');
            let ppid = f.nth(1)?.parse().ok()?;
            let pgrp = f.next()?.parse().ok()?;
            Some((pid, ppid, pgrp))
        })
        .collect();
    let mut node: std::collections::BTreeSet<i32> = procs
        .iter()
        .filter(|p| p.2 == keeper)
        .map(|p| p.0)
        .collect();
    loop {
        let before = node.len();
        for p in &procs {
            if node.contains(&p.1) {
                node.insert(p.0);
            }
        }
        if node.len() == before {
            break;
        }
    }
    node
}
