//! The daemon: a ZeroMQ ROUTER front end (TCP and/or IPC), a bounded request queue, w worker
//! threads that decode, batch and encode, and k kernel executors that match with e engine
//! threads each (the seed's `Np Nw Nk Ne`; p is the number of client processes).
//!
//! ```text
//! clients ──DEALER/REQ──▶ ROUTER (broker) ──request queue──▶ w workers ──kernel queue──▶ k executors
//!                            ▲                                   │ refusals                │ replies
//!                            └──────── inproc PULL ◀──── PUSH ───┴─────────────────────────┘
//! ```
//! ZeroMQ sockets are not thread-safe, so only the broker touches the ROUTER; workers and
//! executors hand replies back over inproc. ROUTER_MANDATORY is set so a reply to a vanished client is an
//! error we count, not a silent drop. When the queue is full the broker answers "busy" at once;
//! a request whose deadline has passed is answered "deadline exceeded" without being executed.
//! On SIGINT/SIGTERM (or `stop`), new requests get "shutting down", queued ones are finished and
//! answered, then the threads exit.
//!
//! Clients on this host may come over shared memory instead (`shm://`, [`crate::shm`]): the shm
//! thread reads their request rings and admits each request as the broker does (the same queues,
//! refusals and, in inline mode, matching in place); whoever answers writes the reply straight
//! into the client's reply ring (an `Envelope::Shm`), so no reply of theirs passes the broker.

use crate::auth;
use crate::handoff::{HandOff, Popped, Producer, Refused};
pub use crate::metrics::Counters;
use crate::protocol::{self, Payload, Reply, Stage, Status};
use offload_rules::{
    match_parallel, match_staged, DeviceStages, Engine, MatcherKind, PackedStrings, RawColumn, NO_MATCH,
};
use sha2::Digest;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// What the daemon runs with (the CLI fills it from a file and flags).
#[derive(Debug, Clone)]
pub struct Config {
    /// ZeroMQ endpoints to bind, e.g. `tcp://127.0.0.1:5555`, `ipc:///tmp/offload.sock`.
    pub endpoints: Vec<String>,
    /// Worker threads (w): decode, batch, encode, hand over to a kernel executor.
    pub workers: usize,
    /// Kernel executors (k), each running the compiled matcher on one batch at a time.
    pub kernels: usize,
    /// Engine threads per kernel executor (e): the threads one batch is matched with.
    pub engine_threads: usize,
    /// Requests that may wait in the queue; one more gets "busy".
    pub queue: usize,
    /// Control endpoint (REP) for `stats`, `reload` and `set`, if any.
    pub control: Option<String>,
    /// Address of the Prometheus endpoint (`GET /metrics`), e.g. `127.0.0.1:9464`, if any.
    pub metrics: Option<String>,
    /// Cross-request batching: queries per batch (0 = per request) and the wait for more (µs).
    pub batch_max_queries: u64,
    pub batch_timeout_us: u64,
    /// Largest frame a data endpoint takes (ZMQ_MAXMSGSIZE on the ROUTER): a larger one closes
    /// its sender's connection before the daemon holds it.
    pub max_request_bytes: u64,
    /// Who may reach which socket, and what `reload` may read.
    pub security: Security,
    /// Benchmarks only (`--matcher null`): the executors answer every query "no match" without
    /// calling the matcher, so what the daemon costs is its host path alone. Said on stderr at
    /// start, in `stats` and on the metrics page, so no one takes its answers for real ones.
    pub null_matcher: bool,
}

/// The daemon's security settings (docs/serve-protocol.md, "Security"). The default is the safe
/// one: no CURVE, so every endpoint must be on loopback or IPC, and `reload` may not read files
/// (a rule set can still be sent in the request).
#[derive(Debug, Clone, Default)]
pub struct Security {
    /// The daemon's key pair: with it the control socket requires CURVE.
    pub curve: Option<auth::CurveServer>,
    /// Client keys admitted on the control socket.
    pub control_clients: Vec<auth::ClientKey>,
    /// Client keys admitted on the data endpoints; `Some` makes them require CURVE too.
    pub data_clients: Option<Vec<auth::ClientKey>>,
    /// Directories (canonical) a `reload` by path may read rule files from.
    pub reload_dirs: Vec<PathBuf>,
    /// Bind a data endpoint on the network without CURVE (answers and queries in clear text,
    /// open to anyone who can reach it).
    pub allow_remote_data: bool,
    /// Serve the metrics page on a non-loopback address (counters only, no control).
    pub allow_remote_metrics: bool,
}

/// Checks that every endpoint is as reachable as the security settings allow; returns warnings
/// for what the user allowed explicitly, or the error that says how to do it properly.
pub fn check_exposure(cfg: &Config) -> Result<Vec<String>, String> {
    use auth::Reach::Network;
    let sec = &cfg.security;
    let mut warnings = Vec::new();
    if let Some(ep) = cfg.control.as_deref().filter(|ep| auth::endpoint_reach(ep) == Network) {
        if sec.curve.is_none() {
            return Err(format!(
                "refusing to bind the control endpoint {ep} without authentication: anyone who can reach it could \
                 reload rules and change settings. Bind it to loopback or IPC (e.g. -c tcp://127.0.0.1:5556 or \
                 -c ipc:///run/offload/control.sock), or turn on CURVE: `offload serve keys KEYS`, then \
                 --curve-secret-key KEYS/server.key_secret --curve-client KEYS/client.key \
                 (docs/serve-protocol.md, Security)"
            ));
        }
    }
    for ep in cfg.endpoints.iter().filter(|ep| auth::endpoint_reach(ep) == Network) {
        if sec.data_clients.is_none() {
            if !sec.allow_remote_data {
                return Err(format!(
                    "refusing to bind the data endpoint {ep} on the network without authentication: anyone who \
                     can reach it could send queries and read the answers. Bind it to loopback or IPC, require \
                     CURVE on it (--curve-data-client KEYS_OR_DIR, with --curve-secret-key and --curve-client), \
                     or accept the risk explicitly with --allow-remote-data"
                ));
            }
            warnings.push(format!(
                "warning: data endpoint {ep} is open to the network without authentication or encryption \
                 (--allow-remote-data)"
            ));
        }
    }
    if let Some(m) = &cfg.metrics {
        let (addr, reach) = auth::metrics_address(m)?;
        if reach == Network {
            if !sec.allow_remote_metrics {
                return Err(format!(
                    "refusing to serve metrics on {addr}, off loopback: the page is readable by anyone who can \
                     reach it. Use --metrics 127.0.0.1:PORT (or a bare port) behind your scraper's own proxy, \
                     or accept it explicitly with --allow-remote-metrics"
                ));
            }
            warnings.push(format!("warning: metrics at http://{addr}/metrics are readable by anyone who can reach it"));
        }
    }
    if sec.data_clients.is_some() && sec.curve.is_none() {
        return Err("CURVE on the data endpoints needs the daemon's key pair (--curve-secret-key)".into());
    }
    if sec.curve.is_some() && !zmq::has("curve").unwrap_or(false) {
        return Err(auth::no_curve());
    }
    Ok(warnings)
}

/// A compiled rule set with the version every reply names.
pub struct Served {
    pub engine: Engine,
    pub version: u64,
    pub matcher: MatcherKind,
    /// [`protocol::rule_type_fingerprint`] of the engine's rule type: what requests must carry.
    pub criteria_fingerprint: u64,
    /// The encoding dictionary's bytes and code width, built on the first dictionary request.
    dictionary: std::sync::OnceLock<(Vec<u8>, u8)>,
}

impl Served {
    pub fn new(engine: Engine, version: u64, matcher: MatcherKind) -> Served {
        let criteria_fingerprint = protocol::rule_type_fingerprint(&engine.rules().rule_type);
        Served { engine, version, matcher, criteria_fingerprint, dictionary: std::sync::OnceLock::new() }
    }

    /// The encoding dictionary of this version, as a dictionary reply carries it, and the code
    /// width (16 or 32 bits) every query fits in.
    pub fn dictionary(&self) -> &(Vec<u8>, u8) {
        self.dictionary.get_or_init(|| {
            let d = self.engine.encoder.dictionary();
            (d.to_bytes(), d.max_code_bits())
        })
    }

    /// The criteria, as a person reads them: `CTN_TYPE (equ), APT (equ), ...`.
    fn criteria_names(&self) -> String {
        let c = &self.engine.rules().rule_type.criteria;
        c.iter().map(|c| c.code.as_str()).collect::<Vec<_>>().join(", ")
    }
}

/// Why a rule type cannot replace the served one in a reload: its criteria differ in names,
/// order or kinds (requests would then be read against other columns). `None` when they agree.
pub fn criteria_change(old: &offload_rules::RuleType, new: &offload_rules::RuleType) -> Option<String> {
    let show = |rt: &offload_rules::RuleType| {
        rt.criteria.iter().map(|c| format!("{} ({})", c.code, c.kind.as_str())).collect::<Vec<_>>().join(", ")
    };
    let (o, n) = (&old.criteria, &new.criteria);
    let same = |a: &offload_rules::Criterion, b: &offload_rules::Criterion| a.code == b.code && a.kind == b.kind;
    if o.len() == n.len() && o.iter().zip(n).all(|(a, b)| same(a, b)) {
        return None;
    }
    let first = o.iter().zip(n).position(|(a, b)| !same(a, b)).unwrap_or(o.len().min(n.len()));
    let at = |c: &[offload_rules::Criterion]| {
        c.get(first).map_or("nothing".to_string(), |c| format!("{} ({})", c.code, c.kind.as_str()))
    };
    Some(format!(
        "the new rule type's criteria differ from the served one's: {} criteria instead of {}, first difference \
         at column {}: {} instead of {}. A reload may change the rules, not the criteria (names, order, kinds): \
         changing the rule type needs a restart of the daemon, with clients sending the new columns. Served: [{}]; \
         new: [{}]",
        n.len(),
        o.len(),
        first + 1,
        at(n),
        at(o),
        show(old),
        show(new)
    ))
}

/// The rule set being served. A reload builds a new [`Served`] off the hot path and swaps the
/// `Arc` under the write lock; a worker takes one `Arc` per request, so every answer of a
/// request comes from one version and names it.
pub type Current = Arc<RwLock<Arc<Served>>>;

pub(crate) fn snapshot(current: &Current) -> Arc<Served> {
    current.read().unwrap_or_else(|p| p.into_inner()).clone()
}

/// Where a reload takes its rule set from.
enum RuleSource {
    /// Files on this machine, already checked to lie under a reload directory.
    Files { rule_type: PathBuf, rules: PathBuf },
    /// The files' bytes, sent by the control peer; the names stand for them in errors.
    Sent { rule_type_name: PathBuf, rule_type: Vec<u8>, rules_name: PathBuf, rules: Vec<u8> },
}

/// What a reload is to check before it loads: the rules file's SHA-256 and the rule count, each
/// when the control peer gave it (`sha256 HEX` and `rows N` lines after the paths). A file
/// still being written fails one or the other, and the served set stays.
#[derive(Debug, Default, PartialEq, Eq)]
struct ReloadCheck {
    sha256: Option<String>,
    rows: Option<usize>,
}

impl ReloadCheck {
    /// Reads the lines after the two paths: none, `sha256 HEX` (64 hex digits), `rows N`.
    fn parse<'a>(lines: impl Iterator<Item = &'a str>) -> Result<ReloadCheck, String> {
        let mut check = ReloadCheck::default();
        for line in lines.map(str::trim).filter(|l| !l.is_empty()) {
            match line.split_once(' ') {
                Some(("sha256", hex)) if hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()) => {
                    check.sha256 = Some(hex.to_ascii_lowercase())
                }
                Some(("rows", n)) if n.parse::<usize>().is_ok() => check.rows = n.parse().ok(),
                _ => {
                    return Err(format!(
                        "reload: {line:?} is no check: after the two paths come `sha256 HEX` (64 hex digits) and \
                         `rows N`, each optional"
                    ))
                }
            }
        }
        Ok(check)
    }

    /// Checks the rules file's bytes (before parsing): its digest.
    fn bytes(&self, name: &Path, rules: &[u8]) -> Result<(), String> {
        let Some(want) = &self.sha256 else { return Ok(()) };
        let got: String = sha2::Sha256::digest(rules).iter().map(|b| format!("{b:02x}")).collect();
        if &got == want {
            return Ok(());
        }
        Err(format!(
            "{}: its sha256 is {got}, not the {want} given ({} bytes read): a file still being written, or \
             another one; the served rule set stays. Write the new file under another name and rename it into \
             place, then reload",
            name.display(),
            rules.len()
        ))
    }

    /// Checks the parsed rule set: its rule count.
    fn rule_set(&self, name: &Path, rs: &offload_rules::RuleSet) -> Result<(), String> {
        match self.rows {
            Some(want) if rs.len() != want => Err(format!(
                "{}: {} rules, not the {want} given: a file still being written, or another one; the served \
                 rule set stays. Write the new file under another name and rename it into place, then reload",
                name.display(),
                rs.len()
            )),
            _ => Ok(()),
        }
    }
}

/// Reads a rule file for a reload; the error names it, quoting nothing.
fn read_rule_file(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// Loads and compiles a rule set as the version after `old`'s, checked as `check` says. The
/// error for files on this machine names the problem and where it is but quotes nothing of
/// them (the peer may not read them; the daemon's log has the whole message); for sent files,
/// whose text the peer has, it is the whole message.
fn rebuild(old: &Served, source: RuleSource, check: &ReloadCheck) -> Result<(Served, f64), String> {
    let t = Instant::now();
    let rs = match source {
        RuleSource::Files { rule_type, rules } => {
            let (rt_bytes, rules_bytes) = (read_rule_file(&rule_type)?, read_rule_file(&rules)?);
            check.bytes(&rules, &rules_bytes)?;
            let rs = offload_rules::parse(&rule_type, rt_bytes, &rules, rules_bytes).map_err(|e| {
                eprintln!("reload failed: {e}");
                e.without_content()
            })?;
            check.rule_set(&rules, &rs)?;
            rs
        }
        RuleSource::Sent { rule_type_name, rule_type, rules_name, rules } => {
            check.bytes(&rules_name, &rules)?;
            let rs = offload_rules::parse(&rule_type_name, rule_type, &rules_name, rules).map_err(|e| e.to_string())?;
            check.rule_set(&rules_name, &rs)?;
            rs
        }
    };
    if let Some(why) = criteria_change(&old.engine.rules().rule_type, &rs.rule_type) {
        return Err(why);
    }
    let engine = Engine::compile(Arc::new(rs), old.matcher)?;
    Ok((Served::new(engine, old.version + 1, old.matcher), t.elapsed().as_secs_f64()))
}

/// A rule file a control peer named for `reload`: a relative path is taken under the first
/// reload directory; with `..` and symbolic links resolved, it must be a file under one of
/// them. The error is the same whether or not a file outside exists.
fn reload_path(dirs: &[PathBuf], given: &str) -> Result<PathBuf, String> {
    let send = "send the files themselves instead (offload serve reload --send)";
    let Some(first) = dirs.first() else {
        return Err(format!("reload by path is off (no reload directory): {send}"));
    };
    let refused = || format!("{given:?} is not a rule file under the daemon's reload directories: {send}");
    let real = first.join(given.trim()).canonicalize().map_err(|_| refused())?;
    if real.is_file() && dirs.iter().any(|d| real.starts_with(d)) {
        Ok(real)
    } else {
        Err(refused())
    }
}

/// Builds the new version on its own thread and swaps it in; the receiver gets the answer.
fn spawn_reload(current: &Current, source: RuleSource, check: ReloadCheck) -> std::sync::mpsc::Receiver<String> {
    let current = current.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let old = snapshot(&current);
        let answer = match rebuild(&old, source, &check) {
            Ok((new, secs)) => {
                let (version, n) = (new.version, new.engine.rules().len());
                *current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(new);
                serde_json::json!({"ok": true, "version": version, "rules": n, "load_compile_s": secs})
            }
            Err(e) => serde_json::json!({"ok": false, "error": e, "version": old.version}),
        };
        let _ = tx.send(answer.to_string());
    });
    rx
}

/// What the null matcher's daemon says at start and in `stats`.
pub const NULL_MATCHER_NOTE: &str = "null matcher: benchmark only, no query is matched and every answer is \
                                     'no match'; the numbers are the service's host path alone";

/// The `stats` answer: version, counters, latency quantiles, batching knobs, security.
fn stats(current: &Current, counters: &Counters, policy: &BatchPolicy, security: &Security) -> String {
    let s = snapshot(current);
    let mut m = serde_json::Map::new();
    m.insert("version".into(), s.version.into());
    m.insert("rules".into(), s.engine.rules().len().into());
    if counters.null_matcher {
        m.insert("matcher".into(), "null".into());
        m.insert("benchmark_only".into(), NULL_MATCHER_NOTE.into());
    } else if s.engine.matcher.name() == crate::emulated::NAME {
        // The emulated device (benchmarks only) says so, with its own counters.
        m.insert("matcher".into(), crate::emulated::NAME.into());
        m.insert("benchmark_only".into(), crate::emulated::NOTE.into());
        m.insert("emulated".into(), s.engine.matcher.stats());
    } else {
        m.insert("matcher".into(), s.matcher.to_string().into());
    }
    for (k, v) in counters.snapshot() {
        m.insert(k.into(), v.into());
    }
    m.insert("cpu".into(), counters.cpu.snapshot().summary(counters.queries.load(Ordering::Relaxed)));
    m.insert("latency".into(), counters.latency.summary());
    m.insert("batch_max_queries".into(), policy.max_queries.load(Ordering::Relaxed).into());
    m.insert("batch_timeout_us".into(), policy.timeout_us.load(Ordering::Relaxed).into());
    let mut auth: serde_json::Map<String, serde_json::Value> =
        counters.auth.snapshot().into_iter().map(|(k, v)| (k.to_string(), v.into())).collect();
    let mechanism = |on: bool| if on { "curve" } else { "none" };
    auth.insert("control".into(), mechanism(security.curve.is_some()).into());
    auth.insert("data".into(), mechanism(security.data_clients.is_some()).into());
    let last = counters.auth.last_refused.lock().unwrap_or_else(|p| p.into_inner()).clone();
    auth.insert("last_refused_address".into(), last.into());
    m.insert("auth".into(), auth.into());
    serde_json::Value::Object(m).to_string()
}

/// Answers one control command, a multipart message: `stats`; `set KEY VALUE`; `reload`,
/// newline, rule-type path, newline, rules path (files under the reload directories); or
/// `reload-inline`, newline, rule-type name, newline, rules name, then two frames with the two
/// files' bytes. Either reload may add lines `sha256 HEX` and `rows N` (the rules file's digest
/// and rule count, checked before the swap). A reload runs on another thread: the receiver
/// gets its answer once the new version is live.
fn control_command(
    frames: Vec<Vec<u8>>,
    current: &Current,
    counters: &Counters,
    policy: &BatchPolicy,
    security: &Security,
) -> Result<String, std::sync::mpsc::Receiver<String>> {
    let mut frames = frames.into_iter();
    let head = frames.next().unwrap_or_default();
    let head = String::from_utf8_lossy(&head);
    let mut lines = head.lines();
    let failed =
        |e: &str| Ok(serde_json::json!({"ok": false, "error": e, "version": snapshot(current).version}).to_string());
    match lines.next().map(str::trim) {
        Some("stats") => Ok(stats(current, counters, policy, security)),
        Some("reload") => {
            let (Some(rt), Some(rules)) = (lines.next(), lines.next()) else {
                return failed("reload needs a rule-type path and a rules path, one per line");
            };
            let check = match ReloadCheck::parse(lines) {
                Ok(c) => c,
                Err(e) => return failed(&e),
            };
            match (reload_path(&security.reload_dirs, rt), reload_path(&security.reload_dirs, rules)) {
                (Ok(rule_type), Ok(rules)) => Err(spawn_reload(current, RuleSource::Files { rule_type, rules }, check)),
                (Err(e), _) | (_, Err(e)) => failed(&e),
            }
        }
        Some("reload-inline") => {
            let (Some(rt), Some(rules), Some(rt_bytes), Some(rules_bytes)) =
                (lines.next(), lines.next(), frames.next(), frames.next())
            else {
                return failed(
                    "reload-inline needs the rule-type and rules file names, one per line, then the two files' \
                     bytes as two more frames",
                );
            };
            let check = match ReloadCheck::parse(lines) {
                Ok(c) => c,
                Err(e) => return failed(&e),
            };
            let source = RuleSource::Sent {
                rule_type_name: rt.trim().into(),
                rule_type: rt_bytes,
                rules_name: rules.trim().into(),
                rules: rules_bytes,
            };
            Err(spawn_reload(current, source, check))
        }
        Some(set) if set.starts_with("set ") => Ok(set_command(set, policy)),
        _ => Ok(r#"{"ok":false,"error":"unknown command; expected stats, reload, reload-inline or set"}"#.into()),
    }
}

/// `set batch_max_queries N` / `set batch_timeout_us N`: checked against the settings' bounds
/// (`config::BOUNDS`, as at start), then applied; the executors re-read the policy while they
/// gather, so a change applies to the batch already waiting too.
fn set_command(set: &str, policy: &BatchPolicy) -> String {
    let mut it = set.split_whitespace().skip(1);
    let (key, value) = (it.next().unwrap_or(""), it.next().and_then(|v| v.parse::<u64>().ok()));
    let target = match key {
        "batch_max_queries" => &policy.max_queries,
        "batch_timeout_us" => &policy.timeout_us,
        _ => {
            let e = format!("unknown setting {key:?}: batch_max_queries or batch_timeout_us may be set while serving");
            return serde_json::json!({"ok": false, "error": e}).to_string();
        }
    };
    let Some(value) = value else {
        return serde_json::json!({"ok": false, "error": "the value must be a non-negative integer"}).to_string();
    };
    match crate::config::check_setting(key, value) {
        Ok(v) => {
            target.store(v, Ordering::Relaxed);
            serde_json::json!({"ok": true, key: v}).to_string()
        }
        Err(e) => serde_json::json!({"ok": false, "error": e}).to_string(),
    }
}

struct Job {
    envelope: Envelope,
    body: Body,
    received: Instant,
}

impl Job {
    /// Where a refusal goes, and the request id it names.
    fn refusal(self) -> (Envelope, u64) {
        let id = protocol::peek_request_id(&self.body);
        (self.envelope, id)
    }
}

fn now_unix_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

fn zerr(what: &str, e: zmq::Error) -> String {
    format!("{what}: {e}")
}

/// Serves until `stop` becomes true; returns the final counters.
pub fn run(current: Current, cfg: &Config, stop: Arc<AtomicBool>) -> Result<Arc<Counters>, String> {
    run_with(current, cfg, stop, |_| {})
}

/// [`run`], calling `ready` once every endpoint is bound (and not before: a bind that fails
/// means the daemon never said it was serving). The steps: bind, start the pipeline, broker
/// until stopped and drained, join.
pub fn run_with(
    current: Current,
    cfg: &Config,
    stop: Arc<AtomicBool>,
    ready: impl FnOnce(&Served),
) -> Result<Arc<Counters>, String> {
    check_exposure(cfg)?;
    let counters = Arc::new(Counters { null_matcher: cfg.null_matcher, ..Counters::default() });
    if cfg.null_matcher {
        eprintln!("warning: {NULL_MATCHER_NOTE}");
    }
    counters.cpu.register_me(crate::metrics::Role::Broker); // the broker runs on this thread
    let io_before = crate::metrics::zmq_io_threads();
    let ctx = zmq::Context::new();
    // Declared before the sockets, so dropped after them: no CURVE socket outlives its handler.
    let _zap = start_zap(&ctx, &cfg.security, &counters)?;
    let sockets = bind(&ctx, cfg)?;
    for tid in crate::metrics::new_zmq_io_threads(&io_before) {
        counters.cpu.register(crate::metrics::Role::ZmqIo, tid);
    }
    let policy = Arc::new(BatchPolicy {
        max_queries: AtomicU64::new(cfg.batch_max_queries),
        timeout_us: AtomicU64::new(cfg.batch_timeout_us),
    });
    let metrics_thread = match &cfg.metrics {
        Some(addr) => {
            let served = current.clone();
            let version = Box::new(move || snapshot(&served).version);
            let page = crate::metrics::Page { counters: counters.clone(), version };
            let (addr, _) = auth::metrics_address(addr)?;
            Some(crate::metrics::serve_http(&addr, stop.clone(), page)?)
        }
        None => None,
    };
    let shm_bound = bind_shm(cfg)?;
    let (queues, threads) = start_pipeline(cfg, &ctx, &current, &counters, &policy)?;
    let shm_done = Arc::new(AtomicBool::new(false));
    let shm_threads = start_shm(shm_bound, cfg, &current, &counters, &policy, &queues, (&stop, &shm_done))?;
    ready(&snapshot(&current)); // every endpoint is bound: now the daemon may say it serves
    let broker = Broker {
        sockets,
        current,
        counters: counters.clone(),
        policy,
        security: &cfg.security,
        queues: Some(queues),
        scratch: Scratch::default(),
        engine_threads: cfg.engine_threads.max(1),
        pending_reload: None,
    };
    let brokered = broker.run(&stop, &threads);
    shm_done.store(true, Ordering::Relaxed); // the shm front end and acceptor close their clients
    for t in threads.into_iter().chain(metrics_thread).chain(shm_threads) {
        let _ = t.join();
    }
    brokered.map(|()| counters)
}

/// The daemon's sockets. Fields drop in order: the sockets close before their IPC files go.
struct Sockets {
    /// ROUTER on the data endpoints: requests in, replies out (only the broker touches it).
    front: zmq::Socket,
    /// PULL on inproc: replies and refusals from the workers and executors, to forward.
    back: zmq::Socket,
    /// REP on the control endpoint, if any.
    control: Option<zmq::Socket>,
    /// Removes the IPC socket files this daemon bound once it stops (libzmq leaves them).
    _files: Vec<IpcFile>,
}

/// Binds the data endpoints (with CURVE where the data clients are given), the inproc reply
/// socket and the control endpoint.
fn bind(ctx: &zmq::Context, cfg: &Config) -> Result<Sockets, String> {
    let sec = &cfg.security;
    let mut files: Vec<IpcFile> = Vec::new();
    let front = ctx.socket(zmq::ROUTER).map_err(|e| zerr("ROUTER socket", e))?;
    front.set_router_mandatory(true).map_err(|e| zerr("ROUTER_MANDATORY", e))?;
    front.set_linger(0).map_err(|e| zerr("linger", e))?;
    // A frame over the bound is dropped by libzmq's decoder as its size header arrives: the
    // connection closes and nothing of it is held (the client sees no reply).
    let max_bytes = i64::try_from(cfg.max_request_bytes).unwrap_or(i64::MAX);
    front.set_maxmsgsize(max_bytes).map_err(|e| zerr("maxmsgsize", e))?;
    if let (Some(curve), Some(_)) = (&sec.curve, &sec.data_clients) {
        curve.apply(&front, auth::DATA_DOMAIN)?;
    }
    for ep in cfg.endpoints.iter().filter(|ep| !is_shm(ep)) {
        files.push(bind_endpoint(&front, ep)?);
    }
    let back = ctx.socket(zmq::PULL).map_err(|e| zerr("PULL socket", e))?;
    back.bind("inproc://offload-replies").map_err(|e| zerr("bind inproc", e))?;
    let control = match cfg.control.as_deref().map(|ep| bind_control(ctx, ep, sec)).transpose()? {
        Some((sock, file)) => {
            files.push(file);
            Some(sock)
        }
        None => None,
    };
    Ok(Sockets { front, back, control, _files: files })
}

/// Where the broker puts what it admits: raw requests go to the workers, pre-encoded ones
/// straight to the kernel executors (nothing to encode: one thread hand-off fewer). In inline
/// mode (`kernels == 0`) there are no executors: the broker matches pre-encoded requests on its
/// own thread and the workers match what they encode.
#[derive(Clone)]
struct Queues {
    requests: Producer<Job>,
    kernels: Option<Producer<Pending>>,
}

fn is_shm(endpoint: &str) -> bool {
    endpoint.starts_with("shm://")
}

/// Binds the `shm://` endpoints (their socket files, claimed as IPC files are); all their
/// clients ring the first one's doorbell.
fn bind_shm(cfg: &Config) -> Result<Vec<crate::shm::Bound>, String> {
    let mut bound: Vec<crate::shm::Bound> = Vec::new();
    for ep in cfg.endpoints.iter().filter(|ep| is_shm(ep)) {
        let first = bound.first().map(|b| b.hub.clone());
        bound.push(crate::shm::bind(ep, first.as_ref())?);
    }
    Ok(bound)
}

/// Starts the shared-memory front end (the thread that reads the clients' rings) and the
/// acceptor, if any `shm://` endpoint is bound; both count as the `shm` role. They run until
/// `done` (set once the broker has drained): after `stop` new requests get "shutting down".
fn start_shm(
    bound: Vec<crate::shm::Bound>,
    cfg: &Config,
    current: &Current,
    counters: &Arc<Counters>,
    policy: &Arc<BatchPolicy>,
    queues: &Queues,
    (stop, done): (&Arc<AtomicBool>, &Arc<AtomicBool>),
) -> Result<Vec<std::thread::JoinHandle<()>>, String> {
    if bound.is_empty() {
        return Ok(Vec::new());
    }
    let front = ShmFront {
        clients: crate::shm::Clients::new(bound.iter().map(|b| b.hub.clone()).collect(), cfg.max_request_bytes),
        current: current.clone(),
        counters: counters.clone(),
        policy: policy.clone(),
        queues: Some(queues.clone()),
        engine_threads: cfg.engine_threads.max(1),
        scratch: Scratch::default(),
    };
    let role = crate::metrics::Role::Shm;
    let (c1, c2, stop, d1, d2) = (counters.clone(), counters.clone(), stop.clone(), done.clone(), done.clone());
    let spawn = |name: &str, body: Box<dyn FnOnce() + Send>| {
        std::thread::Builder::new().name(name.into()).spawn(body).map_err(|e| format!("spawn {name}: {e}"))
    };
    let reader = spawn(
        "offload-shm",
        Box::new(move || {
            c1.cpu.register_me(role);
            front.run(&stop, &d1)
        }),
    )?;
    let acceptor = spawn(
        "offload-shm-accept",
        Box::new(move || {
            c2.cpu.register_me(role);
            crate::shm::acceptor(bound, &d2)
        }),
    )?;
    Ok(vec![reader, acceptor])
}

/// The front end of the shared-memory clients, on its own thread: it reads every client's
/// request ring, admits each request as the broker does (dictionary, busy, shutting down, the
/// queues), and in inline mode matches the pre-encoded ones in place and writes the replies
/// into the clients' reply rings. Workers and executors write their replies there directly.
struct ShmFront {
    clients: crate::shm::Clients,
    current: Current,
    counters: Arc<Counters>,
    policy: Arc<BatchPolicy>,
    queues: Option<Queues>,
    engine_threads: usize,
    scratch: Scratch,
}

/// Frames the shm thread reads in one round before it answers them.
const SHM_ROUND_MAX: usize = 4096;

impl ShmFront {
    fn run(mut self, stop: &AtomicBool, done: &AtomicBool) {
        while !done.load(Ordering::Relaxed) {
            if stop.load(Ordering::Relaxed) {
                self.queues = None; // the workers and executors may then drain and exit
            }
            self.clients.refresh();
            let (current, counters, queues) = (&self.current, &*self.counters, self.queues.as_ref());
            let mut served: Option<Arc<Served>> = None;
            let mut inline: Vec<Pending> = Vec::new();
            let n = self.clients.read(SHM_ROUND_MAX, |crate::shm::Incoming::Frame(peer, frame)| {
                let served = served.get_or_insert_with(|| snapshot(current));
                let job = Job { envelope: Envelope::Shm(peer), body: Body::Ring(frame), received: Instant::now() };
                inline.extend(admit_one(job, served, queues, counters, Out::ShmOnly));
            });
            if n == 0 {
                self.clients.idle_wait();
                continue;
            }
            let out = Out::ShmOnly;
            run_inline(inline, current, counters, &self.policy, self.engine_threads, &mut self.scratch, out);
            self.clients.release(); // every frame read is answered or owned by now
        }
        self.clients.close_all();
    }
}

/// Starts k kernel executors and w workers; returns the queues' sending ends and the threads.
/// Workers and executors exit in turn once the queues they read are closed and drained.
fn start_pipeline(
    cfg: &Config,
    ctx: &zmq::Context,
    current: &Current,
    counters: &Arc<Counters>,
    policy: &Arc<BatchPolicy>,
) -> Result<(Queues, Vec<std::thread::JoinHandle<()>>), String> {
    // Both queues hold `queue` requests; the broker answers "busy" when the one a request
    // goes to is full.
    let (requests_rx, requests) = HandOff::<Job>::new(cfg.queue.max(1));
    let (kernels_rx, kernels) = HandOff::<Pending>::new(cfg.queue.max(1));
    let kernels = (cfg.kernels > 0).then_some(kernels); // dropped in inline mode: nothing reads it
    let mut threads = Vec::new();
    // Each thread registers its CPU clock first; the daemon says it serves once all have.
    let (registered, all_registered) = std::sync::mpsc::channel::<()>();
    let mut start = |name: String, role, body: Box<dyn FnOnce() + Send>| -> Result<(), String> {
        let (registered, counters) = (registered.clone(), counters.clone());
        let thread = std::thread::Builder::new().name(name.clone()).spawn(move || {
            counters.cpu.register_me(role);
            let _ = registered.send(());
            body()
        });
        threads.push(thread.map_err(|e| format!("spawn {name}: {e}"))?);
        Ok(())
    };
    let e = cfg.engine_threads.max(1);
    for i in 0..cfg.kernels {
        let push = reply_socket(ctx).ok_or("kernel executor: no inproc reply socket")?;
        let (queue, current, counters, policy) =
            (kernels_rx.clone(), current.clone(), counters.clone(), policy.clone());
        let body = move || kernel_executor(queue, push, current, counters, policy, e);
        start(format!("offload-kernel-{i}"), crate::metrics::Role::Executor, Box::new(body))?;
    }
    for i in 0..cfg.workers.max(1) {
        let push = reply_socket(ctx).ok_or("worker: no inproc reply socket")?;
        let (requests, kernels, current, counters) =
            (requests_rx.clone(), kernels.clone(), current.clone(), counters.clone());
        let body = move || worker(requests, kernels, push, current, counters, e);
        start(format!("offload-worker-{i}"), crate::metrics::Role::Worker, Box::new(body))?;
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    for _ in 0..threads.len() {
        // A thread slow to start is counted when it registers (or never, past the deadline).
        if all_registered.recv_timeout(deadline.saturating_duration_since(Instant::now())).is_err() {
            break;
        }
    }
    Ok((Queues { requests, kernels }, threads))
}

/// The broker: the one thread that touches the ROUTER. It admits requests into the bounded
/// queue (or refuses them: busy, shutting down), forwards replies, and answers the control socket.
struct Broker<'a> {
    sockets: Sockets,
    current: Current,
    counters: Arc<Counters>,
    policy: Arc<BatchPolicy>,
    security: &'a Security,
    /// The queues; `None` once stopping (workers and executors then drain them and exit).
    queues: Option<Queues>,
    /// Inline mode: the broker's batch buffers and engine threads.
    scratch: Scratch,
    engine_threads: usize,
    /// A reload runs off the broker's thread; its answer is owed on the control socket.
    pending_reload: Option<std::sync::mpsc::Receiver<String>>,
}

impl Broker<'_> {
    /// Brokers until `stop`, then until the pipeline has drained and the front is quiet.
    fn run(mut self, stop: &AtomicBool, threads: &[std::thread::JoinHandle<()>]) -> Result<(), String> {
        let mut leave_by: Option<Instant> = None;
        loop {
            self.send_reload_answer();
            if stop.load(Ordering::Relaxed) {
                self.queues = None; // workers, then executors, drain their queues, see them closed and exit
            }
            if self.queues.is_none() && threads.iter().all(|t| t.is_finished()) {
                // Forward what the workers sent last. Requests still arriving are answered
                // "shutting down" below until the front has been quiet for a moment (at most
                // DRAIN_MAX), so a client that sent just before the signal gets an answer, not
                // a timeout; then leave.
                self.forward_replies();
                let leave_by = *leave_by.get_or_insert_with(|| Instant::now() + DRAIN_MAX);
                let quiet = self.sockets.front.poll(zmq::POLLIN, DRAIN_QUIET_MS).map_or(true, |n| n == 0);
                if quiet || Instant::now() > leave_by {
                    // Give the last replies time to leave before the socket closes.
                    let _ = self.sockets.front.set_linger(1000);
                    return Ok(());
                }
            }
            self.poll_once()?;
        }
    }

    /// Waits up to 50 ms (5 while a reload answer is owed) and handles what is readable.
    fn poll_once(&mut self) -> Result<(), String> {
        let s = &self.sockets;
        // The control socket is read only while no reload answer is owed (REP: one at a time).
        let mut items = vec![s.front.as_poll_item(zmq::POLLIN), s.back.as_poll_item(zmq::POLLIN)];
        if let (Some(c), None) = (&s.control, &self.pending_reload) {
            items.push(c.as_poll_item(zmq::POLLIN));
        }
        let timeout = if self.pending_reload.is_some() { 5 } else { 50 };
        match zmq::poll(&mut items, timeout) {
            // A signal (SIGTERM, SIGINT) interrupts the poll: the loop then sees `stop`.
            Err(zmq::Error::EINTR) => return Ok(()),
            other => other.map_err(|e| zerr("poll", e))?,
        };
        let readable: Vec<bool> = items.iter().map(|i| i.is_readable()).collect();
        drop(items);
        if readable[1] {
            self.forward_replies();
        }
        if readable.get(2) == Some(&true) {
            self.answer_control();
        }
        if readable[0] {
            self.admit_requests();
        }
        Ok(())
    }

    fn send_reload_answer(&mut self) {
        if let Some(Ok(answer)) = self.pending_reload.as_ref().map(|rx| rx.try_recv()) {
            if let Some(c) = &self.sockets.control {
                let _ = c.send(answer.as_bytes(), 0);
            }
            self.pending_reload = None;
        }
    }

    /// Replies and refusals from the workers and executors, out through the ROUTER.
    fn forward_replies(&self) {
        while let Ok(parts) = recv_frames(&self.sockets.back) {
            send_frames(&self.sockets.front, parts, &self.counters);
        }
    }

    fn answer_control(&mut self) {
        let Some(c) = &self.sockets.control else { return };
        if let Ok(frames) = c.recv_multipart(zmq::DONTWAIT) {
            match control_command(frames, &self.current, &self.counters, &self.policy, self.security) {
                Ok(answer) => {
                    let _ = c.send(answer.as_bytes(), 0);
                }
                Err(rx) => self.pending_reload = Some(rx),
            }
        }
    }

    /// Takes every waiting request into its queue, or refuses it at once: busy when the queue
    /// is full, shutting down once stopping. A dictionary request is answered here.
    fn admit_requests(&mut self) {
        let (front, counters) = (&self.sockets.front, &self.counters);
        let mut served: Option<Arc<Served>> = None;
        // Inline mode: the pre-encoded requests read now, matched on this thread below.
        let mut inline: Vec<Pending> = Vec::new();
        while let Ok(mut parts) = recv_frames(front) {
            let received = Instant::now();
            let body = Body::Msg(parts.pop().unwrap_or_else(zmq::Message::new));
            let served = served.get_or_insert_with(|| snapshot(&self.current));
            let job = Job { envelope: Envelope::Zmq(parts), body, received };
            if let Some(p) = admit_one(job, served, self.queues.as_ref(), counters, Out::Front(front)) {
                inline.push(p);
            }
        }
        let out = Out::Front(&self.sockets.front);
        run_inline(inline, &self.current, &self.counters, &self.policy, self.engine_threads, &mut self.scratch, out);
    }
}

/// Admits one request a front end (the broker, the shm thread) received: answers a dictionary
/// request, refuses (busy, shutting down) or puts it in its queue: raw ones to the workers,
/// pre-encoded ones to the executors, or, in inline mode, returns them to be matched on the
/// calling thread. A frame that must outlive the front end's read (queued) is owned by then.
fn admit_one(job: Job, served: &Served, queues: Option<&Queues>, counters: &Counters, out: Out<'_>) -> Option<Pending> {
    if protocol::is_dictionary_request(&job.body) {
        out.send(job.envelope, dictionary_reply(served, &job.body), counters);
        return None;
    }
    counters.requests.fetch_add(1, Ordering::Relaxed);
    let refuse = |status: Status, msg: &str, (envelope, id): (Envelope, u64)| {
        let reply = Reply::status_only(id, status, served.version, msg);
        counters.count(status);
        out.send(envelope, protocol::encode_reply(&reply), counters);
    };
    let Some(queues) = queues else {
        refuse(Status::ShuttingDown, "the server is shutting down", job.refusal());
        return None;
    };
    let refused = if protocol::peek_layout(&job.body).is_some_and(|l| l != protocol::LAYOUT_RAW) {
        let Some(kernels) = &queues.kernels else {
            return Some(Pending::Encoded(job)); // inline: read in place by the caller's thread
        };
        kernels.try_push(Pending::Encoded(job.owned())).map_err(|r| r.map(Pending::refusal))
    } else {
        queues.requests.try_push(job.owned()).map_err(|r| r.map(Job::refusal))
    };
    match refused {
        Ok(()) => {}
        Err(Refused::Full(to)) => refuse(Status::Busy, "queue full: retry later or elsewhere", to),
        Err(Refused::Closed(to)) => refuse(Status::ShuttingDown, "the server is shutting down", to),
    }
    None
}

/// Inline mode: matches the pre-encoded requests a front end just read, on its own thread,
/// in batches of up to `batch_max_queries` (0: one request at a time). What was readable at
/// once forms the batches (self-filling); replies go straight out through `out`.
fn run_inline(
    mut inline: Vec<Pending>,
    current: &Current,
    counters: &Counters,
    policy: &BatchPolicy,
    engine_threads: usize,
    scratch: &mut Scratch,
    out: Out<'_>,
) {
    let max = policy.max_queries.load(Ordering::Relaxed) as usize;
    while !inline.is_empty() {
        let (mut take, mut total) = (0, 0);
        while take < inline.len() && (take == 0 || (max > 0 && total < max)) {
            total += inline[take].n_queries();
            take += 1;
        }
        let rest = inline.split_off(take);
        run_pending(inline, current, counters, engine_threads, scratch, out);
        inline = rest;
    }
}

/// The answer to a dictionary request: what a client needs to encode queries for the version
/// served now (the bytes are built once per version, on first request).
fn dictionary_reply(served: &Served, body: &[u8]) -> Vec<u8> {
    let id = protocol::peek_request_id(body);
    let (dictionary, code_bits) = served.dictionary();
    protocol::encode_dictionary_reply(&protocol::DictionaryReply {
        request_id: id,
        status: Status::Ok,
        ruleset_version: served.version,
        criteria_fingerprint: served.criteria_fingerprint,
        code_bits: *code_bits,
        dictionary: dictionary.clone(),
        message: String::new(),
    })
}

/// Starts the ZAP handler when any socket uses CURVE: the control socket admits
/// `control_clients`, the data endpoints `data_clients`.
fn start_zap(ctx: &zmq::Context, sec: &Security, counters: &Counters) -> Result<Option<auth::Zap>, String> {
    if sec.curve.is_none() {
        return Ok(None);
    }
    let mut allowed = std::collections::HashMap::new();
    allowed.insert(auth::CONTROL_DOMAIN.to_string(), sec.control_clients.clone());
    if let Some(d) = &sec.data_clients {
        allowed.insert(auth::DATA_DOMAIN.to_string(), d.clone());
    }
    auth::Zap::start(ctx, allowed, counters.auth.clone()).map(Some)
}

/// The socket file of an `ipc://` endpoint (none for abstract `ipc://@name` and other transports).
fn ipc_path(endpoint: &str) -> Option<PathBuf> {
    endpoint.strip_prefix("ipc://").filter(|p| !p.starts_with('@') && !p.is_empty()).map(PathBuf::from)
}

/// Makes sure binding `endpoint` takes nothing from another process. libzmq unlinks an existing
/// IPC socket file before it binds, so a second daemon would silently take the endpoint over
/// (and remove the file when it stops, leaving the first unreachable). So: if a process accepts
/// a connection on the file, refuse; if nobody listens (a file left by a killed daemon), remove
/// it as stale; a path that is not a socket is refused, never removed. (A process binding the
/// same path between this check and the bind is not caught; daemons started one after the
/// other are.)
pub fn claim_ipc(endpoint: &str) -> Result<(), String> {
    let Some(path) = ipc_path(endpoint) else { return Ok(()) };
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        let Ok(meta) = std::fs::symlink_metadata(&path) else { return Ok(()) };
        if !meta.file_type().is_socket() {
            return Err(format!("{endpoint}: {} exists and is not a socket; not touching it", path.display()));
        }
        match std::os::unix::net::UnixStream::connect(&path) {
            Ok(_) => return Err(format!("{endpoint} is in use by another process")),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                std::fs::remove_file(&path).map_err(|e| format!("{endpoint}: removing the stale socket file: {e}"))?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("{endpoint}: cannot tell whether another process uses it: {e}")),
        }
    }
    Ok(())
}

/// Binds `sock` to `endpoint`, first checking (IPC) that no other process serves there; returns
/// the guard that removes the socket file when the daemon stops.
fn bind_endpoint(sock: &zmq::Socket, endpoint: &str) -> Result<IpcFile, String> {
    claim_ipc(endpoint)?;
    sock.bind(endpoint).map_err(|e| zerr(&format!("bind {endpoint}"), e))?;
    Ok(IpcFile::bound(endpoint))
}

/// Removes a socket file this daemon bound when dropped, only if it is still the daemon's own
/// (the same inode): a file another process put there meanwhile is left alone.
struct IpcFile(Option<(PathBuf, u64, u64)>);

impl IpcFile {
    fn bound(endpoint: &str) -> IpcFile {
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            let path = ipc_path(endpoint);
            IpcFile(path.and_then(|p| std::fs::symlink_metadata(&p).ok().map(|m| (p, m.dev(), m.ino()))))
        }
        #[cfg(not(unix))]
        {
            let _ = endpoint;
            IpcFile(None)
        }
    }
}

impl Drop for IpcFile {
    fn drop(&mut self) {
        #[cfg(unix)]
        if let Some((p, dev, ino)) = &self.0 {
            use std::os::unix::fs::MetadataExt;
            if std::fs::symlink_metadata(p).is_ok_and(|m| m.dev() == *dev && m.ino() == *ino) {
                let _ = std::fs::remove_file(p);
            }
        }
    }
}

/// At shutdown, the front must be quiet this long (ms) before the daemon leaves, and it leaves
/// after `DRAIN_MAX` in any case.
const DRAIN_QUIET_MS: i64 = 100;
const DRAIN_MAX: Duration = Duration::from_secs(2);

/// Largest control message accepted (a rule set sent with `reload-inline` is one frame).
const CONTROL_MAX_BYTES: i64 = 1 << 30;

/// Binds the control socket: REP, CURVE when the daemon has a key pair, and an IPC socket file
/// only its owner may open.
fn bind_control(ctx: &zmq::Context, ep: &str, sec: &Security) -> Result<(zmq::Socket, IpcFile), String> {
    let s = ctx.socket(zmq::REP).map_err(|e| zerr("REP socket", e))?;
    s.set_linger(0).map_err(|e| zerr("linger", e))?;
    s.set_maxmsgsize(CONTROL_MAX_BYTES).map_err(|e| zerr("maxmsgsize", e))?;
    if let Some(curve) = &sec.curve {
        curve.apply(&s, auth::CONTROL_DOMAIN)?;
    }
    let file = bind_endpoint(&s, ep)?;
    #[cfg(unix)]
    if let Some(path) = ipc_path(ep) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| format!("control socket {}: {e}", path.display()))?;
    }
    Ok((s, file))
}

/// A multipart message: the ROUTER envelope (client identity, and the empty delimiter of a REQ
/// client) followed by the body. Frames stay `zmq::Message`s from receipt to reply, so the
/// bodies are never copied on the way through the broker.
type Frames = Vec<zmq::Message>;

/// Receives one multipart message without waiting (`Err(EAGAIN)` when none is there).
fn recv_frames(sock: &zmq::Socket) -> Result<Frames, zmq::Error> {
    let mut parts = vec![sock.recv_msg(zmq::DONTWAIT)?];
    while parts.last().is_some_and(|m| m.get_more()) {
        parts.push(sock.recv_msg(0)?);
    }
    Ok(parts)
}

fn send_frames(front: &zmq::Socket, frames: Frames, counters: &Counters) {
    if front.send_multipart(frames, zmq::DONTWAIT).is_err() {
        counters.unroutable.fetch_add(1, Ordering::Relaxed);
    }
}

/// Cross-request batching, changeable while serving (control command `set`); the kernel
/// executors apply it when they take work from the kernel queue.
///
/// - `max_queries == 0`: per request, one request per matcher call.
/// - `max_queries > 0`, `timeout_us == 0`: **self-filling** batches. An executor that frees takes
///   everything queued at that moment, up to `max_queries` queries, and never waits for more: while
///   it is busy requests queue, so under load batches grow by themselves, and an idle executor
///   takes a lone request at once. No timer to tune.
/// - `max_queries > 0`, `timeout_us > 0`: the seed's size-or-timeout policy: an executor that
///   takes a request waits up to `timeout_us` from that request's arrival for more, until the
///   batch holds `max_queries` queries.
///
/// Requests with `stop_after` always run alone (early stop).
#[derive(Debug, Default)]
pub struct BatchPolicy {
    pub max_queries: AtomicU64,
    pub timeout_us: AtomicU64,
}

/// Where replies leave a thread: to the broker over inproc (workers, executors), out through
/// the ROUTER (the broker's own thread in inline mode), or nowhere but shared memory (the shm
/// thread). A reply to a shared-memory client goes straight into its reply ring whatever `Out`.
#[derive(Clone, Copy)]
enum Out<'a> {
    Broker(&'a zmq::Socket),
    Front(&'a zmq::Socket),
    ShmOnly,
}

impl Out<'_> {
    /// Sends one reply frame `body` to where `envelope` says.
    fn send(self, envelope: Envelope, body: Vec<u8>, counters: &Counters) {
        let mut frames = match envelope {
            Envelope::Shm(peer) => {
                if !peer.reply(&body) {
                    counters.unroutable.fetch_add(1, Ordering::Relaxed);
                }
                return;
            }
            Envelope::Zmq(frames) => frames,
        };
        frames.push(body.into()); // Vec -> Message takes the buffer, no copy
        match self {
            Out::Broker(push) => {
                let _ = push.send_multipart(frames, 0);
            }
            Out::Front(front) => send_frames(front, frames, counters),
            Out::ShmOnly => {
                counters.unroutable.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Who a reply goes to: a ZeroMQ client (the ROUTER envelope: its identity, and the empty
/// delimiter of a REQ client) or a shared-memory client (its reply ring).
enum Envelope {
    Zmq(Frames),
    Shm(Arc<crate::shm::Peer>),
}

impl Default for Envelope {
    fn default() -> Envelope {
        Envelope::Zmq(Vec::new())
    }
}

/// A request frame: a ZeroMQ message, or, in inline mode, read in place in a shared-memory
/// client's request ring (released once the request is answered).
enum Body {
    Msg(zmq::Message),
    Ring(crate::shm::InPlace),
}

impl std::ops::Deref for Body {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Body::Msg(m) => m,
            Body::Ring(r) => r,
        }
    }
}

impl Job {
    /// The job with a frame of its own (a ring frame copied once), to hand to another thread:
    /// the ring's space is released as soon as the shm thread has read it.
    fn owned(self) -> Job {
        match self.body {
            Body::Ring(r) => Job { body: Body::Msg(zmq::Message::from(&r[..])), ..self },
            Body::Msg(_) => self,
        }
    }
}

/// Sends one reply, counting it and recording its stage timings.
fn send_reply(out: Out<'_>, counters: &Counters, envelope: Envelope, received: Instant, reply: &Reply) {
    counters.count(reply.status);
    counters.queries.fetch_add(reply.rule.len() as u64, Ordering::Relaxed);
    if reply.status == Status::Ok {
        record_stages(counters, &reply.stages_ns, received);
    }
    out.send(envelope, protocol::encode_reply(reply), counters);
}

fn record_stages(counters: &Counters, stages_ns: &[(u8, u64)], received: Instant) {
    for &(stage, ns) in stages_ns {
        if let Some(h) = counters.latency.stages.get(stage as usize) {
            h.record(ns);
        }
    }
    counters.latency.server.record(received.elapsed().as_nanos() as u64);
}

fn reply_socket(ctx: &zmq::Context) -> Option<zmq::Socket> {
    let push = ctx.socket(zmq::PUSH).ok()?;
    push.connect("inproc://offload-replies").ok()?;
    Some(push)
}

/// What waits in the kernel queue: a pre-encoded request as the broker received it (the
/// executor reads it in place and copies its codes once, into the batch it matches), or a raw
/// request a worker has encoded.
enum Pending {
    Encoded(Job),
    Prepared(Prepared),
}

impl Pending {
    fn n_queries(&self) -> usize {
        match self {
            Pending::Encoded(job) => protocol::peek_n_queries(&job.body) as usize,
            Pending::Prepared(p) => p.request.codes.len() / p.served.engine.encoder.width().max(1),
        }
    }
    fn received(&self) -> Instant {
        match self {
            Pending::Encoded(job) => job.received,
            Pending::Prepared(p) => p.received,
        }
    }
    fn refusal(self) -> (Envelope, u64) {
        match self {
            Pending::Encoded(job) => job.refusal(),
            Pending::Prepared(p) => (p.envelope, p.request.id),
        }
    }
}

/// A raw request a worker has decoded and encoded against `served`, on its way to an executor.
struct Prepared {
    envelope: Envelope,
    received: Instant,
    served: Arc<Served>,
    request: Encoded,
    /// When the worker put it in the kernel queue.
    handed: Instant,
}

/// A worker (w): takes raw requests from the broker's queue, decodes and encodes them, answers
/// the refused ones itself and hands the rest to the kernel queue. While a kernel matches, the
/// workers encode what comes next (the seed's pipelining of the wrapper with the device).
/// Pre-encoded requests do not come here: the broker hands them to the kernel queue directly.
/// In inline mode (`kernels == None`, no executors) a worker matches what it encoded itself.
fn worker(
    requests: Arc<HandOff<Job>>,
    kernels: Option<Producer<Pending>>,
    push: zmq::Socket,
    current: Current,
    counters: Arc<Counters>,
    threads: usize,
) {
    let out = Out::Broker(&push);
    let mut scratch = Scratch::default();
    while let Some(job) = requests.pop() {
        let served = snapshot(&current);
        let p = match prepare(&served, &job) {
            Ok(p) => p,
            Err(reply) => {
                send_reply(out, &counters, job.envelope, job.received, &reply);
                continue;
            }
        };
        let (id, version) = (p.id, served.version);
        let (envelope, received, handed) = (job.envelope, job.received, Instant::now());
        let pending = Pending::Prepared(Prepared { envelope, received, served, request: p, handed });
        let Some(kernels) = &kernels else {
            run_pending(vec![pending], &current, &counters, threads, &mut scratch, out);
            continue;
        };
        // Waits while the kernel queue is full: the request queue then fills and the broker
        // answers "busy" (backpressure, nothing dropped).
        if let Err(Pending::Prepared(p)) = kernels.push(pending) {
            let reply = Reply::status_only(id, Status::ShuttingDown, version, "the server is shutting down");
            send_reply(out, &counters, p.envelope, p.received, &reply);
        }
    }
}

/// A kernel executor (k): takes work from the kernel queue by the batching policy, matches it
/// with `threads` engine threads (e) and sends the replies. With the null matcher it answers
/// every query "no match" without matching.
fn kernel_executor(
    queue: Arc<HandOff<Pending>>,
    push: zmq::Socket,
    current: Current,
    counters: Arc<Counters>,
    policy: Arc<BatchPolicy>,
    threads: usize,
) {
    let mut scratch = Scratch::default();
    while let Some(first) = queue.pop() {
        let mut pending = vec![first];
        gather(&queue, &policy, &mut pending);
        run_pending(pending, &current, &counters, threads, &mut scratch, Out::Broker(&push));
    }
}

/// Checks, matches and answers what a thread took: refusals at once, then each group of one
/// rule-set version in one matcher call. The CPU the thread spends inside a CPU matcher is
/// read from its own clock and counted as match (`metrics::CpuAccounts`); on a device matcher
/// the call is the host's cost of feeding the device, so it stays host path.
fn run_pending(
    pending: Vec<Pending>,
    current: &Current,
    counters: &Counters,
    threads: usize,
    scratch: &mut Scratch,
    out: Out<'_>,
) {
    let taken = Instant::now();
    let served = snapshot(current);
    let groups = admit(&served, pending, taken, scratch, |envelope, received, reply| {
        send_reply(out, counters, envelope, received, &reply)
    });
    for mut group in groups {
        let counted = !counters.null_matcher && !group.served.engine.matcher.on_device();
        execute_group(&mut group, threads, counters.null_matcher, scratch, counted.then_some(counters), |e, r, a| {
            send_ok(out, counters, e, r, a)
        });
        scratch.recycle(group);
    }
}

/// How often an executor waiting for more requests looks at the policy again: a `set` applies
/// to the batch already waiting within this.
const POLICY_RECHECK: Duration = Duration::from_millis(5);

/// Takes more work from the kernel queue by the policy (see [`BatchPolicy`]). The policy is
/// read again at every request taken and every [`POLICY_RECHECK`] of waiting, so a batch
/// waiting on a long timeout is released by `set` lowering it (the timeout still counts from
/// the first request's arrival).
fn gather(queue: &HandOff<Pending>, policy: &BatchPolicy, pending: &mut Vec<Pending>) {
    let mut total = pending[0].n_queries();
    loop {
        let max = policy.max_queries.load(Ordering::Relaxed) as usize;
        if max == 0 || total >= max {
            return;
        }
        let timeout = Duration::from_micros(policy.timeout_us.load(Ordering::Relaxed));
        let until = pending[0].received() + timeout;
        let next = if timeout.is_zero() {
            queue.try_pop()
        } else {
            let now = Instant::now();
            if now >= until {
                return;
            }
            match queue.pop_until(until.min(now + POLICY_RECHECK)) {
                Popped::Item(p) => Some(p),
                Popped::TimedOut => continue,
                Popped::Closed => None,
            }
        };
        let Some(p) = next else { return };
        total += p.n_queries();
        pending.push(p);
    }
}

/// Buffers an executor keeps from batch to batch, so a batch allocates no codes or answers.
#[derive(Default)]
struct Scratch {
    codes: Vec<Vec<u32>>,
    rules: Vec<u32>,
}

impl Scratch {
    fn codes(&mut self) -> Vec<u32> {
        let mut v = self.codes.pop().unwrap_or_default();
        v.clear();
        v
    }
    fn recycle(&mut self, group: Group) {
        self.codes.push(group.codes);
    }
}

/// Requests of one batch encoded against one rule-set version, their codes back to back.
struct Group {
    served: Arc<Served>,
    /// The rows of the requests matched together, in order.
    codes: Vec<u32>,
    requests: Vec<Ready>,
}

/// One request of a [`Group`], ready to match.
struct Ready {
    envelope: Envelope,
    received: Instant,
    id: u64,
    stop_after: usize,
    /// Its rows in the group's `codes` (requests without early stop), or its own codes.
    rows: std::ops::Range<usize>,
    own: Vec<u32>,
    queue_ns: u64,
    encode_ns: u64,
    kernel_queue_ns: u64,
}

/// Checks what the executor took and sorts it into groups by rule-set version: a pre-encoded
/// request is read in place against `served` (fingerprint, version, width, deadline) and its
/// codes copied once into the group's batch; a prepared one joins the group of the version it
/// was encoded with. Refusals go to `refuse` at once.
fn admit(
    served: &Arc<Served>,
    pending: Vec<Pending>,
    taken: Instant,
    scratch: &mut Scratch,
    mut refuse: impl FnMut(Envelope, Instant, Reply),
) -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::with_capacity(1);
    let now_us = now_unix_us();
    let expired = |deadline_us: u64| deadline_us != 0 && now_us > deadline_us;
    for p in pending {
        match p {
            Pending::Encoded(job) => {
                let t = Instant::now();
                let view = match check_encoded(served, &job.body) {
                    Ok(view) => view,
                    Err(reply) => {
                        refuse(job.envelope, job.received, reply);
                        continue;
                    }
                };
                let h = view.header;
                if expired(h.deadline_us) {
                    let why = "deadline passed while queued";
                    let reply = Reply::status_only(h.request_id, Status::DeadlineExceeded, served.version, why);
                    refuse(job.envelope, job.received, reply);
                    continue;
                }
                let g = group_of(&mut groups, served, scratch);
                let mut ready = Ready {
                    envelope: Envelope::default(),
                    received: job.received,
                    id: h.request_id,
                    stop_after: h.stop_after as usize,
                    rows: 0..0,
                    own: Vec::new(),
                    queue_ns: taken.saturating_duration_since(job.received).as_nanos() as u64,
                    encode_ns: 0,
                    kernel_queue_ns: 0,
                };
                g.take_codes(&mut ready, |out| view.append_codes(out));
                ready.encode_ns = t.elapsed().as_nanos() as u64; // the in-place read and the one copy
                ready.envelope = job.envelope;
                g.requests.push(ready);
            }
            Pending::Prepared(p) => {
                let r = &p.request;
                if expired(r.deadline_us) {
                    let why = "deadline passed in the kernel queue";
                    let reply = Reply::status_only(r.id, Status::DeadlineExceeded, p.served.version, why);
                    refuse(p.envelope, p.received, reply);
                    continue;
                }
                let g = group_of(&mut groups, &p.served, scratch);
                let mut ready = Ready {
                    envelope: p.envelope,
                    received: p.received,
                    id: r.id,
                    stop_after: r.stop_after,
                    rows: 0..0,
                    own: Vec::new(),
                    queue_ns: r.queue_ns,
                    encode_ns: r.encode_ns,
                    kernel_queue_ns: taken.saturating_duration_since(p.handed).as_nanos() as u64,
                };
                g.take_codes(&mut ready, |out| out.extend_from_slice(&p.request.codes));
                g.requests.push(ready);
            }
        }
    }
    groups
}

/// The group of `served`'s version in `groups`, added if new.
fn group_of<'g>(groups: &'g mut Vec<Group>, served: &Arc<Served>, scratch: &mut Scratch) -> &'g mut Group {
    let at = match groups.iter().position(|g| Arc::ptr_eq(&g.served, served)) {
        Some(i) => i,
        None => {
            groups.push(Group { served: served.clone(), codes: scratch.codes(), requests: Vec::new() });
            groups.len() - 1
        }
    };
    &mut groups[at]
}

impl Group {
    /// Puts a request's codes (what `append` appends) where it is matched: into the group's
    /// batch, or, with early stop, its own.
    fn take_codes(&mut self, ready: &mut Ready, append: impl FnOnce(&mut Vec<u32>)) {
        if ready.stop_after == 0 {
            let w = self.served.engine.encoder.width().max(1);
            let start = self.codes.len() / w;
            append(&mut self.codes);
            ready.rows = start..self.codes.len() / w;
        } else {
            append(&mut ready.own);
        }
    }
}

/// Reads a pre-encoded frame in place and checks it against the served rule set.
fn check_encoded<'a>(served: &Served, body: &'a [u8]) -> Result<protocol::EncodedView<'a>, Reply> {
    let version = served.version;
    let id = protocol::peek_request_id(body);
    let view = match protocol::encoded_view(body) {
        Ok(Some(view)) => view,
        Ok(None) => return Err(Reply::status_only(id, Status::Malformed, version, "not an encoded request")),
        Err(e) => return Err(Reply::status_only(id, Status::Malformed, version, e.to_string())),
    };
    if view.header.criteria_fingerprint != served.criteria_fingerprint {
        return Err(fingerprint_refusal(served, id, view.header.criteria_fingerprint));
    }
    let w = served.engine.encoder.width();
    if view.encoding_version != version || view.width as usize != w {
        return Err(Reply::status_only(id, Status::BadRequest, version, encoding_mismatch(&view, version, w)));
    }
    Ok(view)
}

fn encoding_mismatch(view: &protocol::EncodedView<'_>, version: u64, w: usize) -> String {
    format!(
        "queries were encoded for rule-set version {} (width {}); this server has version {version} (width {w}): \
         re-encode (fetch the dictionary again) or send raw values",
        view.encoding_version, view.width
    )
}

fn fingerprint_refusal(served: &Served, id: u64, fingerprint: u64) -> Reply {
    let rt = &served.engine.rules().rule_type;
    Reply::status_only(
        id,
        Status::BadRequest,
        served.version,
        format!(
            "the request's columns follow criteria with fingerprint {fingerprint:016x}, not this server's: rule type \
             {} expects {} criteria in this order: {} (fingerprint {:016x}); send the columns by these names \
             (offload.serve.Client(criteria=...))",
            rt.code,
            rt.criteria.len(),
            served.criteria_names(),
            served.criteria_fingerprint
        ),
    )
}

/// A raw request decoded and encoded by a worker.
struct Encoded {
    id: u64,
    deadline_us: u64,
    stop_after: usize,
    codes: Vec<u32>,
    queue_ns: u64,
    encode_ns: u64,
}

/// Checks the deadline, decodes and encodes one raw request, or returns the reply refusing it.
/// (Pre-encoded requests never come here: the broker hands them to the executors.)
fn prepare(served: &Served, job: &Job) -> Result<Encoded, Reply> {
    let t_start = Instant::now();
    let queue_ns = t_start.duration_since(job.received).as_nanos() as u64;
    let id = protocol::peek_request_id(&job.body);
    let version = served.version;
    let deadline_us = protocol::peek_deadline_us(&job.body);
    if deadline_us != 0 && now_unix_us() > deadline_us {
        return Err(Reply::status_only(id, Status::DeadlineExceeded, version, "deadline passed while queued"));
    }
    let req = protocol::decode_request(&job.body)
        .map_err(|e| Reply::status_only(id, Status::Malformed, version, e.to_string()))?;
    if req.criteria_fingerprint != served.criteria_fingerprint {
        return Err(fingerprint_refusal(served, id, req.criteria_fingerprint));
    }
    let Payload::Raw(cols) = req.payload else {
        return Err(Reply::status_only(id, Status::Malformed, version, "not a raw request"));
    };
    let offsets: Vec<Vec<i64>> = cols.iter().map(|c| c.offsets.iter().map(|&o| o as i64).collect()).collect();
    let raw: Result<Vec<RawColumn>, String> =
        cols.iter().zip(&offsets).map(|(c, o)| PackedStrings::new(&c.data, o).map(RawColumn::Packed)).collect();
    let codes = raw
        .and_then(|raw| served.engine.encoder.encode_columns(&raw).map_err(|e| e.to_string()))
        .map_err(|e| Reply::status_only(id, Status::BadRequest, version, e))?;
    Ok(Encoded {
        id: req.request_id,
        deadline_us,
        stop_after: req.stop_after as usize,
        codes,
        queue_ns,
        encode_ns: t_start.elapsed().as_nanos() as u64,
    })
}

/// The time a request spent matching: wall time, and on a device the batch's stages.
#[derive(Clone, Copy, Default)]
struct Matched {
    ns: u64,
    device: Option<DeviceStages>,
}

/// An answered request, as [`send_ok`] encodes it.
struct Answer<'a> {
    served: &'a Served,
    ready: &'a Ready,
    rule: &'a [u32],
    matched: Matched,
}

/// Encodes and sends one Ok reply (no intermediate vectors: the contents are looked up as the
/// frame is written), counting it and recording its stage timings.
fn send_ok(out: Out<'_>, counters: &Counters, envelope: Envelope, received: Instant, a: Answer<'_>) {
    let t = Instant::now();
    let r = a.ready;
    let mut stages_ns = [(0u8, 0u64); 8];
    let mut n = 0;
    let mut stage = |s: Stage, ns: u64| {
        stages_ns[n] = (s as u8, ns);
        n += 1;
    };
    stage(Stage::Queue, r.queue_ns);
    stage(Stage::Encode, r.encode_ns);
    stage(Stage::KernelQueue, r.kernel_queue_ns);
    stage(Stage::Match, a.matched.ns);
    if let Some(d) = a.matched.device {
        let ns = |s: f64| (s * 1e9) as u64;
        stage(Stage::H2d, ns(d.h2d_s));
        stage(Stage::Kernel, ns(d.kernel_s));
        stage(Stage::D2h, ns(d.d2h_s));
    }
    let contents = &a.served.engine.rules().contents;
    let content = a.rule.iter().map(|&x| if x == NO_MATCH { 0 } else { contents[x as usize] });
    // The reply stage: building this frame, measured up to here.
    stage(Stage::Reply, t.elapsed().as_nanos() as u64);
    let body = protocol::encode_ok_reply(r.id, a.served.version, a.rule, content, &stages_ns[..n]);
    counters.ok.fetch_add(1, Ordering::Relaxed);
    counters.queries.fetch_add(a.rule.len() as u64, Ordering::Relaxed);
    record_stages(counters, &stages_ns[..n], received);
    out.send(envelope, body, counters);
}

/// Matches one group: the requests without early stop in one matcher call over their
/// concatenated rows, the others alone in growing chunks (64, 128, ...) until enough queries
/// matched (the seed's related-query batching with early stop); with `null` (the null matcher)
/// none is matched and every query is answered "no match". Each request gets its own reply, in
/// order, through `answer`. Returns the wall ns spent matching.
fn execute_group(
    group: &mut Group,
    threads: usize,
    null: bool,
    scratch: &mut Scratch,
    match_cpu: Option<&Counters>,
    mut answer: impl FnMut(Envelope, Instant, Answer<'_>),
) -> u64 {
    let served = &*group.served.clone();
    let w = served.engine.encoder.width().max(1);
    let matcher = &*served.engine.matcher;
    let rules = &mut scratch.rules;
    rules.clear();
    rules.resize(group.codes.len() / w, NO_MATCH);
    let mut shared = Matched::default();
    if !null && !rules.is_empty() {
        let t = Instant::now();
        let device = counting_match(match_cpu, || match_staged(matcher, &group.codes, rules, threads));
        shared = Matched { ns: t.elapsed().as_nanos() as u64, device };
    }
    let mut match_ns = shared.ns;
    for r in &mut group.requests {
        let envelope = std::mem::take(&mut r.envelope);
        let r = &*r;
        if r.stop_after == 0 {
            answer(envelope, r.received, Answer { served, ready: r, rule: &rules[r.rows.clone()], matched: shared });
        } else {
            let (rule, matched) =
                counting_match(match_cpu, || match_early_stop(served, &r.own, r.stop_after, threads, null));
            match_ns += matched.ns;
            answer(envelope, r.received, Answer { served, ready: r, rule: &rule, matched });
        }
    }
    match_ns
}

/// Runs a matcher call, adding the CPU the calling thread spends in it to the match share when
/// `match_cpu` is given (a CPU matcher; two clock reads per call).
fn counting_match<R>(match_cpu: Option<&Counters>, call: impl FnOnce() -> R) -> R {
    let Some(counters) = match_cpu else { return call() };
    let before = crate::metrics::this_thread_cpu_ns();
    let r = call();
    let spent = crate::metrics::this_thread_cpu_ns().saturating_sub(before);
    counters.cpu.match_cpu_ns.fetch_add(spent, Ordering::Relaxed);
    r
}

/// Matches `codes` in growing chunks (64, 128, ...) until `stop_after` queries have matched.
fn match_early_stop(
    served: &Served,
    codes: &[u32],
    stop_after: usize,
    threads: usize,
    null: bool,
) -> (Vec<u32>, Matched) {
    let t = Instant::now();
    let w = served.engine.encoder.width().max(1);
    let n = codes.len() / w;
    let mut rule = vec![NO_MATCH; n];
    if null {
        return (rule, Matched::default());
    }
    let matcher = &*served.engine.matcher;
    let (mut done, mut chunk, mut found) = (0usize, 64usize, 0usize);
    while done < n && found < stop_after {
        let end = (done + chunk).min(n);
        match_parallel(matcher, &codes[done * w..end * w], &mut rule[done..end], threads);
        found += rule[done..end].iter().filter(|&&r| r != NO_MATCH).count();
        done = end;
        chunk *= 2;
    }
    rule.truncate(done);
    (rule, Matched { ns: t.elapsed().as_nanos() as u64, device: None })
}
