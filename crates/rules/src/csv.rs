//! A strict RFC 4180 CSV reader that knows where every field starts.
//!
//! Why not the `csv` crate: it accepts unterminated quotes and stray quotes silently, and we
//! must report broken quoting with its exact line and column. This reader is small, strict and
//! zero-copy for unquoted fields.

use crate::error::{ErrorKind, LoadError, Location};
use std::borrow::Cow;
use std::path::Path;

/// One field of a record and where it starts (1-based line and character column).
#[derive(Debug, Clone)]
pub struct Field<'a> {
    pub text: Cow<'a, str>,
    pub line: u64,
    pub column: u64,
}

/// A record: its fields and the line it starts on.
#[derive(Debug, Clone)]
pub struct Record<'a> {
    pub line: u64,
    pub fields: Vec<Field<'a>>,
}

/// Iterates over the records of `text`; blank lines are skipped.
pub struct Reader<'a> {
    path: &'a Path,
    text: &'a str,
    pos: usize,
    line: u64,
    line_start: usize,
    /// (byte index, column) of the last column computed: columns are counted incrementally
    /// so a long line costs O(length), not O(length²).
    col_cache: std::cell::Cell<(usize, u64)>,
}

impl<'a> Reader<'a> {
    pub fn new(path: &'a Path, text: &'a str) -> Self {
        // A UTF-8 byte-order mark is not part of the first header name.
        let pos = if text.starts_with('\u{feff}') { 3 } else { 0 };
        Reader { path, text, pos, line: 1, line_start: 0, col_cache: std::cell::Cell::new((0, 1)) }
    }

    fn column(&self, at: usize) -> u64 {
        let (from, col) = self.col_cache.get();
        let (from, col) = if from >= self.line_start && from <= at { (from, col) } else { (self.line_start, 1) };
        let col = col + self.text[from..at].chars().count() as u64;
        self.col_cache.set((at, col));
        col
    }

    fn err(&self, at: usize, msg: impl Into<String>, expected: &str) -> LoadError {
        LoadError::new(ErrorKind::BrokenQuoting, Location::at(self.path, self.line, self.column(at)), msg)
            .expected(expected)
    }

    fn read_record(&mut self) -> Result<Option<Record<'a>>, LoadError> {
        if !self.skip_blank_lines() {
            return Ok(None);
        }
        let b = self.text.as_bytes();
        let rec_line = self.line;
        let mut fields = Vec::new();
        loop {
            let start = self.pos;
            let (line, column) = (self.line, self.column(start));
            let more = if b.get(start) == Some(&b'"') {
                let (text, close) = self.quoted_field(start, line, column)?;
                fields.push(Field { text, line, column });
                self.pos = close + 1;
                match b.get(self.pos) {
                    None => false,
                    Some(b',') => {
                        self.pos += 1;
                        true
                    }
                    Some(b'\n') => {
                        self.new_line(self.pos + 1);
                        false
                    }
                    Some(b'\r') if b.get(self.pos + 1) == Some(&b'\n') => {
                        self.new_line(self.pos + 2);
                        false
                    }
                    Some(_) => {
                        return Err(self.err(
                            self.pos,
                            "unexpected text after a closing quote",
                            "a comma or the end of the line right after a quoted value",
                        ))
                    }
                }
            } else {
                let end = self.unquoted_field(start)?;
                fields.push(Field { text: Cow::Borrowed(&self.text[start..end]), line, column });
                self.pos = end;
                match b.get(end) {
                    None => false,
                    Some(b',') => {
                        self.pos += 1;
                        true
                    }
                    Some(b'\n') => {
                        self.new_line(end + 1);
                        false
                    }
                    // `unquoted_field` stops only at the end, a comma, "\n" or "\r\n".
                    _ => {
                        self.new_line(end + 2);
                        false
                    }
                }
            };
            if !more {
                return Ok(Some(Record { line: rec_line, fields }));
            }
        }
    }

    /// Moves to `at`, the start of the next line.
    fn new_line(&mut self, at: usize) {
        self.pos = at;
        self.line += 1;
        self.line_start = at;
    }

    /// Skips blank lines; false at the end of the text.
    fn skip_blank_lines(&mut self) -> bool {
        let b = self.text.as_bytes();
        loop {
            if self.pos >= b.len() {
                return false;
            }
            match b[self.pos] {
                b'\n' => self.new_line(self.pos + 1),
                b'\r' if b.get(self.pos + 1) == Some(&b'\n') => self.new_line(self.pos + 2),
                _ => return true,
            }
        }
    }

    /// The text of the quoted field whose opening quote is at `start` (at `line`, `column`) and
    /// the index of its closing quote: it runs to the matching quote; "" is an escaped quote.
    fn quoted_field(&mut self, start: usize, line: u64, column: u64) -> Result<(Cow<'a, str>, usize), LoadError> {
        let b = self.text.as_bytes();
        let mut i = start + 1;
        let mut owned: Option<String> = None;
        let mut seg = i;
        loop {
            match b.get(i) {
                None => {
                    return Err(LoadError::new(
                        ErrorKind::BrokenQuoting,
                        Location::at(self.path, line, column),
                        "quoted field is never closed",
                    )
                    .expected("a closing double quote before the end of the file"))
                }
                Some(b'"') if b.get(i + 1) == Some(&b'"') => {
                    let o = owned.get_or_insert_with(String::new);
                    o.push_str(&self.text[seg..=i]);
                    i += 2;
                    seg = i;
                }
                Some(b'"') => break,
                Some(b'\n') => {
                    i += 1;
                    self.line += 1;
                    self.line_start = i;
                }
                Some(_) => i += 1,
            }
        }
        let text = match owned {
            Some(mut o) => {
                o.push_str(&self.text[seg..i]);
                Cow::Owned(o)
            }
            None => Cow::Borrowed(&self.text[start + 1..i]),
        };
        Ok((text, i))
    }

    /// The end of the unquoted field starting at `start`: the end of the text, a comma, "\n" or
    /// "\r\n"; a double quote inside it is an error.
    fn unquoted_field(&self, start: usize) -> Result<usize, LoadError> {
        let b = self.text.as_bytes();
        let mut i = start;
        while i < b.len() && b[i] != b',' && b[i] != b'\n' && !(b[i] == b'\r' && b.get(i + 1) == Some(&b'\n')) {
            if b[i] == b'"' {
                return Err(self.err(
                    i,
                    "double quote inside an unquoted value",
                    "the whole value in double quotes, with inner quotes doubled (\"\")",
                ));
            }
            i += 1;
        }
        Ok(i)
    }
}

impl<'a> Reader<'a> {
    /// The first record, which every file of ours starts with; an empty file is an error.
    pub fn header(&mut self) -> Result<Record<'a>, LoadError> {
        self.read_record()?.ok_or_else(|| {
            LoadError::new(ErrorKind::EmptyFile, Location::file(self.path), "the file is empty")
                .expected("a header line")
        })
    }
}

impl<'a> Iterator for Reader<'a> {
    type Item = Result<Record<'a>, LoadError>;
    fn next(&mut self) -> Option<Self::Item> {
        self.read_record().transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Vec<Vec<String>>, LoadError> {
        Reader::new(Path::new("t.csv"), s)
            .map(|r| r.map(|r| r.fields.into_iter().map(|f| f.text.into_owned()).collect()))
            .collect()
    }

    #[test]
    fn fields_quotes_and_newlines() {
        let rows = parse("a,\"b,c\",,\"d\"\"e\"\r\n\n\"x\ny\",z\n").unwrap();
        assert_eq!(rows, vec![vec!["a", "b,c", "", "d\"e"], vec!["x\ny", "z"]]);
        assert_eq!(parse("a,b,").unwrap(), vec![vec!["a", "b", ""]]);
    }

    #[test]
    fn broken_quoting_is_located() {
        let e = parse("a,b\nc,\"d\n").unwrap_err();
        assert_eq!((e.kind, e.location.line, e.location.column), (ErrorKind::BrokenQuoting, Some(2), Some(3)));
        let e = parse("a,\"b\"x\n").unwrap_err();
        assert_eq!((e.location.line, e.location.column), (Some(1), Some(6)));
        let e = parse("ab\"c\n").unwrap_err();
        assert_eq!((e.location.line, e.location.column), (Some(1), Some(3)));
    }
}
