//! Developer tool: `cargo run --release --example encbench -- RULETYPE RULES QUERIES [N] [PASSES]`.
//! Times the batch encoder alone (`Encoder::encode_columns`) on the queries' raw values,
//! tiled or cut to N queries (default 200,000) and laid out back to back as the query-file
//! reader and Arrow input have them; prints ns/query, min and median of PASSES (default 7),
//! and a checksum of the codes so two builds can be compared for equal output.

use offload_rules::{load, Encoder, RawColumn, StringColumn};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() < 4 {
        eprintln!("usage: encbench RULETYPE RULES QUERIES [N] [PASSES]");
        std::process::exit(2);
    }
    let n: usize = a.get(4).map_or(200_000, |s| s.parse().expect("N"));
    let passes: usize = a.get(5).map_or(7, |s| s.parse().expect("PASSES"));
    let rs = Arc::new(load(Path::new(&a[1]), Path::new(&a[2])).unwrap_or_else(|e| panic!("{e}")));
    let q = offload_rules::queries::load_queries(&rs.rule_type, Path::new(&a[3])).unwrap_or_else(|e| panic!("{e}"));
    assert!(!q.is_empty(), "no queries");
    let packed: Vec<StringColumn> = q
        .columns
        .iter()
        .map(|c| {
            let mut p = StringColumn::default();
            (0..n).for_each(|i| p.push(c.get(i % q.len())));
            p
        })
        .collect();
    drop(q);
    let raw: Vec<RawColumn> = packed.iter().map(StringColumn::as_raw).collect();
    let enc = Encoder::new(rs);
    let mut times = Vec::new();
    let mut sum = 0u64;
    for _ in 0..passes.max(1) {
        let t = Instant::now();
        let codes = enc.encode_columns(&raw).unwrap_or_else(|e| panic!("{e}"));
        times.push(t.elapsed().as_secs_f64() * 1e9 / n as f64);
        sum = codes.iter().fold(0u64, |s, &c| s.wrapping_mul(31).wrapping_add(c as u64));
        std::hint::black_box(&codes);
    }
    times.sort_by(f64::total_cmp);
    println!(
        "{n} queries x {} passes: min {:.1} median {:.1} ns/query (checksum {sum:016x})",
        times.len(),
        times[0],
        times[times.len() / 2]
    );
}
