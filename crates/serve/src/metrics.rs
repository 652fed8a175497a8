//! Latency histograms per pipeline stage and a Prometheus text endpoint.
//!
//! Histograms are lock-free: 40 power-of-two buckets of nanoseconds (1 ns .. ~9 min), one
//! atomic counter each, so recording costs one `leading_zeros` and one relaxed increment on
//! the hot path. Quantiles are read as the upper bound of the bucket that holds them (within
//! a factor of 2), which is what the exposition format's cumulative buckets give anyway.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

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
    /// Prometheus exposition lines for this histogram (seconds).
    fn expose(&self, name: &str, labels: &str, out: &mut String) {
        let mut cum = 0;
        for (b, c) in self.counts.iter().enumerate() {
            cum += c.load(Ordering::Relaxed);
            let le = if b == 0 { 0.0 } else { ((1u64 << b) - 1) as f64 / 1e9 };
            out.push_str(&format!("{name}_bucket{{{labels}le=\"{le:e}\"}} {cum}\n"));
        }
        out.push_str(&format!("{name}_bucket{{{labels}le=\"+Inf\"}} {cum}\n"));
        let l = labels.trim_end_matches(',');
        let braces = if l.is_empty() { String::new() } else { format!("{{{l}}}") };
        out.push_str(&format!("{name}_sum{braces} {}\n", self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9));
        out.push_str(&format!("{name}_count{braces} {cum}\n"));
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
    pub fn expose(&self, out: &mut String) {
        out.push_str(
            "# HELP offload_stage_seconds Time per pipeline stage (queue, encode, kernel_queue, match with its device parts h2d, kernel, d2h, reply).\n",
        );
        out.push_str("# TYPE offload_stage_seconds histogram\n");
        for s in crate::protocol::Stage::ALL {
            let h = &self.stages[s as usize];
            h.expose("offload_stage_seconds", &format!("stage=\"{}\",", s.name()), out);
        }
        out.push_str("# HELP offload_server_seconds Time from receiving a request to its reply leaving a worker.\n");
        out.push_str("# TYPE offload_server_seconds histogram\n");
        self.server.expose("offload_server_seconds", "", out);
    }

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

/// Serves `GET /metrics` on `addr` (e.g. `127.0.0.1:9464`) until `stop`; `render` builds the
/// page. One connection at a time is plenty for a scraper.
pub fn serve_http(
    addr: &str,
    stop: Arc<AtomicBool>,
    render: impl Fn() -> String + Send + 'static,
) -> Result<std::thread::JoinHandle<()>, String> {
    let listener = TcpListener::bind(addr).map_err(|e| format!("metrics endpoint {addr}: {e}"))?;
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    Ok(std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            match listener.accept() {
                Ok((stream, _)) => {
                    let _ = stream.set_nonblocking(false);
                    let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(2)));
                    let mut reader = BufReader::new(&stream);
                    let mut line = String::new();
                    let _ = reader.read_line(&mut line);
                    // Drain the request headers.
                    let mut h = String::new();
                    while reader.read_line(&mut h).map(|n| n > 2).unwrap_or(false) {
                        h.clear();
                    }
                    let (status, body) = if line.starts_with("GET /metrics") {
                        ("200 OK", render())
                    } else {
                        ("404 Not Found", "try /metrics\n".to_string())
                    };
                    let mut w = &stream;
                    let _ = write!(
                        w,
                        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                }
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(20)),
            }
        }
    }))
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
        let mut s = String::new();
        h.expose("x", "", &mut s);
        assert!(s.contains("x_count 4") && s.contains("le=\"+Inf\"} 4"));
    }
}
