//! The client's frame-level calls and `Multiplexed` (many requests in flight on one
//! connection, what Python's `AsyncClient` wraps) against a real daemon on a thread, over IPC and
//! shared memory: every reply comes back by its id with the answers a raw call gets, a late
//! reply is skipped by id, and a daemon that is gone or a frame with nowhere to go ends in a
//! timeout (never a hang). Every wait is bounded.

mod common;

use common::{engine, names, queries, scratch, Daemon};
use offload_serve::client::{Client, ClientError, Multiplexed, Query, ReplyKind};
use offload_serve::protocol::{self, Request, Status};
use offload_serve::server::Config;
use std::collections::HashMap;
use std::time::{Duration, Instant};

fn start(endpoint: &str) -> Daemon {
    Daemon::start(engine(), Config { endpoints: vec![endpoint.into()], workers: 1, kernels: 1, ..Config::default() })
}

/// A raw request frame of the first `n` example queries (repeated), with id `id`.
fn frame(id: u64, n: usize) -> Vec<u8> {
    let cols: Vec<Vec<String>> = queries(&engine(), 4).into_iter().map(|c| c.into_iter().take(n).collect()).collect();
    let raw = cols
        .iter()
        .map(|c| {
            let mut offsets = vec![0u32];
            let mut data = Vec::new();
            for v in c {
                data.extend_from_slice(v.as_bytes());
                offsets.push(data.len() as u32);
            }
            protocol::RawColumnOwned { offsets, data }
        })
        .collect();
    protocol::encode_request(&Request {
        request_id: id,
        deadline_us: 0,
        stop_after: 0,
        n_queries: n as u32,
        criteria_fingerprint: protocol::criteria_fingerprint(names()),
        payload: protocol::Payload::Raw(raw),
    })
}

/// The winning rules a plain call gets for the first `n` queries.
fn expected(client: &mut Client, n: usize) -> Vec<u32> {
    let cols: Vec<Vec<String>> = queries(&engine(), 4).into_iter().map(|c| c.into_iter().take(n).collect()).collect();
    let r = client.call(Query::raw(&names(), &cols)).unwrap();
    assert_eq!(r.status, Status::Ok);
    r.rule
}

fn many_in_flight(ep: &str) {
    let mut plain = Client::connect(ep).unwrap();
    let sizes: Vec<usize> = (0..24).map(|i| 1 + (i * 7) % 30).collect();
    let want: HashMap<usize, Vec<u32>> = sizes.iter().map(|&n| (n, expected(&mut plain, n))).collect();

    let mut client = Client::connect(ep).unwrap();
    client.timeout = Duration::from_secs(20);
    let m = Multiplexed::new(client).unwrap();
    let mut sent = HashMap::new();
    for &n in &sizes {
        let id = m.next_id();
        m.submit(id, &frame(id, n)).unwrap();
        sent.insert(id, n);
    }
    let until = Instant::now() + Duration::from_secs(30);
    while !sent.is_empty() && Instant::now() < until {
        for (id, r) in m.wait_done(until) {
            let reply = protocol::decode_reply(&r.unwrap()).unwrap();
            assert_eq!(reply.request_id, id);
            assert_eq!(reply.rule, want[&sent.remove(&id).expect("an id sent once")]);
        }
    }
    assert!(sent.is_empty(), "unanswered: {sent:?}");
}

#[test]
fn many_requests_in_flight_come_back_by_id_over_ipc_and_shm() {
    let dir = scratch("client-multiplexed");
    let ipc = format!("ipc://{}/d.sock", dir.display());
    let d = start(&ipc);
    many_in_flight(&ipc);
    d.stop();
    let shm = format!("shm://{}/s.sock", dir.display());
    let d = start(&shm);
    many_in_flight(&shm);
    d.stop();
}

#[test]
fn frames_sent_by_hand_are_received_by_id_and_late_ones_skipped() {
    let dir = scratch("client-frames");
    let ep = format!("ipc://{}/d.sock", dir.display());
    let d = start(&ep);
    let mut c = Client::connect(&ep).unwrap();
    let until = || Instant::now() + Duration::from_secs(20);
    let (first, second) = (c.next_id(), c.next_id());
    c.send_frame(&frame(first, 3)).unwrap();
    c.send_frame(&frame(second, 5)).unwrap();
    // The reply to `second` first: the one to `first` is skipped, as a late reply would be.
    let r = protocol::decode_reply(&c.receive_frame(ReplyKind::Reply, Some(second), until()).unwrap()).unwrap();
    assert_eq!((r.request_id, r.rule.len()), (second, 5));
    let id = c.next_id();
    c.send_frame(&protocol::encode_dictionary_request(id)).unwrap();
    let dict = c.receive_frame(ReplyKind::Dictionary, Some(id), until()).unwrap();
    assert_eq!(protocol::decode_dictionary_reply(&dict).unwrap().request_id, id);
    d.stop();
}

#[test]
fn a_daemon_that_is_gone_files_timeouts() {
    let dir = scratch("client-gone");
    let ep = format!("ipc://{}/nobody.sock", dir.display());
    let mut c = Client::connect(&ep).unwrap();
    c.timeout = Duration::from_millis(200);
    let r = c.receive_frame(ReplyKind::Reply, None, Instant::now() + c.timeout);
    assert!(matches!(r, Err(ClientError::Timeout(_))), "{r:?}");
    let m = Multiplexed::new(c).unwrap();
    let ids: Vec<u64> = (0..3).map(|_| m.next_id()).collect();
    for &id in &ids {
        m.submit(id, &frame(id, 2)).unwrap();
    }
    let until = Instant::now() + Duration::from_secs(10);
    let mut timed_out = Vec::new();
    while timed_out.len() < ids.len() && Instant::now() < until {
        for (id, r) in m.wait_done(until) {
            assert!(matches!(r, Err(ClientError::Timeout(_))), "{r:?}");
            timed_out.push(id);
        }
    }
    timed_out.sort();
    assert_eq!(timed_out, ids);
}

#[test]
fn a_frame_with_nowhere_to_go_waits_unsent_until_its_deadline() {
    let dir = scratch("client-unsent");
    let ep = format!("ipc://{}/nobody.sock", dir.display());
    let mut c = Client::connect(&ep).unwrap();
    c.disconnect(&ep).unwrap(); // a DEALER with no pipe: no room to send
    c.timeout = Duration::from_millis(200);
    let m = Multiplexed::new(c).unwrap();
    let id = m.next_id();
    assert!(!m.submit(id, &frame(id, 2)).unwrap());
    let until = Instant::now() + Duration::from_secs(10);
    let mut done = Vec::new();
    while done.is_empty() && Instant::now() < until {
        done = m.wait_done(until);
    }
    assert!(matches!(done.as_slice(), [(i, Err(ClientError::Timeout(_)))] if *i == id), "{done:?}");
}
