//! `offload._native` bindings of `crates/recsys`: table files, the engine (every strategy), the
//! flash model. Conversions only; loops run with the GIL released.

use numpy::{IntoPyArray, PyArray1, PyArrayMethods, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods};
use offload_recsys::engine::{DeviceAt, DeviceMlp, Mode, Options};
use offload_recsys::{self as recsys, table, uring, Bags, Dlrm, Engine, FlashModel, Linear, Mlp, Strategy};
use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::path::PathBuf;

create_exception!(_native, RecsysError, PyValueError, "An embedding table, model or input batch is invalid.");

fn err(e: recsys::Error) -> PyErr {
    let kind = e.kind();
    Python::with_gil(|py| {
        let x = RecsysError::new_err(e.to_string());
        let _ = x.value(py).setattr("kind", kind);
        x
    })
}

/// A serialisable Rust value as Python objects (a struct becomes a dict).
fn to_dict<'py, T: serde::Serialize>(py: Python<'py>, v: &T) -> PyResult<Bound<'py, PyAny>> {
    Ok(pythonize::pythonize(py, v)?)
}

/// Writes a table of `rows` × `dim` with DLRM's initial distribution from `seed`
/// (deterministic per row); `progress(rows_written)` is called every 65,536 rows.
#[pyfunction]
#[pyo3(signature = (path, rows, dim, seed, progress=None))]
fn recsys_create_table(
    py: Python<'_>,
    path: PathBuf,
    rows: u64,
    dim: u32,
    seed: u64,
    progress: Option<PyObject>,
) -> PyResult<()> {
    let mut raised = None;
    let made = py.allow_threads(|| {
        table::create_random(&path, rows, dim, seed, |done| call_progress(progress.as_ref(), done, &mut raised))
    });
    stopped_or(made.map(|_| ()), raised)
}

/// Runs Python's signal handlers and the progress callback, with the GIL; an exception either
/// raises (KeyboardInterrupt at Ctrl-C) is kept in `raised` and stops the work, which otherwise
/// would run on to its end with the interrupt lost.
fn call_progress(progress: Option<&PyObject>, done: u64, raised: &mut Option<PyErr>) -> recsys::Result<()> {
    Python::with_gil(|py| {
        py.check_signals()?;
        progress.map_or(Ok(()), |cb| cb.call1(py, (done,)).map(|_| ()))
    })
    .map_err(|e| {
        *raised = Some(e);
        recsys::Error::Stopped
    })
}

/// The exception a progress callback raised (the work stopped for it), else the work's result.
fn stopped_or(result: recsys::Result<()>, raised: Option<PyErr>) -> PyResult<()> {
    match (result, raised) {
        (Err(recsys::Error::Stopped), Some(e)) => Err(e),
        (r, _) => r.map_err(err),
    }
}

/// Writes a table from a (rows, dim) float32 array (e.g. a trained model's `emb_l.K.weight`).
#[pyfunction]
fn recsys_write_table(py: Python<'_>, path: PathBuf, values: PyReadonlyArray2<'_, f32>) -> PyResult<()> {
    let shape = values.shape().to_vec();
    let v = values.as_slice().map_err(|_| PyValueError::new_err("the table array must be C-contiguous"))?;
    py.allow_threads(|| {
        let mut w = table::TableWriter::create(&path, shape[0] as u64, shape[1] as u32)?;
        w.write_rows(v)?;
        w.finish()
    })
    .map(|_| ())
    .map_err(err)
}

fn header_dict<'py>(
    py: Python<'py>,
    m: &table::TableMeta,
    version: u32,
    sums_crc: u32,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("version", version)?;
    d.set_item("rows", m.rows)?;
    d.set_item("dim", m.dim)?;
    d.set_item("dtype", "float32")?;
    d.set_item("row_bytes", m.row_bytes)?;
    d.set_item("block_bytes", m.block_bytes())?;
    d.set_item("blocks", m.blocks())?;
    d.set_item("file_bytes", m.file_bytes())?;
    d.set_item("sums_crc32c", format!("{sums_crc:08x}"))?;
    Ok(d)
}

/// A table's header (version, rows, dim, dtype, row and block bytes, size, the CRC-32C of its
/// row checksums), validated with the file's size; the rows are not read.
#[pyfunction]
fn recsys_table_header<'py>(py: Python<'py>, path: PathBuf) -> PyResult<Bound<'py, PyAny>> {
    let h = py.allow_threads(|| table::Header::read(&path)).map_err(err)?;
    Ok(header_dict(py, &h.meta, h.version, h.sums_crc)?.into_any())
}

/// Checks every row of a table against its checksums; `progress(bytes_checked)` now and then.
/// Raises RecsysError naming the first damaged block and the count.
#[pyfunction]
#[pyo3(signature = (path, progress=None))]
fn recsys_verify_table(py: Python<'_>, path: PathBuf, progress: Option<PyObject>) -> PyResult<()> {
    let mut raised = None;
    let checked = py.allow_threads(|| {
        let t = table::Table::open(&path)?;
        t.verify(|done| call_progress(progress.as_ref(), done, &mut raised))
    });
    stopped_or(checked, raised)
}

/// The header (as `recsys_table_header`) and the extents of a table file, opened as
/// `RM_open_table` does (the row checksum area is read and checked; the rows are not).
#[pyfunction]
fn recsys_table_info<'py>(py: Python<'py>, path: PathBuf) -> PyResult<Bound<'py, PyAny>> {
    let t = py.allow_threads(|| table::Table::open(&path)).map_err(err)?;
    let x = recsys::extents::Extents::of(&t.file, t.meta.file_bytes());
    let d = header_dict(py, &t.meta, table::VERSION, t.sums_crc)?;
    d.set_item("extents", x.extents.len())?;
    d.set_item("extents_source", x.source)?;
    d.set_item("first_physical", x.extents.first().map(|e| e.physical))?;
    Ok(d.into_any())
}

/// Rows `indices` of a table, as (n, dim) float32.
#[pyfunction]
fn recsys_read_rows<'py>(
    py: Python<'py>,
    path: PathBuf,
    indices: Vec<u64>,
) -> PyResult<Bound<'py, numpy::PyArray2<f32>>> {
    let (dim, flat) = py
        .allow_threads(|| -> recsys::Result<(usize, Vec<f32>)> {
            let t = table::Table::open(&path)?;
            let dim = t.meta.dim as usize;
            let mut out = vec![0f32; indices.len() * dim];
            for (i, &r) in indices.iter().enumerate() {
                if r >= t.meta.rows {
                    return Err(recsys::Error::Shape(format!(
                        "row {r} out of range for a table of {} rows",
                        t.meta.rows
                    )));
                }
                t.read_row(r, &mut out[i * dim..(i + 1) * dim])?;
            }
            Ok((dim, out))
        })
        .map_err(err)?;
    let n = flat.len() / dim.max(1);
    flat.into_pyarray(py).reshape([n, dim])
}

/// A batch as the engine takes it: dense features, one EmbeddingBag per table, rows.
fn batch<'a>(
    dense: &'a PyReadonlyArray2<'_, f32>,
    offsets: &'a [PyReadonlyArray1<'_, i64>],
    indices: &'a [PyReadonlyArray1<'_, i64>],
) -> PyResult<(&'a [f32], Vec<Bags<'a>>, usize)> {
    if offsets.len() != indices.len() {
        return Err(PyValueError::new_err(format!(
            "{} offsets arrays but {} indices arrays",
            offsets.len(),
            indices.len()
        )));
    }
    let d = dense.as_slice().map_err(|_| PyValueError::new_err("dense must be C-contiguous float32"))?;
    let contiguous = |a: &'a PyReadonlyArray1<'_, i64>, what: &str| {
        a.as_slice().map_err(|_| PyValueError::new_err(format!("{what} must be contiguous int64")))
    };
    let bags = offsets
        .iter()
        .zip(indices)
        .map(|(o, i)| Ok(Bags { offsets: contiguous(o, "offsets")?, indices: contiguous(i, "indices")? }))
        .collect::<PyResult<Vec<_>>>()?;
    Ok((d, bags, dense.shape()[0]))
}

/// (predictions, {stages, io, latency_s, interval_s}) of one batch.
fn outcome(
    py: Python<'_>,
    out: offload_recsys::engine::Outcome,
) -> PyResult<(Bound<'_, PyArray1<f32>>, Bound<'_, PyAny>)> {
    let info = PyDict::new(py);
    info.set_item("stages", to_dict(py, &out.stages)?)?;
    info.set_item("io", to_dict(py, &out.io)?)?;
    info.set_item("latency_s", out.latency_s)?;
    info.set_item("interval_s", out.interval_s)?;
    Ok((out.predictions.into_pyarray(py), info.into_any()))
}

/// The device's io_uring reader on fio's workload (`uring::random_reads`): {reads, seconds, iops}.
#[pyfunction]
#[pyo3(signature = (path, block, depth, reads, seed=1))]
fn recsys_random_reads<'py>(
    py: Python<'py>,
    path: PathBuf,
    block: u32,
    depth: usize,
    reads: u64,
    seed: u64,
) -> PyResult<Bound<'py, PyAny>> {
    let rate = py.allow_threads(|| uring::random_reads(&path, block, depth, reads, seed)).map_err(err)?;
    to_dict(py, &rate)
}

/// The seed's Table II flash model, as a dict (defaults) — or the one given, checked.
#[pyfunction]
#[pyo3(signature = (params=None))]
fn recsys_flash_model<'py>(py: Python<'py>, params: Option<&Bound<'py, PyDict>>) -> PyResult<Bound<'py, PyAny>> {
    let m = flash_from(params)?;
    let d = to_dict(py, &m)?;
    d.set_item("page_cycles", m.page_cycles())?;
    Ok(d)
}

/// C_EV: cycles of one vector read of `ev_bytes` under the Table II flash model (defaults) or
/// the one given — the kernel search's `b_EV` comes from here, not from a copy of the model.
#[pyfunction]
#[pyo3(signature = (ev_bytes, params=None))]
fn recsys_flash_vector_cycles(ev_bytes: u32, params: Option<&Bound<'_, PyDict>>) -> PyResult<u64> {
    Ok(flash_from(params)?.vector_cycles(ev_bytes))
}

fn flash_from(params: Option<&Bound<'_, PyDict>>) -> PyResult<FlashModel> {
    let base = serde_json::to_value(FlashModel::default()).expect("serialisable");
    let mut obj = base.as_object().cloned().expect("an object");
    if let Some(p) = params {
        let given: serde_json::Map<String, serde_json::Value> =
            pythonize::depythonize(p.as_any()).map_err(|e| PyValueError::new_err(e.to_string()))?;
        for (k, v) in given {
            if !obj.contains_key(&k) {
                let keys: Vec<_> = obj.keys().cloned().collect();
                return Err(PyValueError::new_err(format!(
                    "unknown flash model parameter {k:?}; known: {}",
                    keys.join(", ")
                )));
            }
            obj.insert(k, v);
        }
    }
    let m: FlashModel = serde_json::from_value(serde_json::Value::Object(obj))
        .map_err(|e| PyValueError::new_err(format!("flash model: {e}")))?;
    m.check().map_err(|e| PyValueError::new_err(format!("flash model: {e}")))?;
    Ok(m)
}

type Layer<'py> = (PyReadonlyArray2<'py, f32>, PyReadonlyArray1<'py, f32>);

fn mlp(layers: Vec<Layer<'_>>) -> PyResult<Mlp> {
    let mut out = Vec::new();
    for (w, b) in layers {
        let s = w.shape();
        let wv = w.as_slice().map_err(|_| PyValueError::new_err("weights must be C-contiguous"))?.to_vec();
        let bv = b.as_slice().map_err(|_| PyValueError::new_err("biases must be contiguous"))?.to_vec();
        out.push(Linear::new(s[1], s[0], wv, bv).map_err(err)?);
    }
    Mlp::new(out).map_err(err)
}

/// One strategy over a model and its table files (see `offload.recsys.engine`).
#[pyclass(module = "offload._native")]
struct RecsysEngine {
    inner: Engine,
}

#[pymethods]
impl RecsysEngine {
    #[new]
    #[pyo3(signature = (strategy, mode, tables, dense_width, bottom, top, dim, queue_depth=64, host_cache_vectors=8192, flash=None, device_mlp=(0, 0, 0), device_command=None, device_cpu=None, device_timeout_s=60.0, channel_bytes=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        strategy: &str,
        mode: &str,
        tables: Vec<PathBuf>,
        dense_width: usize,
        bottom: Vec<Layer<'_>>,
        top: Vec<Layer<'_>>,
        dim: usize,
        queue_depth: usize,
        host_cache_vectors: usize,
        flash: Option<&Bound<'_, PyDict>>,
        device_mlp: (u64, u64, u64),
        device_command: Option<Vec<String>>,
        device_cpu: Option<usize>,
        device_timeout_s: f64,
        channel_bytes: Option<usize>,
    ) -> PyResult<Self> {
        let s: Strategy = strategy.parse().map_err(PyValueError::new_err)?;
        let mode = match mode {
            "disk" => Mode::Disk,
            "flash" => Mode::Flash(flash_from(flash)?),
            m => return Err(PyValueError::new_err(format!("unknown mode {m:?}; one of disk, flash"))),
        };
        let model = Dlrm::new(dense_width, mlp(bottom)?, mlp(top)?, tables.len(), dim).map_err(err)?;
        let mut opts = Options::new(s, mode);
        opts.queue_depth = queue_depth;
        opts.host_cache_vectors = host_cache_vectors;
        opts.device_mlp =
            DeviceMlp { bottom_cycles: device_mlp.0, emb_layer_cycles: device_mlp.1, top_cycles: device_mlp.2 };
        if let Some(command) = device_command {
            if device_timeout_s.is_nan() || device_timeout_s <= 0.0 {
                return Err(PyValueError::new_err(format!("device_timeout_s must be > 0, got {device_timeout_s}")));
            }
            opts.device = DeviceAt::Process { command, cpu: device_cpu, timeout_s: device_timeout_s };
        }
        if let Some(b) = channel_bytes {
            opts.channel_bytes = b;
        }
        let inner = py.allow_threads(|| Engine::open(model, &tables, opts)).map_err(err)?;
        Ok(RecsysEngine { inner })
    }

    /// Puts the pages of these lookups of `table` into the modelled page cache (flash mode,
    /// ssd-s / ssd-m) without reading or timing anything; returns (pages held, capacity).
    fn warm_page_cache(
        &mut self,
        py: Python<'_>,
        table: usize,
        rows: PyReadonlyArray1<'_, i64>,
    ) -> PyResult<(usize, usize)> {
        let r = rows.as_slice().map_err(|_| PyValueError::new_err("rows must be contiguous int64"))?;
        let engine = &mut self.inner;
        py.allow_threads(|| engine.warm_page_cache(table, r)).map_err(err)
    }

    /// Predictions for one batch, and a dict with stages, latency, interval and I/O counters.
    fn infer<'py>(
        &mut self,
        py: Python<'py>,
        dense: PyReadonlyArray2<'py, f32>,
        offsets: Vec<PyReadonlyArray1<'py, i64>>,
        indices: Vec<PyReadonlyArray1<'py, i64>>,
    ) -> PyResult<(Bound<'py, PyArray1<f32>>, Bound<'py, PyAny>)> {
        let (d, bags, rows) = batch(&dense, &offsets, &indices)?;
        let engine = &mut self.inner;
        let out = py.allow_threads(|| engine.infer(d, &bags, rows)).map_err(err)?;
        outcome(py, out)
    }

    /// RM_send_inputs (rm-ssd): the batch goes to the device; read its outputs later, after
    /// sending the next batch (up to two in flight).
    fn send_inputs<'py>(
        &mut self,
        py: Python<'py>,
        dense: PyReadonlyArray2<'py, f32>,
        offsets: Vec<PyReadonlyArray1<'py, i64>>,
        indices: Vec<PyReadonlyArray1<'py, i64>>,
    ) -> PyResult<()> {
        let (d, bags, rows) = batch(&dense, &offsets, &indices)?;
        let engine = &mut self.inner;
        py.allow_threads(|| engine.send_inputs(d, &bags, rows)).map_err(err)
    }

    /// RM_read_outputs: predictions and info of the oldest batch sent.
    fn read_outputs<'py>(&mut self, py: Python<'py>) -> PyResult<(Bound<'py, PyArray1<f32>>, Bound<'py, PyAny>)> {
        let engine = &mut self.inner;
        let out = py.allow_threads(|| engine.read_outputs()).map_err(err)?;
        outcome(py, out)
    }

    /// Where the device side runs: pid, CPU applied (or why not), the channel.
    #[getter]
    fn device_info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_dict(py, &self.inner.device_info())
    }

    /// Payload bytes moved through the device channel by batches: {to_device, from_device}.
    #[getter]
    fn channel_bytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_dict(py, &self.inner.channel_bytes())
    }

    /// Stops the device process, if any (idempotent); later batches of a device strategy fail.
    fn close(&mut self, py: Python<'_>) {
        let engine = &mut self.inner;
        py.allow_threads(|| engine.close());
    }

    /// Bytes of all table files.
    #[getter]
    fn table_bytes(&self) -> u64 {
        self.inner.table_bytes()
    }

    /// Where each table's extents came from ("fiemap" or "fallback: …").
    #[getter]
    fn extents_source(&self) -> Vec<String> {
        self.inner.extents.iter().map(|x| x.source.clone()).collect()
    }
}

/// The device emulator's main loop: serves the shared-memory channel at `shm_path` until the
/// host closes it or is gone (`python -m offload.recsys.device SHM`). GIL released.
#[pyfunction]
fn recsys_device_serve(py: Python<'_>, shm_path: PathBuf) -> PyResult<()> {
    py.allow_threads(|| offload_recsys::device::serve(&shm_path)).map_err(err)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("RecsysError", m.py().get_type::<RecsysError>())?;
    m.add("RECSYS_STRATEGIES", recsys::STRATEGIES.map(Strategy::as_str).to_vec())?;
    m.add_class::<RecsysEngine>()?;
    m.add_function(wrap_pyfunction!(recsys_create_table, m)?)?;
    m.add_function(wrap_pyfunction!(recsys_write_table, m)?)?;
    m.add_function(wrap_pyfunction!(recsys_table_info, m)?)?;
    m.add_function(wrap_pyfunction!(recsys_table_header, m)?)?;
    m.add_function(wrap_pyfunction!(recsys_verify_table, m)?)?;
    m.add_function(wrap_pyfunction!(recsys_read_rows, m)?)?;
    m.add_function(wrap_pyfunction!(recsys_random_reads, m)?)?;
    m.add_function(wrap_pyfunction!(recsys_flash_model, m)?)?;
    m.add_function(wrap_pyfunction!(recsys_flash_vector_cycles, m)?)?;
    m.add_function(wrap_pyfunction!(recsys_device_serve, m)?)?;
    Ok(())
}
