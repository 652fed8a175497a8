//! The native format: a TOML rule type and a plain CSV of rules, meant to be written by hand.
//!
//! ```toml
//! code = "MCT"
//! description = "Minimum connecting times"
//! [[criterion]]
//! code = "CTN_TYPE"
//! kind = "equ"          # equ | int_range | date_range
//! mandatory = true
//! weight = 0
//! ```
//!
//! Rules CSV: header `RULE_ID,<criterion codes in any order>,CONTENT`. A cell that is empty or
//! `*` is a wildcard. Ranges are `lo..hi` (inclusive), `lo..` or `..hi` (open), or one value
//! (`lo = hi`); dates are `2026-03-15` or `15MAR2026`. CONTENT is an integer. Quoting is
//! optional (RFC 4180). See docs/rules-format.md.

use crate::csv::Reader;
use crate::erbium::value_error;
use crate::error::{read_utf8, ErrorKind, LoadError, Location};
use crate::model::{Cell, Criterion, CriterionKind, RuleSet, RuleSetBuilder, RuleType};
use crate::value::{parse_date, parse_int};
use std::path::Path;

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlRuleType {
    code: String,
    #[serde(default)]
    description: String,
    criterion: Vec<TomlCriterion>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlCriterion {
    code: String,
    kind: CriterionKind,
    #[serde(default)]
    mandatory: bool,
    weight: TomlWeight,
}

/// TOML integers stop at 2^63-1; weights up to 2^64-1 may be written as strings. Anything else
/// (a negative integer, a float, a table) is taken as it is, to be refused with its location.
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum TomlWeight {
    Int(i64),
    Text(String),
    Other(toml::Value),
}

/// The weight of criterion `code` as a u64, or an error located at its `weight` key.
fn weight_of(path: &Path, text: &str, code: &str, weight: &TomlWeight) -> Result<u64, LoadError> {
    let (shown, parsed) = match weight {
        TomlWeight::Int(w) => (w.to_string(), u64::try_from(*w).ok()),
        TomlWeight::Text(t) => (format!("{t:?}"), t.trim().parse::<u64>().ok()),
        TomlWeight::Other(v) => (v.to_string(), None),
    };
    parsed.ok_or_else(|| {
        let after_code = text.find(&format!("\"{code}\"")).unwrap_or(0);
        let off = text[after_code..].find("weight").map_or(after_code, |o| after_code + o);
        let (l, col) = line_col(text, off);
        LoadError::new(
            ErrorKind::Toml,
            Location::at(path, l, col),
            format!("weight {shown} of criterion {code} is not a non-negative integer"),
        )
        .expected("an integer in 0..=18446744073709551615 (above 2^63-1 as a string)")
    })
}

pub fn load_rule_type(path: &Path) -> Result<RuleType, LoadError> {
    let text = read_utf8(path)?;
    parse_rule_type(path, &text)
}

fn line_col(text: &str, offset: usize) -> (u64, u64) {
    let before = &text[..offset.min(text.len())];
    let line = 1 + before.matches('\n').count() as u64;
    let col = 1 + before.rsplit('\n').next().unwrap_or("").chars().count() as u64;
    (line, col)
}

pub fn parse_rule_type(path: &Path, text: &str) -> Result<RuleType, LoadError> {
    let rt: TomlRuleType = toml::from_str(text).map_err(|e| {
        let (l, c) = e.span().map_or((1, 1), |s| line_col(text, s.start));
        LoadError::new(ErrorKind::Toml, Location::at(path, l, c), e.message().to_string())
            .expected("a rule type: code, description, [[criterion]] tables with code, kind, mandatory, weight")
    })?;
    let mut criteria: Vec<Criterion> = Vec::new();
    for c in rt.criterion {
        if c.code.trim().is_empty() || criteria.iter().any(|o| o.code == c.code) {
            let off = text.find(&format!("\"{}\"", c.code)).unwrap_or(0);
            let (l, col) = line_col(text, off);
            return Err(LoadError::new(
                ErrorKind::DuplicateCriterion,
                Location::at(path, l, col),
                format!("criterion code {:?} is empty or defined twice", c.code),
            )
            .expected("unique, non-empty criterion codes"));
        }
        let weight = weight_of(path, text, &c.code, &c.weight)?;
        criteria.push(Criterion { code: c.code, kind: c.kind, mandatory: c.mandatory, weight });
    }
    if criteria.is_empty() {
        return Err(LoadError::new(ErrorKind::BadRuleType, Location::file(path), "no [[criterion]]")
            .expected("at least one criterion"));
    }
    Ok(RuleType { code: rt.code, description: rt.description, criteria })
}

/// Parses a range cell of the native format.
fn parse_native_range(crit: &Criterion, text: &str, loc: &Location) -> Result<Cell<'static>, LoadError> {
    let expected = match crit.kind {
        CriterionKind::IntRange => "an integer or a range like 100..199, 100.. or ..199",
        _ => "a date or a range like 2026-01-01..2026-12-31 (or 01JAN2026..31DEC2026)",
    };
    let parse = |s: &str| match crit.kind {
        CriterionKind::IntRange => parse_int(s),
        _ => parse_date(s),
    };
    let (lo, hi) = match text.split_once("..") {
        Some((a, b)) => {
            let lo = if a.trim().is_empty() {
                i128::MIN
            } else {
                parse(a).map_err(|e| value_error(e, loc.clone(), crit, a, expected))?
            };
            let hi = if b.trim().is_empty() {
                i128::MAX
            } else {
                parse(b).map_err(|e| value_error(e, loc.clone(), crit, b, expected))?
            };
            (lo, hi)
        }
        None => {
            let v = parse(text).map_err(|e| value_error(e, loc.clone(), crit, text, expected))?;
            (v, v)
        }
    };
    Ok(Cell::Range(lo, hi))
}

pub fn load_rules(rule_type: &RuleType, path: &Path) -> Result<RuleSet, LoadError> {
    let text = read_utf8(path)?;
    parse_rules(rule_type, path, &text)
}

pub fn parse_rules(rule_type: &RuleType, path: &Path, text: &str) -> Result<RuleSet, LoadError> {
    let mut reader = Reader::new(path, text);
    let header = reader.header()?;
    let names: Vec<&str> = header.fields.iter().map(|f| f.text.trim()).collect();
    let at = |i: usize| Location::at(path, header.line, header.fields[i].column);
    let n = names.len();
    if names.first() != Some(&"RULE_ID") || names.last() != Some(&"CONTENT") || n < 2 {
        return Err(LoadError::new(
            ErrorKind::MissingColumn,
            at(0),
            "the header must start with RULE_ID and end with CONTENT",
        )
        .expected("RULE_ID,<criterion codes>,CONTENT"));
    }
    let col_of = rule_type.criterion_columns(path, &header, 1..n - 1)?;
    let mut builder = RuleSetBuilder::new(rule_type.clone(), path);
    for rec in reader {
        let rec = rec?;
        let f = &rec.fields;
        if f.len() != n {
            return Err(LoadError::new(
                ErrorKind::WrongColumnCount,
                Location::at(path, rec.line, f.last().map_or(1, |x| x.column)),
                format!("this row has {} columns", f.len()),
            )
            .expected(format!("{n} columns, as in the header")));
        }
        let loc = |i: usize| Location::field(path, rec.line, f[i].column, names[i]);
        let mut cells: Vec<Cell> = Vec::with_capacity(rule_type.criteria.len());
        for (c, crit) in rule_type.criteria.iter().enumerate() {
            let i = col_of[c];
            let t = f[i].text.trim();
            cells.push(if t.is_empty() || t == "*" {
                Cell::Any
            } else if crit.kind.is_range() {
                parse_native_range(crit, t, &loc(i))?
            } else {
                Cell::Value(t)
            });
        }
        let ct = f[n - 1].text.trim();
        let content: i64 = ct.parse().map_err(|_| {
            LoadError::new(ErrorKind::BadContent, loc(n - 1), format!("CONTENT {ct:?} is not an integer"))
                .expected("a 64-bit integer")
        })?;
        let id = f[0].text.trim();
        if id.is_empty() {
            return Err(LoadError::new(ErrorKind::BadContent, loc(0), "RULE_ID is empty").expected("a rule id"));
        }
        builder.push(id, loc(0), &cells, |c| loc(col_of[c]), content)?;
    }
    Ok(builder.finish())
}

pub fn load(rule_type_toml: &Path, rules_csv: &Path) -> Result<RuleSet, LoadError> {
    let rt = load_rule_type(rule_type_toml)?;
    load_rules(&rt, rules_csv)
}
