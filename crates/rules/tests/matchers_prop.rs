//! Property tests: every matcher, through the real loader and encoder, gives exactly what a
//! naive oracle over the raw values gives — random rule types, weights with ties and zeros,
//! duplicates, ranges touching at their bounds, unknown values, mandatory criteria, empty and
//! one-rule sets, empty batches, 1 and 2 threads. The gpu matcher's kernel is checked here as
//! the host compiler builds it (`gpu-host`): the same source the device runs.

use offload_rules::matcher::fast::FastMatcher;
use offload_rules::matcher::gpu::GpuHostMatcher;
use offload_rules::{native, Engine, Matcher, MatcherKind, RawColumn, NO_MATCH};
use proptest::prelude::*;
use std::path::Path;
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Equ,
    Int,
    Date,
}

#[derive(Debug, Clone)]
struct Crit {
    kind: Kind,
    mandatory: bool,
    weight: u64,
}

#[derive(Debug, Clone)]
enum RawCell {
    Any,
    Val(u8),
    Range(i64, i64),
}

#[derive(Debug, Clone)]
struct Case {
    crits: Vec<Crit>,
    rules: Vec<Vec<RawCell>>,
    queries: Vec<Vec<i64>>,
}

const LETTERS: [&str; 5] = ["A", "B", "C", "D", "E"];
// Dates: day numbers offset from 2026-01-01 (= day 20454).
const DAY0: i64 = 20454;

fn weight() -> impl Strategy<Value = u64> {
    prop_oneof![Just(0u64), 1u64..4, Just(1 << 20), Just(u64::MAX / 2), Just(u64::MAX)]
}

fn case() -> impl Strategy<Value = Case> {
    (1usize..6)
        .prop_flat_map(|n| {
            prop::collection::vec(
                (
                    prop_oneof![Just(Kind::Equ), Just(Kind::Equ), Just(Kind::Int), Just(Kind::Date)],
                    any::<u8>(),
                    weight(),
                )
                    .prop_map(|(kind, m, weight)| Crit { kind, mandatory: m % 5 == 0, weight }),
                n,
            )
        })
        .prop_flat_map(|crits| {
            let cell = |c: &Crit| -> BoxedStrategy<RawCell> {
                let spec: BoxedStrategy<RawCell> = match c.kind {
                    Kind::Equ => (0u8..4).prop_map(RawCell::Val).boxed(),
                    _ => (0i64..8, 0i64..5, 0u8..6)
                        .prop_map(|(lo, len, open)| match open {
                            0 => RawCell::Range(i64::MIN, lo + len),
                            1 => RawCell::Range(lo, i64::MAX),
                            _ => RawCell::Range(lo, lo + len),
                        })
                        .boxed(),
                };
                if c.mandatory {
                    spec
                } else {
                    prop_oneof![Just(RawCell::Any), spec].boxed()
                }
            };
            let rule: Vec<BoxedStrategy<RawCell>> = crits.iter().map(cell).collect();
            let query: Vec<BoxedStrategy<i64>> = crits
                .iter()
                .map(|c| match c.kind {
                    Kind::Equ => (0i64..5).boxed(), // 4 = a value no rule names
                    _ => (-1i64..14).boxed(),
                })
                .collect();
            (Just(crits), prop::collection::vec(rule, 0..30), prop::collection::vec(query, 0..40))
        })
        .prop_map(|(crits, rules, queries)| Case { crits, rules, queries })
}

fn to_native(case: &Case) -> (String, String) {
    let mut toml = String::from("code = \"T\"\n");
    for (i, c) in case.crits.iter().enumerate() {
        let kind = match c.kind {
            Kind::Equ => "equ",
            Kind::Int => "int_range",
            Kind::Date => "date_range",
        };
        toml += &format!(
            "[[criterion]]\ncode = \"C{i}\"\nkind = \"{kind}\"\nmandatory = {}\nweight = {}\n",
            c.mandatory,
            // TOML integers stop at 2^63-1: larger weights are written as strings.
            if c.weight > i64::MAX as u64 { format!("\"{}\"", c.weight) } else { c.weight.to_string() }
        );
    }
    let mut csv = String::from("RULE_ID");
    for i in 0..case.crits.len() {
        csv += &format!(",C{i}");
    }
    csv += ",CONTENT\n";
    for (r, rule) in case.rules.iter().enumerate() {
        csv += &format!("r{r}");
        for (c, cell) in rule.iter().enumerate() {
            csv += ",";
            csv += &match (cell, case.crits[c].kind) {
                (RawCell::Any, _) => (if r % 2 == 0 { "" } else { "*" }).to_string(),
                (RawCell::Val(v), _) => LETTERS[*v as usize].to_string(),
                (RawCell::Range(lo, hi), Kind::Date) => {
                    let d = |v: i64| if v == i64::MIN || v == i64::MAX { String::new() } else { date(DAY0 + v) };
                    format!("{}..{}", d(*lo), d(*hi))
                }
                (RawCell::Range(lo, hi), _) if lo == hi => format!("{lo}"),
                (RawCell::Range(lo, hi), _) => format!("{}..{}", end(*lo), end(*hi)),
            };
        }
        csv += &format!(",{}\n", r * 7);
    }
    (toml, csv)
}

/// A range end; i64::MIN / i64::MAX are open ends, written as nothing (`..hi`, `lo..`).
fn end(v: i64) -> String {
    if v == i64::MIN || v == i64::MAX {
        String::new()
    } else {
        v.to_string()
    }
}

fn date(days: i64) -> String {
    offload_rules::value::format_date(days as i128)
}

/// The oracle: first rule (input order) of maximal score among the matching ones.
fn oracle(case: &Case, q: &[i64]) -> u32 {
    let mut best: Option<(u128, usize)> = None;
    for (r, rule) in case.rules.iter().enumerate() {
        let ok = rule.iter().zip(q).all(|(cell, &v)| match cell {
            RawCell::Any => true,
            RawCell::Val(x) => *x as i64 == v,
            RawCell::Range(lo, hi) => *lo <= v && v <= *hi,
        });
        if ok {
            let s: u128 = rule
                .iter()
                .zip(&case.crits)
                .filter(|(cell, _)| !matches!(cell, RawCell::Any))
                .map(|(_, c)| c.weight as u128)
                .sum();
            if best.is_none_or(|(bs, _)| s > bs) {
                best = Some((s, r));
            }
        }
    }
    best.map_or(NO_MATCH, |(_, r)| r as u32)
}

fn check(case: &Case) -> Result<(), TestCaseError> {
    let (toml, csv) = to_native(case);
    let rt = native::parse_rule_type(Path::new("t.toml"), &toml).unwrap();
    let rs = Arc::new(native::parse_rules(&rt, Path::new("r.csv"), &csv).unwrap());
    let expected: Vec<u32> = case.queries.iter().map(|q| oracle(case, q)).collect();
    // Raw query text: letters for equality (index 4 = unknown "E"), integers, dates.
    let texts: Vec<Vec<String>> = (0..case.crits.len())
        .map(|c| {
            case.queries
                .iter()
                .map(|q| match case.crits[c].kind {
                    Kind::Equ => LETTERS[q[c] as usize].to_string(),
                    Kind::Int => q[c].to_string(),
                    Kind::Date => date(DAY0 + q[c]),
                })
                .collect()
        })
        .collect();
    let cols: Vec<RawColumn> = texts.iter().map(|c| RawColumn::Str(c.iter().map(|s| s.as_str()).collect())).collect();
    for kind in MatcherKind::ALL {
        let eng = Engine::compile(rs.clone(), kind).unwrap();
        let codes = eng.encoder.encode_columns(&cols).unwrap();
        for threads in [1, 2] {
            let got = eng.match_encoded(&codes, threads);
            prop_assert_eq!(&got, &expected, "matcher {} threads {}", kind.as_str(), threads);
        }
    }
    // The tree matcher with tiny leaves, so small cases build deep trees too.
    let eng = Engine::compile(rs.clone(), MatcherKind::Linear).unwrap();
    let cards: Vec<usize> = (0..case.crits.len()).map(|c| eng.encoder.cardinality(c)).collect();
    let codes = eng.encoder.encode_columns(&cols).unwrap();
    for leaf in [1, 2, 3] {
        let m = FastMatcher::with_leaf_size(&eng.encoded, &cards, leaf);
        let mut got = vec![0u32; case.queries.len()];
        m.match_batch(&codes, &mut got);
        prop_assert_eq!(&got, &expected, "fast matcher with leaf size {}", leaf);
        // The gpu kernel (built for the host) over the same deep tree.
        GpuHostMatcher::from_fast(&m).unwrap().match_batch(&codes, &mut got);
        prop_assert_eq!(&got, &expected, "gpu kernel with leaf size {}", leaf);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn every_matcher_equals_the_oracle(case in case()) {
        check(&case)?;
    }
}

/// Larger sets with many duplicates and a skewed value distribution, where the fast matcher
/// builds deep trees with both copying and wild-child splits.
#[test]
fn every_matcher_equals_the_oracle_on_larger_sets() {
    use proptest::test_runner::{Config, TestRunner};
    let strat = (2usize..5, 200usize..600, any::<u64>()).prop_map(|(n, n_rules, seed)| {
        let mut x = seed | 1;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let crits: Vec<Crit> = (0..n + 2)
            .map(|i| Crit { kind: if i == n + 1 { Kind::Int } else { Kind::Equ }, mandatory: i == 0, weight: 1 << i })
            .collect();
        let rules = (0..n_rules)
            .map(|_| {
                crits
                    .iter()
                    .map(|c| match c.kind {
                        _ if !c.mandatory && next() % 3 == 0 => RawCell::Any,
                        Kind::Equ => RawCell::Val((next() % 4) as u8),
                        _ => {
                            let lo = (next() % 10) as i64;
                            RawCell::Range(lo, lo + (next() % 4) as i64)
                        }
                    })
                    .collect()
            })
            .collect();
        let queries = (0..300)
            .map(|_| {
                crits
                    .iter()
                    .map(|c| if c.kind == Kind::Equ { (next() % 5) as i64 } else { (next() % 15) as i64 })
                    .collect()
            })
            .collect();
        Case { crits, rules, queries }
    });
    let mut runner = TestRunner::new(Config { cases: 30, ..Config::default() });
    runner.run(&strat, |case| check(&case)).unwrap();
}

/// The batch encoder (a column at a time, a repeated value reusing its code) gives every value
/// the code [`offload_rules::Encoder::encode_str`] gives it alone: text and Arrow-packed
/// columns, runs of repeats, padding spaces, values longer than the packed keys, unknown
/// values, and a bad value reported at its own row.
fn check_encoder(case: &Case, variant: &[u8]) -> Result<(), TestCaseError> {
    let (toml, csv) = to_native(case);
    let rt = native::parse_rule_type(Path::new("t.toml"), &toml).unwrap();
    let rs = Arc::new(native::parse_rules(&rt, Path::new("r.csv"), &csv).unwrap());
    let eng = Engine::compile(rs, MatcherKind::Linear).unwrap();
    let texts: Vec<Vec<String>> = (0..case.crits.len())
        .map(|c| {
            case.queries
                .iter()
                .zip(variant.iter().cycle())
                .map(|(q, &k)| match case.crits[c].kind {
                    Kind::Equ => match k % 4 {
                        0 => format!(" {} ", LETTERS[q[c] as usize]),
                        1 => format!("{}LONGERTHANEIGHT", LETTERS[q[c] as usize]),
                        _ => LETTERS[q[c] as usize].to_string(),
                    },
                    Kind::Int => q[c].to_string(),
                    Kind::Date => date(DAY0 + q[c]),
                })
                .collect()
        })
        .collect();
    let mut expected = vec![0u32; texts.first().map_or(0, Vec::len) * eng.encoder.width()];
    for (c, col) in texts.iter().enumerate() {
        for (i, v) in col.iter().enumerate() {
            expected[i * eng.encoder.width() + c] = eng.encoder.encode_str(c, v).unwrap();
        }
    }
    let strs: Vec<RawColumn> = texts.iter().map(|c| RawColumn::Str(c.iter().map(|s| s.as_str()).collect())).collect();
    prop_assert_eq!(&eng.encoder.encode_columns(&strs).unwrap(), &expected);
    let packed: Vec<offload_rules::StringColumn> = texts
        .iter()
        .map(|c| {
            let mut p = offload_rules::StringColumn::default();
            c.iter().for_each(|s| p.push(s));
            p
        })
        .collect();
    let raw: Vec<RawColumn> = packed.iter().map(|p| p.as_raw()).collect();
    prop_assert_eq!(&eng.encoder.encode_columns(&raw).unwrap(), &expected);
    // A bad value after a run of good ones: the error names its own row.
    if let Some(c) = case.crits.iter().position(|k| k.kind != Kind::Equ) {
        if let Some(bad_row) = (variant.len() < case.queries.len()).then_some(variant.len()) {
            let mut bad = texts.clone();
            bad[c][bad_row] = "12X".to_string();
            let cols: Vec<RawColumn> =
                bad.iter().map(|v| RawColumn::Str(v.iter().map(|s| s.as_str()).collect())).collect();
            let err = eng.encoder.encode_columns(&cols).unwrap_err();
            prop_assert_eq!(err.row, bad_row);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn the_batch_encoder_equals_encoding_each_value_alone(case in case(), variant in prop::collection::vec(any::<u8>(), 1..40)) {
        check_encoder(&case, &variant)?;
    }
}
