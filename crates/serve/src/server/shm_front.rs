//! The daemon's front end for shared-memory clients (`shm://`): binds their endpoints, and a
//! thread reads every client's request ring and admits each request as the broker does.

use super::batching::{run_inline, BatchPolicy, Pending};
use super::broker::admit_one;
use super::executors::Scratch;
use super::job::{Body, Envelope, Job, Out};
use super::{snapshot, Current, Queues, Served};
use crate::config::Config;
use crate::metrics::Counters;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

pub(super) fn is_shm(endpoint: &str) -> bool {
    endpoint.starts_with("shm://")
}

/// Binds the `shm://` endpoints (their socket files, claimed as IPC files are); all their
/// clients ring the first one's doorbell.
pub(super) fn bind_shm(cfg: &Config) -> Result<Vec<crate::shm::Bound>, String> {
    let mut bound: Vec<crate::shm::Bound> = Vec::new();
    for ep in cfg.endpoints.iter().filter(|ep| is_shm(ep)) {
        let first = bound.first().map(|b| b.hub.clone());
        bound.push(crate::shm::bind(ep, first.as_ref())?);
    }
    Ok(bound)
}

/// Starts the shared-memory front end (the thread that reads the clients' rings) and the
/// acceptor, if any `shm://` endpoint is bound; both count as the `shm` role. They run until
/// `done` (set once the broker has drained): after `stop` new requests get "shutting down".
pub(super) fn start_shm(
    bound: Vec<crate::shm::Bound>,
    cfg: &Config,
    current: &Current,
    counters: &Arc<Counters>,
    policy: &Arc<BatchPolicy>,
    queues: &Queues,
    (stop, done): (&Arc<AtomicBool>, &Arc<AtomicBool>),
) -> Result<Vec<std::thread::JoinHandle<()>>, String> {
    if bound.is_empty() {
        return Ok(Vec::new());
    }
    let front = ShmFront {
        clients: crate::shm::Clients::new(
            bound.iter().map(|b| b.hub.clone()).collect(),
            cfg.max_request_bytes.unwrap_or(crate::config::MAX_REQUEST_BYTES_MAX),
        ), // run_with derived it
        current: current.clone(),
        counters: counters.clone(),
        policy: policy.clone(),
        queues: Some(queues.clone()),
        engine_threads: cfg.engine_threads.max(1),
        scratch: Scratch::default(),
    };
    let role = crate::metrics::Role::Shm;
    let (c1, c2, stop, d1, d2) = (counters.clone(), counters.clone(), stop.clone(), done.clone(), done.clone());
    let spawn = |name: &str, body: Box<dyn FnOnce() + Send>| {
        std::thread::Builder::new().name(name.into()).spawn(body).map_err(|e| format!("spawn {name}: {e}"))
    };
    let reader = spawn(
        "offload-shm",
        Box::new(move || {
            c1.cpu.register_me(role);
            front.run(&stop, &d1)
        }),
    )?;
    let acceptor = spawn(
        "offload-shm-accept",
        Box::new(move || {
            c2.cpu.register_me(role);
            crate::shm::acceptor(bound, &d2)
        }),
    )?;
    Ok(vec![reader, acceptor])
}

/// The front end of the shared-memory clients, on its own thread: it reads every client's
/// request ring, admits each request as the broker does (dictionary, busy, shutting down, the
/// queues), and in inline mode matches the pre-encoded ones in place and writes the replies
/// into the clients' reply rings. Workers and executors write their replies there directly.
pub(super) struct ShmFront {
    pub(super) clients: crate::shm::Clients,
    pub(super) current: Current,
    pub(super) counters: Arc<Counters>,
    pub(super) policy: Arc<BatchPolicy>,
    pub(super) queues: Option<Queues>,
    pub(super) engine_threads: usize,
    pub(super) scratch: Scratch,
}

/// Frames the shm thread reads in one round before it answers them.
pub(super) const SHM_ROUND_MAX: usize = 4096;

impl ShmFront {
    pub(super) fn run(mut self, stop: &AtomicBool, done: &AtomicBool) {
        while !done.load(Ordering::Relaxed) {
            if stop.load(Ordering::Relaxed) {
                self.queues = None; // the workers and executors may then drain and exit
            }
            self.clients.refresh();
            let (current, counters, queues) = (&self.current, &*self.counters, self.queues.as_ref());
            let mut served: Option<Arc<Served>> = None;
            let mut inline: Vec<Pending> = Vec::new();
            let n = self.clients.read(SHM_ROUND_MAX, |crate::shm::Incoming::Frame(peer, frame)| {
                let served = served.get_or_insert_with(|| snapshot(current));
                let job = Job { envelope: Envelope::Shm(peer), body: Body::Ring(frame), received: Instant::now() };
                inline.extend(admit_one(job, served, queues, counters, Out::ShmOnly));
            });
            if n == 0 {
                self.clients.idle_wait();
                continue;
            }
            let out = Out::ShmOnly;
            run_inline(inline, current, counters, &self.policy, self.engine_threads, &mut self.scratch, out);
            self.clients.release(); // every frame read is answered or owned by now
        }
        self.clients.close_all();
    }
}
