//! The Rust client against a real daemon (`server::run` on a thread) over IPC: answers equal the
//! in-process matcher for raw and pre-encoded queries, early stop returns a prefix, and the same
//! client reconnects across a daemon restart. Every wait is bounded.

mod common;

use common::{engine, fingerprint, in_process, names, queries, Daemon};
use offload_rules::NO_MATCH;
use offload_serve::client::{Client, ClientError, Query};
use offload_serve::protocol::Status;
use offload_serve::server::Config;
use std::time::Duration;

fn start(endpoint: &str, kernels: usize) -> Daemon {
    let cfg = Config { endpoints: vec![endpoint.into()], workers: 2, kernels, engine_threads: 2, ..Config::default() };
    Daemon::start(engine(), cfg)
}

fn endpoint(name: &str) -> String {
    let dir = std::env::temp_dir().join(format!("offload-serve-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    format!("ipc://{}/{name}.sock", dir.display())
}

#[test]
fn raw_and_encoded_answers_equal_the_in_process_matcher() {
    let ep = endpoint("answers");
    let d = start(&ep, 2);
    let eng = engine();
    let cols = queries(&eng, 50);
    let (codes, expected) = in_process(&eng, &cols);
    let mut c = Client::connect(&ep).unwrap();
    let r = c.call(Query::raw(&names(), &cols)).unwrap();
    assert_eq!((r.status, r.ruleset_version), (Status::Ok, 1), "{}", r.message);
    assert_eq!(r.rule, expected);
    let contents = &eng.rules().contents;
    let want: Vec<i64> = expected.iter().map(|&x| if x == NO_MATCH { 0 } else { contents[x as usize] }).collect();
    assert_eq!(r.content, want);
    let r = c.call(Query::encoded(fingerprint(), 1, eng.encoder.width() as u16, codes)).unwrap();
    assert_eq!(r.rule, expected);
    // early stop: a prefix of the full answer holding at least that many matches
    let r = c.call(Query::raw(&names(), &cols).stop_after(3)).unwrap();
    assert!(r.rule.iter().filter(|&&x| x != NO_MATCH).count() >= 3 && r.rule.len() < expected.len());
    assert_eq!(r.rule[..], expected[..r.rule.len()]);
    // encoded for another version: refused with a reason
    let r = c.call(Query::encoded(fingerprint(), 7, eng.encoder.width() as u16, vec![0; eng.encoder.width()])).unwrap();
    assert_eq!(r.status, Status::BadRequest);
    assert!(r.message.contains("version 7"), "{}", r.message);
    // an empty request is answered with nothing
    let empty: Vec<Vec<String>> = cols.iter().map(|_| Vec::new()).collect();
    assert_eq!(c.call(Query::raw(&names(), &empty)).unwrap().rule.len(), 0);
    // ragged columns never leave the client
    let mut ragged = cols.clone();
    ragged[0].pop();
    assert!(matches!(c.call(Query::raw(&names(), &ragged)), Err(ClientError::BadRequest(_))));
    d.stop();
}

#[test]
fn the_same_client_reconnects_across_a_daemon_restart() {
    let ep = endpoint("restart");
    let eng = engine();
    let cols = queries(&eng, 3);
    let (_, expected) = in_process(&eng, &cols);
    let mut c = Client::connect(&ep).unwrap();
    let d = start(&ep, 1);
    assert_eq!(c.call(Query::raw(&names(), &cols)).unwrap().rule, expected);
    d.stop();
    c.timeout = Duration::from_millis(200);
    assert!(matches!(c.call(Query::raw(&names(), &cols)), Err(ClientError::Timeout(_))));
    let d = start(&ep, 1);
    c.timeout = Duration::from_secs(20);
    let r = c.call(Query::raw(&names(), &cols)).unwrap();
    assert_eq!((r.status, &r.rule), (Status::Ok, &expected));
    d.stop();
}
