//! Encoding: raw values become u32 codes so every matcher works on one fixed-width row of
//! integers per query.
//!
//! * Equality criteria: the dictionary code of the value (0 = a value no rule names).
//! * Range criteria: the rank of the value among the rule set's range boundaries (its
//!   elementary interval). A rule range `[lo, hi]` becomes the code interval
//!   `[rank(lo), rank(hi)]`, and `lo <= v <= hi` holds exactly when
//!   `rank(lo) <= rank(v) <= rank(hi)`, because every `lo` and every `hi + 1` is a boundary.
//!
//! So a rule is, for every criterion, an inclusive code interval (`[c, c]` for a value,
//! `[0, u32::MAX]` for a wildcard), and a query matches a rule when each of its codes lies in
//! the rule's interval. Rows are padded to a multiple of [`LANES`] with always-true columns so
//! the row test vectorises.

use crate::model::{Column, CriterionKind, Dictionary, RuleSet, SHORT_KEY_MAX};
use crate::phf::ShortTable;
use crate::value::{parse_date, parse_date_exact, parse_int, parse_int_word, ValueError};
use std::sync::Arc;

/// Trims ASCII spaces only when present (the common case has none).
#[inline]
fn trim_ascii(v: &str) -> &str {
    match v.as_bytes() {
        [b' ', ..] | [.., b' '] => v.trim(),
        _ => v,
    }
}

/// Row width granularity (eight u32 = one 256-bit vector).
pub const LANES: usize = 8;

/// Per-criterion encoding state derived from a [`RuleSet`].
#[derive(Debug, Clone)]
pub struct Encoder {
    rules: Arc<RuleSet>,
    /// For range criteria: sorted distinct boundaries (every lo and every hi+1); empty for equ.
    bounds: Vec<Vec<i128>>,
    /// For range criteria whose boundaries span a small interval (flight numbers, dates): the
    /// rank of every value in `[first, last)` boundary, so encoding is one table read.
    rank_tables: Vec<Option<RankTable>>,
    /// For equality criteria: a perfect hash of the dictionary's short keys, so looking up a
    /// query value never branches on whether it is known (None: the dictionary's own map).
    short_tables: Vec<Option<ShortTable>>,
    width: usize,
}

/// `ranks[v - base]` = rank of `v`, for `base <= v < base + ranks.len()`.
#[derive(Debug, Clone)]
struct RankTable {
    base: i128,
    ranks: Vec<u32>,
}

/// Largest span of boundaries given a direct rank table (4 M entries = 16 MB at most).
const RANK_TABLE_MAX: i128 = 1 << 22;

/// Error while encoding a query value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryError {
    /// 0-based query index within the batch.
    pub row: usize,
    pub criterion: String,
    pub value: String,
    pub message: String,
}

impl std::fmt::Display for QueryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "query {} criterion {}: {:?}: {}", self.row, self.criterion, self.value, self.message)
    }
}
impl std::error::Error for QueryError {}

/// A column of raw query values, as the caller has them.
pub enum RawColumn<'a> {
    /// Text: equality values, integers, or dates (DDMMMYYYY or YYYY-MM-DD).
    Str(Vec<&'a str>),
    /// Text stored back to back (Arrow's string layout): no per-value allocation, read
    /// sequentially.
    Packed(PackedStrings<'a>),
    /// Integers for an int-range criterion, or day numbers (days since 1970-01-01) for a
    /// date-range criterion.
    Int(&'a [i64]),
}

impl RawColumn<'_> {
    pub fn len(&self) -> usize {
        match self {
            RawColumn::Str(v) => v.len(),
            RawColumn::Packed(p) => p.len(),
            RawColumn::Int(v) => v.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Strings stored back to back: value `i` is `data[offsets[i]..offsets[i + 1]]` (the layout of
/// an Arrow `large_string` array, so Arrow data is read without a copy).
#[derive(Debug, Clone, Copy)]
pub struct PackedStrings<'a> {
    /// The bytes from `offsets[0]` on (validated UTF-8).
    data: &'a str,
    offsets: &'a [i64],
    base: i64,
}

impl<'a> PackedStrings<'a> {
    /// Checks the layout once (offsets non-decreasing, inside `data`, on character boundaries)
    /// so reading a value can never fail.
    pub fn new(data: &'a [u8], offsets: &'a [i64]) -> Result<Self, String> {
        let (Some(&first), Some(&last)) = (offsets.first(), offsets.last()) else {
            return Err("offsets must hold at least one entry (n + 1 for n strings)".into());
        };
        if first < 0 || last < first || last as usize > data.len() {
            return Err(format!("offsets {first}..{last} fall outside the {} data bytes", data.len()));
        }
        if offsets.windows(2).any(|w| w[1] < w[0]) {
            return Err("offsets must not decrease".into());
        }
        let text = std::str::from_utf8(&data[first as usize..last as usize])
            .map_err(|e| format!("string data is not UTF-8: {e}"))?;
        let base = first as usize;
        if offsets.iter().any(|&o| !text.is_char_boundary(o as usize - base)) {
            return Err("an offset splits a UTF-8 character".into());
        }
        Ok(PackedStrings { data: text, offsets, base: first })
    }
    pub fn len(&self) -> usize {
        self.offsets.len() - 1
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    #[inline]
    pub fn get(&self, i: usize) -> &'a str {
        &self.data[(self.offsets[i] - self.base) as usize..(self.offsets[i + 1] - self.base) as usize]
    }
}

/// An owned column of strings in the packed layout (what the query-file reader builds).
#[derive(Debug, Clone, Default)]
pub struct StringColumn {
    data: String,
    offsets: Vec<i64>,
}

impl StringColumn {
    pub fn push(&mut self, v: &str) {
        if self.offsets.is_empty() {
            self.offsets.push(0);
        }
        self.data.push_str(v);
        self.offsets.push(self.data.len() as i64);
    }
    pub fn len(&self) -> usize {
        self.offsets.len().saturating_sub(1)
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn get(&self, i: usize) -> &str {
        &self.data[self.offsets[i] as usize..self.offsets[i + 1] as usize]
    }
    pub fn iter(&self) -> impl Iterator<Item = &str> {
        (0..self.len()).map(|i| self.get(i))
    }
    pub fn as_raw(&self) -> RawColumn<'_> {
        if self.offsets.is_empty() {
            return RawColumn::Str(Vec::new());
        }
        RawColumn::Packed(PackedStrings { data: &self.data, offsets: &self.offsets, base: 0 })
    }
}

/// One raw text value as the batch encoder reads it: its first bytes as one word where the
/// layout allows, the `&str` only when a value is not short.
trait RawText<'v>: Copy {
    fn len(self) -> usize;
    /// The first 8 bytes, first byte lowest; bytes past the value's end are arbitrary.
    fn head(self) -> u64;
    /// The last 8 bytes of a value of at least 8 bytes.
    fn tail(self) -> u64;
    fn text(self) -> &'v str;
}

/// Up to 8 bytes of `b` from `at`, first byte lowest: one load when 8 bytes are there, else a
/// byte at a time (only the last values of a column, or short `&str`s).
#[inline]
fn load8(b: &[u8], at: usize) -> u64 {
    match b.get(at..at + 8) {
        Some(w) => u64::from_le_bytes(w.try_into().expect("8 bytes")),
        None => b[at.min(b.len())..].iter().rev().fold(0u64, |k, &x| k << 8 | x as u64),
    }
}

impl<'v> RawText<'v> for &'v str {
    #[inline]
    fn len(self) -> usize {
        str::len(self)
    }
    #[inline]
    fn head(self) -> u64 {
        load8(self.as_bytes(), 0)
    }
    #[inline]
    fn tail(self) -> u64 {
        load8(self.as_bytes(), self.len().saturating_sub(8))
    }
    #[inline]
    fn text(self) -> &'v str {
        self
    }
}

/// Value `data[start..end]` of a packed column: reading past its end reads the next values,
/// which is harmless (those bytes are masked off) and lets most values load in one go.
#[derive(Clone, Copy)]
struct PackedValue<'v> {
    data: &'v str,
    start: usize,
    end: usize,
}

impl<'v> RawText<'v> for PackedValue<'v> {
    #[inline]
    fn len(self) -> usize {
        self.end - self.start
    }
    #[inline]
    fn head(self) -> u64 {
        load8(self.data.as_bytes(), self.start)
    }
    #[inline]
    fn tail(self) -> u64 {
        load8(self.data.as_bytes(), self.end.saturating_sub(8))
    }
    #[inline]
    fn text(self) -> &'v str {
        &self.data[self.start..self.end]
    }
}

/// Whether a value of `len <= 7` bytes whose first bytes are `head` starts or ends with a space
/// (and so needs trimming). For len 0 it looks at some other byte: at worst the general path
/// is taken, which gives the same code.
#[inline]
fn has_end_space(head: u64, len: usize) -> bool {
    head as u8 == b' ' || (head >> ((8 * len).wrapping_sub(8) & 63)) as u8 == b' '
}

/// Remembers the last value longer than a packed key that was encoded, to find repeats without
/// hashing: values of 8 to 16 bytes are equal when their lengths, first and last 8 bytes are;
/// longer ones are compared in full.
#[derive(Clone, Copy)]
struct LastLong<'v> {
    len: usize,
    head: u64,
    tail: u64,
    text: &'v str,
    code: u32,
}

impl<'v> LastLong<'v> {
    /// Matches no value (their length is at least 8).
    const NONE: LastLong<'static> = LastLong { len: 0, head: 0, tail: 0, text: "", code: 0 };

    /// The code of `v` when it is the remembered value. Always inlined: as a call (what the
    /// compiler chose) it was a tenth of the time of a batch.
    #[inline(always)]
    fn get(&self, v: impl RawText<'v>) -> Option<u32> {
        let len = v.len();
        (len == self.len && v.head() == self.head && v.tail() == self.tail && (len <= 16 || v.text() == self.text))
            .then_some(self.code)
    }

    #[inline]
    fn new(v: impl RawText<'v>, code: u32) -> Self {
        LastLong { len: v.len(), head: v.head(), tail: v.tail(), text: v.text(), code }
    }
}

/// Encodes the text values `vals` of an equality criterion into `slots`, looking short values
/// up with `code_of_key`. A repeat is one comparison of the packed key for short values (the
/// packing is the lookup's own first step), or found by [`LastLong`] for longer ones.
#[inline]
fn encode_equ<'v, 's, V: RawText<'v>>(
    dict: &Dictionary,
    code_of_key: impl Fn(u64) -> u32,
    vals: impl Iterator<Item = V>,
    slots: impl Iterator<Item = &'s mut u32>,
) {
    let (mut last_key, mut last_code) = (u64::MAX, 0u32);
    let mut last_long = LastLong::NONE;
    for (slot, v) in slots.zip(vals) {
        let len = v.len();
        *slot = if len <= SHORT_KEY_MAX {
            let k = Dictionary::short_key_of_word(v.head(), len);
            if k == last_key {
                last_code
            } else if !has_end_space(k, len) {
                // Only keys without padding are remembered, so a repeat needs no trimming.
                (last_key, last_code) = (k, code_of_key(k));
                last_code
            } else {
                dict.code(trim_ascii(v.text()))
            }
        } else if let Some(code) = last_long.get(v) {
            code
        } else {
            last_long = LastLong::new(v, dict.code(trim_ascii(v.text())));
            last_long.code
        };
    }
}

fn value_error(e: ValueError, row: usize, criterion: &str, value: &str) -> QueryError {
    QueryError {
        row,
        criterion: criterion.to_string(),
        value: value.to_string(),
        message: match e {
            ValueError::NotAnInteger => "not an integer".into(),
            ValueError::IntegerTooLarge => "integer does not fit in 128 bits".into(),
            ValueError::MalformedDate => "not a date (DDMMMYYYY or YYYY-MM-DD)".into(),
            ValueError::ImpossibleDate(why) => why,
        },
    }
}

/// Rules as code intervals, row-major with `width` columns per rule.
#[derive(Debug, Clone)]
pub struct EncodedRules {
    pub width: usize,
    /// Number of real criteria (columns `n_criteria..width` are padding).
    pub n_criteria: usize,
    /// Per criterion: whether it is a range criterion.
    pub is_range: Vec<bool>,
    /// Per criterion: whether it is mandatory (never a wildcard).
    pub mandatory: Vec<bool>,
    /// Per criterion: its weight.
    pub weights: Vec<u64>,
    pub lo: Vec<u32>,
    pub hi: Vec<u32>,
    pub scores: Vec<u128>,
}

impl EncodedRules {
    pub fn len(&self) -> usize {
        self.scores.len()
    }
    pub fn is_empty(&self) -> bool {
        self.scores.is_empty()
    }
    #[inline]
    pub fn lo_row(&self, r: usize) -> &[u32] {
        &self.lo[r * self.width..(r + 1) * self.width]
    }
    #[inline]
    pub fn hi_row(&self, r: usize) -> &[u32] {
        &self.hi[r * self.width..(r + 1) * self.width]
    }
}

/// Whether the query row `q` lies inside the rule rows `lo`/`hi`. Written without early exit
/// over fixed-size chunks so the compiler turns it into vector compares.
#[inline(always)]
pub fn row_matches(lo: &[u32], hi: &[u32], q: &[u32]) -> bool {
    let mut ok = true;
    for ((l, h), v) in lo.chunks_exact(LANES).zip(hi.chunks_exact(LANES)).zip(q.chunks_exact(LANES)) {
        let mut m = 0u32;
        for j in 0..LANES {
            m |= ((v[j] < l[j]) | (v[j] > h[j])) as u32;
        }
        ok &= m == 0;
    }
    ok
}

impl Encoder {
    pub fn new(rules: Arc<RuleSet>) -> Self {
        let bounds = rules
            .columns
            .iter()
            .map(|col| match col {
                Column::Equ { .. } => Vec::new(),
                Column::Range { bounds } => {
                    let mut b: Vec<i128> = Vec::with_capacity(bounds.len() * 2);
                    for &(lo, hi) in bounds.iter().flatten() {
                        b.push(lo);
                        if hi < i128::MAX {
                            b.push(hi + 1);
                        }
                    }
                    b.sort_unstable();
                    b.dedup();
                    b
                }
            })
            .collect();
        Encoder::with_bounds(rules, bounds)
    }

    /// The encoder of `rules` whose range criteria have the boundaries `bounds` (sorted,
    /// distinct; empty for equality criteria): [`Encoder::new`] derives them from the rules,
    /// [`Encoder::from_dictionary`] takes them from a dictionary whose rule set has no rules.
    pub(crate) fn with_bounds(rules: Arc<RuleSet>, bounds: Vec<Vec<i128>>) -> Self {
        debug_assert_eq!(bounds.len(), rules.n_criteria());
        let rank_tables = bounds
            .iter()
            .map(|b: &Vec<i128>| {
                let (&first, &last) = (b.first()?, b.last()?);
                // checked: open ranges put i128::MIN among the boundaries.
                if last.checked_sub(first)? > RANK_TABLE_MAX {
                    return None;
                }
                let mut ranks = Vec::with_capacity((last - first) as usize);
                let mut r = 1u32; // values >= first have rank >= 1
                for v in first..last {
                    while (r as usize) < b.len() && b[r as usize] <= v {
                        r += 1;
                    }
                    ranks.push(r);
                }
                Some(RankTable { base: first, ranks })
            })
            .collect();
        let short_tables = rules
            .columns
            .iter()
            .map(|col| match col {
                Column::Equ { dict, .. } => ShortTable::build(&dict.short_entries()),
                Column::Range { .. } => None,
            })
            .collect();
        let n = rules.n_criteria();
        let width = n.div_ceil(LANES).max(1) * LANES;
        Encoder { rules, bounds, rank_tables, short_tables, width }
    }

    pub fn rules(&self) -> &Arc<RuleSet> {
        &self.rules
    }

    /// Columns per encoded row (criteria padded to a multiple of [`LANES`]).
    pub fn width(&self) -> usize {
        self.width
    }

    /// Number of distinct codes of criterion `c` (dictionary size or elementary intervals), plus
    /// the code 0.
    pub fn cardinality(&self, c: usize) -> usize {
        match &self.rules.columns[c] {
            Column::Equ { dict, .. } => dict.len() + 1,
            Column::Range { .. } => self.bounds[c].len() + 1,
        }
    }

    /// The sorted, distinct boundaries of range criterion `c` (empty for an equality one).
    pub fn bounds(&self, c: usize) -> &[i128] {
        &self.bounds[c]
    }

    /// Number of boundaries `<= v`: the elementary interval of `v`.
    #[inline]
    fn rank(&self, c: usize, v: i128) -> u32 {
        if let Some(t) = &self.rank_tables[c] {
            // The table covers [first, last) boundary: below it no boundary is <= v, from the
            // last one on all are, so no search is ever needed.
            if v < t.base {
                return 0;
            }
            // v >= base, so the difference is exact as a u128 even when it overflows an i128.
            return match t.ranks.get(usize::try_from(v.wrapping_sub(t.base) as u128).unwrap_or(usize::MAX)) {
                Some(&r) => r,
                None => self.bounds[c].len() as u32,
            };
        }
        self.bounds[c].partition_point(|&b| b <= v) as u32
    }

    /// Encodes every rule as code intervals.
    pub fn encode_rules(&self) -> EncodedRules {
        let rs = &*self.rules;
        let (n, w) = (rs.len(), self.width);
        let mut lo = vec![0u32; n * w];
        let mut hi = vec![u32::MAX; n * w];
        for (c, col) in rs.columns.iter().enumerate() {
            match col {
                Column::Equ { codes, .. } => {
                    for (r, &code) in codes.iter().enumerate() {
                        if code != 0 {
                            lo[r * w + c] = code;
                            hi[r * w + c] = code;
                        }
                    }
                }
                Column::Range { bounds } => {
                    for (r, b) in bounds.iter().enumerate() {
                        if let Some((l, h)) = *b {
                            lo[r * w + c] = self.rank(c, l);
                            hi[r * w + c] = self.rank(c, h);
                        }
                    }
                }
            }
        }
        let crits = &rs.rule_type.criteria;
        EncodedRules {
            width: w,
            n_criteria: crits.len(),
            is_range: crits.iter().map(|c| c.kind.is_range()).collect(),
            mandatory: crits.iter().map(|c| c.mandatory).collect(),
            weights: crits.iter().map(|c| c.weight).collect(),
            lo,
            hi,
            scores: (0..n).map(|r| rs.score(r)).collect(),
        }
    }

    /// Encodes one raw text value of criterion `c`.
    pub fn encode_str(&self, c: usize, v: &str) -> Result<u32, ValueError> {
        match &self.rules.columns[c] {
            Column::Equ { dict, .. } => Ok(dict.code(trim_ascii(v))),
            Column::Range { .. } => {
                let x = match self.rules.rule_type.criteria[c].kind {
                    CriterionKind::DateRange => parse_date(v)?,
                    _ => parse_int(v)?,
                };
                Ok(self.rank(c, x))
            }
        }
    }

    /// Encodes an integer (or day number, for dates) of range criterion `c`.
    #[inline]
    pub fn encode_int(&self, c: usize, v: i128) -> u32 {
        self.rank(c, v)
    }

    /// Encodes the text values `vals` of criterion `c` (rows `first..` of the batch) into
    /// `slots`. The criterion's kind is looked at once, not per value, and a value equal to the
    /// last one looked up reuses its code: a request's queries share most of their values (the
    /// same airports, carriers, dates, states), so most lookups are one comparison.
    fn encode_texts<'v, 's, V: RawText<'v>>(
        &self,
        c: usize,
        vals: impl Iterator<Item = V>,
        first: usize,
        slots: impl Iterator<Item = &'s mut u32>,
    ) -> Result<(), QueryError> {
        match &self.rules.columns[c] {
            Column::Equ { dict, .. } => match &self.short_tables[c] {
                Some(t) => encode_equ(dict, |k| t.code_of_key(k), vals, slots),
                None => encode_equ(dict, |k| dict.code_of_key(k), vals, slots),
            },
            Column::Range { .. } => {
                let crit = &self.rules.rule_type.criteria[c];
                let date = crit.kind == CriterionKind::DateRange;
                // As for equality: a repeat is one comparison of the packed key, or found by
                // [`LastLong`].
                let (mut last_key, mut last_code) = (u64::MAX, 0u32);
                let mut last_long = LastLong::NONE;
                for (i, (slot, v)) in slots.zip(vals).enumerate() {
                    let len = v.len();
                    let head = v.head();
                    let key = (len <= SHORT_KEY_MAX).then(|| Dictionary::short_key_of_word(head, len));
                    let repeat = match key {
                        Some(k) => (k == last_key).then_some(last_code),
                        None => last_long.get(v),
                    };
                    if let Some(code) = repeat {
                        *slot = code;
                        continue;
                    }
                    // Plain digits and well-formed dates are read directly; anything else
                    // (padding, signs, long numbers, errors) takes the general parsers.
                    let fast = if date { parse_date_exact(v.text().as_bytes()) } else { parse_int_word(head, len) };
                    let x = match fast {
                        Some(x) => x as i128,
                        None => {
                            let t = v.text();
                            let x = if date { parse_date(t) } else { parse_int(t) };
                            x.map_err(|e| value_error(e, first + i, &crit.code, t))?
                        }
                    };
                    let code = self.rank(c, x);
                    match key {
                        Some(k) => (last_key, last_code) = (k, code),
                        None => last_long = LastLong::new(v, code),
                    }
                    *slot = code;
                }
            }
        }
        Ok(())
    }

    /// Encodes a batch given column by column (one column per criterion, in rule-type order)
    /// into row-major codes.
    pub fn encode_columns(&self, cols: &[RawColumn<'_>]) -> Result<Vec<u32>, QueryError> {
        let crits = &self.rules.rule_type.criteria;
        if cols.len() != crits.len() {
            return Err(QueryError {
                row: 0,
                criterion: String::new(),
                value: String::new(),
                message: format!("got {} query columns, the rule type has {} criteria", cols.len(), crits.len()),
            });
        }
        let n = cols.first().map_or(0, |c| c.len());
        if let Some((c, col)) = cols.iter().enumerate().find(|(_, col)| col.len() != n) {
            return Err(QueryError {
                row: 0,
                criterion: crits[c].code.clone(),
                value: String::new(),
                message: format!("column has {} values, the first column has {n}", col.len()),
            });
        }
        let w = self.width;
        let mut out = vec![0u32; n * w];
        // Rows are encoded in blocks, column by column within a block: each column is read
        // sequentially and the block's output rows stay in cache (a whole-column pass would
        // stream the full output once per criterion).
        const BLOCK: usize = 512;
        for (b, out_block) in out.chunks_mut(BLOCK * w).enumerate() {
            let rows = b * BLOCK..(b * BLOCK + out_block.len() / w);
            for (c, col) in cols.iter().enumerate() {
                // Column c of every row of the block (c < n_criteria <= w): an iterator, so
                // writing a code needs no bounds check.
                let slots = out_block[c..].iter_mut().step_by(w);
                match col {
                    RawColumn::Str(vals) => {
                        self.encode_texts(c, vals[rows.clone()].iter().copied(), rows.start, slots)?;
                    }
                    RawColumn::Packed(p) => {
                        let values = p.offsets[rows.start..=rows.end].windows(2).map(|o| PackedValue {
                            data: p.data,
                            start: (o[0] - p.base) as usize,
                            end: (o[1] - p.base) as usize,
                        });
                        self.encode_texts(c, values, rows.start, slots)?;
                    }
                    RawColumn::Int(vals) if !crits[c].kind.is_range() => {
                        // Integers given for an equality criterion are looked up as text.
                        for (slot, v) in slots.zip(&vals[rows.clone()]) {
                            *slot = self.encode_str(c, &v.to_string()).unwrap_or(0);
                        }
                    }
                    RawColumn::Int(vals) => {
                        for (slot, &v) in slots.zip(&vals[rows.clone()]) {
                            *slot = self.rank(c, v as i128);
                        }
                    }
                }
            }
        }
        Ok(out)
    }
}
