//! The workers (w): decode and encode raw requests and hand them to the kernel queue (or, in
//! inline mode, match them themselves).

use super::batching::Pending;
use super::executors::{fingerprint_refusal, run_pending, Scratch};
use super::job::{send_reply, Envelope, Job, Out};
use super::{now_unix_us, snapshot, Current, Served};
use crate::handoff::{HandOff, Producer};
use crate::metrics::Counters;
use crate::protocol::{self, Payload, Reply, Status};
use offload_rules::{PackedStrings, RawColumn};
use std::sync::Arc;
use std::time::Instant;

/// A raw request a worker has decoded and encoded against `served`, on its way to an executor.
pub(super) struct Prepared {
    pub(super) envelope: Envelope,
    pub(super) received: Instant,
    pub(super) served: Arc<Served>,
    pub(super) request: Encoded,
    /// When the worker put it in the kernel queue.
    pub(super) handed: Instant,
}

/// A worker (w): takes raw requests from the broker's queue, decodes and encodes them, answers
/// the refused ones itself and hands the rest to the kernel queue. While a kernel matches, the
/// workers encode what comes next (the seed's pipelining of the wrapper with the device).
/// Pre-encoded requests do not come here: the broker hands them to the kernel queue directly.
/// In inline mode (`kernels == None`, no executors) a worker matches what it encoded itself.
pub(super) fn worker(
    requests: Arc<HandOff<Job>>,
    kernels: Option<Producer<Pending>>,
    pushes: Vec<zmq::Socket>,
    current: Current,
    counters: Arc<Counters>,
    threads: usize,
) {
    let out = Out::Broker(&pushes);
    let mut scratch = Scratch::default();
    while let Some(job) = requests.pop() {
        let served = snapshot(&current);
        let p = match prepare(&served, &job) {
            Ok(p) => p,
            Err(reply) => {
                send_reply(out, &counters, job.envelope, job.received, &reply);
                continue;
            }
        };
        let (id, version) = (p.id, served.version);
        let (envelope, received, handed) = (job.envelope, job.received, Instant::now());
        let pending = Pending::Prepared(Prepared { envelope, received, served, request: p, handed });
        let Some(kernels) = &kernels else {
            run_pending(vec![pending], &current, &counters, threads, &mut scratch, out);
            continue;
        };
        // Waits while the kernel queue is full: the request queue then fills and the broker
        // answers "busy" (backpressure, nothing dropped).
        if let Err(Pending::Prepared(p)) = kernels.push(pending) {
            let reply = Reply::status_only(id, Status::ShuttingDown, version, "the server is shutting down");
            send_reply(out, &counters, p.envelope, p.received, &reply);
        }
    }
}

/// A raw request decoded and encoded by a worker.
pub(super) struct Encoded {
    pub(super) id: u64,
    pub(super) deadline_us: u64,
    pub(super) stop_after: usize,
    pub(super) codes: Vec<u32>,
    pub(super) queue_ns: u64,
    pub(super) encode_ns: u64,
}

/// Checks the deadline, decodes and encodes one raw request, or returns the reply refusing it.
/// (Pre-encoded requests never come here: the broker hands them to the executors.)
pub(super) fn prepare(served: &Served, job: &Job) -> Result<Encoded, Reply> {
    let t_start = Instant::now();
    let queue_ns = t_start.duration_since(job.received).as_nanos() as u64;
    let id = protocol::peek_request_id(&job.body);
    let version = served.version;
    let deadline_us = protocol::peek_deadline_us(&job.body);
    if deadline_us != 0 && now_unix_us() > deadline_us {
        return Err(Reply::status_only(id, Status::DeadlineExceeded, version, "deadline passed while queued"));
    }
    let req = protocol::decode_request(&job.body)
        .map_err(|e| Reply::status_only(id, Status::Malformed, version, e.to_string()))?;
    if req.criteria_fingerprint != served.criteria_fingerprint {
        return Err(fingerprint_refusal(served, id, req.criteria_fingerprint));
    }
    let Payload::Raw(cols) = req.payload else {
        return Err(Reply::status_only(id, Status::Malformed, version, "not a raw request"));
    };
    let offsets: Vec<Vec<i64>> = cols.iter().map(|c| c.offsets.iter().map(|&o| o as i64).collect()).collect();
    let raw: Result<Vec<RawColumn>, String> =
        cols.iter().zip(&offsets).map(|(c, o)| PackedStrings::new(&c.data, o).map(RawColumn::Packed)).collect();
    let codes = raw
        .and_then(|raw| served.engine.encoder.encode_columns(&raw).map_err(|e| e.to_string()))
        .map_err(|e| Reply::status_only(id, Status::BadRequest, version, e))?;
    Ok(Encoded {
        id: req.request_id,
        deadline_us,
        stop_after: req.stop_after as usize,
        codes,
        queue_ns,
        encode_ns: t_start.elapsed().as_nanos() as u64,
    })
}
