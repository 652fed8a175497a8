//! `offload._native`: a thin PyO3 layer over the Rust crates, one module per crate (as polars'
//! bindings are). No logic lives here: each module converts arguments, releases the GIL around
//! every loop, and turns errors into Python exceptions; results are Python objects (pythonize),
//! not JSON text.
//!
//! - `rules`: rule sets, compiled matchers, query files, `offload rules eval`, the GPU device
//! - `serve`: the daemon, CURVE keys, request and reply frames, the device-time formula
//! - `probe`: channel measurements and their fit
//! - `recsys`: embedding tables, the engine, the flash model, the device process
//! - `dataservices`: the near-data node's decision core (its time models' forest)

use pyo3::prelude::*;

mod dataservices;
mod probe;
mod recsys;
mod rules;
mod serve;
mod serve_client;

/// A serialisable Rust value as Python objects (a struct becomes a dict), through a JSON value
/// so that a non-finite float (an infinite bandwidth) is None, as it was when JSON text came
/// back.
pub(crate) fn to_py<'py, T: serde::Serialize>(py: Python<'py>, v: &T) -> PyResult<Bound<'py, PyAny>> {
    let json = serde_json::to_value(v).map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
    Ok(pythonize::pythonize(py, &json)?)
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    rules::register(m)?;
    serve::register(m)?;
    serve_client::register(m)?;
    probe::register(m)?;
    recsys::register(m)?;
    dataservices::register(m)?;
    Ok(())
}
