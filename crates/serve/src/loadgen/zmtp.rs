//! A DEALER that speaks ZMTP 3.0 itself (NULL security, rfc.zeromq.org/spec/23) on one
//! non-blocking socket, for the load generator: the frames `send` queues go out in one `write`
//! per [`Connection::flush`] (once per tick), and the replies come in with one `read` per
//! [`Connection::take_replies`]. libzmq's DEALER instead hands every message to its I/O thread
//! (a wake-up and an eventfd write per message, and another for each reply): at tens of
//! thousands of requests/s that thread cost the generator more than its own sending thread.
//! The daemon's ROUTER sees an ordinary DEALER peer. CURVE is not spoken here (with keys, the
//! generator takes the libzmq DEALER).
//!
//! ```text
//! greeting (64 B each way): FF 00×7 01 7F | 03 00 | "NULL" + 16×00 | as-server 00 | 31×00
//! READY command (each way): 04 len | 05 "READY" | 0B "Socket-Type" 00 00 00 06 "DEALER"
//! frames: flags (bit 0 MORE, bit 1 LONG, bit 2 COMMAND), size (1 byte, or 8 big-endian), body
//! ```

use super::{Connection, Readiness};
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

const MORE: u8 = 0x01;
const LONG: u8 = 0x02;
const COMMAND: u8 = 0x04;

/// Bytes queued and not yet written beyond which `send` says the connection is full.
const MAX_PENDING: usize = 16 << 20;
/// The least room kept free for one `read`.
const READ_CHUNK: usize = 256 << 10;

enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(b),
            Stream::Unix(s) => s.read(b),
        }
    }
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(b),
            Stream::Unix(s) => s.write(b),
        }
    }
    fn fd(&self) -> RawFd {
        match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
        }
    }
    fn set_nonblocking(&self, on: bool) -> std::io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_nonblocking(on),
            Stream::Unix(s) => s.set_nonblocking(on),
        }
    }
    fn set_read_timeout(&self, t: Duration) -> std::io::Result<()> {
        let t = Some(t.max(Duration::from_millis(1)));
        match self {
            Stream::Tcp(s) => s.set_read_timeout(t),
            Stream::Unix(s) => s.set_read_timeout(t),
        }
    }
}

/// A ZMTP 3.0 DEALER on a tcp:// or ipc:// endpoint.
pub struct ZmtpConnection {
    stream: Stream,
    /// Frames queued by `send`; `out[written..]` is still to be written.
    out: Vec<u8>,
    written: usize,
    /// Bytes read into `inp[..filled]`; `inp[parsed..filled]` is not yet parsed. Its length is
    /// its room (grown, never shrunk).
    inp: Vec<u8>,
    filled: usize,
    parsed: usize,
    /// The handshake's bytes.
    hello: Vec<u8>,
    /// The daemon closed the connection: nothing more is sent or read (what is owed is then
    /// counted unanswered at the end of the drain, as with a DEALER that waits to reconnect).
    closed: bool,
}

/// The 64-byte greeting of a NULL-security client.
fn greeting() -> [u8; 64] {
    let mut g = [0u8; 64];
    g[0] = 0xff;
    g[8] = 1; // the ZMTP 1.0 length of an empty identity, for old peers
    g[9] = 0x7f;
    g[10] = 3; // version 3.0
    g[12..16].copy_from_slice(b"NULL");
    g
}

/// The READY command of a DEALER.
fn ready() -> Vec<u8> {
    let mut body = vec![5];
    body.extend_from_slice(b"READY");
    body.push(11);
    body.extend_from_slice(b"Socket-Type");
    body.extend_from_slice(&6u32.to_be_bytes());
    body.extend_from_slice(b"DEALER");
    let mut f = vec![COMMAND, body.len() as u8];
    f.extend_from_slice(&body);
    f
}

/// One frame's flags, header length and body length at the start of `b`, if all of it is there.
fn frame_at(b: &[u8]) -> Option<(u8, usize, usize)> {
    let flags = *b.first()?;
    let (head, size): (usize, usize) = if flags & LONG != 0 {
        (9, u64::from_be_bytes(b.get(1..9)?.try_into().expect("8 bytes")) as usize)
    } else {
        (2, *b.get(1)? as usize)
    };
    (b.len() >= head.checked_add(size)?).then_some((flags, head, size))
}

impl ZmtpConnection {
    /// Connects to `endpoint` (tcp://HOST:PORT or ipc://PATH) and does the ZMTP handshake
    /// within `timeout`; nothing listening there is retried every 20 ms until then (as libzmq
    /// reconnects), then `silent` is the error.
    pub fn connect(endpoint: &str, timeout: Duration, silent: &dyn Fn() -> String) -> Result<ZmtpConnection, String> {
        let until = Instant::now() + timeout;
        let stream = loop {
            match Self::open(endpoint, until) {
                Ok(s) => break s,
                Err(e)
                    if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::ConnectionRefused | ErrorKind::TimedOut) =>
                {
                    if Instant::now() + Duration::from_millis(20) >= until {
                        return Err(silent());
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => return Err(format!("connect {endpoint}: {e}")),
            }
        };
        let mut c = ZmtpConnection {
            stream,
            out: Vec::with_capacity(1 << 20),
            written: 0,
            inp: vec![0; 4 * READ_CHUNK],
            filled: 0,
            parsed: 0,
            hello: Vec::new(),
            closed: false,
        };
        c.handshake(endpoint, until)?;
        // What came after the READY (nothing, as a server speaks only when spoken to).
        let rest = std::mem::take(&mut c.hello);
        c.inp[..rest.len()].copy_from_slice(&rest);
        c.filled = rest.len();
        c.stream.set_nonblocking(true).map_err(|e| format!("{endpoint}: nonblocking: {e}"))?;
        Ok(c)
    }

    fn open(endpoint: &str, until: Instant) -> std::io::Result<Stream> {
        if let Some(addr) = endpoint.strip_prefix("tcp://") {
            let bad = || std::io::Error::new(ErrorKind::InvalidInput, "no address");
            let sa = addr.to_socket_addrs()?.next().ok_or_else(bad)?;
            let left = until.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
            let s = TcpStream::connect_timeout(&sa, left)?;
            s.set_nodelay(true)?;
            Ok(Stream::Tcp(s))
        } else if let Some(path) = endpoint.strip_prefix("ipc://") {
            Ok(Stream::Unix(UnixStream::connect(path)?))
        } else {
            Err(std::io::Error::new(ErrorKind::InvalidInput, "the ZMTP client takes tcp:// or ipc:// endpoints"))
        }
    }

    /// Greeting and READY each way, every read within `until`.
    fn handshake(&mut self, endpoint: &str, until: Instant) -> Result<(), String> {
        let mut hello = greeting().to_vec();
        hello.extend_from_slice(&ready());
        self.write_all_blocking(&hello).map_err(|e| format!("{endpoint}: handshake: {e}"))?;
        let theirs = self.read_blocking(64, until).map_err(|e| format!("{endpoint}: handshake: {e}"))?;
        if theirs[0] != 0xff || theirs[9] & 1 == 0 || theirs[10] < 3 {
            return Err(format!("{endpoint}: the peer does not speak ZMTP 3"));
        }
        if &theirs[12..16] != b"NULL" {
            let mech = String::from_utf8_lossy(&theirs[12..32]).trim_end_matches('\0').to_string();
            return Err(format!("{endpoint}: the peer asks for {mech} security (give the CURVE keys)"));
        }
        self.hello.drain(..64);
        loop {
            if let Some((flags, head, size)) = frame_at(&self.hello) {
                let body = &self.hello[head..head + size];
                if flags & COMMAND == 0 || !body.starts_with(b"\x05READY") {
                    let why = String::from_utf8_lossy(body.get(7..).unwrap_or_default()).to_string();
                    return Err(format!("{endpoint}: handshake refused: {why}"));
                }
                self.hello.drain(..head + size);
                return Ok(());
            }
            let need = self.hello.len() + 1;
            self.read_blocking(need, until).map_err(|e| format!("{endpoint}: handshake: {e}"))?;
        }
    }

    fn write_all_blocking(&mut self, mut b: &[u8]) -> std::io::Result<()> {
        while !b.is_empty() {
            let n = self.stream.write(b)?;
            if n == 0 {
                return Err(ErrorKind::WriteZero.into());
            }
            b = &b[n..];
        }
        Ok(())
    }

    /// Reads until `hello` holds at least `n` bytes or `until` passes; returns them.
    fn read_blocking(&mut self, n: usize, until: Instant) -> std::io::Result<&[u8]> {
        let mut buf = [0u8; 4096];
        while self.hello.len() < n {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ErrorKind::TimedOut.into());
            }
            self.stream.set_read_timeout(left)?;
            match self.stream.read(&mut buf) {
                Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
                Ok(k) => self.hello.extend_from_slice(&buf[..k]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return Err(ErrorKind::TimedOut.into())
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(&self.hello[..n])
    }

    /// Whether `inp[parsed..]` holds a whole message (its last frame).
    fn has_message(&self) -> bool {
        let mut at = self.parsed;
        while let Some((flags, head, size)) = frame_at(&self.inp[at..self.filled]) {
            if flags & (MORE | COMMAND) == 0 {
                return true;
            }
            at += head + size;
        }
        false
    }
}

impl Connection for ZmtpConnection {
    /// Queues the frame (a single-frame message); it goes out at the next `flush`.
    fn send(&mut self, frame: &[u8]) -> Result<bool, String> {
        if self.closed {
            return Ok(false);
        }
        if self.out.len() - self.written > MAX_PENDING {
            self.flush()?;
            if self.out.len() - self.written > MAX_PENDING {
                return Ok(false);
            }
        }
        if frame.len() > 255 {
            self.out.push(LONG);
            self.out.extend_from_slice(&(frame.len() as u64).to_be_bytes());
        } else {
            self.out.extend_from_slice(&[0, frame.len() as u8]);
        }
        self.out.extend_from_slice(frame);
        Ok(true)
    }

    /// Writes what is queued, as far as the socket takes it now (the rest at the next flush).
    fn flush(&mut self) -> Result<(), String> {
        while self.written < self.out.len() && !self.closed {
            match self.stream.write(&self.out[self.written..]) {
                Ok(0) => self.closed = true,
                Ok(n) => self.written += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if matches!(e.kind(), ErrorKind::BrokenPipe | ErrorKind::ConnectionReset) => self.closed = true,
                Err(e) => return Err(format!("send: {e}")),
            }
        }
        if self.written == self.out.len() {
            self.out.clear();
            self.written = 0;
        }
        Ok(())
    }

    fn take_replies(&mut self, on_reply: &mut dyn FnMut(&[u8])) -> Result<usize, String> {
        // Read what is there (non-blocking), then hand over every whole message.
        while !self.closed {
            if self.inp.len() - self.filled < READ_CHUNK {
                self.inp.copy_within(self.parsed..self.filled, 0);
                self.filled -= self.parsed;
                self.parsed = 0;
                if self.inp.len() - self.filled < READ_CHUNK {
                    self.inp.resize(self.inp.len() * 2, 0);
                }
            }
            let room = self.inp.len() - self.filled;
            match self.stream.read(&mut self.inp[self.filled..]) {
                Ok(0) => self.closed = true,
                Ok(got) => {
                    self.filled += got;
                    if got < room {
                        break;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::ConnectionReset => self.closed = true,
                Err(e) => return Err(format!("recv: {e}")),
            }
        }
        let mut n = 0;
        while let Some((flags, head, size)) = frame_at(&self.inp[self.parsed..self.filled]) {
            let at = self.parsed + head;
            self.parsed = at + size;
            // The last frame of a message is the reply (an empty delimiter may come first);
            // commands (PING from a peer with heartbeats) need no answer from a DEALER here.
            if flags & (MORE | COMMAND) == 0 {
                on_reply(&self.inp[at..at + size]);
                n += 1;
            }
        }
        if self.parsed == self.filled {
            (self.parsed, self.filled) = (0, 0);
        }
        Ok(n)
    }

    fn readiness(&mut self) -> Result<Readiness, String> {
        let queued = self.written < self.out.len(); // a short sleep, then the next pass flushes it
        Ok(match (self.has_message(), self.closed || queued) {
            (true, _) => Readiness::Ready,
            (false, true) => Readiness::NoFd,
            (false, false) => Readiness::Fd(self.stream.fd()),
        })
    }
}
