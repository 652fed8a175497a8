//! The brokers: one thread per socket shard, the only one that touches its ROUTER. Each admits
//! requests into the queues or refuses them (busy, shutting down), answers dictionary requests,
//! forwards the workers' and executors' replies to its clients and drains on stop; shard 0's
//! also answers the control socket. Here too: binding the shards, which share each data
//! endpoint's listening socket (so a client needs to know nothing of them).

use super::batching::{run_inline, BatchPolicy, Pending};
use super::control::{bind_control, control_command};
use super::executors::Scratch;
use super::ipc_files::{bind_endpoint, claim_ipc, ipc_path, IpcFile};
use super::job::{send_frames, Body, Envelope, Frames, Job, Out};
use super::shm_front::is_shm;
use super::{snapshot, zerr, Current, Queues, Served};
use crate::auth;
use crate::config::{Config, Security};
use crate::handoff::Refused;
use crate::metrics::Counters;
use crate::protocol::{self, Reply, Status};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One socket shard's sockets. Fields drop in order: the sockets close before their IPC files go.
pub(super) struct Sockets {
    /// ROUTER on the data endpoints: requests in, replies out (only its broker touches it).
    pub(super) front: zmq::Socket,
    /// PULL on inproc: replies and refusals from the workers and executors, to forward.
    pub(super) back: zmq::Socket,
    /// REP on the control endpoint, if any (shard 0 only).
    pub(super) control: Option<zmq::Socket>,
    /// Removes the IPC socket files this daemon bound once it stops (libzmq leaves them; shard 0).
    pub(super) _files: Vec<IpcFile>,
}

/// The inproc endpoint where the workers and executors send shard `shard`'s replies.
pub(super) fn replies_endpoint(shard: usize) -> String {
    format!("inproc://offload-replies-{shard}")
}

/// Binds `cfg.shards` ROUTERs on the data endpoints (with CURVE where the data clients are
/// given), each with its inproc reply socket, and the control endpoint (on shard 0). The
/// context has one I/O thread per shard, and shard i's connections are handled by I/O thread i.
pub(super) fn bind(ctx: &zmq::Context, cfg: &Config) -> Result<Vec<Sockets>, String> {
    let shards = cfg.shards.max(1);
    let mut fronts = (0..shards).map(|i| router(ctx, cfg, i)).collect::<Result<Vec<_>, _>>()?;
    let mut files: Vec<IpcFile> = Vec::new();
    for ep in cfg.endpoints.iter().filter(|ep| !is_shm(ep)) {
        files.push(match &mut fronts[..] {
            [front] => bind_endpoint(front, ep)?,
            fronts => bind_shared(fronts, ep)?,
        });
    }
    let mut out = Vec::new();
    for (i, front) in fronts.into_iter().enumerate() {
        let back = ctx.socket(zmq::PULL).map_err(|e| zerr("PULL socket", e))?;
        back.bind(&replies_endpoint(i)).map_err(|e| zerr("bind inproc", e))?;
        out.push(Sockets { front, back, control: None, _files: Vec::new() });
    }
    if let Some((sock, file)) = cfg.control.as_deref().map(|ep| bind_control(ctx, ep, &cfg.security)).transpose()? {
        files.push(file);
        out[0].control = Some(sock);
    }
    out[0]._files = files;
    Ok(out)
}

/// Shard `shard`'s ROUTER, set up but not bound.
fn router(ctx: &zmq::Context, cfg: &Config, shard: usize) -> Result<zmq::Socket, String> {
    let front = ctx.socket(zmq::ROUTER).map_err(|e| zerr("ROUTER socket", e))?;
    front.set_router_mandatory(true).map_err(|e| zerr("ROUTER_MANDATORY", e))?;
    front.set_linger(0).map_err(|e| zerr("linger", e))?;
    // The shard's connections (the engines libzmq creates as it accepts) run on I/O thread `shard`.
    front.set_affinity(1u64 << (shard % 64)).map_err(|e| zerr("affinity", e))?;
    // A frame over the bound is dropped by libzmq's decoder as its size header arrives: the
    // connection closes and nothing of it is held (the client sees no reply).
    let bound = cfg.max_request_bytes.unwrap_or(crate::config::MAX_REQUEST_BYTES_MAX); // run_with derived it
    let max_bytes = i64::try_from(bound).unwrap_or(i64::MAX);
    front.set_maxmsgsize(max_bytes).map_err(|e| zerr("maxmsgsize", e))?;
    if let (Some(curve), Some(_)) = (&cfg.security.curve, &cfg.security.data_clients) {
        curve.apply(&front, auth::DATA_DOMAIN)?;
    }
    Ok(front)
}

/// Binds every shard's ROUTER to `endpoint` through one listening socket made here (ZMQ_USE_FD,
/// a duplicate of it each): a connection goes to the shard whose I/O thread accepts it first,
/// so an idle shard tends to take the next one. The socket is non-blocking, so the shards that
/// lose the race see EAGAIN, which libzmq ignores. TCP (an IP address or `*`) and IPC paths.
fn bind_shared(fronts: &mut [zmq::Socket], endpoint: &str) -> Result<IpcFile, String> {
    use std::os::fd::{IntoRawFd, OwnedFd};
    let (listener, file): (OwnedFd, IpcFile) = if let Some(path) = ipc_path(endpoint) {
        claim_ipc(endpoint)?;
        let l = std::os::unix::net::UnixListener::bind(&path).map_err(|e| format!("bind {endpoint}: {e}"))?;
        l.set_nonblocking(true).map_err(|e| format!("bind {endpoint}: {e}"))?;
        (l.into(), IpcFile::bound(endpoint))
    } else if let Some(addr) = endpoint.strip_prefix("tcp://") {
        let addr = tcp_address(addr).ok_or_else(|| {
            format!("bind {endpoint}: with shards > 1 a TCP endpoint is tcp://IP:PORT or tcp://*:PORT")
        })?;
        let l = std::net::TcpListener::bind(addr).map_err(|e| format!("bind {endpoint}: {e}"))?;
        l.set_nonblocking(true).map_err(|e| format!("bind {endpoint}: {e}"))?;
        (l.into(), IpcFile::bound(endpoint))
    } else {
        return Err(format!("bind {endpoint}: with shards > 1 an endpoint is tcp:// or an ipc:// path"));
    };
    for front in fronts.iter_mut() {
        let fd = listener.try_clone().map_err(|e| format!("bind {endpoint}: dup: {e}"))?;
        set_use_fd(front, fd.into_raw_fd())?; // the ROUTER owns the duplicate from here on
        front.bind(endpoint).map_err(|e| zerr(&format!("bind {endpoint}"), e))?;
    }
    Ok(file)
}

/// `IP:PORT` or `*:PORT` (IPv6 in brackets) as a socket address; None for names libzmq would
/// resolve (interfaces, hosts), which the sharded bind does not.
fn tcp_address(addr: &str) -> Option<std::net::SocketAddr> {
    let addr = addr.strip_prefix("*:").map_or_else(|| addr.to_string(), |port| format!("0.0.0.0:{port}"));
    addr.parse().ok()
}

/// ZMQ_USE_FD: the next bind of `sock` listens on `fd` (already bound and listening) instead of
/// a socket of its own; libzmq closes it with the socket.
fn set_use_fd(sock: &mut zmq::Socket, fd: std::os::fd::RawFd) -> Result<(), String> {
    let opt = zmq_sys::ZMQ_USE_FD as std::os::raw::c_int;
    // SAFETY: the pointer is the live socket `sock` borrows mutably (open for the whole call,
    // used by no other thread meanwhile); the option value points to an `int` on this stack
    // frame with its exact size, which libzmq copies before returning; ZMQ_USE_FD takes an int.
    let rc = unsafe {
        zmq_sys::zmq_setsockopt(
            sock.as_mut_ptr(),
            opt,
            (&fd as *const std::os::fd::RawFd).cast(),
            std::mem::size_of::<std::os::fd::RawFd>(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(format!("ZMQ_USE_FD: {}", std::io::Error::last_os_error()))
    }
}

/// A broker: the one thread that touches its shard's ROUTER. It admits requests into the
/// bounded queues (or refuses them: busy, shutting down), forwards replies, and (shard 0)
/// answers the control socket.
pub(super) struct Broker<'a> {
    /// Which socket shard: its clients' replies come back on [`replies_endpoint`]`(shard)`.
    pub(super) shard: usize,
    pub(super) sockets: Sockets,
    pub(super) current: Current,
    pub(super) counters: Arc<Counters>,
    pub(super) policy: Arc<BatchPolicy>,
    pub(super) security: &'a Security,
    /// The queues; `None` once stopping (workers and executors then drain them and exit).
    pub(super) queues: Option<Queues>,
    /// Inline mode: the broker's batch buffers and engine threads.
    pub(super) scratch: Scratch,
    pub(super) engine_threads: usize,
    /// A reload runs off the broker's thread; its answer is owed on the control socket.
    pub(super) pending_reload: Option<std::sync::mpsc::Receiver<String>>,
}

impl Broker<'_> {
    /// Brokers until `stop`, then until the pipeline has drained (`pipeline_running` threads
    /// left: none) and the front is quiet.
    pub(super) fn run(mut self, stop: &AtomicBool, pipeline_running: &AtomicUsize) -> Result<(), String> {
        let mut leave_by: Option<Instant> = None;
        loop {
            self.send_reload_answer();
            if stop.load(Ordering::Relaxed) {
                self.queues = None; // workers, then executors, drain their queues, see them closed and exit
            }
            if self.queues.is_none() && pipeline_running.load(Ordering::Acquire) == 0 {
                // Forward what the workers sent last. Requests still arriving are answered
                // "shutting down" below until the front has been quiet for a moment (at most
                // DRAIN_MAX), so a client that sent just before the signal gets an answer, not
                // a timeout; then leave.
                self.forward_replies();
                let leave_by = *leave_by.get_or_insert_with(|| Instant::now() + DRAIN_MAX);
                let quiet = self.sockets.front.poll(zmq::POLLIN, DRAIN_QUIET_MS).map_or(true, |n| n == 0);
                if quiet || Instant::now() > leave_by {
                    // Give the last replies time to leave before the socket closes.
                    let _ = self.sockets.front.set_linger(1000);
                    return Ok(());
                }
            }
            self.poll_once()?;
        }
    }

    /// Waits up to 50 ms (5 while a reload answer is owed) and handles what is readable.
    pub(super) fn poll_once(&mut self) -> Result<(), String> {
        let s = &self.sockets;
        // The control socket is read only while no reload answer is owed (REP: one at a time).
        let mut items = vec![s.front.as_poll_item(zmq::POLLIN), s.back.as_poll_item(zmq::POLLIN)];
        if let (Some(c), None) = (&s.control, &self.pending_reload) {
            items.push(c.as_poll_item(zmq::POLLIN));
        }
        let timeout = if self.pending_reload.is_some() { 5 } else { 50 };
        match zmq::poll(&mut items, timeout) {
            // A signal (SIGTERM, SIGINT) interrupts the poll: the loop then sees `stop`.
            Err(zmq::Error::EINTR) => return Ok(()),
            other => other.map_err(|e| zerr("poll", e))?,
        };
        let readable: Vec<bool> = items.iter().map(|i| i.is_readable()).collect();
        drop(items);
        if readable[1] {
            self.forward_replies();
        }
        if readable.get(2) == Some(&true) {
            self.answer_control();
        }
        if readable[0] {
            self.admit_requests();
        }
        Ok(())
    }

    pub(super) fn send_reload_answer(&mut self) {
        if let Some(Ok(answer)) = self.pending_reload.as_ref().map(|rx| rx.try_recv()) {
            if let Some(c) = &self.sockets.control {
                let _ = c.send(answer.as_bytes(), 0);
            }
            self.pending_reload = None;
        }
    }

    /// Replies and refusals from the workers and executors, out through the ROUTER.
    pub(super) fn forward_replies(&self) {
        while let Ok(parts) = recv_frames(&self.sockets.back) {
            send_frames(&self.sockets.front, parts, &self.counters);
        }
    }

    pub(super) fn answer_control(&mut self) {
        let Some(c) = &self.sockets.control else { return };
        if let Ok(frames) = c.recv_multipart(zmq::DONTWAIT) {
            match control_command(frames, &self.current, &self.counters, &self.policy, self.security) {
                Ok(answer) => {
                    let _ = c.send(answer.as_bytes(), 0);
                }
                Err(rx) => self.pending_reload = Some(rx),
            }
        }
    }

    /// Takes every waiting request into its queue, or refuses it at once: busy when the queue
    /// is full, shutting down once stopping. A dictionary request is answered here.
    pub(super) fn admit_requests(&mut self) {
        let (front, counters) = (&self.sockets.front, &self.counters);
        let mut served: Option<Arc<Served>> = None;
        // Inline mode: the pre-encoded requests read now, matched on this thread below.
        let mut inline: Vec<Pending> = Vec::new();
        let shard_requests = counters.shard_requests.get(self.shard);
        while let Ok(mut parts) = recv_frames(front) {
            let received = Instant::now();
            if let Some(n) = shard_requests {
                n.fetch_add(1, Ordering::Relaxed);
            }
            let body = Body::Msg(parts.pop().unwrap_or_else(zmq::Message::new));
            let served = served.get_or_insert_with(|| snapshot(&self.current));
            let job = Job { envelope: Envelope::Zmq(self.shard, parts), body, received };
            if let Some(p) = admit_one(job, served, self.queues.as_ref(), counters, Out::Front(front)) {
                inline.push(p);
            }
        }
        let out = Out::Front(&self.sockets.front);
        run_inline(inline, &self.current, &self.counters, &self.policy, self.engine_threads, &mut self.scratch, out);
    }
}

/// Admits one request a front end (the broker, the shm thread) received: answers a dictionary
/// request, refuses (busy, shutting down) or puts it in its queue: raw ones to the workers,
/// pre-encoded ones to the executors, or, in inline mode, returns them to be matched on the
/// calling thread. A frame that must outlive the front end's read (queued) is owned by then.
pub(super) fn admit_one(
    job: Job,
    served: &Served,
    queues: Option<&Queues>,
    counters: &Counters,
    out: Out<'_>,
) -> Option<Pending> {
    if protocol::is_dictionary_request(&job.body) {
        out.send(job.envelope, dictionary_reply(served, &job.body), counters);
        return None;
    }
    counters.requests.fetch_add(1, Ordering::Relaxed);
    let refuse = |status: Status, msg: &str, (envelope, id): (Envelope, u64)| {
        let reply = Reply::status_only(id, status, served.version, msg);
        counters.count(status);
        out.send(envelope, protocol::encode_reply(&reply), counters);
    };
    let Some(queues) = queues else {
        refuse(Status::ShuttingDown, "the server is shutting down", job.refusal());
        return None;
    };
    let n_queries = u64::from(protocol::peek_n_queries(&job.body));
    if n_queries > queues.max_request_queries {
        let why = format!(
            "the request carries {n_queries} queries; this daemon takes at most {} a request (max_request_queries): \
             split it",
            queues.max_request_queries
        );
        refuse(Status::BadRequest, &why, job.refusal());
        return None;
    }
    let refused = if protocol::peek_layout(&job.body).is_some_and(|l| l != protocol::LAYOUT_RAW) {
        let Some(kernels) = &queues.kernels else {
            return Some(Pending::Encoded(job)); // inline: read in place by the caller's thread
        };
        kernels.try_push(Pending::Encoded(job.owned())).map_err(|r| r.map(Pending::refusal))
    } else {
        queues.requests.try_push(job.owned()).map_err(|r| r.map(Job::refusal))
    };
    match refused {
        Ok(()) => {}
        Err(Refused::Full(to)) => refuse(Status::Busy, "queue full: retry later or elsewhere", to),
        Err(Refused::Closed(to)) => refuse(Status::ShuttingDown, "the server is shutting down", to),
    }
    None
}

/// The answer to a dictionary request: what a client needs to encode queries for the version
/// served now (the bytes are built once per version, on first request).
pub(super) fn dictionary_reply(served: &Served, body: &[u8]) -> Vec<u8> {
    let id = protocol::peek_request_id(body);
    let (dictionary, code_bits) = served.dictionary();
    protocol::encode_dictionary_reply(&protocol::DictionaryReply {
        request_id: id,
        status: Status::Ok,
        ruleset_version: served.version,
        criteria_fingerprint: served.criteria_fingerprint,
        code_bits: *code_bits,
        dictionary: dictionary.clone(),
        message: String::new(),
    })
}

/// At shutdown, the front must be quiet this long (ms) before the daemon leaves, and it leaves
/// after `DRAIN_MAX` in any case.
pub(super) const DRAIN_QUIET_MS: i64 = 100;

pub(super) const DRAIN_MAX: Duration = Duration::from_secs(2);

/// Receives one multipart message without waiting (`Err(EAGAIN)` when none is there).
pub(super) fn recv_frames(sock: &zmq::Socket) -> Result<Frames, zmq::Error> {
    let mut parts = vec![sock.recv_msg(zmq::DONTWAIT)?];
    while parts.last().is_some_and(|m| m.get_more()) {
        parts.push(sock.recv_msg(0)?);
    }
    Ok(parts)
}
