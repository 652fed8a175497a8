//! The kernel executors (k): check what they took, group it by rule-set version, match each
//! group in one matcher call (early stop in growing chunks; the null matcher skips the call) and
//! encode the Ok replies.

use super::batching::{gather, BatchPolicy, Pending};
use super::job::{record_stages, send_reply, Envelope, Out};
use super::{now_unix_us, snapshot, Current, Served};
use crate::handoff::HandOff;
use crate::metrics::Counters;
use crate::protocol::{self, Reply, Stage, Status};
use offload_rules::{match_parallel, match_staged, DeviceStages, NO_MATCH};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

/// A kernel executor (k): takes work from the kernel queue by the batching policy, matches it
/// with `threads` engine threads (e) and sends the replies. With the null matcher it answers
/// every query "no match" without matching.
pub(super) fn kernel_executor(
    queue: Arc<HandOff<Pending>>,
    pushes: Vec<zmq::Socket>,
    current: Current,
    counters: Arc<Counters>,
    policy: Arc<BatchPolicy>,
    threads: usize,
) {
    let mut scratch = Scratch::default();
    while let Some(first) = queue.pop() {
        let mut pending = vec![first];
        gather(&queue, &policy, &mut pending);
        run_pending(pending, &current, &counters, threads, &mut scratch, Out::Broker(&pushes));
    }
}

/// Checks, matches and answers what a thread took: refusals at once, then each group of one
/// rule-set version in one matcher call. The CPU the thread spends inside a CPU matcher is
/// read from its own clock and counted as match (`metrics::CpuAccounts`); on a device matcher
/// the call is the host's cost of feeding the device, so it stays host path.
pub(super) fn run_pending(
    pending: Vec<Pending>,
    current: &Current,
    counters: &Counters,
    threads: usize,
    scratch: &mut Scratch,
    out: Out<'_>,
) {
    let taken = Instant::now();
    let served = snapshot(current);
    let groups = admit(&served, pending, taken, scratch, |envelope, received, reply| {
        send_reply(out, counters, envelope, received, &reply)
    });
    for mut group in groups {
        let counted = !counters.null_matcher && !group.served.engine.matcher.on_device();
        execute_group(&mut group, threads, counters.null_matcher, scratch, counted.then_some(counters), |e, r, a| {
            send_ok(out, counters, e, r, a)
        });
        scratch.recycle(group);
    }
}

/// Buffers an executor keeps from batch to batch, so a batch allocates no codes or answers.
#[derive(Default)]
pub(super) struct Scratch {
    pub(super) codes: Vec<Vec<u32>>,
    pub(super) rules: Vec<u32>,
}

impl Scratch {
    pub(super) fn codes(&mut self) -> Vec<u32> {
        let mut v = self.codes.pop().unwrap_or_default();
        v.clear();
        v
    }
    pub(super) fn recycle(&mut self, group: Group) {
        self.codes.push(group.codes);
    }
}

/// Requests of one batch encoded against one rule-set version, their codes back to back.
pub(super) struct Group {
    pub(super) served: Arc<Served>,
    /// The rows of the requests matched together, in order.
    pub(super) codes: Vec<u32>,
    pub(super) requests: Vec<Ready>,
}

/// One request of a [`Group`], ready to match.
pub(super) struct Ready {
    pub(super) envelope: Envelope,
    pub(super) received: Instant,
    pub(super) id: u64,
    pub(super) stop_after: usize,
    /// Its rows in the group's `codes` (requests without early stop), or its own codes.
    pub(super) rows: std::ops::Range<usize>,
    pub(super) own: Vec<u32>,
    pub(super) queue_ns: u64,
    pub(super) encode_ns: u64,
    pub(super) kernel_queue_ns: u64,
}

/// Checks what the executor took and sorts it into groups by rule-set version: a pre-encoded
/// request is read in place against `served` (fingerprint, version, width, deadline) and its
/// codes copied once into the group's batch; a prepared one joins the group of the version it
/// was encoded with. Refusals go to `refuse` at once.
pub(super) fn admit(
    served: &Arc<Served>,
    pending: Vec<Pending>,
    taken: Instant,
    scratch: &mut Scratch,
    mut refuse: impl FnMut(Envelope, Instant, Reply),
) -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::with_capacity(1);
    let now_us = now_unix_us();
    let expired = |deadline_us: u64| deadline_us != 0 && now_us > deadline_us;
    for p in pending {
        match p {
            Pending::Encoded(job) => {
                let t = Instant::now();
                let view = match check_encoded(served, &job.body) {
                    Ok(view) => view,
                    Err(reply) => {
                        refuse(job.envelope, job.received, reply);
                        continue;
                    }
                };
                let h = view.header;
                if expired(h.deadline_us) {
                    let why = "deadline passed while queued";
                    let reply = Reply::status_only(h.request_id, Status::DeadlineExceeded, served.version, why);
                    refuse(job.envelope, job.received, reply);
                    continue;
                }
                let g = group_of(&mut groups, served, scratch);
                let mut ready = Ready {
                    envelope: Envelope::default(),
                    received: job.received,
                    id: h.request_id,
                    stop_after: h.stop_after as usize,
                    rows: 0..0,
                    own: Vec::new(),
                    queue_ns: taken.saturating_duration_since(job.received).as_nanos() as u64,
                    encode_ns: 0,
                    kernel_queue_ns: 0,
                };
                g.take_codes(&mut ready, |out| view.append_codes(out));
                ready.encode_ns = t.elapsed().as_nanos() as u64; // the in-place read and the one copy
                ready.envelope = job.envelope;
                g.requests.push(ready);
            }
            Pending::Prepared(p) => {
                let r = &p.request;
                if expired(r.deadline_us) {
                    let why = "deadline passed in the kernel queue";
                    let reply = Reply::status_only(r.id, Status::DeadlineExceeded, p.served.version, why);
                    refuse(p.envelope, p.received, reply);
                    continue;
                }
                let g = group_of(&mut groups, &p.served, scratch);
                let mut ready = Ready {
                    envelope: p.envelope,
                    received: p.received,
                    id: r.id,
                    stop_after: r.stop_after,
                    rows: 0..0,
                    own: Vec::new(),
                    queue_ns: r.queue_ns,
                    encode_ns: r.encode_ns,
                    kernel_queue_ns: taken.saturating_duration_since(p.handed).as_nanos() as u64,
                };
                g.take_codes(&mut ready, |out| out.extend_from_slice(&p.request.codes));
                g.requests.push(ready);
            }
        }
    }
    groups
}

/// The group of `served`'s version in `groups`, added if new.
pub(super) fn group_of<'g>(groups: &'g mut Vec<Group>, served: &Arc<Served>, scratch: &mut Scratch) -> &'g mut Group {
    let at = match groups.iter().position(|g| Arc::ptr_eq(&g.served, served)) {
        Some(i) => i,
        None => {
            groups.push(Group { served: served.clone(), codes: scratch.codes(), requests: Vec::new() });
            groups.len() - 1
        }
    };
    &mut groups[at]
}

impl Group {
    /// Puts a request's codes (what `append` appends) where it is matched: into the group's
    /// batch, or, with early stop, its own.
    pub(super) fn take_codes(&mut self, ready: &mut Ready, append: impl FnOnce(&mut Vec<u32>)) {
        if ready.stop_after == 0 {
            let w = self.served.engine.encoder.width().max(1);
            let start = self.codes.len() / w;
            append(&mut self.codes);
            ready.rows = start..self.codes.len() / w;
        } else {
            append(&mut ready.own);
        }
    }
}

/// Reads a pre-encoded frame in place and checks it against the served rule set.
pub(super) fn check_encoded<'a>(served: &Served, body: &'a [u8]) -> Result<protocol::EncodedView<'a>, Reply> {
    let version = served.version;
    let id = protocol::peek_request_id(body);
    let view = match protocol::encoded_view(body) {
        Ok(Some(view)) => view,
        Ok(None) => return Err(Reply::status_only(id, Status::Malformed, version, "not an encoded request")),
        Err(e) => return Err(Reply::status_only(id, Status::Malformed, version, e.to_string())),
    };
    if view.header.criteria_fingerprint != served.criteria_fingerprint {
        return Err(fingerprint_refusal(served, id, view.header.criteria_fingerprint));
    }
    let w = served.engine.encoder.width();
    if view.encoding_version != version || view.width as usize != w {
        return Err(Reply::status_only(id, Status::BadRequest, version, encoding_mismatch(&view, version, w)));
    }
    Ok(view)
}

pub(super) fn encoding_mismatch(view: &protocol::EncodedView<'_>, version: u64, w: usize) -> String {
    format!(
        "queries were encoded for rule-set version {} (width {}); this server has version {version} (width {w}): \
         re-encode (fetch the dictionary again) or send raw values",
        view.encoding_version, view.width
    )
}

pub(super) fn fingerprint_refusal(served: &Served, id: u64, fingerprint: u64) -> Reply {
    let rt = &served.engine.rules().rule_type;
    Reply::status_only(
        id,
        Status::BadRequest,
        served.version,
        format!(
            "the request's columns follow criteria with fingerprint {fingerprint:016x}, not this server's: rule type \
             {} expects {} criteria in this order: {} (fingerprint {:016x}); send the columns by these names \
             (offload.serve.Client(criteria=...))",
            rt.code,
            rt.criteria.len(),
            served.criteria_names(),
            served.criteria_fingerprint
        ),
    )
}

/// The time a request spent matching: wall time, and on a device the batch's stages.
#[derive(Clone, Copy, Default)]
pub(super) struct Matched {
    pub(super) ns: u64,
    pub(super) device: Option<DeviceStages>,
}

/// An answered request, as [`send_ok`] encodes it.
pub(super) struct Answer<'a> {
    pub(super) served: &'a Served,
    pub(super) ready: &'a Ready,
    pub(super) rule: &'a [u32],
    pub(super) matched: Matched,
}

/// Encodes and sends one Ok reply (no intermediate vectors: the contents are looked up as the
/// frame is written), counting it and recording its stage timings.
pub(super) fn send_ok(out: Out<'_>, counters: &Counters, envelope: Envelope, received: Instant, a: Answer<'_>) {
    let t = Instant::now();
    let r = a.ready;
    let mut stages_ns = [(0u8, 0u64); 8];
    let mut n = 0;
    let mut stage = |s: Stage, ns: u64| {
        stages_ns[n] = (s as u8, ns);
        n += 1;
    };
    stage(Stage::Queue, r.queue_ns);
    stage(Stage::Encode, r.encode_ns);
    stage(Stage::KernelQueue, r.kernel_queue_ns);
    stage(Stage::Match, a.matched.ns);
    if let Some(d) = a.matched.device {
        let ns = |s: f64| (s * 1e9) as u64;
        stage(Stage::H2d, ns(d.h2d_s));
        stage(Stage::Kernel, ns(d.kernel_s));
        stage(Stage::D2h, ns(d.d2h_s));
    }
    let contents = &a.served.engine.rules().contents;
    let content = a.rule.iter().map(|&x| if x == NO_MATCH { 0 } else { contents[x as usize] });
    // The reply stage: building this frame, measured up to here.
    stage(Stage::Reply, t.elapsed().as_nanos() as u64);
    let body = protocol::encode_ok_reply(r.id, a.served.version, a.rule, content, &stages_ns[..n]);
    counters.ok.fetch_add(1, Ordering::Relaxed);
    counters.queries.fetch_add(a.rule.len() as u64, Ordering::Relaxed);
    record_stages(counters, &stages_ns[..n], received);
    out.send(envelope, body, counters);
}

/// Matches one group: the requests without early stop in one matcher call over their
/// concatenated rows, the others alone in growing chunks (64, 128, ...) until enough queries
/// matched (the seed's related-query batching with early stop); with `null` (the null matcher)
/// none is matched and every query is answered "no match". Each request gets its own reply, in
/// order, through `answer`. Returns the wall ns spent matching.
pub(super) fn execute_group(
    group: &mut Group,
    threads: usize,
    null: bool,
    scratch: &mut Scratch,
    match_cpu: Option<&Counters>,
    mut answer: impl FnMut(Envelope, Instant, Answer<'_>),
) -> u64 {
    let served = &*group.served.clone();
    let w = served.engine.encoder.width().max(1);
    let matcher = &*served.engine.matcher;
    let rules = &mut scratch.rules;
    rules.clear();
    rules.resize(group.codes.len() / w, NO_MATCH);
    let mut shared = Matched::default();
    if !null && !rules.is_empty() {
        let t = Instant::now();
        let device = counting_match(match_cpu, || match_staged(matcher, &group.codes, rules, threads));
        shared = Matched { ns: t.elapsed().as_nanos() as u64, device };
    }
    let mut match_ns = shared.ns;
    for r in &mut group.requests {
        let envelope = std::mem::take(&mut r.envelope);
        let r = &*r;
        if r.stop_after == 0 {
            answer(envelope, r.received, Answer { served, ready: r, rule: &rules[r.rows.clone()], matched: shared });
        } else {
            let (rule, matched) =
                counting_match(match_cpu, || match_early_stop(served, &r.own, r.stop_after, threads, null));
            match_ns += matched.ns;
            answer(envelope, r.received, Answer { served, ready: r, rule: &rule, matched });
        }
    }
    match_ns
}

/// Runs a matcher call, adding the CPU the calling thread spends in it to the match share when
/// `match_cpu` is given (a CPU matcher; two clock reads per call).
pub(super) fn counting_match<R>(match_cpu: Option<&Counters>, call: impl FnOnce() -> R) -> R {
    let Some(counters) = match_cpu else { return call() };
    let before = crate::metrics::this_thread_cpu_ns();
    let r = call();
    let spent = crate::metrics::this_thread_cpu_ns().saturating_sub(before);
    counters.cpu.match_cpu_ns.fetch_add(spent, Ordering::Relaxed);
    r
}

/// Matches `codes` in growing chunks (64, 128, ...) until `stop_after` queries have matched.
pub(super) fn match_early_stop(
    served: &Served,
    codes: &[u32],
    stop_after: usize,
    threads: usize,
    null: bool,
) -> (Vec<u32>, Matched) {
    let t = Instant::now();
    let w = served.engine.encoder.width().max(1);
    let n = codes.len() / w;
    let mut rule = vec![NO_MATCH; n];
    if null {
        return (rule, Matched::default());
    }
    let matcher = &*served.engine.matcher;
    let (mut done, mut chunk, mut found) = (0usize, 64usize, 0usize);
    while done < n && found < stop_after {
        let end = (done + chunk).min(n);
        match_parallel(matcher, &codes[done * w..end * w], &mut rule[done..end], threads);
        found += rule[done..end].iter().filter(|&&r| r != NO_MATCH).count();
        done = end;
        chunk *= 2;
    }
    rule.truncate(done);
    (rule, Matched { ns: t.elapsed().as_nanos() as u64, device: None })
}
