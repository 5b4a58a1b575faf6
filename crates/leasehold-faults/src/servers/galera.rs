//! A throwaway MariaDB Galera cluster: three `mariadbd` nodes on one machine, each in a temp dir
//! of its own and a process group of its own (so its state-transfer helpers die with it), on
//! spare loopback ports: the client port, the group communication port (gcomm), the incremental
//! state transfer port and the rsync state transfer port. The first node bootstraps the cluster
//! (`--wsrep-new-cluster`); the others join it by a full state transfer (rsync). Row-based
//! binary log and interleaved auto-increment locks, as Galera requires.
//!
//! Group communication is tuned for a quick verdict on a silent node (suspected after 2 s,
//! dropped after 4 s) instead of the defaults' 5 s and 15 s, so a fault takes seconds.
//!
//! Run as root, the nodes run as the `mysql` user: the joiner's rsync daemon, started by a root
//! server, would drop to `nobody` and could not write the data dir.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use nix::sys::signal::Signal;
use nix::unistd::{Pid, Uid, User};

use super::{ServerError, TempDir, free_port, io, run, tail, which};

/// The wsrep provider the Debian/Ubuntu `galera-4` package installs.
const PROVIDER: &str = "/usr/lib/galera/libgalera_smm.so";

/// Group communication timings: a node is suspected after 2 s of silence and dropped from the
/// view after 4 s; keepalives and checks every half second.
const EVS: &str = "evs.keepalive_period=PT0.5S;evs.suspect_timeout=PT2S;\
                   evs.inactive_timeout=PT4S;evs.inactive_check_period=PT0.5S;\
                   evs.install_timeout=PT4S;gcache.size=32M";

/// How long a node may take to join (a full state transfer) or to settle.
const SETTLE: Duration = Duration::from_secs(90);

/// One `mariadbd` of the cluster.
#[derive(Debug)]
struct Node {
    name: String,
    port: u16,
    gcomm: u16,
    ist: u16,
    sst: u16,
    child: Mutex<Option<Child>>,
}

/// Three Galera nodes. Dropping it kills every node's process group and removes the dir.
#[derive(Debug)]
pub struct GaleraCluster {
    server: PathBuf,
    client: PathBuf,
    dir: TempDir,
    user: Option<String>,
    nodes: Vec<Node>,
}

impl GaleraCluster {
    /// Installs three data dirs, bootstraps the first node, joins the other two, and creates
    /// the database `test` and the user `holder` (replicated to every node).
    ///
    /// # Errors
    /// [`ServerError::Missing`] without `mariadbd`, the Galera provider (`galera-4`) or `rsync`;
    /// the failing command's output or the node's log otherwise.
    pub fn start() -> Result<Self, ServerError> {
        let install = which("mariadb-install-db", "mariadb-server")?;
        let server = which("mariadbd", "mariadb-server")?;
        let client = which("mariadb", "mariadb-client")?;
        which("rsync", "rsync")?;
        which("wsrep_sst_rsync", "mariadb-server")?;
        if !std::path::Path::new(PROVIDER).is_file() {
            return Err(ServerError::Missing {
                tool: PROVIDER.into(),
                hint: "install the `galera-4` package".into(),
            });
        }
        let dir = TempDir::new("galera")?;
        let user = Uid::effective().is_root().then(|| "mysql".to_owned());
        let owner = match &user {
            Some(name) => Some(User::from_name(name).ok().flatten().ok_or_else(|| {
                ServerError::Missing {
                    tool: format!("user {name}"),
                    hint: "a root test runs the nodes as `mysql` (the mariadb-server package \
                           creates it)"
                        .into(),
                }
            })?),
            None => None,
        };
        let mut nodes = Vec::new();
        for i in 1..=3 {
            nodes.push(Node {
                name: format!("node{i}"),
                port: free_port()?,
                gcomm: free_port()?,
                ist: free_port()?,
                sst: free_port()?,
                child: Mutex::new(None),
            });
        }
        let cluster = Self {
            server,
            client,
            dir,
            user,
            nodes,
        };
        for i in 0..cluster.nodes.len() {
            let home = cluster.home(i);
            std::fs::create_dir_all(&home).map_err(io("create a node dir"))?;
            if let Some(u) = &owner {
                std::os::unix::fs::chown(&home, Some(u.uid.as_raw()), Some(u.gid.as_raw()))
                    .map_err(io("chown a node dir"))?;
            }
            run(Command::new(&install)
                .arg("--no-defaults")
                .arg(format!("--datadir={}", cluster.data(i).display()))
                .arg(format!(
                    "--user={}",
                    cluster.user.as_deref().unwrap_or("root")
                ))
                .args(["--auth-root-authentication-method=normal", "--skip-test-db"]))?;
        }
        cluster.spawn(0, true)?;
        cluster.wait_synced(0, SETTLE)?;
        cluster.admin(
            0,
            "CREATE DATABASE test; CREATE USER 'holder'@'%' IDENTIFIED BY 'holder'; \
             CREATE USER 'holder'@'localhost' IDENTIFIED BY 'holder'; \
             GRANT ALL ON test.* TO 'holder'@'%'; GRANT ALL ON test.* TO 'holder'@'localhost';",
        )?;
        for i in 1..cluster.nodes.len() {
            cluster.spawn(i, false)?;
            cluster.wait_synced(i, SETTLE)?;
        }
        cluster.wait_size(0, cluster.nodes.len(), SETTLE)?;
        Ok(cluster)
    }

    /// How many nodes.
    #[must_use]
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether it has no nodes (never: it always has three).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The URL holders use to reach node `i`.
    #[must_use]
    pub fn node_url(&self, i: usize) -> String {
        format!(
            "mysql://holder:holder@127.0.0.1:{}/test",
            self.nodes[i].port
        )
    }

    /// Node `i`'s client port.
    #[must_use]
    pub fn port(&self, i: usize) -> u16 {
        self.nodes[i].port
    }

    fn home(&self, i: usize) -> PathBuf {
        self.dir.path().join(&self.nodes[i].name)
    }

    fn data(&self, i: usize) -> PathBuf {
        self.home(i).join("data")
    }

    fn socket(&self, i: usize) -> PathBuf {
        self.home(i).join("mysqld.sock")
    }

    fn log(&self, i: usize) -> PathBuf {
        self.home(i).join("server.log")
    }

    fn cluster_address(&self) -> String {
        let peers: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.gcomm))
            .collect();
        format!("gcomm://{}", peers.join(","))
    }

    /// The server's arguments for node `i`.
    fn args(&self, i: usize) -> Vec<String> {
        let n = &self.nodes[i];
        let home = self.home(i);
        vec![
            "--no-defaults".into(),
            format!("--datadir={}", self.data(i).display()),
            format!("--socket={}", self.socket(i).display()),
            format!("--pid-file={}", home.join("mysqld.pid").display()),
            format!("--port={}", n.port),
            "--bind-address=127.0.0.1".into(),
            format!("--user={}", self.user.as_deref().unwrap_or("root")),
            "--innodb-buffer-pool-size=32M".into(),
            "--innodb-flush-log-at-trx-commit=2".into(),
            "--max-connections=400".into(),
            "--skip-name-resolve".into(),
            "--log-bin=mysql-bin".into(),
            "--binlog-format=ROW".into(),
            "--innodb-autoinc-lock-mode=2".into(),
            "--wsrep-on=ON".into(),
            format!("--wsrep-provider={PROVIDER}"),
            format!("--wsrep-cluster-address={}", self.cluster_address()),
            format!("--wsrep-node-address=127.0.0.1:{}", n.gcomm),
            format!("--wsrep-node-name={}", n.name),
            format!(
                "--wsrep-provider-options=gmcast.listen_addr=tcp://127.0.0.1:{};\
                 ist.recv_addr=127.0.0.1:{};{EVS}",
                n.gcomm, n.ist
            ),
            format!("--wsrep-sst-receive-address=127.0.0.1:{}", n.sst),
            "--wsrep-sst-method=rsync".into(),
        ]
    }

    /// Starts node `i`'s server in a process group of its own; `bootstrap` starts a new
    /// cluster from its data (`--wsrep-new-cluster`).
    fn spawn(&self, i: usize, bootstrap: bool) -> Result<(), ServerError> {
        use std::os::unix::process::CommandExt;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log(i))
            .map_err(io("node log"))?;
        let log2 = log.try_clone().map_err(io("node log"))?;
        let mut cmd = Command::new(&self.server);
        cmd.args(self.args(i));
        if bootstrap {
            cmd.arg("--wsrep-new-cluster");
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .process_group(0)
            .spawn()
            .map_err(io("spawn mariadbd"))?;
        *self.nodes[i]
            .child
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(child);
        Ok(())
    }

    /// Runs SQL as root over node `i`'s socket; tab-separated rows.
    ///
    /// # Errors
    /// The client's output.
    pub fn admin(&self, i: usize, sql: &str) -> Result<String, ServerError> {
        run(Command::new(&self.client)
            .arg("--no-defaults")
            .arg(format!("--socket={}", self.socket(i).display()))
            .args(["-uroot", "-N", "-B", "-e", sql]))
    }

    /// One wsrep status variable of node `i` (`wsrep_ready`, `wsrep_cluster_status`, …).
    fn status(&self, i: usize, name: &str) -> Option<String> {
        let out = self
            .admin(i, &format!("SHOW GLOBAL STATUS LIKE '{name}'"))
            .ok()?;
        out.lines()
            .next()
            .and_then(|l| l.split('\t').nth(1))
            .map(str::to_owned)
    }

    /// The sum over the nodes that answer of a numeric wsrep status counter
    /// (`wsrep_local_cert_failures`, `wsrep_local_bf_aborts`, …).
    #[must_use]
    pub fn counter(&self, name: &str) -> u64 {
        (0..self.nodes.len())
            .filter_map(|i| self.status(i, name)?.parse::<u64>().ok())
            .sum()
    }

    /// Whether node `i` is synced with the primary component and serves clients.
    #[must_use]
    pub fn is_synced(&self, i: usize) -> bool {
        synced(&self.client, &self.socket(i))
    }

    /// A check of node `i` that can run on another thread, answering what
    /// [`GaleraCluster::is_synced`] answers: a balancer's health check.
    pub fn synced_probe(&self, i: usize) -> impl Fn() -> bool + Send + 'static {
        let (client, socket) = (self.client.clone(), self.socket(i));
        move || synced(&client, &socket)
    }

    /// Waits until node `i` is synced.
    ///
    /// # Errors
    /// [`ServerError::NotReady`] with the node's log.
    pub fn wait_synced(&self, i: usize, within: Duration) -> Result<(), ServerError> {
        self.wait(i, within, "to be synced", || self.is_synced(i))
    }

    /// Waits until node `i` sees a primary component of `size` nodes.
    ///
    /// # Errors
    /// [`ServerError::NotReady`] with the node's log.
    pub fn wait_size(&self, i: usize, size: usize, within: Duration) -> Result<(), ServerError> {
        let want = size.to_string();
        self.wait(i, within, &format!("to see {size} nodes"), || {
            self.status(i, "wsrep_cluster_status").as_deref() == Some("Primary")
                && self.status(i, "wsrep_cluster_size").as_deref() == Some(want.as_str())
        })
    }

    /// Waits until node `i` left the primary component (it refuses clients).
    ///
    /// # Errors
    /// [`ServerError::NotReady`] with the node's log.
    pub fn wait_non_primary(&self, i: usize, within: Duration) -> Result<(), ServerError> {
        self.wait(i, within, "to leave the primary component", || {
            self.status(i, "wsrep_cluster_status").as_deref() == Some("non-Primary")
        })
    }

    fn wait(
        &self,
        i: usize,
        within: Duration,
        what: &str,
        ok: impl FnMut() -> bool,
    ) -> Result<(), ServerError> {
        let what = format!("{} {what}", self.nodes[i].name);
        super::poll_until(within, &what, || tail(&self.log(i)), ok)
    }

    /// Signals node `i`'s process group, waits (at most 30 s) until its server exited, then
    /// kills whatever of the group is left (state-transfer helpers).
    fn stop_with(&self, i: usize, sig: Signal) {
        let mut slot = self.nodes[i]
            .child
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(mut child) = slot.take() {
            let group = i32::try_from(child.id()).ok().map(Pid::from_raw);
            if let Some(g) = group {
                let _ = nix::sys::signal::killpg(g, sig);
            }
            let until = crate::clock::deadline(Duration::from_secs(30));
            while !crate::clock::passed(until) {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            if let Some(g) = group {
                let _ = nix::sys::signal::killpg(g, Signal::SIGKILL);
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGKILLs node `i` (its server and any state-transfer helper), as a machine that died.
    pub fn kill_node(&self, i: usize) {
        self.stop_with(i, Signal::SIGKILL);
    }

    /// Starts node `i` again (it rejoins by an incremental or full state transfer) and waits
    /// until it is synced.
    ///
    /// # Errors
    /// [`ServerError::NotReady`] with the node's log.
    pub fn restart_node(&self, i: usize) -> Result<(), ServerError> {
        self.spawn(i, false)?;
        self.wait_synced(i, SETTLE)
    }

    /// Cuts node `i` off the other two (`gmcast.isolate=1`: its group communication drops
    /// every peer) while it runs. It leaves the primary component after the suspect and
    /// inactive timeouts and refuses clients (error 1047) until healed; the other two go on
    /// as a primary component of two.
    ///
    /// # Errors
    /// The client's output.
    pub fn isolate_node(&self, i: usize) -> Result<(), ServerError> {
        self.admin(i, "SET GLOBAL wsrep_provider_options = 'gmcast.isolate=1'")
            .map(|_| ())
    }

    /// Ends node `i`'s isolation and waits until it has rejoined and synced.
    ///
    /// # Errors
    /// The client's output, or [`ServerError::NotReady`] with the node's log.
    pub fn heal(&self, i: usize) -> Result<(), ServerError> {
        self.admin(i, "SET GLOBAL wsrep_provider_options = 'gmcast.isolate=0'")?;
        self.wait_synced(i, SETTLE)?;
        self.wait_size(i, self.nodes.len(), SETTLE)
    }

    /// Every node SIGKILLed at once, as a power cut.
    pub fn kill_all(&self) {
        for i in 0..self.nodes.len() {
            self.kill_node(i);
        }
    }

    /// Starts a cluster whose every node is down: the node that is safe to bootstrap
    /// (`safe_to_bootstrap: 1` in its `grastate.dat`, the last to leave a clean shutdown) or,
    /// when none is (every node was killed), the one whose recovered position
    /// (`mariadbd --wsrep-recover`) is the highest is marked so and bootstraps a new primary
    /// component; the others join it. Returns which node bootstrapped and when (on
    /// `CLOCK_MONOTONIC`) it was synced and serving, before the others joined.
    ///
    /// # Errors
    /// [`ServerError::NotReady`] with a node's log, or the recovery's output.
    pub fn restart_all(&self) -> Result<(usize, u64), ServerError> {
        let safe = (0..self.nodes.len()).find(|&i| {
            std::fs::read_to_string(self.data(i).join("grastate.dat"))
                .is_ok_and(|s| s.contains("safe_to_bootstrap: 1"))
        });
        let first = match safe {
            Some(i) => i,
            None => {
                let mut best = (0, i64::MIN);
                for i in 0..self.nodes.len() {
                    let seqno = self.recovered_seqno(i)?;
                    if seqno > best.1 {
                        best = (i, seqno);
                    }
                }
                let path = self.data(best.0).join("grastate.dat");
                let state = std::fs::read_to_string(&path).map_err(io("read grastate.dat"))?;
                std::fs::write(
                    &path,
                    state.replace("safe_to_bootstrap: 0", "safe_to_bootstrap: 1"),
                )
                .map_err(io("write grastate.dat"))?;
                best.0
            }
        };
        self.spawn(first, true)?;
        self.wait_synced(first, SETTLE)?;
        let serving = crate::clock::mono_ns();
        for i in (0..self.nodes.len()).filter(|&i| i != first) {
            self.spawn(i, false)?;
        }
        for i in 0..self.nodes.len() {
            self.wait_synced(i, SETTLE)?;
        }
        self.wait_size(first, self.nodes.len(), SETTLE)?;
        Ok((first, serving))
    }

    /// Node `i`'s last committed seqno, recovered from its storage engine
    /// (`mariadbd --wsrep-recover` logs "WSREP: Recovered position: <uuid>:<seqno>").
    fn recovered_seqno(&self, i: usize) -> Result<i64, ServerError> {
        let log = self.home(i).join("recover.log");
        let _ = std::fs::remove_file(&log);
        let mut cmd = Command::new(&self.server);
        cmd.args(self.args(i))
            .arg("--wsrep-recover")
            .arg(format!("--log-error={}", log.display()));
        run(&mut cmd)?;
        let text = std::fs::read_to_string(&log).map_err(io("read the recovery log"))?;
        text.lines()
            .rev()
            .filter_map(|l| l.split("Recovered position: ").nth(1))
            .find_map(|p| p.trim().rsplit(':').next()?.parse::<i64>().ok())
            .ok_or_else(|| ServerError::Command {
                command: "mariadbd --wsrep-recover".into(),
                detail: tail(&log),
            })
    }

    /// The index of a node that is synced with the primary component, if any.
    #[must_use]
    pub fn synced_node(&self) -> Option<usize> {
        (0..self.nodes.len()).find(|&i| self.is_synced(i))
    }

    /// The end of every node's log.
    #[must_use]
    pub fn logs(&self) -> String {
        (0..self.nodes.len())
            .map(|i| format!("--- {}\n{}", self.nodes[i].name, tail(&self.log(i))))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Whether the node behind `socket` is synced with the primary component and serves clients:
/// `wsrep_ready` is `ON` and `wsrep_local_state_comment` is `Synced` (not a joiner, a donor, or
/// a node outside the primary component), read in one query. A node that does not answer is
/// not synced.
fn synced(client: &Path, socket: &Path) -> bool {
    let out = run(Command::new(client)
        .arg("--no-defaults")
        .arg(format!("--socket={}", socket.display()))
        .args(["--connect-timeout=1", "-uroot", "-N", "-B", "-e"])
        .arg(
            "SHOW GLOBAL STATUS WHERE Variable_name IN \
             ('wsrep_ready', 'wsrep_local_state_comment')",
        ));
    let Ok(out) = out else { return false };
    let value = |name: &str| {
        out.lines()
            .filter_map(|l| l.split_once('\t'))
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim().to_owned())
    };
    value("wsrep_ready").as_deref() == Some("ON")
        && value("wsrep_local_state_comment").as_deref() == Some("Synced")
}

impl Drop for GaleraCluster {
    fn drop(&mut self) {
        self.kill_all();
    }
}
