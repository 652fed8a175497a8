//! `offload-serve`: the daemon without Python. `offload serve` runs the same code.

use offload_serve::config::Settings;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

const USAGE: &str = "usage: offload-serve [--config serve.toml] [--ruletype T.xml|T.toml --rules R.csv] \
[--endpoint tcp://127.0.0.1:5555]... [--workers 2] [--kernels 1] [--engine-threads 1] [--queue 64] \
[--matcher fast] [--control tcp://127.0.0.1:5556] [--metrics 127.0.0.1:9464] \
[--batch-max-queries 0] [--batch-timeout-us 200]

Flags override the settings file (keys as in docs/serve-protocol.md, e.g. `workers = 2`).";

fn fail(msg: &str) -> ! {
    eprintln!("error: {msg}\n{USAGE}");
    std::process::exit(2)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut flags = Settings::default();
    let mut file = None;
    fn num<T: std::str::FromStr>(v: Option<String>, what: &str) -> Option<T> {
        match v.map(|v| v.parse()) {
            Some(Ok(n)) => Some(n),
            _ => fail(&format!("{what} needs a non-negative integer")),
        }
    }
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
            std::process::exit(1)
        }
    }
}
