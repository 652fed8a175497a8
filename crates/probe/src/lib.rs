//! offload-probe: the effective numbers of the channels on this machine (seed 004's lesson:
//! advertised figures mislead). Every channel is measured as timed samples over payload sizes,
//! summarised by median and p10/p90, and fitted to T(n) = L + n/B ([`fit`]).

pub mod fit;
pub mod ipc;
pub mod measure;
pub mod memory;
pub mod uring;
pub mod zeromq;

pub use fit::{fit, Fit};
pub use measure::{Budget, Channel, Point};

use std::path::Path;

const KIB: u64 = 1024;
const MIB: u64 = 1024 * 1024;

/// Every channel [`run`] can measure, in suite order.
pub const CHANNELS: &[&str] = &[
    "memory/memcpy",
    "memory/copy-fresh",
    "memory/copy-prefaulted",
    "memory/copy-locked",
    "memory/alloc-first-touch",
    "ipc/shared-memory",
    "ipc/pipe",
    "ipc/unix-socket",
    "ipc/tcp-loopback",
    "ipc/pipe-1cpu",
    "ipc/unix-socket-1cpu",
    "ipc/tcp-loopback-1cpu",
    "zmq/inproc-round-trip",
    "zmq/ipc-round-trip",
    "zmq/tcp-round-trip",
    "zmq/inproc-stream",
    "zmq/ipc-stream",
    "zmq/tcp-stream",
];

/// Measures one channel. `quick` uses smaller payloads and fewer samples (the CI mode, well
/// under a minute for all channels); `dir` holds ipc sockets (and, later, probe files).
pub fn run(channel: &str, quick: bool, dir: &Path) -> Result<Channel, String> {
    run_with(channel, quick, dir, None, &zeromq::Peer::Thread, None)
}

/// [`run`] over the payloads `lo..=hi` (powers of two from `lo`) instead of the channel's own,
/// with the ZeroMQ peer where `peer` says, and `budget` instead of the mode's own.
pub fn run_with(
    channel: &str,
    quick: bool,
    dir: &Path,
    sizes: Option<(u64, u64)>,
    peer: &zeromq::Peer,
    budget: Option<Budget>,
) -> Result<Channel, String> {
    let b = budget.unwrap_or(if quick { Budget::QUICK } else { Budget::FULL });
    let (suite, name) = channel.split_once('/').unwrap_or(("", channel));
    // The measuring side on the first allowed CPU, peers on the second (see measure::cpu_pair).
    measure::with_pinned(measure::cpu_pair().map(|p| p.0), || {
        run_unpinned(channel, suite, name, b, quick, dir, sizes, peer)
    })
}

#[allow(clippy::too_many_arguments)]
fn run_unpinned(
    channel: &str,
    suite: &str,
    name: &str,
    b: Budget,
    quick: bool,
    dir: &Path,
    sizes: Option<(u64, u64)>,
    peer: &zeromq::Peer,
) -> Result<Channel, String> {
    let lo = |default: u64| sizes.map_or(default, |s| s.0);
    let hi = |full: u64, q: u64| sizes.map_or(if quick { q } else { full }, |s| s.1);
    match (suite, name) {
        ("memory", "memcpy") => Ok(memory::memcpy(b, lo(64), hi(256 * MIB, 16 * MIB))),
        ("memory", "copy-fresh") => memory::copy_into(memory::Target::Fresh, b, lo(4 * KIB), hi(256 * MIB, 8 * MIB)),
        ("memory", "copy-prefaulted") => {
            memory::copy_into(memory::Target::Prefaulted, b, lo(4 * KIB), hi(256 * MIB, 8 * MIB))
        }
        ("memory", "copy-locked") => memory::copy_into(memory::Target::Locked, b, lo(4 * KIB), hi(128 * MIB, 8 * MIB)),
        ("memory", "alloc-first-touch") => memory::first_touch(b, lo(4 * KIB), hi(256 * MIB, 8 * MIB)),
        ("ipc", "shared-memory") => Ok(ipc::shared_memory(b, lo(64), hi(4 * MIB, 256 * KIB))),
        ("ipc", kernel_channel) => {
            let (base, at) = match kernel_channel.strip_suffix("-1cpu") {
                Some(base) => (base, ipc::Placement::OneCore),
                None => (kernel_channel, ipc::Placement::CrossCore),
            };
            let (l, h) = (lo(64), hi(4 * MIB, 256 * KIB));
            match base {
                "pipe" => ipc::pipe(b, l, h, at),
                "unix-socket" => ipc::unix_socket(b, l, h, at),
                "tcp-loopback" => ipc::tcp_loopback(b, l, h, at),
                _ => Err(format!("unknown channel {channel:?}; known: {}", CHANNELS.join(", "))),
            }
        }
        ("zmq", n) => {
            let (transport, kind) = n.split_once('-').unwrap_or((n, ""));
            if !matches!(transport, "inproc" | "ipc" | "tcp") {
                return Err(format!("unknown ZeroMQ transport {transport:?}"));
            }
            match kind {
                "round-trip" => zeromq::round_trip(transport, dir, peer, b, lo(64), hi(4 * MIB, 64 * KIB)),
                "stream" => zeromq::stream(transport, dir, peer, b, lo(64), hi(4 * MIB, 256 * KIB)),
                _ => Err(format!("unknown channel {channel:?}; known: {}", CHANNELS.join(", "))),
            }
        }
        _ => Err(format!("unknown channel {channel:?}; known: {}", CHANNELS.join(", "))),
    }
}
