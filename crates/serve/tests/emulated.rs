//! The emulated device (issue 25, benchmarks only), served with real sockets: its answers are the
//! fast matcher's, a query not in the precomputed trace included (a miss, still exact); a batch
//! is held at least the profile's time for its size (a lower bound only: the machine is noisy);
//! the replies carry the device stages. Every wait is bounded.

mod common;

use common::{engine, example, in_process, names, queries, scratch, Daemon};
use offload_serve::benchmark_only::emulated::{DeviceCosts, Spec};
use offload_serve::client::{Client, Query};
use offload_serve::protocol::{Stage, Status};
use offload_serve::server::Config;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Costs large enough to see on a noisy machine: 1 ms launch, 2 ms of copy latency, 100 B per
/// query at 1 MB/s, 3 ms kernel floor and 0.1 ms per query.
const SLOW: &str = "[costs]\nkernel_on_host = false\ninvoke_s = 1e-3\ntransfer_latency_s = 2e-3\n\
                    transfer_bps = 1e6\ntransfer_bytes_per_query = 100.0\nkernel_query_s = 1e-4\n\
                    kernel_fixed_s = 3e-3\n";

#[test]
fn the_emulated_device_answers_exactly_holds_each_batch_and_reports_its_stages() {
    let dir = scratch("emulated");
    let profile = dir.join("slow.toml");
    std::fs::write(&profile, SLOW).unwrap();
    // The trace to precompute: the example queries less the last one, which is then a miss.
    let text = std::fs::read_to_string(example("queries.csv")).unwrap();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let trace = dir.join("trace.csv");
    std::fs::write(&trace, lines[..lines.len() - 1].join("\n") + "\n").unwrap();
    let spec = Spec { costs: DeviceCosts::from_file(&profile).unwrap(), profile, queries: trace };
    let (emulated, counters) = offload_serve::emulate_device(engine(), &spec).unwrap();
    assert_eq!(emulated.matcher.name(), "emulated");
    assert!(emulated.matcher.on_device());

    let data = format!("ipc://{}/d.sock", dir.display());
    let cfg = Config { endpoints: vec![data.clone()], ..Config::default() };
    let daemon = Daemon::start(emulated, cfg);

    let mut c = Client::connect(&data).unwrap();
    c.timeout = Duration::from_secs(20);
    let names = names();
    for times in [1, 5] {
        let cols = queries(&engine(), times);
        let n = cols[0].len();
        let (_, want) = in_process(&engine(), &cols);
        let misses_before = counters.misses.load(Ordering::Relaxed);
        let t = Instant::now();
        let r = c.call(Query::raw(&names, &cols)).unwrap();
        let round_trip = t.elapsed();
        assert_eq!(r.status, Status::Ok, "{}", r.message);
        assert_eq!(r.rule, want, "the fast matcher's answers, {times} times the example queries");
        // One query of the example (its last) was not in the trace: once per repetition.
        assert_eq!(counters.misses.load(Ordering::Relaxed) - misses_before, times as u64);

        let batch = spec.costs.batch(n, offload_serve::benchmark_only::emulated::ENGINES);
        let stage = |id: Stage| r.stages_ns.iter().find(|s| s.0 == id as u8).map(|s| s.1);
        let ns = |s: f64| (s * 1e9) as u64;
        assert_eq!(stage(Stage::H2d), Some(ns(batch.h2d_s)), "{:?}", r.stages_ns);
        assert_eq!(stage(Stage::Kernel), Some(ns(batch.kernel_s)));
        assert_eq!(stage(Stage::D2h), Some(ns(batch.d2h_s)));
        // Held at least the profile's time: the match stage and the round trip (lower bounds).
        let total = Duration::from_secs_f64(batch.total_s());
        assert!(total > Duration::from_millis(6));
        assert!(stage(Stage::Match).unwrap() >= total.as_nanos() as u64, "{:?} < {total:?}", r.stages_ns);
        assert!(round_trip >= total, "{round_trip:?} < {total:?}");
    }
    assert_eq!(counters.batches.load(Ordering::Relaxed), 2);
    // Each batch came back at or after its due instant, by an error the counters keep.
    assert_eq!(counters.timing_error.count(), 2);
    assert!(counters.timing_error.quantile_ns(0.5) <= counters.timing_error.max_ns());
    assert_eq!(counters.fallbacks.load(Ordering::Relaxed), 0);
    daemon.stop();
}

#[test]
fn a_queries_file_that_does_not_parse_is_one_line_naming_it() {
    let dir = scratch("emulated-bad");
    let bad = dir.join("bad.csv");
    std::fs::write(&bad, "NOT_AN_ID,X\n1,2\n").unwrap();
    let profile = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/plans/whatif/gpu-h200.toml");
    let spec = Spec { costs: DeviceCosts::from_file(&profile).unwrap(), profile, queries: bad };
    let Err(e) = offload_serve::emulate_device(engine(), &spec) else { panic!("a bad queries file was taken") };
    assert!(e.contains("bad.csv") && !e.contains('\n'), "{e}");
}
