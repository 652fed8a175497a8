//! Prints every channel's quick measurement: `cargo run --release -p offload-probe --example probe_all [full]`.
fn main() {
    let full = std::env::args().nth(1).as_deref() == Some("full");
    let dir = std::env::temp_dir();
    for c in offload_probe::CHANNELS {
        let t = std::time::Instant::now();
        match offload_probe::run(c, !full, &dir) {
            Ok(ch) => {
                let p = &ch.points[0];
                let l = ch.points.last().unwrap();
                let f = ch.fit.map(|f| format!("L {:.2} us B {:.2} GB/s", f.latency_s * 1e6, f.bandwidth_bps / 1e9));
                println!(
                    "{c:28} {:>9} B {:>9.2} us | {:>10} B {:>7.2} GB/s | {:?} ({:.1} s)",
                    p.bytes,
                    p.median_s * 1e6,
                    l.bytes,
                    l.bandwidth_bps / 1e9,
                    f,
                    t.elapsed().as_secs_f64()
                )
            }
            Err(e) => println!("{c}: error {e}"),
        }
    }
    println!("{:?}", offload_probe::uring::nop(offload_probe::measure::Budget::QUICK));
    let dir = std::env::var("PROBE_DIR").map(std::path::PathBuf::from).unwrap_or(dir);
    let secs = if full { 2.0 } else { 0.3 };
    match offload_probe::uring::random_reads(
        &dir,
        256 << 20,
        &[1, 2, 4, 8, 16, 32, 64, 128],
        std::time::Duration::from_secs_f64(secs),
    ) {
        Ok(r) => {
            for p in r.points {
                println!(
                    "QD {:3} {:8.0} IOPS p50 {:6.1} us p99 {:6.1} us",
                    p.queue_depth,
                    p.iops,
                    p.p50_s * 1e6,
                    p.p99_s * 1e6
                )
            }
        }
        Err(e) => println!("random reads: {e}"),
    }
}
