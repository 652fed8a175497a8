//! Loader for ERBIUM's input format: a rule-type XML file and a rules CSV file.
//!
//! XML: `ruleTypeDefinition/{code, subversion, description, criterionDefinition*/{code,
//! sequenceNumber, criterionTypeReference/{id, fileName}, isMandatory, weight, guiProperties*}}`.
//! Functor ids 60/67/273/316/408 are equality, 212 a pair of dates, 412 an integer range; as in
//! ERBIUM, a criterion with two `<guiProperties>` children is a pair (range).
//!
//! CSV: `RULE_ID,WEIGHT,STATUS,VICEVERSA,TAGS,CRITERIA,<criteria...>,CONTENT,Hour,INVALID,Minutes`,
//! values double-quoted, empty = wildcard. Content = Hour*60+Minutes, or 999 when INVALID is TRUE.

use crate::csv::{Field, Reader, Record};
use crate::error::{read_utf8, text_from_bytes, ErrorKind, LoadError, Location};
use crate::model::{Cell, Criterion, CriterionKind, RuleSet, RuleSetBuilder, RuleType};
use crate::value::{parse_date, parse_int, ValueError};
use std::path::Path;

/// The content ERBIUM gives a rule whose INVALID column is TRUE (connection not allowed).
pub const INVALID_CONTENT: i64 = 999;

const EQU_FUNCTORS: [&str; 5] = ["60", "67", "273", "316", "408"];
const DATE_PAIR_FUNCTOR: &str = "212";
const INT_RANGE_FUNCTOR: &str = "412";

fn xml_loc(path: &Path, doc: &roxmltree::Document, node: roxmltree::Node) -> Location {
    let p = doc.text_pos_at(node.range().start);
    Location::at(path, p.row as u64, p.col as u64)
}

/// Reads the bytes of an XML file, honouring an ISO-8859-1 / Latin-1 declaration (ERBIUM's own
/// files declare it); anything else must be UTF-8.
fn read_xml_text(path: &Path) -> Result<String, LoadError> {
    let bytes = std::fs::read(path).map_err(|e| LoadError::new(ErrorKind::Io, Location::file(path), e.to_string()))?;
    xml_text(path, bytes)
}

/// The text of an XML file's bytes (`path` names it in errors): Latin-1 when its declaration
/// says so, UTF-8 otherwise.
pub(crate) fn xml_text(path: &Path, bytes: Vec<u8>) -> Result<String, LoadError> {
    let head = String::from_utf8_lossy(&bytes[..bytes.len().min(200)]).to_ascii_lowercase();
    if head.starts_with("<?xml") && (head.contains("iso-8859-1") || head.contains("latin1") || head.contains("latin-1"))
    {
        let text: String = bytes.iter().map(|&b| b as char).collect();
        if text.trim().is_empty() {
            return text_from_bytes(path, Vec::new());
        }
        // roxmltree only accepts UTF-8 input, which the text now is; drop the declaration's
        // encoding so it does not contradict.
        return Ok(text.replacen("ISO-8859-1", "UTF-8", 1).replacen("iso-8859-1", "UTF-8", 1));
    }
    text_from_bytes(path, bytes)
}

/// Parses an ERBIUM rule-type XML file.
pub fn load_rule_type(path: &Path) -> Result<RuleType, LoadError> {
    let text = read_xml_text(path)?;
    parse_rule_type(path, &text)
}

pub fn parse_rule_type(path: &Path, text: &str) -> Result<RuleType, LoadError> {
    let doc = roxmltree::Document::parse(text).map_err(|e| {
        let p = e.pos();
        LoadError::new(ErrorKind::Xml, Location::at(path, p.row as u64, p.col as u64), e.to_string())
            .expected("well-formed XML")
    })?;
    let root = doc.root_element();
    if root.tag_name().name() != "ruleTypeDefinition" {
        return Err(LoadError::new(
            ErrorKind::BadRuleType,
            xml_loc(path, &doc, root),
            format!("root element is <{}>", root.tag_name().name()),
        )
        .expected("<ruleTypeDefinition>"));
    }
    let code = child_text(root, "code").unwrap_or_default();
    let description = child_text(root, "description").unwrap_or_default();
    let mut defs: Vec<(i64, Criterion, Location)> = Vec::new();
    for def in root.children().filter(|c| c.has_tag_name("criterionDefinition")) {
        let (seq, crit, loc, code_loc) = parse_criterion(path, &doc, def)?;
        if let Some((_, other, oloc)) = defs.iter().find(|(_, c, _)| c.code == crit.code) {
            return Err(LoadError::new(
                ErrorKind::DuplicateCriterion,
                code_loc,
                format!("criterion {} is defined twice (first at {oloc})", other.code),
            )
            .expected("unique criterion codes"));
        }
        defs.push((seq, crit, loc));
    }
    if defs.is_empty() {
        return Err(LoadError::new(ErrorKind::BadRuleType, xml_loc(path, &doc, root), "no <criterionDefinition>")
            .expected("at least one criterion"));
    }
    defs.sort_by_key(|(s, _, _)| *s);
    Ok(RuleType { code, description, criteria: defs.into_iter().map(|(_, c, _)| c).collect() })
}

/// The trimmed text of `n`'s first child element named `name`, if it has one.
fn child_text(n: roxmltree::Node, name: &str) -> Option<String> {
    n.children().find(|c| c.has_tag_name(name)).map(|c| c.text().unwrap_or("").trim().to_string())
}

/// One `<criterionDefinition>`: its sequence number, the criterion, and where the definition
/// and its `<code>` are.
fn parse_criterion(
    path: &Path,
    doc: &roxmltree::Document,
    def: roxmltree::Node,
) -> Result<(i64, Criterion, Location, Location), LoadError> {
    let loc = xml_loc(path, doc, def);
    let need = |name: &str| -> Result<(String, Location), LoadError> {
        let n = def.children().find(|c| c.has_tag_name(name)).ok_or_else(|| {
            LoadError::new(ErrorKind::BadRuleType, loc.clone(), format!("<criterionDefinition> has no <{name}>"))
                .expected(format!("a <{name}> element"))
        })?;
        Ok((n.text().unwrap_or("").trim().to_string(), xml_loc(path, doc, n)))
    };
    let (ccode, code_loc) = need("code")?;
    if ccode.is_empty() {
        return Err(
            LoadError::new(ErrorKind::BadRuleType, code_loc, "criterion code is empty").expected("a non-empty <code>")
        );
    }
    let (seq, seq_loc) = need("sequenceNumber")?;
    let seq: i64 = seq.parse().map_err(|_| {
        LoadError::new(ErrorKind::BadRuleType, seq_loc, format!("sequenceNumber {seq:?} is not an integer"))
            .expected("a non-negative integer")
    })?;
    let (mandatory, m_loc) = need("isMandatory")?;
    let mandatory = match mandatory.to_ascii_lowercase().as_str() {
        "true" => true,
        "false" => false,
        other => {
            return Err(LoadError::new(ErrorKind::BadRuleType, m_loc, format!("isMandatory is {other:?}"))
                .expected("true or false"))
        }
    };
    let (weight, w_loc) = need("weight")?;
    let weight: u64 = weight.parse().map_err(|_| {
        LoadError::new(ErrorKind::BadRuleType, w_loc, format!("weight {weight:?} is not a non-negative integer"))
            .expected("an integer in 0..=18446744073709551615")
    })?;
    let kind = criterion_kind(def, &ccode, &loc)?;
    Ok((seq, Criterion { code: ccode, kind, mandatory, weight }, loc, code_loc))
}

/// The kind of criterion `ccode` (defined by `def`, at `loc`), from its functor id and, as in
/// ERBIUM, its number of `<guiProperties>`.
fn criterion_kind(def: roxmltree::Node, ccode: &str, loc: &Location) -> Result<CriterionKind, LoadError> {
    let functor = def
        .children()
        .find(|c| c.has_tag_name("criterionTypeReference"))
        .and_then(|r| child_text(r, "id"))
        .unwrap_or_default();
    let n_gui = def.children().filter(|c| c.has_tag_name("guiProperties")).count();
    if functor == DATE_PAIR_FUNCTOR {
        Ok(CriterionKind::DateRange)
    } else if functor == INT_RANGE_FUNCTOR {
        Ok(CriterionKind::IntRange)
    } else if n_gui == 2 {
        // ERBIUM's own rule: two guiProperties make a pair. Without a known functor id we
        // cannot tell dates from integers, so we refuse rather than guess.
        Err(LoadError::new(
            ErrorKind::BadRuleType,
            loc.clone(),
            format!("criterion {ccode} is a pair (two <guiProperties>) with functor id {functor:?}"),
        )
        .expected("functor id 212 (pair of dates) or 412 (integer range)"))
    } else if EQU_FUNCTORS.contains(&functor.as_str()) || functor.is_empty() {
        Ok(CriterionKind::Equ)
    } else {
        Err(LoadError::new(
            ErrorKind::BadRuleType,
            loc.clone(),
            format!("criterion {ccode} has unknown functor id {functor:?}"),
        )
        .expected("one of 60, 67, 273, 316, 408 (equality), 212 (dates) or 412 (integer range)"))
    }
}

pub(crate) fn value_error(
    e: ValueError,
    loc: Location,
    crit: &Criterion,
    text: &str,
    expected_range: &str,
) -> LoadError {
    match e {
        ValueError::NotAnInteger => {
            LoadError::new(ErrorKind::NotAnInteger, loc, format!("{:?} is not an integer ({})", text, crit.code))
                .expected(expected_range.to_string())
        }
        ValueError::IntegerTooLarge => LoadError::new(
            ErrorKind::IntegerTooLarge,
            loc,
            format!("{:?} does not fit in 128 bits ({})", text, crit.code),
        )
        .expected("an integer of at most 38 digits"),
        ValueError::MalformedDate => {
            LoadError::new(ErrorKind::MalformedRange, loc, format!("{:?} is not a date ({})", text, crit.code))
                .expected(expected_range.to_string())
        }
        ValueError::ImpossibleDate(why) => {
            LoadError::new(ErrorKind::ImpossibleDate, loc, format!("{text:?} is not a real date: {why}"))
                .expected("a calendar date")
        }
    }
}

/// Parses one range cell in ERBIUM syntax: `0100/0199` for integers, `01JAN2019-31DEC2019` for
/// dates.
fn parse_erbium_range(crit: &Criterion, text: &str, loc: &Location) -> Result<Cell<'static>, LoadError> {
    let (sep, expected) = match crit.kind {
        CriterionKind::IntRange => ('/', "an integer range like \"0100/0199\""),
        _ => ('-', "a date range like \"01JAN2019-31DEC2019\""),
    };
    let Some((a, b)) = text.split_once(sep) else {
        return Err(LoadError::new(
            ErrorKind::MalformedRange,
            loc.clone(),
            format!("{text:?} is not a range ({})", crit.code),
        )
        .expected(expected));
    };
    let parse = |s: &str| match crit.kind {
        CriterionKind::IntRange => parse_int(s),
        _ => parse_date(s),
    };
    let lo = parse(a).map_err(|e| value_error(e, loc.clone(), crit, a, expected))?;
    let hi = parse(b).map_err(|e| value_error(e, loc.clone(), crit, b, expected))?;
    Ok(Cell::Range(lo, hi))
}

const LEADING: [&str; 6] = ["RULE_ID", "WEIGHT", "STATUS", "VICEVERSA", "TAGS", "CRITERIA"];
const TRAILING: [&str; 4] = ["CONTENT", "Hour", "INVALID", "Minutes"];

/// Loads an ERBIUM rules CSV against its rule type.
pub fn load_rules(rule_type: &RuleType, path: &Path) -> Result<RuleSet, LoadError> {
    let text = read_utf8(path)?;
    parse_rules(rule_type, path, &text)
}

pub fn parse_rules(rule_type: &RuleType, path: &Path, text: &str) -> Result<RuleSet, LoadError> {
    let mut reader = Reader::new(path, text);
    let header = reader.header()?;
    let names: Vec<&str> = header.fields.iter().map(|f| f.text.trim()).collect();
    check_header(path, &header, &names)?;
    let n = names.len();
    let col_of = rule_type.criterion_columns(path, &header, LEADING.len()..n - TRAILING.len())?;
    let mut builder = RuleSetBuilder::new(rule_type.clone(), path);
    for rec in reader {
        let rec = rec?;
        let f = &rec.fields;
        let loc = |i: usize, f: &[Field]| Location::field(path, rec.line, f[i].column, names[i]);
        if f.len() != n {
            return Err(LoadError::new(
                ErrorKind::WrongColumnCount,
                Location::at(path, rec.line, f.last().map_or(1, |x| x.column)),
                format!("this row has {} columns", f.len()),
            )
            .expected(format!("{n} columns, as in the header")));
        }
        let mut cells: Vec<Cell> = Vec::with_capacity(rule_type.criteria.len());
        for (c, crit) in rule_type.criteria.iter().enumerate() {
            let i = col_of[c];
            let t = f[i].text.trim();
            cells.push(if t.is_empty() {
                Cell::Any
            } else if crit.kind.is_range() {
                parse_erbium_range(crit, t, &loc(i, f))?
            } else {
                Cell::Value(t)
            });
        }
        let content = row_content(f, |i| loc(i, f))?;
        let id = f[0].text.trim();
        if id.is_empty() {
            return Err(LoadError::new(ErrorKind::BadContent, loc(0, f), "RULE_ID is empty").expected("a rule id"));
        }
        builder.push(id, loc(0, f), &cells, |c| loc(col_of[c], f), content)?;
    }
    Ok(builder.finish())
}

/// Checks the header's fixed leading and trailing columns (`names`, trimmed); the criteria are
/// in between, in any order, matched by code.
fn check_header(path: &Path, header: &Record, names: &[&str]) -> Result<(), LoadError> {
    let at = |i: usize| Location::at(path, header.line, header.fields[i].column);
    for (i, want) in LEADING.iter().enumerate() {
        if names.get(i) != Some(want) {
            let loc = if i < names.len() { at(i) } else { Location::at(path, header.line, 1) };
            return Err(LoadError::new(
                ErrorKind::MissingColumn,
                loc,
                format!("header column {} is {:?}", i + 1, names.get(i).unwrap_or(&"<missing>")),
            )
            .expected(format!(
                "{want} (ERBIUM header: {},<criteria>,{})",
                LEADING.join(","),
                TRAILING.join(",")
            )));
        }
    }
    let n = names.len();
    if n < LEADING.len() + TRAILING.len() || names[n - TRAILING.len()..] != TRAILING {
        return Err(LoadError::new(
            ErrorKind::MissingColumn,
            at(n.saturating_sub(1)),
            format!("the header ends with {:?}", &names[n.saturating_sub(TRAILING.len())..]),
        )
        .expected(format!("the last four columns to be {}", TRAILING.join(","))));
    }
    Ok(())
}

/// A row's content from its trailing Hour, INVALID and Minutes fields (`f` has as many fields
/// as the header; `loc(i)` is where field `i` is): Hour*60+Minutes, or [`INVALID_CONTENT`].
fn row_content(f: &[Field], loc: impl Fn(usize) -> Location) -> Result<i64, LoadError> {
    let n = f.len();
    let (i_hour, i_invalid, i_minutes) = (n - 3, n - 2, n - 1);
    let invalid = match f[i_invalid].text.trim() {
        "TRUE" | "true" | "True" => true,
        "FALSE" | "false" | "False" | "" => false,
        other => {
            return Err(LoadError::new(ErrorKind::BadContent, loc(i_invalid), format!("INVALID is {other:?}"))
                .expected("TRUE or FALSE"))
        }
    };
    if invalid {
        return Ok(INVALID_CONTENT);
    }
    let num = |i: usize, what: &str| -> Result<i64, LoadError> {
        let t = f[i].text.trim();
        t.parse::<i64>().ok().filter(|v| *v >= 0).ok_or_else(|| {
            LoadError::new(ErrorKind::BadContent, loc(i), format!("{what} is {t:?}"))
                .expected(format!("a non-negative integer number of {what}"))
        })
    };
    let (h, m) = (num(i_hour, "hours")?, num(i_minutes, "minutes")?);
    h.checked_mul(60).and_then(|h| h.checked_add(m)).ok_or_else(|| {
        LoadError::new(ErrorKind::BadContent, loc(i_hour), "Hour*60+Minutes overflows 64 bits")
            .expected("a connecting time that fits in 64 bits")
    })
}

/// Loads a rule type XML and its rules CSV.
pub fn load(rule_type_xml: &Path, rules_csv: &Path) -> Result<RuleSet, LoadError> {
    let rt = load_rule_type(rule_type_xml)?;
    load_rules(&rt, rules_csv)
}
