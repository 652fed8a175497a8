//! Measures the shared-memory transport against ZeroMQ, for issue 40's choice of transport.
//!
//! 1. The rings alone (`shm::ring_echo`): a closed loop of 4,096-byte requests (a 256-query
//!    pre-encoded frame is ~4 KiB) echoed as 2,304-byte replies between two threads, busy-polling
//!    and spin-then-park. The iceoryx2 prototype (`benches/shm_iceoryx2`) measures the same loop.
//! 2. The daemon (in this process, null matcher, inline mode, one endpoint each of shm, ipc, tcp),
//!    256-query pre-encoded requests (16-bit codes): one closed-loop client (one request out),
//!    then a saturating one (32 out on one connection), the round trips per second and the
//!    daemon's CPU per query by role (`stats` → `cpu`) over each.
//!
//! `cargo run --release -p offload-serve --example shm_transports -- [SECONDS]` prints one JSON
//! object per line.

use offload_rules::{Engine, MatcherKind};
use offload_serve::client::{control, Client, Query};
use offload_serve::server::{self, Config, Served};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

fn quantile(sorted: &[u64], q: f64) -> u64 {
    sorted.get(((sorted.len() as f64 * q) as usize).min(sorted.len().saturating_sub(1))).copied().unwrap_or(0)
}

fn rings_alone(secs: f64) {
    for busy_poll in [true, false] {
        let mut t = offload_serve::shm::ring_echo(secs, 4096, 2304, busy_poll).expect("ring echo");
        t.sort_unstable();
        println!(
            "{}",
            serde_json::json!({"what": "rings alone", "wait": if busy_poll {"busy-poll"} else {"spin then futex"},
                "request_bytes": 4096, "reply_bytes": 2304, "round_trips_per_s": t.len() as f64 / secs,
                "p50_ns": quantile(&t, 0.5), "p99_ns": quantile(&t, 0.99), "max_ns": t.last(),
                "over_1ms": t.iter().filter(|&&ns| ns > 1_000_000).count(),
                "longest_us": t.iter().rev().take(8).map(|ns| ns / 1000).collect::<Vec<_>>()})
        );
    }
}

/// 256 queries of the example rule set, pre-encoded (16-bit codes).
fn request(engine: &Engine) -> Query {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/examples/mct-mini/queries.csv");
    let q = offload_rules::queries::load_queries(&engine.rules().rule_type, &example).expect("queries");
    let cols: Vec<Vec<&str>> =
        q.columns.iter().map(|c| c.iter().collect::<Vec<_>>().into_iter().cycle().take(256).collect()).collect();
    let raw: Vec<offload_rules::RawColumn> = cols.into_iter().map(offload_rules::RawColumn::Str).collect();
    let codes = engine.encoder.encode_columns(&raw).expect("encode");
    let fp = offload_serve::protocol::rule_type_fingerprint(&engine.rules().rule_type);
    Query::encoded(fp, 1, engine.encoder.width() as u16, codes)
}

/// The same request as one frame with 16-bit codes, as `EncodingClient` sends it.
fn frame(engine: &Engine) -> Vec<u8> {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/examples/mct-mini/queries.csv");
    let q = offload_rules::queries::load_queries(&engine.rules().rule_type, &example).expect("queries");
    let cols: Vec<Vec<&str>> =
        q.columns.iter().map(|c| c.iter().collect::<Vec<_>>().into_iter().cycle().take(256).collect()).collect();
    let raw: Vec<offload_rules::RawColumn> = cols.into_iter().map(offload_rules::RawColumn::Str).collect();
    let codes = engine.encoder.encode_columns(&raw).expect("encode");
    let width = engine.encoder.width() as u16;
    offload_serve::protocol::encode_request(&offload_serve::protocol::Request {
        request_id: 1,
        deadline_us: 0,
        stop_after: 0,
        n_queries: 256,
        criteria_fingerprint: offload_serve::protocol::rule_type_fingerprint(&engine.rules().rule_type),
        payload: offload_serve::protocol::Payload::Encoded16 {
            encoding_version: 1,
            width,
            codes: codes.iter().map(|&c| c as u16).collect(),
        },
    })
}

/// `in_flight` requests out on one connection for `secs`, each reply answered by the next
/// request; returns the round trips per second.
fn saturate(endpoint: &str, frame: &[u8], in_flight: usize, secs: f64) -> f64 {
    let until = |s: f64| Instant::now() + Duration::from_secs_f64(s);
    let t0 = Instant::now();
    let mut n = 0u64;
    if endpoint.starts_with("shm://") {
        let mut c = offload_serve::shm::Connection::connect(endpoint, Duration::from_secs(5)).expect("connect");
        for _ in 0..in_flight {
            c.send(frame, until(5.0)).expect("send");
        }
        while t0.elapsed().as_secs_f64() < secs {
            c.recv(until(5.0), |_| ()).expect("reply");
            c.send(frame, until(5.0)).expect("send");
            n += 1;
        }
        for _ in 0..in_flight {
            c.recv(until(5.0), |_| ()).expect("reply");
        }
    } else {
        let ctx = zmq::Context::new();
        let s = ctx.socket(zmq::DEALER).expect("socket");
        s.connect(endpoint).expect("connect");
        for _ in 0..in_flight {
            s.send(frame, 0).expect("send");
        }
        while t0.elapsed().as_secs_f64() < secs {
            s.recv_bytes(0).expect("reply");
            s.send(frame, 0).expect("send");
            n += 1;
        }
        for _ in 0..in_flight {
            s.recv_bytes(0).expect("reply");
        }
    }
    n as f64 / t0.elapsed().as_secs_f64()
}

/// The daemon's CPU per query by part between two `stats`.
fn per_query(before: &serde_json::Value, after: &serde_json::Value) -> serde_json::Value {
    let q = |s: &serde_json::Value| s["cpu"]["queries"].as_f64().unwrap_or(0.0);
    let queries = (q(after) - q(before)).max(1.0);
    let mut m = serde_json::Map::new();
    for part in ["broker", "worker", "zmq_io", "shm", "host_path"] {
        let ns = |s: &serde_json::Value| s["cpu"]["cpu_ns"][part].as_f64().unwrap_or(0.0);
        m.insert(part.into(), (((ns(after) - ns(before)) / queries * 10.0).round() / 10.0).into());
    }
    m.into()
}

fn daemon(secs: f64) {
    let dir = std::env::temp_dir().join(format!("offload-shm-transports-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/examples/mct-mini");
    let engine = || {
        let rs = offload_rules::load(&examples.join("ruletype.toml"), &examples.join("rules.csv")).expect("rules");
        Engine::compile(Arc::new(rs), MatcherKind::Linear).expect("compile")
    };
    let query = request(&engine());
    for endpoint in [
        format!("shm://{}/d.sock", dir.display()),
        format!("ipc://{}/d.ipc", dir.display()),
        "tcp://127.0.0.1:0".into(),
    ] {
        let endpoint = if endpoint.starts_with("tcp") {
            let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
            format!("tcp://127.0.0.1:{port}")
        } else {
            endpoint
        };
        let ctl = format!("ipc://{}/control.ipc", dir.display());
        let cfg = Config {
            endpoints: vec![endpoint.clone()],
            control: Some(ctl.clone()),
            workers: 1,
            kernels: 0,
            engine_threads: 1,
            null_matcher: true,
            ..Config::default()
        };
        let served = Arc::new(RwLock::new(Arc::new(Served::new(engine(), 1, MatcherKind::Linear))));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, (tx, rx)) = (stop.clone(), std::sync::mpsc::channel());
        let thread = std::thread::spawn(move || {
            server::run_with(served, &cfg, s, move |_| {
                let _ = tx.send(());
            })
        });
        rx.recv_timeout(Duration::from_secs(20)).expect("the daemon serves");
        let mut c = Client::connect(&endpoint).expect("connect");
        c.call(query.clone()).expect("warm-up");
        let stats = || control(&ctl, &[b"stats"], None, Duration::from_secs(5)).expect("stats");
        let before = stats();
        let (t0, mut times) = (Instant::now(), Vec::new());
        while t0.elapsed().as_secs_f64() < secs {
            let t = Instant::now();
            c.call(query.clone()).expect("call");
            times.push(t.elapsed().as_nanos() as u64);
        }
        let after = stats();
        times.sort_unstable();
        println!(
            "{}",
            serde_json::json!({"what": "daemon, null matcher, inline, one request out",
                "transport": endpoint.split("://").next(), "queries_per_request": 256,
                "round_trips_per_s": times.len() as f64 / secs, "p50_ns": quantile(&times, 0.5),
                "p99_ns": quantile(&times, 0.99), "max_ns": times.last(),
                "over_1ms": times.iter().filter(|&&ns| ns > 1_000_000).count(),
                "daemon_cpu_ns_per_query": per_query(&before, &after)})
        );
        let request = frame(&engine());
        let before = stats();
        let per_s = saturate(&endpoint, &request, 32, secs);
        let after = stats();
        println!(
            "{}",
            serde_json::json!({"what": "daemon, null matcher, inline, 32 requests out on one connection",
                "transport": endpoint.split("://").next(), "queries_per_request": 256,
                "round_trips_per_s": per_s, "queries_per_s": per_s * 256.0,
                "daemon_cpu_ns_per_query": per_query(&before, &after)})
        );
        stop.store(true, Ordering::Relaxed);
        let _ = thread.join();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn main() {
    let secs: f64 = std::env::args().nth(1).map_or(2.0, |s| s.parse().expect("SECONDS"));
    rings_alone(secs);
    daemon(secs);
}
