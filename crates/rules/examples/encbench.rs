//! Developer tool: `cargo run --release --example encbench -- RULETYPE RULES QUERIES [N] [PASSES]`.
//! Times the batch encoder alone (`Encoder::encode_columns`) on the queries' raw values,
//! tiled or cut to N queries (default 200,000) and laid out back to back as the query-file
//! reader and Arrow input have them; prints ns/query, min and median of PASSES (default 7), in
//! wall-clock time and in the thread's CPU time (which a busy machine's preemptions do not
//! inflate), and a checksum of the codes so two builds can be compared for equal output. With
//! `ENCBENCH_PER_COLUMN=1` it also prints the time with every column holding one repeated value
//! (the loop's own overhead), and what each column adds when it alone holds the trace's values
//! (fastest passes).

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
    let enc = Encoder::new(rs.clone());
    let (times, wall, sum) = time(&enc, &raw, n, passes);
    println!(
        "{n} queries x {} passes: cpu min {:.1} median {:.1}, wall min {:.1} median {:.1} ns/query (checksum {sum:016x})",
        times.len(),
        times[0],
        times[times.len() / 2],
        wall[0],
        wall[wall.len() / 2]
    );
    if std::env::var_os("ENCBENCH_PER_COLUMN").is_some() {
        // Every column one repeated value: what remains is the per-value overhead of the loop.
        let ones: Vec<StringColumn> = packed
            .iter()
            .map(|p| {
                let mut one = StringColumn::default();
                (0..n).for_each(|_| one.push(p.get(0)));
                one
            })
            .collect();
        let cols: Vec<RawColumn> = ones.iter().map(StringColumn::as_raw).collect();
        let (t, _, _) = time(&enc, &cols, n, passes);
        let base = t[0];
        println!("  every column constant: {base:.1} ns/query; each column alone as in the trace adds:");
        for (c, crit) in rs.rule_type.criteria.iter().enumerate() {
            let mut cols: Vec<RawColumn> = ones.iter().map(StringColumn::as_raw).collect();
            cols[c] = packed[c].as_raw();
            let (t, _, _) = time(&enc, &cols, n, passes);
            println!("  {:<12} {:>6.1} ns/query", crit.code, t[0] - base);
        }
    }
}

/// ns/query of every pass in CPU time (sorted), the same in wall-clock time, and a checksum of
/// the codes.
fn time(enc: &Encoder, raw: &[RawColumn], n: usize, passes: usize) -> (Vec<f64>, Vec<f64>, u64) {
    let (mut cpu, mut wall) = (Vec::new(), Vec::new());
    let mut sum = 0u64;
    for _ in 0..passes.max(1) {
        let (t, c) = (Instant::now(), thread_cpu_s());
        let codes = enc.encode_columns(raw).unwrap_or_else(|e| panic!("{e}"));
        cpu.push((thread_cpu_s() - c) * 1e9 / n as f64);
        wall.push(t.elapsed().as_secs_f64() * 1e9 / n as f64);
        sum = codes.iter().fold(0u64, |s, &c| s.wrapping_mul(31).wrapping_add(c as u64));
        std::hint::black_box(&codes);
    }
    cpu.sort_by(f64::total_cmp);
    wall.sort_by(f64::total_cmp);
    (cpu, wall, sum)
}

/// CPU time of the calling thread, in seconds.
fn thread_cpu_s() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes only the timespec it is handed, a live local here.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}
