//! [`FaultProxy`]: a fault-injecting, switchable TCP forwarder on loopback.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the proxy does with traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Forward everything as it comes.
    Pass,
    /// Forward everything, each chunk held back this long.
    Delay(Duration),
    /// Close every open connection at once and refuse new ones (they are accepted and closed).
    Drop,
    /// Keep connections open but forward nothing in either direction. The bytes held meanwhile
    /// flow on when the fault changes to one that forwards, even from a client that has left
    /// (late statements arrive).
    Blackhole,
    /// Forward nothing, like [`Fault::Blackhole`], but a connection whose sending side closes
    /// meanwhile is closed through and its held bytes dropped, so the server sees the client
    /// leave.
    Partition,
}

/// The proxy's state; every connection watches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct State {
    fault: Fault,
    upstream: SocketAddr,
    /// Connections accepted before this epoch forward nothing, ever.
    dead_before: u64,
    /// Incremented on every change.
    epoch: u64,
    /// A client's `COMMIT` is held, not forwarded, while this is set.
    hold_commits: bool,
}

/// A fault-injecting TCP proxy on `127.0.0.1`. Dropping it stops it and closes its connections.
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    state: Arc<watch::Sender<State>>,
    /// The `COMMIT`s held so far, and what clients sent while commits were held.
    held: Arc<Commits>,
    task: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    /// Starts a proxy to `upstream` on an ephemeral loopback port, passing traffic. Call inside
    /// a runtime.
    ///
    /// # Errors
    /// The socket error if the loopback port cannot be bound.
    ///
    /// # Panics
    /// If `upstream` is not a loopback address.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<Self> {
        assert!(
            upstream.ip().is_loopback(),
            "the fault proxy only forwards to loopback addresses"
        );
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (tx, rx) = watch::channel(State {
            fault: Fault::Pass,
            upstream,
            dead_before: 0,
            epoch: 0,
            hold_commits: false,
        });
        let held = Arc::new(Commits {
            count: watch::channel(0).0,
            sent: std::sync::Mutex::new(std::collections::VecDeque::new()),
        });
        let counter = Arc::clone(&held);
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                let rx = rx.clone();
                let counter = Arc::clone(&counter);
                tokio::spawn(async move {
                    let born = *rx.borrow();
                    if born.fault == Fault::Drop {
                        return; // accepted and closed at once
                    }
                    match TcpStream::connect(born.upstream).await {
                        Ok(server) => relay(client, server, rx, born, counter).await,
                        Err(e) => log::warn!("fault proxy: upstream {}: {e}", born.upstream),
                    }
                });
            }
        });
        Ok(Self {
            addr,
            state: Arc::new(tx),
            held,
            task,
        })
    }

    /// The proxy's address: point the client here.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Rewrites a database URL's `host:port` to the proxy's (the URL must name `upstream`).
    #[must_use]
    pub fn url_for(&self, url: &str, upstream: SocketAddr) -> String {
        url.replace(&upstream.to_string(), &self.addr.to_string())
            .replace(
                &format!("localhost:{}", upstream.port()),
                &self.addr.to_string(),
            )
    }

    /// Switches the fault; it applies to open connections at once.
    pub fn set(&self, fault: Fault) {
        self.state.send_modify(|s| {
            s.fault = fault;
            s.epoch += 1;
        });
    }

    /// The fault in force.
    #[must_use]
    pub fn fault(&self) -> Fault {
        self.state.borrow().fault
    }

    /// Passes traffic on connections made from now on; those open now forward nothing, ever
    /// (as after a NAT or firewall lost their state).
    pub fn heal_new_only(&self) {
        self.state.send_modify(|s| {
            s.fault = Fault::Pass;
            s.epoch += 1;
            s.dead_before = s.epoch;
        });
    }

    /// Sends new connections to `upstream` and cuts the open ones (a virtual IP moving to a
    /// promoted standby).
    ///
    /// # Panics
    /// If `upstream` is not a loopback address.
    pub fn switch_upstream(&self, upstream: SocketAddr) {
        assert!(
            upstream.ip().is_loopback(),
            "the fault proxy only forwards to loopback addresses"
        );
        self.state.send_modify(|s| {
            s.upstream = upstream;
            s.epoch += 1;
        });
    }
}

impl FaultProxy {
    /// From now on a client's `COMMIT` (a MySQL `COM_QUERY` or a PostgreSQL simple query of
    /// exactly that text) is held, not forwarded, until [`FaultProxy::pass_commits`]: the
    /// transaction stays open on the server, its writes done, while a test changes the same rows
    /// elsewhere. Everything else passes as the fault in force says. The proxy reads the
    /// protocol, so the client must connect in clear (PostgreSQL `sslmode=disable`, MySQL
    /// `ssl-mode=disabled`): a `COMMIT` inside TLS is not seen, and not held.
    pub fn hold_commits(&self) {
        self.state.send_modify(|s| {
            s.hold_commits = true;
            s.epoch += 1;
        });
    }

    /// Forwards the held `COMMIT`s and every later one.
    pub fn pass_commits(&self) {
        self.state.send_modify(|s| {
            s.hold_commits = false;
            s.epoch += 1;
        });
    }

    /// How many `COMMIT`s have been held since the proxy started.
    #[must_use]
    pub fn commits_held(&self) -> u64 {
        *self.held.count.borrow()
    }

    /// The last chunks clients sent while commits were held (their first 64 bytes, at most 16
    /// chunks), printable: what to look at when a `COMMIT` was expected and not held.
    #[must_use]
    pub fn sent_while_holding(&self) -> Vec<String> {
        self.held
            .sent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(|c| c.escape_ascii().to_string())
            .collect()
    }

    /// Waits until `count` `COMMIT`s have been held since the proxy started, at most `limit`;
    /// whether they were.
    pub async fn wait_commits_held(&self, count: u64, limit: Duration) -> bool {
        let mut rx = self.held.count.subscribe();
        tokio::time::timeout(limit, rx.wait_for(|&n| n >= count))
            .await
            .is_ok_and(|r| r.is_ok())
    }
}

/// The `COMMIT`s a proxy has held, and what clients sent while commits were held.
#[derive(Debug)]
struct Commits {
    count: watch::Sender<u64>,
    sent: std::sync::Mutex<std::collections::VecDeque<Vec<u8>>>,
}

impl Commits {
    /// Keeps the start of `chunk` (a client's, sent while commits are held); whether it
    /// carries a `COMMIT`.
    fn note(&self, chunk: &[u8]) -> bool {
        let mut sent = self
            .sent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if sent.len() == 16 {
            sent.pop_front();
        }
        sent.push_back(chunk[..chunk.len().min(64)].to_vec());
        is_commit(chunk)
    }
}

/// Whether `chunk`, read from a client, carries a `COMMIT` statement anywhere: MySQL's
/// `COM_QUERY` packet of it (length 7, any sequence number, 0x03, `COMMIT`) or PostgreSQL's
/// simple query (`Q`, length 11, `COMMIT`, NUL), in any letter case. A client may flush a
/// `COMMIT` behind other messages (PostgreSQL: closing a cached statement), and a read may
/// start anywhere, so the chunk is searched rather than parsed.
fn is_commit(chunk: &[u8]) -> bool {
    let text = |t: &[u8]| t.eq_ignore_ascii_case(b"COMMIT");
    let mysql = chunk
        .windows(11)
        .any(|w| w[..3] == [7, 0, 0] && w[4] == 0x03 && text(&w[5..]));
    let postgres = chunk
        .windows(12)
        .any(|w| w[..5] == [b'Q', 0, 0, 0, 11] && text(&w[5..11]) && w[11] == 0);
    mysql || postgres
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
        self.set(Fault::Drop);
    }
}

/// What one connection accepted under `born` does under `now`.
enum Verdict {
    Forward,
    Delay(Duration),
    /// Hold the bytes until the state changes; `until_closed`: give up when the sender closes.
    Hold {
        until_closed: bool,
    },
    Cut,
}

fn verdict(born: State, now: State) -> Verdict {
    if now.fault == Fault::Drop || now.upstream != born.upstream {
        return Verdict::Cut;
    }
    if born.epoch < now.dead_before {
        return Verdict::Hold { until_closed: true };
    }
    match now.fault {
        Fault::Pass => Verdict::Forward,
        Fault::Delay(d) => Verdict::Delay(d),
        Fault::Blackhole => Verdict::Hold {
            until_closed: false,
        },
        Fault::Partition => Verdict::Hold { until_closed: true },
        Fault::Drop => Verdict::Cut,
    }
}

async fn relay(
    client: TcpStream,
    server: TcpStream,
    rx: watch::Receiver<State>,
    born: State,
    held: Arc<Commits>,
) {
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    let up = tokio::spawn(pump(cr, sw, rx.clone(), born, Some(held)));
    let down = tokio::spawn(pump(sr, cw, rx, born, None));
    let _ = tokio::join!(up, down);
}

/// Copies one direction, obeying the state in force for every chunk. `held` is given for the
/// client's direction: a `COMMIT` is counted there and held while commits are held.
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    mut rx: watch::Receiver<State>,
    born: State,
    held: Option<Arc<Commits>>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = tokio::select! {
            r = from.read(&mut buf) => match r { Ok(0) | Err(_) => return, Ok(n) => n },
            changed = rx.changed() => {
                if changed.is_err() || matches!(verdict(born, *rx.borrow()), Verdict::Cut) {
                    return;
                }
                continue;
            }
        };
        if let Some(held) = &held
            && rx.borrow_and_update().hold_commits
            && held.note(&buf[..n])
        {
            held.count.send_modify(|c| *c += 1);
            loop {
                let now = *rx.borrow_and_update();
                if matches!(verdict(born, now), Verdict::Cut) {
                    return;
                }
                if !now.hold_commits {
                    break;
                }
                if rx.changed().await.is_err() {
                    return;
                }
            }
        }
        loop {
            let now = *rx.borrow_and_update();
            match verdict(born, now) {
                Verdict::Forward => break,
                Verdict::Delay(d) => {
                    tokio::time::sleep(d).await;
                    break;
                }
                Verdict::Cut => return,
                Verdict::Hold {
                    until_closed: false,
                } => {
                    if rx.changed().await.is_err() {
                        return;
                    }
                }
                // Wait for a change, but notice the sender closing meanwhile.
                Verdict::Hold { until_closed: true } => {
                    tokio::select! {
                        changed = rx.changed() => if changed.is_err() { return },
                        closed = peer_closed(&mut from) => if closed { return },
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
async fn peer_closed(from: &mut OwnedReadHalf) -> bool {
    let mut b = [0u8; 1];
    loop {
        match from.peek(&mut b).await {
            Ok(0) | Err(_) => return true,
            // Data waiting: not closed; look again later so this does not spin.
            Ok(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::is_commit;

    fn pg(kind: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![kind];
        m.extend_from_slice(&u32::try_from(body.len() + 4).expect("small").to_be_bytes());
        m.extend_from_slice(body);
        m
    }

    fn my(seq: u8, payload: &[u8]) -> Vec<u8> {
        let len = payload.len();
        let mut m = vec![len as u8, (len >> 8) as u8, (len >> 16) as u8, seq];
        m.extend_from_slice(payload);
        m
    }

    #[test]
    fn commits_are_found_alone_and_behind_other_messages() {
        assert!(is_commit(&pg(b'Q', b"COMMIT\0")));
        let mut two = pg(b'C', b"Sstmt1\0");
        two.extend(pg(b'S', b""));
        two.extend(pg(b'Q', b"COMMIT\0"));
        assert!(is_commit(&two));
        assert!(is_commit(&my(0, b"\x03COMMIT")));
        assert!(is_commit(&my(0, b"\x03commit")));
    }

    #[test]
    fn other_statements_and_torn_chunks_are_not_commits() {
        assert!(!is_commit(&pg(b'Q', b"SELECT 1\0")));
        assert!(!is_commit(&pg(b'Q', b"COMMIT AND CHAIN\0")));
        assert!(!is_commit(&my(0, b"\x03ROLLBACK")));
        let whole = pg(b'Q', b"COMMIT\0");
        assert!(!is_commit(&whole[..whole.len() - 2]), "a torn message");
        assert!(!is_commit(b""));
        assert!(!is_commit(&pg(b'Q', b"SELECT 'COMMIT'\0")));
    }
}
