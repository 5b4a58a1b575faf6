//! The SQLite doorbell: Unix datagram sockets in a directory next to the database file.
//!
//! Every process that uses a SQLite file is on the machine that has the file, so the kernel can
//! carry the ring: each service that waits binds one datagram socket in `<database file>-bell/`
//! (named by its process id and a random suffix), and a ring is one datagram — the key — sent
//! without blocking to every socket in that directory. A socket whose process died answers
//! `ECONNREFUSED` and its file is removed by the ringer; a full receive queue drops the datagram
//! (that waiter polls). Rings queued while a send is out go together, separated by NUL, in as
//! few datagrams as fit in `MAX_DATAGRAM` bytes.
//!
//! Why not an `flock` per key (the kernel drops it when the holder dies) or inotify on a bell
//! file: a blocked `flock` takes a thread per waited key and cannot be cancelled or bounded, and
//! a holder's death is no reason to retry (its row is valid until it lapses); inotify needs a bell
//! file that grows with every ring, or a file per key. A datagram socket is one descriptor per
//! service whatever the number of keys, is awaited like any socket, and leaves nothing behind but
//! one small file per live service.
//!
//! Grants are announced to observers the same way ([`Doorbell::held`]): a datagram of the key
//! prefixed with [`GRANTED`], which wakes only the observers ([`Doorbell::watch_changes`]; a
//! lock waiter woken by a grant would only be refused).
//!
//! Resources: 1 socket per service, bound on the first [`Doorbell::watch`]. If it fails it is
//! rebound with a bounded back-off (waiters poll meanwhile); every subscriber is woken once
//! whenever the socket is bound (rings sent before it were lost).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use leasehold_core::LeaseKey;
use tokio::net::UnixDatagram;
use tokio::sync::{Notify, mpsc};

use crate::SeaOrmStore;
use crate::doorbell::{BACKOFF_MIN, Doorbell, Subscribers, next_backoff, payload};

/// The longest path a Unix socket address holds (`sun_path` is 108 bytes with the NUL).
const MAX_SOCKET_PATH: usize = 107;
/// The largest datagram sent or read: the rings queued together, separated by NUL (which no
/// table name, namespace or name contains), up to this many bytes.
const MAX_DATAGRAM: usize = 60 * 1024;
/// Between two rings in one datagram.
const SEPARATOR: char = '\0';

/// The first byte of a grant's announcement (a ring's datagram is the bare payload, which
/// starts with a digit).
pub const GRANTED: char = '+';

/// See the module docs.
pub struct SqliteDoorbell {
    table: String,
    dir: PathBuf,
    subscribers: Subscribers,
    observers: Subscribers,
    /// Our socket's path once bound (removed at stop).
    bound: Arc<Mutex<Option<PathBuf>>>,
    /// Rings and grant announcements to send, and whether a sender is running.
    pending: Arc<crate::doorbell::Outbox>,
    listening: Mutex<bool>,
    stop: Arc<Notify>,
}

impl std::fmt::Debug for SqliteDoorbell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteDoorbell")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl SqliteDoorbell {
    /// The doorbell of a service on the SQLite file of `store`; `None` for an in-memory
    /// database, or when the bell directory's socket paths would be too long.
    #[must_use]
    pub fn new(store: &SeaOrmStore) -> Option<Self> {
        let file = super::database_file(store.connection())?;
        let mut dir = file.into_os_string();
        dir.push("-bell");
        let dir = PathBuf::from(dir);
        // `<dir>/<pid>-<16 hex>`: the longest name this doorbell binds.
        if dir.as_os_str().len() + 1 + 10 + 1 + 16 > MAX_SOCKET_PATH {
            tracing::debug!(
                dir = %dir.display(),
                "path too long for a Unix socket, SQLite waiters poll"
            );
            return None;
        }
        Some(Self {
            table: store.table().to_owned(),
            dir,
            subscribers: Subscribers::default(),
            observers: Subscribers::default(),
            bound: Arc::default(),
            pending: Arc::default(),
            listening: Mutex::new(false),
            stop: Arc::new(Notify::new()),
        })
    }

    /// The directory of the sockets.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Queues one ring (or announcement) for every service of the file. One blocking job at a
    /// time sends what is queued, packed into as few datagrams as fit, so a batch of releases
    /// rings in a few datagrams instead of one per key (and per socket's queue slot: Linux
    /// queues only `net.unix.max_dgram_qlen`, 10 by default, before it drops).
    fn queue(&self, ring: String) {
        if !self.pending.push(ring) {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            // No runtime (an actor stopped while its runtime is dropped): a missed ring.
            self.pending.abandon();
            return;
        };
        let (dir, pending) = (self.dir.clone(), Arc::clone(&self.pending));
        drop(rt.spawn_blocking(move || send_pending(&dir, &pending)));
    }

    fn listen(&self) {
        let mut listening = self
            .listening
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if *listening {
            return;
        }
        *listening = true;
        let dir = self.dir.clone();
        let subscribers = [self.subscribers.clone(), self.observers.clone()];
        let (bound, stop) = (Arc::clone(&self.bound), Arc::clone(&self.stop));
        crate::doorbell::spawn(async move {
            tokio::select! {
                () = stop.notified() => {}
                () = receive_forever(dir, &subscribers, Arc::clone(&bound)) => {}
            }
            unbind(&bound);
        });
    }
}

impl Doorbell for SqliteDoorbell {
    /// Announces the grant to the observers of every service of the file.
    fn changed(&self, key: &LeaseKey) {
        // The grant datagram (marked `GRANTED`) wakes observers only.
        self.held(key);
    }

    fn held(&self, key: &LeaseKey) {
        self.queue(format!("{GRANTED}{}", payload(&self.table, key)));
    }

    fn ring(&self, key: &LeaseKey) {
        self.queue(payload(&self.table, key));
    }

    fn ring_now(&self, key: &LeaseKey) -> futures::future::BoxFuture<'static, ()> {
        let (dir, ring) = (self.dir.clone(), payload(&self.table, key));
        crate::doorbell::spawn_blocking(move || send_to_all(&dir, ring.as_bytes()))
    }

    fn watch(&self, key: &LeaseKey) -> mpsc::Receiver<()> {
        let rx = self.subscribers.add(payload(&self.table, key));
        self.listen();
        rx
    }

    fn watch_changes(&self, key: &LeaseKey) -> mpsc::Receiver<()> {
        let rx = self.observers.add(payload(&self.table, key));
        self.listen();
        rx
    }

    fn stop(&self) {
        self.stop.notify_one();
        unbind(&self.bound);
    }
}

impl Drop for SqliteDoorbell {
    fn drop(&mut self) {
        unbind(&self.bound);
    }
}

fn unbind(bound: &Mutex<Option<PathBuf>>) {
    if let Some(path) = bound.lock().unwrap_or_else(PoisonError::into_inner).take() {
        let _ = std::fs::remove_file(path);
    }
}

/// Sends what `pending` holds until it is empty, packed into datagrams of at most
/// [`MAX_DATAGRAM`] bytes.
fn send_pending(dir: &Path, pending: &crate::doorbell::Outbox) {
    while let Some(rings) = pending.next_batch(usize::MAX) {
        let mut datagram = String::new();
        for ring in rings {
            if !datagram.is_empty() && datagram.len() + 1 + ring.len() > MAX_DATAGRAM {
                send_to_all(dir, datagram.as_bytes());
                datagram.clear();
            }
            if !datagram.is_empty() {
                datagram.push(SEPARATOR);
            }
            datagram.push_str(&ring);
        }
        send_to_all(dir, datagram.as_bytes());
    }
}

/// Sends `ring` to every socket in `dir` without blocking (a full queue is tried again for at
/// most [`FULL_RETRIES`] ms); removes the sockets of dead services.
fn send_to_all(dir: &Path, ring: &[u8]) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return; // nobody has waited yet
    };
    let socket = match std::os::unix::net::UnixDatagram::unbound() {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!(error = %e, "doorbell: no socket to ring with");
            return;
        }
    };
    if socket.set_nonblocking(true).is_err() {
        return;
    }
    for entry in entries.flatten() {
        let path = entry.path();
        for tries_left in (0..FULL_RETRIES).rev() {
            match socket.send_to(ring, &path) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                    // Nobody is bound there any more: a service that died without unbinding.
                    let _ = std::fs::remove_file(&path);
                }
                // A full queue: the receiver is reading (or stopped); a moment, a few times.
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && tries_left > 0 => {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                    continue;
                }
                Err(e) => {
                    tracing::trace!(path = %path.display(), error = %e, "doorbell: ring not sent")
                }
            }
            break;
        }
    }
}

/// How many times a ring to a full socket queue is sent, 1 ms apart, before it is dropped.
const FULL_RETRIES: u32 = 20;

/// Binds and receives, rebinding with a bounded back-off when the socket fails.
/// `subscribers` are the lock waiters' and the observers'.
async fn receive_forever(
    dir: PathBuf,
    subscribers: &[Subscribers; 2],
    bound: Arc<Mutex<Option<PathBuf>>>,
) {
    let [waiters, observers] = subscribers;
    let mut backoff = BACKOFF_MIN;
    loop {
        unbind(&bound);
        match bind(&dir, &bound) {
            Ok(socket) => {
                // Rings sent before the socket was bound were lost: everyone tries once.
                waiters.wake_all();
                observers.wake_all();
                backoff = BACKOFF_MIN;
                let mut buf = vec![0u8; MAX_DATAGRAM];
                loop {
                    // No bound needed: it waits for a ring, and the task ends at stop.
                    match socket.recv(&mut buf).await {
                        Ok(n) => {
                            let Ok(rings) = std::str::from_utf8(&buf[..n]) else {
                                continue;
                            };
                            for ring in rings.split(SEPARATOR) {
                                if let Some(granted) = ring.strip_prefix(GRANTED) {
                                    observers.wake(granted);
                                } else {
                                    waiters.wake(ring);
                                    observers.wake(ring);
                                }
                            }
                        }
                        Err(e) => {
                            tracing::debug!(error = %e, "doorbell socket failed (waiters poll meanwhile)");
                            break;
                        }
                    }
                }
            }
            Err(e) => {
                tracing::debug!(
                    dir = %dir.display(),
                    error = %e,
                    "doorbell: cannot bind (waiters poll meanwhile)"
                );
                backoff = next_backoff(backoff);
            }
        }
        tokio::time::sleep(backoff).await;
    }
}

fn bind(dir: &Path, bound: &Mutex<Option<PathBuf>>) -> std::io::Result<UnixDatagram> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join(format!("{}-{:016x}", std::process::id(), rand_suffix()));
    let socket = UnixDatagram::bind(&path)?;
    *bound.lock().unwrap_or_else(PoisonError::into_inner) = Some(path);
    Ok(socket)
}

/// A suffix that differs between services of one process and between runs.
fn rand_suffix() -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(std::process::id())
}
