//! The knee of a running daemon over any endpoint (shm://, ipc://, tcp://) with pre-encoded
//! requests built here from the daemon's own rule files (version 1, 16-bit codes, no dictionary
//! fetch: what `offload serve bench --encoded` sends), and the daemon's CPU per query by part in
//! one more open-loop run at the knee's rate (`stats` → `cpu` on its control endpoint).
//!
//! ```text
//! cargo run --release -p offload-serve --example shm_knee -- ENDPOINT CONTROL RULETYPE RULES QUERIES \
//!     [REQUEST_SIZE=256] [SLA_US=5000] [STEPS=5] [SECONDS=3]
//! ```
//! One JSON object on stdout. The daemon is started apart (e.g. `offload-serve --matcher null
//! --kernels 0 -e shm://NAME -c ipc:///tmp/ctl.sock`), so the generator's process is not its own.

use offload_rules::{Engine, MatcherKind, RawColumn};
use offload_serve::loadgen::{self, Load, Spec};
use offload_serve::protocol::{self, Payload, Request};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

fn frames(ruletype: &str, rules: &str, queries: &str, size: usize) -> Vec<Vec<u8>> {
    let rs = offload_rules::load(Path::new(ruletype), Path::new(rules)).expect("rule files");
    let engine = Engine::compile(Arc::new(rs), MatcherKind::Linear).expect("compile");
    let q = offload_rules::queries::load_queries(&engine.rules().rule_type, Path::new(queries)).expect("queries");
    let n = q.columns[0].len();
    let width = engine.encoder.width() as u16;
    let fingerprint = protocol::rule_type_fingerprint(&engine.rules().rule_type);
    let bits16 = engine.encoder.dictionary().max_code_bits() <= 16;
    (0..8)
        .map(|f| {
            let cols: Vec<Vec<&str>> = q
                .columns
                .iter()
                .map(|c| {
                    let all: Vec<&str> = c.iter().collect();
                    (0..size).map(|i| all[(f * size + i) % n]).collect()
                })
                .collect();
            let raw: Vec<RawColumn> = cols.into_iter().map(RawColumn::Str).collect();
            let codes = engine.encoder.encode_columns(&raw).expect("encode");
            let payload = if bits16 {
                Payload::Encoded16 { encoding_version: 1, width, codes: codes.iter().map(|&c| c as u16).collect() }
            } else {
                Payload::Encoded { encoding_version: 1, width, codes }
            };
            let r = Request {
                request_id: 0,
                deadline_us: 0,
                stop_after: 0,
                n_queries: size as u32,
                criteria_fingerprint: fingerprint,
                payload,
            };
            protocol::encode_request(&r)
        })
        .collect()
}

fn stats(control: &str) -> serde_json::Value {
    offload_serve::client::control(control, &[b"stats"], None, Duration::from_secs(5)).expect("stats")
}

fn per_query(before: &serde_json::Value, after: &serde_json::Value) -> serde_json::Value {
    let q = |s: &serde_json::Value| s["cpu"]["queries"].as_f64().unwrap_or(0.0);
    let queries = (q(after) - q(before)).max(1.0);
    let mut m = serde_json::Map::new();
    for part in ["broker", "worker", "executor", "zmq_io", "shm", "match", "host_path"] {
        let ns = |s: &serde_json::Value| s["cpu"]["cpu_ns"][part].as_f64().unwrap_or(0.0);
        m.insert(part.into(), (((ns(after) - ns(before)) / queries * 10.0).round() / 10.0).into());
    }
    m.into()
}

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    if a.len() < 5 {
        eprintln!("usage: shm_knee ENDPOINT CONTROL RULETYPE RULES QUERIES [REQUEST_SIZE] [SLA_US] [STEPS] [SECONDS]");
        std::process::exit(2);
    }
    let num = |i: usize, default: f64| a.get(i).map_or(default, |v| v.parse().expect("a number"));
    let (size, sla_us, steps, secs) = (num(5, 256.0) as usize, num(6, 5000.0), num(7, 5.0) as u32, num(8, 3.0));
    let mut spec = Spec::new(&a[0], frames(&a[2], &a[3], &a[4], size), Load::Closed { in_flight: 1 });
    spec.duration = Duration::from_secs_f64(secs);
    spec.drain = Duration::from_secs(1);
    let sla = Duration::from_secs_f64(sla_us * 1e-6);
    let knee = loadgen::knee(&spec, sla, steps, None).expect("knee");
    let steps: Vec<serde_json::Value> = knee["runs"]
        .as_array()
        .map(|runs| {
            let step = |r: &serde_json::Value| serde_json::json!([r["rate_rps"], r["meets_sla"], r["misses"]]);
            runs.iter().filter(|r| r.get("rate_rps").is_some()).map(step).collect()
        })
        .unwrap_or_default();
    let mut out = serde_json::json!({"endpoint": a[0], "request_size": size, "sla_p99_us": sla_us,
                                     "knee": knee["knee"], "stopped": knee["stopped"], "steps": steps});
    if let Some(rate) = knee["knee"]["rate_rps"].as_f64() {
        let before = stats(&a[1]);
        let at = loadgen::run(&Spec { load: Load::Open { rate }, ..spec.clone() }).expect("run at the knee");
        let after = stats(&a[1]);
        out["at_knee"] = serde_json::json!({"queries_per_s": at.queries_per_s, "p99_us": at.p99_us(),
            "generator_bound": at.generator_bound, "daemon_cpu_ns_per_query": per_query(&before, &after)});
    }
    println!("{out}");
}
