//! `offload._native` bindings of `crates/probe`: channel measurements, the latency/bandwidth
//! fit, io_uring. Conversions only; measurements run with the GIL released.

use crate::to_py;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::path::PathBuf;

/// Names of the channels `probe_channel` measures.
#[pyfunction]
fn probe_channels() -> Vec<&'static str> {
    offload_probe::CHANNELS.to_vec()
}

/// Measures one channel (GIL released); returns it as a dict (points, fit). `sizes` = (lo, hi)
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
) -> PyResult<Bound<'_, PyAny>> {
    use offload_probe::zeromq::Peer;
    let peer = peer.map_or(Peer::Thread, Peer::Process);
    let budget = ops.map(offload_probe::Budget::fixed);
    let ch = py
        .allow_threads(|| offload_probe::run_with(&name, quick, &dir, sizes, &peer, budget))
        .map_err(PyValueError::new_err)?;
    to_py(py, &ch)
}

/// The ZeroMQ peer process's body (see `probe_channel`): role, data and control endpoints, and
/// the CPU to pin to (`-` for none). Returns when the measuring side says stop.
#[pyfunction]
fn probe_zmq_peer(py: Python<'_>, role: String, data: String, control: String, cpu: String) -> PyResult<()> {
    let cpu = cpu.parse::<usize>().ok();
    py.allow_threads(|| offload_probe::zeromq::peer_main(&role, &data, &control, cpu)).map_err(PyValueError::new_err)
}

/// Fits T(n) = L + n/B to (bytes, seconds) points, as every probe channel is (a dict, or None
/// when the points cannot be fitted). For channels measured outside Rust (the GPU).
#[pyfunction]
fn probe_fit(py: Python<'_>, points: Vec<(f64, f64)>) -> PyResult<Bound<'_, PyAny>> {
    to_py(py, &offload_probe::fit(&points))
}

/// io_uring NOP cost, batch of 1 and 64, a dict.
#[pyfunction]
fn probe_uring_nop(py: Python<'_>, quick: bool) -> PyResult<Bound<'_, PyAny>> {
    let b = if quick { offload_probe::measure::Budget::QUICK } else { offload_probe::measure::Budget::FULL };
    let r = py.allow_threads(|| offload_probe::uring::nop(b)).map_err(PyValueError::new_err)?;
    to_py(py, &r)
}

/// 4 KiB O_DIRECT random reads through io_uring on a file of `file_bytes` in `dir`, a dict.
#[pyfunction]
fn probe_random_reads(
    py: Python<'_>,
    dir: PathBuf,
    file_bytes: u64,
    depths: Vec<usize>,
    seconds_per_depth: f64,
) -> PyResult<Bound<'_, PyAny>> {
    let per = std::time::Duration::from_secs_f64(seconds_per_depth.max(0.01));
    let r = py
        .allow_threads(|| offload_probe::uring::random_reads(&dir, file_bytes, &depths, per))
        .map_err(PyValueError::new_err)?;
    to_py(py, &r)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(probe_channels, m)?)?;
    m.add_function(wrap_pyfunction!(probe_channel, m)?)?;
    m.add_function(wrap_pyfunction!(probe_uring_nop, m)?)?;
    m.add_function(wrap_pyfunction!(probe_fit, m)?)?;
    m.add_function(wrap_pyfunction!(probe_zmq_peer, m)?)?;
    m.add_function(wrap_pyfunction!(probe_random_reads, m)?)?;
    Ok(())
}
