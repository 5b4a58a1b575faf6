//! A loopback TCP forwarder for the faults `leasehold-testkit`'s `FaultProxy` does not make:
//! **only new connections work** after a heal (the connections open during the blackhole stay
//! dead, as after a NAT or firewall lost their state), and **switching the upstream** to another
//! server (a virtual IP moving to a promoted standby: open connections are cut, new ones go to
//! the new server).

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// The forwarder's state; every connection watches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct State {
    upstream: SocketAddr,
    blackhole: bool,
    /// Connections accepted before this epoch forward nothing, ever.
    dead_before: u64,
    /// Incremented on every accept-affecting change.
    epoch: u64,
}

/// A switchable, fault-injecting forwarder on `127.0.0.1`. Dropping it stops it.
#[derive(Debug)]
pub struct SwitchProxy {
    addr: SocketAddr,
    state: Arc<watch::Sender<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl SwitchProxy {
    /// Starts forwarding to `upstream` on an ephemeral loopback port. Call inside a runtime.
    ///
    /// # Errors
    /// The bind error.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<Self> {
        assert!(upstream.ip().is_loopback(), "forwards to loopback only");
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (tx, rx) = watch::channel(State {
            upstream,
            blackhole: false,
            dead_before: 0,
            epoch: 0,
        });
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                let rx = rx.clone();
                tokio::spawn(async move {
                    let born = *rx.borrow();
                    if let Ok(server) = TcpStream::connect(born.upstream).await {
                        let (cr, cw) = client.into_split();
                        let (sr, sw) = server.into_split();
                        let up = tokio::spawn(pump(cr, sw, rx.clone(), born));
                        let down = tokio::spawn(pump(sr, cw, rx, born));
                        let _ = tokio::join!(up, down);
                    }
                });
            }
        });
        Ok(Self {
            addr,
            state: Arc::new(tx),
            task,
        })
    }

    /// The forwarder's address.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `url` with `upstream`'s `host:port` replaced by the forwarder's.
    #[must_use]
    pub fn url_for(&self, url: &str, upstream: SocketAddr) -> String {
        url.replace(&upstream.to_string(), &self.addr.to_string())
    }

    /// Forwards nothing on any connection (new ones are accepted and hang too).
    pub fn blackhole(&self) {
        self.state.send_modify(|s| {
            s.blackhole = true;
            s.epoch += 1;
        });
    }

    /// Ends the blackhole for connections made from now on; those open now stay dead.
    pub fn heal_new_only(&self) {
        self.state.send_modify(|s| {
            s.blackhole = false;
            s.epoch += 1;
            s.dead_before = s.epoch;
        });
    }

    /// Ends the blackhole for every connection (held bytes flow on).
    pub fn heal_all(&self) {
        self.state.send_modify(|s| {
            s.blackhole = false;
            s.epoch += 1;
        });
    }

    /// Sends new connections to `upstream` and cuts the open ones.
    pub fn switch_upstream(&self, upstream: SocketAddr) {
        self.state.send_modify(|s| {
            s.upstream = upstream;
            s.epoch += 1;
        });
    }
}

impl Drop for SwitchProxy {
    fn drop(&mut self) {
        self.task.abort();
        self.state.send_modify(|s| {
            s.upstream = SocketAddr::from(([127, 0, 0, 1], 0));
            s.epoch += 1;
        });
    }
}

/// What one connection born at `born` may do under `now`.
enum Verdict {
    Forward,
    Hold,
    Cut,
}

fn verdict(born: State, now: State) -> Verdict {
    if now.upstream != born.upstream {
        Verdict::Cut
    } else if now.blackhole || born.epoch < now.dead_before {
        Verdict::Hold
    } else {
        Verdict::Forward
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut rx: watch::Receiver<State>,
    born: State,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = tokio::select! {
            r = from.read(&mut buf) => match r { Ok(0) | Err(_) => return, Ok(n) => n },
            changed = rx.changed() => {
                if changed.is_err() { return; }
                if matches!(verdict(born, *rx.borrow()), Verdict::Cut) { return; }
                continue;
            }
        };
        loop {
            let now = *rx.borrow_and_update();
            match verdict(born, now) {
                Verdict::Forward => break,
                Verdict::Cut => return,
                Verdict::Hold => {
                    // Wait for a change, but notice the peer closing meanwhile.
                    tokio::select! {
                        changed = rx.changed() => if changed.is_err() { return },
                        r = peer_closed(&mut from) => if r { return },
                    }
                }
            }
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// Whether the peer has closed its side, without consuming the data it sent.
async fn peer_closed(from: &mut tokio::net::tcp::OwnedReadHalf) -> bool {
    let mut b = [0u8; 1];
    loop {
        match from.peek(&mut b).await {
            Ok(0) | Err(_) => return true,
            // Data waiting: not closed; look again later so this does not spin.
            Ok(_) => tokio::time::sleep(std::time::Duration::from_millis(50)).await,
        }
    }
}
