//! A request on its way through the daemon ([`Job`], its [`Body`]) and where its reply goes
//! ([`Envelope`]: a ZeroMQ client or a shared-memory one; [`Out`]: the thread's way out).

use crate::metrics::Counters;
use crate::protocol::{self, Reply, Status};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

pub(super) struct Job {
    pub(super) envelope: Envelope,
    pub(super) body: Body,
    pub(super) received: Instant,
}

impl Job {
    /// Where a refusal goes, and the request id it names.
    pub(super) fn refusal(self) -> (Envelope, u64) {
        let id = protocol::peek_request_id(&self.body);
        (self.envelope, id)
    }
}

/// A multipart message: the ROUTER envelope (client identity, and the empty delimiter of a REQ
/// client) followed by the body. Frames stay `zmq::Message`s from receipt to reply, so the
/// bodies are never copied on the way through the broker.
pub(super) type Frames = Vec<zmq::Message>;

pub(super) fn send_frames(front: &zmq::Socket, frames: Frames, counters: &Counters) {
    if front.send_multipart(frames, zmq::DONTWAIT).is_err() {
        counters.unroutable.fetch_add(1, Ordering::Relaxed);
    }
}

/// Where replies leave a thread: to the broker of the client's socket shard over inproc
/// (workers, executors: one PUSH per shard), out through the ROUTER (a broker's own thread in
/// inline mode), or nowhere but shared memory (the shm thread). A reply to a shared-memory
/// client goes straight into its reply ring whatever `Out`.
#[derive(Clone, Copy)]
pub(super) enum Out<'a> {
    Broker(&'a [zmq::Socket]),
    Front(&'a zmq::Socket),
    ShmOnly,
}

impl Out<'_> {
    /// Sends one reply frame `body` to where `envelope` says.
    pub(super) fn send(self, envelope: Envelope, body: Vec<u8>, counters: &Counters) {
        let (shard, mut frames) = match envelope {
            Envelope::Shm(peer) => {
                if !peer.reply(&body) {
                    counters.unroutable.fetch_add(1, Ordering::Relaxed);
                }
                return;
            }
            Envelope::Zmq(shard, frames) => (shard, frames),
        };
        frames.push(body.into()); // Vec -> Message takes the buffer, no copy
        match self {
            Out::Broker(pushes) => match pushes.get(shard) {
                Some(push) => {
                    let _ = push.send_multipart(frames, 0);
                }
                None => {
                    counters.unroutable.fetch_add(1, Ordering::Relaxed);
                }
            },
            Out::Front(front) => send_frames(front, frames, counters),
            Out::ShmOnly => {
                counters.unroutable.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Who a reply goes to: a ZeroMQ client (its socket shard, and the ROUTER envelope: its
/// identity, and the empty delimiter of a REQ client) or a shared-memory client (its reply ring).
pub(super) enum Envelope {
    Zmq(usize, Frames),
    Shm(Arc<crate::shm::Peer>),
}

impl Default for Envelope {
    fn default() -> Envelope {
        Envelope::Zmq(0, Vec::new())
    }
}

/// A request frame: a ZeroMQ message, or, in inline mode, read in place in a shared-memory
/// client's request ring (released once the request is answered).
pub(super) enum Body {
    Msg(zmq::Message),
    Ring(crate::shm::InPlace),
}

impl std::ops::Deref for Body {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Body::Msg(m) => m,
            Body::Ring(r) => r,
        }
    }
}

impl Job {
    /// The job with a frame of its own (a ring frame copied once), to hand to another thread:
    /// the ring's space is released as soon as the shm thread has read it.
    pub(super) fn owned(self) -> Job {
        match self.body {
            Body::Ring(r) => Job { body: Body::Msg(zmq::Message::from(&r[..])), ..self },
            Body::Msg(_) => self,
        }
    }
}

/// Sends one reply, counting it and recording its stage timings.
pub(super) fn send_reply(out: Out<'_>, counters: &Counters, envelope: Envelope, received: Instant, reply: &Reply) {
    counters.count(reply.status);
    counters.queries.fetch_add(reply.rule.len() as u64, Ordering::Relaxed);
    if reply.status == Status::Ok {
        record_stages(counters, &reply.stages_ns, received);
    }
    out.send(envelope, protocol::encode_reply(reply), counters);
}

pub(super) fn record_stages(counters: &Counters, stages_ns: &[(u8, u64)], received: Instant) {
    for &(stage, ns) in stages_ns {
        if let Some(h) = counters.latency.stages.get(stage as usize) {
            h.record(ns);
        }
    }
    counters.latency.server.record(received.elapsed().as_nanos() as u64);
}
