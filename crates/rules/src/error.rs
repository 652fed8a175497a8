//! Errors with a location: every problem in an input file names the file, the line, the
//! column, what was found and what was expected, like a compiler diagnostic.

use std::fmt;
use std::path::{Path, PathBuf};

/// Where in an input a problem is. Lines and columns are 1-based; a column counts characters
/// (of the line where the offending value starts), in CSV, XML and TOML files alike.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Location {
    pub file: PathBuf,
    pub line: Option<u64>,
    pub column: Option<u64>,
    /// Name of the CSV column (criterion code) when the column is a field.
    pub field: Option<String>,
}

impl Location {
    pub fn file(path: &Path) -> Self {
        Location { file: path.to_path_buf(), ..Default::default() }
    }
    pub fn at(path: &Path, line: u64, column: u64) -> Self {
        Location { file: path.to_path_buf(), line: Some(line), column: Some(column), field: None }
    }
    pub fn field(path: &Path, line: u64, column: u64, field: &str) -> Self {
        Location { file: path.to_path_buf(), line: Some(line), column: Some(column), field: Some(field.to_string()) }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(l) = self.line {
            write!(f, ":{l}")?;
            if let Some(c) = self.column {
                write!(f, ":{c}")?;
            }
        }
        if let Some(name) = &self.field {
            write!(f, " (column {name})")?;
        }
        Ok(())
    }
}

/// The kinds of problem a loader reports. Each has its own variant so tests and callers can
/// tell them apart without parsing messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    Io,
    NotUtf8,
    EmptyFile,
    Xml,
    Toml,
    Csv,
    BrokenQuoting,
    WrongColumnCount,
    MissingColumn,
    UnknownCriterion,
    DuplicateCriterion,
    MandatoryWildcard,
    MalformedRange,
    ReversedRange,
    ImpossibleDate,
    NotAnInteger,
    IntegerTooLarge,
    DuplicateRuleId,
    BadContent,
    BadRuleType,
    BadQueryValue,
}

impl ErrorKind {
    pub fn as_str(self) -> &'static str {
        use ErrorKind::*;
        match self {
            Io => "io",
            NotUtf8 => "not-utf8",
            EmptyFile => "empty-file",
            Xml => "xml",
            Toml => "toml",
            Csv => "csv",
            BrokenQuoting => "broken-quoting",
            WrongColumnCount => "wrong-column-count",
            MissingColumn => "missing-column",
            UnknownCriterion => "unknown-criterion",
            DuplicateCriterion => "duplicate-criterion",
            MandatoryWildcard => "mandatory-wildcard",
            MalformedRange => "malformed-range",
            ReversedRange => "reversed-range",
            ImpossibleDate => "impossible-date",
            NotAnInteger => "not-an-integer",
            IntegerTooLarge => "integer-too-large",
            DuplicateRuleId => "duplicate-rule-id",
            BadContent => "bad-content",
            BadRuleType => "bad-rule-type",
            BadQueryValue => "bad-query-value",
        }
    }
}

impl ErrorKind {
    /// What the problem is, in words that quote nothing of the input: what a service may tell a
    /// peer about a file of its own (the message itself can quote the file's text).
    pub fn summary(self) -> &'static str {
        use ErrorKind::*;
        match self {
            Io => "the file cannot be read",
            NotUtf8 => "the file is not UTF-8 text",
            EmptyFile => "the file is empty",
            Xml => "the XML is not well-formed",
            Toml => "the TOML is not valid",
            Csv => "the CSV is not valid",
            BrokenQuoting => "a quoted field is not closed",
            WrongColumnCount => "a line has the wrong number of fields",
            MissingColumn => "a column the format needs is missing or out of place",
            UnknownCriterion => "a criterion is not in the rule type",
            DuplicateCriterion => "a criterion appears twice",
            MandatoryWildcard => "a mandatory criterion is a wildcard",
            MalformedRange => "a range is malformed",
            ReversedRange => "a range ends before it starts",
            ImpossibleDate => "a date does not exist",
            NotAnInteger => "a value is not an integer",
            IntegerTooLarge => "an integer is out of range",
            DuplicateRuleId => "a rule id appears twice",
            BadContent => "a rule's content is not valid",
            BadRuleType => "the rule type is not valid",
            BadQueryValue => "a query value is not valid",
        }
    }
}

/// A problem in an input, with where it is, what was found and what was expected. Boxed so a
/// `Result<_, LoadError>` stays one pointer wide on the hot (success) path; fields are read
/// through `Deref` (`e.kind`, `e.location`, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadError(Box<LoadErrorDetail>);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadErrorDetail {
    pub kind: ErrorKind,
    pub location: Location,
    pub message: String,
    pub expected: Option<String>,
}

impl std::ops::Deref for LoadError {
    type Target = LoadErrorDetail;
    fn deref(&self) -> &LoadErrorDetail {
        &self.0
    }
}

impl LoadError {
    pub fn new(kind: ErrorKind, location: Location, message: impl Into<String>) -> Self {
        LoadError(Box::new(LoadErrorDetail { kind, location, message: message.into(), expected: None }))
    }
    pub fn expected(mut self, expected: impl Into<String>) -> Self {
        self.0.expected = Some(expected.into());
        self
    }
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: error[{}]: {}", self.location, self.kind.as_str(), self.message)?;
        if let Some(e) = &self.expected {
            write!(f, "; expected {e}")?;
        }
        Ok(())
    }
}

impl LoadError {
    /// Where and what, without the message: `rules.csv:1:1: error[missing-column]: a column the
    /// format needs is missing or out of place`. Never quotes the input (see [`ErrorKind::summary`]).
    pub fn without_content(&self) -> String {
        format!("{}: error[{}]: {}", self.location, self.kind.as_str(), self.kind.summary())
    }
}

impl std::error::Error for LoadError {}

/// Reads a whole file as UTF-8, reporting the exact byte position of the first invalid byte.
pub fn read_utf8(path: &Path) -> Result<String, LoadError> {
    let bytes = std::fs::read(path).map_err(|e| LoadError::new(ErrorKind::Io, Location::file(path), e.to_string()))?;
    text_from_bytes(path, bytes)
}

pub(crate) fn text_from_bytes(path: &Path, bytes: Vec<u8>) -> Result<String, LoadError> {
    match String::from_utf8(bytes) {
        Ok(s) => {
            if s.trim().is_empty() {
                return Err(LoadError::new(ErrorKind::EmptyFile, Location::file(path), "the file is empty")
                    .expected("a header line and at least the definitions it announces"));
            }
            Ok(s)
        }
        Err(e) => {
            let good = e.utf8_error().valid_up_to();
            let bytes = e.as_bytes();
            let prefix = &bytes[..good];
            let line = 1 + prefix.iter().filter(|&&b| b == b'\n').count() as u64;
            let line_start = prefix.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
            let col = 1 + std::str::from_utf8(&prefix[line_start..]).map_or(0, |s| s.chars().count()) as u64;
            Err(LoadError::new(
                ErrorKind::NotUtf8,
                Location::at(path, line, col),
                format!("invalid UTF-8 byte 0x{:02X} at byte offset {good}", bytes[good]),
            )
            .expected("UTF-8 text (convert the file, e.g. `iconv -f latin1 -t utf-8`)"))
        }
    }
}
