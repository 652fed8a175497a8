//! Shared memory for co-located clients: the `shm://NAME` transport. It carries the protocol's
//! frames unchanged (requests, replies, dictionary requests), like a ZeroMQ endpoint, without a
//! socket per message.
//!
//! ```text
//! client ──connect──▶ Unix socket NAME (owner, mode: who may connect) ──▶ acceptor thread
//!                      ◀── memfd of its two rings + the daemon's doorbell (SCM_RIGHTS) ──┘
//! client ──request ring──▶ shm thread (the daemon's, all clients) ──▶ inline match / queues
//! client ◀──reply ring──── shm thread, workers, executors (whoever answers, under a lock)
//! ```
//! Each ring is single-producer single-consumer: records `[len u32][kind u32][frame, padded to
//! 8]`, head and tail as byte counts on their own cache lines. Fast path, as Aeron's IPC and the
//! LMAX Disruptor: no syscall per message. A consumer spins briefly, then parks on a futex after
//! raising its sleeping flag; a producer publishes its head, then wakes only a consumer whose flag
//! is up (one futex word per client for replies, one doorbell word for the daemon). The daemon
//! reads a request in place in the ring (inline mode), copies it once when it hands it to
//! another thread, and releases the ring space after. The client reads replies in place.
//!
//! The Unix socket stays open for the connection's life: its hang-up tells the daemon the client
//! died (its rings are then dropped with whatever was queued for it), and the socket file's
//! owner and mode decide who may connect (default 0600). The memfds are sealed against shrinking,
//! so a client cannot make the daemon fault; everything the daemon reads from a ring is checked
//! against the ring's bounds, and a client that breaks the format is disconnected.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Bytes of each ring (requests, replies) of one client; a frame takes at most half.
pub const RING_BYTES: usize = 8 << 20;
/// The largest frame a ring carries (a larger one: use ipc:// or tcp://).
pub const MAX_FRAME: usize = RING_BYTES / 2 - RECORD_HEADER;
/// How long a consumer looks again at an empty ring before it parks on its futex, ns: a wake-up
/// costs both sides a few µs of syscalls and scheduling, a spin costs its whole length, and on few
/// cores a long spin takes the CPU the producer needs. `OFFLOAD_SHM_SPIN_NS` overrides it (read
/// once; for measurements).
const SPIN_NS: u64 = 2_000;

fn spin_for() -> Duration {
    static SPIN: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *SPIN.get_or_init(|| {
        let ns = std::env::var("OFFLOAD_SHM_SPIN_NS").ok().and_then(|v| v.parse().ok()).unwrap_or(SPIN_NS);
        Duration::from_nanos(ns)
    })
}

/// A consumer's spin before it parks, timed (what one look costs varies; the clock is read
/// every 16 looks).
#[derive(Default)]
struct Spin {
    since: Option<Instant>,
    looks: u32,
}

impl Spin {
    /// Starts over (something was found).
    fn reset(&mut self) {
        self.since = None;
        self.looks = 0;
    }
    /// `true` while the spin lasts (after a pause instruction), `false` once it is time to park.
    fn again(&mut self) -> bool {
        self.looks = self.looks.wrapping_add(1);
        if self.looks % 16 == 1 {
            let now = Instant::now();
            if now.duration_since(*self.since.get_or_insert(now)) >= spin_for() {
                return false;
            }
        }
        std::hint::spin_loop();
        true
    }
}
/// The longest single futex wait: a parked side looks at its other duties (stop, new clients,
/// a hung-up peer) at least this often.
const PARK_MAX: Duration = Duration::from_millis(10);

const MAGIC: u64 = u64::from_le_bytes(*b"OFLDSHM1");
const CONTROL: usize = 4096;
const RECORD_HEADER: usize = 8;
const KIND_FRAME: u32 = 1;
const KIND_PAD: u32 = 2;

// The channel memfd's control page (byte offsets; each hot word on its own cache line).
const C_MAGIC: usize = 0;
const C_CAPACITY: usize = 8;
const C_REQ_HEAD: usize = 64; // written by the client
const C_REQ_TAIL: usize = 128; // written by the daemon
const C_REP_HEAD: usize = 192; // written by the daemon
const C_REP_TAIL: usize = 256; // written by the client
const C_CLIENT_SLEEPING: usize = 320; // u32: the client is (about to be) parked on C_CLIENT_SEQ
const C_CLIENT_SEQ: usize = 324; // u32 futex word: bumped by the daemon to wake the client
const C_CLOSED: usize = 384; // u32: the daemon closed this connection (stopped, or refused it)

// The doorbell memfd (one per endpoint, every client maps it).
const D_SLEEPING: usize = 64; // u32: the shm thread is (about to be) parked on D_SEQ
const D_SEQ: usize = 68; // u32 futex word: bumped by a client to wake the shm thread

// ------------------------------------------------------------------------------------------
// Endpoint syntax

/// A parsed `shm://` endpoint: where its socket file lies and the mode it gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub path: PathBuf,
    pub mode: u32,
}

/// The directory of `shm://NAME` socket files: `$OFFLOAD_SHM_DIR`, else /dev/shm, else the
/// temporary directory.
fn socket_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("OFFLOAD_SHM_DIR").filter(|d| !d.is_empty()) {
        return d.into();
    }
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.into()
    } else {
        std::env::temp_dir()
    }
}

/// Reads `shm://NAME[?mode=OCTAL]` (NAME of letters, digits, `.`, `_`, `-`: the socket file
/// `offload-NAME.sock` in [`socket_dir`]) or `shm:///ABSOLUTE/PATH[?mode=OCTAL]`. Mode: who
/// may connect, the socket file's permission bits (default 0600: the daemon's user only).
pub fn parse_endpoint(endpoint: &str) -> Result<Endpoint, String> {
    let bad = |why: &str| {
        format!("{endpoint:?} is not a shared-memory endpoint ({why}): give shm://NAME or shm:///PATH, optionally ?mode=0660")
    };
    let rest = endpoint.strip_prefix("shm://").ok_or_else(|| bad("no shm://"))?;
    let (name, query) = rest.split_once('?').unwrap_or((rest, ""));
    let mode = match query {
        "" => 0o600,
        q => {
            let m = q.strip_prefix("mode=").ok_or_else(|| bad("the only option is mode=OCTAL"))?;
            let m = u32::from_str_radix(m, 8).map_err(|_| bad("mode is octal, e.g. 0660"))?;
            if m & !0o777 != 0 || m & 0o600 != 0o600 {
                return Err(bad("mode is within 0777 and lets the owner read and write (0600 at least)"));
            }
            m
        }
    };
    let path = if name.starts_with('/') {
        PathBuf::from(name)
    } else {
        let ok = !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
        if !ok || name.starts_with('.') {
            return Err(bad("NAME is letters, digits, '.', '_' and '-'"));
        }
        socket_dir().join(format!("offload-{name}.sock"))
    };
    if path.as_os_str().len() > 100 {
        return Err(bad("the socket path is longer than a Unix socket allows (100 bytes)"));
    }
    Ok(Endpoint { path, mode })
}

// ------------------------------------------------------------------------------------------
// Futex, memfd, mapping

fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec { tv_sec: timeout.as_secs() as libc::time_t, tv_nsec: timeout.subsec_nanos() as _ };
    // SAFETY: FUTEX_WAIT reads the aligned 32-bit word `word` points to (alive for the call) and
    // `ts`, a valid timespec on this stack; it writes nothing. A shared futex: the word is in a
    // mapping shared between processes. Every outcome (woken, EAGAIN, EINTR, ETIMEDOUT) means
    // "look again", which every caller does.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

fn futex_wake(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE only uses the word's address as a key; it reads and writes no memory.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            std::ptr::null::<u32>(),
            0usize,
            0u32,
        );
    }
}

/// A memfd of `len` bytes, sealed against shrinking and growing (a peer that maps it can then
/// never make this process fault by truncating it).
fn sealed_memfd(name: &str, len: usize) -> io::Result<OwnedFd> {
    let cname = std::ffi::CString::new(name).map_err(|_| io::Error::other("memfd name"))?;
    // SAFETY: memfd_create reads the NUL-terminated name and returns a new descriptor or -1.
    let fd = unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by memfd_create and is owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let file = std::fs::File::from(fd);
    file.set_len(len as u64)?;
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
    // SAFETY: F_ADD_SEALS on a descriptor we own; no memory is passed.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(file.into())
}

/// A shared mapping of a whole memfd, unmapped on drop.
struct Mapping {
    base: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; the bytes are reached only through
// atomics (the control words) or through ring records whose ownership the ring protocol hands
// to one side at a time, so sharing and sending the handle between threads is race-free.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps all of `fd` (at least `min_len` bytes, else an error) shared, readable and writable.
    fn new(fd: &OwnedFd, min_len: usize) -> io::Result<Mapping> {
        let len = std::fs::File::from(fd.try_clone()?).metadata()?.len() as usize;
        if len < min_len {
            return Err(io::Error::other(format!("shared memory of {len} bytes, expected {min_len}")));
        }
        // SAFETY: a fresh shared mapping of a descriptor we hold; the kernel picks the address.
        // The file is sealed against shrinking (the daemon's memfds), so no access within `len`
        // can fault for as long as the mapping lives.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping { base: base as *mut u8, len })
    }

    fn u64_at(&self, off: usize) -> &AtomicU64 {
        assert!(off.is_multiple_of(8) && off + 8 <= CONTROL.min(self.len));
        // SAFETY: `off` is 8-aligned and inside the control page of a page-aligned mapping
        // that lives as long as `self`; both processes touch control words only atomically.
        unsafe { &*(self.base.add(off) as *const AtomicU64) }
    }

    fn u32_at(&self, off: usize) -> &AtomicU32 {
        assert!(off.is_multiple_of(4) && off + 4 <= CONTROL.min(self.len));
        // SAFETY: as in `u64_at`, for a 4-aligned 32-bit word.
        unsafe { &*(self.base.add(off) as *const AtomicU32) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` are exactly what mmap returned; nothing refers to the bytes any
        // more (every reference borrows `self` or holds an `Arc` to it).
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

// ------------------------------------------------------------------------------------------
// The ring

/// One direction of a channel: a single-producer single-consumer ring of records in a mapping.
struct Ring {
    map: Arc<Mapping>,
    head: usize,
    tail: usize,
    data: usize,
    cap: u64,
}

/// What the consumer found at a position.
#[derive(Debug, PartialEq, Eq)]
enum Peeked {
    Empty,
    /// A frame at byte `off` of the mapping, `len` bytes; the next record starts at `next`.
    Frame {
        off: usize,
        len: usize,
        next: u64,
    },
    /// The producer broke the format (a length or head out of bounds).
    Corrupt,
}

fn padded(len: usize) -> u64 {
    (RECORD_HEADER + len.div_ceil(8) * 8) as u64
}

impl Ring {
    fn requests(map: &Arc<Mapping>) -> Ring {
        Ring { map: map.clone(), head: C_REQ_HEAD, tail: C_REQ_TAIL, data: CONTROL, cap: RING_BYTES as u64 }
    }
    fn replies(map: &Arc<Mapping>) -> Ring {
        let data = CONTROL + RING_BYTES;
        Ring { map: map.clone(), head: C_REP_HEAD, tail: C_REP_TAIL, data, cap: RING_BYTES as u64 }
    }

    fn record_header(&self, pos: u64) -> (*mut u8, usize) {
        let off = self.data + (pos % self.cap) as usize;
        // SAFETY (of the pointer arithmetic): `off` < data + cap ≤ the mapping's length.
        (unsafe { self.map.base.add(off) }, off)
    }

    /// Producer: appends `frame` (at most [`MAX_FRAME`] bytes), padding to the ring's start
    /// when it would not fit before the end. `false` when the ring has no room now.
    fn push(&self, frame: &[u8]) -> bool {
        assert!(frame.len() <= MAX_FRAME);
        let head = self.map.u64_at(self.head).load(Ordering::Relaxed);
        let tail = self.map.u64_at(self.tail).load(Ordering::Acquire);
        let off = head % self.cap;
        let need = padded(frame.len());
        let pad = if off + need > self.cap { self.cap - off } else { 0 };
        if self.cap - head.wrapping_sub(tail).min(self.cap) < pad + need {
            return false;
        }
        if pad > 0 {
            self.write_header(head, 0, KIND_PAD);
        }
        let at = head + pad;
        self.write_header(at, frame.len() as u32, KIND_FRAME);
        let (p, _) = self.record_header(at);
        // SAFETY: the record's bytes [at+8, at+8+len) lie inside the ring (no wrap: `pad` moved
        // it to the start when it would not fit) and are free: the consumer's tail is at least
        // `head + pad + need - cap` behind, so it reads none of them until the head below
        // publishes them; this thread is the ring's only producer.
        unsafe { std::ptr::copy_nonoverlapping(frame.as_ptr(), p.add(RECORD_HEADER), frame.len()) };
        self.map.u64_at(self.head).store(at + need, Ordering::Release);
        true
    }

    fn write_header(&self, pos: u64, len: u32, kind: u32) {
        let (p, _) = self.record_header(pos);
        let word = (len as u64) | ((kind as u64) << 32);
        // SAFETY: a record header is 8-aligned (every record is a multiple of 8 long, from an
        // aligned start) and inside the ring; the producer owns it until it publishes the head.
        unsafe { (p as *mut u64).write_volatile(word.to_le()) };
    }

    /// Consumer: the record at `pos` (the tail, or the `next` of a record peeked before).
    fn peek(&self, pos: u64) -> Peeked {
        let head = self.map.u64_at(self.head).load(Ordering::Acquire);
        let mut pos = pos;
        for _ in 0..2 {
            let avail = head.wrapping_sub(pos);
            if avail == 0 {
                return Peeked::Empty;
            }
            if avail > self.cap || avail < RECORD_HEADER as u64 {
                return Peeked::Corrupt;
            }
            let (p, off) = self.record_header(pos);
            // SAFETY: an 8-aligned header inside the ring, published by the producer's head.
            let word = u64::from_le(unsafe { (p as *const u64).read_volatile() });
            let (len, kind) = ((word & 0xffff_ffff) as usize, (word >> 32) as u32);
            let room = self.cap - pos % self.cap;
            match kind {
                KIND_PAD if avail >= room => pos += room,
                KIND_FRAME if padded(len) <= avail.min(room) => {
                    return Peeked::Frame { off: off + RECORD_HEADER, len, next: pos + padded(len) };
                }
                _ => return Peeked::Corrupt,
            }
        }
        Peeked::Corrupt // two pads in a row
    }

    fn tail(&self) -> u64 {
        self.map.u64_at(self.tail).load(Ordering::Relaxed)
    }

    /// Consumer: gives the space before `pos` back to the producer.
    fn release(&self, pos: u64) {
        self.map.u64_at(self.tail).store(pos, Ordering::Release);
    }

    /// The bytes of a peeked frame.
    ///
    /// SAFETY (for the caller): `off`/`len` come from [`Ring::peek`] on this ring, and the
    /// record is not yet released; the slice must not outlive the release.
    unsafe fn frame(&self, off: usize, len: usize) -> &[u8] {
        // SAFETY: peek checked that [off, off+len) lies inside the ring within the mapping;
        // until the consumer releases it, the producer does not write there.
        unsafe { std::slice::from_raw_parts(self.map.base.add(off), len) }
    }
}

/// Wakes whoever is parked on (`sleeping`, `seq`) after a publish: the publish (a release
/// store of the head) is ordered before the flag's load, as the sleeper's flag store is before
/// its last look at the head, so one of the two sees the other.
/// The waker lowers the flag itself, so of several producers publishing while the consumer
/// sleeps only the first pays the syscall.
fn wake_if_sleeping(sleeping: &AtomicU32, seq: &AtomicU32) {
    fence(Ordering::SeqCst);
    if sleeping.load(Ordering::Relaxed) != 0 && sleeping.swap(0, Ordering::SeqCst) != 0 {
        seq.fetch_add(1, Ordering::SeqCst);
        futex_wake(seq);
    }
}

/// Parks on (`sleeping`, `seq`) unless `ready()` says there is work, for at most `timeout`.
fn park(sleeping: &AtomicU32, seq: &AtomicU32, timeout: Duration, ready: impl Fn() -> bool) {
    let s = seq.load(Ordering::SeqCst);
    sleeping.store(1, Ordering::SeqCst);
    if !ready() {
        futex_wait(seq, s, timeout);
    }
    sleeping.store(0, Ordering::Relaxed);
}

// ------------------------------------------------------------------------------------------
// Passing descriptors

const HELLO_LEN: usize = 16;

fn send_fds(stream: &UnixStream, bytes: &[u8], fds: &[RawFd]) -> io::Result<()> {
    let mut iov = libc::iovec { iov_base: bytes.as_ptr() as *mut libc::c_void, iov_len: bytes.len() };
    let payload = std::mem::size_of_val(fds);
    // SAFETY: CMSG_SPACE is arithmetic on its argument.
    let space = unsafe { libc::CMSG_SPACE(payload as u32) } as usize;
    let mut control = vec![0u64; space.div_ceil(8)]; // u64: aligned as cmsghdr needs
                                                     // SAFETY: an all-zero msghdr is a valid empty one; the fields are set below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
    msg.msg_controllen = space as _;
    // SAFETY: msg_control points at `space` zeroed, aligned bytes, enough for one header and
    // `payload` bytes of descriptors (CMSG_SPACE), so CMSG_FIRSTHDR is non-null and the header
    // and its data lie inside `control`, which outlives the sendmsg call; iov points at `bytes`.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(payload as u32) as _;
        std::ptr::copy_nonoverlapping(fds.as_ptr() as *const u8, libc::CMSG_DATA(c), payload);
        if libc::sendmsg(stream.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Receives the daemon's hello and the two descriptors sent with it.
fn recv_fds(stream: &UnixStream) -> io::Result<([u8; HELLO_LEN], Vec<OwnedFd>)> {
    let mut bytes = [0u8; HELLO_LEN];
    let mut iov = libc::iovec { iov_base: bytes.as_mut_ptr() as *mut libc::c_void, iov_len: HELLO_LEN };
    // SAFETY: arithmetic.
    let space = unsafe { libc::CMSG_SPACE(2 * std::mem::size_of::<RawFd>() as u32) } as usize;
    let mut control = vec![0u64; space.div_ceil(8)];
    // SAFETY: as in `send_fds`.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
    msg.msg_controllen = space as _;
    // SAFETY: recvmsg writes at most HELLO_LEN bytes into `bytes` and at most `space` into
    // `control`, both alive for the call.
    let n = unsafe { libc::recvmsg(stream.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n as usize != HELLO_LEN {
        return Err(io::Error::other("the daemon closed the connection without handing over its rings"));
    }
    let mut fds = Vec::new();
    // SAFETY: the kernel filled msg's control area; CMSG_FIRSTHDR/NXTHDR walk it within
    // msg_controllen; each SCM_RIGHTS descriptor it carries is new in this process and ours.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let n = ((*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize) / std::mem::size_of::<RawFd>();
                let data = libc::CMSG_DATA(c) as *const RawFd;
                for i in 0..n {
                    fds.push(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok((bytes, fds))
}

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

/// Whether a socket poll found readable still holds its connection (a client sends nothing on
/// it, so readable means end of file or an error).
fn still_connected(stream: &UnixStream) -> bool {
    let mut b = [0u8; 64];
    // SAFETY: recv into a stack buffer of the given length, without waiting.
    let n = unsafe { libc::recv(stream.as_raw_fd(), b.as_mut_ptr() as *mut libc::c_void, b.len(), libc::MSG_DONTWAIT) };
    n > 0 || (n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::WouldBlock)
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

fn ring_doorbell(map: &Mapping) {
    let seq = map.u32_at(D_SEQ);
    seq.fetch_add(1, Ordering::SeqCst);
    futex_wake(seq);
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

// ------------------------------------------------------------------------------------------
// The client's side

/// Why a shared-memory call failed.
#[derive(Debug)]
pub enum ShmError {
    /// Connecting failed (no daemon there, no permission, not an offload daemon).
    Connect(String),
    /// Nothing within the time given.
    Timeout,
    /// The daemon closed the connection (it stopped, or refused a broken frame).
    Closed,
    /// The frame is larger than a ring carries.
    TooLarge(usize),
}

impl std::fmt::Display for ShmError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ShmError::Connect(e) => write!(f, "{e}"),
            ShmError::Timeout => write!(f, "timed out"),
            ShmError::Closed => write!(f, "the daemon closed the shared-memory connection (it stopped?)"),
            ShmError::TooLarge(n) => write!(
                f,
                "a frame of {n} bytes is larger than the shared-memory ring carries ({MAX_FRAME}): use ipc:// or tcp://"
            ),
        }
    }
}

/// A client's connection to a `shm://` endpoint: it writes request frames into its request
/// ring and reads replies in place from its reply ring. One thread uses it at a time.
pub struct Connection {
    stream: UnixStream,
    map: Arc<Mapping>,
    doorbell: Arc<Mapping>,
    requests: Ring,
    replies: Ring,
}

impl Connection {
    /// Connects to `endpoint` (`shm://NAME`): the socket file's mode decides whether this
    /// process may; the daemon answers with the rings' memfd and its doorbell.
    pub fn connect(endpoint: &str, timeout: Duration) -> Result<Connection, ShmError> {
        let ep = parse_endpoint(endpoint).map_err(ShmError::Connect)?;
        let failed = |e: io::Error| ShmError::Connect(format!("connect {endpoint} ({}): {e}", ep.path.display()));
        let stream = UnixStream::connect(&ep.path).map_err(failed)?;
        stream.set_read_timeout(Some(timeout.max(Duration::from_millis(1)))).map_err(failed)?;
        let (hello, fds) = recv_fds(&stream).map_err(failed)?;
        let not_ours = || ShmError::Connect(format!("{endpoint}: the peer is no offload daemon of this version"));
        if hello[..8] != MAGIC.to_le_bytes() || hello[8..] != (RING_BYTES as u64).to_le_bytes() || fds.len() != 2 {
            return Err(not_ours());
        }
        let map = Arc::new(Mapping::new(&fds[0], CONTROL + 2 * RING_BYTES).map_err(failed)?);
        let doorbell = Arc::new(Mapping::new(&fds[1], CONTROL).map_err(failed)?);
        if map.u64_at(C_MAGIC).load(Ordering::Acquire) != MAGIC {
            return Err(not_ours());
        }
        Ok(Connection { stream, requests: Ring::requests(&map), replies: Ring::replies(&map), map, doorbell })
    }

    /// Whether the daemon closed this connection.
    pub fn closed(&self) -> bool {
        self.map.u32_at(C_CLOSED).load(Ordering::Acquire) != 0
    }

    /// Writes one frame into the request ring without waiting: `Ok(false)` when the ring has no
    /// room now (the daemon has not read what came before).
    pub fn try_send(&mut self, frame: &[u8]) -> Result<bool, ShmError> {
        if frame.len() > MAX_FRAME {
            return Err(ShmError::TooLarge(frame.len()));
        }
        if self.closed() {
            return Err(ShmError::Closed);
        }
        if !self.requests.push(frame) {
            return Ok(false);
        }
        wake_if_sleeping(self.doorbell.u32_at(D_SLEEPING), self.doorbell.u32_at(D_SEQ));
        Ok(true)
    }

    /// Writes one frame, waiting for room until `until`.
    pub fn send(&mut self, frame: &[u8], until: Instant) -> Result<(), ShmError> {
        let mut spin = Spin::default();
        while !self.try_send(frame)? {
            if Instant::now() >= until {
                return Err(ShmError::Timeout);
            }
            if !spin.again() {
                std::thread::sleep(Duration::from_micros(50)); // the daemon frees room as it reads
            }
        }
        Ok(())
    }

    /// Reads the next reply in place, if one is there: `read` sees its bytes, then the ring
    /// space is released.
    pub fn try_recv<T>(&mut self, read: impl FnOnce(&[u8]) -> T) -> Result<Option<T>, ShmError> {
        let tail = self.replies.tail();
        match self.replies.peek(tail) {
            Peeked::Empty if self.closed() => Err(ShmError::Closed),
            Peeked::Empty => Ok(None),
            Peeked::Corrupt => Err(ShmError::Closed),
            Peeked::Frame { off, len, next } => {
                // SAFETY: peeked and not released until after `read`, which cannot keep it.
                let t = read(unsafe { self.replies.frame(off, len) });
                self.replies.release(next);
                Ok(Some(t))
            }
        }
    }

    /// Whether a reply is waiting.
    pub fn has_reply(&self) -> bool {
        self.replies.peek(self.replies.tail()) != Peeked::Empty
    }

    /// Waits until a reply may be there or `until`: spins briefly, then parks on the futex the
    /// daemon bumps after writing a reply.
    pub fn wait(&mut self, until: Instant) -> Result<(), ShmError> {
        let mut spin = Spin::default();
        while spin.again() {
            if self.has_reply() {
                return Ok(());
            }
        }
        loop {
            if self.has_reply() {
                return Ok(());
            }
            if self.closed() || !still_connected(&self.stream) {
                return Err(ShmError::Closed);
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ShmError::Timeout);
            }
            let m = &self.map;
            park(m.u32_at(C_CLIENT_SLEEPING), m.u32_at(C_CLIENT_SEQ), left.min(PARK_MAX), || {
                self.has_reply() || self.closed()
            });
        }
    }

    /// Waits until `until` for the next reply and reads it in place.
    pub fn recv<T>(&mut self, until: Instant, read: impl FnOnce(&[u8]) -> T) -> Result<T, ShmError> {
        let mut read = Some(read);
        loop {
            if let Some(t) = self.try_recv(|b| (read.take().expect("called once"))(b))? {
                return Ok(t);
            }
            self.wait(until)?;
        }
    }
}

/// The load generator's connection to a `shm://` endpoint (`offload serve bench -e shm://…`).
/// `max_in_flight` needs no room of its own: the rings hold far more requests in flight than a
/// generator keeps (a full ring answers `send` with "try later").
pub fn loadgen_connection(
    endpoint: &str,
    max_in_flight: usize,
    connect_timeout: Duration,
) -> Result<Box<dyn crate::loadgen::Connection>, String> {
    let _ = max_in_flight;
    Ok(Box::new(Connection::connect(endpoint, connect_timeout).map_err(|e| e.to_string())?))
}

impl crate::loadgen::Connection for Connection {
    fn send(&mut self, frame: &[u8]) -> Result<bool, String> {
        self.try_send(frame).map_err(|e| e.to_string())
    }

    fn take_replies(&mut self, on_reply: &mut dyn FnMut(&[u8])) -> Result<usize, String> {
        let mut n = 0;
        while self.try_recv(&mut *on_reply).map_err(|e| e.to_string())?.is_some() {
            n += 1;
        }
        Ok(n)
    }

    fn readiness(&mut self) -> Result<crate::loadgen::Readiness, String> {
        Ok(if self.has_reply() { crate::loadgen::Readiness::Ready } else { crate::loadgen::Readiness::NoFd })
    }

    /// Parks on the reply futex until a reply or `until`, without spinning first: the
    /// generator's CPU per request is what it measures itself by.
    fn wait(&mut self, until: Instant) -> Result<(), String> {
        if self.closed() {
            return Err(ShmError::Closed.to_string());
        }
        let left = until.saturating_duration_since(Instant::now());
        if !left.is_zero() {
            let m = &self.map;
            park(m.u32_at(C_CLIENT_SLEEPING), m.u32_at(C_CLIENT_SEQ), left.min(PARK_MAX), || {
                self.has_reply() || self.closed()
            });
        }
        Ok(())
    }
}

/// The rings alone, for the transport comparison (`examples/shm_transports.rs`; not part of
/// the service): a closed loop of `request_bytes` frames echoed as `reply_bytes` frames between
/// two threads over one channel, for `secs`. `busy_poll`: both sides only spin (iceoryx2's
/// fastest mode, one core each); else each spins for [`spin_for`], then parks on its futex, as
/// the daemon and the client do. Returns the round-trip times, ns.
#[doc(hidden)]
pub fn ring_echo(secs: f64, request_bytes: usize, reply_bytes: usize, busy_poll: bool) -> io::Result<Vec<u64>> {
    let len = CONTROL + 2 * RING_BYTES;
    let fd = sealed_memfd("offload-shm-echo", len)?;
    let (map, bell_fd) = (Arc::new(Mapping::new(&fd, len)?), sealed_memfd("offload-shm-echo-bell", CONTROL)?);
    let bell = Arc::new(Mapping::new(&bell_fd, CONTROL)?);
    let done = Arc::new(AtomicBool::new(false));
    let (m, b, d) = (map.clone(), bell.clone(), done.clone());
    let server = std::thread::spawn(move || {
        let (requests, replies, reply) = (Ring::requests(&m), Ring::replies(&m), vec![3u8; reply_bytes]);
        let mut spin = Spin::default();
        while !d.load(Ordering::Relaxed) {
            let Peeked::Frame { next, .. } = requests.peek(requests.tail()) else {
                if !spin.again() && !busy_poll {
                    spin.reset();
                    park(b.u32_at(D_SLEEPING), b.u32_at(D_SEQ), PARK_MAX, || {
                        requests.peek(requests.tail()) != Peeked::Empty
                    });
                }
                continue;
            };
            spin.reset();
            requests.release(next);
            while !replies.push(&reply) {}
            wake_if_sleeping(m.u32_at(C_CLIENT_SLEEPING), m.u32_at(C_CLIENT_SEQ));
        }
    });
    let (requests, replies, frame) = (Ring::requests(&map), Ring::replies(&map), vec![7u8; request_bytes]);
    let (t0, mut times) = (Instant::now(), Vec::new());
    while t0.elapsed().as_secs_f64() < secs {
        let t = Instant::now();
        while !requests.push(&frame) {}
        wake_if_sleeping(bell.u32_at(D_SLEEPING), bell.u32_at(D_SEQ));
        let mut spin = Spin::default();
        loop {
            if let Peeked::Frame { len, next, .. } = replies.peek(replies.tail()) {
                assert_eq!(len, reply_bytes);
                replies.release(next);
                break;
            }
            if !spin.again() && !busy_poll {
                spin.reset();
                park(map.u32_at(C_CLIENT_SLEEPING), map.u32_at(C_CLIENT_SEQ), PARK_MAX, || {
                    replies.peek(replies.tail()) != Peeked::Empty
                });
            }
        }
        times.push(t.elapsed().as_nanos() as u64);
    }
    done.store(true, Ordering::Relaxed);
    ring_doorbell(&bell);
    let _ = server.join();
    Ok(times)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring_pair() -> (Ring, Ring) {
        let fd = sealed_memfd("test", CONTROL + 2 * RING_BYTES).unwrap();
        let map = Arc::new(Mapping::new(&fd, CONTROL + 2 * RING_BYTES).unwrap());
        (Ring::requests(&map), Ring::requests(&map))
    }

    #[test]
    fn frames_go_through_the_ring_in_order_across_its_end() {
        let (producer, consumer) = ring_pair();
        let mut pos = consumer.tail();
        for i in 0..5_000usize {
            let frame = vec![(i % 251) as u8; 1 + (i * 7919) % 20_000];
            while !producer.push(&frame) {
                consumer.release(pos);
            }
            match consumer.peek(pos) {
                Peeked::Frame { off, len, next } => {
                    assert_eq!(unsafe { consumer.frame(off, len) }, &frame[..]);
                    pos = next;
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(consumer.peek(pos), Peeked::Empty);
    }

    #[test]
    fn a_full_ring_refuses_and_a_broken_head_is_corrupt() {
        let (producer, consumer) = ring_pair();
        let big = vec![1u8; MAX_FRAME];
        assert!(producer.push(&big) && producer.push(&big), "two largest frames fill the ring");
        assert!(!producer.push(&[1]));
        consumer.release(consumer.tail() + padded(MAX_FRAME));
        assert!(producer.push(&big[..MAX_FRAME / 2]) && !producer.push(&big[..MAX_FRAME / 2]));
        producer.map.u64_at(C_REQ_HEAD).store(u64::MAX / 3, Ordering::Relaxed);
        assert_eq!(consumer.peek(consumer.tail()), Peeked::Corrupt);
    }

    #[test]
    fn endpoints_parse() {
        let e = parse_endpoint("shm:///tmp/x.sock?mode=0660").unwrap();
        assert_eq!((e.path, e.mode), (PathBuf::from("/tmp/x.sock"), 0o660));
        assert!(parse_endpoint("shm://a/b").is_err());
        assert!(parse_endpoint("shm://ok?mode=0400").is_err());
        assert!(parse_endpoint("shm://").is_err());
        assert!(parse_endpoint("shm://name").unwrap().path.ends_with("offload-name.sock"));
    }
}
