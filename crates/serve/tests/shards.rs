//! Socket shards (`shards` > 1): several ROUTERs, I/O threads and brokers share each data
//! endpoint's one listening socket. Clients that know nothing of them get the same answers over
//! TCP and IPC, inline and through executors (whose replies find their way back to the shard
//! the request came in on); the control socket answers; the IPC file is claimed and removed as
//! with one shard; a TCP endpoint the shards cannot share is refused in one line.

mod common;

use common::{engine, in_process, names, queries, scratch, Daemon};
use offload_serve::client::{self, Client, EncodingClient, Query};
use offload_serve::protocol::Status;
use offload_serve::server::{self, Config, Served};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, RwLock};
use std::time::Duration;

fn free_tcp_endpoint() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    format!("tcp://127.0.0.1:{}", l.local_addr().unwrap().port())
}

fn sharded(endpoints: Vec<String>, control: &str, kernels: usize) -> Config {
    let control = Some(control.to_string());
    Config { endpoints, control, workers: 1, kernels, engine_threads: 1, shards: 3, ..Config::default() }
}

/// `clients` clients, each on its own connection, call raw and pre-encoded requests on `ep`.
fn every_client_gets_the_in_process_answers(ep: &str, clients: usize) {
    let eng = engine();
    let cols = queries(&eng, 4);
    let (_, expected) = in_process(&eng, &cols);
    let threads: Vec<_> = (0..clients)
        .map(|_| {
            let (ep, cols, expected) = (ep.to_string(), cols.clone(), expected.clone());
            std::thread::spawn(move || {
                let mut c = Client::connect(&ep).unwrap();
                c.timeout = Duration::from_secs(20);
                for _ in 0..5 {
                    let r = c.call(Query::raw(&names(), &cols)).unwrap();
                    assert_eq!((r.status, &r.rule), (Status::Ok, &expected), "{}", r.message);
                }
                let mut c = EncodingClient::new(c); // pre-encoded: straight to the executors
                let r = c.call(&cols).unwrap();
                assert_eq!((r.status, &r.rule), (Status::Ok, &expected), "{}", r.message);
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

fn stats(control: &str) -> serde_json::Value {
    client::control(control, &[b"stats"], None, Duration::from_secs(10)).unwrap()
}

#[test]
fn clients_get_the_same_answers_from_a_sharded_daemon_over_tcp_and_ipc_inline_and_with_executors() {
    for kernels in [0, 1] {
        let dir = scratch(&format!("shards-{kernels}"));
        let (tcp, ipc) = (free_tcp_endpoint(), format!("ipc://{}/d.sock", dir.display()));
        let control = format!("ipc://{}/c.sock", dir.display());
        let d = Daemon::start(engine(), sharded(vec![tcp.clone(), ipc.clone()], &control, kernels));
        every_client_gets_the_in_process_answers(&tcp, 6);
        every_client_gets_the_in_process_answers(&ipc, 6);
        let s = stats(&control);
        let per_shard: Vec<u64> = serde_json::from_value(s["shard_requests"].clone()).unwrap();
        assert_eq!(per_shard.len(), 3, "{s}");
        // every request (and each client's dictionary request) came through some shard
        assert_eq!(per_shard.iter().sum::<u64>(), s["requests"].as_u64().unwrap() + 12, "{s}");
        assert_eq!(s["ok"].as_u64(), Some(12 * 6), "{s}");
        // a second daemon on the same IPC path is refused, as with one shard
        let again = sharded(vec![ipc.clone()], &format!("ipc://{}/c2.sock", dir.display()), kernels);
        let served = Arc::new(RwLock::new(Arc::new(Served::new(engine(), 1, offload_rules::MatcherKind::Fast))));
        let err = server::run(served, &again, Arc::new(AtomicBool::new(true))).err().unwrap();
        assert!(err.contains("in use"), "{err}");
        d.stop();
        assert!(!dir.join("d.sock").exists(), "the IPC socket file is removed at stop");
    }
}

#[test]
fn a_tcp_endpoint_by_name_is_refused_with_shards_in_one_line() {
    let dir = scratch("shards-named");
    let cfg = sharded(vec!["tcp://localhost:5999".into()], &format!("ipc://{}/c.sock", dir.display()), 0);
    let served = Arc::new(RwLock::new(Arc::new(Served::new(engine(), 1, offload_rules::MatcherKind::Fast))));
    let err = server::run(served, &cfg, Arc::new(AtomicBool::new(true))).err().unwrap();
    assert!(err.contains("tcp://IP:PORT") && !err.contains('\n'), "{err}");
}
