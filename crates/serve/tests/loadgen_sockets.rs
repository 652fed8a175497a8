//! The generator's ways of sending against the real daemon: ZMTP spoken by the generator itself
//! and libzmq's DEALER, per-request and tick pacing, fixed and Poisson arrivals, over ipc and tcp.
//! Each way has every request answered Ok and says in its JSON how it ran. Short runs; no
//! timing is asserted.

mod common;

use common::{engine, fingerprint, in_process, queries, scratch, Daemon};
use offload_serve::loadgen::{self, Arrivals, ClientSocket, Load, Pacing, Spec};
use offload_serve::protocol::{self, Payload, Request};
use offload_serve::server::Config;
use std::time::Duration;

/// A request of the example's queries, encoded here as the daemon encodes them (version 1).
fn frame() -> Vec<u8> {
    let eng = engine();
    let (codes, _) = in_process(&eng, &queries(&eng, 2));
    let width = eng.encoder.width() as u16;
    protocol::encode_request(&Request {
        request_id: 1,
        deadline_us: 0,
        stop_after: 0,
        n_queries: (codes.len() / width as usize) as u32,
        criteria_fingerprint: fingerprint(),
        payload: Payload::Encoded { encoding_version: 1, width, codes },
    })
}

fn served_by_all(ep: &str, spec: &Spec) -> serde_json::Value {
    let o = loadgen::run(spec).unwrap_or_else(|e| panic!("{ep}: {e}"));
    let j = o.json().clone();
    assert!(j["sent"].as_u64().unwrap() >= 50, "{j:#}");
    assert_eq!(j["status"]["Ok"].as_u64(), j["sent"].as_u64(), "{j:#}");
    assert_eq!((j["unanswered"].as_u64(), j["unsent"].as_u64()), (Some(0), Some(0)), "{j:#}");
    let n = protocol::peek_n_queries(&spec.frames[0]) as u64;
    assert_eq!(j["generator"]["queries_sent"].as_u64(), Some(j["sent"].as_u64().unwrap() * n), "{j:#}");
    j
}

#[test]
fn every_way_of_sending_is_answered_in_full() {
    let dir = scratch("loadgen-sockets");
    let ipc = format!("ipc://{}/d.sock", dir.display());
    let port = 20000 + (std::process::id() % 20000) as u16;
    let tcp = format!("tcp://127.0.0.1:{port}");
    let cfg = Config { endpoints: vec![ipc.clone(), tcp.clone()], workers: 1, kernels: 0, ..Config::default() };
    let daemon = Daemon::start(engine(), cfg);
    let ways = [
        (ClientSocket::Zmtp, Pacing::Ticks { max_tick: Duration::from_micros(200), wake_on_replies: false }),
        (ClientSocket::Zmtp, Pacing::Ticks { max_tick: Duration::from_micros(100), wake_on_replies: true }),
        (ClientSocket::Zmtp, Pacing::PerRequest),
        (ClientSocket::Libzmq, Pacing::Ticks { max_tick: Duration::from_micros(200), wake_on_replies: false }),
        (ClientSocket::Libzmq, Pacing::PerRequest),
    ];
    for ep in [&ipc, &tcp] {
        for (socket, pacing) in ways {
            let spec = Spec {
                connections: 3,
                threads: 2,
                duration: Duration::from_millis(250),
                client_socket: socket,
                pacing,
                ..Spec::new(ep, vec![frame(), frame()], Load::Open { rate: 400.0 })
            };
            let j = served_by_all(ep, &spec);
            let name = if socket == ClientSocket::Zmtp { "zmtp" } else { "libzmq" };
            assert_eq!(j["client_socket"], name, "{j:#}");
            let ticks = matches!(pacing, Pacing::Ticks { .. });
            assert_eq!(j["pacing"]["mode"], if ticks { "ticks" } else { "per-request" }, "{j:#}");
        }
    }
    // Poisson arrivals: the same seed, the same number of requests due; another seed, another.
    let poisson = |seed| Spec {
        connections: 2,
        duration: Duration::from_millis(300),
        arrivals: Arrivals::Poisson { seed },
        ..Spec::new(&ipc, vec![frame()], Load::Open { rate: 500.0 })
    };
    let (a, b, c) =
        (served_by_all(&ipc, &poisson(7)), served_by_all(&ipc, &poisson(7)), served_by_all(&ipc, &poisson(8)));
    assert_eq!(a["arrivals"]["kind"], "poisson");
    assert_eq!(a["due"], b["due"], "{a:#} {b:#}");
    assert_ne!(a["due"], c["due"], "two seeds drew the same count (possible, unlikely): {a:#} {c:#}");
    // A closed loop through ZMTP (replies wake the thread; no ticks).
    let closed = Spec {
        connections: 2,
        duration: Duration::from_millis(200),
        ..Spec::new(&tcp, vec![frame()], Load::Closed { in_flight: 2 })
    };
    let j = served_by_all(&tcp, &closed);
    assert_eq!(j["pacing"]["mode"], "per-reply", "{j:#}");
    daemon.stop();
    a_daemon_that_stops_mid_run_leaves_requests_unanswered();
}

#[test]
fn the_zmtp_client_says_when_nothing_is_there() {
    let dir = scratch("loadgen-nobody");
    let spec = Spec {
        connect_timeout: Duration::from_millis(150),
        ..Spec::new(&format!("ipc://{}/none.sock", dir.display()), vec![frame()], Load::Open { rate: 10.0 })
    };
    let e = loadgen::run(&spec).err().unwrap();
    assert!(e.contains("no reply from") && e.contains("0.150 s"), "{e}");
}

/// A daemon that stops mid-run leaves requests unanswered, not an error. (Called from the test
/// above, not run beside it: a daemon's stop reaches the other daemons of the process.)
fn a_daemon_that_stops_mid_run_leaves_requests_unanswered() {
    let dir = scratch("loadgen-stop");
    let ep = format!("ipc://{}/d.sock", dir.display());
    let cfg = Config { endpoints: vec![ep.clone()], workers: 1, kernels: 0, ..Config::default() };
    let daemon = Daemon::start(engine(), cfg);
    let spec = Spec {
        connections: 2,
        duration: Duration::from_millis(800),
        drain: Duration::from_millis(300),
        ..Spec::new(&ep, vec![frame()], Load::Open { rate: 300.0 })
    };
    let run = std::thread::spawn(move || loadgen::run(&spec));
    std::thread::sleep(Duration::from_millis(300));
    daemon.stop();
    let o = run.join().unwrap().unwrap_or_else(|e| panic!("the run failed instead of counting: {e}"));
    let j = o.json();
    let ok = j["status"]["Ok"].as_u64().unwrap_or(0);
    assert!(ok > 20 && ok < j["due"].as_u64().unwrap(), "{j:#}");
}
