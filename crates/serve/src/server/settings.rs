//! What the daemon runs with: [`Config`] (endpoints, threads, queue, batching, the frame bound)
//! and [`Security`] (who may reach which socket). `config::Settings` fills them from flags and files.

use super::*;

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
    /// its sender's connection before the daemon holds it.
    pub max_request_bytes: u64,
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
