//! The encoder's dictionary: exactly what a client needs to encode query values as an
//! [`Encoder`] does, without the rules. A service sends it to its clients (`offload serve`'s
//! dictionary request), which rebuild an encoder with [`Encoder::from_dictionary`] and send
//! codes instead of text.
//!
//! It holds the rule type's criteria in column order (code and kind: the kind decides how a
//! value is parsed), each equality criterion's values in code order (value `i` has code
//! `i + 1`; 0 stays "a value no rule names"), each range criterion's sorted boundaries (a value's
//! code is the number of boundaries `<=` it), and the row width.
//!
//! # Binary format, version 1
//!
//! Little-endian throughout; a string is `u32 length` + UTF-8 bytes.
//!
//! | field | type | meaning |
//! |---|---|---|
//! | magic | 4 bytes | `OFED` |
//! | format | u16 | 1 |
//! | rule_type | string | the rule type's code |
//! | width | u16 | codes per encoded row (criteria padded to a multiple of [`LANES`]) |
//! | n_criteria | u16 | criteria, in column order, each: |
//! | · code | string | the criterion's code |
//! | · kind | u8 | 0 equ, 1 int_range, 2 date_range |
//! | · n | u32 | equ: values; range: boundaries |
//! | · entries | n × string, or n × i128 | equ: the values in code order (distinct); range: the boundaries (strictly increasing) |
//!
//! Nothing may follow. [`EncoderDictionary::from_bytes`] checks every length against the bytes
//! left before it allocates, and every rule above, and never panics (fuzzed by proptest).

use crate::encode::{Encoder, LANES};
use crate::model::{Column, Criterion, CriterionKind, Dictionary, RuleSet, RuleType};
use rustc_hash::FxHashSet;
use std::sync::Arc;

/// The magic of the binary format.
pub const MAGIC: &[u8; 4] = b"OFED";
/// The format version [`EncoderDictionary::to_bytes`] writes and `from_bytes` reads.
pub const FORMAT: u16 = 1;

/// One criterion of an [`EncoderDictionary`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DictionaryCriterion {
    pub code: String,
    pub kind: CriterionKind,
    /// Equality criteria: the values in code order (value `i` has code `i + 1`); empty for
    /// range criteria.
    pub values: Vec<String>,
    /// Range criteria: the boundaries, strictly increasing; empty for equality criteria.
    pub bounds: Vec<i128>,
}

impl DictionaryCriterion {
    /// The largest code a query value can get on this criterion.
    pub fn max_code(&self) -> usize {
        if self.kind.is_range() {
            self.bounds.len()
        } else {
            self.values.len()
        }
    }
}

/// What a client needs to encode queries as the [`Encoder`] it came from ([`Encoder::dictionary`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncoderDictionary {
    /// The rule type's code.
    pub rule_type: String,
    /// Codes per encoded row.
    pub width: usize,
    /// In column order.
    pub criteria: Vec<DictionaryCriterion>,
}

/// The row width of `n` criteria (what [`Encoder`] uses).
fn width_of(n: usize) -> usize {
    n.div_ceil(LANES).max(1) * LANES
}

impl Encoder {
    /// This encoder's dictionary: the criteria, equality values in code order, range boundaries.
    pub fn dictionary(&self) -> EncoderDictionary {
        let rs = self.rules();
        let criteria = rs
            .rule_type
            .criteria
            .iter()
            .zip(&rs.columns)
            .enumerate()
            .map(|(c, (crit, col))| DictionaryCriterion {
                code: crit.code.clone(),
                kind: crit.kind,
                values: match col {
                    Column::Equ { dict, .. } => {
                        (1..=dict.len() as u32).map(|code| dict.value(code).unwrap_or("").to_string()).collect()
                    }
                    Column::Range { .. } => Vec::new(),
                },
                bounds: self.bounds(c).to_vec(),
            })
            .collect();
        EncoderDictionary { rule_type: rs.rule_type.code.clone(), width: self.width(), criteria }
    }

    /// An encoder that gives every query value the code the dictionary's encoder gave it (the
    /// same errors too). It holds a rule set with the dictionary's criteria and no rules: encoding
    /// works as usual, and [`Encoder::encode_rules`] gives no rules.
    pub fn from_dictionary(d: EncoderDictionary) -> Result<Encoder, String> {
        d.check()?;
        let mut columns = Vec::with_capacity(d.criteria.len());
        let mut bounds = Vec::with_capacity(d.criteria.len());
        let mut criteria = Vec::with_capacity(d.criteria.len());
        for c in d.criteria {
            columns.push(if c.kind.is_range() {
                Column::Range { bounds: Vec::new() }
            } else {
                let mut dict = Dictionary::default();
                for v in &c.values {
                    dict.intern(v);
                }
                Column::Equ { dict, codes: Vec::new() }
            });
            bounds.push(c.bounds);
            criteria.push(Criterion { code: c.code, kind: c.kind, mandatory: false, weight: 0 });
        }
        let rules = RuleSet {
            rule_type: RuleType { code: d.rule_type, description: String::new(), criteria },
            ids: Vec::new(),
            contents: Vec::new(),
            columns,
            lines: Vec::new(),
            source: "<encoder dictionary>".to_string(),
        };
        Ok(Encoder::with_bounds(Arc::new(rules), bounds))
    }
}

impl EncoderDictionary {
    /// The criterion codes in column order (what a request's criteria fingerprint is of).
    pub fn criterion_codes(&self) -> Vec<&str> {
        self.criteria.iter().map(|c| c.code.as_str()).collect()
    }

    /// 16 when every code a query can get, on every criterion, fits in a u16; else 32.
    pub fn max_code_bits(&self) -> u8 {
        if self.criteria.iter().all(|c| c.max_code() <= u16::MAX as usize) {
            16
        } else {
            32
        }
    }

    /// Checks what [`Encoder::from_dictionary`] relies on: the width of the criteria, equality
    /// values distinct and range boundaries strictly increasing, each in its own kind of
    /// criterion, and every code within a u32.
    pub fn check(&self) -> Result<(), String> {
        let n = self.criteria.len();
        if self.width != width_of(n) {
            return Err(format!("width {} for {n} criteria (expected {})", self.width, width_of(n)));
        }
        for (i, c) in self.criteria.iter().enumerate() {
            let what = || format!("criterion {i} ({:?})", c.code);
            if c.kind.is_range() && !c.values.is_empty() {
                return Err(format!("{}: a range criterion with equality values", what()));
            }
            if !c.kind.is_range() && !c.bounds.is_empty() {
                return Err(format!("{}: an equality criterion with range boundaries", what()));
            }
            if c.max_code() >= u32::MAX as usize {
                return Err(format!("{}: {} codes do not fit in a u32", what(), c.max_code()));
            }
            if let Some(k) = c.bounds.windows(2).position(|w| w[0] >= w[1]) {
                return Err(format!("{}: boundaries {k} and {} are not increasing", what(), k + 1));
            }
            let mut seen = FxHashSet::default();
            if let Some(v) = c.values.iter().find(|v| !seen.insert(v.as_str())) {
                return Err(format!("{}: value {v:?} appears twice", what()));
            }
        }
        Ok(())
    }

    /// The binary format (module documentation).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.criteria.iter().map(|c| 16 * c.max_code()).sum::<usize>());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&FORMAT.to_le_bytes());
        put_str(&mut out, &self.rule_type);
        out.extend_from_slice(&(self.width as u16).to_le_bytes());
        out.extend_from_slice(&(self.criteria.len() as u16).to_le_bytes());
        for c in &self.criteria {
            put_str(&mut out, &c.code);
            out.push(match c.kind {
                CriterionKind::Equ => 0,
                CriterionKind::IntRange => 1,
                CriterionKind::DateRange => 2,
            });
            if c.kind.is_range() {
                out.extend_from_slice(&(c.bounds.len() as u32).to_le_bytes());
                for b in &c.bounds {
                    out.extend_from_slice(&b.to_le_bytes());
                }
            } else {
                out.extend_from_slice(&(c.values.len() as u32).to_le_bytes());
                for v in &c.values {
                    put_str(&mut out, v);
                }
            }
        }
        out
    }

    /// Reads the binary format, checking it whole ([`EncoderDictionary::check`] included).
    pub fn from_bytes(bytes: &[u8]) -> Result<EncoderDictionary, String> {
        let mut r = Reader { b: bytes, at: 0 };
        if r.take(4, "magic")? != MAGIC {
            return Err(format!("not an encoder dictionary (magic {:?}, expected \"OFED\")", &bytes[..4]));
        }
        let format = r.u16("format")?;
        if format != FORMAT {
            return Err(format!("dictionary format {format}, this build reads format {FORMAT}"));
        }
        let rule_type = r.string("rule type")?;
        let width = r.u16("width")? as usize;
        let n = r.u16("n_criteria")? as usize;
        let mut criteria = Vec::with_capacity(n.min(r.left() / 9));
        for i in 0..n {
            let code = r.string("criterion code")?;
            let at = r.at;
            let kind = match r.u8("kind")? {
                0 => CriterionKind::Equ,
                1 => CriterionKind::IntRange,
                2 => CriterionKind::DateRange,
                k => return Err(format!("criterion {i} at byte {at}: kind {k} (expected 0, 1 or 2)")),
            };
            let count = r.u32("entry count")? as usize;
            let (mut values, mut bounds) = (Vec::new(), Vec::new());
            if kind.is_range() {
                r.need(count.saturating_mul(16), "boundaries")?;
                bounds.reserve(count);
                for _ in 0..count {
                    bounds.push(i128::from_le_bytes(r.array("boundary")?));
                }
            } else {
                r.need(count.saturating_mul(4), "values")?;
                values.reserve(count);
                for _ in 0..count {
                    values.push(r.string("value")?);
                }
            }
            criteria.push(DictionaryCriterion { code, kind, values, bounds });
        }
        if r.left() != 0 {
            return Err(format!("{} bytes after the dictionary's end (byte {})", r.left(), r.at));
        }
        let d = EncoderDictionary { rule_type, width, criteria };
        d.check()?;
        Ok(d)
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// A bounds-checked cursor: every read says what was missing and where.
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn left(&self) -> usize {
        self.b.len() - self.at
    }
    fn need(&self, n: usize, what: &str) -> Result<(), String> {
        if n > self.left() {
            return Err(format!("truncated at byte {}: {what} need {n} bytes, {} left", self.at, self.left()));
        }
        Ok(())
    }
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        self.need(n, what)?;
        let s = &self.b[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }
    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], String> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, what)?);
        Ok(a)
    }
    fn u8(&mut self, what: &str) -> Result<u8, String> {
        Ok(self.array::<1>(what)?[0])
    }
    fn u16(&mut self, what: &str) -> Result<u16, String> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }
    fn u32(&mut self, what: &str) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    fn string(&mut self, what: &str) -> Result<String, String> {
        let n = self.u32(what)? as usize;
        let at = self.at;
        let b = self.take(n, what)?;
        String::from_utf8(b.to_vec()).map_err(|e| format!("{what} at byte {at} is not UTF-8: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::native;
    use std::path::Path;

    fn encoder() -> Encoder {
        let rt = native::parse_rule_type(
            Path::new("t.toml"),
            "code = \"T\"\n[[criterion]]\ncode = \"A\"\nkind = \"equ\"\nmandatory = false\nweight = 1\n\
             [[criterion]]\ncode = \"N\"\nkind = \"int_range\"\nmandatory = false\nweight = 1\n\
             [[criterion]]\ncode = \"D\"\nkind = \"date_range\"\nmandatory = false\nweight = 1\n",
        )
        .unwrap();
        let csv = "RULE_ID,A,N,D,CONTENT\nr0,LHR,1..10,01JAN2026..31JAN2026,1\nr1,CDG,..5,,2\nr2,,20..,,3\n";
        Encoder::new(Arc::new(native::parse_rules(&rt, Path::new("r.csv"), csv).unwrap()))
    }

    #[test]
    fn round_trip_and_codes() {
        let e = encoder();
        let d = e.dictionary();
        assert_eq!(d.criterion_codes(), ["A", "N", "D"]);
        assert_eq!(d.criteria[0].values, ["LHR", "CDG"]);
        assert_eq!(d.criteria[1].bounds, [i128::MIN, 1, 6, 11, 20]);
        assert_eq!(d.width, 8);
        assert_eq!(d.max_code_bits(), 16);
        let back = EncoderDictionary::from_bytes(&d.to_bytes()).unwrap();
        assert_eq!(back, d);
        let e2 = Encoder::from_dictionary(back).unwrap();
        assert_eq!(e2.width(), e.width());
        assert!(e2.encode_rules().is_empty());
        for c in 0..3 {
            assert_eq!(e2.cardinality(c), e.cardinality(c));
        }
    }

    #[test]
    fn code_bits_follow_the_largest_criterion() {
        let mut d = encoder().dictionary();
        d.criteria[0].values = (0..65_535).map(|i| i.to_string()).collect();
        assert_eq!(d.max_code_bits(), 16);
        d.criteria[0].values.push("x".into());
        assert_eq!(d.max_code_bits(), 32);
        d.criteria[0].values.pop();
        d.criteria[1].bounds = (0..65_536).collect();
        assert_eq!(d.max_code_bits(), 32);
    }

    #[test]
    fn bad_dictionaries_are_refused() {
        let d = encoder().dictionary();
        let mut dup = d.clone();
        dup.criteria[0].values.push("LHR".into());
        assert!(Encoder::from_dictionary(dup.clone()).unwrap_err().contains("appears twice"));
        assert!(EncoderDictionary::from_bytes(&dup.to_bytes()).unwrap_err().contains("appears twice"));
        let mut unsorted = d.clone();
        unsorted.criteria[1].bounds.swap(1, 2);
        assert!(Encoder::from_dictionary(unsorted).unwrap_err().contains("not increasing"));
        let mut wide = d.clone();
        wide.width = 16;
        assert!(Encoder::from_dictionary(wide).unwrap_err().contains("width"));
        let bytes = d.to_bytes();
        assert!(EncoderDictionary::from_bytes(&bytes[..bytes.len() - 1]).unwrap_err().contains("truncated"));
        let mut more = bytes.clone();
        more.push(0);
        assert!(EncoderDictionary::from_bytes(&more).unwrap_err().contains("after the dictionary"));
        assert!(EncoderDictionary::from_bytes(b"OFQ2").unwrap_err().contains("magic"));
        assert!(EncoderDictionary::from_bytes(b"").unwrap_err().contains("truncated"));
        let mut v2 = bytes;
        v2[4] = 2;
        assert!(EncoderDictionary::from_bytes(&v2).unwrap_err().contains("format 2"));
    }
}
