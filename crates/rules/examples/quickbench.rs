//! Developer tool: `cargo run --release --example quickbench -- RULETYPE RULES QUERIES [MATCHER]`.
//! Compiles a matcher, times it on pre-encoded queries (median of 5) and checks a sample of
//! answers against the linear scan. The product's benchmark is `offload rules bench`.

use offload_rules::{load, Engine, MatcherKind};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() < 4 {
        eprintln!("usage: quickbench RULETYPE RULES QUERIES [linear|nfa|fast]");
        std::process::exit(2);
    }
    let kind: MatcherKind = a.get(4).map_or("fast", |s| s.as_str()).parse().expect("matcher");
    let rs = Arc::new(load(Path::new(&a[1]), Path::new(&a[2])).unwrap_or_else(|e| panic!("{e}")));
    let eng = Engine::compile(rs.clone(), kind).unwrap();
    println!(
        "{} rules, compile {:.3} s, {:.1} MB",
        rs.len(),
        eng.compile_time.as_secs_f64(),
        eng.matcher.memory_bytes() as f64 / 1e6
    );
    println!("{}", eng.matcher.stats());
    let q = offload_rules::queries::load_queries(&rs.rule_type, Path::new(&a[3])).unwrap_or_else(|e| panic!("{e}"));
    let t = Instant::now();
    let codes = q.encode(&eng.encoder, Path::new(&a[3])).unwrap_or_else(|e| panic!("{e}"));
    let enc_s = t.elapsed().as_secs_f64();
    let mut times = Vec::new();
    let mut out = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        out = eng.match_encoded(&codes, 1);
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    let med = times[2];
    println!(
        "{} queries: {:.2} M/s matching (median of 5), encode {:.0} ns/query",
        q.len(),
        q.len() as f64 / med / 1e6,
        enc_s * 1e9 / q.len() as f64
    );
    if std::env::var_os("QUICKBENCH_NO_CHECK").is_some() {
        return;
    }
    let lin = Engine::compile(rs.clone(), MatcherKind::Linear).unwrap();
    let n = q.len().min(3000);
    let step = (q.len() / n.max(1)).max(1);
    let mut bad = 0;
    for i in (0..q.len()).step_by(step).take(n) {
        let w = eng.encoder.width();
        let r = lin.match_encoded(&codes[i * w..(i + 1) * w], 1)[0];
        if r != out[i] {
            bad += 1;
        }
    }
    println!("checked {n} answers against linear: {bad} differ");
    assert_eq!(bad, 0);
}
