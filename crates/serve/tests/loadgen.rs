//! The load generator's latency accounting against a server with a known injected delay (a
//! single-threaded ROUTER that answers each request after 2 ms, so about 500 requests/s at most):
//! offered 3× that, the open loop shows the queueing (latency from due time) that a closed loop
//! with one request out, and the same run's send-to-reply times, do not — coordinated omission.
//! Then the knee search on that server, and a short run against the real daemon where every
//! request is answered. Every wait is bounded.

mod common;

use common::{engine, names, queries};
use offload_rules::MatcherKind;
use offload_serve::loadgen::{self, Load, Spec};
use offload_serve::protocol::{self, Payload, RawColumnOwned, Reply, Request, Status};
use offload_serve::server::{self, Config, Served};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

const DELAY: Duration = Duration::from_millis(2);

fn endpoint(name: &str) -> String {
    let dir = std::env::temp_dir().join(format!("offload-loadgen-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    format!("ipc://{}/{name}.sock", dir.display())
}

/// A ROUTER that answers every request Ok, one at a time, after `DELAY`, until stopped.
fn slow_server(ep: &str) -> (Arc<AtomicBool>, JoinHandle<u64>) {
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let ctx = zmq::Context::new();
    let sock = ctx.socket(zmq::ROUTER).unwrap();
    sock.set_linger(0).unwrap();
    sock.bind(ep).unwrap();
    let t = std::thread::spawn(move || {
        let _ctx = ctx;
        let mut n = 0;
        while !s.load(Ordering::Relaxed) {
            if sock.poll(zmq::POLLIN, 20).unwrap() == 0 {
                continue;
            }
            let parts = sock.recv_multipart(0).unwrap();
            std::thread::sleep(DELAY);
            let frame = &parts[parts.len() - 1];
            let q = protocol::peek_n_queries(frame) as usize;
            let r = Reply {
                rule: vec![0; q],
                content: vec![0; q],
                ..Reply::status_only(protocol::peek_request_id(frame), Status::Ok, 1, "")
            };
            sock.send_multipart([parts[0].clone(), protocol::encode_reply(&r)], 0).unwrap();
            n += 1;
        }
        n
    });
    (stop, t)
}

fn frame(n: u32) -> Vec<u8> {
    protocol::encode_request(&Request {
        request_id: 1,
        deadline_us: 0,
        stop_after: 0,
        n_queries: n,
        criteria_fingerprint: 7,
        payload: Payload::Encoded { encoding_version: 1, width: 1, codes: vec![0; n as usize] },
    })
}

/// A raw request of the example's columns (the criteria's fingerprint from their names).
fn raw_frame(cols: &[Vec<String>]) -> Vec<u8> {
    let columns = cols
        .iter()
        .map(|c| {
            let mut offsets = vec![0u32];
            let data: Vec<u8> = c.iter().flat_map(|v| v.bytes()).collect();
            c.iter().for_each(|v| offsets.push(offsets[offsets.len() - 1] + v.len() as u32));
            RawColumnOwned { offsets, data }
        })
        .collect();
    protocol::encode_request(&Request {
        request_id: 1,
        deadline_us: 0,
        stop_after: 0,
        n_queries: cols[0].len() as u32,
        criteria_fingerprint: protocol::criteria_fingerprint(names()),
        payload: Payload::Raw(columns),
    })
}

fn spec(ep: &str, load: Load, secs: f64) -> Spec {
    Spec {
        connections: 1,
        max_in_flight: 8,
        duration: Duration::from_secs_f64(secs),
        drain: Duration::from_millis(300),
        ..Spec::new(ep, vec![frame(4)], load)
    }
}

fn us(v: &serde_json::Value, hist: &str, q: &str) -> f64 {
    v[hist][q].as_f64().unwrap()
}

#[test]
fn open_loop_shows_the_queueing_that_a_closed_loop_hides() {
    let ep = endpoint("slow");
    let (stop, server) = slow_server(&ep);
    let delay_us = DELAY.as_secs_f64() * 1e6;

    let closed = loadgen::run(&spec(&ep, Load::Closed { in_flight: 1 }, 0.5)).unwrap();
    let c = closed.json();
    assert!(c["sent"].as_u64().unwrap() > 50 && c["unanswered"] == 0, "{c:#}");
    assert!(us(c, "latency_us", "p50") >= delay_us && us(c, "latency_us", "p50") < 10.0 * delay_us, "{c:#}");

    // 3× the server's capacity: requests wait in the server (and, the connection full, in the
    // generator); their latency grows with the run, from the time each was due.
    let open = loadgen::run(&spec(&ep, Load::Open { rate: 1500.0 }, 0.6)).unwrap();
    let o = open.json();
    assert!(us(o, "latency_us", "p50") > 50.0 * delay_us, "open loop shows no queueing: {o:#}");
    // against the closed loop's median: its p99 can be one scheduler hiccup on a loaded machine
    assert!(us(o, "latency_us", "p50") > 20.0 * us(c, "latency_us", "p50"), "{o:#}\n{c:#}");
    // the same run timed from each send (8 out at most: ~8 × 2 ms) hides it, as a closed loop does
    assert!(us(o, "service_us", "p50") < us(o, "latency_us", "p50") / 5.0, "{o:#}");
    assert!(o["unsent"].as_u64().unwrap() > 0 && o["stalls"].as_u64().unwrap() > 0, "{o:#}");
    assert_eq!(o["generator"]["bound"], false, "the server, not the generator, was behind: {o:#}");

    // Below capacity, the open loop sees no queueing either.
    let calm = loadgen::run(&spec(&ep, Load::Open { rate: 150.0 }, 0.5)).unwrap();
    let k = calm.json();
    assert!(us(k, "latency_us", "p50") < 10.0 * delay_us && k["unsent"] == 0 && k["unanswered"] == 0, "{k:#}");
    assert_eq!(k["status"]["Ok"].as_u64(), k["sent"].as_u64(), "{k:#}");

    stop.store(true, Ordering::Relaxed);
    server.join().unwrap();
}

#[test]
fn the_knee_lies_below_the_servers_capacity() {
    let ep = endpoint("knee");
    let (stop, server) = slow_server(&ep);
    let s = spec(&ep, Load::Open { rate: 1.0 }, 0.3);
    let k = loadgen::knee(&s, Duration::from_millis(50), 3, Some(200.0)).unwrap();
    let rate = k["knee"]["rate_rps"].as_f64().unwrap_or(0.0);
    // capacity ~500/s (2 ms each): 200 passes, 800 cannot
    assert!((200.0..700.0).contains(&rate), "{k:#}");
    assert!(k["failing_rate_rps"].as_f64().unwrap() <= 800.0, "{k:#}");
    // Each rate is decided by the majority of its runs (two that agree, else three): the runs at
    // a rate, the retried ones first, hold more of the decision's verdict than of the other.
    let runs = k["runs"].as_array().unwrap();
    assert!(runs.len() <= 3 * (9 + 3), "{k:#}");
    for (i, r) in runs.iter().enumerate().filter(|(_, r)| r["retried"].is_null() && r["rate_rps"].is_number()) {
        let mut at_rate = vec![r];
        at_rate.extend(runs[..i].iter().rev().take_while(|b| b["retried"] == true && b["rate_rps"] == r["rate_rps"]));
        let agree = at_rate.iter().filter(|b| b["meets_sla"] == r["meets_sla"]).count();
        assert!(at_rate.len() <= 3 && agree >= 2, "{k:#}");
    }
    stop.store(true, Ordering::Relaxed);
    server.join().unwrap();
}

#[test]
fn nothing_there_is_an_error_before_the_clock_starts() {
    let ep = endpoint("nobody");
    let s = Spec { connect_timeout: Duration::from_millis(200), ..spec(&ep, Load::Open { rate: 10.0 }, 0.1) };
    let e = loadgen::run(&s).err().unwrap();
    assert!(e.contains("no reply from") && e.contains("0.200 s"), "{e}");
    assert!(loadgen::run(&Spec { frames: vec![b"junk".to_vec()], ..s }).err().unwrap().contains("frame 0"));
}

#[test]
fn every_request_to_the_daemon_is_answered() {
    let ep = endpoint("daemon");
    let served = Served::new(engine(), 1, MatcherKind::Fast);
    let cfg = Config { endpoints: vec![ep.clone()], workers: 1, kernels: 1, engine_threads: 1, ..Config::default() };
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let daemon = std::thread::spawn(move || {
        server::run(Arc::new(RwLock::new(Arc::new(served))), &cfg, s).unwrap();
    });
    let eng = engine();
    let cols = queries(&eng, 4);
    let frames: Vec<Vec<u8>> = (1..=3)
        .map(|k| {
            let c: Vec<Vec<String>> = cols.iter().map(|c| c[..k * 8].to_vec()).collect();
            raw_frame(&c)
        })
        .collect();
    let spec = Spec {
        connections: 2,
        threads: 2,
        duration: Duration::from_millis(400),
        ..Spec::new(&ep, frames, Load::Open { rate: 500.0 })
    };
    let o = loadgen::run(&spec).unwrap();
    let j = o.json();
    assert!(j["sent"].as_u64().unwrap() >= 150, "{j:#}");
    assert_eq!(j["status"]["Ok"].as_u64(), j["sent"].as_u64(), "{j:#}");
    assert_eq!((j["unanswered"].as_u64(), j["unsent"].as_u64()), (Some(0), Some(0)), "{j:#}");
    assert!(j["queries_per_s"].as_f64().unwrap() > 0.0 && j["generator"]["process_cpu_s"].as_f64().unwrap() > 0.0);
    stop.store(true, Ordering::Relaxed);
    daemon.join().unwrap();
}
