//! One error type for the crate: what went wrong and where (file, table, position in a batch).

use std::fmt;
use std::path::PathBuf;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// An operating-system call on a file failed.
    Io { path: PathBuf, op: &'static str, message: String },
    /// A file is not a table of ours, or is damaged (truncated, bad header).
    BadTable { path: PathBuf, problem: String },
    /// An input batch is malformed: `table` is the table's position in the model, `position` the
    /// offending element of `offsets` or `indices`.
    BadInput { table: usize, what: &'static str, position: usize, problem: String },
    /// A dense feature is NaN or infinite: `sample` is its row in the batch, `feature` its column.
    /// Refused, as the MLPs would turn it into a confident prediction (a sigmoid of inf is 1).
    NonFiniteDense { sample: usize, feature: usize, value: String },
    /// Shapes disagree (model vs tables, dense width, weights).
    Shape(String),
    /// The machine lacks what a strategy needs (O_DIRECT, io_uring, FIEMAP, cgroups).
    Unsupported(String),
    /// The device process (or its channel) failed: it died, did not answer, or refused a request.
    Device(String),
    /// The caller asked a long operation to stop (its progress callback said so: Ctrl-C).
    Stopped,
}

impl Error {
    pub fn io(path: impl Into<PathBuf>, op: &'static str, e: impl fmt::Display) -> Error {
        Error::Io { path: path.into(), op, message: e.to_string() }
    }
    pub fn bad_table(path: impl Into<PathBuf>, problem: impl Into<String>) -> Error {
        Error::BadTable { path: path.into(), problem: problem.into() }
    }
    /// A short name of the kind, for Python exceptions and JSON.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Io { .. } => "io",
            Error::BadTable { .. } => "bad-table",
            Error::BadInput { .. } | Error::NonFiniteDense { .. } => "bad-input",
            Error::Shape(_) => "shape",
            Error::Unsupported(_) => "unsupported",
            Error::Device(_) => "device",
            Error::Stopped => "stopped",
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { path, op, message } => write!(f, "{}: {op}: {message}", path.display()),
            Error::BadTable { path, problem } => {
                write!(f, "{}: not a usable embedding table: {problem}", path.display())
            }
            Error::BadInput { table, what, position, problem } => {
                write!(f, "table {table}: {what}[{position}]: {problem}")
            }
            Error::NonFiniteDense { sample, feature, value } => write!(
                f,
                "dense features: sample {sample}, feature {feature} is {value}; dense features must be finite numbers"
            ),
            Error::Shape(m) | Error::Unsupported(m) | Error::Device(m) => f.write_str(m),
            Error::Stopped => f.write_str("stopped by the caller"),
        }
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;
