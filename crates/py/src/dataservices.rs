//! `offload._native` bindings of `crates/dataservices`: the time models' forest. Conversions
//! only.

use numpy::{IntoPyArray, PyArray1, PyReadonlyArray1};
use offload_dataservices::forest::{Forest, Nodes};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

fn indices(a: &PyReadonlyArray1<'_, i64>, what: &str) -> PyResult<Vec<usize>> {
    a.as_array()
        .iter()
        .map(|&v| usize::try_from(v).map_err(|_| PyValueError::new_err(format!("{what}: a negative index {v}"))))
        .collect()
}

/// Regressors' trees flattened into node arrays (`timemodel.Forest` builds them from
/// scikit-learn's), evaluated together: `raw(x)` gives each regressor's
/// learning-rate-weighted sum of its trees' leaves for the rows `x` (flattened float64).
#[pyclass(module = "offload._native", frozen, name = "Forest")]
pub struct PyForest(Forest);

#[pymethods]
impl PyForest {
    #[new]
    #[allow(clippy::too_many_arguments)]
    fn new(
        slot: PyReadonlyArray1<'_, i64>,
        threshold: PyReadonlyArray1<'_, f64>,
        left: PyReadonlyArray1<'_, i64>,
        right: PyReadonlyArray1<'_, i64>,
        value: PyReadonlyArray1<'_, f64>,
        roots: PyReadonlyArray1<'_, i64>,
        starts: PyReadonlyArray1<'_, i64>,
        rate: PyReadonlyArray1<'_, f64>,
        depth: usize,
    ) -> PyResult<Self> {
        let nodes = Nodes {
            slot: indices(&slot, "slot")?,
            threshold: threshold.as_array().to_vec(),
            left: indices(&left, "left")?,
            right: indices(&right, "right")?,
            value: value.as_array().to_vec(),
        };
        let (roots, starts) = (indices(&roots, "roots")?, indices(&starts, "starts")?);
        Forest::new(nodes, roots, starts, rate.as_array().to_vec(), depth).map(PyForest).map_err(PyValueError::new_err)
    }

    fn raw<'py>(&self, py: Python<'py>, x: PyReadonlyArray1<'py, f64>) -> PyResult<Bound<'py, PyArray1<f64>>> {
        let x = x.as_slice().map_err(|e| PyValueError::new_err(format!("x: {e}")))?;
        Ok(self.0.raw(x).map_err(PyValueError::new_err)?.into_pyarray(py))
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyForest>()
}
