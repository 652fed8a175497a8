//! Whole jobs over files, each step timed: `offload rules eval` (load the rules → compile →
//! read the queries → encode → match → write `QUERY_ID,RULE_ID,CONTENT`) and the encode timing
//! loop of `offload rules bench`. The Python layer calls these and only converts.

use crate::encode::QueryError;
use crate::{load, queries, Encoder, Engine, LoadError, MatcherKind, RawColumn, StringColumn, NO_MATCH};
use serde::Serialize;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

/// What an eval did and how long each step took (seconds).
#[derive(Debug, Clone, Serialize)]
pub struct EvalReport {
    pub rules: usize,
    pub queries: usize,
    pub matched: usize,
    pub matcher: String,
    pub threads: usize,
    pub load_s: f64,
    pub compile_s: f64,
    pub read_queries_s: f64,
    pub encode_s: f64,
    pub match_s: f64,
}

/// Why an eval failed: a bad input file, a matcher that cannot run here (`gpu` without a
/// device), or an answer file that could not be written (nothing is left half-written).
#[derive(Debug)]
pub enum EvalError {
    Input(LoadError),
    Matcher(String),
    Write(String),
}

impl From<LoadError> for EvalError {
    fn from(e: LoadError) -> Self {
        EvalError::Input(e)
    }
}

/// Answers the queries of `queries_csv` with the rules of `rule_type` + `rules_csv`, writing
/// `QUERY_ID,RULE_ID,CONTENT` to `out_csv`.
pub fn eval_files(
    rule_type: &Path,
    rules_csv: &Path,
    queries_csv: &Path,
    out_csv: &Path,
    kind: MatcherKind,
    threads: usize,
) -> Result<EvalReport, EvalError> {
    let t0 = Instant::now();
    let rs = Arc::new(load(rule_type, rules_csv)?);
    let load_s = t0.elapsed().as_secs_f64();
    let engine = Engine::compile(rs.clone(), kind).map_err(EvalError::Matcher)?;
    let t1 = Instant::now();
    let q = queries::load_queries(&rs.rule_type, queries_csv)?;
    let read_queries_s = t1.elapsed().as_secs_f64();
    let t2 = Instant::now();
    let codes = q.encode(&engine.encoder, queries_csv)?;
    let encode_s = t2.elapsed().as_secs_f64();
    let t3 = Instant::now();
    let answers = engine.match_encoded(&codes, threads);
    let match_s = t3.elapsed().as_secs_f64();
    queries::write_answers(out_csv, &q.ids, &answers, &rs).map_err(|e| {
        let why = match e.kind() {
            std::io::ErrorKind::StorageFull => "no space left on the device".to_string(),
            std::io::ErrorKind::QuotaExceeded => "disk quota exceeded".to_string(),
            _ => e.to_string(),
        };
        EvalError::Write(format!("cannot write {}: {why}; nothing was left half-written", out_csv.display()))
    })?;
    Ok(EvalReport {
        rules: rs.len(),
        queries: q.len(),
        matched: answers.iter().filter(|&&a| a != NO_MATCH).count(),
        matcher: kind.to_string(),
        threads,
        load_s,
        compile_s: engine.compile_time.as_secs_f64(),
        read_queries_s,
        encode_s,
        match_s,
    })
}

/// Times encoding raw text columns (one list per criterion) `repeats` times (at least once);
/// returns the seconds of each. The values are laid out back to back first, as the query-file
/// reader and Arrow input have them: this times turning values into codes, not chasing one heap
/// allocation per value.
pub fn time_encode(encoder: &Encoder, columns: &[Vec<String>], repeats: usize) -> Result<Vec<f64>, QueryError> {
    let packed: Vec<StringColumn> = columns
        .iter()
        .map(|c| {
            let mut p = StringColumn::default();
            c.iter().for_each(|s| p.push(s));
            p
        })
        .collect();
    let raw: Vec<RawColumn> = packed.iter().map(StringColumn::as_raw).collect();
    (0..repeats.max(1))
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(encoder.encode_columns(&raw)?);
            Ok(t.elapsed().as_secs_f64())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn example(name: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../data/examples/mct-mini").join(name)
    }

    #[test]
    fn eval_writes_the_expected_answers_and_times_each_step() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("answers.csv");
        let (rt, rules, queries) = (example("ruletype.toml"), example("rules.csv"), example("queries.csv"));
        let r = eval_files(&rt, &rules, &queries, &out, MatcherKind::Fast, 1).unwrap();
        let expected = std::fs::read_to_string(example("expected.csv")).unwrap();
        assert_eq!(std::fs::read_to_string(&out).unwrap(), expected);
        assert_eq!((r.matcher.as_str(), r.threads), ("fast", 1));
        assert_eq!(r.queries, expected.lines().count() - 1);
        assert!(r.matched <= r.queries && r.rules > 0 && r.load_s >= 0.0 && r.match_s >= 0.0);
        let bad = eval_files(&rt, &rules, &example("missing.csv"), &out, MatcherKind::Fast, 1);
        assert!(matches!(bad, Err(EvalError::Input(_))), "{bad:?}");
        let unwritable = dir.path().join("no-such-dir").join("answers.csv");
        let bad = eval_files(&rt, &rules, &queries, &unwritable, MatcherKind::Fast, 1);
        assert!(matches!(&bad, Err(EvalError::Write(m)) if m.contains("cannot write")), "{bad:?}");
    }

    #[test]
    fn time_encode_runs_each_repeat_and_refuses_bad_values() {
        let rs = Arc::new(load(&example("ruletype.toml"), &example("rules.csv")).unwrap());
        let engine = Engine::compile(rs.clone(), MatcherKind::Linear).unwrap();
        let q = queries::load_queries(&rs.rule_type, &example("queries.csv")).unwrap();
        let cols: Vec<Vec<String>> = q.columns.iter().map(|c| c.iter().map(String::from).collect()).collect();
        assert_eq!(time_encode(&engine.encoder, &cols, 3).unwrap().len(), 3);
        assert_eq!(time_encode(&engine.encoder, &cols, 0).unwrap().len(), 1);
        let mut bad = cols.clone();
        let validity = rs.rule_type.criteria.iter().position(|c| c.code == "VALIDITY").unwrap();
        bad[validity][0] = "not a date".into();
        assert!(time_encode(&engine.encoder, &bad, 1).is_err());
    }
}
