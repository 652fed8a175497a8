//! The quick mode's orderings, measured for real on this machine (ratios, never absolute values;
//! margins are wide because CI machines are shared). Its own test binary, so no other test
//! competes for the CPUs while it measures.

use offload_probe::run;

const MIB: u64 = 1024 * 1024;

#[test]
fn quick_channels_run_and_keep_their_orderings() {
    let dir = std::env::temp_dir();
    // The 10th percentile: wake-up noise on a shared machine only ever adds time.
    let at = |c: &str, n: u64| run(c, true, &dir).unwrap().at(n).unwrap().p10_s;
    // Kernel channels on one core: on a VM a cross-core wake-up hides their own cost.
    let (shm, pipe, tcp) = (at("ipc/shared-memory", 64), at("ipc/pipe-1cpu", 64), at("ipc/tcp-loopback-1cpu", 64));
    assert!(shm < pipe && pipe < tcp, "64 B round trips: shm {shm} pipe {pipe} tcp {tcp}");
    let fresh = run("memory/copy-fresh", true, &dir).unwrap();
    let pre = run("memory/copy-prefaulted", true, &dir).unwrap();
    let (f, p) = (fresh.at(4 * MIB).unwrap().bandwidth_bps, pre.at(4 * MIB).unwrap().bandwidth_bps);
    assert!(p >= 2.0 * f, "4 MiB copies: prefaulted {p} B/s vs fresh mapping {f} B/s");
    let stream = run("zmq/inproc-stream", true, &dir).unwrap();
    let (small, large) = (stream.points.first().unwrap(), stream.points.last().unwrap());
    assert!(large.bandwidth_bps > 4.0 * small.bandwidth_bps, "{small:?} vs {large:?}");
    assert!(run("nope/x", true, &dir).unwrap_err().contains("unknown channel"));
}
