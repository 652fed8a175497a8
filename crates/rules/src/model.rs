//! The rule model: a rule type (criteria with kind, weight and mandatory flag) and a validated,
//! column-oriented rule set. Both loaders (ERBIUM and native) produce a [`RuleSet`].

use crate::error::{ErrorKind, LoadError, Location};
use crate::value::format_date;
use rustc_hash::FxHashMap;
use std::path::Path;

/// How a criterion compares a query value with a rule value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CriterionKind {
    /// Equal strings match; an empty rule cell is a wildcard.
    Equ,
    /// Inclusive integer range `lo/hi` (ERBIUM) or `lo..hi` (native); a query is one integer.
    IntRange,
    /// Inclusive date range; a query is one date.
    DateRange,
}

impl CriterionKind {
    pub fn is_range(self) -> bool {
        !matches!(self, CriterionKind::Equ)
    }
    pub fn as_str(self) -> &'static str {
        match self {
            CriterionKind::Equ => "equ",
            CriterionKind::IntRange => "int_range",
            CriterionKind::DateRange => "date_range",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Criterion {
    pub code: String,
    pub kind: CriterionKind,
    pub mandatory: bool,
    /// Added to a rule's score when the rule is specific (not a wildcard) on this criterion.
    pub weight: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleType {
    pub code: String,
    pub description: String,
    /// In column order (ERBIUM: sequenceNumber order).
    pub criteria: Vec<Criterion>,
}

impl RuleType {
    pub fn index_of(&self, code: &str) -> Option<usize> {
        self.criteria.iter().position(|c| c.code == code)
    }

    /// Maps the criterion columns `columns` of a CSV header to criteria: the result's `[c]` is
    /// the field index holding criterion `c`. Every criterion must appear exactly once and
    /// every column in `columns` must be a criterion. Shared by every CSV reader (rules in
    /// both formats, queries) so they report header problems alike.
    pub fn criterion_columns(
        &self,
        path: &Path,
        header: &crate::csv::Record<'_>,
        columns: std::ops::Range<usize>,
    ) -> Result<Vec<usize>, LoadError> {
        let mut col_of = vec![usize::MAX; self.criteria.len()];
        for i in columns {
            let f = &header.fields[i];
            let name = f.text.trim();
            let at = Location::at(path, header.line, f.column);
            let Some(c) = self.index_of(name) else {
                return Err(LoadError::new(
                    ErrorKind::UnknownCriterion,
                    at,
                    format!("column {name:?} is not a criterion of rule type {}", self.code),
                )
                .expected(format!(
                    "one of {}",
                    self.criteria.iter().map(|c| c.code.as_str()).collect::<Vec<_>>().join(", ")
                )));
            };
            if col_of[c] != usize::MAX {
                return Err(LoadError::new(ErrorKind::DuplicateCriterion, at, format!("column {name} appears twice"))
                    .expected("each criterion once"));
            }
            col_of[c] = i;
        }
        if let Some(c) = col_of.iter().position(|&i| i == usize::MAX) {
            return Err(LoadError::new(
                ErrorKind::MissingColumn,
                Location::at(path, header.line, 1),
                format!("the header has no column for criterion {}", self.criteria[c].code),
            )
            .expected("one column per criterion of the rule type"));
        }
        Ok(col_of)
    }
}

/// Interns the distinct strings of an equality criterion. Code 0 is reserved: in a rule it is
/// the wildcard, in a query it is "a value no rule names", which only wildcards match.
#[derive(Debug, Clone, Default)]
pub struct Dictionary {
    values: Vec<Box<str>>,
    /// Values of at most [`SHORT`] bytes, packed into an integer: most codes (airports,
    /// carriers, countries, flight numbers) are short, and an integer key hashes and compares
    /// several times faster than a string. Longer values live in `long`.
    short: FxHashMap<u64, u32>,
    long: FxHashMap<Box<str>, u32>,
}

/// Longest value kept in [`Dictionary`]'s packed map.
const SHORT: usize = 7;

/// Packs up to [`SHORT`] bytes and the length into a u64 (unique per string).
#[inline]
fn pack(v: &[u8]) -> u64 {
    // A shift per byte: a variable-length copy into a word calls memcpy and measured 2x slower.
    let mut k = (v.len() as u64) << 56;
    for (i, &b) in v.iter().enumerate() {
        k |= (b as u64) << (8 * i);
    }
    k
}

/// Longest value kept in [`Dictionary`]'s packed map, public so that callers know which values
/// have a [`Dictionary::short_key`].
pub const SHORT_KEY_MAX: usize = SHORT;

impl Dictionary {
    /// The [`Dictionary::short_key`] of a value of `len <= 7` bytes held in the low bytes of
    /// `word` (first byte lowest, as `u64::from_le_bytes` reads them); the bytes past `len` are
    /// ignored. A caller that can read 8 bytes at once skips the byte-by-byte packing.
    #[inline]
    pub fn short_key_of_word(word: u64, len: usize) -> u64 {
        debug_assert!(len <= SHORT);
        // 8 * len <= 56, so the shift cannot overflow and no branch is needed.
        (word & ((1u64 << (8 * len)) - 1)) | (len as u64) << 56
    }
    pub fn intern(&mut self, v: &str) -> u32 {
        let c = self.code(v);
        if c != 0 {
            return c;
        }
        self.values.push(v.into());
        let c = self.values.len() as u32;
        if v.len() <= SHORT {
            self.short.insert(pack(v.as_bytes()), c);
        } else {
            self.long.insert(v.into(), c);
        }
        c
    }
    /// `v` packed into an integer key when it is short enough (most codes are): equal keys are
    /// equal values, so a caller can compare keys before looking one up.
    #[inline]
    pub fn short_key(v: &str) -> Option<u64> {
        (v.len() <= SHORT).then(|| pack(v.as_bytes()))
    }
    /// The code of a value given by its [`Dictionary::short_key`].
    #[inline]
    pub fn code_of_key(&self, key: u64) -> u32 {
        self.short.get(&key).copied().unwrap_or(0)
    }
    /// Every value with a [`Dictionary::short_key`], as (key, code).
    pub fn short_entries(&self) -> Vec<(u64, u32)> {
        self.short.iter().map(|(&k, &c)| (k, c)).collect()
    }
    /// The code of `v`, or 0 when no rule names it.
    #[inline]
    pub fn code(&self, v: &str) -> u32 {
        if v.len() <= SHORT {
            self.short.get(&pack(v.as_bytes())).copied().unwrap_or(0)
        } else {
            self.long.get(v).copied().unwrap_or(0)
        }
    }
    /// The string of a non-zero code.
    pub fn value(&self, code: u32) -> Option<&str> {
        code.checked_sub(1).and_then(|i| self.values.get(i as usize)).map(|b| &**b)
    }
    pub fn len(&self) -> usize {
        self.values.len()
    }
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
    pub fn memory_bytes(&self) -> usize {
        self.values.iter().map(|v| 2 * v.len() + 48).sum::<usize>() + self.values.capacity() * 16
    }
}

/// The values of one criterion for every rule.
#[derive(Debug, Clone)]
pub enum Column {
    /// Dictionary codes, 0 = wildcard.
    Equ { dict: Dictionary, codes: Vec<u32> },
    /// Inclusive bounds; `None` = wildcard. Dates are day numbers (days since 1970-01-01).
    Range { bounds: Vec<Option<(i128, i128)>> },
}

/// One cell of a rule while it is being loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cell<'a> {
    Any,
    Value(&'a str),
    Range(i128, i128),
}

/// A validated rule set, stored column by column. Rule `i` is the i-th rule of the input:
/// input order breaks score ties.
#[derive(Debug, Clone)]
pub struct RuleSet {
    pub rule_type: RuleType,
    pub ids: Vec<String>,
    pub contents: Vec<i64>,
    pub columns: Vec<Column>,
    /// Line of each rule in its source file (for explanations and error messages).
    pub lines: Vec<u64>,
    pub source: String,
}

impl RuleSet {
    pub fn len(&self) -> usize {
        self.ids.len()
    }
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
    pub fn n_criteria(&self) -> usize {
        self.rule_type.criteria.len()
    }

    /// Whether rule `r` is specific (not a wildcard) on criterion `c`.
    pub fn is_specific(&self, r: usize, c: usize) -> bool {
        match &self.columns[c] {
            Column::Equ { codes, .. } => codes[r] != 0,
            Column::Range { bounds } => bounds[r].is_some(),
        }
    }

    /// Score of rule `r`: the sum of the weights of its non-wildcard criteria. u128 so that any
    /// u64 weights add up exactly.
    pub fn score(&self, r: usize) -> u128 {
        (0..self.n_criteria())
            .filter(|&c| self.is_specific(r, c))
            .map(|c| self.rule_type.criteria[c].weight as u128)
            .sum()
    }

    /// The rule's value on criterion `c` as text ("" for a wildcard), in the native format.
    pub fn cell_text(&self, r: usize, c: usize) -> String {
        match &self.columns[c] {
            Column::Equ { dict, codes } => dict.value(codes[r]).unwrap_or("").to_string(),
            Column::Range { bounds } => match bounds[r] {
                None => String::new(),
                Some((lo, hi)) => {
                    let date = self.rule_type.criteria[c].kind == CriterionKind::DateRange;
                    // Open ends are stored as i128::MIN / i128::MAX and printed as `lo..` / `..hi`.
                    let end = |v: i128, open: i128| match (v == open, date) {
                        (true, _) => String::new(),
                        (false, true) => format_date(v),
                        (false, false) => v.to_string(),
                    };
                    if lo == hi {
                        end(lo, i128::MIN)
                    } else {
                        format!("{}..{}", end(lo, i128::MIN), end(hi, i128::MAX))
                    }
                }
            },
        }
    }

    /// Approximate heap bytes held (for `compile` reports).
    pub fn memory_bytes(&self) -> usize {
        let cols: usize = self
            .columns
            .iter()
            .map(|c| match c {
                Column::Equ { dict, codes } => dict.memory_bytes() + codes.len() * 4,
                Column::Range { bounds } => bounds.len() * 48,
            })
            .sum();
        cols + self.ids.iter().map(|s| s.len() + 24).sum::<usize>() + self.len() * 16
    }
}

/// Builds a [`RuleSet`] rule by rule, checking what every loader must check.
pub struct RuleSetBuilder {
    set: RuleSet,
    id_lines: FxHashMap<String, u64>,
}

impl RuleSetBuilder {
    pub fn new(rule_type: RuleType, source: &Path) -> Self {
        let columns = rule_type
            .criteria
            .iter()
            .map(|c| match c.kind {
                CriterionKind::Equ => Column::Equ { dict: Dictionary::default(), codes: Vec::new() },
                _ => Column::Range { bounds: Vec::new() },
            })
            .collect();
        RuleSetBuilder {
            set: RuleSet {
                rule_type,
                ids: Vec::new(),
                contents: Vec::new(),
                columns,
                lines: Vec::new(),
                source: source.display().to_string(),
            },
            id_lines: FxHashMap::default(),
        }
    }

    /// Adds one rule. `cells[c]` is the rule's cell for criterion `c` and `cell_loc(c)` where it
    /// is in the file. Nothing is added when an error is returned.
    pub fn push(
        &mut self,
        id: &str,
        id_loc: Location,
        cells: &[Cell<'_>],
        cell_loc: impl Fn(usize) -> Location,
        content: i64,
    ) -> Result<(), LoadError> {
        debug_assert_eq!(cells.len(), self.set.columns.len());
        if let Some(&first) = self.id_lines.get(id) {
            return Err(LoadError::new(
                ErrorKind::DuplicateRuleId,
                id_loc,
                format!("rule id {id:?} was already used on line {first}"),
            )
            .expected("a RULE_ID that is unique in the file"));
        }
        for (c, cell) in cells.iter().enumerate() {
            let crit = &self.set.rule_type.criteria[c];
            if crit.mandatory && *cell == Cell::Any {
                return Err(LoadError::new(
                    ErrorKind::MandatoryWildcard,
                    cell_loc(c),
                    format!("criterion {} is mandatory but this rule leaves it empty (a wildcard)", crit.code),
                )
                .expected(format!("a value for {}", crit.code)));
            }
            if let Cell::Range(lo, hi) = cell {
                if lo > hi {
                    return Err(LoadError::new(
                        ErrorKind::ReversedRange,
                        cell_loc(c),
                        format!("range of {} starts after it ends", crit.code),
                    )
                    .expected("lower bound <= upper bound"));
                }
            }
        }
        for (c, cell) in cells.iter().enumerate() {
            match (&mut self.set.columns[c], cell) {
                (Column::Equ { codes, .. }, Cell::Any) => codes.push(0),
                (Column::Equ { dict, codes }, Cell::Value(v)) => codes.push(dict.intern(v)),
                (Column::Range { bounds }, Cell::Any) => bounds.push(None),
                (Column::Range { bounds }, Cell::Range(lo, hi)) => bounds.push(Some((*lo, *hi))),
                _ => unreachable!("loader produced a cell of the wrong kind for criterion {c}"),
            }
        }
        let line = id_loc.line.unwrap_or(0);
        self.id_lines.insert(id.to_string(), line);
        self.set.ids.push(id.to_string());
        self.set.contents.push(content);
        self.set.lines.push(line);
        Ok(())
    }

    pub fn finish(self) -> RuleSet {
        self.set
    }
}
