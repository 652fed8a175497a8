//! Latency histograms per pipeline stage, and the Prometheus page: its families written by
//! `prometheus-client`'s text encoder, served by `tiny_http`.
//!
//! The histograms stay our own (prometheus-client's takes a write lock per observation): 40
//! power-of-two buckets of nanoseconds (1 ns .. ~9 min, the last one open), one atomic counter
//! each, so recording costs one `leading_zeros` and two relaxed increments on the hot path.
//! They encode as prometheus-client histograms; quantiles (`stats`) are read as the upper bound
//! of the bucket that holds them (within a factor of 2), which is what the page's cumulative
//! buckets give anyway.

use crate::server::{Counters, Current};
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

/// The page's families, read from the live counters at each scrape (names and helps: here only).
pub struct Page {
    pub counters: Arc<Counters>,
    pub current: Current,
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
        let version = crate::server::snapshot(&self.current).version;
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
