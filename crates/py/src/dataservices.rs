//! `offload._native` bindings of `crates/dataservices`: the time models' forest, the native plan
//! reader and the estimate's walk. Conversions only.

use numpy::{IntoPyArray, PyArray1, PyReadonlyArray1};
use std::collections::HashMap;
use std::sync::OnceLock;

use offload_dataservices::decide::{decide, predict, Features, Layout, Link, FIELDS, FLOOR_S, PRICED};
use offload_dataservices::estimate::{estimate, Col, ColumnStats, Conditions, GroupSource, Stop, TableStats};
use offload_dataservices::forest::{Forest, Nodes};
use offload_dataservices::plan::{FunctionClasses, PlanInfo, SubstraitPlan};
use offload_dataservices::prost::Message;
use offload_dataservices::selectivity::Numeric;
use offload_dataservices::substrait::proto::{Expression, Rel};
use pyo3::exceptions::{PyNotImplementedError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

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

    /// `timemodel.decide` with this forest laid out as `(request, offload, pushback)` say
    /// (`timemodel._prediction_plan`), each regressor's `base` added before its exponential
    /// and its work priced at its unit `cost` (flattened, `priced_names()` of them a regressor);
    /// `features`: a QueryFeatures' fields in order; the link's rate (bytes/s, None unshaped)
    /// and latency. (way, offload stages, pushback stages, why, crossover Mbit/s, the way above).
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (base, cost, request, offload, pushback, features, rate, latency))]
    fn decide(
        &self,
        base: PyReadonlyArray1<'_, f64>,
        cost: PyReadonlyArray1<'_, f64>,
        request: bool,
        offload: usize,
        pushback: usize,
        features: Vec<f64>,
        rate: Option<f64>,
        latency: f64,
    ) -> PyResult<Decided> {
        let values = <[f64; 19]>::try_from(features)
            .map_err(|f| PyValueError::new_err(format!("{} features, not 19", f.len())))?;
        let f = Features::from_values(values);
        let layout = Layout { request, offload, pushback };
        let base = base.as_slice().map_err(|e| PyValueError::new_err(format!("base: {e}")))?;
        let cost = cost.as_slice().map_err(|e| PyValueError::new_err(format!("cost: {e}")))?;
        let parts = predict(&self.0, base, cost, layout, &f).map_err(PyValueError::new_err)?;
        let d = decide(&parts, &f, Link { bytes_per_s: rate, latency_s: latency });
        Ok((d.way, d.offload, d.pushback, d.why, d.crossover_mbit, d.above))
    }
}

/// The scalar functions' cost classes (`plans.function_class`'s lists, handed over once).
#[pyclass(module = "offload._native", frozen, name = "FunctionClasses")]
pub struct PyFunctionClasses(FunctionClasses);

#[pymethods]
impl PyFunctionClasses {
    #[new]
    fn new(cheap: Vec<String>, string: Vec<String>, string_prefixes: Vec<String>) -> Self {
        Self(FunctionClasses::new(cheap, string, string_prefixes))
    }

    fn class_of(&self, name: &str) -> usize {
        self.0.class(name)
    }
}

/// A data set's statistics as the estimate's walk needs them: its name, rows, per column
/// (name, average width in bytes, variable-width text, bytes a value where fixed-width or 0,
/// distinct count or NaN, nulls, the years a date or timestamp column spans or None, how often
/// rows of its sample hold its values: (times seen, values seen that often), and those rows), the
/// sample's rows, and the numeric columns' sketches and
/// samples by column name: (KLL sorted items, their cumulative weights, the values the sketch
/// saw, the sample's values as float64, where they are valid or an empty array).
#[pyclass(module = "offload._native", frozen, name = "PlanTable")]
pub struct PyPlanTable(TableStats);

/// (name, width, textual, fixed, distinct, nulls, years, profile, the rows it counts): see
/// [`PyPlanTable`].
type PlanColumn = (String, f64, bool, f64, f64, u64, Option<f64>, Vec<(f64, f64)>, usize);

type NumericArrays<'py> = (
    PyReadonlyArray1<'py, f64>,
    PyReadonlyArray1<'py, u64>,
    u64,
    PyReadonlyArray1<'py, f64>,
    PyReadonlyArray1<'py, bool>,
);

#[pymethods]
impl PyPlanTable {
    #[new]
    fn new(
        name: String,
        rows: u64,
        columns: Vec<PlanColumn>,
        sample_rows: usize,
        mut numeric: HashMap<String, NumericArrays<'_>>,
    ) -> PyResult<Self> {
        let mut out = Vec::with_capacity(columns.len());
        for (name, width, textual, fixed, distinct, nulls, years, profile, profiled) in columns {
            let numeric = match numeric.remove(&name) {
                Some((items, cumulative, n, sample, valid)) => {
                    let k = Numeric {
                        items: items.as_array().to_vec(),
                        cumulative: cumulative.as_array().to_vec(),
                        n,
                        sample: sample.as_array().to_vec(),
                        valid: valid.as_array().to_vec(),
                    };
                    let valid_len = k.valid.is_empty() || k.valid.len() == k.sample.len();
                    if k.items.len() != k.cumulative.len() || k.sample.len() != sample_rows || !valid_len {
                        return Err(PyValueError::new_err(format!("column {name}: arrays of different lengths")));
                    }
                    Some(k)
                }
                None => None,
            };
            let profile = (profile, profiled as f64);
            out.push(ColumnStats { name, width, textual, fixed, distinct, nulls, numeric, years, profile });
        }
        Ok(Self(TableStats::new(name, rows, out, sample_rows)))
    }
}

/// A Substrait plan decoded natively (ValueError where the bytes are not one). Each reading
/// is None where the plan holds something the native reader does not model: the caller then
/// reads it with the Python reference.
#[pyclass(module = "offload._native", frozen, name = "SubstraitPlan")]
pub struct PySubstraitPlan {
    plan: SubstraitPlan,
    /// Its reading, made once (the node's check of the plan and the features both ask).
    info: OnceLock<Option<PlanInfo>>,
}

type Reads = Vec<(String, Vec<String>)>;
/// (way, offload stages, pushback stages, why, crossover Mbit/s, the way above it).
type Decided = (&'static str, Stages, Stages, String, Option<f64>, Option<&'static str>);
type Stages = Vec<(&'static str, f64)>;
/// (rows, bytes, steps, work in `estimate.WORK`'s order, shape, features by name).
type Estimated<'py> = (f64, f64, Vec<String>, [f64; 7], (usize, usize, usize, Vec<&'static str>), Bound<'py, PyDict>);

#[pymethods]
impl PySubstraitPlan {
    #[new]
    fn new(plan: &[u8]) -> PyResult<Self> {
        let plan = SubstraitPlan::decode(plan).map_err(PyValueError::new_err)?;
        Ok(Self { plan, info: OnceLock::new() })
    }

    /// (reads: [(table, [columns])], output names), as `plans.inspect` reads them.
    fn info(&self) -> Option<(Reads, Vec<String>)> {
        self.reading().map(|i| (i.reads.clone(), i.output.clone()))
    }

    /// The functions' names by anchor.
    fn names(&self) -> HashMap<u32, String> {
        self.plan.names.clone()
    }

    /// (rows, bytes, steps, work in `estimate.WORK`'s order, (scalar calls, heavy ones, string
    /// ones, relation kinds), the features: `QueryFeatures.as_dict()`) over `tables` (every
    /// data set the plan reads); a condition the native walk does not price is priced by
    /// `selectivity(expression bytes, [(table, column, cast, most distinct values or None), or
    /// (None, None, False, …) where computed, per input column], the input's rows)`, which
    /// returns (selectivity, the steps it took), and an aggregate with computed keys by
    /// `groups((table, relation bytes, [key expression bytes], filtered, width) or None, its
    /// input rows)` (the source its keys can be grouped on: `GroupSource`), which returns (the
    /// groups or None, the steps it took); an inner join of two data sets' filtered reads by
    /// `joined(join relation bytes, (left data set, right data set), its columns)`, where given,
    /// which returns (the fewest and most rows the samples allow or None, the steps it took)
    /// and the keys' formula is held within them. Their
    /// exceptions pass; NotImplementedError says what the walk does not model (a relation or
    /// expression kind, a data set without statistics).
    #[pyo3(signature = (tables, classes, selectivity, groups, joined=None))]
    fn estimate<'py>(
        &self,
        py: Python<'py>,
        tables: Vec<PyRef<'py, PyPlanTable>>,
        classes: &PyFunctionClasses,
        selectivity: Bound<'py, PyAny>,
        groups: Bound<'py, PyAny>,
        joined: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Estimated<'py>> {
        let stats: Vec<&TableStats> = tables.iter().map(|t| &t.0).collect();
        let mut conditions = Callback { py, tables: &stats, f: selectivity, g: groups, j: joined };
        let e = match estimate(&self.plan, &stats, &classes.0, &mut conditions) {
            Ok(e) => e,
            Err(Stop::Unsupported(u)) => return Err(PyNotImplementedError::new_err(u.0)),
            Err(Stop::Failed(e)) => return Err(e),
        };
        let Some(info) = self.reading() else {
            let why = self.plan.info().err().map_or_else(String::new, |u| u.0);
            return Err(PyNotImplementedError::new_err(why));
        };
        let Some(f) = Features::of(&e, &info.reads, &stats) else {
            return Err(PyNotImplementedError::new_err("a data set read without statistics"));
        };
        let s = e.shape;
        Ok((e.rows, e.bytes, e.steps, e.work, (s.functions, s.heavy, s.strings, s.kinds), by_name(py, &f)?))
    }
}

impl PySubstraitPlan {
    fn reading(&self) -> Option<&PlanInfo> {
        self.info.get_or_init(|| self.plan.info().ok()).as_ref()
    }
}

/// Features as `QueryFeatures.as_dict()` has them: counts as ints, flags as bools.
fn by_name<'py>(py: Python<'py>, f: &Features) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (name, v) in FIELDS.iter().zip(f.values()) {
        match *name {
            "functions" | "heavy" => d.set_item(name, v as u64)?,
            "aggregate" | "join" | "sort" => d.set_item(name, v != 0.0)?,
            _ => d.set_item(name, v)?,
        }
    }
    Ok(d)
}

/// A column as a callback takes it: (table, column, cast, most distinct values).
type CallbackColumn<'a> = (Option<&'a str>, Option<&'a str>, bool, Option<f64>);

/// Conditions priced by a Python callable.
struct Callback<'a, 'py> {
    py: Python<'py>,
    tables: &'a [&'a TableStats],
    f: Bound<'py, PyAny>,
    g: Bound<'py, PyAny>,
    j: Option<Bound<'py, PyAny>>,
}

impl Callback<'_, '_> {
    /// Each column as the callables take it: (table, column, cast, its most distinct values or
    /// None), (None, None, False, …) where computed.
    fn names(&self, cols: &[Col]) -> Vec<CallbackColumn<'_>> {
        cols.iter()
            .map(|c| match c.source {
                Some((t, i)) => {
                    let st = self.tables[t];
                    (Some(st.name.as_str()), Some(st.columns[i].name.as_str()), c.cast, c.values)
                }
                None => (None, None, false, c.values),
            })
            .collect()
    }
}

impl Conditions for Callback<'_, '_> {
    type Error = PyErr;

    fn selectivity(&mut self, cond: &Expression, cols: &[Col], rows: f64, steps: &mut Vec<String>) -> PyResult<f64> {
        let expr = PyBytes::new(self.py, &cond.encode_to_vec());
        let (sel, taken): (f64, Vec<String>) = self.f.call1((expr, self.names(cols), rows))?.extract()?;
        steps.extend(taken);
        Ok(sel)
    }

    fn groups(
        &mut self,
        source: Option<&GroupSource<'_>>,
        rows: f64,
        steps: &mut Vec<String>,
    ) -> PyResult<Option<f64>> {
        let py = self.py;
        let source = source.map(|s| {
            let keys: Vec<Bound<'_, PyBytes>> = s.keys.iter().map(|k| PyBytes::new(py, &k.encode_to_vec())).collect();
            let rel = PyBytes::new(py, &s.rel.encode_to_vec());
            (self.tables[s.table].name.as_str(), rel, keys, s.filtered, s.width)
        });
        let (groups, taken): (Option<f64>, Vec<String>) = self.g.call1((source, rows))?.extract()?;
        steps.extend(taken);
        Ok(groups)
    }

    fn joined(
        &mut self,
        rel: &Rel,
        tables: [usize; 2],
        width: usize,
        steps: &mut Vec<String>,
    ) -> PyResult<Option<(f64, f64)>> {
        let Some(j) = &self.j else { return Ok(None) };
        let rel = PyBytes::new(self.py, &rel.encode_to_vec());
        let names = (self.tables[tables[0]].name.as_str(), self.tables[tables[1]].name.as_str());
        let (rows, taken): (Option<(f64, f64)>, Vec<String>) = j.call1((rel, names, width))?.extract()?;
        steps.extend(taken);
        Ok(rows)
    }
}

/// The names of the work quantities a stage's unit costs price (`decide::PRICED`) and the
/// floor of a priced stage in seconds.
#[pyfunction]
fn priced_names() -> (Vec<&'static str>, f64) {
    (PRICED.to_vec(), FLOOR_S)
}

/// The work quantities of rows of QueryFeatures' fields in order (`decide::Features::priced_work`),
/// one row each.
#[pyfunction]
fn priced_work(rows: Vec<Vec<f64>>) -> PyResult<Vec<Vec<f64>>> {
    rows.into_iter()
        .map(|r| {
            let n = r.len();
            let v = <[f64; 19]>::try_from(r).map_err(|_| PyValueError::new_err(format!("{n} features, not 19")))?;
            Ok(Features::from_values(v).priced_work().to_vec())
        })
        .collect()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(priced_names, m)?)?;
    m.add_function(wrap_pyfunction!(priced_work, m)?)?;
    m.add_class::<PyForest>()?;
    m.add_class::<PyFunctionClasses>()?;
    m.add_class::<PyPlanTable>()?;
    m.add_class::<PySubstraitPlan>()
}
