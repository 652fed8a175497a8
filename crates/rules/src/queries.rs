//! Query files: `QUERY_ID,<one column per criterion code>` with raw values, and the answer file
//! `QUERY_ID,RULE_ID,CONTENT` (both empty when nothing matches).

use crate::csv::Reader;
use crate::encode::{Encoder, RawColumn, StringColumn};
use crate::error::{read_utf8, ErrorKind, LoadError, Location};
use crate::matcher::NO_MATCH;
use crate::model::{RuleSet, RuleType};
use std::io::Write;
use std::path::Path;

/// Raw queries read from a file, column by column in rule-type order.
pub struct QueryFile {
    pub ids: Vec<String>,
    /// `columns[c].get(q)`: raw text of criterion `c` for query `q`.
    pub columns: Vec<StringColumn>,
    pub lines: Vec<u64>,
    /// Column (1-based field number) of criterion `c` in the file, for error messages.
    pub field_of: Vec<u64>,
}

impl QueryFile {
    pub fn len(&self) -> usize {
        self.ids.len()
    }
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Encodes all queries; a value that cannot be encoded is reported with its file position.
    pub fn encode(&self, enc: &Encoder, path: &Path) -> Result<Vec<u32>, LoadError> {
        let cols: Vec<RawColumn> = self.columns.iter().map(StringColumn::as_raw).collect();
        enc.encode_columns(&cols).map_err(|e| {
            let c = enc.rules().rule_type.index_of(&e.criterion).unwrap_or(0);
            let line = self.lines.get(e.row).copied().unwrap_or(0);
            let field = self.field_of.get(c).copied().unwrap_or(1) as usize;
            LoadError::new(
                ErrorKind::BadQueryValue,
                Location::field(path, line, char_column(path, line, field), &e.criterion),
                format!("{:?}: {}", e.value, e.message),
            )
            .expected(match enc.rules().rule_type.criteria[c].kind {
                crate::model::CriterionKind::DateRange => "a date like 15MAR2026 or 2026-03-15",
                crate::model::CriterionKind::IntRange => "an integer",
                crate::model::CriterionKind::Equ => "a value",
            })
        })
    }
}

/// The character column of field `field` (1-based) on line `line` of a CSV file; only used on
/// the error path, so the file is simply read again. Falls back to the field number.
fn char_column(path: &Path, line: u64, field: usize) -> u64 {
    let Ok(text) = std::fs::read_to_string(path) else { return field as u64 };
    Reader::new(path, &text)
        .filter_map(Result::ok)
        .find(|r| r.line == line)
        .and_then(|r| r.fields.get(field.wrapping_sub(1)).map(|f| f.column))
        .unwrap_or(field as u64)
}

/// Reads a query CSV for `rule_type`. Columns are matched by criterion code; extra columns are
/// an error (a typo would otherwise silently turn a criterion into "unknown value").
pub fn load_queries(rule_type: &RuleType, path: &Path) -> Result<QueryFile, LoadError> {
    let text = read_utf8(path)?;
    let mut reader = Reader::new(path, &text);
    let header = reader.header()?;
    let names: Vec<&str> = header.fields.iter().map(|f| f.text.trim()).collect();
    if names.first() != Some(&"QUERY_ID") {
        return Err(LoadError::new(
            ErrorKind::MissingColumn,
            Location::at(path, header.line, 1),
            format!("the first column is {:?}", names.first().unwrap_or(&"")),
        )
        .expected("QUERY_ID, then one column per criterion code"));
    }
    let n_crit = rule_type.criteria.len();
    let col_of = rule_type.criterion_columns(path, &header, 1..names.len())?;
    let mut q = QueryFile {
        ids: Vec::new(),
        columns: vec![StringColumn::default(); n_crit],
        lines: Vec::new(),
        field_of: col_of.iter().map(|&i| i as u64 + 1).collect(),
    };
    for rec in reader {
        let rec = rec?;
        if rec.fields.len() != names.len() {
            return Err(LoadError::new(
                ErrorKind::WrongColumnCount,
                Location::at(path, rec.line, rec.fields.last().map_or(1, |f| f.column)),
                format!("this row has {} columns", rec.fields.len()),
            )
            .expected(format!("{} columns, as in the header", names.len())));
        }
        q.ids.push(rec.fields[0].text.to_string());
        for (col, &i) in q.columns.iter_mut().zip(&col_of) {
            col.push(rec.fields[i].text.trim());
        }
        q.lines.push(rec.line);
    }
    Ok(q)
}

fn csv_field(s: &str) -> std::borrow::Cow<'_, str> {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\"")).into()
    } else {
        s.into()
    }
}

/// Writes `QUERY_ID,RULE_ID,CONTENT`; RULE_ID and CONTENT are empty when nothing matched.
///
/// The file appears whole or not at all: it is written to a temporary name beside `path`
/// (`.<name>.<pid>-<n>.tmp`), flushed to disk, then renamed over `path`. On an error (a full
/// disk, say) the temporary is removed and `path` is left as it was.
pub fn write_answers(path: &Path, ids: &[String], answers: &[u32], rules: &RuleSet) -> std::io::Result<()> {
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().map_or_else(|| "answers".into(), |n| n.to_string_lossy());
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = dir.join(format!(".{name}.{}-{seq}.tmp", std::process::id()));
    let written = (|| {
        let f = std::fs::OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
        writeln!(w, "QUERY_ID,RULE_ID,CONTENT")?;
        for (id, &a) in ids.iter().zip(answers) {
            if a == NO_MATCH {
                writeln!(w, "{},,", csv_field(id))?;
            } else {
                let i = a as usize;
                writeln!(w, "{},{},{}", csv_field(id), csv_field(&rules.ids[i]), rules.contents[i])?;
            }
        }
        w.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}
