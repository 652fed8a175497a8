//! The daemon under faults (issue 23), with real sockets: a second daemon on a used IPC endpoint
//! is refused and the first keeps its file; a stale socket file is taken over; a reload that
//! changes the criteria is refused; columns in another order are refused. Every wait is bounded.

mod common;

use common::{engine, example, in_process, names, queries, scratch};
use offload_rules::MatcherKind;
use offload_serve::client::{self, Client, Query};
use offload_serve::protocol::Status;
use offload_serve::server::{self, Config, Served};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

struct Daemon {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Result<(), String>>,
}

/// Starts a daemon on a thread and returns once it is bound (or its error, if binding failed).
fn start(cfg: Config) -> Result<Daemon, String> {
    let served = Served::new(engine(), 1, MatcherKind::Fast);
    let stop = Arc::new(AtomicBool::new(false));
    let (s, (tx, rx)) = (stop.clone(), std::sync::mpsc::channel());
    let thread = std::thread::spawn(move || {
        let ready = tx.clone();
        server::run_with(Arc::new(RwLock::new(Arc::new(served))), &cfg, s, move |_| {
            let _ = ready.send(());
        })
        .map(|_| ())
    });
    match rx.recv_timeout(Duration::from_secs(20)) {
        Ok(()) => Ok(Daemon { stop, thread }),
        Err(_) => Err(thread.join().unwrap().expect_err("a daemon that never said ready stopped without error")),
    }
}

impl Daemon {
    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap().unwrap();
    }
}

fn config(data: &str, control: Option<&str>) -> Config {
    Config { endpoints: vec![data.into()], control: control.map(Into::into), ..Config::default() }
}

#[test]
fn a_second_daemon_on_a_used_ipc_endpoint_is_refused() {
    let dir = scratch("two-daemons");
    let ep = format!("ipc://{}/o.sock", dir.display());
    let first = start(config(&ep, Some(&format!("ipc://{}/c1.sock", dir.display())))).unwrap();
    let t = Instant::now();
    let e = start(config(&ep, Some(&format!("ipc://{}/c2.sock", dir.display())))).err().unwrap();
    assert_eq!(e, format!("{ep} is in use by another process"));
    assert!(t.elapsed() < Duration::from_secs(5));
    assert!(!dir.join("c2.sock").exists());
    // The first still owns its file and answers.
    let eng = engine();
    let cols = queries(&eng, 2);
    let mut c = Client::connect(&ep).unwrap();
    c.timeout = Duration::from_secs(10);
    assert_eq!(c.call(Query::raw(&names(), &cols)).unwrap().rule, in_process(&eng, &cols).1);
    first.stop();
    assert!(!dir.join("o.sock").exists() && !dir.join("c1.sock").exists());
}

#[cfg(unix)]
#[test]
fn a_stale_socket_file_is_taken_over_and_other_files_are_left_alone() {
    let dir = scratch("stale");
    let path = dir.join("o.sock");
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap()); // the file stays, nobody listens
    assert!(path.exists());
    let ep = format!("ipc://{}", path.display());
    let d = start(config(&ep, None)).unwrap();
    // Someone replaces the socket file while the daemon runs: at exit it is not the daemon's.
    std::fs::remove_file(&path).unwrap();
    std::fs::write(&path, "someone else's").unwrap();
    d.stop();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "someone else's");
    // A path that is not a socket is refused, never removed.
    let e = start(config(&ep, None)).err().unwrap();
    assert!(e.contains("not a socket"), "{e}");
    assert!(path.exists());
}

#[test]
fn a_reload_that_changes_the_criteria_is_refused() {
    let dir = scratch("reload-criteria");
    let (ep, ctl) = (format!("ipc://{}/o.sock", dir.display()), format!("ipc://{}/c.sock", dir.display()));
    let d = start(config(&ep, Some(&ctl))).unwrap();
    let long = Duration::from_secs(30);
    let rt = std::fs::read_to_string(example("ruletype.toml")).unwrap();
    let rules = std::fs::read(example("rules.csv")).unwrap();
    let reload = |rt: &str| {
        client::control(&ctl, &[b"reload-inline\nnew.toml\nrules.csv", rt.as_bytes(), &rules], None, long).unwrap()
    };
    // The same criteria with other weights: accepted.
    let ok = reload(&rt.replace("weight = 128", "weight = 64"));
    assert_eq!((ok["ok"].as_bool(), ok["version"].as_u64()), (Some(true), Some(2)), "{ok}");
    // Two criteria swapped (the rules follow): refused, the served version stays.
    let swapped = rt
        .replacen("code = \"CTN_TYPE\"", "code = \"TMP\"", 1)
        .replacen("code = \"APT\"", "code = \"CTN_TYPE\"", 1)
        .replacen("code = \"TMP\"", "code = \"APT\"", 1);
    let header = String::from_utf8(rules.clone()).unwrap().replacen("CTN_TYPE,APT", "APT,CTN_TYPE", 1);
    let r = client::control(
        &ctl,
        &[b"reload-inline\nnew.toml\nrules.csv", swapped.as_bytes(), header.as_bytes()],
        None,
        long,
    )
    .unwrap();
    let e = r["error"].as_str().unwrap_or_default();
    assert_eq!((r["ok"].as_bool(), r["version"].as_u64()), (Some(false), Some(2)), "{r}");
    assert!(e.contains("column 1: APT (equ) instead of CTN_TYPE (equ)") && e.contains("restart"), "{e}");
    let eng = engine();
    let cols = queries(&eng, 1);
    let mut c = Client::connect(&ep).unwrap();
    let reply = c.call(Query::raw(&names(), &cols)).unwrap();
    assert_eq!((reply.status, reply.ruleset_version), (Status::Ok, 2), "{}", reply.message);
    d.stop();
}

#[test]
fn columns_in_another_order_are_refused_naming_the_criteria() {
    let dir = scratch("swapped");
    let ep = format!("ipc://{}/o.sock", dir.display());
    let d = start(config(&ep, None)).unwrap();
    let eng = engine();
    let cols = queries(&eng, 1);
    let mut names = names();
    let mut swapped = cols.clone();
    names.swap(0, 1);
    swapped.swap(0, 1);
    let mut c = Client::connect(&ep).unwrap();
    let r = c.call(Query::raw(&names, &swapped)).unwrap();
    assert_eq!(r.status, Status::BadRequest);
    assert!(r.message.contains("CTN_TYPE, APT, IN_CRR") && r.message.contains("fingerprint"), "{}", r.message);
    // Encoded rows for another rule type's columns: refused too.
    let (codes, _) = in_process(&eng, &cols);
    let other = offload_serve::protocol::criteria_fingerprint(&names);
    let r = c.call(Query::encoded(other, 1, eng.encoder.width() as u16, codes)).unwrap();
    assert_eq!(r.status, Status::BadRequest, "{}", r.message);
    d.stop();
}
