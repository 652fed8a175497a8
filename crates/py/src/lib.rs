//! `offload._native`: a thin PyO3 layer over the Rust crates. No logic lives here: it converts
//! arguments, releases the GIL around every loop, and turns errors into Python exceptions.

use numpy::{
    IntoPyArray, PyArray1, PyArray2, PyArrayMethods, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods,
};
use offload_rules::{self as rules, Engine, LoadError, MatcherKind, PackedStrings, RawColumn, StringColumn};
use pyo3::create_exception;
use pyo3::exceptions::{PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyString};
use pyo3::IntoPyObjectExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

mod recsys;

create_exception!(_native, RuleError, PyValueError, "A rule, rule-type or query file is invalid.");

fn rule_error(py: Python<'_>, e: LoadError) -> PyErr {
    let err = RuleError::new_err(e.to_string());
    let v = err.value(py);
    let _ = v.setattr("kind", e.kind.as_str());
    let _ = v.setattr("file", e.location.file.display().to_string());
    let _ = v.setattr("line", e.location.line);
    let _ = v.setattr("column", e.location.column);
    let _ = v.setattr("field", e.location.field.clone());
    let _ = v.setattr("expected", e.expected.clone());
    err
}

fn parse_kind(s: &str) -> PyResult<MatcherKind> {
    s.parse().map_err(PyValueError::new_err)
}

/// A validated rule set.
#[pyclass(module = "offload._native", frozen)]
struct RuleSet {
    inner: Arc<rules::RuleSet>,
}

#[pymethods]
impl RuleSet {
    /// Loads a rule set: ERBIUM (`.xml` rule type + CSV) or native (`.toml` + CSV).
    #[staticmethod]
    fn load(py: Python<'_>, rule_type: PathBuf, rules_csv: PathBuf) -> PyResult<Self> {
        let r = py.allow_threads(|| rules::load(&rule_type, &rules_csv));
        r.map(|rs| RuleSet { inner: Arc::new(rs) }).map_err(|e| rule_error(py, e))
    }
    fn __len__(&self) -> usize {
        self.inner.len()
    }
    #[getter]
    fn code(&self) -> String {
        self.inner.rule_type.code.clone()
    }
    /// Criteria as (code, kind, mandatory, weight) tuples, in column order.
    #[getter]
    fn criteria(&self) -> Vec<(String, &'static str, bool, u64)> {
        self.inner.rule_type.criteria.iter().map(|c| (c.code.clone(), c.kind.as_str(), c.mandatory, c.weight)).collect()
    }
    #[getter]
    fn ids(&self) -> Vec<String> {
        self.inner.ids.clone()
    }
    #[getter]
    fn contents<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<i64>> {
        self.inner.contents.clone().into_pyarray(py)
    }
    /// Scores as Python ints (they may exceed 64 bits).
    fn scores(&self) -> Vec<u128> {
        (0..self.inner.len()).map(|r| self.inner.score(r)).collect()
    }
    /// Per criterion: number of rules specific on it and number of distinct values.
    fn criterion_stats(&self) -> Vec<(String, usize, usize)> {
        let rs = &self.inner;
        (0..rs.n_criteria())
            .map(|c| {
                let specific = (0..rs.len()).filter(|&r| rs.is_specific(r, c)).count();
                let distinct = match &rs.columns[c] {
                    rules::model::Column::Equ { dict, .. } => dict.len(),
                    rules::model::Column::Range { bounds } => {
                        let mut b: Vec<_> = bounds.iter().flatten().collect();
                        b.sort_unstable();
                        b.dedup();
                        b.len()
                    }
                };
                (rs.rule_type.criteria[c].code.clone(), specific, distinct)
            })
            .collect()
    }
    /// The rule's cells as text (native syntax; "" = wildcard).
    fn rule_cells(&self, index: usize) -> PyResult<Vec<String>> {
        if index >= self.inner.len() {
            return Err(PyValueError::new_err(format!("rule index {index} out of range")));
        }
        Ok((0..self.inner.n_criteria()).map(|c| self.inner.cell_text(index, c)).collect())
    }
    fn memory_bytes(&self) -> usize {
        self.inner.memory_bytes()
    }
}

/// Raw query columns from Python: a numpy int64 array (integers, or day numbers for dates), a
/// list of str, or `("packed", data: uint8 array, offsets: int64 array)` — Arrow's
/// large_string layout, read without a copy.
enum OwnedColumn<'py> {
    Int(PyReadonlyArray1<'py, i64>),
    Str(Vec<Bound<'py, PyString>>),
    Packed(PyReadonlyArray1<'py, u8>, PyReadonlyArray1<'py, i64>),
}

fn extract_columns<'py>(columns: &Bound<'py, PyList>) -> PyResult<Vec<OwnedColumn<'py>>> {
    columns
        .iter()
        .map(|col| {
            if let Ok(a) = col.extract::<PyReadonlyArray1<i64>>() {
                Ok(OwnedColumn::Int(a))
            } else if let Ok((tag, data, offsets)) =
                col.extract::<(String, PyReadonlyArray1<u8>, PyReadonlyArray1<i64>)>()
            {
                if tag != "packed" {
                    return Err(PyValueError::new_err(format!("unknown column layout {tag:?}")));
                }
                Ok(OwnedColumn::Packed(data, offsets))
            } else {
                let l = col.downcast::<PyList>().map_err(|_| {
                    PyValueError::new_err("each query column must be a list of str or a numpy int64 array")
                })?;
                l.iter()
                    .map(|v| {
                        v.downcast_into::<PyString>().map_err(|_| {
                            PyValueError::new_err("query values must be str (or numbers in an int64 array)")
                        })
                    })
                    .collect::<PyResult<Vec<_>>>()
                    .map(OwnedColumn::Str)
            }
        })
        .collect()
}

/// A rule set compiled for one matcher.
#[pyclass(module = "offload._native", frozen)]
struct CompiledRules {
    engine: Engine,
}

#[pymethods]
impl CompiledRules {
    #[new]
    #[pyo3(signature = (rules, matcher = "fast"))]
    fn new(py: Python<'_>, rules: &RuleSet, matcher: &str) -> PyResult<Self> {
        let kind = parse_kind(matcher)?;
        let inner = rules.inner.clone();
        let engine = py.allow_threads(|| Engine::compile(inner, kind)).map_err(PyRuntimeError::new_err)?;
        Ok(CompiledRules { engine })
    }
    #[getter]
    fn matcher(&self) -> &'static str {
        self.engine.matcher.name()
    }
    #[getter]
    fn width(&self) -> usize {
        self.engine.encoder.width()
    }
    #[getter]
    fn compile_seconds(&self) -> f64 {
        self.engine.compile_time.as_secs_f64()
    }
    fn memory_bytes(&self) -> usize {
        self.engine.matcher.memory_bytes()
    }
    /// Structure statistics of the matcher, as a JSON string.
    fn stats_json(&self) -> String {
        self.engine.matcher.stats().to_string()
    }
    /// Encodes raw query columns (one per criterion, in rule-type order) into an (n, width)
    /// uint32 array.
    fn encode<'py>(&self, py: Python<'py>, columns: &Bound<'py, PyList>) -> PyResult<Bound<'py, PyArray2<u32>>> {
        let owned = extract_columns(columns)?;
        let strs: Vec<Vec<&str>> = owned
            .iter()
            .map(|c| match c {
                OwnedColumn::Str(v) => v.iter().map(|s| s.to_str()).collect::<PyResult<Vec<&str>>>(),
                _ => Ok(Vec::new()),
            })
            .collect::<PyResult<_>>()?;
        let contiguous = |what: &str| PyValueError::new_err(format!("{what} array must be contiguous"));
        let raw: Vec<RawColumn> = owned
            .iter()
            .zip(strs)
            .map(|(c, s)| {
                Ok(match c {
                    OwnedColumn::Int(a) => RawColumn::Int(a.as_slice().map_err(|_| contiguous("int64"))?),
                    OwnedColumn::Str(_) => RawColumn::Str(s),
                    OwnedColumn::Packed(d, o) => RawColumn::Packed(
                        PackedStrings::new(
                            d.as_slice().map_err(|_| contiguous("string data"))?,
                            o.as_slice().map_err(|_| contiguous("offsets"))?,
                        )
                        .map_err(PyValueError::new_err)?,
                    ),
                })
            })
            .collect::<PyResult<_>>()?;
        let enc = &self.engine.encoder;
        let codes = py.allow_threads(|| enc.encode_columns(&raw)).map_err(|e| PyValueError::new_err(e.to_string()))?;
        let w = enc.width();
        let n = codes.len() / w;
        codes.into_pyarray(py).reshape([n, w])
    }
    /// Matches encoded queries; returns the winning rule index per query (2**32-1 = no match).
    #[pyo3(signature = (codes, threads = 1))]
    fn match_encoded<'py>(
        &self,
        py: Python<'py>,
        codes: PyReadonlyArray2<'py, u32>,
        threads: usize,
    ) -> PyResult<Bound<'py, PyArray1<u32>>> {
        let w = self.engine.encoder.width();
        if codes.shape()[1] != w {
            return Err(PyValueError::new_err(format!("codes must have {w} columns, got {}", codes.shape()[1])));
        }
        let q = codes.as_slice().map_err(|_| PyValueError::new_err("codes must be C-contiguous"))?;
        let out = py.allow_threads(|| self.engine.match_encoded(q, threads));
        Ok(out.into_pyarray(py))
    }
    /// Explains one query (raw values, one per criterion) as a JSON string.
    fn explain_json(&self, values: Vec<String>) -> PyResult<String> {
        let enc = &self.engine.encoder;
        let cols: Vec<RawColumn> = values.iter().map(|v| RawColumn::Str(vec![v.as_str()])).collect();
        let q = enc.encode_columns(&cols).map_err(|e| PyValueError::new_err(e.to_string()))?;
        let ex = rules::explain::explain(enc, &self.engine.encoded, &q, &values);
        Ok(serde_json::to_string(&ex).expect("explanation serialises"))
    }
    /// Times matching of `codes` in batches of `batch_size` with `threads` threads, `repeats`
    /// times; returns the seconds of each repeat. The loop runs in Rust with the GIL released.
    #[pyo3(signature = (codes, batch_size, threads = 1, repeats = 5))]
    fn time_match(
        &self,
        py: Python<'_>,
        codes: PyReadonlyArray2<'_, u32>,
        batch_size: usize,
        threads: usize,
        repeats: usize,
    ) -> PyResult<Vec<f64>> {
        let w = self.engine.encoder.width();
        let q = codes.as_slice().map_err(|_| PyValueError::new_err("codes must be C-contiguous"))?;
        let m = &*self.engine.matcher;
        let bs = batch_size.max(1);
        Ok(py.allow_threads(|| {
            let mut out = vec![0u32; bs];
            (0..repeats.max(1))
                .map(|_| {
                    let t = Instant::now();
                    for chunk in q.chunks(bs * w) {
                        let o = &mut out[..chunk.len() / w];
                        rules::match_parallel(m, chunk, o, threads);
                    }
                    std::hint::black_box(&out);
                    t.elapsed().as_secs_f64()
                })
                .collect()
        }))
    }

    /// For a matcher on a device, where its time goes on (up to one chunk of) `codes`, as JSON
    /// (staging copies, the kernel per block size, the pipeline with transfers); None otherwise.
    fn device_profile(
        &self,
        py: Python<'_>,
        codes: PyReadonlyArray2<'_, u32>,
        repeats: usize,
    ) -> PyResult<Option<String>> {
        let q = codes.as_slice().map_err(|_| PyValueError::new_err("codes must be C-contiguous"))?;
        if codes.shape()[1] != self.engine.encoder.width() {
            return Err(PyValueError::new_err("codes must have one column per criterion"));
        }
        let m = &*self.engine.matcher;
        Ok(py.allow_threads(|| m.device_profile(q, repeats)).map(|v| v.to_string()))
    }
}

/// Loads a query CSV and returns (ids, columns of raw text), validating it against `rules`.
#[pyfunction]
fn load_queries(py: Python<'_>, rules: &RuleSet, path: PathBuf) -> PyResult<(Vec<String>, Vec<Vec<String>>)> {
    let rt = rules.inner.rule_type.clone();
    let q = py.allow_threads(|| rules::queries::load_queries(&rt, &path)).map_err(|e| rule_error(py, e))?;
    Ok((q.ids, q.columns.iter().map(|c| c.iter().map(String::from).collect()).collect()))
}

/// `offload rules eval`: loads rules and queries, matches, writes `QUERY_ID,RULE_ID,CONTENT`.
/// Returns timings as a JSON string.
#[pyfunction]
#[pyo3(signature = (rule_type, rules_csv, queries_csv, out_csv, matcher = "fast", threads = 1))]
fn eval_files(
    py: Python<'_>,
    rule_type: PathBuf,
    rules_csv: PathBuf,
    queries_csv: PathBuf,
    out_csv: PathBuf,
    matcher: &str,
    threads: usize,
) -> PyResult<String> {
    let kind = parse_kind(matcher)?;
    // A bad file is a rule error; a matcher that cannot run here (`gpu` without a device) is not.
    enum Failed {
        Input(LoadError),
        Matcher(String),
        Write(String),
    }
    impl From<LoadError> for Failed {
        fn from(e: LoadError) -> Self {
            Failed::Input(e)
        }
    }
    let r: Result<serde_json::Value, Failed> = py.allow_threads(|| {
        let t0 = Instant::now();
        let rs = Arc::new(rules::load(&rule_type, &rules_csv)?);
        let t_load = t0.elapsed().as_secs_f64();
        let engine = Engine::compile(rs.clone(), kind).map_err(Failed::Matcher)?;
        let t1 = Instant::now();
        let q = rules::queries::load_queries(&rs.rule_type, &queries_csv)?;
        let t_read_q = t1.elapsed().as_secs_f64();
        let t2 = Instant::now();
        let codes = q.encode(&engine.encoder, &queries_csv)?;
        let t_encode = t2.elapsed().as_secs_f64();
        let t3 = Instant::now();
        let answers = engine.match_encoded(&codes, threads);
        let t_match = t3.elapsed().as_secs_f64();
        rules::queries::write_answers(&out_csv, &q.ids, &answers, &rs).map_err(|e| {
            let why = match e.kind() {
                std::io::ErrorKind::StorageFull => "no space left on the device".to_string(),
                std::io::ErrorKind::QuotaExceeded => "disk quota exceeded".to_string(),
                _ => e.to_string(),
            };
            Failed::Write(format!("cannot write {}: {why}; nothing was left half-written", out_csv.display()))
        })?;
        let matched = answers.iter().filter(|&&a| a != rules::NO_MATCH).count();
        Ok(serde_json::json!({
            "rules": rs.len(), "queries": q.len(), "matched": matched, "matcher": kind.to_string(),
            "threads": threads, "load_s": t_load, "compile_s": engine.compile_time.as_secs_f64(),
            "read_queries_s": t_read_q, "encode_s": t_encode, "match_s": t_match,
        }))
    });
    r.map(|v| v.to_string()).map_err(|e| match e {
        Failed::Input(e) => rule_error(py, e),
        Failed::Matcher(why) => PyRuntimeError::new_err(why),
        Failed::Write(why) => PyOSError::new_err(why),
    })
}

/// Times encoding of raw text columns (one list of str per criterion) `repeats` times; returns
/// seconds per repeat.
#[pyfunction]
#[pyo3(signature = (compiled, columns, repeats = 3))]
fn time_encode(
    py: Python<'_>,
    compiled: &CompiledRules,
    columns: Vec<Vec<String>>,
    repeats: usize,
) -> PyResult<Vec<f64>> {
    let enc = &compiled.engine.encoder;
    py.allow_threads(|| {
        // Laid out back to back first, as the query-file reader and Arrow input have it: this
        // times turning raw values into codes, not chasing one heap allocation per value.
        let packed: Vec<StringColumn> = columns
            .iter()
            .map(|c| {
                let mut p = StringColumn::default();
                c.iter().for_each(|s| p.push(s));
                p
            })
            .collect();
        let raw: Vec<RawColumn> = packed.iter().map(StringColumn::as_raw).collect();
        (0..repeats.max(1))
            .map(|_| {
                let t = Instant::now();
                let codes = enc.encode_columns(&raw).map_err(|e| PyValueError::new_err(e.to_string()))?;
                std::hint::black_box(&codes);
                Ok(t.elapsed().as_secs_f64())
            })
            .collect()
    })
}

/// The CUDA device the `gpu` matcher would run on, as JSON; RuntimeError saying what is
/// missing (driver, device, NVRTC) where there is none.
#[pyfunction]
fn gpu_device() -> PyResult<String> {
    let dev = rules::matcher::gpu::device::available().map_err(PyRuntimeError::new_err)?;
    serde_json::to_string(&dev).map_err(|e| PyRuntimeError::new_err(e.to_string()))
}

/// The gpu matcher's kernel compiled by NVRTC to PTX for `arch` (e.g. `compute_90`); needs
/// NVRTC, not a device. RuntimeError with NVRTC's log if it does not compile.
#[pyfunction]
fn gpu_kernel_ptx(arch: &str) -> PyResult<String> {
    rules::matcher::gpu::device::kernel_ptx(arch).map(|p| p.to_src()).map_err(PyRuntimeError::new_err)
}

/// Serves a rule set over ZeroMQ until SIGINT/SIGTERM (`offload serve ARGS`): `args` are the
/// command line after `offload serve`, parsed by the daemon's one settings type
/// (`offload_serve::config::Settings`, the same as `offload-serve`'s). Returns the counters, or
/// the text `--help`/`--version` asked for; bad arguments are a ValueError of one line.
#[pyfunction]
fn serve(py: Python<'_>, args: Vec<String>) -> PyResult<PyObject> {
    use offload_serve::config::{ArgsError, Settings};
    let settings = match Settings::from_args(std::iter::once("offload serve".to_string()).chain(args)) {
        Ok(s) => s,
        Err(ArgsError::Show(text)) => return text.into_py_any(py),
        Err(ArgsError::Invalid(why)) => return Err(PyValueError::new_err(why)),
    };
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let counters = py
        .allow_threads(|| {
            offload_serve::serve(settings, stop, |s, cfg| {
                eprintln!(
                    "serving {} rules (version {}) on {} with {}w {}k {}e",
                    s.engine.rules().len(),
                    s.version,
                    cfg.endpoints.join(", "),
                    cfg.workers,
                    cfg.kernels,
                    cfg.engine_threads
                )
            })
        })
        .map_err(PyValueError::new_err)?;
    counters.into_py_any(py)
}

/// The daemon's options as `--help` shows them, for `offload serve --help` (usage named `name`).
#[pyfunction]
fn serve_help(name: &str) -> String {
    offload_serve::config::Settings::help(name)
}

/// Makes a CURVE key pair: `DIR/NAME.key` (public) and `DIR/NAME.key_secret` (mode 0600);
/// returns their paths (`offload serve keys`).
#[pyfunction]
#[pyo3(signature = (directory, name, force = false))]
fn curve_key_pair(directory: PathBuf, name: &str, force: bool) -> PyResult<(PathBuf, PathBuf)> {
    offload_serve::auth::write_key_pair(&directory, name, force).map_err(PyValueError::new_err)
}

/// Reads a ZeroMQ key file: (public key, secret key or None), Z85-encoded.
#[pyfunction]
fn read_curve_key(path: PathBuf) -> PyResult<(String, Option<String>)> {
    use offload_serve::auth::{read_key_file, z85};
    let k = read_key_file(&path).map_err(PyValueError::new_err)?;
    Ok((z85(&k.public), k.secret.as_ref().map(z85)))
}

/// The fingerprint requests carry of the criterion names their columns follow, in order
/// (protocol version 2, `offload_serve::protocol::criteria_fingerprint`).
#[pyfunction]
fn criteria_fingerprint(names: Vec<String>) -> u64 {
    offload_serve::protocol::criteria_fingerprint(&names)
}

/// Builds a request frame from raw query columns (one per criterion, in the order whose names'
/// `criteria_fingerprint` is given): each a list of str or `("packed", data uint8, offsets int64)`.
#[pyfunction]
fn encode_request<'py>(
    py: Python<'py>,
    request_id: u64,
    deadline_us: u64,
    stop_after: u32,
    fingerprint: u64,
    columns: &Bound<'py, PyList>,
) -> PyResult<Bound<'py, pyo3::types::PyBytes>> {
    use offload_serve::protocol::{Payload, RawColumnOwned, Request};
    let owned = extract_columns(columns)?;
    let mut cols = Vec::with_capacity(owned.len());
    let mut n: Option<usize> = None;
    for c in &owned {
        let mut col = RawColumnOwned { offsets: vec![0], data: Vec::new() };
        let mut push = |v: &[u8]| -> PyResult<()> {
            col.data.extend_from_slice(v);
            let end = u32::try_from(col.data.len())
                .map_err(|_| PyValueError::new_err("a column holds more than 4 GiB of text: split the request"))?;
            col.offsets.push(end);
            Ok(())
        };
        match c {
            OwnedColumn::Str(v) => v.iter().try_for_each(|s| push(s.to_str()?.as_bytes()))?,
            OwnedColumn::Int(a) => a.as_array().iter().try_for_each(|x| push(x.to_string().as_bytes()))?,
            OwnedColumn::Packed(d, o) => {
                let p = PackedStrings::new(
                    d.as_slice().map_err(|_| PyValueError::new_err("string data must be contiguous"))?,
                    o.as_slice().map_err(|_| PyValueError::new_err("offsets must be contiguous"))?,
                )
                .map_err(PyValueError::new_err)?;
                (0..p.len()).try_for_each(|i| push(p.get(i).as_bytes()))?
            }
        }
        let len = col.offsets.len() - 1;
        if *n.get_or_insert(len) != len {
            return Err(PyValueError::new_err("query columns have different lengths"));
        }
        cols.push(col);
    }
    let req = Request {
        request_id,
        deadline_us,
        stop_after,
        n_queries: n.unwrap_or(0) as u32,
        criteria_fingerprint: fingerprint,
        payload: Payload::Raw(cols),
    };
    Ok(pyo3::types::PyBytes::new(py, &offload_serve::protocol::encode_request(&req)))
}

/// Builds a request frame from pre-encoded rows (`CompiledRules.encode`) for rule-set version
/// `encoding_version` of the rule type whose criteria have `fingerprint`.
#[pyfunction]
fn encode_request_codes<'py>(
    py: Python<'py>,
    request_id: u64,
    deadline_us: u64,
    stop_after: u32,
    fingerprint: u64,
    encoding_version: u64,
    codes: PyReadonlyArray2<'py, u32>,
) -> PyResult<Bound<'py, pyo3::types::PyBytes>> {
    use offload_serve::protocol::{Payload, Request};
    let (n, w) = (codes.shape()[0], codes.shape()[1]);
    let flat = codes.as_slice().map_err(|_| PyValueError::new_err("codes must be C-contiguous"))?.to_vec();
    let req = Request {
        request_id,
        deadline_us,
        stop_after,
        n_queries: n as u32,
        criteria_fingerprint: fingerprint,
        payload: Payload::Encoded { encoding_version, width: w as u16, codes: flat },
    };
    Ok(pyo3::types::PyBytes::new(py, &offload_serve::protocol::encode_request(&req)))
}

/// Decodes a reply frame: (request_id, status, ruleset_version, rule u32[], content i64[],
/// {stage: ns}, message).
#[pyfunction]
#[allow(clippy::type_complexity)]
fn decode_reply<'py>(
    py: Python<'py>,
    frame: &[u8],
) -> PyResult<(u64, String, u64, Bound<'py, PyArray1<u32>>, Bound<'py, PyArray1<i64>>, Vec<(String, u64)>, String)> {
    use offload_serve::protocol::Stage;
    let r = offload_serve::protocol::decode_reply(frame).map_err(|e| PyValueError::new_err(e.to_string()))?;
    let stages = r
        .stages_ns
        .iter()
        .map(|&(s, ns)| {
            let name = Stage::ALL.iter().find(|x| **x as u8 == s).map_or("unknown", |x| x.name());
            (name.to_string(), ns)
        })
        .collect();
    Ok((
        r.request_id,
        format!("{:?}", r.status),
        r.ruleset_version,
        r.rule.into_pyarray(py),
        r.content.into_pyarray(py),
        stages,
        r.message,
    ))
}

/// A bare ZeroMQ echo server on `endpoint` for `seconds` (GIL released): the baseline for the
/// service's round trip. Returns the number of messages echoed.
#[pyfunction]
fn zmq_echo(py: Python<'_>, endpoint: String, seconds: f64) -> PyResult<u64> {
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s2 = stop.clone();
    let timer = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs_f64(seconds.max(0.0)));
        s2.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    let r = py.allow_threads(|| offload_serve::echo(&endpoint, stop));
    let _ = timer.join();
    r.map_err(PyValueError::new_err)
}

/// Names of the channels `probe_channel` measures.
#[pyfunction]
fn probe_channels() -> Vec<&'static str> {
    offload_probe::CHANNELS.to_vec()
}

/// Measures one channel (GIL released); returns its JSON (points, fit). `sizes` = (lo, hi)
/// bytes overrides the channel's own payload range; `peer` is a command that runs the ZeroMQ
/// peer in its own process (it gets `zmq-peer ROLE DATA CONTROL CPU` appended and must call
/// `probe_zmq_peer` with those four), else the peer is a thread. `ops` = N replaces the timing
/// budget by one sample of exactly N operations (a reference tool's fixed-count protocol).
#[pyfunction]
#[pyo3(signature = (name, quick, dir, sizes = None, peer = None, ops = None))]
fn probe_channel(
    py: Python<'_>,
    name: String,
    quick: bool,
    dir: PathBuf,
    sizes: Option<(u64, u64)>,
    peer: Option<Vec<String>>,
    ops: Option<u64>,
) -> PyResult<String> {
    use offload_probe::zeromq::Peer;
    let peer = peer.map_or(Peer::Thread, Peer::Process);
    let budget = ops.map(offload_probe::Budget::fixed);
    let ch = py
        .allow_threads(|| offload_probe::run_with(&name, quick, &dir, sizes, &peer, budget))
        .map_err(PyValueError::new_err)?;
    serde_json::to_string(&ch).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// The ZeroMQ peer process's body (see `probe_channel`): role, data and control endpoints, and
/// the CPU to pin to (`-` for none). Returns when the measuring side says stop.
#[pyfunction]
fn probe_zmq_peer(py: Python<'_>, role: String, data: String, control: String, cpu: String) -> PyResult<()> {
    let cpu = cpu.parse::<usize>().ok();
    py.allow_threads(|| offload_probe::zeromq::peer_main(&role, &data, &control, cpu)).map_err(PyValueError::new_err)
}

/// Fits T(n) = L + n/B to (bytes, seconds) points, as every probe channel is (JSON, or
/// `null` when the points cannot be fitted). For channels measured outside Rust (the GPU).
#[pyfunction]
fn probe_fit(points: Vec<(f64, f64)>) -> PyResult<String> {
    serde_json::to_string(&offload_probe::fit(&points)).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// io_uring NOP cost, batch of 1 and 64 (JSON).
#[pyfunction]
fn probe_uring_nop(py: Python<'_>, quick: bool) -> PyResult<String> {
    let b = if quick { offload_probe::measure::Budget::QUICK } else { offload_probe::measure::Budget::FULL };
    let r = py.allow_threads(|| offload_probe::uring::nop(b)).map_err(PyValueError::new_err)?;
    serde_json::to_string(&r).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// 4 KiB O_DIRECT random reads through io_uring on a file of `file_bytes` in `dir` (JSON).
#[pyfunction]
fn probe_random_reads(
    py: Python<'_>,
    dir: PathBuf,
    file_bytes: u64,
    depths: Vec<usize>,
    seconds_per_depth: f64,
) -> PyResult<String> {
    let per = std::time::Duration::from_secs_f64(seconds_per_depth.max(0.01));
    let r = py
        .allow_threads(|| offload_probe::uring::random_reads(&dir, file_bytes, &depths, per))
        .map_err(PyValueError::new_err)?;
    serde_json::to_string(&r).map_err(|e| PyValueError::new_err(e.to_string()))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    recsys::register(m)?;
    m.add("NO_MATCH", rules::NO_MATCH)?;
    m.add("RuleError", m.py().get_type::<RuleError>())?;
    m.add_class::<RuleSet>()?;
    m.add_class::<CompiledRules>()?;
    m.add_function(wrap_pyfunction!(load_queries, m)?)?;
    m.add_function(wrap_pyfunction!(eval_files, m)?)?;
    m.add_function(wrap_pyfunction!(time_encode, m)?)?;
    m.add_function(wrap_pyfunction!(gpu_device, m)?)?;
    m.add_function(wrap_pyfunction!(gpu_kernel_ptx, m)?)?;
    m.add_function(wrap_pyfunction!(serve, m)?)?;
    m.add_function(wrap_pyfunction!(serve_help, m)?)?;
    m.add_function(wrap_pyfunction!(curve_key_pair, m)?)?;
    m.add_function(wrap_pyfunction!(read_curve_key, m)?)?;
    m.add_function(wrap_pyfunction!(criteria_fingerprint, m)?)?;
    m.add_function(wrap_pyfunction!(encode_request, m)?)?;
    m.add_function(wrap_pyfunction!(encode_request_codes, m)?)?;
    m.add_function(wrap_pyfunction!(decode_reply, m)?)?;
    m.add_function(wrap_pyfunction!(probe_channels, m)?)?;
    m.add_function(wrap_pyfunction!(probe_channel, m)?)?;
    m.add_function(wrap_pyfunction!(probe_uring_nop, m)?)?;
    m.add_function(wrap_pyfunction!(probe_fit, m)?)?;
    m.add_function(wrap_pyfunction!(probe_zmq_peer, m)?)?;
    m.add_function(wrap_pyfunction!(probe_random_reads, m)?)?;
    m.add_function(wrap_pyfunction!(zmq_echo, m)?)?;
    Ok(())
}
