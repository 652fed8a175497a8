//! Inter-thread/process channels on one machine, as ping-pong round trips of n bytes each way
//! (bytes counted: n per operation): shared memory (spin on a sequence number, payload in shared
//! cache lines), a pipe pair, a unix socket pair and TCP loopback. The peer thread runs on a
//! different CPU from the measuring one ([`crate::measure::cpu_pair`]), so every figure is a
//! cross-core figure (on a VM, cross-core wake-ups of blocking channels cost more than
//! same-core ones).

use crate::measure::{cpu_pair, pin_current_thread, sizes, time_op, Budget, Channel};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Echo side of a byte-stream channel: reads n bytes, writes them back, until EOF.
fn echo(mut r: impl Read, mut w: impl Write, n_max: usize, cpu: Option<usize>) {
    pin_current_thread(cpu);
    let mut buf = vec![0u8; n_max];
    let mut len = [0u8; 8];
    while r.read_exact(&mut len).is_ok() {
        let n = u64::from_le_bytes(len) as usize;
        if r.read_exact(&mut buf[..n]).is_err() || w.write_all(&buf[..n]).is_err() || w.flush().is_err() {
            return;
        }
    }
}

fn stream_channel(
    name: &str,
    budget: Budget,
    lo: u64,
    hi: u64,
    mut r: impl Read,
    mut w: impl Write,
) -> Result<Channel, String> {
    let payload = vec![5u8; hi as usize];
    let mut back = vec![0u8; hi as usize];
    let mut err = None;
    let mut points = Vec::new();
    for n in sizes(lo, hi) {
        let n = n as usize;
        points.push(time_op(n as u64, budget, || {
            let r = w
                .write_all(&(n as u64).to_le_bytes())
                .and_then(|_| w.write_all(&payload[..n]))
                .and_then(|_| w.flush())
                .and_then(|_| r.read_exact(&mut back[..n]));
            if let Err(e) = r {
                err.get_or_insert(e.to_string());
            }
        }));
        if let Some(e) = &err {
            return Err(format!("{name}: {e}"));
        }
    }
    Ok(Channel::new(name, "send n bytes (plus an 8-byte length) and receive them back", points))
}

/// Where the echo side of a kernel channel runs: on the other CPU (the default, cross-core), or
/// on the measuring side's CPU (`-1cpu` channels): on a VM a cross-core wake-up costs tens of
/// µs and hides each channel's own cost, which one core shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    CrossCore,
    OneCore,
}

impl Placement {
    fn peer_cpu(self) -> Option<usize> {
        cpu_pair().map(|p| if self == Placement::OneCore { p.0 } else { p.1 })
    }

    fn name(self, base: &str) -> String {
        match self {
            Placement::CrossCore => base.to_string(),
            Placement::OneCore => format!("{base}-1cpu"),
        }
    }
}

pub fn pipe(budget: Budget, lo: u64, hi: u64, at: Placement) -> Result<Channel, String> {
    let (r1, w1) = std::io::pipe().map_err(|e| format!("pipe: {e}"))?;
    let (r2, w2) = std::io::pipe().map_err(|e| format!("pipe: {e}"))?;
    let cpu = at.peer_cpu();
    let t = std::thread::spawn(move || echo(r1, w2, hi as usize, cpu));
    let out = stream_channel(&at.name("ipc/pipe"), budget, lo, hi, r2, w1);
    let _ = t.join();
    out
}

pub fn unix_socket(budget: Budget, lo: u64, hi: u64, at: Placement) -> Result<Channel, String> {
    let (a, b) = UnixStream::pair().map_err(|e| format!("socketpair: {e}"))?;
    let b2 = b.try_clone().map_err(|e| e.to_string())?;
    let cpu = at.peer_cpu();
    let t = std::thread::spawn(move || echo(b, b2, hi as usize, cpu));
    let a2 = a.try_clone().map_err(|e| e.to_string())?;
    let out = stream_channel(&at.name("ipc/unix-socket"), budget, lo, hi, a, a2);
    let _ = t.join();
    out
}

pub fn tcp_loopback(budget: Budget, lo: u64, hi: u64, at: Placement) -> Result<Channel, String> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
    let addr = l.local_addr().map_err(|e| e.to_string())?;
    let cpu = at.peer_cpu();
    let t = std::thread::spawn(move || {
        if let Ok((s, _)) = l.accept() {
            let _ = s.set_nodelay(true);
            if let Ok(s2) = s.try_clone() {
                echo(s, s2, hi as usize, cpu);
            }
        }
    });
    let a = TcpStream::connect(addr).map_err(|e| format!("connect {addr}: {e}"))?;
    a.set_nodelay(true).map_err(|e| e.to_string())?;
    let a2 = a.try_clone().map_err(|e| e.to_string())?;
    let out = stream_channel(&at.name("ipc/tcp-loopback"), budget, lo, hi, a, a2);
    let _ = t.join();
    out
}

/// The shared region: a request and a reply sequence number and a payload of 64-bit words.
struct Shm {
    ping: AtomicU64,
    pong: AtomicU64,
    stop: AtomicBool,
    words: Vec<AtomicU64>,
}

/// Spins until `cell` holds `want` (yielding now and then, so a descheduled peer can run on a
/// busy machine instead of being starved by the spinner).
fn wait_for(cell: &AtomicU64, want: u64, stop: &AtomicBool) -> bool {
    let mut spins = 0u32;
    while cell.load(Ordering::Acquire) != want {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        spins += 1;
        if spins.is_multiple_of(1024) {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
    true
}

/// Shared memory between two threads: the sender writes n bytes into the shared words and
/// publishes a sequence number (release); the peer sees it (acquire), reads the words, writes
/// its own n bytes back and publishes the reply. No system call on the path.
pub fn shared_memory(budget: Budget, lo: u64, hi: u64) -> Channel {
    let n_words = (hi as usize).div_ceil(8);
    let shm = Arc::new(Shm {
        ping: AtomicU64::new(0),
        pong: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        words: (0..n_words).map(|_| AtomicU64::new(0)).collect(),
    });
    let len = Arc::new(AtomicU64::new(0));
    let (peer, peer_len) = (shm.clone(), len.clone());
    let t = std::thread::spawn(move || {
        pin_current_thread(cpu_pair().map(|p| p.1));
        let mut seq = 1;
        while wait_for(&peer.ping, seq, &peer.stop) {
            let w = (peer_len.load(Ordering::Relaxed) as usize).div_ceil(8);
            let mut sum = 0u64;
            for x in &peer.words[..w] {
                sum = sum.wrapping_add(x.load(Ordering::Relaxed));
            }
            for x in &peer.words[..w] {
                x.store(sum, Ordering::Relaxed);
            }
            peer.pong.store(seq, Ordering::Release);
            seq += 1;
        }
    });
    let mut seq = 0u64;
    let mut points = Vec::new();
    for n in sizes(lo, hi) {
        let w = (n as usize).div_ceil(8);
        points.push(time_op(n, budget, || {
            seq += 1;
            len.store(n, Ordering::Relaxed);
            for (i, x) in shm.words[..w].iter().enumerate() {
                x.store(i as u64, Ordering::Relaxed);
            }
            shm.ping.store(seq, Ordering::Release);
            wait_for(&shm.pong, seq, &shm.stop);
            std::hint::black_box(shm.words[0].load(Ordering::Relaxed));
        }));
    }
    shm.stop.store(true, Ordering::Relaxed);
    let _ = t.join();
    Channel::new(
        "ipc/shared-memory",
        "write n bytes into shared memory, publish, wait for the peer's n bytes back",
        points,
    )
}
