//! Helpers the service's integration tests share: the example rule set, its queries, and the
//! answers of the in-process matcher.
#![allow(dead_code)] // each test file uses a part

use offload_rules::{Engine, MatcherKind, RawColumn, NO_MATCH};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/examples/mct-mini").join(name)
}

pub fn engine() -> Engine {
    let rs = offload_rules::load(&example("ruletype.toml"), &example("rules.csv")).unwrap();
    Engine::compile(Arc::new(rs), MatcherKind::Fast).unwrap()
}

/// The example rule type's criterion names, in column order (what raw requests are keyed by).
pub fn names() -> Vec<String> {
    engine().rules().rule_type.criteria.iter().map(|c| c.code.clone()).collect()
}

/// The fingerprint pre-encoded requests carry for the example rule type.
pub fn fingerprint() -> u64 {
    offload_serve::protocol::rule_type_fingerprint(&engine().rules().rule_type)
}

/// The example queries as raw columns, repeated `times` (so requests are not tiny).
pub fn queries(engine: &Engine, times: usize) -> Vec<Vec<String>> {
    let q = offload_rules::queries::load_queries(&engine.rules().rule_type, &example("queries.csv")).unwrap();
    q.columns.iter().map(|c| (0..times).flat_map(|_| c.iter().map(str::to_string)).collect()).collect()
}

/// (codes, winning rules) of the in-process matcher.
pub fn in_process(engine: &Engine, cols: &[Vec<String>]) -> (Vec<u32>, Vec<u32>) {
    let views: Vec<Vec<&str>> = cols.iter().map(|c| c.iter().map(String::as_str).collect()).collect();
    let raw: Vec<RawColumn> = views.into_iter().map(RawColumn::Str).collect();
    let codes = engine.encoder.encode_columns(&raw).unwrap();
    let mut rule = vec![NO_MATCH; cols[0].len()];
    engine.matcher.match_batch(&codes, &mut rule);
    (codes, rule)
}

/// A directory of its own under the system's temporary directory, emptied.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("offload-serve-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A daemon served on a thread of the test (`server::run_with`), returned once it says it
/// serves (20 s at most); `stop` ends it and joins its thread.
pub struct Daemon {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Daemon {
    pub fn start(engine: Engine, cfg: offload_serve::server::Config) -> Daemon {
        use offload_serve::server::{self, Served};
        let served = Arc::new(std::sync::RwLock::new(Arc::new(Served::new(engine, 1, MatcherKind::Fast))));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (s, (tx, rx)) = (stop.clone(), std::sync::mpsc::channel());
        let thread = std::thread::spawn(move || {
            server::run_with(served, &cfg, s, move |_| {
                let _ = tx.send(());
            })
            .unwrap();
        });
        rx.recv_timeout(std::time::Duration::from_secs(20)).expect("the daemon said it serves");
        Daemon { stop, thread }
    }

    pub fn stop(self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().unwrap();
    }
}
