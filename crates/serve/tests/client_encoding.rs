//! Client-side encoding against a real daemon (`server::run` on a thread) over IPC: the
//! `EncodingClient` fetches the server's dictionary, encodes locally and gets the answers a raw
//! request gets (random rule sets, 16- and 32-bit codes); across a `reload-inline` that changes
//! the dictionary, codes of the old version are refused (never answered wrong) and the client
//! fetches the new dictionary by itself. Every wait is bounded.

mod common;

use common::{engine, example, in_process, names, queries, scratch, Daemon};
use offload_rules::{native, Engine, MatcherKind};
use offload_serve::client::{self, Client, ClientError, EncodingClient, Query};
use offload_serve::protocol::Status;
use offload_serve::server::Config;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

fn start(engine: Engine, endpoint: &str, control: Option<&str>) -> Daemon {
    let cfg = Config {
        endpoints: vec![endpoint.into()],
        control: control.map(String::from),
        workers: 1,
        kernels: 1,
        engine_threads: 1,
        ..Config::default()
    };
    Daemon::start(engine, cfg)
}

/// A small deterministic generator (xorshift), so a failing seed replays.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const VALUES: [&str; 7] = ["A", "BC", "LHR", "DEFGHIJ", "KLMNOPQR", "X1", "LONGER-THAN-EIGHT"];

/// A random rule set (1 to 6 criteria of every kind, up to 40 rules) and raw query columns of
/// values the rules name, values beside their boundaries and values no rule names.
fn random_case(seed: u64) -> (Engine, Vec<Vec<String>>) {
    let mut g = Rng(seed | 1);
    let n_crit = 1 + g.below(6) as usize;
    let kinds: Vec<u64> = (0..n_crit).map(|_| g.below(3)).collect();
    let mut toml = String::from("code = \"R\"\n");
    for (i, k) in kinds.iter().enumerate() {
        let kind = ["equ", "int_range", "date_range"][*k as usize];
        toml += &format!("[[criterion]]\ncode = \"C{i}\"\nkind = \"{kind}\"\nmandatory = false\nweight = {}\n", 1 << i);
    }
    let date = |d: u64| offload_rules::value::format_date(20454 + d as i128);
    let mut csv = format!("RULE_ID,{},CONTENT\n", (0..n_crit).map(|i| format!("C{i}")).collect::<Vec<_>>().join(","));
    for r in 0..g.below(40) {
        let cells: Vec<String> = kinds
            .iter()
            .map(|k| {
                if g.below(4) == 0 {
                    return String::new();
                }
                let (lo, len) = (g.below(30), g.below(10));
                match k {
                    0 => VALUES[g.below(6) as usize].to_string(),
                    1 => format!("{lo}..{}", lo + len),
                    _ => format!("{}..{}", date(lo), date(lo + len)),
                }
            })
            .collect();
        csv += &format!("r{r},{},{r}\n", cells.join(","));
    }
    let rt = native::parse_rule_type(Path::new("r.toml"), &toml).unwrap();
    let rs = native::parse_rules(&rt, Path::new("r.csv"), &csv).unwrap();
    let n = 1 + g.below(300) as usize;
    let cols = kinds
        .iter()
        .map(|k| {
            (0..n)
                .map(|_| match k {
                    0 => VALUES[g.below(7) as usize].to_string(),
                    1 => (g.below(45) as i64 - 3).to_string(),
                    _ => date(g.below(45)),
                })
                .collect()
        })
        .collect();
    (Engine::compile(Arc::new(rs), MatcherKind::Fast).unwrap(), cols)
}

#[test]
fn client_encoded_requests_answer_as_raw_ones() {
    let dir = scratch("client-encoding-random");
    for seed in 1..=6u64 {
        let (eng, cols) = random_case(seed * 0x9e37_79b9);
        let criteria: Vec<String> = eng.rules().rule_type.criteria.iter().map(|c| c.code.clone()).collect();
        let expected = in_process(&eng, &cols).1;
        let range_col = eng.rules().rule_type.criteria.iter().position(|c| c.kind.is_range());
        let ep = format!("ipc://{}/r{seed}.sock", dir.display());
        let d = start(eng, &ep, None);
        let mut raw = Client::connect(&ep).unwrap();
        let r = raw.call(Query::raw(&criteria, &cols)).unwrap();
        assert_eq!((r.status, &r.rule), (Status::Ok, &expected), "seed {seed}: {}", r.message);
        let mut c = EncodingClient::new(Client::connect(&ep).unwrap());
        assert_eq!(c.criteria().unwrap(), criteria);
        let dict = c.client().fetch_dictionary().unwrap();
        assert_eq!((dict.status, dict.code_bits, dict.ruleset_version), (Status::Ok, 16, 1));
        for bits in [None, Some(32)] {
            c.code_bits = bits;
            let e = c.call(&cols).unwrap();
            assert_eq!((e.status, e.ruleset_version), (Status::Ok, 1), "seed {seed}: {}", e.message);
            assert_eq!((&e.rule, &e.content), (&r.rule, &r.content), "seed {seed}, {bits:?} bits");
            // Early stop gives the raw request's prefix too.
            let e = c.call_with(&cols, |q| q.stop_after(2)).unwrap();
            let s = raw.call(Query::raw(&criteria, &cols).stop_after(2)).unwrap();
            assert_eq!(e.rule, s.rule, "seed {seed}");
        }
        assert_eq!(c.fetches, 1, "one dictionary per version");
        // A value the encoder refuses never leaves the client; the server refuses it raw.
        if let Some(c0) = range_col {
            let mut bad = cols.clone();
            bad[c0][0] = "not a value".into();
            assert!(matches!(c.call(&bad), Err(ClientError::BadRequest(m)) if m.contains("not a value")));
            assert_eq!(raw.call(Query::raw(&criteria, &bad)).unwrap().status, Status::BadRequest);
        }
        d.stop();
    }
}

#[test]
fn after_a_reload_old_codes_are_refused_and_the_client_refetches() {
    let dir = scratch("client-encoding-reload");
    let (ep, ctl) = (format!("ipc://{}/o.sock", dir.display()), format!("ipc://{}/c.sock", dir.display()));
    let d = start(engine(), &ep, Some(&ctl));
    let eng = engine();
    let cols = queries(&eng, 3);
    let mut c = EncodingClient::new(Client::connect(&ep).unwrap());
    let before = c.call(&cols).unwrap();
    assert_eq!((before.status, &before.rule), (Status::Ok, &in_process(&eng, &cols).1));
    let old = c.encode(&cols).unwrap(); // codes of version 1
                                        // A rule on a new airport first: every APT code moves (ZRH was 1, is now 2).
    let rt = std::fs::read(example("ruletype.toml")).unwrap();
    let rules = std::fs::read_to_string(example("rules.csv")).unwrap();
    let (header, body) = rules.split_once('\n').unwrap();
    let new_rules = format!("{header}\ncdg-ii,II,CDG,*,*,*,*,70\n{body}");
    let r = client::control(
        &ctl,
        &[b"reload-inline\nnew.toml\nrules.csv", &rt, new_rules.as_bytes()],
        None,
        Duration::from_secs(30),
    )
    .unwrap();
    assert_eq!((r["ok"].as_bool(), r["version"].as_u64()), (Some(true), Some(2)), "{r}");
    // Version 1's codes: refused, never answered from version 2's rules.
    let refused = c.client().call(old).unwrap();
    assert_eq!((refused.status, refused.ruleset_version), (Status::BadRequest, 2));
    assert!(refused.message.contains("version 1"), "{}", refused.message);
    // The encoding client recovers by itself: one more dictionary, answers as raw.
    let after = c.call(&cols).unwrap();
    let raw = c.client().call(Query::raw(&names(), &cols)).unwrap();
    assert_eq!((after.status, after.ruleset_version, c.version(), c.fetches), (Status::Ok, 2, Some(2), 2));
    assert_eq!((&after.rule, &after.content), (&raw.rule, &raw.content));
    assert_ne!(after.rule, before.rule, "the new rule wins for CDG");
    d.stop();
}
