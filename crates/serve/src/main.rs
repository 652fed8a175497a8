//! `offload-serve`: the daemon without Python. `offload serve` runs the same code.

use offload_serve::server::Config;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

const USAGE: &str = "usage: offload-serve --ruletype T.xml|T.toml --rules R.csv [--endpoint tcp://127.0.0.1:5555]... \
[--workers 2] [--engine-threads 1] [--queue 64] [--matcher fast] [--control tcp://127.0.0.1:5556] [--metrics 127.0.0.1:9464] \
[--batch-max-queries 0] [--batch-timeout-us 200]";

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut ruletype, mut rules, mut matcher) = (None, None, "fast".to_string());
    let mut cfg = Config { endpoints: Vec::new(), ..Config::default() };
    let num = |v: Option<String>, what: &str| -> usize {
        v.and_then(|v| v.parse().ok()).unwrap_or_else(|| {
            eprintln!("error: {what} needs a number\n{USAGE}");
            std::process::exit(2)
        })
    };
    while let Some(a) = args.next() {
        match a.as_str() {
            "--ruletype" => ruletype = args.next().map(PathBuf::from),
            "--rules" => rules = args.next().map(PathBuf::from),
            "--endpoint" => cfg.endpoints.extend(args.next()),
            "--workers" => cfg.workers = num(args.next(), "--workers"),
            "--engine-threads" => cfg.engine_threads = num(args.next(), "--engine-threads"),
            "--queue" => cfg.queue = num(args.next(), "--queue"),
            "--control" => cfg.control = args.next(),
            "--metrics" => cfg.metrics = args.next(),
            "--batch-max-queries" => cfg.batch_max_queries = num(args.next(), "--batch-max-queries") as u64,
            "--batch-timeout-us" => cfg.batch_timeout_us = num(args.next(), "--batch-timeout-us") as u64,
            "--matcher" => matcher = args.next().unwrap_or_default(),
            "-h" | "--help" => {
                println!("{USAGE}");
                return;
            }
            other => {
                eprintln!("error: unknown argument {other:?}\n{USAGE}");
                std::process::exit(2)
            }
        }
    }
    let (Some(ruletype), Some(rules)) = (ruletype, rules) else {
        eprintln!("error: --ruletype and --rules are required\n{USAGE}");
        std::process::exit(2)
    };
    if cfg.endpoints.is_empty() {
        cfg.endpoints = Config::default().endpoints;
    }
    let kind = matcher.parse().unwrap_or_else(|e: String| {
        eprintln!("error: {e}");
        std::process::exit(2)
    });
    let stop = Arc::new(AtomicBool::new(false));
    match offload_serve::serve_files(&ruletype, &rules, kind, &cfg, stop, |s| {
        eprintln!("serving {} rules (version {}) on {}", s.engine.rules().len(), s.version, cfg.endpoints.join(", "))
    }) {
        Ok(counters) => eprintln!("stopped: {counters:?}"),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1)
        }
    }
}
