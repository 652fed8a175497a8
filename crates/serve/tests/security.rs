//! The daemon's security against real ZeroMQ peers on loopback: a control socket with CURVE admits
//! only listed client keys (others are refused and counted), open binds are refused, `reload`
//! reads only under its directories and never returns file contents, and the data endpoints can
//! require CURVE too. Every wait is bounded.

mod common;

use common::{engine, example, in_process, names, queries, scratch};
use offload_rules::MatcherKind;
use offload_serve::auth::{self, ClientKey, CurveClient, CurveServer};
use offload_serve::client::{self, Client, ClientError, Query};
use offload_serve::protocol::Status;
use offload_serve::server::{self, check_exposure, Config, Security, Served};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

const SHORT: Duration = Duration::from_millis(300);
const LONG: Duration = Duration::from_secs(20);

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Key pairs for the daemon, an admitted operator and a stranger, written as key files.
struct Keys {
    server: CurveServer,
    ops: ClientKey,
    dir: PathBuf,
}

impl Keys {
    fn new(dir: &Path) -> Keys {
        for name in ["server", "ops", "stranger"] {
            auth::write_key_pair(dir, name, false).unwrap();
        }
        let ops = auth::read_client_keys(&[dir.join("ops.key")]).unwrap().remove(0);
        Keys { server: CurveServer::from_file(&dir.join("server.key_secret")).unwrap(), ops, dir: dir.into() }
    }
    /// A client with `name`'s key pair that takes `server`'s key for the daemon's.
    fn client(&self, name: &str, server: &str) -> CurveClient {
        let f = |n: &str, ext: &str| self.dir.join(format!("{n}.{ext}"));
        CurveClient::from_files(&f(server, "key"), &f(name, "key_secret")).unwrap()
    }
}

struct Daemon {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Result<(), String>>,
}

fn start(cfg: Config) -> Daemon {
    let served = Served::new(engine(), 1, MatcherKind::Fast);
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let thread = std::thread::spawn(move || server::run(Arc::new(RwLock::new(Arc::new(served))), &cfg, s).map(|_| ()));
    Daemon { stop, thread }
}

impl Daemon {
    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap().unwrap();
    }
}

fn stats(ep: &str, curve: Option<&CurveClient>) -> serde_json::Value {
    client::control(ep, &[b"stats"], curve, LONG).unwrap()
}

#[test]
fn the_control_socket_admits_only_listed_keys_and_counts_the_others() {
    let keys = Keys::new(&scratch("control-keys"));
    let (data, control) = (format!("tcp://127.0.0.1:{}", free_port()), format!("tcp://127.0.0.1:{}", free_port()));
    let security = Security {
        curve: Some(keys.server.clone()),
        control_clients: vec![keys.ops.clone()],
        reload_dirs: vec![example("").canonicalize().unwrap()],
        ..Security::default()
    };
    let cfg = Config { endpoints: vec![data.clone()], control: Some(control.clone()), security, ..Config::default() };
    let d = start(cfg);
    let (ops, stranger, fooled) =
        (keys.client("ops", "server"), keys.client("stranger", "server"), keys.client("ops", "stranger"));
    // A peer without keys, with a key the daemon does not list, or that takes another key for
    // the daemon's, gets no answer at all: not to stats, set or reload.
    for (who, curve) in [("no keys", None), ("stranger", Some(&stranger)), ("wrong server key", Some(&fooled))] {
        for cmd in [&b"stats"[..], b"set batch_max_queries 1", b"reload\nruletype.toml\nrules.csv"] {
            let r = client::control(&control, &[cmd], curve, SHORT);
            assert!(matches!(r, Err(ClientError::Timeout(_))), "{who}: {r:?}");
        }
    }
    let st = stats(&control, Some(&ops));
    assert_eq!(st["version"], 1);
    assert_eq!((&st["auth"]["control"], &st["auth"]["data"]), (&"curve".into(), &"none".into()));
    assert!(st["auth"]["control_refused"].as_u64().unwrap() >= 3, "{st}"); // the stranger, counted
    assert!(st["auth"]["control_ok"].as_u64().unwrap() >= 1);
    assert!(st["auth"]["last_refused_address"].as_str().unwrap().starts_with("127.0.0.1"), "{st}");
    // The admitted operator can change settings and reload.
    let set = client::control(&control, &[b"set batch_max_queries 64"], Some(&ops), LONG).unwrap();
    assert_eq!(set["ok"], true);
    let r = client::control(&control, &[b"reload\nruletype.toml\nrules.csv"], Some(&ops), LONG).unwrap();
    assert_eq!((&r["ok"], &r["version"]), (&true.into(), &2.into()), "{r}");
    // The data endpoint (no CURVE asked for it) still answers anyone on loopback.
    let eng = engine();
    let cols = queries(&eng, 2);
    let reply = Client::connect(&data).unwrap().call(Query::raw(&names(), &cols)).unwrap();
    assert_eq!((reply.status, reply.rule), (Status::Ok, in_process(&eng, &cols).1));
    d.stop();
}

#[test]
fn open_binds_are_refused_with_the_way_to_do_it_properly() {
    let keys = Keys::new(&scratch("exposure-keys"));
    let open = |control: Option<&str>, data: &str, metrics: Option<&str>, security: Security| Config {
        endpoints: vec![data.into()],
        control: control.map(Into::into),
        metrics: metrics.map(Into::into),
        security,
        ..Config::default()
    };
    let loopback = "tcp://127.0.0.1:1";
    let e = check_exposure(&open(Some("tcp://0.0.0.0:5592"), loopback, None, Security::default())).unwrap_err();
    assert!(e.contains("control endpoint tcp://0.0.0.0:5592") && e.contains("offload serve keys"), "{e}");
    // run() itself refuses before binding anything
    let served = Served::new(engine(), 1, MatcherKind::Fast);
    let cfg = open(Some("tcp://0.0.0.0:5592"), loopback, None, Security::default());
    let r = server::run(Arc::new(RwLock::new(Arc::new(served))), &cfg, Arc::new(AtomicBool::new(true)));
    assert!(r.is_err());
    for ep in ["tcp://*:5591", "tcp://eth0:5591", "tcp://10.0.0.1:5591"] {
        let e = check_exposure(&open(None, ep, None, Security::default())).unwrap_err();
        assert!(e.contains("--allow-remote-data") && e.contains("--curve-data-client"), "{e}");
    }
    let allowed = Security { allow_remote_data: true, ..Security::default() };
    let w = check_exposure(&open(None, "tcp://0.0.0.0:5591", None, allowed)).unwrap();
    assert!(w[0].contains("without authentication"), "{w:?}");
    let e = check_exposure(&open(None, loopback, Some("0.0.0.0:9464"), Security::default())).unwrap_err();
    assert!(e.contains("--allow-remote-metrics"), "{e}");
    let allowed = Security { allow_remote_metrics: true, ..Security::default() };
    assert_eq!(check_exposure(&open(None, loopback, Some("0.0.0.0:9464"), allowed)).unwrap().len(), 1);
    assert!(check_exposure(&open(Some("ipc:///tmp/x.sock"), loopback, Some("9464"), Security::default())).is_ok());
    // With CURVE the same control endpoint is accepted, and data CURVE lifts the data refusal.
    let curve = Security {
        curve: Some(keys.server.clone()),
        control_clients: vec![keys.ops.clone()],
        data_clients: Some(vec![keys.ops.clone()]),
        ..Security::default()
    };
    assert_eq!(
        check_exposure(&open(Some("tcp://0.0.0.0:5592"), "tcp://0.0.0.0:5591", None, curve)).unwrap(),
        Vec::<String>::new()
    );
    let half = Security { data_clients: Some(vec![keys.ops.clone()]), ..Security::default() };
    assert!(check_exposure(&open(None, loopback, None, half)).unwrap_err().contains("--curve-secret-key"));
}

#[test]
fn reload_reads_only_under_its_directories_and_never_returns_file_contents() {
    let dir = scratch("reload");
    let rules_dir = dir.join("rules");
    std::fs::create_dir_all(&rules_dir).unwrap();
    for f in ["ruletype.toml", "rules.csv"] {
        std::fs::copy(example(f), rules_dir.join(f)).unwrap();
    }
    let secret = dir.join("secret.csv"); // outside the reload directory
    std::fs::write(&secret, "root:x:0:0:root:/root:/bin/bash\n").unwrap();
    std::fs::write(rules_dir.join("bad.csv"), "TOP-SECRET-HEADER,x\n").unwrap();
    #[cfg(unix)]
    std::os::unix::fs::symlink(&secret, rules_dir.join("escape.csv")).unwrap();
    let control = format!("ipc://{}/control.sock", dir.display());
    let security = Security { reload_dirs: vec![rules_dir.canonicalize().unwrap()], ..Security::default() };
    let cfg = Config {
        endpoints: vec![format!("ipc://{}/data.sock", dir.display())],
        control: Some(control.clone()),
        security,
        ..Config::default()
    };
    let d = start(cfg);
    let reload = |rt: &str, rules: &str| {
        client::control(&control, &[format!("reload\n{rt}\n{rules}").as_bytes()], None, LONG).unwrap()
    };
    let refused = [secret.display().to_string(), "../secret.csv".into(), "escape.csv".into(), "missing.csv".into()];
    for rules in refused.iter().map(String::as_str).chain(["/etc/passwd"]) {
        let r = reload("ruletype.toml", rules);
        let e = r["error"].as_str().unwrap();
        assert_eq!(r["ok"], false);
        assert!(e.contains("reload directories") && !e.contains("root:"), "{rules}: {e}");
    }
    // A bad file inside: where and what, not a byte of it.
    let r = reload("ruletype.toml", "bad.csv");
    let e = r["error"].as_str().unwrap();
    assert!(e.contains("bad.csv:1:1: error[missing-column]") && !e.contains("TOP-SECRET"), "{e}");
    assert_eq!(stats(&control, None)["version"], 1); // nothing was swapped in
                                                     // The control socket file is its owner's alone.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.join("control.sock")).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "{mode:o}");
    }
    assert_eq!(reload("ruletype.toml", "rules.csv")["version"], 2);
    // A rule set sent in the request: no file of the daemon's is read; errors are whole (the
    // text is the peer's own).
    let (rt, rules) = (std::fs::read(example("ruletype.toml")).unwrap(), std::fs::read(example("rules.csv")).unwrap());
    let inline = |rules: &[u8]| {
        client::control(&control, &[b"reload-inline\nmine.toml\nmine.csv", &rt, rules], None, LONG).unwrap()
    };
    assert_eq!(inline(&rules)["version"], 3);
    let r = inline(b"MY-OWN-HEADER\n");
    let e = r["error"].as_str().unwrap();
    assert!(e.contains("mine.csv:1:1: error[missing-column]") && e.contains("must start with RULE_ID"), "{e}");
    let r = client::control(&control, &[b"reload-inline\nmine.toml\nmine.csv", &rt], None, LONG).unwrap();
    assert!(r["error"].as_str().unwrap().contains("two more frames"), "{r}");
    d.stop();
    // The daemon removes the IPC socket files it bound (libzmq leaves them).
    assert!(!dir.join("control.sock").exists() && !dir.join("data.sock").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn data_endpoints_can_require_curve_too() {
    let keys = Keys::new(&scratch("data-keys"));
    let (data, control) = (format!("tcp://127.0.0.1:{}", free_port()), format!("tcp://127.0.0.1:{}", free_port()));
    let security = Security {
        curve: Some(keys.server.clone()),
        control_clients: vec![keys.ops.clone()],
        data_clients: Some(vec![keys.ops.clone()]),
        ..Security::default()
    };
    let cfg = Config { endpoints: vec![data.clone()], control: Some(control.clone()), security, ..Config::default() };
    let d = start(cfg);
    let eng = engine();
    let cols = queries(&eng, 3);
    for curve in [None, Some(keys.client("stranger", "server"))] {
        let mut c = Client::connect_with(&data, curve.as_ref()).unwrap();
        c.timeout = SHORT;
        assert!(matches!(c.call(Query::raw(&names(), &cols)), Err(ClientError::Timeout(_))));
    }
    let mut c = Client::connect_with(&data, Some(&keys.client("ops", "server"))).unwrap();
    c.timeout = LONG;
    let r = c.call(Query::raw(&names(), &cols)).unwrap();
    assert_eq!((r.status, r.rule), (Status::Ok, in_process(&eng, &cols).1));
    let st = stats(&control, Some(&keys.client("ops", "server")));
    assert_eq!(st["auth"]["data"], "curve");
    assert!(st["auth"]["data_refused"].as_u64().unwrap() >= 1 && st["auth"]["data_ok"].as_u64().unwrap() >= 1, "{st}");
    d.stop();
}
