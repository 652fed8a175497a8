//! How the daemon takes work (issue 25), served with real sockets: inline mode (`kernels = 0`)
//! answers exactly as the pipeline does, for raw, 32- and 16-bit pre-encoded requests, early
//! stop, stale versions and passed deadlines; the self-filling batcher never holds a lone request
//! while the device is idle (the size-or-timeout policy does, for its timeout), and while the
//! device is busy the requests that queue meanwhile are matched together. The device is the
//! emulated one with costs large enough to see on a noisy machine. Every wait is bounded; times
//! are asserted as generous bounds on one side only.

mod common;

use common::{engine, example, fingerprint, in_process, names, queries, scratch, Daemon};
use offload_rules::{Engine, NO_MATCH};
use offload_serve::benchmark_only::emulated::{Counters as DeviceCounters, DeviceCosts, Spec};
use offload_serve::client::{Client, Query};
use offload_serve::protocol::{self, Payload, Request, Status};
use offload_serve::server::Config;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[test]
fn inline_mode_answers_as_the_pipeline_does() {
    let dir = scratch("inline");
    let eng = engine();
    let cols = queries(&eng, 40);
    let (codes, want) = in_process(&eng, &cols);
    let w = eng.encoder.width() as u16;
    let contents = eng.rules().contents.clone();
    for kernels in [0, 2] {
        let ep = format!("ipc://{}/k{kernels}.sock", dir.display());
        let cfg = Config { endpoints: vec![ep.clone()], kernels, batch_max_queries: 100, ..Config::default() };
        let d = Daemon::start(engine(), cfg);
        let mut c = Client::connect(&ep).unwrap();
        c.timeout = Duration::from_secs(20);
        let r = c.call(Query::raw(&names(), &cols)).unwrap();
        assert_eq!((r.status, &r.rule), (Status::Ok, &want), "raw, k = {kernels}: {}", r.message);
        let content: Vec<i64> = want.iter().map(|&x| if x == NO_MATCH { 0 } else { contents[x as usize] }).collect();
        assert_eq!(r.content, content);
        let r = c.call(Query::encoded(fingerprint(), 1, w, codes.clone())).unwrap();
        assert_eq!((r.status, &r.rule), (Status::Ok, &want), "encoded, k = {kernels}: {}", r.message);
        // 16-bit codes (the example's codes all fit), whole and with early stop (a prefix).
        let short: Vec<u16> = codes.iter().map(|&x| u16::try_from(x).unwrap()).collect();
        let sixteen = Payload::Encoded16 { encoding_version: 1, width: w, codes: short };
        let r = &in_flight(&ep, &sixteen, 0, 1)[0];
        assert_eq!((r.status, &r.rule), (Status::Ok, &want), "16-bit, k = {kernels}: {}", r.message);
        let r = &in_flight(&ep, &sixteen, 1, 1)[0];
        assert_eq!(r.status, Status::Ok, "{}", r.message);
        assert!(!r.rule.is_empty() && r.rule.len() < want.len() && want.starts_with(&r.rule), "k = {kernels}");
        // A stale encoding version is refused, never answered.
        let r = c.call(Query::encoded(fingerprint(), 7, w, codes.clone())).unwrap();
        assert_eq!(r.status, Status::BadRequest, "k = {kernels}");
        assert!(r.message.contains("version 7"), "{}", r.message);
        // A deadline already passed: not executed.
        let r = c.call(Query::encoded(fingerprint(), 1, w, codes.clone()).deadline(Duration::ZERO)).unwrap();
        assert_eq!(r.status, Status::DeadlineExceeded, "k = {kernels}: {}", r.message);
        // Many requests at once from one connection: each answered, in whatever order.
        let answers = in_flight(&ep, &encoded(&codes, w), 0, 30);
        assert!(answers.iter().all(|r| r.status == Status::Ok && r.rule == want), "k = {kernels}");
        let dict = c.fetch_dictionary().unwrap();
        assert_eq!((dict.status, dict.ruleset_version, dict.code_bits), (Status::Ok, 1, 16));
        d.stop();
    }
}

fn encoded(codes: &[u32], width: u16) -> Payload {
    Payload::Encoded { encoding_version: 1, width, codes: codes.to_vec() }
}

/// Sends `n` requests of `payload` at once on one DEALER and waits for every reply (20 s at most).
fn in_flight(endpoint: &str, payload: &Payload, stop_after: u32, n: u64) -> Vec<protocol::Reply> {
    let ctx = zmq::Context::new();
    let s = ctx.socket(zmq::DEALER).unwrap();
    s.connect(endpoint).unwrap();
    let (codes, width) = match payload {
        Payload::Encoded { codes, width, .. } => (codes.len(), *width),
        Payload::Encoded16 { codes, width, .. } => (codes.len(), *width),
        Payload::Raw(_) => unreachable!("pre-encoded payloads only"),
    };
    for id in 0..n {
        let req = Request {
            request_id: id,
            deadline_us: 0,
            stop_after,
            n_queries: (codes / width as usize) as u32,
            criteria_fingerprint: fingerprint(),
            payload: payload.clone(),
        };
        s.send(protocol::encode_request(&req), 0).unwrap();
    }
    let until = Instant::now() + Duration::from_secs(20);
    let mut replies = Vec::new();
    while replies.len() < n as usize && Instant::now() < until {
        if s.poll(zmq::POLLIN, 100).unwrap() > 0 {
            replies.push(protocol::decode_reply(&s.recv_bytes(0).unwrap()).unwrap());
        }
    }
    assert_eq!(replies.len(), n as usize, "every request answered within 20 s");
    replies
}

/// A device with 20 ms of fixed cost per batch and little per query: easy to see, cheap to run.
fn emulated(dir: &std::path::Path) -> (Engine, Arc<DeviceCounters>) {
    let profile = dir.join("slow.toml");
    std::fs::write(
        &profile,
        "[costs]\nkernel_on_host = false\ninvoke_s = 1e-3\ntransfer_latency_s = 1e-3\ntransfer_bps = 1e9\n\
         transfer_bytes_per_query = 100.0\nkernel_query_s = 1e-7\nkernel_fixed_s = 15e-3\n",
    )
    .unwrap();
    let spec = Spec { costs: DeviceCosts::from_file(&profile).unwrap(), profile, queries: example("queries.csv") };
    offload_serve::emulate_device(engine(), &spec).unwrap()
}

#[test]
fn self_filling_batches_never_hold_a_lone_request_and_grow_while_the_device_is_busy() {
    let dir = scratch("self-filling");
    let eng = engine();
    let cols = queries(&eng, 4);
    let (codes, want) = in_process(&eng, &cols);
    let w = eng.encoder.width() as u16;
    let hold = Duration::from_millis(400);
    // policy (max queries, timeout): self-filling, then the seed's size-or-timeout with a timeout
    // far longer than the device takes.
    for (timeout_us, lone_at_most, lone_at_least) in
        [(0, hold / 2, Duration::ZERO), (hold.as_micros() as u64, Duration::MAX, hold)]
    {
        let (emu, device) = emulated(&dir);
        let ep = format!("ipc://{}/t{timeout_us}.sock", dir.display());
        let cfg = Config {
            endpoints: vec![ep.clone()],
            kernels: 1,
            batch_max_queries: 1 << 20,
            batch_timeout_us: timeout_us,
            ..Config::default()
        };
        let d = Daemon::start(emu, cfg);
        let mut c = Client::connect(&ep).unwrap();
        c.timeout = Duration::from_secs(20);
        // A lone request on an idle device.
        let t = Instant::now();
        let r = c.call(Query::encoded(fingerprint(), 1, w, codes.clone())).unwrap();
        let took = t.elapsed();
        assert_eq!((r.status, &r.rule), (Status::Ok, &want), "{}", r.message);
        assert!(took >= lone_at_least && took < lone_at_most, "timeout {timeout_us} µs: a lone request took {took:?}");
        if timeout_us == 0 {
            // 24 requests at once while the device takes ≥ 17 ms a batch: after the first, the
            // rest queue and go in far fewer batches than requests.
            let before = device.batches.load(Ordering::Relaxed);
            let answers = in_flight(&ep, &encoded(&codes, w), 0, 24);
            assert!(answers.iter().all(|r| r.status == Status::Ok && r.rule == want));
            let batches = device.batches.load(Ordering::Relaxed) - before;
            assert!((1..=12).contains(&batches), "24 requests in {batches} batches");
        }
        d.stop();
    }
}
