//! The daemon's settings, declared once: [`Settings`] is at the same time the command line
//! (clap: every key a flag and an `OFFLOAD_SERVE_*` variable, its default shown in `--help`)
//! and the TOML settings file (`--config serve.toml`, keys named like the fields). The
//! `offload-serve` binary and `offload serve` (Python, which hands its arguments over
//! untouched) both parse with [`Settings::from_args`]; adding a setting is one field here.
//! Precedence, key by key: flags > `OFFLOAD_SERVE_*` variables > the file > the defaults.
//!
//! ```toml
//! ruletype = "ruletype.toml"        # relative paths are relative to this file
//! rules = "rules.csv"
//! matcher = "fast"
//! endpoints = ["tcp://127.0.0.1:5555", "ipc:///tmp/offload.sock"]
//! control = "tcp://127.0.0.1:5556"
//! metrics = "127.0.0.1:9464"
//! workers = 2          # w: decode, batch, encode
//! kernels = 1          # k: kernel executors
//! engine_threads = 1   # e: matching threads per executor
//! shards = 1           # ROUTER sockets per data endpoint, each with its I/O thread and broker
//! queue = 64           # requests that may wait before "busy"
//! batch_max_queries = 0
//! batch_timeout_us = 200
//! max_request_queries = 65536    # a request with more is answered BadRequest
//! max_request_bytes = 67108864   # a larger frame closes its connection (default: derived)
//! cpus = "0,2-3"       # run every thread of the daemon on these CPUs only (default: any)
//! # security (docs/serve-protocol.md, "Security"); key files come from `offload serve keys`
//! curve_secret_key = "keys/server.key_secret"   # the daemon's key pair: CURVE on the control socket
//! curve_clients = ["keys/ops.key"]              # public keys (files or directories) admitted there
//! curve_data_clients = ["keys/clients"]         # given: the data endpoints require CURVE too
//! reload_dirs = ["."]                           # where `reload` may read (default: the rule files' directories)
//! allow_remote_data = false                     # true: a data endpoint on the network without CURVE
//! allow_remote_metrics = false                  # true: the metrics page on a non-loopback address
//! ```
//! Every key is optional in the file; an unknown key or a wrong type is an error that names the
//! file, line and column. Every number has a domain ([`BOUNDS`], shown in `--help`), checked
//! wherever it comes from: flags and variables by clap's parsers, the file when it is read, and
//! `set` while serving ([`check_setting`]); a value outside is refused, never clamped.
//! [`Settings::resolve`] turns them into what the daemon runs with: [`Config`] and [`Security`]
//! (here, beside the settings that fill them, so that the server does not reach back into this
//! module and this one into the server).

use crate::auth::{self, CurveServer};
use clap::builder::BoolishValueParser;
use clap::parser::ValueSource;
use clap::{ArgAction, CommandFactory, FromArgMatches, Parser};
use offload_rules::MatcherKind;
use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// What the daemon runs with (the CLI fills it from a file and flags).
#[derive(Debug, Clone)]
pub struct Config {
    /// ZeroMQ endpoints to bind, e.g. `tcp://127.0.0.1:5555`, `ipc:///tmp/offload.sock`.
    pub endpoints: Vec<String>,
    /// Worker threads (w): decode, batch, encode, hand over to a kernel executor.
    pub workers: usize,
    /// Kernel executors (k), each running the compiled matcher on one batch at a time.
    pub kernels: usize,
    /// Engine threads per kernel executor (e): the threads one batch is matched with.
    pub engine_threads: usize,
    /// Socket shards: ROUTER sockets sharing each ZeroMQ data endpoint's listening socket, each
    /// with its own ZeroMQ I/O thread and broker thread (shard 0's broker also answers control).
    pub shards: usize,
    /// Requests that may wait in the queue; one more gets "busy".
    pub queue: usize,
    /// Control endpoint (REP) for `stats`, `reload` and `set`, if any.
    pub control: Option<String>,
    /// Address of the Prometheus endpoint (`GET /metrics`), e.g. `127.0.0.1:9464`, if any.
    pub metrics: Option<String>,
    /// Cross-request batching: queries per batch (0 = per request) and the wait for more (µs).
    pub batch_max_queries: u64,
    pub batch_timeout_us: u64,
    /// Largest frame a data endpoint takes (ZMQ_MAXMSGSIZE on the ROUTER): a larger one closes
    /// its sender's connection before the daemon holds it. None: [`Config::frame_bound`]
    /// derives it from `max_request_queries` and the rule type.
    pub max_request_bytes: Option<u64>,
    /// The most queries one request may carry; a request with more is answered `BadRequest`.
    pub max_request_queries: u64,
    /// Who may reach which socket, and what `reload` may read.
    pub security: Security,
    /// Benchmarks only (`--matcher null`): the executors answer every query "no match" without
    /// calling the matcher, so what the daemon costs is its host path alone. Said on stderr at
    /// start, in `stats` and on the metrics page, so no one takes its answers for real ones.
    pub null_matcher: bool,
}

/// The daemon's security settings (docs/serve-protocol.md, "Security"). The default is the safe
/// one: no CURVE, so every endpoint must be on loopback or IPC, and `reload` may not read files
/// (a rule set can still be sent in the request).
#[derive(Debug, Clone, Default)]
pub struct Security {
    /// The daemon's key pair: with it the control socket requires CURVE.
    pub curve: Option<auth::CurveServer>,
    /// Client keys admitted on the control socket.
    pub control_clients: Vec<auth::ClientKey>,
    /// Client keys admitted on the data endpoints; `Some` makes them require CURVE too.
    pub data_clients: Option<Vec<auth::ClientKey>>,
    /// Directories (canonical) a `reload` by path may read rule files from.
    pub reload_dirs: Vec<PathBuf>,
    /// Bind a data endpoint on the network without CURVE (answers and queries in clear text,
    /// open to anyone who can reach it).
    pub allow_remote_data: bool,
    /// Serve the metrics page on a non-loopback address (counters only, no control).
    pub allow_remote_metrics: bool,
}

/// The domain of one numeric setting: least and most value, and what a value means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bound {
    pub key: &'static str,
    pub min: u64,
    pub max: u64,
    /// Why the bound is where it is, for the error.
    pub why: &'static str,
}

/// Threads of one kind (workers, kernel executors, engine threads per executor): each worker
/// and executor holds a ZeroMQ socket (libzmq allows 1,023 a context) and a thread.
pub const THREADS_MAX: u64 = 256;
/// Socket shards: each is a ROUTER, a ZeroMQ I/O thread and a broker thread.
pub const SHARDS_MAX: u64 = 64;
/// Requests that may wait: the queue's slots are allocated at start.
pub const QUEUE_MAX: u64 = 65_536;
/// Queries in one cross-request batch (2^20): the executor's buffers grow to it.
pub const BATCH_MAX_QUERIES_MAX: u64 = 1 << 20;
/// The longest wait for more requests (1 s): a request in a batch waits at most this.
pub const BATCH_TIMEOUT_US_MAX: u64 = 1_000_000;
/// Queries one request may carry (2^20, as a batch).
pub const MAX_REQUEST_QUERIES_MAX: u64 = 1 << 20;
/// The average bytes of a raw value the derived frame bound leaves room for (MCT's values are
/// 1-8 characters); a client sending longer ones sets `max_request_bytes` itself.
pub const RAW_VALUE_BYTES: u64 = 24;
/// Frames on the data endpoints: the least and most bound that may be set (4 KiB .. 1 GiB).
pub const MAX_REQUEST_BYTES_MIN: u64 = 4096;
pub const MAX_REQUEST_BYTES_MAX: u64 = 1 << 30;

/// Every numeric setting's domain, the one table (`--help` states the same ranges; a test
/// holds the two together).
pub const BOUNDS: [Bound; 9] = [
    Bound { key: "workers", min: 1, max: THREADS_MAX, why: "worker threads" },
    Bound { key: "kernels", min: 0, max: THREADS_MAX, why: "kernel executors (0 = inline)" },
    Bound { key: "engine_threads", min: 1, max: THREADS_MAX, why: "matching threads per kernel executor" },
    Bound { key: "shards", min: 1, max: SHARDS_MAX, why: "socket shards (ROUTER, I/O thread, broker)" },
    Bound { key: "queue", min: 1, max: QUEUE_MAX, why: "requests that may wait" },
    Bound { key: "batch_max_queries", min: 0, max: BATCH_MAX_QUERIES_MAX, why: "queries per batch (0 = per request)" },
    Bound {
        key: "batch_timeout_us", min: 0, max: BATCH_TIMEOUT_US_MAX, why: "µs a batch waits for more, at most 1 s"
    },
    Bound { key: "max_request_queries", min: 1, max: MAX_REQUEST_QUERIES_MAX, why: "queries one request may carry" },
    Bound {
        key: "max_request_bytes",
        min: MAX_REQUEST_BYTES_MIN,
        max: MAX_REQUEST_BYTES_MAX,
        why: "bytes of one request frame",
    },
];

/// The largest frame a valid request of `max_queries` queries over `criteria` criteria needs:
/// raw text with values of [`RAW_VALUE_BYTES`] on average (a 4-byte offset each, plus the
/// header), which is more than the 32-bit codes of the same queries take; rounded up to 4 KiB,
/// within the setting's range. The daemon's ZMQ_MAXMSGSIZE when `max_request_bytes` is not given.
pub fn request_bytes_bound(criteria: usize, max_queries: u64) -> u64 {
    const HEADER: u64 = 64; // the request's fixed header and the raw layout's column count
    let criteria = criteria.max(1) as u64;
    let raw = (max_queries + 1).saturating_mul(criteria).saturating_mul(4 + RAW_VALUE_BYTES);
    let bound = HEADER.saturating_add(raw).div_ceil(4096).saturating_mul(4096);
    bound.clamp(MAX_REQUEST_BYTES_MIN, MAX_REQUEST_BYTES_MAX)
}

impl Config {
    /// The largest frame a data endpoint takes: `max_request_bytes` if given, else
    /// [`request_bytes_bound`] of `max_request_queries` for a rule type of `criteria` criteria.
    pub fn frame_bound(&self, criteria: usize) -> u64 {
        self.max_request_bytes.unwrap_or_else(|| request_bytes_bound(criteria, self.max_request_queries))
    }
}

/// Checks `value` for the setting `key` against [`BOUNDS`]: the value, or the one-line error
/// naming the key, the value and the range. `set` while serving takes its answer from here.
pub fn check_setting(key: &str, value: u64) -> Result<u64, String> {
    let Some(b) = BOUNDS.iter().find(|b| b.key == key) else {
        return Err(format!("{key:?} is not a numeric setting"));
    };
    if (b.min..=b.max).contains(&value) {
        Ok(value)
    } else {
        Err(format!("{key} {value} is out of range: {}..={} ({})", b.min, b.max, b.why))
    }
}

/// clap's parser for a `usize` setting in `min..=max`.
fn ranged(min: u64, max: u64) -> clap::builder::RangedU64ValueParser<usize> {
    clap::builder::RangedU64ValueParser::<usize>::new().range(min..=max)
}

/// The daemon's settings as given by one source (flags, variables, file, defaults); `None` = not
/// given there. The field name is the file's key and the variable's suffix (`workers`,
/// `OFFLOAD_SERVE_WORKERS`); lists are plural in the file and the variable (comma-separated
/// there) and singular, repeatable, as flags (`--endpoint`).
#[derive(Parser, Debug, Default, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[command(
    name = "offload-serve",
    version,
    about = "Serve a rule set over ZeroMQ until SIGINT/SIGTERM (queued requests are answered first).",
    after_help = "Precedence, key by key: flags > OFFLOAD_SERVE_* variables > the --config file > the defaults. \
                  A control endpoint off loopback/IPC is refused without CURVE. Key pairs for CURVE: \
                  offload-serve keys DIR [--name NAME]... [--force] (offload serve keys DIR). \
                  Protocol and security: docs/serve-protocol.md."
)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// Settings file (TOML; keys as the long options with _ for -, lists plural: `workers = 2`,
    /// `endpoints = [...]`); relative paths in it are relative to it [default: none]
    #[arg(long, env = "OFFLOAD_SERVE_CONFIG", value_name = "FILE")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// Rule type: .xml (ERBIUM) or .toml (native) [default: none: give it here or in --config]
    #[arg(long, env = "OFFLOAD_SERVE_RULETYPE", value_name = "FILE")]
    pub ruletype: Option<PathBuf>,
    /// Rules CSV [default: none: give it here or in --config]
    #[arg(long, env = "OFFLOAD_SERVE_RULES", value_name = "FILE")]
    pub rules: Option<PathBuf>,
    /// linear, nfa, nfa:<given|asc|desc|h2>, fast, gpu-host (the GPU's algorithm on the CPU),
    /// gpu (the kernel executors run on the CUDA device), null (benchmarks only: no matching,
    /// every query answered "no match", to measure the service's own cost), or emulated
    /// (benchmarks only: a device emulated from --emulate-profile, exact answers precomputed for
    /// --emulate-queries)
    #[arg(long, env = "OFFLOAD_SERVE_MATCHER", value_name = "NAME", default_value = "fast")]
    pub matcher: Option<String>,
    /// Data endpoint to bind (repeat): tcp://127.0.0.1:5555, ipc:///tmp/x. An address off
    /// loopback needs --curve-data-client or --allow-remote-data
    #[arg(
        long = "endpoint",
        short = 'e',
        env = "OFFLOAD_SERVE_ENDPOINTS",
        value_name = "EP",
        value_delimiter = ',',
        default_value = "tcp://127.0.0.1:5555"
    )]
    pub endpoints: Option<Vec<String>>,
    /// Control endpoint for `stats`, `reload` and `set`; off loopback/IPC it needs CURVE
    /// (--curve-secret-key, --curve-client) [default: none]
    #[arg(long, short = 'c', env = "OFFLOAD_SERVE_CONTROL", value_name = "EP")]
    pub control: Option<String>,
    /// Serve Prometheus text at http://ADDR/metrics: PORT (on 127.0.0.1) or HOST:PORT; off
    /// loopback it needs --allow-remote-metrics [default: none]
    #[arg(long, env = "OFFLOAD_SERVE_METRICS", value_name = "ADDR")]
    pub metrics: Option<String>,
    /// Worker threads (w): decode, batch, encode [range: 1..=256]
    #[arg(long, env = "OFFLOAD_SERVE_WORKERS", value_name = "N", default_value = "2",
          value_parser = ranged(1, THREADS_MAX))]
    pub workers: Option<usize>,
    /// Kernel executors (k), each matching one batch at a time; 0 = inline: the broker matches
    /// pre-encoded requests itself and the workers match what they encode (fewest thread
    /// hand-offs; overload shows as deadlines and ZeroMQ's backpressure, not 'busy') [range:
    /// 0..=256]
    #[arg(long, env = "OFFLOAD_SERVE_KERNELS", value_name = "N", default_value = "1",
          value_parser = ranged(0, THREADS_MAX))]
    pub kernels: Option<usize>,
    /// Matching threads per kernel executor (e) [range: 1..=256]
    #[arg(long, env = "OFFLOAD_SERVE_ENGINE_THREADS", value_name = "N", default_value = "1",
          value_parser = ranged(1, THREADS_MAX))]
    pub engine_threads: Option<usize>,
    /// Socket shards: N ROUTER sockets share each ZeroMQ data endpoint (one listening socket,
    /// whose connections go to whichever shard accepts first), each with its own ZeroMQ I/O
    /// thread and broker thread, so the network path runs on N cores [range: 1..=64]
    #[arg(long, env = "OFFLOAD_SERVE_SHARDS", value_name = "N", default_value = "1",
          value_parser = ranged(1, SHARDS_MAX))]
    pub shards: Option<usize>,
    /// Requests that may wait; beyond that the reply is 'busy' [range: 1..=65536]
    #[arg(long, env = "OFFLOAD_SERVE_QUEUE", value_name = "N", default_value = "64",
          value_parser = ranged(1, QUEUE_MAX))]
    pub queue: Option<usize>,
    /// Cross-request batching: queries per batch (0 = one request at a time) [default: 0; a device
    /// matcher (gpu, emulated): 65536 with batch_timeout_us 0, self-filling] [range: 0..=1048576]
    #[arg(long, env = "OFFLOAD_SERVE_BATCH_MAX_QUERIES", value_name = "N",
          value_parser = clap::value_parser!(u64).range(0..=BATCH_MAX_QUERIES_MAX))]
    pub batch_max_queries: Option<u64>,
    /// Cross-request batching: wait for more, from the first request's arrival (a change by
    /// `set` applies to the batch already waiting) [range: 0..=1000000, 1 s]
    #[arg(long, env = "OFFLOAD_SERVE_BATCH_TIMEOUT_US", value_name = "US", default_value = "200",
          value_parser = clap::value_parser!(u64).range(0..=BATCH_TIMEOUT_US_MAX))]
    pub batch_timeout_us: Option<u64>,
    /// The most queries one request may carry; a request with more is answered BadRequest
    /// [range: 1..=1048576]
    #[arg(long, env = "OFFLOAD_SERVE_MAX_REQUEST_QUERIES", value_name = "N", default_value = "65536",
          value_parser = clap::value_parser!(u64).range(1..=MAX_REQUEST_QUERIES_MAX))]
    pub max_request_queries: Option<u64>,
    /// Largest request frame a data endpoint takes (ZeroMQ's ZMQ_MAXMSGSIZE; shm:// disconnects
    /// the client): a larger one closes the sender's connection unread [default: derived: room
    /// for max_request_queries queries of raw values averaging 24 bytes: 38.5 MiB for 65536
    /// queries of 22 criteria] [range: 4096..=1073741824]
    #[arg(long, env = "OFFLOAD_SERVE_MAX_REQUEST_BYTES", value_name = "BYTES",
          value_parser = clap::value_parser!(u64).range(MAX_REQUEST_BYTES_MIN..=MAX_REQUEST_BYTES_MAX))]
    pub max_request_bytes: Option<u64>,
    /// The daemon's key pair (server.key_secret from `offload serve keys`): the control socket
    /// then requires CURVE [default: none]
    #[arg(long, env = "OFFLOAD_SERVE_CURVE_SECRET_KEY", value_name = "FILE")]
    pub curve_secret_key: Option<PathBuf>,
    /// A client public key file (NAME.key) or a directory of them, admitted on the control
    /// socket (repeat) [default: none]
    #[arg(long = "curve-client", env = "OFFLOAD_SERVE_CURVE_CLIENTS", value_name = "PATH", value_delimiter = ',')]
    pub curve_clients: Option<Vec<PathBuf>>,
    /// The same for the data endpoints: given, they require CURVE too (repeat) [default: none:
    /// data endpoints without CURVE]
    #[arg(
        long = "curve-data-client",
        env = "OFFLOAD_SERVE_CURVE_DATA_CLIENTS",
        value_name = "PATH",
        value_delimiter = ','
    )]
    pub curve_data_clients: Option<Vec<PathBuf>>,
    /// A directory `reload` may read rule files from (repeat); other paths are refused [default:
    /// the directories of --ruletype and --rules]
    #[arg(long = "reload-dir", env = "OFFLOAD_SERVE_RELOAD_DIRS", value_name = "DIR", value_delimiter = ',')]
    pub reload_dirs: Option<Vec<PathBuf>>,
    /// Allow a data endpoint off loopback without CURVE (clear text, open to anyone who can
    /// reach it) [default: refused]
    #[arg(long, env = "OFFLOAD_SERVE_ALLOW_REMOTE_DATA", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub allow_remote_data: Option<bool>,
    /// Allow the metrics page off loopback (counters only) [default: refused]
    #[arg(long, env = "OFFLOAD_SERVE_ALLOW_REMOTE_METRICS", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub allow_remote_metrics: Option<bool>,
    /// With --matcher emulated (benchmarks only): the device profile whose [costs] each batch is
    /// held for, e.g. data/plans/whatif/gpu-h200.toml [default: none; needed then]
    #[arg(long, env = "OFFLOAD_SERVE_EMULATE_PROFILE", value_name = "FILE")]
    pub emulate_profile: Option<PathBuf>,
    /// With --matcher emulated: the queries (a query CSV, the benchmark's trace) whose answers the
    /// fast matcher precomputes; other rows are matched on the emulated device's thread, counted
    /// as misses [default: none; needed then]
    #[arg(long, env = "OFFLOAD_SERVE_EMULATE_QUERIES", value_name = "FILE")]
    pub emulate_queries: Option<PathBuf>,
    /// Run every thread of the daemon on these CPUs only (sched_setaffinity at start), e.g.
    /// 0 or 0,2-3; each must exist and be allowed to this process [default: none: any]
    #[arg(long, env = "OFFLOAD_SERVE_CPUS", value_name = "LIST")]
    pub cpus: Option<String>,
}

/// The CPUs a list names (`0`, `0,2-3`), each one this process may run on; else one line
/// saying which is not and which are.
pub fn parse_cpus(list: &str) -> Result<Vec<usize>, String> {
    let allowed = allowed_cpus();
    let mut cpus = Vec::new();
    for part in list.split(',').map(str::trim) {
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        let (Ok(lo), Ok(hi)) = (lo.trim().parse::<usize>(), hi.trim().parse::<usize>()) else {
            return Err(format!("cpus {list:?}: write CPU numbers and ranges like 0,2-3"));
        };
        if lo > hi || hi >= libc::CPU_SETSIZE as usize {
            return Err(format!("cpus {list:?}: {part} is not a range of CPUs"));
        }
        cpus.extend(lo..=hi);
    }
    cpus.sort_unstable();
    cpus.dedup();
    if let Some(c) = cpus.iter().find(|c| !allowed.contains(c)) {
        return Err(format!("cpus {list:?}: CPU {c} is not one this process may run on ({allowed:?})"));
    }
    Ok(cpus)
}

/// The CPUs this process may run on now (sched_getaffinity); empty where that cannot be read.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: an all-zero cpu_set_t is the empty set; sched_getaffinity writes at most
    // size_of::<cpu_set_t>() bytes into the live local, and CPU_ISSET reads it in bounds.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize).filter(|&c| libc::CPU_ISSET(c, &set)).collect()
    }
}

/// Pins every thread of this process (those running now, and so those they start) to `cpus`.
pub fn pin_cpus(cpus: &[usize]) -> Result<(), String> {
    // SAFETY: an all-zero cpu_set_t is the empty set (plain integers).
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus.iter().filter(|&&c| c < libc::CPU_SETSIZE as usize) {
        // SAFETY: CPU_SET writes one bit, below CPU_SETSIZE, of the live local set.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    let tasks = std::fs::read_dir("/proc/self/task").map_err(|e| format!("cpus: /proc/self/task: {e}"))?;
    for tid in tasks.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<libc::pid_t>().ok()) {
        // SAFETY: sched_setaffinity reads size_of::<cpu_set_t>() bytes of the live local set; a
        // thread that ended meanwhile is an ESRCH error, skipped.
        let r = unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set) };
        if r != 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH) {
            return Err(format!("cpus {cpus:?}: sched_setaffinity: {}", std::io::Error::last_os_error()));
        }
    }
    Ok(())
}

/// `--matcher null`: the service's benchmark-only matcher ([`crate::benchmark_only::null`]); it is no
/// [`MatcherKind`], so nothing outside the service can pick it.
pub const NULL_MATCHER: &str = crate::benchmark_only::null::NAME;

/// `--matcher emulated`: the service's benchmark-only emulated device ([`crate::benchmark_only::emulated`]); no
/// [`MatcherKind`] either. The engine compiles as `fast`, which precomputes its answers.
pub const EMULATED_MATCHER: &str = crate::benchmark_only::emulated::NAME;

/// Queries per batch when the matcher is a device (`gpu`, `emulated`) and no `batch_max_queries`
/// is given: self-filling batches (`batch_timeout_us` 0) of up to 2^16 queries. A device's batch
/// has a fixed cost (launch, transfer latency, the kernel's floor: ~0.1 ms on the H200 profile)
/// that only large batches amortise, and self-filling batches grow only while requests queue, so
/// a lone request is still taken at once. At 2^16 a full batch is ~0.25 ms of that device's time,
/// far inside a 5 ms p99. Give `batch_max_queries` (0: per request) for another policy.
pub const DEVICE_BATCH_MAX_QUERIES: u64 = 1 << 16;

/// Settings with every default filled in and checked: what the daemon runs.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub ruletype: PathBuf,
    pub rules: PathBuf,
    pub matcher: MatcherKind,
    pub config: Config,
    /// `--matcher emulated`: the device profile (read) and the trace to precompute.
    pub emulate: Option<crate::benchmark_only::emulated::Spec>,
}

impl Default for Config {
    /// The defaults of [`Settings`] (those `--help` shows), with the default security.
    fn default() -> Self {
        Settings::defaults().daemon_config(Security::default()).expect("the defaults make a configuration")
    }
}

/// Why the arguments did not give settings to run with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArgsError {
    /// They asked for text instead (`--help`, `--version`): print it, exit 0.
    Show(String),
    /// They are wrong: one line saying what and where (exit 2).
    Invalid(String),
}

impl From<clap::Error> for ArgsError {
    fn from(e: clap::Error) -> Self {
        use clap::error::ErrorKind::{DisplayHelp, DisplayVersion};
        let text = e.render().to_string();
        if matches!(e.kind(), DisplayHelp | DisplayVersion) {
            return ArgsError::Show(text);
        }
        // clap's message, its tip folded in, on one line (usage: --help).
        let lines = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with("Usage:") && !l.starts_with("For more information"));
        let mut line = String::new();
        for part in lines.map(|l| l.trim_start_matches("error: ").trim_start_matches("tip: ")) {
            if !line.is_empty() {
                line.push_str(if line.ends_with(':') { " " } else { "; " });
            }
            line.push_str(part);
        }
        ArgsError::Invalid(line)
    }
}

impl Settings {
    /// Parses a command line (`argv[0]` first) with the variables and the `--config` file under
    /// it, and the defaults under those.
    pub fn from_args<I, T>(argv: I) -> Result<Settings, ArgsError>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        let matches = Settings::command().try_get_matches_from(argv)?;
        let parsed = Settings::from_arg_matches(&matches)?;
        // What the user gave (a flag or a variable); what clap filled from a default is not.
        let given =
            |id: &str| matches!(matches.value_source(id), Some(ValueSource::CommandLine | ValueSource::EnvVariable));
        let given = parsed.only(given).map_err(ArgsError::Invalid)?;
        let file = match &parsed.config {
            Some(f) => Settings::from_file(f).map_err(ArgsError::Invalid)?,
            None => Settings::default(),
        };
        let mut settings = Settings::layered(&[Settings::defaults(), file, given]).map_err(ArgsError::Invalid)?;
        settings.config = parsed.config;
        Ok(settings)
    }

    /// The options as `--help` shows them, the usage line naming `bin_name`.
    pub fn help(bin_name: &str) -> String {
        Settings::command().bin_name(bin_name.to_string()).render_help().to_string()
    }

    /// The defaults `--help` shows, and nothing else (no variable, no file).
    pub fn defaults() -> Settings {
        let cmd = Settings::command().mut_args(|a| a.env(None));
        let m = cmd.try_get_matches_from(["offload-serve"]).expect("no arguments parse");
        let parsed = Settings::from_arg_matches(&m).expect("the defaults parse");
        parsed.only(|id| m.value_source(id) == Some(ValueSource::DefaultValue)).expect("the defaults serialise")
    }

    /// Layers, lowest first: each key takes its value from the highest layer that gives one.
    pub fn layered(layers: &[Settings]) -> Result<Settings, String> {
        let mut merged = serde_json::Map::new();
        for layer in layers {
            merged.extend(layer.keys()?.into_iter().filter(|(_, v)| !v.is_null()));
        }
        serde_json::from_value(merged.into()).map_err(|e| format!("settings: {e}"))
    }

    /// These settings with only the keys `keep` says yes to.
    fn only(&self, keep: impl Fn(&str) -> bool) -> Result<Settings, String> {
        let kept = self.keys()?.into_iter().filter(|(k, _)| keep(k)).collect::<serde_json::Map<_, _>>();
        serde_json::from_value(kept.into()).map_err(|e| format!("settings: {e}"))
    }

    /// Key → value (null where not given); a path that is not UTF-8 is an error naming it.
    fn keys(&self) -> Result<serde_json::Map<String, serde_json::Value>, String> {
        match serde_json::to_value(self) {
            Ok(serde_json::Value::Object(m)) => Ok(m),
            Ok(_) => unreachable!("a struct serialises to a map"),
            Err(e) => Err(format!("settings: {e}")),
        }
    }

    /// Reads a settings file; paths of rule files are taken relative to the file's directory.
    pub fn from_file(path: &Path) -> Result<Settings, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Settings::from_toml(&text, path.parent().unwrap_or(Path::new("")))
            .map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Parses settings from TOML text, resolving relative rule paths against `base`.
    pub fn from_toml(text: &str, base: &Path) -> Result<Settings, String> {
        let mut s: Settings = toml::from_str(text).map_err(|e| e.to_string().trim_end().to_string())?;
        s.check_bounds()?;
        let lists = [&mut s.curve_clients, &mut s.curve_data_clients, &mut s.reload_dirs];
        let paths =
            [&mut s.ruletype, &mut s.rules, &mut s.curve_secret_key, &mut s.emulate_profile, &mut s.emulate_queries]
                .into_iter()
                .flatten();
        for p in paths.chain(lists.into_iter().flatten().flatten()) {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        }
        Ok(s)
    }

    /// Checks every numeric setting given here against [`BOUNDS`] (the file's and code's way
    /// in; clap checks flags and variables as it parses them, with the same table).
    pub fn check_bounds(&self) -> Result<(), String> {
        let keys = self.keys()?;
        for b in &BOUNDS {
            if let Some(v) = keys.get(b.key).filter(|v| !v.is_null()) {
                let v = v.as_u64().ok_or_else(|| format!("{} {v} is not a whole number", b.key))?;
                check_setting(b.key, v)?;
            }
        }
        Ok(())
    }

    /// Fills in defaults and checks what a daemon needs; with `cpus`, pins the process to them
    /// (the daemon starts right after).
    pub fn resolve(self) -> Result<Resolved, String> {
        let s = Settings::layered(&[Settings::defaults(), self])?;
        let (Some(ruletype), Some(rules)) = (s.ruletype.clone(), s.rules.clone()) else {
            return Err(
                "a rule set is needed: give --ruletype and --rules, or `ruletype` and `rules` in --config".into()
            );
        };
        let matcher = match s.matcher.as_deref().unwrap_or("fast") {
            // The null matcher lives in the service, not the rule engine: the executors skip the
            // match call. The engine still compiles (the workers encode with it), as `linear`,
            // the cheapest to build.
            NULL_MATCHER => MatcherKind::Linear,
            EMULATED_MATCHER => MatcherKind::Fast,
            name => name.parse::<MatcherKind>()?,
        };
        let emulate = s.emulate()?;
        let security = s.security(&ruletype, &rules)?;
        let cpus = s.cpus.as_deref().map(parse_cpus).transpose()?;
        let config = s.daemon_config(security)?;
        if let Some(cpus) = &cpus {
            pin_cpus(cpus)?; // before any thread of the daemon starts: they inherit it
        }
        Ok(Resolved { ruletype, rules, matcher, config, emulate })
    }

    /// `--matcher emulated` with its two files (the profile read here, so that a bad one fails
    /// before the rules load); the two files without it are a mistake, said so.
    fn emulate(&self) -> Result<Option<crate::benchmark_only::emulated::Spec>, String> {
        let on = self.matcher.as_deref() == Some(EMULATED_MATCHER);
        match (on, &self.emulate_profile, &self.emulate_queries) {
            (true, Some(profile), Some(queries)) => Ok(Some(crate::benchmark_only::emulated::Spec {
                profile: profile.clone(),
                costs: crate::benchmark_only::emulated::DeviceCosts::from_file(profile)?,
                queries: queries.clone(),
            })),
            (true, _, _) => {
                Err("--matcher emulated (benchmarks only) needs --emulate-profile FILE (a device profile, \
                                 e.g. data/plans/whatif/gpu-h200.toml) and --emulate-queries FILE (the benchmark's \
                                 queries, whose answers are precomputed)"
                    .into())
            }
            (false, None, None) => Ok(None),
            (false, _, _) => {
                Err("--emulate-profile and --emulate-queries are for --matcher emulated (benchmarks only)".into())
            }
        }
    }

    /// The daemon's configuration from settings with the defaults filled in (see `resolve`).
    fn daemon_config(self, security: Security) -> Result<Config, String> {
        self.check_bounds()?;
        let given = |v: Option<usize>, what: &str| v.ok_or_else(|| format!("{what} has no value"));
        let (batch_max_queries, batch_timeout_us) = match self.batch_max_queries {
            Some(n) => (n, self.batch_timeout_us.ok_or("batch_timeout_us has no value")?),
            None if self.device_matcher() => (DEVICE_BATCH_MAX_QUERIES, 0),
            None => (0, self.batch_timeout_us.ok_or("batch_timeout_us has no value")?),
        };
        let endpoints = self.endpoints.unwrap_or_default();
        if endpoints.is_empty() {
            return Err("endpoints must name at least one address, e.g. tcp://127.0.0.1:5555".into());
        }
        for ep in endpoints.iter().chain(&self.control) {
            auth::check_endpoint(ep)?;
        }
        Ok(Config {
            security,
            endpoints,
            workers: given(self.workers, "workers")?,
            kernels: given(self.kernels, "kernels")?,
            engine_threads: given(self.engine_threads, "engine_threads")?,
            shards: given(self.shards, "shards")?,
            queue: given(self.queue, "queue")?,
            control: self.control,
            metrics: self.metrics,
            batch_max_queries,
            batch_timeout_us,
            max_request_bytes: self.max_request_bytes,
            max_request_queries: self.max_request_queries.ok_or("max_request_queries has no value")?,
            null_matcher: self.matcher.as_deref() == Some(NULL_MATCHER),
        })
    }

    /// Whether the matcher named is a device's (`gpu`, `emulated`): batching then defaults to
    /// self-filling ([`DEVICE_BATCH_MAX_QUERIES`]).
    fn device_matcher(&self) -> bool {
        match self.matcher.as_deref() {
            Some(EMULATED_MATCHER) => true,
            Some(name) => matches!(name.parse::<MatcherKind>(), Ok(MatcherKind::Gpu)),
            None => false,
        }
    }

    /// Reads the key files and finds the reload directories; `check_exposure` then decides
    /// whether the endpoints may be bound with them.
    fn security(&self, ruletype: &Path, rules: &Path) -> Result<Security, String> {
        let curve = match (&self.curve_secret_key, &self.curve_clients) {
            (Some(key), Some(clients)) => Some((CurveServer::from_file(key)?, auth::read_client_keys(clients)?)),
            (None, None) => None,
            (Some(_), None) => {
                return Err("curve_secret_key needs curve_clients: the public keys of the clients to admit \
                            (--curve-client FILE_OR_DIR)"
                    .into())
            }
            (None, Some(_)) => {
                return Err("curve_clients needs curve_secret_key: the daemon's own key pair \
                            (--curve-secret-key server.key_secret, made by `offload serve keys`)"
                    .into())
            }
        };
        if self.curve_data_clients.is_some() && curve.is_none() {
            return Err("curve_data_clients needs curve_secret_key and curve_clients (the control socket \
                        is never less protected than the data endpoints)"
                .into());
        }
        let data_clients = self.curve_data_clients.as_deref().map(auth::read_client_keys).transpose()?;
        // Given directories must exist; the default ones (the rule files' own) are skipped when
        // missing, as loading the rule files then fails with the better error.
        let given = self.reload_dirs.is_some();
        let dirs = match &self.reload_dirs {
            Some(d) => d.clone(),
            None => [ruletype, rules].iter().map(|p| p.parent().unwrap_or(Path::new("")).to_path_buf()).collect(),
        };
        let mut reload_dirs = Vec::new();
        for d in dirs {
            let d = if d.as_os_str().is_empty() { PathBuf::from(".") } else { d };
            match d.canonicalize() {
                Ok(c) if !reload_dirs.contains(&c) => reload_dirs.push(c),
                Ok(_) => {}
                Err(e) if given => return Err(format!("reload directory {}: {e}", d.display())),
                Err(_) => {}
            }
        }
        let (curve, control_clients) = curve.map_or((None, Vec::new()), |(s, c)| (Some(s), c));
        Ok(Security {
            curve,
            control_clients,
            data_clients,
            reload_dirs,
            allow_remote_data: self.allow_remote_data.unwrap_or(false),
            allow_remote_metrics: self.allow_remote_metrics.unwrap_or(false),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Result<Settings, ArgsError> {
        Settings::from_args(std::iter::once("offload-serve").chain(a.iter().copied()))
    }

    #[test]
    fn flags_win_over_the_file_and_defaults_fill_the_rest() {
        let file = Settings::from_toml(
            "ruletype = 'rt.toml'\nrules = '/abs/r.csv'\nworkers = 3\nkernels = 2\n",
            Path::new("/cfg"),
        )
        .unwrap();
        assert_eq!(file.ruletype.as_deref(), Some(Path::new("/cfg/rt.toml")));
        assert_eq!(file.rules.as_deref(), Some(Path::new("/abs/r.csv")));
        let flags = Settings { workers: Some(5), ..Settings::default() };
        let r = Settings::layered(&[file, flags]).unwrap().resolve().unwrap();
        assert_eq!((r.config.workers, r.config.kernels, r.config.engine_threads), (5, 2, 1));
        assert_eq!(r.config.endpoints, Config::default().endpoints);
    }

    #[test]
    fn the_command_line_takes_a_file_and_flags_over_it() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("serve.toml");
        std::fs::write(&cfg, "ruletype = 'rt.toml'\nrules = 'r.csv'\nworkers = 3\nkernels = 2\n").unwrap();
        let cfg = cfg.to_str().unwrap();
        let s = args(&["--config", cfg, "--workers", "5", "-e", "ipc:///a", "-e", "ipc:///b"]).unwrap();
        assert_eq!((s.workers, s.kernels, s.engine_threads), (Some(5), Some(2), Some(1)));
        assert_eq!(s.ruletype.as_deref(), Some(dir.path().join("rt.toml").as_path()));
        assert_eq!(s.endpoints, Some(vec!["ipc:///a".to_string(), "ipc:///b".to_string()]));
        assert_eq!(s.allow_remote_data, Some(false));
        let s = args(&["--config", cfg, "--allow-remote-metrics", "--reload-dir", "/x"]).unwrap();
        assert_eq!((s.allow_remote_metrics, s.reload_dirs), (Some(true), Some(vec![PathBuf::from("/x")])));
    }

    /// The one test that sets variables (they are the process's): file < variable < flag.
    #[test]
    fn a_variable_is_over_the_file_and_under_the_flag() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("serve.toml");
        std::fs::write(&cfg, "queue = 10\nbatch_timeout_us = 11\nbatch_max_queries = 12\n").unwrap();
        std::env::set_var("OFFLOAD_SERVE_BATCH_TIMEOUT_US", "21");
        std::env::set_var("OFFLOAD_SERVE_BATCH_MAX_QUERIES", "22");
        std::env::set_var("OFFLOAD_SERVE_ALLOW_REMOTE_DATA", "true");
        let s = args(&["--config", cfg.to_str().unwrap(), "--batch-max-queries", "32"]);
        std::env::remove_var("OFFLOAD_SERVE_BATCH_TIMEOUT_US");
        std::env::remove_var("OFFLOAD_SERVE_BATCH_MAX_QUERIES");
        std::env::remove_var("OFFLOAD_SERVE_ALLOW_REMOTE_DATA");
        let s = s.unwrap();
        assert_eq!(s.queue, Some(10)); // the file over the default
        assert_eq!(s.batch_timeout_us, Some(21)); // the variable over the file
        assert_eq!(s.batch_max_queries, Some(32)); // the flag over the variable
        assert_eq!(s.allow_remote_data, Some(true));
        assert_eq!(Settings::defaults().batch_timeout_us, Some(200)); // defaults read no variable
    }

    #[test]
    fn bad_arguments_are_one_line_and_help_is_text() {
        let e = args(&["--wrokers", "2"]).unwrap_err();
        let ArgsError::Invalid(e) = e else { panic!("{e:?}") };
        assert!(!e.contains('\n') && e.contains("--wrokers") && e.contains("--workers"), "{e}");
        let ArgsError::Invalid(e) = args(&["--workers", "two"]).unwrap_err() else { panic!() };
        assert!(!e.contains('\n') && e.contains("two") && e.contains("--workers"), "{e}");
        let ArgsError::Invalid(e) = args(&["--config", "/nonexistent/serve.toml"]).unwrap_err() else { panic!() };
        assert!(e.starts_with("/nonexistent/serve.toml: "), "{e}");
        let ArgsError::Show(help) = args(&["--help"]).unwrap_err() else { panic!() };
        for shown in ["[default: 2]", "[default: 200]", "[default: refused]", "OFFLOAD_SERVE_WORKERS", "--endpoint"] {
            assert!(help.contains(shown), "{shown} not in {help}");
        }
        let matcher_help: String = help.split("--matcher").nth(1).unwrap().split("--endpoint").next().unwrap().into();
        for m in MatcherKind::ALL.iter().map(|m| m.as_str()).chain(["gpu", "nfa:<given|asc|desc|h2>"]) {
            assert!(matcher_help.contains(m), "--matcher help lacks {m}: {matcher_help}");
        }
    }

    /// Each bound of [`BOUNDS`] is stated in `--help` and checked from every source: a flag, a
    /// variable (the same parser), the file and `set` ([`check_setting`]).
    #[test]
    fn every_bound_is_stated_in_help_and_checked_from_every_source() {
        let ArgsError::Show(help) = args(&["--help"]).unwrap_err() else { panic!() };
        let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
        for b in &BOUNDS {
            let flag = format!("--{}", b.key.replace('_', "-"));
            let text = help.split(&format!("{flag} <")).nth(1).unwrap_or_else(|| panic!("{flag} not in help"));
            let text = text.split(" --").next().unwrap();
            assert!(text.contains(&format!("[range: {}..={}", b.min, b.max)), "{flag}: {text}");
            let over = (b.max + 1).to_string();
            let ArgsError::Invalid(e) = args(&[&flag, &over]).unwrap_err() else { panic!() };
            assert!(e.contains(&flag) && e.contains(&over) && !e.contains('\n'), "{e}");
            let e = Settings::from_toml(&format!("{} = {over}\n", b.key), Path::new("")).unwrap_err();
            assert!(e.contains(b.key) && e.contains(&format!("{}..={}", b.min, b.max)), "{e}");
            assert!(check_setting(b.key, b.max + 1).is_err() && check_setting(b.key, b.max) == Ok(b.max));
            if b.min > 0 {
                assert!(check_setting(b.key, b.min - 1).is_err());
            }
        }
        let ArgsError::Invalid(e) = args(&["--batch-timeout-us", "18446744073709551615"]).unwrap_err() else {
            panic!()
        };
        assert!(e.contains("--batch-timeout-us"), "{e}");
        let base = Settings { ruletype: Some("a".into()), rules: Some("b".into()), ..Settings::default() };
        let e = Settings { endpoints: Some(vec!["garbage".into()]), ..base.clone() }.resolve().unwrap_err();
        assert!(e.contains("not a ZeroMQ endpoint"), "{e}");
        let e = Settings { control: Some("tcp://x".into()), ..base }.resolve().unwrap_err();
        assert!(e.contains("not a ZeroMQ endpoint"), "{e}");
    }

    #[test]
    fn config_default_is_the_defaults_help_shows() {
        let d = Config::default();
        assert_eq!((d.workers, d.kernels, d.engine_threads, d.queue), (2, 1, 1, 64));
        assert_eq!((d.batch_max_queries, d.batch_timeout_us, d.max_request_bytes), (0, 200, None));
        assert_eq!(d.max_request_queries, 65536);
        assert_eq!(d.endpoints, vec!["tcp://127.0.0.1:5555".to_string()]);
        assert!(d.control.is_none() && d.metrics.is_none());
    }

    #[test]
    fn errors_name_the_line_and_column_and_the_problem() {
        let e = Settings::from_toml("rules = 'r.csv'\nworkers = 'two'\n", Path::new("")).unwrap_err();
        assert!(e.contains("line 2, column 11"), "{e}");
        assert!(e.contains("invalid type"), "{e}");
        let e = Settings::from_toml("wrokers = 2\n", Path::new("")).unwrap_err();
        assert!(e.contains("line 1, column 1") && e.contains("unknown field `wrokers`"), "{e}");
        let e = Settings::from_toml("workers = -1\n", Path::new("")).unwrap_err();
        assert!(e.contains("line 1"), "{e}");
        let e = Settings::from_toml("config = 'other.toml'\n", Path::new("")).unwrap_err();
        assert!(e.contains("unknown field `config`"), "{e}");
    }

    #[test]
    fn the_example_file_loads_and_names_existing_rule_files() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/examples/mct-mini");
        let r = Settings::from_file(&dir.join("serve.toml")).unwrap().resolve().unwrap();
        assert!(r.ruletype.exists() && r.rules.exists());
        assert_eq!((r.config.workers, r.config.kernels, r.config.queue), (2, 1, 64));
        assert_eq!(r.config.control.as_deref(), Some("tcp://127.0.0.1:5556"));
    }

    #[test]
    fn null_is_the_services_own_matcher() {
        let base = Settings { ruletype: Some("a".into()), rules: Some("b".into()), ..Settings::default() };
        let r = Settings { matcher: Some("null".into()), ..base.clone() }.resolve().unwrap();
        assert!(r.config.null_matcher);
        assert!(!base.resolve().unwrap().config.null_matcher);
        assert!("null".parse::<MatcherKind>().is_err(), "the rule engine has no null matcher");
    }

    #[test]
    fn a_device_matcher_batches_self_filling_unless_told_otherwise() {
        let base = Settings { ruletype: Some("a".into()), rules: Some("b".into()), ..Settings::default() };
        let with = |args: &[&str]| {
            let argv = ["offload-serve", "--ruletype", "a", "--rules", "b"].iter().chain(args);
            Settings::from_args(argv.copied()).unwrap().resolve().unwrap().config
        };
        let gpu = with(&["--matcher", "gpu"]);
        assert_eq!((gpu.batch_max_queries, gpu.batch_timeout_us), (DEVICE_BATCH_MAX_QUERIES, 0));
        let given = with(&["--matcher", "gpu", "--batch-max-queries", "0"]);
        assert_eq!((given.batch_max_queries, given.batch_timeout_us), (0, 200), "a given setting stands");
        let sized = with(&["--matcher", "gpu", "--batch-max-queries", "512", "--batch-timeout-us", "50"]);
        assert_eq!((sized.batch_max_queries, sized.batch_timeout_us), (512, 50));
        let cpu = with(&["--matcher", "fast"]);
        assert_eq!((cpu.batch_max_queries, cpu.batch_timeout_us), (0, 200), "a CPU matcher: per request");
        assert!(Settings { matcher: Some("emulated".into()), ..base }.device_matcher());
    }

    #[test]
    fn emulated_needs_its_profile_and_queries_and_only_it_takes_them() {
        let base = Settings { ruletype: Some("a".into()), rules: Some("b".into()), ..Settings::default() };
        let profile = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/plans/whatif/gpu-h200.toml");
        let emulated = Settings {
            matcher: Some("emulated".into()),
            emulate_profile: Some(profile.clone()),
            emulate_queries: Some("q.csv".into()),
            ..base.clone()
        };
        let r = emulated.clone().resolve().unwrap();
        assert_eq!(r.matcher, MatcherKind::Fast);
        let spec = r.emulate.unwrap();
        assert_eq!((spec.profile, spec.queries), (profile.clone(), PathBuf::from("q.csv")));
        assert!(spec.costs.kernel_fixed_s > 0.0 && !r.config.null_matcher);
        let e = Settings { emulate_queries: None, ..emulated.clone() }.resolve().unwrap_err();
        assert!(e.contains("--emulate-queries FILE") && !e.contains('\n'), "{e}");
        let e = Settings { emulate_profile: Some("/nonexistent/p.toml".into()), ..emulated.clone() }.resolve();
        assert!(e.unwrap_err().starts_with("device profile /nonexistent/p.toml: "));
        let e = Settings { matcher: Some("fast".into()), ..emulated }.resolve().unwrap_err();
        assert!(e.contains("are for --matcher emulated"), "{e}");
        assert!(base.resolve().unwrap().emulate.is_none());
        assert!("emulated".parse::<MatcherKind>().is_err(), "the rule engine has no emulated matcher");
        let s = args(&["--matcher", "emulated", "--emulate-profile", "p.toml", "--emulate-queries", "q.csv"]).unwrap();
        assert_eq!(s.emulate_profile.as_deref(), Some(Path::new("p.toml")));
        let s =
            Settings::from_toml("emulate_profile = 'p.toml'\nemulate_queries = '/q.csv'\n", Path::new("/cfg")).unwrap();
        assert_eq!(s.emulate_profile.as_deref(), Some(Path::new("/cfg/p.toml")));
        assert_eq!(s.emulate_queries.as_deref(), Some(Path::new("/q.csv")));
    }

    #[test]
    fn resolve_refuses_what_cannot_run() {
        assert!(Settings::default().resolve().unwrap_err().contains("--ruletype"));
        let base = Settings { ruletype: Some("a".into()), rules: Some("b".into()), ..Settings::default() };
        let e = Settings { workers: Some(0), ..base.clone() }.resolve().unwrap_err();
        assert_eq!(e, "workers 0 is out of range: 1..=256 (worker threads)");
        assert_eq!(Settings { kernels: Some(0), ..base.clone() }.resolve().unwrap().config.kernels, 0, "inline");
        let e = Settings { matcher: Some("quick".into()), ..base.clone() }.resolve().unwrap_err();
        assert!(e.contains("quick"), "{e}");
        let e = Settings { endpoints: Some(vec![]), ..base }.resolve().unwrap_err();
        assert!(e.contains("at least one"), "{e}");
    }

    #[test]
    fn cpus_are_a_list_of_allowed_cpus_or_one_line_saying_which_is_not() {
        let first = allowed_cpus()[0];
        assert_eq!(parse_cpus(&format!("{first},{first}-{first}")).unwrap(), vec![first]);
        for bad in ["", "x", "3-1", "0,,1", "99999"] {
            let e = parse_cpus(bad).unwrap_err();
            assert!(e.starts_with("cpus ") && !e.contains('\n'), "{bad}: {e}");
        }
        assert!(parse_cpus("1023").unwrap_err().contains("not one this process may run on"));
    }
}

#[cfg(test)]
mod frame_bound_tests {
    use super::*;
    use crate::protocol::{encode_request, Payload, RawColumnOwned, Request};

    fn request(n: usize, payload: Payload) -> Vec<u8> {
        let r = Request {
            request_id: 1,
            deadline_us: 0,
            stop_after: 0,
            n_queries: n as u32,
            criteria_fingerprint: 7,
            payload,
        };
        encode_request(&r)
    }

    #[test]
    fn the_derived_frame_bound_holds_the_largest_request_raw_or_encoded_and_stays_in_range() {
        let (criteria, n) = (22, 3000);
        let bound = request_bytes_bound(criteria, n as u64) as usize;
        let value = "x".repeat(RAW_VALUE_BYTES as usize);
        let column = RawColumnOwned {
            offsets: (0..=n as u32).map(|i| i * RAW_VALUE_BYTES as u32).collect(),
            data: value.repeat(n).into_bytes(),
        };
        let raw = request(n, Payload::Raw(vec![column; criteria]));
        let encoded = request(n, Payload::Encoded { encoding_version: 1, width: 22, codes: vec![9; n * criteria] });
        assert!(raw.len() <= bound && encoded.len() < raw.len(), "{} {} {bound}", raw.len(), encoded.len());
        assert!(
            bound < raw.len() + 2 * 4096 + 4 * 22 * 32,
            "{} {bound}: no more than the request and rounding",
            raw.len()
        );
        assert_eq!(bound % 4096, 0);
        assert_eq!(request_bytes_bound(1, 1), MAX_REQUEST_BYTES_MIN);
        assert_eq!(request_bytes_bound(4096, MAX_REQUEST_QUERIES_MAX), MAX_REQUEST_BYTES_MAX);
        let given = Config { max_request_bytes: Some(8192), ..Config::default() };
        assert_eq!((given.frame_bound(22), Config::default().frame_bound(22)), (8192, request_bytes_bound(22, 65536)));
    }
}
