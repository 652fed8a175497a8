//! Property tests of the encoder's dictionary: an encoder rebuilt from its dictionary's bytes
//! (`Encoder::from_dictionary`) gives every query value the code the original gave it, and the
//! same errors — random rule types and rules (equality values of every packed-key length, int
//! ranges with 128-bit and open ends, date ranges), and query values no rule names, empty,
//! padded, huge, badly formed, and on every boundary; text, packed and integer columns. And
//! `EncoderDictionary::from_bytes` never panics: random bytes, every truncation and random
//! mutations of a valid dictionary (what parses re-encodes to the same bytes).

use offload_rules::{native, Encoder, EncoderDictionary, PackedStrings, RawColumn};
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
enum Cell {
    Any,
    Val(String),
    Range(Option<i128>, Option<i128>),
}

#[derive(Debug, Clone)]
struct Case {
    kinds: Vec<Kind>,
    rules: Vec<Vec<Cell>>,
    /// Per criterion, the raw query values.
    queries: Vec<Vec<String>>,
}

/// `default` cases, or PROPTEST_CASES where set.
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

// Dates: day numbers offset from 2026-01-01.
const DAY0: i128 = 20454;

fn date(days: i128) -> String {
    offload_rules::value::format_date(days)
}

/// Equality values: 1 to 12 bytes (short packed keys and long ones), a few shared so rules
/// repeat them.
fn equ_value() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec!["A", "BC", "DEFGHIJ", "KLMNOPQR", "LHR", "X1"]).prop_map(String::from),
        "[A-Z0-9]{1,12}",
    ]
}

/// A range end: small (ranges touch and overlap), huge (beyond 64 bits) or open.
fn end() -> impl Strategy<Value = Option<i128>> {
    prop_oneof![
        4 => (-3i128..12).prop_map(Some),
        1 => prop_oneof![Just(i128::MAX - 1), Just(i128::MIN + 1), Just(1i128 << 100), Just(-(1i128 << 90))].prop_map(Some),
        1 => Just(None),
    ]
}

fn cell(kind: Kind) -> BoxedStrategy<Cell> {
    let spec = match kind {
        Kind::Equ => equ_value().prop_map(Cell::Val).boxed(),
        Kind::Int => (end(), end())
            .prop_map(|(a, b)| match (a, b) {
                (Some(a), Some(b)) => Cell::Range(Some(a.min(b)), Some(a.max(b))),
                (a, b) => Cell::Range(a, b),
            })
            .boxed(),
        // Dates stay within years the formats can write.
        Kind::Date => (prop::option::of(-400i128..400), prop::option::of(0i128..60))
            .prop_map(|(lo, len)| Cell::Range(lo, lo.zip(len).map(|(l, n)| l + n)))
            .boxed(),
    };
    prop_oneof![1 => Just(Cell::Any), 3 => spec].boxed()
}

/// Query values for a criterion: the rules' own values and boundaries (and one beside each),
/// plus values no rule names and values that are not values at all.
fn query_values(kind: Kind, rules: &[Vec<Cell>], c: usize) -> BoxedStrategy<String> {
    let mut named: Vec<String> = Vec::new();
    for r in rules {
        match &r[c] {
            Cell::Val(v) => named.extend([v.clone(), format!(" {v} "), format!("{v}Z")]),
            Cell::Range(lo, hi) => {
                for x in lo.iter().chain(hi.iter()) {
                    for d in [-1i128, 0, 1] {
                        if let Some(y) = x.checked_add(d) {
                            named.push(if kind == Kind::Date { date(DAY0 + y) } else { y.to_string() });
                        }
                    }
                }
            }
            Cell::Any => {}
        }
    }
    let odd: Vec<String> = match kind {
        Kind::Equ => vec!["", " ", "ZZZ", "é", "A B", "KLMNOPQRS", "0"],
        Kind::Int => vec![
            "",
            " 7 ",
            "+3",
            "-0",
            "x",
            "1e3",
            "170141183460469231731687303715884105727",
            "-170141183460469231731687303715884105728",
            "170141183460469231731687303715884105728",
            "99999999999999999999999999999999999999999",
            "007",
        ],
        Kind::Date => vec![
            "",
            "31FEB2026",
            "2026-13-01",
            "2026-02-29",
            "2024-02-29",
            "1JAN2026",
            "01jan2026",
            "xx",
            " 05MAR2026 ",
        ],
    }
    .into_iter()
    .map(String::from)
    .collect();
    let generic: BoxedStrategy<String> = match kind {
        Kind::Equ => equ_value().boxed(),
        Kind::Int => any::<i64>().prop_map(|v| v.to_string()).boxed(),
        Kind::Date => (-1000i128..1000).prop_map(|d| date(DAY0 + d)).boxed(),
    };
    let mut choices = vec![prop::sample::select(odd).boxed(), generic];
    if !named.is_empty() {
        choices.push(prop::sample::select(named.clone()).boxed());
        choices.push(prop::sample::select(named).boxed());
    }
    prop::strategy::Union::new(choices).boxed()
}

fn case() -> impl Strategy<Value = Case> {
    prop::collection::vec(prop_oneof![Just(Kind::Equ), Just(Kind::Int), Just(Kind::Date)], 1..6)
        .prop_flat_map(|kinds| {
            let rule: Vec<BoxedStrategy<Cell>> = kinds.iter().map(|&k| cell(k)).collect();
            (Just(kinds), prop::collection::vec(rule, 0..25))
        })
        .prop_flat_map(|(kinds, rules)| {
            let queries: Vec<_> = kinds
                .iter()
                .enumerate()
                .map(|(c, &k)| prop::collection::vec(query_values(k, &rules, c), 0..40))
                .collect();
            (Just(kinds), Just(rules), queries)
        })
        .prop_map(|(kinds, rules, mut queries)| {
            // One length for every column.
            let n = queries.iter().map(Vec::len).min().unwrap_or(0);
            queries.iter_mut().for_each(|q| q.truncate(n));
            Case { kinds, rules, queries }
        })
}

fn encoder(case: &Case) -> Encoder {
    let mut toml = String::from("code = \"T\"\n");
    for (i, k) in case.kinds.iter().enumerate() {
        let kind = match k {
            Kind::Equ => "equ",
            Kind::Int => "int_range",
            Kind::Date => "date_range",
        };
        toml += &format!("[[criterion]]\ncode = \"C{i}\"\nkind = \"{kind}\"\nmandatory = false\nweight = 1\n");
    }
    let mut csv = String::from("RULE_ID");
    for i in 0..case.kinds.len() {
        csv += &format!(",C{i}");
    }
    csv += ",CONTENT\n";
    for (r, rule) in case.rules.iter().enumerate() {
        csv += &format!("r{r}");
        for (c, cell) in rule.iter().enumerate() {
            let text = |v: &Option<i128>| match v {
                None => String::new(),
                Some(x) if case.kinds[c] == Kind::Date => date(DAY0 + x),
                Some(x) => x.to_string(),
            };
            csv += ",";
            csv += &match cell {
                Cell::Any => String::new(),
                Cell::Val(v) => v.clone(),
                Cell::Range(None, None) => "..".to_string(),
                Cell::Range(lo, hi) => format!("{}..{}", text(lo), text(hi)),
            };
        }
        csv += &format!(",{r}\n");
    }
    let rt = native::parse_rule_type(Path::new("t.toml"), &toml).unwrap();
    let rs = native::parse_rules(&rt, Path::new("r.csv"), &csv).unwrap_or_else(|e| panic!("{e}\n{csv}"));
    Encoder::new(Arc::new(rs))
}

/// Both encoders give the same result for the columns as text, packed text and (where every
/// value is one) integers, and value by value.
fn same_codes(a: &Encoder, b: &Encoder, case: &Case) -> Result<(), TestCaseError> {
    let strs: Vec<Vec<&str>> = case.queries.iter().map(|q| q.iter().map(String::as_str).collect()).collect();
    let text: Vec<RawColumn> = strs.iter().map(|q| RawColumn::Str(q.clone())).collect();
    prop_assert_eq!(a.encode_columns(&text), b.encode_columns(&text));
    let packed: Vec<(Vec<u8>, Vec<i64>)> = case
        .queries
        .iter()
        .map(|q| {
            let mut offsets = vec![0i64];
            let data: Vec<u8> = q.iter().flat_map(|v| v.bytes()).collect();
            q.iter().for_each(|v| offsets.push(offsets.last().unwrap() + v.len() as i64));
            (data, offsets)
        })
        .collect();
    let cols: Vec<RawColumn> =
        packed.iter().map(|(d, o)| RawColumn::Packed(PackedStrings::new(d, o).unwrap())).collect();
    prop_assert_eq!(a.encode_columns(&cols), b.encode_columns(&cols));
    let ints: Vec<Vec<i64>> =
        case.queries.iter().map(|q| q.iter().map(|v| v.trim().parse::<i64>().unwrap_or(-5)).collect()).collect();
    let cols: Vec<RawColumn> = ints.iter().map(|q| RawColumn::Int(q)).collect();
    prop_assert_eq!(a.encode_columns(&cols), b.encode_columns(&cols));
    for (c, q) in case.queries.iter().enumerate() {
        for v in q {
            prop_assert_eq!(a.encode_str(c, v), b.encode_str(c, v), "criterion {} value {:?}", c, v);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(64)))]

    #[test]
    fn dictionary_round_trip_encodes_alike(case in case()) {
        let a = encoder(&case);
        let d = a.dictionary();
        let bytes = d.to_bytes();
        let back = EncoderDictionary::from_bytes(&bytes).map_err(TestCaseError::fail)?;
        prop_assert_eq!(&back, &d);
        let b = Encoder::from_dictionary(back).map_err(TestCaseError::fail)?;
        prop_assert_eq!(b.width(), a.width());
        prop_assert!(b.encode_rules().is_empty());
        same_codes(&a, &b, &case)?;
        // The codes a query gets fit in the bits the dictionary says.
        if d.max_code_bits() == 16 {
            let text: Vec<RawColumn> =
                case.queries.iter().map(|q| RawColumn::Str(q.iter().map(String::as_str).collect())).collect();
            if let Ok(codes) = a.encode_columns(&text) {
                prop_assert!(codes.iter().all(|&c| c <= u16::MAX as u32));
            }
        }
    }

    #[test]
    fn from_bytes_never_panics_on_random_bytes(bytes in prop::collection::vec(any::<u8>(), 0..200), magic in any::<bool>()) {
        let mut bytes = bytes;
        if magic && bytes.len() >= 6 {
            bytes[..6].copy_from_slice(b"OFED\x01\x00");
        }
        if let Ok(d) = EncoderDictionary::from_bytes(&bytes) {
            prop_assert_eq!(d.to_bytes(), bytes);
        }
    }

    #[test]
    fn from_bytes_never_panics_on_damaged_dictionaries(
        case in case(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        cut in any::<prop::sample::Index>(),
    ) {
        let bytes = encoder(&case).dictionary().to_bytes();
        // Every truncation is refused.
        for n in 0..bytes.len() {
            prop_assert!(EncoderDictionary::from_bytes(&bytes[..n]).is_err());
        }
        let mut damaged = bytes.clone();
        for (at, v) in &flips {
            let i = at.index(damaged.len());
            damaged[i] = *v;
        }
        damaged.truncate(cut.index(damaged.len() + 1).max(damaged.len() / 2));
        if let Ok(d) = EncoderDictionary::from_bytes(&damaged) {
            prop_assert_eq!(d.to_bytes(), damaged.clone());
            prop_assert!(Encoder::from_dictionary(d).is_ok());
        }
    }
}
