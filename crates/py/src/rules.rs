//! `offload._native` bindings of `crates/rules`: rule sets, compiled matchers, query files,
//! `offload rules eval`, the GPU device. Conversions only; loops run with the GIL released.

use crate::to_py;
use numpy::{
    IntoPyArray, PyArray1, PyArray2, PyArrayMethods, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods,
};
use offload_rules::{self as rules, Engine, LoadError, MatcherKind, PackedStrings, RawColumn};
use pyo3::create_exception;
use pyo3::exceptions::{PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

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
pub(crate) enum OwnedColumn<'py> {
    Int(PyReadonlyArray1<'py, i64>),
    Str(Vec<Bound<'py, PyString>>),
    Packed(PyReadonlyArray1<'py, u8>, PyReadonlyArray1<'py, i64>),
}

pub(crate) fn extract_columns<'py>(columns: &Bound<'py, PyList>) -> PyResult<Vec<OwnedColumn<'py>>> {
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

/// Encodes raw query columns (list of str, int64 array or packed, one per criterion) with
/// `enc` into row-major codes, the GIL released.
fn encode_columns(py: Python<'_>, enc: &rules::Encoder, columns: &Bound<'_, PyList>) -> PyResult<Vec<u32>> {
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
    py.allow_threads(|| enc.encode_columns(&raw)).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// A client-side encoder built from a server's dictionary bytes (`CompiledRules.dictionary`,
/// or a dictionary reply of `offload serve`): the same codes as the server's encoder, without
/// the rules (`offload_rules::Encoder::from_dictionary`).
#[pyclass(module = "offload._native", frozen)]
struct DictionaryEncoder {
    encoder: rules::Encoder,
    code_bits: u8,
}

#[pymethods]
impl DictionaryEncoder {
    /// Reads the dictionary; ValueError saying what is wrong with bytes that are not one.
    #[new]
    fn new(dictionary: &[u8]) -> PyResult<Self> {
        let d = rules::EncoderDictionary::from_bytes(dictionary)
            .map_err(|e| PyValueError::new_err(format!("bad encoder dictionary: {e}")))?;
        let code_bits = d.max_code_bits();
        let encoder = rules::Encoder::from_dictionary(d).map_err(PyValueError::new_err)?;
        Ok(DictionaryEncoder { encoder, code_bits })
    }
    #[getter]
    fn width(&self) -> usize {
        self.encoder.width()
    }
    /// The rule type's code.
    #[getter]
    fn rule_type(&self) -> String {
        self.encoder.rules().rule_type.code.clone()
    }
    /// The criterion codes, in column order.
    #[getter]
    fn criteria(&self) -> Vec<String> {
        self.encoder.rules().rule_type.criteria.iter().map(|c| c.code.clone()).collect()
    }
    /// 16 when every code fits in a uint16, else 32.
    #[getter]
    fn code_bits(&self) -> u8 {
        self.code_bits
    }
    /// Encodes raw query columns (as `CompiledRules.encode`) into an (n, width) array of
    /// uint32, or uint16 with `code_bits=16` (ValueError where some code does not fit).
    #[pyo3(signature = (columns, code_bits = 32))]
    fn encode<'py>(&self, py: Python<'py>, columns: &Bound<'py, PyList>, code_bits: u8) -> PyResult<PyObject> {
        if code_bits != 16 && code_bits != 32 {
            return Err(PyValueError::new_err(format!("code_bits is 16 or 32, not {code_bits}")));
        }
        if code_bits < self.code_bits {
            return Err(PyValueError::new_err(format!(
                "this dictionary's codes need {} bits, not {code_bits}",
                self.code_bits
            )));
        }
        let codes = encode_columns(py, &self.encoder, columns)?;
        let w = self.encoder.width();
        let n = codes.len() / w;
        if code_bits == 16 {
            let narrow: Vec<u16> = codes.iter().map(|&c| c as u16).collect();
            return Ok(narrow.into_pyarray(py).reshape([n, w])?.into_any().unbind());
        }
        Ok(codes.into_pyarray(py).reshape([n, w])?.into_any().unbind())
    }
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
    /// Structure statistics of the matcher, a dict.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &self.engine.matcher.stats())
    }
    /// Encodes raw query columns (one per criterion, in rule-type order) into an (n, width)
    /// uint32 array.
    fn encode<'py>(&self, py: Python<'py>, columns: &Bound<'py, PyList>) -> PyResult<Bound<'py, PyArray2<u32>>> {
        let enc = &self.engine.encoder;
        let codes = encode_columns(py, enc, columns)?;
        let w = enc.width();
        let n = codes.len() / w;
        codes.into_pyarray(py).reshape([n, w])
    }
    /// The encoder's dictionary (`offload_rules::EncoderDictionary::to_bytes`): what
    /// `DictionaryEncoder` needs to encode queries as this rule set does, without the rules.
    fn dictionary<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.engine.encoder.dictionary().to_bytes())
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
    /// Explains one query (raw values, one per criterion), a dict.
    fn explain<'py>(&self, py: Python<'py>, values: Vec<String>) -> PyResult<Bound<'py, PyAny>> {
        let enc = &self.engine.encoder;
        let cols: Vec<RawColumn> = values.iter().map(|v| RawColumn::Str(vec![v.as_str()])).collect();
        let q = enc.encode_columns(&cols).map_err(|e| PyValueError::new_err(e.to_string()))?;
        let ex = rules::explain::explain(enc, &self.engine.encoded, &q, &values);
        to_py(py, &ex)
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

    /// For a matcher on a device, where its time goes on (up to one chunk of) `codes`, a dict
    /// (staging copies, the kernel per block size, the pipeline with transfers); None otherwise.
    fn device_profile<'py>(
        &self,
        py: Python<'py>,
        codes: PyReadonlyArray2<'_, u32>,
        repeats: usize,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let q = codes.as_slice().map_err(|_| PyValueError::new_err("codes must be C-contiguous"))?;
        if codes.shape()[1] != self.engine.encoder.width() {
            return Err(PyValueError::new_err("codes must have one column per criterion"));
        }
        let m = &*self.engine.matcher;
        let profile = py.allow_threads(|| m.device_profile(q, repeats));
        profile.map(|p| to_py(py, &p)).transpose()
    }
}

/// Loads a query CSV and returns (ids, columns of raw text), validating it against `rules`.
#[pyfunction]
fn load_queries(py: Python<'_>, rules: &RuleSet, path: PathBuf) -> PyResult<(Vec<String>, Vec<Vec<String>>)> {
    let rt = rules.inner.rule_type.clone();
    let q = py.allow_threads(|| rules::queries::load_queries(&rt, &path)).map_err(|e| rule_error(py, e))?;
    Ok((q.ids, q.columns.iter().map(|c| c.iter().map(String::from).collect()).collect()))
}

/// `offload rules eval`: loads rules and queries, matches, writes `QUERY_ID,RULE_ID,CONTENT`
/// (`offload_rules::eval::eval_files`). Returns what it did and its timings, a dict.
#[pyfunction]
#[pyo3(signature = (rule_type, rules_csv, queries_csv, out_csv, matcher = "fast", threads = 1))]
fn eval_files<'py>(
    py: Python<'py>,
    rule_type: PathBuf,
    rules_csv: PathBuf,
    queries_csv: PathBuf,
    out_csv: PathBuf,
    matcher: &str,
    threads: usize,
) -> PyResult<Bound<'py, PyAny>> {
    use rules::eval::EvalError;
    let kind = parse_kind(matcher)?;
    let r = py.allow_threads(|| rules::eval::eval_files(&rule_type, &rules_csv, &queries_csv, &out_csv, kind, threads));
    // A bad file is a rule error; a matcher that cannot run here (`gpu` without a device) is not.
    let report = r.map_err(|e| match e {
        EvalError::Input(e) => rule_error(py, e),
        EvalError::Matcher(why) => PyRuntimeError::new_err(why),
        EvalError::Write(why) => PyOSError::new_err(why),
    })?;
    to_py(py, &report)
}

/// Times encoding of raw text columns (one list of str per criterion) `repeats` times; returns
/// seconds per repeat (`offload_rules::eval::time_encode`).
#[pyfunction]
#[pyo3(signature = (compiled, columns, repeats = 3))]
fn time_encode(
    py: Python<'_>,
    compiled: &CompiledRules,
    columns: Vec<Vec<String>>,
    repeats: usize,
) -> PyResult<Vec<f64>> {
    let enc = &compiled.engine.encoder;
    py.allow_threads(|| rules::eval::time_encode(enc, &columns, repeats))
        .map_err(|e| PyValueError::new_err(e.to_string()))
}

/// The CUDA device the `gpu` matcher would run on, a dict; RuntimeError saying what is
/// missing (driver, device, NVRTC) where there is none.
#[pyfunction]
fn gpu_device(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    let dev = rules::matcher::gpu::device::available().map_err(PyRuntimeError::new_err)?;
    to_py(py, &dev)
}

/// The gpu matcher's kernel compiled by NVRTC to PTX for `arch` (e.g. `compute_90`); needs
/// NVRTC, not a device. RuntimeError with NVRTC's log if it does not compile.
#[pyfunction]
fn gpu_kernel_ptx(arch: &str) -> PyResult<String> {
    rules::matcher::gpu::device::kernel_ptx(arch).map(|p| p.to_src()).map_err(PyRuntimeError::new_err)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("NO_MATCH", rules::NO_MATCH)?;
    m.add("RuleError", m.py().get_type::<RuleError>())?;
    m.add_class::<RuleSet>()?;
    m.add_class::<CompiledRules>()?;
    m.add_class::<DictionaryEncoder>()?;
    m.add_function(wrap_pyfunction!(load_queries, m)?)?;
    m.add_function(wrap_pyfunction!(eval_files, m)?)?;
    m.add_function(wrap_pyfunction!(time_encode, m)?)?;
    m.add_function(wrap_pyfunction!(gpu_device, m)?)?;
    m.add_function(wrap_pyfunction!(gpu_kernel_ptx, m)?)?;
    Ok(())
}
