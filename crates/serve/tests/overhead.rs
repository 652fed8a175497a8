//! The server's own cost (issue 25), with real sockets: the null matcher answers every query of
//! a request "no match" and says what it is in `stats` and on the metrics page; the CPU time per
//! thread role is there, never negative, and grows with load. No timing is asserted beyond
//! growth. Every wait is bounded.

mod common;

use common::{engine, names, queries, scratch};
use offload_rules::{MatcherKind, NO_MATCH};
use offload_serve::client::{self, Client, Query};
use offload_serve::protocol::Status;
use offload_serve::server::{self, Config, Served};
use serde_json::Value;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

struct Daemon {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Result<(), String>>,
    data: String,
    control: String,
}

/// A daemon on a thread, IPC endpoints in a scratch directory, returned once it is bound.
fn start(name: &str, null_matcher: bool, metrics: Option<String>) -> Daemon {
    let dir = scratch(name);
    let (data, control) = (format!("ipc://{}/d.sock", dir.display()), format!("ipc://{}/c.sock", dir.display()));
    let matcher = if null_matcher { MatcherKind::Linear } else { MatcherKind::Fast };
    let served = Served::new(engine(), 1, matcher);
    let cfg = Config {
        endpoints: vec![data.clone()],
        control: Some(control.clone()),
        metrics,
        null_matcher,
        ..Config::default()
    };
    let stop = Arc::new(AtomicBool::new(false));
    let (s, (tx, rx)) = (stop.clone(), std::sync::mpsc::channel());
    let thread = std::thread::spawn(move || {
        server::run_with(Arc::new(RwLock::new(Arc::new(served))), &cfg, s, move |_| {
            let _ = tx.send(());
        })
        .map(|_| ())
    });
    rx.recv_timeout(Duration::from_secs(20)).expect("the daemon said it serves");
    Daemon { stop, thread, data, control }
}

impl Daemon {
    fn stats(&self) -> Value {
        client::control(&self.control, &[b"stats"], None, Duration::from_secs(10)).unwrap()
    }
    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap().unwrap();
    }
}

/// GET /metrics on `addr`, with a deadline.
fn scrape(addr: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
    let mut page = String::new();
    s.read_to_string(&mut page).unwrap();
    page
}

#[test]
fn the_null_matcher_answers_every_query_no_match_and_says_what_it_is() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr = format!("127.0.0.1:{port}");
    let d = start("null", true, Some(addr.clone()));
    let cols = queries(&engine(), 20);
    let n = cols[0].len();
    let mut c = Client::connect(&d.data).unwrap();
    c.timeout = Duration::from_secs(10);
    for stop_after in [0, 3] {
        let r = c.call(Query::raw(&names(), &cols).stop_after(stop_after)).unwrap();
        assert_eq!(r.status, Status::Ok, "{}", r.message);
        assert_eq!((r.rule.len(), r.content.len()), (n, n), "every query answered");
        assert!(r.rule.iter().all(|&x| x == NO_MATCH) && r.content.iter().all(|&x| x == 0));
    }
    let s = d.stats();
    assert_eq!(s["matcher"], "null");
    assert!(s["benchmark_only"].as_str().unwrap().contains("benchmark only"), "{s}");
    let page = scrape(&addr);
    assert!(page.contains("offload_null_matcher 1"), "{page}");
    assert!(page.contains("offload_cpu_seconds_total{part=\"worker\"}"), "{page}");
    assert!(page.contains("offload_cpu_ns_per_query{part=\"host_path\"}"), "{page}");
    assert!(page.contains("offload_shard_requests_total{shard=\"0\"} 2"), "{page}");
    d.stop();
}

#[test]
fn cpu_per_role_is_counted_and_grows_with_load() {
    let d = start("cpu", false, None);
    let cols = queries(&engine(), 50);
    let mut c = Client::connect(&d.data).unwrap();
    c.timeout = Duration::from_secs(10);
    let before = d.stats();
    let cpu = &before["cpu"];
    for (role, threads) in [("broker", 1), ("worker", 2), ("executor", 1)] {
        assert_eq!(cpu["threads"][role], threads, "{cpu}");
    }
    assert!(cpu["threads"]["zmq_io"].as_u64().unwrap() >= 1, "{cpu}");
    for _ in 0..100 {
        assert_eq!(c.call(Query::raw(&names(), &cols)).unwrap().status, Status::Ok);
    }
    let after = d.stats();
    let ns = |s: &Value, part: &str| s["cpu"]["cpu_ns"][part].as_u64().unwrap_or_else(|| panic!("{part}: {s}"));
    for part in ["broker", "worker", "executor", "zmq_io", "match", "daemon", "host_path"] {
        assert!(ns(&after, part) >= ns(&before, part), "{part} went down: {before} then {after}");
    }
    for part in ["worker", "executor", "match", "daemon"] {
        assert!(ns(&after, part) > ns(&before, part), "{part} did not grow: {before} then {after}");
    }
    assert!(ns(&after, "match") <= ns(&after, "executor") && ns(&after, "host_path") <= ns(&after, "daemon"));
    let queries = after["cpu"]["queries"].as_u64().unwrap();
    assert!(queries >= 100 * cols[0].len() as u64, "{after}");
    assert!(after["cpu"]["ns_per_query"]["daemon"].as_f64().unwrap() > 0.0, "{after}");
    assert!(after["cpu"]["host_path_ceiling_qps"].as_f64().unwrap() > 0.0, "{after}");
    d.stop();
}
