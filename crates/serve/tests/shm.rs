//! The shared-memory transport (`shm://`) against a real daemon (`server::run_with` on a
//! thread; clients in this process and in child processes): answers equal ZeroMQ's on the same
//! daemon, busy when full, deadlines, a killed client's rings freed, permissions by the socket
//! file's mode, a stale endpoint claimed and a live one refused, a clear error when the daemon
//! stops. Every wait is bounded.

mod common;

use common::{engine, fingerprint, in_process, names, queries, scratch, Daemon};
use offload_serve::client::{Client, ClientError, Query};
use offload_serve::protocol::{self, Payload, Request, Status};
use offload_serve::server::Config;
use offload_serve::shm::Connection;
use proptest::prelude::*;
use std::time::{Duration, Instant};

fn config(endpoints: Vec<String>, kernels: usize) -> Config {
    Config { endpoints, workers: 1, kernels, engine_threads: 1, ..Config::default() }
}

fn shm_endpoint(dir: &std::path::Path, name: &str) -> String {
    format!("shm://{}/{name}.sock", dir.display())
}

/// A pre-encoded request frame of `cols` for version 1 with `deadline_us`.
fn encoded_frame(id: u64, cols: &[Vec<String>], deadline_us: u64) -> Vec<u8> {
    let eng = engine();
    let (codes, _) = in_process(&eng, cols);
    let width = eng.encoder.width() as u16;
    protocol::encode_request(&Request {
        request_id: id,
        deadline_us,
        stop_after: 0,
        n_queries: (codes.len() / width as usize) as u32,
        criteria_fingerprint: fingerprint(),
        payload: Payload::Encoded { encoding_version: 1, width, codes },
    })
}

/// The daemon's mappings of the rings of the client process `pid` (memfds are named by it).
fn ring_mappings(pid: u32) -> usize {
    let name = format!("offload-shm-client-{pid} ");
    std::fs::read_to_string("/proc/self/maps").unwrap().lines().filter(|l| l.contains(&name)).count()
}

#[test]
fn answers_over_shm_equal_zeromq_answers_inline_and_with_executors() {
    let dir = scratch("shm-answers");
    for kernels in [0, 1] {
        let (shm, ipc) =
            (shm_endpoint(&dir, &format!("a{kernels}")), format!("ipc://{}/a{kernels}.ipc", dir.display()));
        let d = Daemon::start(engine(), config(vec![ipc.clone(), shm.clone()], kernels));
        let clients = std::cell::RefCell::new((Client::connect(&shm).unwrap(), Client::connect(&ipc).unwrap()));
        let eng = engine();
        let all = queries(&eng, 1);
        let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(24));
        let strategy = (prop::collection::vec(0..all[0].len(), 0..300), any::<bool>());
        runner
            .run(&strategy, |(rows, encode)| {
                let cols: Vec<Vec<String>> = all.iter().map(|c| rows.iter().map(|&r| c[r].clone()).collect()).collect();
                let query = if encode {
                    let (codes, _) = in_process(&eng, &cols);
                    Query::encoded(fingerprint(), 1, eng.encoder.width() as u16, codes)
                } else {
                    Query::raw(&names(), &cols)
                };
                let (over_shm, over_zmq) = &mut *clients.borrow_mut();
                let (a, b) = (over_shm.call(query.clone()).unwrap(), over_zmq.call(query).unwrap());
                prop_assert_eq!(a.status, Status::Ok, "{}", a.message);
                prop_assert_eq!((&a.rule, &a.content, a.ruleset_version), (&b.rule, &b.content, b.ruleset_version));
                prop_assert_eq!(&a.rule, &in_process(&eng, &cols).1);
                Ok(())
            })
            .unwrap();
        // The dictionary comes over shared memory too (the encoding client fetches it).
        let mut enc = offload_serve::client::EncodingClient::new(Client::connect(&shm).unwrap());
        assert_eq!(enc.call(&all).unwrap().rule, in_process(&eng, &all).1);
        d.stop();
        assert!(!std::path::Path::new(&format!("{}/a{kernels}.sock", dir.display())).exists());
    }
}

#[test]
fn a_full_queue_answers_busy_and_a_past_deadline_is_refused() {
    let dir = scratch("shm-busy");
    let ep = shm_endpoint(&dir, "busy");
    let d = Daemon::start(engine(), Config { queue: 1, ..config(vec![ep.clone()], 1) });
    let eng = engine();
    let big = queries(&eng, 5000);
    let frames: Vec<Vec<u8>> = (1..=20).map(|id| encoded_frame(id, &big, 0)).collect(); // before any send
    let mut c = Connection::connect(&ep, Duration::from_secs(5)).unwrap();
    let until = Instant::now() + Duration::from_secs(20);
    // Back to back: one matches, one waits, the next is refused. A sender descheduled mid-burst
    // (a loaded 2-core CI machine) lets the executor keep up, so up to five bursts are sent.
    let mut statuses = Vec::new();
    for _burst in 0..5 {
        for f in &frames {
            c.send(f, until).unwrap();
        }
        for _ in 0..frames.len() {
            statuses.push(c.recv(until, |f| protocol::decode_reply(f).unwrap().status).unwrap());
        }
        if statuses.contains(&Status::Busy) {
            break;
        }
    }
    assert!(statuses.contains(&Status::Busy), "{statuses:?}");
    assert!(statuses.contains(&Status::Ok), "{statuses:?}");
    // a deadline already past (1 µs after the epoch) is answered without being executed
    c.send(&encoded_frame(99, &queries(&eng, 1), 1), until).unwrap();
    let r = c.recv(until, |f| protocol::decode_reply(f).unwrap()).unwrap();
    assert_eq!((r.request_id, r.status), (99, Status::DeadlineExceeded), "{}", r.message);
    d.stop();
}

/// Run as a child process (`OFFLOAD_SHM_CHILD` set): `connect ENDPOINT` connects (exit 0) or is
/// refused (exit 3); `hang ENDPOINT` sends a large request and sleeps until killed.
#[test]
fn child_client() {
    let Ok(what) = std::env::var("OFFLOAD_SHM_CHILD") else { return };
    let (verb, ep) = what.split_once(' ').unwrap();
    let c = Connection::connect(ep, Duration::from_secs(5));
    match verb {
        "connect" => std::process::exit(if c.is_ok() { 0 } else { 3 }),
        _ => {
            let mut c = c.unwrap();
            c.send(&encoded_frame(1, &queries(&engine(), 300), 0), Instant::now() + Duration::from_secs(5)).unwrap();
            std::thread::sleep(Duration::from_secs(60));
        }
    }
}

fn child(what: &str) -> std::process::Command {
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "child_client", "--nocapture", "--test-threads", "1"]).env("OFFLOAD_SHM_CHILD", what);
    cmd
}

#[test]
fn a_killed_client_is_dropped_and_the_others_are_served() {
    let dir = scratch("shm-kill");
    let ep = shm_endpoint(&dir, "kill");
    let d = Daemon::start(engine(), config(vec![ep.clone()], 1));
    let mut hung = child(&format!("hang {ep}")).spawn().unwrap();
    let pid = hung.id();
    let wait_for = |want: usize| {
        let until = Instant::now() + Duration::from_secs(10);
        while ring_mappings(pid) != want && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        ring_mappings(pid)
    };
    assert_eq!(wait_for(1), 1, "the daemon maps the child's rings");
    std::thread::sleep(Duration::from_millis(200)); // its request is in the daemon
    hung.kill().unwrap();
    hung.wait().unwrap();
    assert_eq!(wait_for(0), 0, "the killed client's rings are unmapped");
    let eng = engine();
    let cols = queries(&eng, 2);
    let r = Client::connect(&ep).unwrap().call(Query::raw(&names(), &cols)).unwrap();
    assert_eq!(r.rule, in_process(&eng, &cols).1);
    d.stop();
}

#[test]
fn the_socket_files_mode_decides_who_may_connect() {
    // Root passes file permission checks, so the refusal is checked from a child running as
    // nobody (possible when this test runs as root; otherwise the owner's own view is checked).
    let dir = scratch("shm-mode");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    for (mode, others_may) in [("0600", false), ("0666", true)] {
        let ep = format!("{}?mode={mode}", shm_endpoint(&dir, &format!("m{mode}")));
        let d = Daemon::start(engine(), config(vec![ep.clone()], 0));
        let path = dir.join(format!("m{mode}.sock"));
        let got = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(format!("0{got:o}"), mode);
        assert!(Connection::connect(&ep, Duration::from_secs(5)).is_ok(), "the owner connects");
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            use std::os::unix::process::CommandExt;
            let status = child(&format!("connect {ep}")).uid(65534).gid(65534).status().unwrap();
            assert_eq!(status.code(), Some(if others_may { 0 } else { 3 }), "mode {mode}");
        }
        d.stop();
    }
}

#[test]
fn a_stale_endpoint_is_claimed_a_live_one_refused() {
    let dir = scratch("shm-claim");
    let ep = shm_endpoint(&dir, "claim");
    drop(std::os::unix::net::UnixListener::bind(dir.join("claim.sock")).unwrap()); // left behind
    let d = Daemon::start(engine(), config(vec![ep.clone()], 0));
    let served = std::sync::Arc::new(std::sync::RwLock::new(std::sync::Arc::new(offload_serve::server::Served::new(
        engine(),
        1,
        offload_rules::MatcherKind::Fast,
    ))));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let e = offload_serve::server::run(served, &config(vec![ep.clone()], 0), stop).unwrap_err();
    assert!(e.contains("in use by another process"), "{e}");
    let eng = engine();
    let cols = queries(&eng, 1);
    assert_eq!(Client::connect(&ep).unwrap().call(Query::raw(&names(), &cols)).unwrap().status, Status::Ok);
    d.stop();
}

#[test]
fn after_stop_requests_are_answered_shutting_down_until_the_daemon_leaves() {
    let dir = scratch("shm-shutdown");
    let (a, b) = (shm_endpoint(&dir, "one"), shm_endpoint(&dir, "two")); // two endpoints, one doorbell
    let served = std::sync::Arc::new(std::sync::RwLock::new(std::sync::Arc::new(offload_serve::server::Served::new(
        engine(),
        1,
        offload_rules::MatcherKind::Fast,
    ))));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (s, (tx, rx)) = (stop.clone(), std::sync::mpsc::channel());
    let cfg = config(vec![a.clone(), b.clone()], 1);
    let daemon = std::thread::spawn(move || {
        offload_serve::server::run_with(served, &cfg, s, move |_| tx.send(()).unwrap()).unwrap();
    });
    rx.recv_timeout(Duration::from_secs(20)).unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    let (mut one, mut two) = (
        Connection::connect(&a, Duration::from_secs(5)).unwrap(),
        Connection::connect(&b, Duration::from_secs(5)).unwrap(),
    );
    let eng = engine();
    let frame = encoded_frame(1, &queries(&eng, 1), 0);
    for c in [&mut one, &mut two] {
        c.send(&frame, until).unwrap();
        assert_eq!(c.recv(until, |f| protocol::decode_reply(f).unwrap().status).unwrap(), Status::Ok);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(20)); // the daemon drains for 100 ms at least
    one.send(&frame, until).unwrap();
    assert_eq!(one.recv(until, |f| protocol::decode_reply(f).unwrap().status).unwrap(), Status::ShuttingDown);
    daemon.join().unwrap();
    assert!(matches!(two.recv(until, |_| ()), Err(offload_serve::shm::ShmError::Closed)));
}

#[test]
fn a_stopped_daemon_is_a_clear_error_not_a_timeout() {
    let dir = scratch("shm-stop");
    let ep = shm_endpoint(&dir, "stop");
    let d = Daemon::start(engine(), config(vec![ep.clone()], 1));
    let mut c = Client::connect(&ep).unwrap();
    let eng = engine();
    let cols = queries(&eng, 1);
    assert_eq!(c.call(Query::raw(&names(), &cols)).unwrap().status, Status::Ok);
    d.stop();
    c.timeout = Duration::from_secs(20);
    let t = Instant::now();
    let r = c.call(Query::raw(&names(), &cols));
    assert!(matches!(&r, Err(ClientError::Shm(m)) if m.contains("closed")), "{r:?}");
    assert!(t.elapsed() < Duration::from_secs(5));
    assert!(matches!(Client::connect(&ep), Err(ClientError::Shm(_))));
}

#[test]
fn a_frame_over_max_request_bytes_disconnects_its_client_only() {
    let dir = scratch("shm-max");
    let ep = shm_endpoint(&dir, "max");
    let d = Daemon::start(engine(), Config { max_request_bytes: Some(4096), ..config(vec![ep.clone()], 0) });
    let eng = engine();
    let until = Instant::now() + Duration::from_secs(10);
    let mut big = Connection::connect(&ep, Duration::from_secs(5)).unwrap();
    big.send(&encoded_frame(1, &queries(&eng, 200), 0), until).unwrap();
    let r = big.recv(until, |f| f.len());
    assert!(matches!(r, Err(offload_serve::shm::ShmError::Closed)), "{r:?}");
    let cols = queries(&eng, 1);
    assert_eq!(Client::connect(&ep).unwrap().call(Query::raw(&names(), &cols)).unwrap().status, Status::Ok);
    d.stop();
}
