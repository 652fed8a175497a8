//! The control socket: `stats`, `set` (the batching knobs) and hot `reload` (by path under the
//! reload directories, or with the files sent; checked by SHA-256 and rule count, built off the
//! broker's thread and swapped in under the write lock), and binding the socket itself.

use super::batching::BatchPolicy;
use super::ipc_files::{bind_endpoint, ipc_path, IpcFile};
use super::{snapshot, zerr, Current, Served};
use crate::auth;
use crate::benchmark_only::{emulated, null};
use crate::config::Security;
use crate::metrics::Counters;
use offload_rules::Engine;
use sha2::Digest;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

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

/// Where a reload takes its rule set from.
pub(super) enum RuleSource {
    /// Files on this machine, already checked to lie under a reload directory.
    Files { rule_type: PathBuf, rules: PathBuf },
    /// The files' bytes, sent by the control peer; the names stand for them in errors.
    Sent { rule_type_name: PathBuf, rule_type: Vec<u8>, rules_name: PathBuf, rules: Vec<u8> },
}

/// What a reload is to check before it loads: the rules file's SHA-256 and the rule count, each
/// when the control peer gave it (`sha256 HEX` and `rows N` lines after the paths). A file
/// still being written fails one or the other, and the served set stays.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct ReloadCheck {
    sha256: Option<String>,
    pub(super) rows: Option<usize>,
}

impl ReloadCheck {
    /// Reads the lines after the two paths: none, `sha256 HEX` (64 hex digits), `rows N`.
    pub(super) fn parse<'a>(lines: impl Iterator<Item = &'a str>) -> Result<ReloadCheck, String> {
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
    pub(super) fn bytes(&self, name: &Path, rules: &[u8]) -> Result<(), String> {
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
    pub(super) fn rule_set(&self, name: &Path, rs: &offload_rules::RuleSet) -> Result<(), String> {
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
pub(super) fn read_rule_file(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// Loads and compiles a rule set as the version after `old`'s, checked as `check` says. The
/// error for files on this machine names the problem and where it is but quotes nothing of
/// them (the peer may not read them; the daemon's log has the whole message); for sent files,
/// whose text the peer has, it is the whole message.
pub(super) fn rebuild(old: &Served, source: RuleSource, check: &ReloadCheck) -> Result<(Served, f64), String> {
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
pub(super) fn reload_path(dirs: &[PathBuf], given: &str) -> Result<PathBuf, String> {
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
pub(super) fn spawn_reload(
    current: &Current,
    source: RuleSource,
    check: ReloadCheck,
) -> std::sync::mpsc::Receiver<String> {
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

/// The `stats` answer: version, counters, latency quantiles, batching knobs, security.
pub(super) fn stats(current: &Current, counters: &Counters, policy: &BatchPolicy, security: &Security) -> String {
    let s = snapshot(current);
    let mut m = serde_json::Map::new();
    m.insert("version".into(), s.version.into());
    m.insert("rules".into(), s.engine.rules().len().into());
    if counters.null_matcher {
        m.insert("matcher".into(), null::NAME.into());
        m.insert("benchmark_only".into(), null::NOTE.into());
    } else if s.engine.matcher.name() == emulated::NAME {
        // The emulated device (benchmarks only) says so, with its own counters.
        m.insert("matcher".into(), emulated::NAME.into());
        m.insert("benchmark_only".into(), emulated::NOTE.into());
        m.insert("emulated".into(), s.engine.matcher.stats());
    } else {
        m.insert("matcher".into(), s.matcher.to_string().into());
    }
    for (k, v) in counters.snapshot() {
        m.insert(k.into(), v.into());
    }
    let shards: Vec<u64> = counters.shard_requests.iter().map(|n| n.load(Ordering::Relaxed)).collect();
    m.insert("shard_requests".into(), shards.into());
    m.insert("cpu".into(), counters.cpu.snapshot().summary(counters.queries.load(Ordering::Relaxed)));
    m.insert("latency".into(), counters.latency.summary());
    m.insert("batch_policy".into(), policy.name().into());
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
pub(super) fn control_command(
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
pub(super) fn set_command(set: &str, policy: &BatchPolicy) -> String {
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

/// Largest control message accepted (a rule set sent with `reload-inline` is one frame).
pub(super) const CONTROL_MAX_BYTES: i64 = 1 << 30;

/// Binds the control socket: REP, CURVE when the daemon has a key pair, and an IPC socket file
/// only its owner may open.
pub(super) fn bind_control(ctx: &zmq::Context, ep: &str, sec: &Security) -> Result<(zmq::Socket, IpcFile), String> {
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
