//! What the daemon counts ([`Counters`]: requests by outcome, latency histograms per pipeline
//! stage, CPU time by thread role) and the Prometheus page that shows it: its families written
//! by `prometheus-client`'s text encoder, served by `tiny_http`. Nothing here knows the server:
//! the page reads the served version through a function it is given.
//!
//! The histograms stay our own (prometheus-client's takes a write lock per observation): 40
//! power-of-two buckets of nanoseconds (1 ns .. ~9 min, the last one open), one atomic counter
//! each, so recording costs one `leading_zeros` and two relaxed increments on the hot path.
//! They encode as prometheus-client histograms; quantiles (`stats`) are read as the upper bound
//! of the bucket that holds them (within a factor of 2), which is what the page's cumulative
//! buckets give anyway.

use crate::auth::AuthCounters;
use crate::protocol::Status;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const BUCKETS: usize = 40;

/// A histogram of durations in nanoseconds.
#[derive(Debug)]
pub struct Histogram {
    counts: [AtomicU64; BUCKETS],
    sum_ns: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram { counts: std::array::from_fn(|_| AtomicU64::new(0)), sum_ns: AtomicU64::new(0) }
    }
}

impl Histogram {
    /// Bucket `b` holds values in `[2^(b-1), 2^b)` (bucket 0 holds 0).
    fn bucket(ns: u64) -> usize {
        ((64 - ns.leading_zeros()) as usize).min(BUCKETS - 1)
    }
    pub fn record(&self, ns: u64) {
        self.counts[Self::bucket(ns)].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }
    pub fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }
    /// Upper bound (ns) of the bucket holding quantile `q` (0 when empty).
    pub fn quantile_ns(&self, q: f64) -> u64 {
        let n = self.count();
        if n == 0 {
            return 0;
        }
        let target = ((q.clamp(0.0, 1.0) * n as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (b, c) in self.counts.iter().enumerate() {
            seen += c.load(Ordering::Relaxed);
            if seen >= target {
                return if b == 0 { 0 } else { (1u64 << b) - 1 };
            }
        }
        u64::MAX
    }
}

impl EncodeMetric for Histogram {
    /// Seconds; bucket `b < 39` is `le = (2^b - 1) ns`, the last one `+Inf`.
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), fmt::Error> {
        let counts: Vec<u64> = self.counts.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        let upper_s = |b: usize| match b {
            0 => 0.0,
            b if b == BUCKETS - 1 => f64::MAX, // prometheus-client writes it as +Inf
            b => ((1u64 << b) - 1) as f64 / 1e9,
        };
        let buckets: Vec<(f64, u64)> = counts.iter().enumerate().map(|(b, &c)| (upper_s(b), c)).collect();
        let sum_s = self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
        encoder.encode_histogram::<()>(sum_s, counts.iter().sum(), &buckets, None)
    }
    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

/// One histogram per pipeline stage, plus the whole time a request spent in the server.
#[derive(Debug, Default)]
pub struct StageHistograms {
    /// Indexed by stage id (`Stage as usize`).
    pub stages: [Histogram; 8],
    pub server: Histogram,
}

impl StageHistograms {
    pub fn summary(&self) -> serde_json::Value {
        let q = |h: &Histogram| {
            serde_json::json!({"count": h.count(), "p50_ns": h.quantile_ns(0.5), "p90_ns": h.quantile_ns(0.9),
                               "p99_ns": h.quantile_ns(0.99), "max_ns": h.quantile_ns(1.0)})
        };
        let mut m = serde_json::Map::new();
        for s in crate::protocol::Stage::ALL {
            m.insert(s.name().into(), q(&self.stages[s as usize]));
        }
        m.insert("server".into(), q(&self.server));
        serde_json::Value::Object(m)
    }
}

/// A thread role whose CPU time is counted (docs/serve-protocol.md, "CPU per query").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The one thread on the ROUTER: admits requests, forwards replies, answers control.
    Broker,
    /// Decode, batch, encode, hand over to the kernel queue.
    Worker,
    /// Match (with e = 1, on its own thread) and build and send the replies.
    Executor,
    /// libzmq's I/O thread(s) of the daemon's context: the socket reads and writes.
    ZmqIo,
    /// The shared-memory front end (`shm://`): the thread that reads the clients' request
    /// rings (and in inline mode matches and replies), and the one that accepts clients.
    Shm,
}

impl Role {
    pub const ALL: [Role; 5] = [Role::Broker, Role::Worker, Role::Executor, Role::ZmqIo, Role::Shm];
    pub fn name(self) -> &'static str {
        match self {
            Role::Broker => "broker",
            Role::Worker => "worker",
            Role::Executor => "executor",
            Role::ZmqIo => "zmq_io",
            Role::Shm => "shm",
        }
    }
}

/// The CPU time the daemon's threads spent since serving started, by role. Nothing is done per
/// query: each thread registers once (its id and the CPU it had then), and a reader (`stats`, a
/// scrape) reads the threads' CPU clocks from `/proc/self/task/<tid>/schedstat` (ns, the
/// kernel's `sum_exec_runtime`, what `CLOCK_THREAD_CPUTIME_ID` reads). The thread that calls a
/// CPU matcher (an executor; in inline mode the broker or a worker) reads its own CPU clock
/// around each call and adds the difference to `match_cpu_ns` (one relaxed add per batch), so
/// the match share is exact with one engine thread (e > 1: the engine threads are not counted). Linux only: elsewhere no thread registers and the CPU is absent.
#[derive(Debug, Default)]
pub struct CpuAccounts {
    /// (role, thread id, CPU ns at registration); written once per thread at its start.
    threads: std::sync::Mutex<Vec<(Role, u32, u64)>>,
    /// CPU ns the matching threads spent inside a CPU matcher's call. A device matcher's call
    /// is the host's cost of feeding the device (staging, launching, waiting): host path.
    pub match_cpu_ns: AtomicU64,
}

/// The calling thread's CPU time, ns (`CLOCK_THREAD_CPUTIME_ID`; 0 where it cannot be read).
pub fn this_thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec through a pointer to a live local; the clock id
    // is a constant the kernel knows. On failure ts stays zero.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The calling thread's id (Linux: from `/proc/thread-self`).
pub fn thread_id() -> Option<u32> {
    let link = std::fs::read_link("/proc/thread-self").ok()?;
    link.file_name()?.to_str()?.parse().ok()
}

/// CPU ns thread `tid` of this process has run (`None` when it is gone or there is no /proc).
pub(crate) fn thread_cpu_ns(tid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// The ids of this process's libzmq I/O threads (named `ZMQbg/IO/<n>` by libzmq).
pub fn zmq_io_threads() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else { return Vec::new() };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|tid| {
            std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")).is_ok_and(|c| c.starts_with("ZMQbg/IO"))
        })
        .collect()
}

/// The libzmq I/O threads not among `before`: those of a context whose first socket was made
/// since. A new thread names itself once it runs, so this looks again, every millisecond, for
/// up to 200 ms.
pub fn new_zmq_io_threads(before: &[u32]) -> Vec<u32> {
    for _ in 0..200 {
        let new: Vec<u32> = zmq_io_threads().into_iter().filter(|t| !before.contains(t)).collect();
        if !new.is_empty() || !std::path::Path::new("/proc/self/task").exists() {
            return new;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Vec::new()
}

/// CPU time per role since serving started, and the executors' match share.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CpuSnapshot {
    /// (role, threads, CPU ns), in [`Role::ALL`] order.
    pub roles: Vec<(Role, u64, u64)>,
    /// CPU spent in the matcher (see [`CpuAccounts::match_cpu_ns`]).
    pub match_ns: u64,
}

impl CpuSnapshot {
    /// broker + worker + executor + zmq_io + shm.
    pub fn daemon_ns(&self) -> u64 {
        self.roles.iter().map(|r| r.2).sum()
    }
    /// The parts, as (name, CPU ns): each role, match (part of executor), daemon (all roles) and
    /// host_path (daemon less match).
    pub fn parts(&self) -> Vec<(&'static str, u64)> {
        let mut v: Vec<(&'static str, u64)> = self.roles.iter().map(|&(r, _, ns)| (r.name(), ns)).collect();
        v.push(("match", self.match_ns));
        v.push(("daemon", self.daemon_ns()));
        v.push(("host_path", self.daemon_ns().saturating_sub(self.match_ns)));
        v
    }
    /// `stats`' `cpu` object: threads, CPU ns and ns per query by part, the queries counted, and
    /// the ceiling the host path implies: `cores` (those this process may run on) × 1e9 ÷ host
    /// path ns per query, in queries/s (null before any query).
    pub fn summary(&self, queries: u64) -> serde_json::Value {
        let per_query =
            |ns: u64| if queries == 0 { serde_json::Value::Null } else { (ns as f64 / queries as f64).into() };
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let host_path = self.daemon_ns().saturating_sub(self.match_ns);
        let ceiling = match (queries, host_path) {
            (0, _) | (_, 0) => serde_json::Value::Null,
            (q, ns) => (cores as f64 * 1e9 * q as f64 / ns as f64).into(),
        };
        let threads: serde_json::Map<_, _> = self.roles.iter().map(|&(r, n, _)| (r.name().into(), n.into())).collect();
        let parts = self.parts();
        let cpu_ns: serde_json::Map<_, _> = parts.iter().map(|&(k, ns)| (k.into(), ns.into())).collect();
        let per: serde_json::Map<_, _> = parts.iter().map(|&(k, ns)| (k.into(), per_query(ns))).collect();
        serde_json::json!({"queries": queries, "threads": threads, "cpu_ns": cpu_ns, "ns_per_query": per,
                           "cores": cores, "host_path_ceiling_qps": ceiling})
    }
}

impl CpuAccounts {
    /// Counts the calling thread's CPU from now on under `role` (once, at the thread's start).
    pub fn register_me(&self, role: Role) {
        if let Some(tid) = thread_id() {
            self.register(role, tid);
        }
    }
    /// Counts thread `tid`'s CPU from now on under `role`.
    pub fn register(&self, role: Role, tid: u32) {
        if let Some(base) = thread_cpu_ns(tid) {
            self.threads.lock().unwrap_or_else(|p| p.into_inner()).push((role, tid, base));
        }
    }
    /// Reads every registered thread's CPU clock (a thread gone since counts nothing more).
    pub fn snapshot(&self) -> CpuSnapshot {
        let threads = self.threads.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let mut roles: Vec<(Role, u64, u64)> = Role::ALL.iter().map(|&r| (r, 0, 0)).collect();
        for (role, tid, base) in threads {
            let slot = &mut roles[Role::ALL.iter().position(|&r| r == role).unwrap_or(0)];
            slot.1 += 1;
            slot.2 += thread_cpu_ns(tid).map_or(0, |ns| ns.saturating_sub(base));
        }
        // Read after the roles: the match share is never more than the roles' CPU it is part of.
        let daemon: u64 = roles.iter().map(|r| r.2).sum();
        let match_ns = self.match_cpu_ns.load(Ordering::Relaxed).min(daemon);
        CpuSnapshot { roles, match_ns }
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
    /// Latency per stage of answered (Ok) requests.
    pub latency: StageHistograms,
    /// CURVE handshakes admitted and refused, per socket.
    pub auth: Arc<AuthCounters>,
    /// CPU time of the daemon's threads by role, and the executors' match share.
    pub cpu: CpuAccounts,
    /// The daemon runs the null matcher (benchmarks only; set at start): `stats` and the
    /// metrics page say so.
    pub null_matcher: bool,
    /// Requests each ZeroMQ socket shard's broker received (one entry per shard; set at start).
    pub shard_requests: Vec<AtomicU64>,
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
    pub(crate) fn count(&self, s: Status) {
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

/// The page's families, read from the live counters at each scrape (names and helps: here only).
pub struct Page {
    pub counters: Arc<Counters>,
    /// The rule-set version served now (read at each scrape).
    pub version: Box<dyn Fn() -> u64 + Send + Sync>,
}

impl fmt::Debug for Page {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("metrics::Page")
    }
}

impl Collector for Page {
    fn encode(&self, mut page: DescriptorEncoder) -> Result<(), fmt::Error> {
        let c = &self.counters;
        {
            let mut m =
                page.encode_descriptor("offload_requests", "Requests by outcome.", None, MetricType::Counter)?;
            for (outcome, v) in c.snapshot().into_iter().filter(|(k, _)| !matches!(*k, "requests" | "queries")) {
                ConstCounter::new(v).encode(m.encode_family(&[("outcome", outcome)])?)?;
            }
        }
        let queries = c.queries.load(Ordering::Relaxed);
        let m = page.encode_descriptor("offload_queries", "Queries answered.", None, MetricType::Counter)?;
        ConstCounter::new(queries).encode(m)?;
        let version = (self.version)();
        let m = page.encode_descriptor(
            "offload_ruleset_version",
            "Rule-set version being served.",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(i64::try_from(version).unwrap_or(i64::MAX)).encode(m)?;
        {
            let help = "Time per pipeline stage (queue, encode, kernel_queue, match with its device parts h2d, \
                        kernel, d2h, reply).";
            let mut m = page.encode_descriptor("offload_stage_seconds", help, None, MetricType::Histogram)?;
            for s in crate::protocol::Stage::ALL {
                c.latency.stages[s as usize].encode(m.encode_family(&[("stage", s.name())])?)?;
            }
        }
        let help = "Time from receiving a request to its reply leaving a worker.";
        c.latency.server.encode(page.encode_descriptor(
            "offload_server_seconds",
            help,
            None,
            MetricType::Histogram,
        )?)?;
        let help = "1 when the daemon runs the null matcher (benchmarks only: no query is matched, every answer \
                    is 'no match'); 0 when its answers are real.";
        let m = page.encode_descriptor("offload_null_matcher", help, None, MetricType::Gauge)?;
        ConstGauge::new(i64::from(c.null_matcher)).encode(m)?;
        let cpu = c.cpu.snapshot();
        {
            let help = "CPU time of the daemon's threads since serving started, by role (broker, worker, executor, \
                        zmq_io) and match (the executors' share spent matching).";
            let mut m = page.encode_descriptor("offload_cpu_seconds", help, None, MetricType::Counter)?;
            for (part, ns) in cpu.parts().into_iter().filter(|(k, _)| !matches!(*k, "daemon" | "host_path")) {
                ConstCounter::new(ns as f64 / 1e9).encode(m.encode_family(&[("part", part)])?)?;
            }
        }
        if queries > 0 {
            let help = "CPU ns per answered query since serving started, by part: the roles, match, daemon (all \
                        roles) and host_path (daemon less match).";
            let mut m = page.encode_descriptor("offload_cpu_ns_per_query", help, None, MetricType::Gauge)?;
            for (part, ns) in cpu.parts() {
                ConstGauge::new(ns as f64 / queries as f64).encode(m.encode_family(&[("part", part)])?)?;
            }
        }
        {
            let help = "Requests each ZeroMQ socket shard's broker received (--shards).";
            let mut m = page.encode_descriptor("offload_shard_requests", help, None, MetricType::Counter)?;
            for (shard, n) in c.shard_requests.iter().enumerate() {
                let shard = shard.to_string();
                ConstCounter::new(n.load(Ordering::Relaxed)).encode(m.encode_family(&[("shard", shard.as_str())])?)?;
            }
        }
        let help = "CURVE handshakes by socket and outcome.";
        let mut m = page.encode_descriptor("offload_auth", help, None, MetricType::Counter)?;
        for (k, v) in c.auth.snapshot() {
            let (socket, outcome) = k.split_once('_').unwrap_or((k, ""));
            ConstCounter::new(v).encode(m.encode_family(&[("socket", socket), ("outcome", outcome)])?)?;
        }
        Ok(())
    }
}

/// The page as Prometheus scrapes it (OpenMetrics text).
pub fn render(registry: &Registry) -> String {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, registry).expect("writing to a String cannot fail");
    out
}

/// Serves `GET /metrics` on `addr` (e.g. `127.0.0.1:9464`) until `stop`, one request at a time
/// (plenty for a scraper); anything else is 404.
pub fn serve_http(addr: &str, stop: Arc<AtomicBool>, page: Page) -> Result<std::thread::JoinHandle<()>, String> {
    let server = tiny_http::Server::http(addr).map_err(|e| format!("metrics endpoint {addr}: {e}"))?;
    let mut registry = Registry::default();
    registry.register_collector(Box::new(page));
    let content_type =
        tiny_http::Header::from_bytes("Content-Type", "application/openmetrics-text; version=1.0.0; charset=utf-8")
            .expect("a valid header");
    std::thread::Builder::new()
        .name("offload-metrics".into())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let Ok(Some(request)) = server.recv_timeout(Duration::from_millis(50)) else { continue };
                let found =
                    request.method() == &tiny_http::Method::Get && request.url().split('?').next() == Some("/metrics");
                let response = if found {
                    tiny_http::Response::from_string(render(&registry)).with_header(content_type.clone())
                } else {
                    tiny_http::Response::from_string("try /metrics\n").with_status_code(404)
                };
                let _ = request.respond(response);
            }
        })
        .map_err(|e| format!("spawn metrics thread: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_parts_add_up_and_divide_by_the_queries() {
        let snap = CpuSnapshot {
            roles: vec![
                (Role::Broker, 1, 100),
                (Role::Worker, 2, 200),
                (Role::Executor, 1, 400),
                (Role::ZmqIo, 1, 300),
            ],
            match_ns: 250,
        };
        let parts: std::collections::HashMap<_, _> = snap.parts().into_iter().collect();
        assert_eq!((parts["daemon"], parts["host_path"], parts["match"]), (1000, 750, 250));
        let s = snap.summary(10);
        assert_eq!((s["ns_per_query"]["host_path"].as_f64(), s["threads"]["worker"].as_u64()), (Some(75.0), Some(2)));
        let cores = s["cores"].as_f64().unwrap();
        assert_eq!(s["host_path_ceiling_qps"].as_f64(), Some(cores * 1e9 / 75.0));
        assert!(
            snap.summary(0)["ns_per_query"]["daemon"].is_null() && snap.summary(0)["host_path_ceiling_qps"].is_null()
        );
        // The match share is what the matching thread's own clock counted, never more than the
        // roles' CPU it is part of.
        let acc = CpuAccounts::default();
        acc.register_me(Role::Executor);
        let before = this_thread_cpu_ns();
        let _ = (0..1_000_000u64).fold(0u64, |a, x| std::hint::black_box(a ^ x.wrapping_mul(31)));
        let spent = this_thread_cpu_ns() - before;
        assert!(spent > 0, "the thread clock moves");
        acc.match_cpu_ns.store(spent, Ordering::Relaxed);
        let snap = acc.snapshot();
        let executor = snap.roles.iter().find(|r| r.0 == Role::Executor).unwrap().2;
        assert!(snap.match_ns == spent.min(executor) && spent <= executor + 1_000_000, "{snap:?} {spent}");
        acc.match_cpu_ns.store(u64::MAX, Ordering::Relaxed);
        let snap = acc.snapshot();
        assert!(snap.match_ns <= snap.daemon_ns(), "{snap:?}");
    }

    #[test]
    fn quantiles_are_bucket_upper_bounds() {
        let h = Histogram::default();
        assert_eq!(h.quantile_ns(0.5), 0);
        for ns in [1_000u64, 1_500, 2_000, 100_000] {
            h.record(ns);
        }
        assert_eq!(h.count(), 4);
        let p50 = h.quantile_ns(0.5);
        assert!((1_500..=2_047).contains(&p50), "{p50}");
        let max = h.quantile_ns(1.0);
        assert!((100_000..200_000).contains(&max), "{max}");
        let mut registry = Registry::default();
        registry.register("x_seconds", "A test.", h);
        let page = render(&registry);
        assert!(page.contains("x_seconds_count 4") && page.contains("le=\"+Inf\"} 4"), "{page}");
        assert!(page.contains("# TYPE x_seconds histogram"), "{page}");
    }
}
