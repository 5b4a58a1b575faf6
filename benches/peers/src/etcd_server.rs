//! A throwaway single-member etcd: the `etcd` binary (Debian's `etcd-server`) on two spare
//! ports with a data directory of its own, started here and stopped by its PID (SIGKILL, then
//! the directory is removed). Its settings are etcd's defaults: every write is in the WAL,
//! fsynced, before it is answered.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::peer::{R, err};

pub struct EtcdServer {
    child: Child,
    dir: PathBuf,
    pub endpoint: String,
    pub version: String,
}

/// A port no one listens on now (the OS picks it; freed at once for etcd to take).
fn spare_port() -> R<u16> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(err)?;
    Ok(l.local_addr().map_err(err)?.port())
}

impl EtcdServer {
    /// Starts `bin` with its data under `parent` (on the disk being measured: not a tmpfs) and
    /// waits until it answers.
    pub async fn start(bin: &str, parent: &std::path::Path) -> R<Self> {
        let version = Command::new(bin)
            .arg("--version")
            .output()
            .map_err(|e| format!("{bin} --version: {e} (apt-get install etcd-server)"))?;
        let version = String::from_utf8_lossy(&version.stdout)
            .lines()
            .next()
            .unwrap_or("etcd")
            .trim()
            .replace("etcd Version:", "etcd");
        let (client, peer) = (spare_port()?, spare_port()?);
        let dir = parent.join(format!("peer-locks-etcd-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let log = std::fs::File::create(dir.join("etcd.log")).map_err(err)?;
        let client_url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let child = Command::new(bin)
            .args(["--name", "peer-locks", "--data-dir"])
            .arg(dir.join("data"))
            .args(["--listen-client-urls", &client_url])
            .args(["--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("peer-locks={peer_url}")])
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(err)?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("{bin}: {e}"))?;
        let server = Self {
            child,
            dir,
            endpoint: client_url,
            version,
        };
        for _ in 0..100 {
            if let Ok(mut c) = etcd_client::Client::connect([server.endpoint.as_str()], None).await
                && c.status().await.is_ok()
            {
                return Ok(server);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(format!(
            "etcd did not answer within 10 s; see {}",
            server.dir.join("etcd.log").display()
        ))
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        // By PID: the child this process started, never a service of the machine.
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
