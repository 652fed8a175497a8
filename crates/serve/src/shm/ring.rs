//! The shared memory itself: the channel's layout, the single-producer single-consumer ring,
//! the futex park and wake, sealed memfds and their mappings, descriptors passed over a Unix
//! socket. Both the daemon's side and the client's use these.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes of each ring (requests, replies) of one client; a frame takes at most half.
pub const RING_BYTES: usize = 8 << 20;
/// The largest frame a ring carries (a larger one: use ipc:// or tcp://).
pub const MAX_FRAME: usize = RING_BYTES / 2 - RECORD_HEADER;
/// How long a consumer looks again at an empty ring before it parks on its futex, ns: a wake-up
/// costs both sides a few µs of syscalls and scheduling, a spin costs its whole length, and on few
/// cores a long spin takes the CPU the producer needs. `OFFLOAD_SHM_SPIN_NS` overrides it (read
/// once; for measurements).
pub(super) const SPIN_NS: u64 = 2_000;

pub(super) fn spin_for() -> Duration {
    static SPIN: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *SPIN.get_or_init(|| {
        let ns = std::env::var("OFFLOAD_SHM_SPIN_NS").ok().and_then(|v| v.parse().ok()).unwrap_or(SPIN_NS);
        Duration::from_nanos(ns)
    })
}

/// A consumer's spin before it parks, timed (what one look costs varies; the clock is read
/// every 16 looks).
#[derive(Default)]
pub(super) struct Spin {
    since: Option<Instant>,
    looks: u32,
}

impl Spin {
    /// Starts over (something was found).
    pub(super) fn reset(&mut self) {
        self.since = None;
        self.looks = 0;
    }
    /// `true` while the spin lasts (after a pause instruction), `false` once it is time to park.
    pub(super) fn again(&mut self) -> bool {
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
pub(super) const PARK_MAX: Duration = Duration::from_millis(10);

pub(super) const MAGIC: u64 = u64::from_le_bytes(*b"OFLDSHM1");
pub(super) const CONTROL: usize = 4096;
pub(super) const RECORD_HEADER: usize = 8;
pub(super) const KIND_FRAME: u32 = 1;
pub(super) const KIND_PAD: u32 = 2;

// The channel memfd's control page (byte offsets; each hot word on its own cache line).
pub(super) const C_MAGIC: usize = 0;
pub(super) const C_CAPACITY: usize = 8;
pub(super) const C_REQ_HEAD: usize = 64; // written by the client
pub(super) const C_REQ_TAIL: usize = 128; // written by the daemon
pub(super) const C_REP_HEAD: usize = 192; // written by the daemon
pub(super) const C_REP_TAIL: usize = 256; // written by the client
pub(super) const C_CLIENT_SLEEPING: usize = 320; // u32: the client is (about to be) parked on C_CLIENT_SEQ
pub(super) const C_CLIENT_SEQ: usize = 324; // u32 futex word: bumped by the daemon to wake the client
pub(super) const C_CLOSED: usize = 384; // u32: the daemon closed this connection (stopped, or refused it)

// The doorbell memfd (one per endpoint, every client maps it).
pub(super) const D_SLEEPING: usize = 64; // u32: the shm thread is (about to be) parked on D_SEQ
pub(super) const D_SEQ: usize = 68; // u32 futex word: bumped by a client to wake the shm thread

// ------------------------------------------------------------------------------------------
// Futex, memfd, mapping

pub(super) fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
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

pub(super) fn futex_wake(word: &AtomicU32) {
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
pub(super) fn sealed_memfd(name: &str, len: usize) -> io::Result<OwnedFd> {
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
pub(super) struct Mapping {
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
    pub(super) fn new(fd: &OwnedFd, min_len: usize) -> io::Result<Mapping> {
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

    pub(super) fn u64_at(&self, off: usize) -> &AtomicU64 {
        assert!(off.is_multiple_of(8) && off + 8 <= CONTROL.min(self.len));
        // SAFETY: `off` is 8-aligned and inside the control page of a page-aligned mapping
        // that lives as long as `self`; both processes touch control words only atomically.
        unsafe { &*(self.base.add(off) as *const AtomicU64) }
    }

    pub(super) fn u32_at(&self, off: usize) -> &AtomicU32 {
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
pub(super) struct Ring {
    map: Arc<Mapping>,
    head: usize,
    tail: usize,
    data: usize,
    cap: u64,
}

/// What the consumer found at a position.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Peeked {
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

pub(super) fn padded(len: usize) -> u64 {
    (RECORD_HEADER + len.div_ceil(8) * 8) as u64
}

impl Ring {
    pub(super) fn requests(map: &Arc<Mapping>) -> Ring {
        Ring { map: map.clone(), head: C_REQ_HEAD, tail: C_REQ_TAIL, data: CONTROL, cap: RING_BYTES as u64 }
    }
    pub(super) fn replies(map: &Arc<Mapping>) -> Ring {
        let data = CONTROL + RING_BYTES;
        Ring { map: map.clone(), head: C_REP_HEAD, tail: C_REP_TAIL, data, cap: RING_BYTES as u64 }
    }

    pub(super) fn record_header(&self, pos: u64) -> (*mut u8, usize) {
        let off = self.data + (pos % self.cap) as usize;
        // SAFETY (of the pointer arithmetic): `off` < data + cap ≤ the mapping's length.
        (unsafe { self.map.base.add(off) }, off)
    }

    /// Producer: appends `frame` (at most [`MAX_FRAME`] bytes), padding to the ring's start
    /// when it would not fit before the end. `false` when the ring has no room now.
    pub(super) fn push(&self, frame: &[u8]) -> bool {
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

    pub(super) fn write_header(&self, pos: u64, len: u32, kind: u32) {
        let (p, _) = self.record_header(pos);
        let word = (len as u64) | ((kind as u64) << 32);
        // SAFETY: a record header is 8-aligned (every record is a multiple of 8 long, from an
        // aligned start) and inside the ring; the producer owns it until it publishes the head.
        unsafe { (p as *mut u64).write_volatile(word.to_le()) };
    }

    /// Consumer: the record at `pos` (the tail, or the `next` of a record peeked before).
    pub(super) fn peek(&self, pos: u64) -> Peeked {
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

    pub(super) fn tail(&self) -> u64 {
        self.map.u64_at(self.tail).load(Ordering::Relaxed)
    }

    /// Consumer: gives the space before `pos` back to the producer.
    pub(super) fn release(&self, pos: u64) {
        self.map.u64_at(self.tail).store(pos, Ordering::Release);
    }

    /// The bytes of a peeked frame.
    ///
    /// SAFETY (for the caller): `off`/`len` come from [`Ring::peek`] on this ring, and the
    /// record is not yet released; the slice must not outlive the release.
    pub(super) unsafe fn frame(&self, off: usize, len: usize) -> &[u8] {
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
pub(super) fn wake_if_sleeping(sleeping: &AtomicU32, seq: &AtomicU32) {
    fence(Ordering::SeqCst);
    if sleeping.load(Ordering::Relaxed) != 0 && sleeping.swap(0, Ordering::SeqCst) != 0 {
        seq.fetch_add(1, Ordering::SeqCst);
        futex_wake(seq);
    }
}

/// Parks on (`sleeping`, `seq`) unless `ready()` says there is work, for at most `timeout`.
pub(super) fn park(sleeping: &AtomicU32, seq: &AtomicU32, timeout: Duration, ready: impl Fn() -> bool) {
    let s = seq.load(Ordering::SeqCst);
    sleeping.store(1, Ordering::SeqCst);
    fence(Ordering::SeqCst); // the flag's store before `ready`'s loads (the waker's mirror fence)
    if !ready() {
        futex_wait(seq, s, timeout);
    }
    sleeping.store(0, Ordering::Relaxed);
}

// ------------------------------------------------------------------------------------------
// Passing descriptors

pub(super) const HELLO_LEN: usize = 16;

pub(super) fn send_fds(stream: &UnixStream, bytes: &[u8], fds: &[RawFd]) -> io::Result<()> {
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
pub(super) fn recv_fds(stream: &UnixStream) -> io::Result<([u8; HELLO_LEN], Vec<OwnedFd>)> {
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

/// Whether a socket poll found readable still holds its connection (a client sends nothing on
/// it, so readable means end of file or an error).
pub(super) fn still_connected(stream: &UnixStream) -> bool {
    let mut b = [0u8; 64];
    // SAFETY: recv into a stack buffer of the given length, without waiting.
    let n = unsafe { libc::recv(stream.as_raw_fd(), b.as_mut_ptr() as *mut libc::c_void, b.len(), libc::MSG_DONTWAIT) };
    n > 0 || (n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::WouldBlock)
}

pub(super) fn ring_doorbell(map: &Mapping) {
    let seq = map.u32_at(D_SEQ);
    seq.fetch_add(1, Ordering::SeqCst);
    futex_wake(seq);
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
}
