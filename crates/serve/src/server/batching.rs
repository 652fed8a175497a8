//! Cross-request batching: the policy (per request, self-filling, size or timeout; changeable
//! while serving), what waits in the kernel queue ([`Pending`]), how an executor gathers a batch
//! from it, and inline mode's batches of what a front end read at once.

use super::executors::{run_pending, Scratch};
use super::job::{Envelope, Job, Out};
use super::workers::Prepared;
use super::Current;
use crate::handoff::{HandOff, Popped};
use crate::metrics::Counters;
use crate::protocol;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Inline mode: matches the pre-encoded requests a front end just read, on its own thread,
/// in batches of up to `batch_max_queries` (0: one request at a time). What was readable at
/// once forms the batches (self-filling); replies go straight out through `out`.
pub(super) fn run_inline(
    mut inline: Vec<Pending>,
    current: &Current,
    counters: &Counters,
    policy: &BatchPolicy,
    engine_threads: usize,
    scratch: &mut Scratch,
    out: Out<'_>,
) {
    let max = policy.max_queries.load(Ordering::Relaxed) as usize;
    while !inline.is_empty() {
        let (mut take, mut total) = (0, 0);
        while take < inline.len() && (take == 0 || (max > 0 && total < max)) {
            total += inline[take].n_queries();
            take += 1;
        }
        let rest = inline.split_off(take);
        run_pending(inline, current, counters, engine_threads, scratch, out);
        inline = rest;
    }
}

/// Cross-request batching, changeable while serving (control command `set`); the kernel
/// executors apply it when they take work from the kernel queue.
///
/// - `max_queries == 0`: per request, one request per matcher call.
/// - `max_queries > 0`, `timeout_us == 0`: **self-filling** batches. An executor that frees takes
///   everything queued at that moment, up to `max_queries` queries, and never waits for more: while
///   it is busy requests queue, so under load batches grow by themselves, and an idle executor
///   takes a lone request at once. No timer to tune.
/// - `max_queries > 0`, `timeout_us > 0`: the seed's size-or-timeout policy: an executor that
///   takes a request waits up to `timeout_us` from that request's arrival for more, until the
///   batch holds `max_queries` queries.
///
/// Requests with `stop_after` always run alone (early stop).
#[derive(Debug, Default)]
pub struct BatchPolicy {
    pub max_queries: AtomicU64,
    pub timeout_us: AtomicU64,
}

impl BatchPolicy {
    /// The policy the knobs make now, as `stats` names it: `per_request`, `self_filling` or
    /// `size_or_timeout`.
    pub fn name(&self) -> &'static str {
        match (self.max_queries.load(Ordering::Relaxed), self.timeout_us.load(Ordering::Relaxed)) {
            (0, _) => "per_request",
            (_, 0) => "self_filling",
            _ => "size_or_timeout",
        }
    }
}

/// What waits in the kernel queue: a pre-encoded request as the broker received it (the
/// executor reads it in place and copies its codes once, into the batch it matches), or a raw
/// request a worker has encoded.
pub(super) enum Pending {
    Encoded(Job),
    Prepared(Prepared),
}

impl Pending {
    pub(super) fn n_queries(&self) -> usize {
        match self {
            Pending::Encoded(job) => protocol::peek_n_queries(&job.body) as usize,
            Pending::Prepared(p) => p.request.codes.len() / p.served.engine.encoder.width().max(1),
        }
    }
    pub(super) fn received(&self) -> Instant {
        match self {
            Pending::Encoded(job) => job.received,
            Pending::Prepared(p) => p.received,
        }
    }
    pub(super) fn refusal(self) -> (Envelope, u64) {
        match self {
            Pending::Encoded(job) => job.refusal(),
            Pending::Prepared(p) => (p.envelope, p.request.id),
        }
    }
}

/// How often an executor waiting for more requests looks at the policy again: a `set` applies
/// to the batch already waiting within this.
pub(super) const POLICY_RECHECK: Duration = Duration::from_millis(5);

/// Takes more work from the kernel queue by the policy (see [`BatchPolicy`]). The policy is
/// read again at every request taken and every [`POLICY_RECHECK`] of waiting, so a batch
/// waiting on a long timeout is released by `set` lowering it (the timeout still counts from
/// the first request's arrival).
pub(super) fn gather(queue: &HandOff<Pending>, policy: &BatchPolicy, pending: &mut Vec<Pending>) {
    let mut total = pending[0].n_queries();
    loop {
        let max = policy.max_queries.load(Ordering::Relaxed) as usize;
        if max == 0 || total >= max {
            return;
        }
        let timeout = Duration::from_micros(policy.timeout_us.load(Ordering::Relaxed));
        let until = pending[0].received() + timeout;
        let next = if timeout.is_zero() {
            queue.try_pop()
        } else {
            let now = Instant::now();
            if now >= until {
                return;
            }
            match queue.pop_until(until.min(now + POLICY_RECHECK)) {
                Popped::Item(p) => Some(p),
                Popped::TimedOut => continue,
                Popped::Closed => None,
            }
        };
        let Some(p) = next else { return };
        total += p.n_queries();
        pending.push(p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_is_named_from_its_knobs_as_they_are_now() {
        let policy = BatchPolicy::default();
        assert_eq!(policy.name(), "per_request");
        policy.max_queries.store(crate::config::DEVICE_BATCH_MAX_QUERIES, Ordering::Relaxed);
        assert_eq!(policy.name(), "self_filling");
        policy.timeout_us.store(200, Ordering::Relaxed);
        assert_eq!(policy.name(), "size_or_timeout");
    }
}
