//! Property tests: every matcher, through the real loader and encoder, gives exactly what a
//! naive oracle over the raw values gives — random rule types, weights with ties and zeros,
//! duplicates, ranges touching at their bounds, unknown values, mandatory criteria, empty and
//! one-rule sets, empty batches, 1 and 2 threads. The gpu matcher's kernel is checked here as
//! the host compiler builds it (`gpu-host`): the same source the device runs.

use offload_rules::matcher::fast::FastMatcher;
use offload_rules::matcher::gpu::device::{self, GpuMatcher, DEFAULT_CHUNK};
use offload_rules::matcher::gpu::GpuHostMatcher;
use std::sync::LazyLock;

/// Whether a GPU is here: then the device matcher is checked too (benches/gpu/run.sh runs
/// this test binary on a GPU machine); without one (CI) the kernel's host build stands for it.
static GPU: LazyLock<bool> = LazyLock::new(|| device::available().is_ok());
use offload_rules::value::ValueError;
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

// Equality values of 1, 2, 7 and 8 bytes (7 is the longest packed key), and an unknown one.
const LETTERS: [&str; 5] = ["A", "BC", "DEFGHIJ", "KLMNOPQR", "ZZZ"];
// Dates: day numbers offset from 2026-01-01 (= day 20454).
const DAY0: i64 = 20454;

fn weight() -> impl Strategy<Value = u64> {
    prop_oneof![Just(0u64), 1u64..4, Just(1 << 20), Just(u64::MAX / 2), Just(u64::MAX)]
}

fn case() -> impl Strategy<Value = Case> {
    case_with(5)
}

/// Random cases where one criterion in `mandatory_one_in` (by chance) is mandatory.
fn case_with(mandatory_one_in: u8) -> impl Strategy<Value = Case> {
    (1usize..6)
        .prop_flat_map(move |n| {
            prop::collection::vec(
                (
                    prop_oneof![Just(Kind::Equ), Just(Kind::Equ), Just(Kind::Int), Just(Kind::Date)],
                    any::<u8>(),
                    weight(),
                )
                    .prop_map(move |(kind, m, weight)| Crit {
                        kind,
                        mandatory: m % mandatory_one_in == 0,
                        weight,
                    }),
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

/// `default` cases, or PROPTEST_CASES where set.
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
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
    let device = if *GPU { Some(MatcherKind::Gpu) } else { None };
    for kind in MatcherKind::ALL.into_iter().chain(device) {
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
        if *GPU {
            // both query widths: 32-bit codes, and 16-bit ones (these cardinalities fit)
            for narrow in [false, true] {
                GpuMatcher::from_fast(&m, narrow, DEFAULT_CHUNK).unwrap().match_batch(&codes, &mut got);
                prop_assert_eq!(&got, &expected, "gpu device with leaf size {} narrow {}", leaf, narrow);
            }
        }
    }
    Ok(())
}

proptest! {
    // PROPTEST_CASES lowers the count where each case costs more (device runs, benches/gpu).
    #![proptest_config(ProptestConfig { cases: cases(400), ..ProptestConfig::default() })]

    #[test]
    fn every_matcher_equals_the_oracle(case in case()) {
        check(&case)?;
    }
}

/// Codes as a client may send them (`codes16`/`codes32` requests are not re-encoded): any
/// u32, at or beyond a criterion's cardinality too. An equality code no rule names answers as
/// the unknown value 0 does, and every matcher agrees with `linear`. The fast matcher's
/// mandatory-tuple index once read such a code into another tuple's key (serve_frame fuzz).
fn check_any_codes(case: &Case, picks: &[(u8, u32)]) -> Result<(), TestCaseError> {
    let (toml, csv) = to_native(case);
    let rt = native::parse_rule_type(Path::new("t.toml"), &toml).unwrap();
    let rs = Arc::new(native::parse_rules(&rt, Path::new("r.csv"), &csv).unwrap());
    let linear = Engine::compile(rs.clone(), MatcherKind::Linear).unwrap();
    let (width, n) = (linear.encoder.width(), case.crits.len());
    // each criterion's codes, then the row's padding (any code there)
    let card = |c: usize| if c < n { linear.encoder.cardinality(c) as u32 } else { u32::MAX };
    let codes: Vec<u32> = picks
        .iter()
        .enumerate()
        .map(|(i, &(how, any))| match how % 8 {
            0..=3 => any % card(i % width).max(1),
            4 | 5 => card(i % width).saturating_add(any % 3), // just past: another tuple's key
            6 => u32::MAX,
            _ => any,
        })
        .collect();
    let codes = &codes[..codes.len() / width * width];
    let want = linear.match_encoded(codes, 1);
    // an equality code beyond the dictionary reads as unknown
    let beyond = |c: usize, v: u32| c < n && case.crits[c].kind == Kind::Equ && v >= card(c);
    let known: Vec<u32> = codes.iter().enumerate().map(|(i, &v)| if beyond(i % width, v) { 0 } else { v }).collect();
    prop_assert_eq!(&linear.match_encoded(&known, 1), &want, "a code beyond the dictionary is not unknown");
    for kind in MatcherKind::ALL.into_iter().chain(GPU.then_some(MatcherKind::Gpu)) {
        let got = Engine::compile(rs.clone(), kind).unwrap().match_encoded(codes, 1);
        prop_assert_eq!(&got, &want, "matcher {} on codes beyond the dictionary", kind.as_str());
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(200), ..ProptestConfig::default() })]

    #[test]
    fn every_matcher_equals_linear_on_any_codes(
        case in case_with(2), // mandatory criteria often: the fast matcher's tuple index
        picks in prop::collection::vec((any::<u8>(), any::<u32>()), 0..120),
    ) {
        check_any_codes(&case, &picks)?;
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

/// Raw text of query value `v` of a criterion of kind `kind` in one of many shapes picked by
/// `k`: padding, leading zeros, signs, long and huge integers, dates in both formats and any
/// case, unknown and near-miss keys of every length; with `bad`, also values that must be
/// rejected.
fn shaped(kind: Kind, v: i64, k: u8, bad: bool) -> String {
    match kind {
        Kind::Equ => {
            let l = LETTERS[v as usize];
            match k % 16 {
                0 => format!(" {l} "),
                1 => format!("{l}LONGERTHANEIGHT"),
                2 => format!(" {l}\t"),
                3 => format!("\t{l}"),
                4 => format!("{l} "),
                5 => l[..l.len() - 1].to_string(),
                6 => format!("{l}x"),
                7 => "x".repeat(1 + v as usize % 9),
                8 => format!("{l}\u{e9}"),
                9 => String::new(),
                10 => format!("   {l}"),
                _ => l.to_string(),
            }
        }
        Kind::Int => match k % (if bad { 24 } else { 16 }) {
            0 => format!("{v:08}"),
            1 => format!("{v:03}"),
            2 => format!("+{v}"),
            3 => format!(" {v} "),
            4 => format!("{v:020}"),
            5 => format!("{v:09}"),
            6 => format!("{v:018}"),
            7 => format!("{v:019}"),
            8 => "99999999999999999999".to_string(),
            9 => format!("-{}", "9".repeat(38)),
            10 => format!("{v}\t"),
            11 => format!("{}", v * 1_000_000_007),
            16 => format!("{v}X"),
            17 => String::new(),
            18 => "9".repeat(40),
            19 => format!("{v} 1"),
            20 => "+".to_string(),
            21 => "12\u{e9}".to_string(),
            22 => format!("0x{v}"),
            23 => "1234567X".to_string(),
            _ => v.to_string(),
        },
        Kind::Date => {
            let (y, m, d) = offload_rules::value::civil_from_days(DAY0 + v);
            let ddmmmyyyy = date(DAY0 + v);
            match k % (if bad { 26 } else { 14 }) {
                0 => format!("{y:04}-{m:02}-{d:02}"),
                1 => ddmmmyyyy.to_lowercase(),
                2 => format!(" {y:04}-{m:02}-{d:02} "),
                3 => format!("{}{}", &ddmmmyyyy[..3], ddmmmyyyy[3..].to_lowercase()),
                4 => "0001-01-01".to_string(),
                5 => "9999-12-31".to_string(),
                6 => "2024-02-29".to_string(),
                7 => "29FEB2000".to_string(),
                8 => format!("{y:04}-{m:02}-{:02}", d.min(28) + v as u32 % 3),
                9 => "+026-01-05".to_string(),
                10 => format!("{ddmmmyyyy} "),
                11 => "1899-12-31".to_string(),
                14 => "2026-02-29".to_string(),
                15 => "2026-13-01".to_string(),
                16 => "2026-00-10".to_string(),
                17 => "2026-1-05".to_string(),
                18 => "31APR2026".to_string(),
                19 => "2026/01/05".to_string(),
                20 => String::new(),
                21 => "20260105".to_string(),
                22 => "2026-01-32".to_string(),
                23 => "00JAN2026".to_string(),
                24 => "2026-01-0X".to_string(),
                25 => "15XYZ2026".to_string(),
                _ => ddmmmyyyy,
            }
        }
    }
}

/// The batch encoder (a column at a time, a repeated value reusing its code) gives every value
/// the code [`offload_rules::Encoder::encode_str`] gives it alone, for text, Arrow-packed and
/// offset Arrow-packed columns, runs of repeats and values of every shape ([`shaped`]); with
/// bad values, the batch fails with the error of the first bad value in encoding order (blocks
/// of 512 rows, a column at a time within a block).
fn check_encoder(case: &Case, variant: &[u8]) -> Result<(), TestCaseError> {
    let (toml, csv) = to_native(case);
    let rt = native::parse_rule_type(Path::new("t.toml"), &toml).unwrap();
    let rs = Arc::new(native::parse_rules(&rt, Path::new("r.csv"), &csv).unwrap());
    let eng = Engine::compile(rs, MatcherKind::Linear).unwrap();
    let bad = variant[0].is_multiple_of(3);
    // Sometimes tiled past one 512-row block, so errors and repeats cross blocks.
    let queries: Vec<&Vec<i64>> = match variant[0] % 5 {
        0 => case.queries.iter().cycle().take(case.queries.len() * (1300 / case.queries.len().max(1))).collect(),
        _ => case.queries.iter().collect(),
    };
    let texts: Vec<Vec<String>> = (0..case.crits.len())
        .map(|c| {
            queries
                .iter()
                .zip(variant.iter().cycle().skip(c))
                .map(|(q, &k)| shaped(case.crits[c].kind, q[c], k, bad))
                .collect()
        })
        .collect();
    let n = queries.len();
    let w = eng.encoder.width();
    let mut expected = vec![0u32; n * w];
    let mut first_error: Option<((usize, usize, usize), String)> = None;
    for (c, col) in texts.iter().enumerate() {
        for (i, v) in col.iter().enumerate() {
            match eng.encoder.encode_str(c, v) {
                Ok(code) => expected[i * w + c] = code,
                Err(e) => {
                    let message = match e {
                        ValueError::NotAnInteger => "not an integer".to_string(),
                        ValueError::IntegerTooLarge => "integer does not fit in 128 bits".to_string(),
                        ValueError::MalformedDate => "not a date (DDMMMYYYY or YYYY-MM-DD)".to_string(),
                        ValueError::ImpossibleDate(why) => why,
                    };
                    let at = (i / 512, c, i);
                    if first_error.as_ref().is_none_or(|(f, _)| at < *f) {
                        first_error = Some((at, message));
                    }
                }
            }
        }
    }
    let strs: Vec<RawColumn> = texts.iter().map(|c| RawColumn::Str(c.iter().map(|s| s.as_str()).collect())).collect();
    let packed: Vec<offload_rules::StringColumn> = texts
        .iter()
        .map(|c| {
            let mut p = offload_rules::StringColumn::default();
            c.iter().for_each(|s| p.push(s));
            p
        })
        .collect();
    // Arrow slices: the values start after other bytes, offsets do not start at 0.
    let offset: Vec<(Vec<u8>, Vec<i64>)> = texts
        .iter()
        .map(|c| {
            let mut data = b"prefix".to_vec();
            let mut offsets = vec![data.len() as i64];
            for s in c {
                data.extend_from_slice(s.as_bytes());
                offsets.push(data.len() as i64);
            }
            (data, offsets)
        })
        .collect();
    let offset_cols: Vec<RawColumn> =
        offset.iter().map(|(d, o)| RawColumn::Packed(offload_rules::PackedStrings::new(d, o).unwrap())).collect();
    for (layout, cols) in
        [("text", strs), ("packed", packed.iter().map(|p| p.as_raw()).collect()), ("offset", offset_cols)]
    {
        let got = eng.encoder.encode_columns(&cols);
        match &first_error {
            None => prop_assert_eq!(&got.unwrap(), &expected, "layout {}", layout),
            Some(((_, c, i), message)) => {
                let err = got.unwrap_err();
                prop_assert_eq!(
                    (err.row, err.criterion, err.value.as_str(), err.message.as_str()),
                    (*i, format!("C{c}"), texts[*c][*i].as_str(), message.as_str()),
                    "layout {}",
                    layout
                );
            }
        }
    }
    // A bad value after a run of good ones: the error names its own row.
    if let Some(c) = case.crits.iter().position(|k| k.kind != Kind::Equ) {
        if let Some(bad_row) = (variant.len() < n && first_error.is_none()).then_some(variant.len()) {
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
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn the_batch_encoder_equals_encoding_each_value_alone(case in case(), variant in prop::collection::vec(any::<u8>(), 1..40)) {
        check_encoder(&case, &variant)?;
    }
}
