//! The daemon's side of `shm://`: binding an endpoint (its socket file), the acceptor that hands
//! each client its rings and notices a hang-up, and the clients as the shm thread reads them.

use super::parse_endpoint;
use super::ring::*;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

// ------------------------------------------------------------------------------------------
// The daemon's side

/// The daemon's doorbell: one futex word every client of an endpoint may ring.
struct Doorbell {
    fd: OwnedFd,
    map: Arc<Mapping>,
}

impl Doorbell {
    fn new() -> io::Result<Doorbell> {
        let fd = sealed_memfd("offload-shm-doorbell", CONTROL)?;
        let map = Arc::new(Mapping::new(&fd, CONTROL)?);
        map.u64_at(C_MAGIC).store(MAGIC, Ordering::Relaxed);
        Ok(Doorbell { fd, map })
    }
}

/// One connected client, as the daemon holds it: its request ring (read by the shm thread
/// only), its reply ring (written by whichever thread answers, under the lock).
pub(crate) struct Peer {
    map: Arc<Mapping>,
    requests: Ring,
    replies: Mutex<Ring>,
    alive: AtomicBool,
}

impl Peer {
    /// Writes one reply frame into the client's reply ring and wakes it if it sleeps. `false`
    /// when it could not go: the client is gone, or its reply ring is full (it reads none).
    pub(crate) fn reply(&self, frame: &[u8]) -> bool {
        if !self.alive.load(Ordering::Relaxed) || frame.len() > MAX_FRAME {
            return false;
        }
        let sent = self.replies.lock().unwrap_or_else(|p| p.into_inner()).push(frame);
        if sent {
            wake_if_sleeping(self.map.u32_at(C_CLIENT_SLEEPING), self.map.u32_at(C_CLIENT_SEQ));
        }
        sent
    }

    pub(crate) fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Relaxed)
    }

    /// Ends the connection from the daemon's side: the client's next wait says so.
    pub(crate) fn close(&self) {
        self.alive.store(false, Ordering::Relaxed);
        self.map.u32_at(C_CLOSED).store(1, Ordering::SeqCst);
        let seq = self.map.u32_at(C_CLIENT_SEQ);
        seq.fetch_add(1, Ordering::SeqCst);
        futex_wake(seq);
    }
}

/// A request frame read in place in a client's request ring: valid while the ring space is
/// not released (the shm thread releases it only after the request was answered) and while the
/// mapping lives (the `Arc`).
pub(crate) struct InPlace {
    _map: Arc<Mapping>,
    ptr: *const u8,
    len: usize,
}

// SAFETY: the bytes belong to the mapping this value keeps alive; they are only read, and the
// client does not write them until the daemon releases the record, which the shm thread does
// only after every `InPlace` of it has been consumed.
unsafe impl Send for InPlace {}
// SAFETY: as above (read only).
unsafe impl Sync for InPlace {}

impl std::ops::Deref for InPlace {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: see the type's invariant: ptr/len lie inside the live mapping.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// What the shm thread reads from its clients.
pub(crate) enum Incoming {
    /// A request frame, in place; `peer` answers it.
    Frame(Arc<Peer>, InPlace),
}

/// The daemon's end of one `shm://` endpoint: the listening socket (its file removed on drop,
/// if still this daemon's), the doorbell, and the clients the acceptor has handed over.
pub(crate) struct Hub {
    pub(crate) endpoint: String,
    doorbell: Doorbell,
    fresh: Mutex<Vec<Arc<Peer>>>,
    changed: AtomicBool,
}

/// The shm thread's view of its clients: each with how far it has read its request ring.
pub(crate) struct Clients {
    hubs: Vec<Arc<Hub>>,
    peers: Vec<(Arc<Peer>, u64)>,
    /// The spin after empty rounds, before parking.
    spin: Spin,
    /// The largest request frame taken (`max_request_bytes`): a client sending a larger one is
    /// disconnected, as ZeroMQ closes the connection of a sender over `ZMQ_MAXMSGSIZE`.
    max_request_bytes: usize,
}

impl Clients {
    pub(crate) fn new(hubs: Vec<Arc<Hub>>, max_request_bytes: u64) -> Clients {
        let max_request_bytes = usize::try_from(max_request_bytes).unwrap_or(usize::MAX);
        Clients { hubs, peers: Vec::new(), spin: Spin::default(), max_request_bytes }
    }

    /// Takes clients the acceptors connected; drops those that hung up (their rings and
    /// whatever was queued for them go with the last reference).
    pub(crate) fn refresh(&mut self) {
        for hub in &self.hubs {
            if hub.changed.load(Ordering::Relaxed) && hub.changed.swap(false, Ordering::Acquire) {
                let fresh = std::mem::take(&mut *hub.fresh.lock().unwrap_or_else(|p| p.into_inner()));
                self.peers.extend(fresh.into_iter().map(|p| {
                    let tail = p.requests.tail();
                    (p, tail)
                }));
            }
        }
        self.peers.retain(|(p, _)| p.is_alive());
    }

    /// Reads what the clients have sent, up to `max` frames, in place (none is released yet:
    /// see [`Clients::release`]). Returns how many were read; a client that broke the format
    /// is disconnected.
    pub(crate) fn read(&mut self, max: usize, mut take: impl FnMut(Incoming)) -> usize {
        let mut n = 0;
        for (peer, at) in &mut self.peers {
            while n < max {
                match peer.requests.peek(*at) {
                    Peeked::Empty => break,
                    Peeked::Corrupt => {
                        eprintln!("shm: a client broke the ring format; disconnecting it");
                        peer.close();
                        break;
                    }
                    Peeked::Frame { len, .. } if len > self.max_request_bytes => {
                        eprintln!("shm: a client sent a frame over max_request_bytes; disconnecting it");
                        peer.close();
                        break;
                    }
                    Peeked::Frame { off, len, next } => {
                        // SAFETY: just peeked, not released until `release` (after every
                        // InPlace of this round is consumed).
                        let ptr = unsafe { peer.requests.frame(off, len) }.as_ptr();
                        take(Incoming::Frame(peer.clone(), InPlace { _map: peer.map.clone(), ptr, len }));
                        *at = next;
                        n += 1;
                    }
                }
            }
        }
        if n > 0 {
            self.spin.reset();
        }
        n
    }

    /// Gives the ring space of every frame read so far back to its client (after answering or
    /// copying them).
    pub(crate) fn release(&self) {
        for (peer, at) in &self.peers {
            if peer.requests.tail() != *at {
                peer.requests.release(*at);
            }
        }
    }

    /// After empty rounds: spins a little, then parks on the doorbells until a client rings,
    /// a client connects or leaves, or `PARK_MAX` passes.
    pub(crate) fn idle_wait(&mut self) {
        if self.spin.again() {
            return;
        }
        self.spin.reset();
        let Some(hub) = self.hubs.first() else {
            std::thread::sleep(PARK_MAX);
            return;
        };
        // All the endpoints' clients ring the first hub's doorbell (see `accept`).
        let ready = || {
            self.hubs.iter().any(|h| h.changed.load(Ordering::Relaxed))
                || self.peers.iter().any(|(p, at)| p.requests.peek(*at) != Peeked::Empty)
        };
        let m = &hub.doorbell.map;
        park(m.u32_at(D_SLEEPING), m.u32_at(D_SEQ), PARK_MAX, ready);
    }

    /// At stop: tells every client the connection is over.
    pub(crate) fn close_all(&mut self) {
        for (p, _) in self.peers.drain(..) {
            p.close();
        }
    }
}

/// A bound `shm://` endpoint: its hub and the acceptor thread.
pub(crate) struct Bound {
    pub(crate) hub: Arc<Hub>,
    listener: UnixListener,
    _file: SocketFile,
}

/// Binds `endpoint`: claims its socket file (a stale one of a dead daemon is removed, a live one
/// refused), listens, sets the file's mode. `doorbell_of`: the hub whose doorbell this
/// endpoint's clients ring (the first endpoint's: the shm thread parks on one word).
pub(crate) fn bind(endpoint: &str, doorbell_of: Option<&Arc<Hub>>) -> Result<Bound, String> {
    let ep = parse_endpoint(endpoint)?;
    claim(endpoint, &ep.path)?;
    let listener = UnixListener::bind(&ep.path).map_err(|e| format!("bind {endpoint}: {e}"))?;
    let file = SocketFile::bound(&ep.path);
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&ep.path, std::fs::Permissions::from_mode(ep.mode))
        .map_err(|e| format!("{endpoint}: setting the socket file's mode: {e}"))?;
    listener.set_nonblocking(true).map_err(|e| format!("{endpoint}: {e}"))?;
    let doorbell = match doorbell_of {
        Some(h) => Doorbell { fd: h.doorbell.fd.try_clone().map_err(|e| e.to_string())?, map: h.doorbell.map.clone() },
        None => Doorbell::new().map_err(|e| format!("{endpoint}: doorbell memfd: {e}"))?,
    };
    let hub = Arc::new(Hub {
        endpoint: endpoint.to_string(),
        doorbell,
        fresh: Mutex::new(Vec::new()),
        changed: AtomicBool::new(false),
    });
    Ok(Bound { hub, listener, _file: file })
}

/// As `server::claim_ipc`: refuse a socket file another process accepts on, remove one nobody
/// listens on (left by a killed daemon), never touch a path that is not a socket.
fn claim(endpoint: &str, path: &Path) -> Result<(), String> {
    use std::os::unix::fs::FileTypeExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else { return Ok(()) };
    if !meta.file_type().is_socket() {
        return Err(format!("{endpoint}: {} exists and is not a socket; not touching it", path.display()));
    }
    match UnixStream::connect(path) {
        Ok(_) => Err(format!("{endpoint} is in use by another process")),
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
            std::fs::remove_file(path).map_err(|e| format!("{endpoint}: removing the stale socket file: {e}"))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("{endpoint}: cannot tell whether another process uses it: {e}")),
    }
}

/// Removes the socket file on drop if it is still the one bound (same inode).
struct SocketFile(Option<(PathBuf, u64, u64)>);

impl SocketFile {
    fn bound(path: &Path) -> SocketFile {
        use std::os::unix::fs::MetadataExt;
        SocketFile(std::fs::symlink_metadata(path).ok().map(|m| (path.to_path_buf(), m.dev(), m.ino())))
    }
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        use std::os::unix::fs::MetadataExt;
        if let Some((p, dev, ino)) = &self.0 {
            if std::fs::symlink_metadata(p).is_ok_and(|m| m.dev() == *dev && m.ino() == *ino) {
                let _ = std::fs::remove_file(p);
            }
        }
    }
}

/// The acceptor: accepts clients on every bound endpoint and hands each its rings; watches the
/// connections and marks a client gone when its socket hangs up. Runs until `done`, then
/// removes the socket files. Costs nothing per message (it sleeps in poll).
pub(crate) fn acceptor(bound: Vec<Bound>, done: &AtomicBool) {
    let mut conns: Vec<(UnixStream, Arc<Peer>, Arc<Hub>)> = Vec::new();
    while !done.load(Ordering::Relaxed) {
        let mut fds: Vec<libc::pollfd> = bound
            .iter()
            .map(|b| b.listener.as_raw_fd())
            .chain(conns.iter().map(|c| c.0.as_raw_fd()))
            .map(|fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 })
            .collect();
        // SAFETY: `fds` is a valid array of pollfd of the given length, alive for the call.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 20) };
        if n <= 0 {
            continue;
        }
        for (b, fd) in bound.iter().zip(&fds) {
            if fd.revents != 0 {
                while let Ok((stream, _)) = b.listener.accept() {
                    match accept(&b.hub, stream) {
                        Ok((s, p)) => conns.push((s, p, b.hub.clone())),
                        Err(e) => eprintln!("{}: a client could not be connected: {e}", b.hub.endpoint),
                    }
                }
            }
        }
        let hung_up: Vec<bool> = fds[bound.len()..].iter().map(|f| f.revents != 0).collect();
        let mut i = 0;
        conns.retain(|(stream, peer, hub)| {
            let keep = !hung_up.get(i).copied().unwrap_or(false) || still_connected(stream);
            i += 1;
            if !keep {
                peer.alive.store(false, Ordering::Relaxed);
                hub.changed.store(true, Ordering::Release);
                ring_doorbell(&hub.doorbell.map);
            }
            keep && peer.is_alive()
        });
    }
    for (_, peer, _) in conns {
        peer.close();
    }
    drop(bound); // listeners close, then their socket files go
}

/// The connected process's id (SO_PEERCRED).
fn peer_pid(stream: &UnixStream) -> Option<i32> {
    let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `cred`, a ucred on this stack.
    let r = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            &mut cred as *mut libc::ucred as *mut libc::c_void,
            &mut len,
        )
    };
    (r == 0).then_some(cred.pid)
}

/// Connects one client: makes its rings' memfd, sends it with the doorbell, hands the peer to
/// the shm thread.
fn accept(hub: &Arc<Hub>, stream: UnixStream) -> io::Result<(UnixStream, Arc<Peer>)> {
    stream.set_nonblocking(false)?;
    stream.set_write_timeout(Some(Duration::from_secs(1)))?;
    let len = CONTROL + 2 * RING_BYTES;
    // Named by the client's process id, so /proc/PID/maps and `ls -l /proc/PID/fd` say whose.
    let name = format!("offload-shm-client-{}", peer_pid(&stream).unwrap_or(0));
    let fd = sealed_memfd(&name, len)?;
    let map = Arc::new(Mapping::new(&fd, len)?);
    map.u64_at(C_CAPACITY).store(RING_BYTES as u64, Ordering::Relaxed);
    map.u64_at(C_MAGIC).store(MAGIC, Ordering::Release);
    let mut hello = [0u8; HELLO_LEN];
    hello[..8].copy_from_slice(&MAGIC.to_le_bytes());
    hello[8..].copy_from_slice(&(RING_BYTES as u64).to_le_bytes());
    send_fds(&stream, &hello, &[fd.as_raw_fd(), hub.doorbell.fd.as_raw_fd()])?;
    let peer = Arc::new(Peer {
        requests: Ring::requests(&map),
        replies: Mutex::new(Ring::replies(&map)),
        map,
        alive: AtomicBool::new(true),
    });
    hub.fresh.lock().unwrap_or_else(|p| p.into_inner()).push(peer.clone());
    hub.changed.store(true, Ordering::Release);
    ring_doorbell(&hub.doorbell.map);
    Ok((stream, peer))
}
