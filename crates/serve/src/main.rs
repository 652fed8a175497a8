//! `offload-serve`: the daemon without Python. `offload serve` runs the same code.

use offload_serve::config::Settings;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

const USAGE: &str = "usage: offload-serve [OPTIONS]            serve a rule set until SIGINT/SIGTERM
       offload-serve keys DIR [--name NAME]... [--force]   make CURVE key pairs (default names: server, client)

Options (flags override the settings file; keys as in docs/serve-protocol.md, e.g. `workers = 2`):
  --config FILE               settings file (TOML)
  --ruletype FILE             rule type, .xml (ERBIUM) or .toml (native)
  --rules FILE                rules CSV
  --endpoint EP               data endpoint to bind, repeatable [default: tcp://127.0.0.1:5555]
  --workers N                 worker threads (w): decode, batch, encode [default: 2]
  --kernels N                 kernel executors (k) [default: 1]
  --engine-threads N          matching threads per executor (e) [default: 1]
  --queue N                   requests that may wait before \"busy\" [default: 64]
  --matcher NAME              linear, nfa, nfa:<given|asc|desc|h2>, fast, gpu-host (the GPU's algorithm on
                              the CPU) or gpu (CUDA device) [default: fast]
  --batch-max-queries N       cross-request batch size, 0 = per request [default: 0]
  --batch-timeout-us N        wait for a fuller batch, from the first request's arrival [default: 200]
  --control EP                control endpoint (stats, reload, set) [default: none]
  --metrics ADDR              Prometheus page at http://ADDR/metrics; a bare port is 127.0.0.1:PORT [default: none]
Security (docs/serve-protocol.md, \"Security\"):
  --curve-secret-key FILE     the daemon's key pair (NAME.key_secret): CURVE on the control socket [default: none]
  --curve-client PATH         client public key (NAME.key) or directory of them admitted on control, repeatable
  --curve-data-client PATH    the same for the data endpoints; given, they require CURVE too [default: none]
  --reload-dir DIR            where `reload` may read rule files, repeatable [default: the rule files' directories]
  --allow-remote-data         bind a data endpoint off loopback without CURVE [default: refused]
  --allow-remote-metrics      serve metrics off loopback [default: refused]
A control endpoint off loopback/IPC is refused without CURVE.";

fn fail(msg: &str) -> ! {
    eprintln!("error: {msg}\n{USAGE}");
    std::process::exit(2)
}

fn num<T: std::str::FromStr>(v: Option<String>, what: &str) -> Option<T> {
    match v.map(|v| v.parse()) {
        Some(Ok(n)) => Some(n),
        _ => fail(&format!("{what} needs a non-negative integer")),
    }
}

/// `offload-serve keys DIR [--name NAME]... [--force]`.
fn keys(mut args: impl Iterator<Item = String>) {
    let (mut dir, mut names, mut force) = (None, Vec::new(), false);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--name" => names.extend(args.next()),
            "--force" => force = true,
            _ if dir.is_none() && !a.starts_with('-') => dir = Some(PathBuf::from(a)),
            other => fail(&format!("keys: unknown argument {other:?}")),
        }
    }
    let dir = dir.unwrap_or_else(|| fail("keys needs the directory to write the key files to"));
    if names.is_empty() {
        names = vec!["server".into(), "client".into()];
    }
    for name in names {
        match offload_serve::auth::write_key_pair(&dir, &name, force) {
            Ok((public, secret)) => {
                println!("{} (share it)  {} (keep it, mode 600)", public.display(), secret.display())
            }
            Err(e) => {
                eprintln!("error: {e}");
                std::process::exit(1)
            }
        }
    }
}

fn main() {
    let mut args = std::env::args().skip(1).peekable();
    if args.peek().map(String::as_str) == Some("keys") {
        args.next();
        return keys(args);
    }
    let mut flags = Settings::default();
    let mut file = None;
    let list =
        |v: &mut Option<Vec<PathBuf>>, a: Option<String>| v.get_or_insert_with(Vec::new).extend(a.map(PathBuf::from));
    while let Some(a) = args.next() {
        match a.as_str() {
            "--config" => file = args.next().map(PathBuf::from),
            "--ruletype" => flags.ruletype = args.next().map(PathBuf::from),
            "--rules" => flags.rules = args.next().map(PathBuf::from),
            "--endpoint" => flags.endpoints.get_or_insert_with(Vec::new).extend(args.next()),
            "--workers" => flags.workers = num(args.next(), &a),
            "--kernels" => flags.kernels = num(args.next(), &a),
            "--engine-threads" => flags.engine_threads = num(args.next(), &a),
            "--queue" => flags.queue = num(args.next(), &a),
            "--control" => flags.control = args.next(),
            "--metrics" => flags.metrics = args.next(),
            "--batch-max-queries" => flags.batch_max_queries = num(args.next(), &a),
            "--batch-timeout-us" => flags.batch_timeout_us = num(args.next(), &a),
            "--matcher" => flags.matcher = args.next(),
            "--curve-secret-key" => flags.curve_secret_key = args.next().map(PathBuf::from),
            "--curve-client" => list(&mut flags.curve_clients, args.next()),
            "--curve-data-client" => list(&mut flags.curve_data_clients, args.next()),
            "--reload-dir" => list(&mut flags.reload_dirs, args.next()),
            "--allow-remote-data" => flags.allow_remote_data = Some(true),
            "--allow-remote-metrics" => flags.allow_remote_metrics = Some(true),
            "-h" | "--help" => {
                println!("{USAGE}");
                return;
            }
            "-V" | "--version" => {
                println!("offload-serve {}", env!("CARGO_PKG_VERSION"));
                return;
            }
            other => fail(&format!("unknown argument {other:?}")),
        }
    }
    let settings = match file {
        Some(f) => Settings::from_file(&f).unwrap_or_else(|e| fail(&e)).over(flags),
        None => flags,
    };
    let stop = Arc::new(AtomicBool::new(false));
    match offload_serve::serve(settings, stop, |s, cfg| {
        eprintln!("serving {} rules (version {}) on {}", s.engine.rules().len(), s.version, cfg.endpoints.join(", "))
    }) {
        Ok(counters) => eprintln!("stopped: {counters:?}"),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2)
        }
    }
}
