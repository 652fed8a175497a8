//! The daemon: a ZeroMQ ROUTER front end (TCP and/or IPC), a bounded request queue, and worker
//! threads that decode, encode, match and reply.
//!
//! ```text
//! clients ──DEALER/REQ──▶ ROUTER (broker thread) ──bounded queue──▶ w workers
//!                            ▲                                        │
//!                            └────────── inproc PULL ◀── PUSH (one per worker)
//! ```
//! ZeroMQ sockets are not thread-safe, so only the broker touches the ROUTER; workers hand
//! replies back over inproc. ROUTER_MANDATORY is set so a reply to a vanished client is an
//! error we count, not a silent drop. When the queue is full the broker answers "busy" at once;
//! a request whose deadline has passed is answered "deadline exceeded" without being executed.
//! On SIGINT/SIGTERM (or `stop`), new requests get "shutting down", queued ones are finished and
//! answered, then the threads exit.

use crate::protocol::{self, Payload, Reply, Stage, Status};
use crossbeam_channel::{bounded, Receiver, TrySendError};
use offload_rules::{match_parallel, Engine, MatcherKind, PackedStrings, RawColumn, NO_MATCH};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// What the daemon runs with (the CLI fills it from a file and flags).
#[derive(Debug, Clone)]
pub struct Config {
    /// ZeroMQ endpoints to bind, e.g. `tcp://127.0.0.1:5555`, `ipc:///tmp/offload.sock`.
    pub endpoints: Vec<String>,
    /// Worker threads (w): decode, encode, match, reply.
    pub workers: usize,
    /// Matching threads per request (e).
    pub engine_threads: usize,
    /// Requests that may wait in the queue; one more gets "busy".
    pub queue: usize,
    /// Control endpoint (REP) for `stats` and `reload`, if any.
    pub control: Option<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            endpoints: vec!["tcp://127.0.0.1:5555".into()],
            workers: 2,
            engine_threads: 1,
            queue: 64,
            control: None,
        }
    }
}

/// Counters kept while serving (also returned when the server stops).
#[derive(Debug, Default)]
pub struct Counters {
    pub requests: AtomicU64,
    pub queries: AtomicU64,
    pub ok: AtomicU64,
    pub busy: AtomicU64,
    pub deadline_exceeded: AtomicU64,
    pub malformed: AtomicU64,
    pub bad_request: AtomicU64,
    pub shutting_down: AtomicU64,
    /// Replies ZeroMQ could not route (the client disconnected).
    pub unroutable: AtomicU64,
}

impl Counters {
    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        vec![
            ("requests", l(&self.requests)),
            ("queries", l(&self.queries)),
            ("ok", l(&self.ok)),
            ("busy", l(&self.busy)),
            ("deadline_exceeded", l(&self.deadline_exceeded)),
            ("malformed", l(&self.malformed)),
            ("bad_request", l(&self.bad_request)),
            ("shutting_down", l(&self.shutting_down)),
            ("unroutable", l(&self.unroutable)),
        ]
    }
    fn count(&self, s: Status) {
        let c = match s {
            Status::Ok => &self.ok,
            Status::Busy => &self.busy,
            Status::DeadlineExceeded => &self.deadline_exceeded,
            Status::Malformed => &self.malformed,
            Status::BadRequest => &self.bad_request,
            Status::ShuttingDown => &self.shutting_down,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// A compiled rule set with the version every reply names.
pub struct Served {
    pub engine: Engine,
    pub version: u64,
    pub matcher: MatcherKind,
}

/// The rule set being served. A reload builds a new [`Served`] off the hot path and swaps the
/// `Arc` under the write lock; a worker takes one `Arc` per request, so every answer of a
/// request comes from one version and names it.
pub type Current = Arc<RwLock<Arc<Served>>>;

fn snapshot(current: &Current) -> Arc<Served> {
    current.read().unwrap_or_else(|p| p.into_inner()).clone()
}

/// Loads and compiles `rule_type` + `rules` as the version after `old`'s.
fn rebuild(old: &Served, rule_type: &str, rules: &str) -> Result<(Served, f64), String> {
    let t = Instant::now();
    let rs =
        offload_rules::load(std::path::Path::new(rule_type), std::path::Path::new(rules)).map_err(|e| e.to_string())?;
    let engine = Engine::compile(Arc::new(rs), old.matcher);
    Ok((Served { engine, version: old.version + 1, matcher: old.matcher }, t.elapsed().as_secs_f64()))
}

/// Answers one control command: `stats`, or `reload` + newline + rule-type path + newline +
/// rules path (run on another thread; the reply comes when the new version is live).
fn control_command(
    cmd: &str,
    current: &Current,
    counters: &Arc<Counters>,
) -> Result<String, std::sync::mpsc::Receiver<String>> {
    let mut lines = cmd.lines();
    match lines.next().map(str::trim) {
        Some("stats") => {
            let s = snapshot(current);
            let mut m = serde_json::Map::new();
            m.insert("version".into(), s.version.into());
            m.insert("rules".into(), s.engine.rules().len().into());
            m.insert("matcher".into(), s.matcher.to_string().into());
            for (k, v) in counters.snapshot() {
                m.insert(k.into(), v.into());
            }
            Ok(serde_json::Value::Object(m).to_string())
        }
        Some("reload") => {
            let (Some(rt), Some(rules)) = (lines.next(), lines.next()) else {
                return Ok(
                    r#"{"ok":false,"error":"reload needs a rule-type path and a rules path, one per line"}"#.into()
                );
            };
            let (rt, rules, current) = (rt.trim().to_string(), rules.trim().to_string(), current.clone());
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let old = snapshot(&current);
                let answer = match rebuild(&old, &rt, &rules) {
                    Ok((new, secs)) => {
                        let (version, n) = (new.version, new.engine.rules().len());
                        *current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(new);
                        serde_json::json!({"ok": true, "version": version, "rules": n, "load_compile_s": secs})
                    }
                    Err(e) => serde_json::json!({"ok": false, "error": e, "version": old.version}),
                };
                let _ = tx.send(answer.to_string());
            });
            Err(rx)
        }
        _ => Ok(r#"{"ok":false,"error":"unknown command; expected stats or reload"}"#.into()),
    }
}

struct Job {
    envelope: Vec<Vec<u8>>,
    body: Vec<u8>,
    received: Instant,
}

fn now_unix_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

fn zerr(what: &str, e: zmq::Error) -> String {
    format!("{what}: {e}")
}

/// Serves until `stop` becomes true; returns the final counters.
pub fn run(current: Current, cfg: &Config, stop: Arc<AtomicBool>) -> Result<Arc<Counters>, String> {
    let ctx = zmq::Context::new();
    let front = ctx.socket(zmq::ROUTER).map_err(|e| zerr("ROUTER socket", e))?;
    front.set_router_mandatory(true).map_err(|e| zerr("ROUTER_MANDATORY", e))?;
    front.set_linger(0).map_err(|e| zerr("linger", e))?;
    for ep in &cfg.endpoints {
        front.bind(ep).map_err(|e| zerr(&format!("bind {ep}"), e))?;
    }
    let back = ctx.socket(zmq::PULL).map_err(|e| zerr("PULL socket", e))?;
    back.bind("inproc://offload-replies").map_err(|e| zerr("bind inproc", e))?;
    let control = match &cfg.control {
        Some(ep) => {
            let s = ctx.socket(zmq::REP).map_err(|e| zerr("REP socket", e))?;
            s.set_linger(0).map_err(|e| zerr("linger", e))?;
            s.bind(ep).map_err(|e| zerr(&format!("bind {ep}"), e))?;
            Some(s)
        }
        None => None,
    };
    let mut pending_reload: Option<std::sync::mpsc::Receiver<String>> = None;

    let counters = Arc::new(Counters::default());
    let (tx, rx) = bounded::<Job>(cfg.queue.max(1));
    let mut workers = Vec::new();
    for i in 0..cfg.workers.max(1) {
        let (rx, ctx, current, counters) = (rx.clone(), ctx.clone(), current.clone(), counters.clone());
        let threads = cfg.engine_threads.max(1);
        workers.push(
            std::thread::Builder::new()
                .name(format!("offload-worker-{i}"))
                .spawn(move || worker(rx, ctx, current, counters, threads))
                .map_err(|e| format!("spawn worker: {e}"))?,
        );
    }
    drop(rx);

    let mut tx = Some(tx);
    loop {
        let version = snapshot(&current).version;
        if let Some(rx) = &pending_reload {
            if let Ok(answer) = rx.try_recv() {
                if let Some(c) = &control {
                    let _ = c.send(answer.as_bytes(), 0);
                }
                pending_reload = None;
            }
        }
        let stopping = stop.load(Ordering::Relaxed);
        if stopping && tx.is_some() {
            tx = None; // workers drain the queue, then see it closed and exit
        }
        if tx.is_none() && workers.iter().all(|w| w.is_finished()) {
            // Forward what the workers sent last, then leave.
            while let Ok(parts) = back.recv_multipart(zmq::DONTWAIT) {
                forward(&front, parts, &counters);
            }
            break;
        }
        // The control socket is read only while no reload answer is owed (REP: one at a time).
        let mut items = vec![front.as_poll_item(zmq::POLLIN), back.as_poll_item(zmq::POLLIN)];
        if let (Some(c), None) = (&control, &pending_reload) {
            items.push(c.as_poll_item(zmq::POLLIN));
        }
        let timeout = if pending_reload.is_some() { 5 } else { 50 };
        match zmq::poll(&mut items, timeout) {
            // A signal (SIGTERM, SIGINT) interrupts the poll: the loop then sees `stop`.
            Err(zmq::Error::EINTR) => continue,
            other => other.map_err(|e| zerr("poll", e))?,
        };
        if items[1].is_readable() {
            while let Ok(parts) = back.recv_multipart(zmq::DONTWAIT) {
                forward(&front, parts, &counters);
            }
        }
        if items.get(2).is_some_and(|i| i.is_readable()) {
            if let Some(c) = &control {
                if let Ok(msg) = c.recv_bytes(zmq::DONTWAIT) {
                    match control_command(&String::from_utf8_lossy(&msg), &current, &counters) {
                        Ok(answer) => {
                            let _ = c.send(answer.as_bytes(), 0);
                        }
                        Err(rx) => pending_reload = Some(rx),
                    }
                }
            }
        }
        if items[0].is_readable() {
            while let Ok(mut parts) = front.recv_multipart(zmq::DONTWAIT) {
                let received = Instant::now();
                counters.requests.fetch_add(1, Ordering::Relaxed);
                let body = parts.pop().unwrap_or_default();
                let envelope = parts;
                let id = protocol::peek_request_id(&body);
                let refuse = |status: Status, msg: &str, envelope: Vec<Vec<u8>>| {
                    counters.count(status);
                    let mut frames = envelope;
                    frames.push(protocol::encode_reply(&Reply::status_only(id, status, version, msg)));
                    send_frames(&front, frames, &counters);
                };
                match &tx {
                    None => refuse(Status::ShuttingDown, "the server is shutting down", envelope),
                    Some(tx) => match tx.try_send(Job { envelope, body, received }) {
                        Ok(()) => {}
                        Err(TrySendError::Full(job)) => {
                            refuse(Status::Busy, "queue full: retry later or elsewhere", job.envelope)
                        }
                        Err(TrySendError::Disconnected(job)) => {
                            refuse(Status::ShuttingDown, "the server is shutting down", job.envelope)
                        }
                    },
                }
            }
        }
    }
    for w in workers {
        let _ = w.join();
    }
    Ok(counters)
}

fn send_frames(front: &zmq::Socket, frames: Vec<Vec<u8>>, counters: &Counters) {
    if front.send_multipart(frames, zmq::DONTWAIT).is_err() {
        counters.unroutable.fetch_add(1, Ordering::Relaxed);
    }
}

fn forward(front: &zmq::Socket, parts: Vec<Vec<u8>>, counters: &Counters) {
    send_frames(front, parts, counters);
}

fn worker(rx: Receiver<Job>, ctx: zmq::Context, current: Current, counters: Arc<Counters>, threads: usize) {
    let Ok(push) = ctx.socket(zmq::PUSH) else { return };
    if push.connect("inproc://offload-replies").is_err() {
        return;
    }
    while let Ok(job) = rx.recv() {
        let reply = execute(&snapshot(&current), &job, threads);
        counters.count(reply.status);
        counters.queries.fetch_add(reply.rule.len() as u64, Ordering::Relaxed);
        let mut frames = job.envelope;
        frames.push(protocol::encode_reply(&reply));
        let _ = push.send_multipart(frames, 0);
    }
}

/// Decodes, encodes, matches one request and builds its reply.
fn execute(served: &Served, job: &Job, threads: usize) -> Reply {
    let t_start = Instant::now();
    let queue_ns = t_start.duration_since(job.received).as_nanos() as u64;
    let id = protocol::peek_request_id(&job.body);
    let version = served.version;
    let deadline = protocol::peek_deadline_us(&job.body);
    if deadline != 0 && now_unix_us() > deadline {
        return Reply::status_only(id, Status::DeadlineExceeded, version, "deadline passed while queued");
    }
    let req = match protocol::decode_request(&job.body) {
        Ok(r) => r,
        Err(e) => return Reply::status_only(id, Status::Malformed, version, e.to_string()),
    };
    let enc = &served.engine.encoder;
    let w = enc.width();
    let n = req.n_queries as usize;
    let codes = match &req.payload {
        Payload::Raw(cols) => {
            let offsets: Vec<Vec<i64>> = cols.iter().map(|c| c.offsets.iter().map(|&o| o as i64).collect()).collect();
            let raw: Result<Vec<RawColumn>, String> =
                cols.iter().zip(&offsets).map(|(c, o)| PackedStrings::new(&c.data, o).map(RawColumn::Packed)).collect();
            match raw.and_then(|raw| enc.encode_columns(&raw).map_err(|e| e.to_string())) {
                Ok(codes) => codes,
                Err(e) => return Reply::status_only(id, Status::BadRequest, version, e),
            }
        }
        Payload::Encoded { encoding_version, width, codes } => {
            if *encoding_version != version || *width as usize != w {
                return Reply::status_only(
                    id,
                    Status::BadRequest,
                    version,
                    format!(
                        "queries were encoded for rule-set version {encoding_version} (width {width}); \
                         this server has version {version} (width {w}): re-encode or send raw values"
                    ),
                );
            }
            codes.clone()
        }
    };
    let t_encoded = Instant::now();
    let matcher = &*served.engine.matcher;
    let mut rule = vec![NO_MATCH; n];
    let evaluated = if req.stop_after == 0 {
        match_parallel(matcher, &codes, &mut rule, threads);
        n
    } else {
        // Related-query batching with early stop: growing chunks until enough answers.
        let (mut done, mut chunk, mut found) = (0usize, 64usize, 0usize);
        while done < n && found < req.stop_after as usize {
            let end = (done + chunk).min(n);
            match_parallel(matcher, &codes[done * w..end * w], &mut rule[done..end], threads);
            found += rule[done..end].iter().filter(|&&r| r != NO_MATCH).count();
            done = end;
            chunk *= 2;
        }
        rule.truncate(done);
        done
    };
    let t_matched = Instant::now();
    let contents = &served.engine.rules().contents;
    let content: Vec<i64> = rule.iter().map(|&r| if r == NO_MATCH { 0 } else { contents[r as usize] }).collect();
    debug_assert_eq!(content.len(), evaluated);
    let stages_ns = vec![
        (Stage::Queue as u8, queue_ns),
        (Stage::Encode as u8, t_encoded.duration_since(t_start).as_nanos() as u64),
        (Stage::Match as u8, t_matched.duration_since(t_encoded).as_nanos() as u64),
        (Stage::Reply as u8, t_matched.elapsed().as_nanos() as u64),
    ];
    Reply {
        request_id: req.request_id,
        status: Status::Ok,
        ruleset_version: version,
        rule,
        content,
        stages_ns,
        message: String::new(),
    }
}
