//! The daemon: a ZeroMQ ROUTER front end (TCP and/or IPC), a bounded request queue, w worker
//! threads that decode, batch and encode, and k kernel executors that match with e engine
//! threads each (the seed's `Np Nw Nk Ne`; p is the number of client processes).
//!
//! ```text
//! clients ──DEALER/REQ──▶ ROUTER (broker) ──request queue──▶ w workers ──kernel queue──▶ k executors
//!                            ▲                                   │ refusals                │ replies
//!                            └──────── inproc PULL ◀──── PUSH ───┴─────────────────────────┘
//! ```
//! ZeroMQ sockets are not thread-safe, so only the broker touches the ROUTER; workers and
//! executors hand replies back over inproc. ROUTER_MANDATORY is set so a reply to a vanished client is an
//! error we count, not a silent drop. When the queue is full the broker answers "busy" at once;
//! a request whose deadline has passed is answered "deadline exceeded" without being executed.
//! On SIGINT/SIGTERM (or `stop`), new requests get "shutting down", queued ones are finished and
//! answered, then the threads exit.
//!
//! Clients on this host may come over shared memory instead (`shm://`, [`crate::shm`]): the shm
//! thread reads their request rings and admits each request as the broker does (the same queues,
//! refusals and, in inline mode, matching in place); whoever answers writes the reply straight
//! into the client's reply ring (an `Envelope::Shm`), so no reply of theirs passes the broker.
//!
//! One file per concern: `security` (exposure checks, ZAP), `control` (stats, set, reload),
//! `broker` (the ROUTER's thread, binding, draining), `shm_front` (the shared-memory clients'
//! thread), `ipc_files` (socket files claimed and removed), `job` (a request and where its reply
//! goes), `workers`, `executors`, `batching`; here: the rule set served, and starting and joining
//! the pipeline. What it runs with
//! ([`Config`], [`Security`]) lives in [`crate::config`] with the settings that fill it, the
//! counters in [`crate::metrics`].

use crate::auth;
use crate::handoff::{HandOff, Producer};
pub use crate::metrics::Counters;
use crate::protocol;
use offload_rules::{Engine, MatcherKind};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

mod batching;
mod broker;
mod control;
mod executors;
mod ipc_files;
mod job;
mod security;
mod shm_front;
mod workers;

pub use crate::config::{Config, Security};
pub use batching::BatchPolicy;
pub use control::criteria_change;
pub use ipc_files::claim_ipc;
pub use security::check_exposure;

use batching::Pending;
use broker::{bind, replies_endpoint, Broker};
use executors::{kernel_executor, Scratch};
use job::Job;
use security::start_zap;
use shm_front::{bind_shm, start_shm};
use workers::worker;

/// A compiled rule set with the version every reply names.
pub struct Served {
    pub engine: Engine,
    pub version: u64,
    pub matcher: MatcherKind,
    /// [`protocol::rule_type_fingerprint`] of the engine's rule type: what requests must carry.
    pub criteria_fingerprint: u64,
    /// The encoding dictionary's bytes and code width, built on the first dictionary request.
    dictionary: std::sync::OnceLock<(Vec<u8>, u8)>,
}

impl Served {
    pub fn new(engine: Engine, version: u64, matcher: MatcherKind) -> Served {
        let criteria_fingerprint = protocol::rule_type_fingerprint(&engine.rules().rule_type);
        Served { engine, version, matcher, criteria_fingerprint, dictionary: std::sync::OnceLock::new() }
    }

    /// The encoding dictionary of this version, as a dictionary reply carries it, and the code
    /// width (16 or 32 bits) every query fits in.
    pub fn dictionary(&self) -> &(Vec<u8>, u8) {
        self.dictionary.get_or_init(|| {
            let d = self.engine.encoder.dictionary();
            (d.to_bytes(), d.max_code_bits())
        })
    }

    /// The criteria, as a person reads them: `CTN_TYPE (equ), APT (equ), ...`.
    fn criteria_names(&self) -> String {
        let c = &self.engine.rules().rule_type.criteria;
        c.iter().map(|c| c.code.as_str()).collect::<Vec<_>>().join(", ")
    }
}

/// The rule set being served. A reload builds a new [`Served`] off the hot path and swaps the
/// `Arc` under the write lock; a worker takes one `Arc` per request, so every answer of a
/// request comes from one version and names it.
pub type Current = Arc<RwLock<Arc<Served>>>;

pub(crate) fn snapshot(current: &Current) -> Arc<Served> {
    current.read().unwrap_or_else(|p| p.into_inner()).clone()
}

/// What the null matcher's daemon says at start and in `stats`.
pub use crate::benchmark_only::null::NOTE as NULL_MATCHER_NOTE;

fn now_unix_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

fn zerr(what: &str, e: zmq::Error) -> String {
    format!("{what}: {e}")
}

/// Serves until `stop` becomes true; returns the final counters.
pub fn run(current: Current, cfg: &Config, stop: Arc<AtomicBool>) -> Result<Arc<Counters>, String> {
    run_with(current, cfg, stop, |_| {})
}

/// [`run`], calling `ready` once every endpoint is bound (and not before: a bind that fails
/// means the daemon never said it was serving). The steps: bind, start the pipeline, broker
/// until stopped and drained, join.
pub fn run_with(
    current: Current,
    cfg: &Config,
    stop: Arc<AtomicBool>,
    ready: impl FnOnce(&Served),
) -> Result<Arc<Counters>, String> {
    check_exposure(cfg)?;
    // The frame bound, derived from the rule type served unless given.
    let criteria = snapshot(&current).engine.rules().rule_type.criteria.len();
    let cfg = &Config { max_request_bytes: Some(cfg.frame_bound(criteria)), ..cfg.clone() };
    let shards = cfg.shards.max(1);
    let shard_requests = (0..shards).map(|_| AtomicU64::new(0)).collect();
    let counters = Arc::new(Counters { null_matcher: cfg.null_matcher, shard_requests, ..Counters::default() });
    if cfg.null_matcher {
        eprintln!("warning: {NULL_MATCHER_NOTE}");
    }
    counters.cpu.register_me(crate::metrics::Role::Broker); // the broker runs on this thread
    let io_before = crate::metrics::zmq_io_threads();
    let ctx = zmq::Context::new();
    // One I/O thread per socket shard (set before the first socket starts them).
    ctx.set_io_threads(i32::try_from(shards).unwrap_or(i32::MAX)).map_err(|e| zerr("io threads", e))?;
    // Declared before the sockets, so dropped after them: no CURVE socket outlives its handler.
    let _zap = start_zap(&ctx, &cfg.security, &counters)?;
    let sockets = bind(&ctx, cfg)?;
    for tid in crate::metrics::new_zmq_io_threads(&io_before) {
        counters.cpu.register(crate::metrics::Role::ZmqIo, tid);
    }
    let policy = Arc::new(BatchPolicy {
        max_queries: AtomicU64::new(cfg.batch_max_queries),
        timeout_us: AtomicU64::new(cfg.batch_timeout_us),
    });
    let metrics_thread = match &cfg.metrics {
        Some(addr) => {
            let served = current.clone();
            let version = Box::new(move || snapshot(&served).version);
            let page = crate::metrics::Page { counters: counters.clone(), version };
            let (addr, _) = auth::metrics_address(addr)?;
            Some(crate::metrics::serve_http(&addr, stop.clone(), page)?)
        }
        None => None,
    };
    let shm_bound = bind_shm(cfg)?;
    let Pipeline { queues, threads, running } = start_pipeline(cfg, &ctx, &current, &counters, &policy)?;
    let shm_done = Arc::new(AtomicBool::new(false));
    let shm_threads = start_shm(shm_bound, cfg, &current, &counters, &policy, &queues, (&stop, &shm_done))?;
    ready(&snapshot(&current)); // every endpoint is bound: now the daemon may say it serves
    let brokers: Vec<Broker> = (sockets.into_iter().enumerate())
        .map(|(shard, sockets)| Broker {
            shard,
            sockets,
            current: current.clone(),
            counters: counters.clone(),
            policy: policy.clone(),
            security: &cfg.security,
            queues: Some(queues.clone()),
            scratch: Scratch::default(),
            engine_threads: cfg.engine_threads.max(1),
            pending_reload: None,
        })
        .collect();
    drop(queues); // the brokers hold the queues now: once each has let go, the pipeline drains
    let brokered = run_brokers(brokers, &stop, &running, &counters);
    shm_done.store(true, Ordering::Relaxed); // the shm front end and acceptor close their clients
    for t in threads.into_iter().chain(metrics_thread).chain(shm_threads) {
        let _ = t.join();
    }
    brokered.map(|()| counters)
}

/// Runs shard 0's broker on this thread and the others on threads of their own, until `stop`
/// and the pipeline has drained; the first error of any.
fn run_brokers(
    brokers: Vec<Broker>,
    stop: &Arc<AtomicBool>,
    running: &AtomicUsize,
    counters: &Counters,
) -> Result<(), String> {
    std::thread::scope(|scope| {
        let mut brokers = brokers.into_iter();
        let first = brokers.next().ok_or("no socket shard")?;
        let mut others = Vec::new();
        let mut spawned = Ok(());
        for broker in brokers {
            let name = format!("offload-broker-{}", broker.shard);
            let body = move || {
                counters.cpu.register_me(crate::metrics::Role::Broker);
                broker.run(stop, running)
            };
            match std::thread::Builder::new().name(name.clone()).spawn_scoped(scope, body) {
                Ok(t) => others.push(t),
                Err(e) => {
                    spawned = Err(format!("spawn {name}: {e}"));
                    stop.store(true, Ordering::Relaxed); // the shards started drain and stop
                    break;
                }
            }
        }
        let mut result = first.run(stop, running).and(spawned);
        for t in others {
            result = result.and(t.join().unwrap_or_else(|_| Err("a broker thread panicked".into())));
        }
        result
    })
}

/// Where the broker puts what it admits: raw requests go to the workers, pre-encoded ones
/// straight to the kernel executors (nothing to encode: one thread hand-off fewer). In inline
/// mode (`kernels == 0`) there are no executors: the broker matches pre-encoded requests on its
/// own thread and the workers match what they encode.
#[derive(Clone)]
struct Queues {
    requests: Producer<Job>,
    kernels: Option<Producer<Pending>>,
    /// A request announcing more queries than this is answered `BadRequest` at admission.
    max_request_queries: u64,
}

/// Starts k kernel executors and w workers. Workers and executors exit in turn once the queues they read
/// are closed and drained.
fn start_pipeline(
    cfg: &Config,
    ctx: &zmq::Context,
    current: &Current,
    counters: &Arc<Counters>,
    policy: &Arc<BatchPolicy>,
) -> Result<Pipeline, String> {
    // Both queues hold `queue` requests; the broker answers "busy" when the one a request
    // goes to is full.
    let (requests_rx, requests) = HandOff::<Job>::new(cfg.queue.max(1));
    let (kernels_rx, kernels) = HandOff::<Pending>::new(cfg.queue.max(1));
    let kernels = (cfg.kernels > 0).then_some(kernels); // dropped in inline mode: nothing reads it
    let mut threads = Vec::new();
    let running = Arc::new(AtomicUsize::new(0));
    // Each thread registers its CPU clock first; the daemon says it serves once all have.
    let (registered, all_registered) = std::sync::mpsc::channel::<()>();
    let mut start = |name: String, role, body: Box<dyn FnOnce() + Send>| -> Result<(), String> {
        let (registered, counters) = (registered.clone(), counters.clone());
        running.fetch_add(1, Ordering::AcqRel);
        let still_running = StillRunning(running.clone()); // counts down as the thread ends, even in a panic
        let thread = std::thread::Builder::new().name(name.clone()).spawn(move || {
            let _still_running = still_running;
            counters.cpu.register_me(role);
            let _ = registered.send(());
            body()
        });
        threads.push(thread.map_err(|e| format!("spawn {name}: {e}"))?);
        Ok(())
    };
    let e = cfg.engine_threads.max(1);
    for i in 0..cfg.kernels {
        let pushes = reply_sockets(ctx, cfg.shards).ok_or("kernel executor: no inproc reply socket")?;
        let (queue, current, counters, policy) =
            (kernels_rx.clone(), current.clone(), counters.clone(), policy.clone());
        let body = move || kernel_executor(queue, pushes, current, counters, policy, e);
        start(format!("offload-kernel-{i}"), crate::metrics::Role::Executor, Box::new(body))?;
    }
    for i in 0..cfg.workers.max(1) {
        let pushes = reply_sockets(ctx, cfg.shards).ok_or("worker: no inproc reply socket")?;
        let (requests, kernels, current, counters) =
            (requests_rx.clone(), kernels.clone(), current.clone(), counters.clone());
        let body = move || worker(requests, kernels, pushes, current, counters, e);
        start(format!("offload-worker-{i}"), crate::metrics::Role::Worker, Box::new(body))?;
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    for _ in 0..threads.len() {
        // A thread slow to start is counted when it registers (or never, past the deadline).
        if all_registered.recv_timeout(deadline.saturating_duration_since(Instant::now())).is_err() {
            break;
        }
    }
    let queues = Queues { requests, kernels, max_request_queries: cfg.max_request_queries };
    Ok(Pipeline { queues, threads, running })
}

/// The started pipeline: its queues' sending ends, its threads and how many still run.
struct Pipeline {
    queues: Queues,
    threads: Vec<std::thread::JoinHandle<()>>,
    running: Arc<AtomicUsize>,
}

/// A pipeline thread that has not ended yet: one of `running`, until dropped.
struct StillRunning(Arc<AtomicUsize>);

impl Drop for StillRunning {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A worker's or executor's way back to each shard's broker: PUSH `i` to shard `i`.
fn reply_sockets(ctx: &zmq::Context, shards: usize) -> Option<Vec<zmq::Socket>> {
    (0..shards.max(1))
        .map(|shard| {
            let push = ctx.socket(zmq::PUSH).ok()?;
            push.connect(&replies_endpoint(shard)).ok()?;
            Some(push)
        })
        .collect()
}
