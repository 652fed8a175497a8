//! offload-serve: the rule engine as a ZeroMQ microservice (and over shared memory for clients on
//! the same host). See docs/serve-protocol.md.
//!
//! The modules, each using only those on its right (no circle among the daemon's):
//!
//! ```text
//! lib (serve, emulate_device, echo) ─▶ server, config, benchmark_only
//! server/ (the daemon) ──▶ config, benchmark_only, metrics, handoff, protocol, auth, shm
//! config (settings; Config) ──▶ benchmark_only, auth
//! benchmark_only/ (null, emulated) ──▶ metrics, handoff
//! metrics (Counters, the page) ──▶ protocol, auth
//! client ──▶ protocol, auth, shm          loadgen ──▶ protocol, metrics, auth, shm
//! auth ──▶ shm (its endpoint syntax)      shm ──▶ loadgen (the generator's Connection trait)
//! protocol, handoff ──▶ nothing
//! ```

pub mod auth;
pub mod benchmark_only;
pub mod client;
pub mod config;
pub mod handoff;
pub mod loadgen;
pub mod metrics;
pub mod protocol;
pub mod server;
pub mod shm;

use benchmark_only::emulated;
use offload_rules::{Engine, MatcherKind};
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// Loads and compiles the rule set `settings` name and serves it until SIGINT/SIGTERM (or
/// `stop`) — what both `offload serve` and the `offload-serve` binary run.
pub fn serve(
    settings: config::Settings,
    stop: Arc<AtomicBool>,
    ready: impl FnOnce(&server::Served, &server::Config),
) -> Result<Vec<(&'static str, u64)>, String> {
    let r = settings.resolve()?;
    for warning in server::check_exposure(&r.config)? {
        eprintln!("{warning}");
    }
    let sec = &r.config.security;
    if let (Some(ep), Some(_)) = (&r.config.control, &sec.curve) {
        let names: Vec<&str> = sec.control_clients.iter().map(|k| k.name.as_str()).collect();
        eprintln!("control {ep}: CURVE, admitting {}", names.join(", "));
    }
    if let Some(keys) = &sec.data_clients {
        eprintln!("data endpoints: CURVE, admitting {} client keys", keys.len());
    }
    serve_rules(&r.ruletype, &r.rules, r.matcher, r.emulate.as_ref(), &r.config, stop, |s| ready(s, &r.config))
}

/// Loads and compiles a rule set and serves it until SIGINT/SIGTERM (or `stop`); `ready` is
/// called once every endpoint is bound.
pub fn serve_files(
    rule_type: &Path,
    rules: &Path,
    matcher: MatcherKind,
    cfg: &server::Config,
    stop: Arc<AtomicBool>,
    ready: impl FnOnce(&server::Served),
) -> Result<Vec<(&'static str, u64)>, String> {
    serve_rules(rule_type, rules, matcher, None, cfg, stop, ready)
}

/// [`serve_files`], with `emulate` (`--matcher emulated`, benchmarks only) the compiled matcher
/// wrapped in an [`emulated::EmulatedDevice`]: said on stderr at start, its counters (`emulated_*`)
/// added to the final ones and summed up in a line at the end.
fn serve_rules(
    rule_type: &Path,
    rules: &Path,
    matcher: MatcherKind,
    emulate: Option<&emulated::Spec>,
    cfg: &server::Config,
    stop: Arc<AtomicBool>,
    ready: impl FnOnce(&server::Served),
) -> Result<Vec<(&'static str, u64)>, String> {
    let rs = offload_rules::load(rule_type, rules).map_err(|e| e.to_string())?;
    let mut engine = Engine::compile(Arc::new(rs), matcher)?;
    let mut device = None;
    if let Some(spec) = emulate {
        let (emulated, counters) = emulate_device(engine, spec)?;
        (engine, device) = (emulated, Some(counters));
    }
    let served = Arc::new(server::Served::new(engine, 1, matcher));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).map_err(|e| format!("signal handler: {e}"))?;
    }
    // `ready` (which prints "serving ...") runs once every endpoint is bound.
    let counters = server::run_with(Arc::new(std::sync::RwLock::new(served)), cfg, stop, ready)?;
    let mut snapshot = counters.snapshot();
    if let (Some(c), Some(spec)) = (device, emulate) {
        eprintln!("{}", c.summary_line(spec));
        let l = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
        snapshot.extend([
            ("emulated_batches", l(&c.batches)),
            ("emulated_queries", l(&c.queries)),
            ("emulated_misses", l(&c.misses)),
            ("emulated_late_batches", l(&c.late_batches)),
        ]);
    }
    Ok(snapshot)
}

/// The engine with its matcher replaced by an emulated device that wraps it (the answers of
/// `spec.queries` precomputed first). A reload recompiles with the served `MatcherKind`, so it
/// turns the emulation off.
pub fn emulate_device(engine: Engine, spec: &emulated::Spec) -> Result<(Engine, Arc<emulated::Counters>), String> {
    let Engine { encoder, encoded, matcher, compile_time } = engine;
    let t = std::time::Instant::now();
    let device = emulated::EmulatedDevice::start(matcher, &encoder.rules().rule_type, &encoder, spec)?;
    eprintln!(
        "warning: {} (profile {}; answers of {} precomputed in {:.1} s; {}; a reload turns the emulation off)",
        emulated::NOTE,
        spec.profile.display(),
        spec.queries.display(),
        t.elapsed().as_secs_f64(),
        device.margins()
    );
    let counters = device.counters();
    Ok((Engine { encoder, encoded, matcher: Box::new(device), compile_time }, counters))
}

/// A bare ZeroMQ echo server (ROUTER returning every message unchanged) until `stop`: the
/// baseline the service's round trip is compared with in benches/serve_bench.py.
pub fn echo(endpoint: &str, stop: Arc<AtomicBool>) -> Result<u64, String> {
    use std::sync::atomic::Ordering;
    let ctx = zmq::Context::new();
    let s = ctx.socket(zmq::ROUTER).map_err(|e| e.to_string())?;
    s.set_linger(0).map_err(|e| e.to_string())?;
    s.bind(endpoint).map_err(|e| format!("bind {endpoint}: {e}"))?;
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        if s.poll(zmq::POLLIN, 50).map_err(|e| e.to_string())? > 0 {
            while let Ok(parts) = s.recv_multipart(zmq::DONTWAIT) {
                let _ = s.send_multipart(parts, zmq::DONTWAIT);
                n += 1;
            }
        }
    }
    Ok(n)
}
