//! The client's side of `shm://`: the connection (`Client` and the load generator use it).

use super::parse_endpoint;
use super::ring::*;
use std::io;
use std::os::unix::net::UnixStream;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

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
