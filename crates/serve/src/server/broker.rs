//! The broker: the one thread that touches the ROUTER. It binds the sockets, admits requests
//! into the queues or refuses them (busy, shutting down), answers dictionary requests, forwards
//! the workers' and executors' replies, answers the control socket and drains on stop.

use super::batching::{run_inline, BatchPolicy, Pending};
use super::control::{bind_control, control_command};
use super::executors::Scratch;
use super::ipc_files::{bind_endpoint, IpcFile};
use super::job::{send_frames, Body, Envelope, Frames, Job, Out};
use super::shm_front::is_shm;
use super::{snapshot, zerr, Current, Queues, Served};
use crate::auth;
use crate::config::{Config, Security};
use crate::handoff::Refused;
use crate::metrics::Counters;
use crate::protocol::{self, Reply, Status};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The daemon's sockets. Fields drop in order: the sockets close before their IPC files go.
pub(super) struct Sockets {
    /// ROUTER on the data endpoints: requests in, replies out (only the broker touches it).
    pub(super) front: zmq::Socket,
    /// PULL on inproc: replies and refusals from the workers and executors, to forward.
    pub(super) back: zmq::Socket,
    /// REP on the control endpoint, if any.
    pub(super) control: Option<zmq::Socket>,
    /// Removes the IPC socket files this daemon bound once it stops (libzmq leaves them).
    pub(super) _files: Vec<IpcFile>,
}

/// Binds the data endpoints (with CURVE where the data clients are given), the inproc reply
/// socket and the control endpoint.
pub(super) fn bind(ctx: &zmq::Context, cfg: &Config) -> Result<Sockets, String> {
    let sec = &cfg.security;
    let mut files: Vec<IpcFile> = Vec::new();
    let front = ctx.socket(zmq::ROUTER).map_err(|e| zerr("ROUTER socket", e))?;
    front.set_router_mandatory(true).map_err(|e| zerr("ROUTER_MANDATORY", e))?;
    front.set_linger(0).map_err(|e| zerr("linger", e))?;
    // A frame over the bound is dropped by libzmq's decoder as its size header arrives: the
    // connection closes and nothing of it is held (the client sees no reply).
    let max_bytes = i64::try_from(cfg.max_request_bytes).unwrap_or(i64::MAX);
    front.set_maxmsgsize(max_bytes).map_err(|e| zerr("maxmsgsize", e))?;
    if let (Some(curve), Some(_)) = (&sec.curve, &sec.data_clients) {
        curve.apply(&front, auth::DATA_DOMAIN)?;
    }
    for ep in cfg.endpoints.iter().filter(|ep| !is_shm(ep)) {
        files.push(bind_endpoint(&front, ep)?);
    }
    let back = ctx.socket(zmq::PULL).map_err(|e| zerr("PULL socket", e))?;
    back.bind("inproc://offload-replies").map_err(|e| zerr("bind inproc", e))?;
    let control = match cfg.control.as_deref().map(|ep| bind_control(ctx, ep, sec)).transpose()? {
        Some((sock, file)) => {
            files.push(file);
            Some(sock)
        }
        None => None,
    };
    Ok(Sockets { front, back, control, _files: files })
}

/// The broker: the one thread that touches the ROUTER. It admits requests into the bounded
/// queue (or refuses them: busy, shutting down), forwards replies, and answers the control socket.
pub(super) struct Broker<'a> {
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
    /// Brokers until `stop`, then until the pipeline has drained and the front is quiet.
    pub(super) fn run(mut self, stop: &AtomicBool, threads: &[std::thread::JoinHandle<()>]) -> Result<(), String> {
        let mut leave_by: Option<Instant> = None;
        loop {
            self.send_reload_answer();
            if stop.load(Ordering::Relaxed) {
                self.queues = None; // workers, then executors, drain their queues, see them closed and exit
            }
            if self.queues.is_none() && threads.iter().all(|t| t.is_finished()) {
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
        while let Ok(mut parts) = recv_frames(front) {
            let received = Instant::now();
            let body = Body::Msg(parts.pop().unwrap_or_else(zmq::Message::new));
            let served = served.get_or_insert_with(|| snapshot(&self.current));
            let job = Job { envelope: Envelope::Zmq(parts), body, received };
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
