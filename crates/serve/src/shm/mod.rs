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

mod client; // the client's connection
mod daemon; // the endpoint, the acceptor, the clients as the daemon reads them
mod ring; // the shared memory: layout, ring, futex park and wake, memfds, descriptor passing

pub use client::{loadgen_connection, Connection, ShmError};
pub(crate) use daemon::{acceptor, bind, Bound, Clients, InPlace, Incoming, Peer};
#[doc(hidden)]
pub use ring::ring_echo;
pub use ring::{MAX_FRAME, RING_BYTES};

use std::path::{Path, PathBuf};

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

#[cfg(test)]
mod tests {
    use super::*;

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
