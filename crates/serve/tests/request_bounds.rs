//! The bounds on one request: a request announcing more than `max_request_queries` queries is
//! answered `BadRequest` saying so (over ZeroMQ, inline and with executors); a frame over the
//! derived ZMQ_MAXMSGSIZE closes its sender's connection unread, and the daemon goes on serving.

mod common;

use common::{engine, in_process, names, queries, scratch, Daemon};
use offload_serve::client::{Client, ClientError, Query};
use offload_serve::config::request_bytes_bound;
use offload_serve::protocol::Status;
use offload_serve::server::Config;
use std::time::Duration;

#[test]
fn a_request_over_max_request_queries_is_refused_saying_so_and_one_at_the_bound_is_served() {
    for kernels in [0, 1] {
        let dir = scratch(&format!("bounds-{kernels}"));
        let ep = format!("ipc://{}/d.sock", dir.display());
        let cfg =
            Config { endpoints: vec![ep.clone()], workers: 1, kernels, max_request_queries: 10, ..Config::default() };
        let d = Daemon::start(engine(), cfg);
        let eng = engine();
        let cols = queries(&eng, 10);
        let at_bound: Vec<Vec<String>> = cols.iter().map(|c| c[..10].to_vec()).collect();
        let over: Vec<Vec<String>> = cols.iter().map(|c| c[..11].to_vec()).collect();
        let mut c = Client::connect(&ep).unwrap();
        let r = c.call(Query::raw(&names(), &at_bound)).unwrap();
        assert_eq!((r.status, r.rule), (Status::Ok, in_process(&eng, &at_bound).1));
        let r = c.call(Query::raw(&names(), &over)).unwrap();
        assert_eq!(r.status, Status::BadRequest);
        assert!(r.message.contains("11 queries") && r.message.contains("max_request_queries"), "{}", r.message);
        d.stop();
    }
}

#[test]
fn a_frame_over_the_derived_bound_closes_its_connection_and_the_daemon_serves_on() {
    let dir = scratch("bounds-frame");
    let ep = format!("ipc://{}/d.sock", dir.display());
    let cfg =
        Config { endpoints: vec![ep.clone()], workers: 1, kernels: 0, max_request_queries: 50, ..Config::default() };
    let bound = request_bytes_bound(names().len(), 50) as usize;
    let d = Daemon::start(engine(), cfg);
    let eng = engine();
    let cols = queries(&eng, 200); // more queries than the bound has room for
    let raw_bytes: usize = cols.iter().flatten().map(|v| v.len() + 4).sum();
    assert!(raw_bytes > bound, "{raw_bytes} bytes of values and offsets, within the bound {bound}");
    let mut c = Client::connect(&ep).unwrap();
    c.timeout = Duration::from_millis(500);
    let big = Query::raw(&names(), &cols);
    match c.call(big) {
        Err(ClientError::Timeout(_)) => {} // dropped unread: no reply
        other => panic!("a frame over {bound} bytes was answered: {other:?}"),
    }
    let small: Vec<Vec<String>> = cols.iter().map(|c| c[..5].to_vec()).collect();
    let mut again = Client::connect(&ep).unwrap();
    again.timeout = Duration::from_secs(20);
    assert_eq!(again.call(Query::raw(&names(), &small)).unwrap().status, Status::Ok);
    d.stop();
}
