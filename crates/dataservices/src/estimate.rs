//! The cardinality estimate's walk of a plan, the one there is: rows and columns relation by
//! relation, the work counted on the way, and the steps that say why, for the plans
//! [`crate::plan`] models. A condition the walk does not price itself ([`crate::selectivity`]:
//! inequalities on numeric columns) is asked of the caller ([`Conditions`]: `estimate._Ctx`'s
//! sketches and sample in Python), and so are the groups of computed keys on a sample.
//!
//! It was ported from a Python walk and checked equal to it, step text included, before that
//! walk was removed; it is now checked against the truth (DataFusion's counts on the data,
//! `tests/python/test_dataservices_native.py` and the estimator's tests). Where it cannot
//! estimate a plan (an index past the columns, a table without statistics) it says
//! [`Unsupported`], and the node falls back to a bound from the plan, saying why.

use std::borrow::Cow;
use std::collections::HashMap;

use substrait::proto::{
    expression::{
        field_reference::{ReferenceType, RootType},
        literal::LiteralType,
        reference_segment, RexType,
    },
    read_rel::{NamedTable, ReadType},
    rel::RelType,
    rel_common::EmitKind,
    AggregateRel, Expression, FetchRel, FilterRel, JoinRel, NamedStruct, ProjectRel, ReadRel, Rel, SetRel,
};

use crate::plan::{
    argument_value, expression_children, expression_children_mut, measure_expressions, read_columns, table_name,
    top_level_names, visit_all_rels, FunctionClasses, Shape, SubstraitPlan, Unsupported, CHEAP, HEAVY, STRING,
};
use crate::pyfmt::{commas, f1, g};
use crate::selectivity::Numeric;

/// DataFusion's PRE_SELECTION_THRESHOLD: an `and` whose earlier terms keep at most this share
/// of a batch runs its later terms on those rows only.
pub const PRE_SELECTION: f64 = 0.2;

/// The work counted (`estimate.WORK`, in its order).
pub const WORK: [&str; 7] =
    ["cheap_rows", "heavy_rows", "string_rows", "aggregate_rows", "sort_rows", "string_key_rows", "join_rows"];
const AGGREGATE_ROWS: usize = 3;
const SORT_ROWS: usize = 4;
const STRING_KEY_ROWS: usize = 5;
const JOIN_ROWS: usize = 6;

/// A data set's statistics as the walk needs them (the Python side's `TableStats`).
#[derive(Debug, Clone)]
pub struct TableStats {
    pub name: String,
    pub rows: u64,
    pub columns: Vec<ColumnStats>,
    /// Rows of the data set's sample (0: none).
    pub sample_rows: usize,
    by_name: HashMap<String, usize>,
}

#[derive(Debug, Clone)]
pub struct ColumnStats {
    pub name: String,
    /// Average bytes a value (`ColumnStats.width_bytes`).
    pub width: f64,
    /// A string or binary column of variable width (`stats.variable_width`).
    pub textual: bool,
    /// Bytes a value where the column's type is fixed-width (`stats.fixed_width`), else 0.
    pub fixed: f64,
    /// `TableStats.distinct`; NaN where it cannot be had (a walk that needs it then cannot
    /// estimate the plan, and says so).
    pub distinct: f64,
    pub nulls: u64,
    /// A float64 or signed integer column's sketch and sample ([`crate::selectivity`]).
    pub numeric: Option<Numeric>,
    /// A date or timestamp column's years, first to last as its sketch spans them: the most
    /// distinct values its `extract(year ...)` takes. None otherwise.
    pub years: Option<f64>,
    /// How often rows of the sample hold the column's values: (times seen, values seen that
    /// often), nulls left out, and the rows looked at; empty where there is none. What
    /// [`thinned`] spreads the rows by.
    pub profile: (Vec<(f64, f64)>, f64),
}

impl TableStats {
    pub fn new(name: String, rows: u64, columns: Vec<ColumnStats>, sample_rows: usize) -> Self {
        let by_name = columns.iter().enumerate().map(|(i, c)| (c.name.clone(), i)).collect();
        Self { name, rows, columns, sample_rows, by_name }
    }

    /// A column's index by name.
    pub fn column(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }
}

/// Where an output column of a relation comes from: a data set's column (table, column index
/// in the tables handed to [`estimate`]), or computed. `cast`: a cast of that column projected
/// below (DataFusion projects a cast a condition uses twice, as in a BETWEEN): its values are
/// not the column's, so conditions on it are not priced by the column's sketches.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Col {
    pub source: Option<(usize, usize)>,
    pub width: f64,
    pub cast: bool,
    /// The most distinct values the column takes where known: what a filter below left it
    /// (`x = 3` one, `x in (1, 2)` two), a date's years, a count's values; else None.
    pub values: Option<f64>,
    /// A computed column's expression and the columns it is over, where the walk made it
    /// (what a group-by on it is measured by on a sample): an index into the walk's expressions.
    pub origin: Option<u32>,
    /// A filter below read the column (or a cast of it): which of its values are left depends
    /// on that filter, so a join on it counts the keys left, not the column's whole domain.
    pub filtered: bool,
}

const COMPUTED: Col = Col { source: None, width: 8.0, cast: false, values: None, origin: None, filtered: false };

/// Keys whose values' product is more than this many times the most any one of them takes
/// are measured together on a sample: they may vary together, and then take fewer groups.
const DOUBTED_KEYS: f64 = 2.0;

/// An IN list's options read to see they are literals.
const PINNED_LOOK: usize = 1000;

/// `estimate.DEFAULT_SELECTIVITY`: a condition nothing prices.
const DEFAULT_SELECTIVITY: f64 = 1.0 / 3.0;

/// Prices conditions: the selectivity of `cond` over rows whose columns are `cols`, with the
/// steps it took appended to `steps` (`_Ctx.selectivity`).
pub trait Conditions {
    type Error;
    fn selectivity(
        &mut self,
        cond: &Expression,
        cols: &[Col],
        rows: f64,
        steps: &mut Vec<String>,
    ) -> Result<f64, Self::Error>;

    /// The groups of an aggregate's keys (`_Ctx._measured_groups`: computed keys, or columns
    /// that may vary together), measured on `source`'s sample, over its input's `rows` rows;
    /// None where they cannot be had (no source: the keys are not over one data set's
    /// columns): computed keys are then taken as unique, columns as their values' product.
    fn groups(
        &mut self,
        _source: Option<&GroupSource<'_>>,
        _rows: f64,
        _steps: &mut Vec<String>,
    ) -> Result<Option<f64>, Self::Error> {
        Ok(None)
    }

    /// The fewest and most rows inner join `rel` can have, by what it meets on the samples of
    /// its two data sets (`tables`, by their index among the walk's tables; two different
    /// ones), each side read through filters and projects; `width` the columns it gives. None
    /// where the samples cannot tell: the keys' formula alone decides.
    fn joined(
        &mut self,
        _rel: &Rel,
        _tables: [usize; 2],
        _width: usize,
        _steps: &mut Vec<String>,
    ) -> Result<Option<(f64, f64)>, Self::Error> {
        Ok(None)
    }
}

/// Why a walk stopped: a plan it does not model (what, said), or the caller's error.
#[derive(Debug)]
pub enum Stop<E> {
    Unsupported(Unsupported),
    Failed(E),
}

impl<E> From<Unsupported> for Stop<E> {
    fn from(u: Unsupported) -> Self {
        Stop::Unsupported(u)
    }
}

type Walk<T, E> = Result<T, Stop<E>>;

fn no<T, E>(what: &str) -> Walk<T, E> {
    Err(Stop::Unsupported(Unsupported(what.into())))
}

/// Where an aggregate's computed keys can be grouped on one data set's sample (the caller
/// measures them there): the aggregate's own input where it is one data set's reads, filters
/// and projects (`filtered`: it holds the plan's filters); else a read of the one data set the
/// keys' expressions, rewritten onto its columns, read.
pub struct GroupSource<'p> {
    /// The data set, by its index among the walk's tables.
    pub table: usize,
    pub rel: Cow<'p, Rel>,
    pub keys: Cow<'p, [Expression]>,
    pub filtered: bool,
    /// The columns `rel` gives.
    pub width: usize,
}

/// The estimate: result rows and bytes, the steps, the work (in [`WORK`]'s order), and the
/// plan's shape for the features.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    pub rows: f64,
    pub bytes: f64,
    pub steps: Vec<String>,
    pub work: [f64; 7],
    pub shape: Shape,
}

/// `estimate.estimate` over `tables` (the data sets the plan reads).
pub fn estimate<C: Conditions>(
    plan: &SubstraitPlan,
    tables: &[&TableStats],
    classes: &FunctionClasses,
    conditions: &mut C,
) -> Walk<Estimate, C::Error> {
    let shape = plan.shape(classes)?; // first: it checks every relation and expression is modelled
    let root = plan.root().and_then(|r| r.input.as_ref());
    let Some(root) = root else { return no("not one root relation") };
    let mut w = Walker { plan, tables, classes, conditions, steps: Vec::new(), work: [0.0; 7], origins: Vec::new() };
    let out = w.rel(root)?;
    let width: f64 = out.cols.iter().map(|c| c.width).sum();
    w.steps.push(format!("result: {} rows x {} B", f1(out.rows), g(width)));
    Ok(Estimate { rows: out.rows, bytes: out.rows * width, steps: w.steps, work: w.work, shape })
}

struct Out {
    rows: f64,
    cols: Vec<Col>,
}

struct Walker<'a, C> {
    plan: &'a SubstraitPlan,
    tables: &'a [&'a TableStats],
    classes: &'a FunctionClasses,
    conditions: &'a mut C,
    steps: Vec<String>,
    work: [f64; 7],
    /// The computed columns' expressions and the columns each is over ([`Col::origin`]).
    origins: Vec<(&'a Expression, Vec<Col>)>,
}

impl<'a, C: Conditions> Walker<'a, C> {
    fn rel(&mut self, r: &'a Rel) -> Walk<Out, C::Error> {
        let (out, common) = match &r.rel_type {
            Some(RelType::Read(x)) => (self.read(x)?, &x.common),
            Some(RelType::Filter(x)) => (self.filter(x)?, &x.common),
            Some(RelType::Project(x)) => (self.project(x)?, &x.common),
            Some(RelType::Sort(x)) => {
                let inp = self.input(&x.input)?;
                self.work[SORT_ROWS] += inp.rows;
                (inp, &x.common)
            }
            Some(RelType::Fetch(x)) => (self.fetch(x)?, &x.common),
            Some(RelType::Aggregate(x)) => (self.aggregate(x)?, &x.common),
            Some(RelType::Join(x)) => (self.join(x)?, &x.common),
            Some(RelType::Set(x)) => (self.set(x)?, &x.common),
            Some(RelType::Cross(x)) => {
                let (left, right) = (self.input(&x.left)?, self.input(&x.right)?);
                let rows = left.rows * right.rows;
                self.work[JOIN_ROWS] += left.rows + right.rows;
                self.steps.push(format!("cross join: {} rows", f1(rows)));
                (Out { rows, cols: [left.cols, right.cols].concat() }, &x.common)
            }
            _ => return no("a relation kind the native walk does not model"),
        };
        match common.as_ref().and_then(|c| c.emit_kind.as_ref()) {
            Some(EmitKind::Emit(e)) => {
                let n = out.cols.len() as i64;
                let mut cols = Vec::with_capacity(e.output_mapping.len());
                for &i in &e.output_mapping {
                    let i = i64::from(i);
                    cols.push(match i {
                        // as the reference indexes: from the end where negative, computed past it
                        _ if i >= n => COMPUTED,
                        _ if i >= 0 => out.cols[i as usize],
                        _ if i >= -n => out.cols[(n + i) as usize],
                        _ => return no("an emit past the columns"),
                    });
                }
                Ok(Out { rows: out.rows, cols })
            }
            _ => Ok(out),
        }
    }

    fn input(&mut self, r: &'a Option<Box<Rel>>) -> Walk<Out, C::Error> {
        match r {
            Some(r) => self.rel(r),
            None => no("a relation without its input"),
        }
    }

    fn table(&self, name: &str) -> Walk<usize, C::Error> {
        match self.tables.iter().position(|t| t.name == name) {
            Some(i) => Ok(i),
            None => no("a data set without statistics"),
        }
    }

    fn read(&mut self, r: &'a ReadRel) -> Walk<Out, C::Error> {
        let name = table_name(r)?;
        let t = self.table(name)?;
        let st = &self.tables[t];
        let mut cols = Vec::new();
        for n in read_columns(r)? {
            let Some(&c) = st.by_name.get(&n) else { return no("a column without statistics") };
            cols.push(Col { source: Some((t, c)), width: st.columns[c].width, ..COMPUTED });
        }
        self.steps.push(format!("read {name}: {} rows", commas(&st.rows.to_string())));
        Ok(Out { rows: st.rows as f64, cols })
    }

    fn filter(&mut self, r: &'a FilterRel) -> Walk<Out, C::Error> {
        let inp = self.input(&r.input)?;
        let Some(cond) = r.condition.as_deref() else { return no("a filter without a condition") };
        self.condition_calls(cond, inp.rows, &inp)?;
        let sel = self.selectivity(cond, &inp)?;
        self.steps.push(format!("filter: selectivity {sel:.5} -> {} rows", f1(inp.rows * sel)));
        let mut cols = inp.cols;
        let mut read = Vec::new();
        read_fields(cond, &mut read);
        let sources: Vec<_> = read.iter().filter_map(|&i| cols.get(i).and_then(|c| c.source)).collect();
        for (i, c) in cols.iter_mut().enumerate() {
            c.filtered |= read.contains(&i) || c.source.is_some_and(|s| sources.contains(&s));
        }
        for (i, k) in self.pinned(cond) {
            if let Some(c) = cols.get_mut(i) {
                c.values = Some(c.values.map_or(k, |v| v.min(k)));
            }
        }
        Ok(Out { rows: inp.rows * sel, cols })
    }

    fn project(&mut self, r: &'a ProjectRel) -> Walk<Out, C::Error> {
        let mut inp = self.input(&r.input)?;
        for e in &r.expressions {
            self.calls(inp.rows, e)?;
        }
        let extra = r.expressions.iter().map(|e| self.expr_col(e, &inp.cols)).collect::<Result<Vec<_>, _>>()?;
        inp.cols.extend(extra);
        Ok(inp)
    }

    fn fetch(&mut self, r: &'a FetchRel) -> Walk<Out, C::Error> {
        let inp = self.input(&r.input)?;
        let count = r.count_expr.as_deref().map(literal_int).transpose()?.flatten();
        let offset = r.offset_expr.as_deref().map(literal_int).transpose()?.flatten();
        let mut rows = (inp.rows - offset.unwrap_or(0) as f64).max(0.0);
        if let Some(c) = count.filter(|&c| c >= 0) {
            rows = rows.min(c as f64);
        }
        self.steps.push(format!("fetch: {} rows", f1(rows)));
        Ok(Out { rows, cols: inp.cols })
    }

    fn aggregate(&mut self, r: &'a AggregateRel) -> Walk<Out, C::Error> {
        let inp = self.input(&r.input)?;
        for e in &r.grouping_expressions {
            self.calls(inp.rows, e)?;
        }
        for m in &r.measures {
            let mut n = [0usize; 3]; // the measure's calls together, as the reference counts them
            for e in measure_expressions(m) {
                self.plan.calls(e, self.classes, &mut n)?;
            }
            self.count(inp.rows, n);
        }
        self.work[AGGREGATE_ROWS] += inp.rows;
        let keys = r.grouping_expressions.iter().map(|e| self.expr_col(e, &inp.cols)).collect::<Result<Vec<_>, _>>()?;
        let measures: Vec<Col> = r
            .measures
            .iter()
            .map(|m| {
                let name = m.measure.as_ref().and_then(|f| self.plan.names.get(&f.function_reference));
                let counted = name.is_some_and(|n| n == "count").then(|| count_values(inp.rows));
                Col { values: counted, ..COMPUTED }
            })
            .collect();
        if keys.iter().any(|k| self.textual(k)) {
            self.work[STRING_KEY_ROWS] += inp.rows;
        }
        if keys.is_empty() {
            self.steps.push("aggregate without grouping: 1 row".into());
            return Ok(Out { rows: 1.0, cols: measures });
        }
        let groups = if keys.iter().any(|k| k.source.is_none() && k.values.is_none()) {
            let source = self.group_source(r, &inp.cols)?;
            match self.sampled_groups(source.as_ref(), inp.rows)? {
                Some(g) => g,
                None => {
                    self.steps.push("computed keys taken as unique".into());
                    self.distinct_product(&keys, inp.rows)?.0
                }
            }
        } else {
            let (product, widest) = self.distinct_product(&keys, inp.rows)?;
            // keys that vary together take fewer groups than their values' product: measured
            let doubted = product.min(inp.rows) > DOUBTED_KEYS * widest;
            match if doubted { self.group_source(r, &inp.cols)? } else { None } {
                Some(source) => self.sampled_groups(Some(&source), inp.rows)?.map_or(product, |g| g.min(product)),
                None => product,
            }
        };
        let rows = groups.min(inp.rows);
        self.steps.push(format!("aggregate: {} groups", f1(rows)));
        Ok(Out { rows, cols: [keys, measures].concat() })
    }

    /// The product of the keys' distinct values over `rows` rows, and the most one key takes.
    fn distinct_product(&self, keys: &[Col], rows: f64) -> Walk<(f64, f64), C::Error> {
        let (mut product, mut widest) = (1.0, 1.0_f64);
        for k in keys {
            let d = self.distinct(k, rows)?;
            (product, widest) = (product * d, widest.max(d));
        }
        Ok((product, widest))
    }

    /// The groups the caller measures on `source`'s sample ([`Conditions::groups`]).
    fn sampled_groups(&mut self, source: Option<&GroupSource<'_>>, rows: f64) -> Walk<Option<f64>, C::Error> {
        self.conditions.groups(source, rows, &mut self.steps).map_err(Stop::Failed)
    }

    /// The rows inner join `r` can have by what it meets on its two data sets' samples, where
    /// each side is one data set's reads, filters and projects, two different ones
    /// ([`Conditions::joined`]).
    fn sampled_join(&mut self, r: &JoinRel, width: usize) -> Walk<Option<(f64, f64)>, C::Error> {
        let (Some(left), Some(right)) = (r.left.as_deref(), r.right.as_deref()) else { return Ok(None) };
        let (Some(l), Some(t)) = (self.one_data_set(left)?, self.one_data_set(right)?) else { return Ok(None) };
        if l == t {
            return Ok(None); // a data set's sample joined with itself pairs each sampled row with itself
        }
        let rel = Rel { rel_type: Some(RelType::Join(Box::new(r.clone()))) };
        self.conditions.joined(&rel, [l, t], width, &mut self.steps).map_err(Stop::Failed)
    }

    /// A join: the rows by [`join_rows`]; semi and anti joins give their side's columns,
    /// mark joins those and the mark.
    fn join(&mut self, r: &'a JoinRel) -> Walk<Out, C::Error> {
        let (left, right) = (self.input(&r.left)?, self.input(&r.right)?);
        let (left_cols, right_cols) = (left.cols.clone(), right.cols.clone());
        let cols = [left.cols, right.cols].concat();
        let keys = match r.expression.as_deref() {
            Some(e) => self.equi_keys(e, left_cols.len()),
            None => vec![],
        };
        let col = |i: usize| {
            cols.get(i).copied().ok_or_else(|| Stop::Unsupported(Unsupported("a key past the columns".into())))
        };
        let mut key_cols = Vec::new();
        for &(i, j) in &keys {
            key_cols.push(col(i)?);
            key_cols.push(col(j)?);
        }
        if key_cols.iter().any(|c| self.textual(c)) {
            self.work[STRING_KEY_ROWS] += left.rows + right.rows;
        }
        self.work[JOIN_ROWS] += left.rows + right.rows;
        let residual = r.expression.as_deref().is_some_and(|e| self.conjuncts(e) > keys.len());
        let (kind, side) = join_kind(r.r#type);
        let (mut dl, mut dr, mut domain) = (f64::NAN, f64::NAN, f64::NAN);
        if let Some(&(li, ri)) = keys.first() {
            let (lk, rk) = (col(li)?, col(ri)?);
            if kind == "inner" || kind == "outer" {
                // a pair matches with chance 1 / the keys' domain where no filter read a key
                dl = self.key_domain(&lk, left.rows)?;
                dr = self.key_domain(&rk, right.rows)?;
            } else {
                dl = self.distinct(&lk, left.rows)?.max(1.0);
                dr = self.distinct(&rk, right.rows)?.max(1.0);
            }
            let (kept, thinned) = if side == "left" { (lk, dl) } else { (rk, dr) };
            domain = if kept.source.is_some() { self.distinct(&kept, f64::INFINITY)?.max(1.0) } else { thinned };
        }
        let met = if kind == "inner" && !keys.is_empty() { self.sampled_join(r, cols.len())? } else { None };
        let (mut rows, how) = join_rows(&kind, side, [left.rows, right.rows], [dl, dr, domain], residual);
        self.steps.push(format!("join ({how}"));
        if let (true, Some(e)) = (residual, r.expression.as_deref()) {
            // the conditions beside the keys run on each pair the keys match (an inner join's rows
            // by the keys alone), the keys' equalities and the and joining them do not: they hash
            let pairs = join_rows("inner", "", [left.rows, right.rows], [dl, dr, domain], false).0;
            let mut n = [0usize; 3];
            self.plan.calls(e, self.classes, &mut n)?;
            n[CHEAP] = n[CHEAP].saturating_sub(2 * keys.len());
            self.count(pairs, n);
        }
        if let Some((lo, hi)) = met.filter(|&(lo, hi)| rows < lo || rows > hi) {
            rows = rows.clamp(lo, hi);
            self.steps.push(format!("join held to what the samples met: {} rows", f1(rows)));
        }
        let kept = if side == "left" { left_cols } else { right_cols };
        let cols = match kind.as_str() {
            "semi" | "anti" => kept,
            "mark" => [kept, vec![Col { width: 1.0, ..COMPUTED }]].concat(),
            _ => cols,
        };
        Ok(Out { rows, cols })
    }

    fn set(&mut self, r: &'a SetRel) -> Walk<Out, C::Error> {
        let mut ins = Vec::new();
        for i in &r.inputs {
            ins.push(self.rel(i)?);
        }
        if ins.is_empty() {
            return no("a set relation without inputs");
        }
        let (rows, how) = match r.op {
            1 | 2 | 7 => (ins[0].rows, "minus: the first input's rows"),
            3 | 4 | 8 => (ins.iter().map(|i| i.rows).fold(f64::INFINITY, f64::min), "intersection: the fewest rows"),
            _ => (ins.iter().map(|i| i.rows).sum(), "union: the inputs' rows added"),
        };
        self.steps.push(format!("{how}, {}", f1(rows)));
        Ok(Out { rows, cols: ins.swap_remove(0).cols })
    }

    /// A filter's condition's calls: an `and`'s later terms on the rows its earlier ones kept where
    /// these are at most PRE_SELECTION of them, an `or`'s on every row.
    fn condition_calls(&mut self, e: &Expression, rows: f64, inp: &Out) -> Walk<(), C::Error> {
        let f = match &e.rex_type {
            Some(RexType::ScalarFunction(f)) => f,
            _ => return self.calls(rows, e),
        };
        let name = self.plan.names.get(&f.function_reference).map(String::as_str);
        let and = name == Some("and");
        if !(and || name == Some("or")) || f.arguments.len() < 2 {
            return self.calls(rows, e);
        }
        self.work[CHEAP] += rows * (f.arguments.len() - 1) as f64;
        let mut kept = 1.0;
        for a in &f.arguments {
            let term = argument_value(a);
            self.condition_calls(term, if kept <= PRE_SELECTION { rows * kept } else { rows }, inp)?;
            if and {
                kept *= self.selectivity(term, inp)?;
            }
        }
        Ok(())
    }

    /// Natively where [`crate::selectivity`] prices the condition, else by the caller; over the
    /// rows and columns of the relation `inp`.
    fn selectivity(&mut self, cond: &Expression, inp: &Out) -> Walk<f64, C::Error> {
        if let Some(s) = crate::selectivity::selectivity(self.plan, self.tables, cond, &inp.cols, &mut self.steps) {
            return Ok(s);
        }
        self.conditions.selectivity(cond, &inp.cols, inp.rows, &mut self.steps).map_err(Stop::Failed)
    }

    /// The calls of `e`, each on `rows` rows, into the work.
    fn calls(&mut self, rows: f64, e: &Expression) -> Walk<(), C::Error> {
        let mut n = [0usize; 3];
        self.plan.calls(e, self.classes, &mut n)?;
        self.count(rows, n);
        Ok(())
    }

    /// Calls by class (cheap, string, heavy), each on `rows` rows, into the work.
    fn count(&mut self, rows: f64, n: [usize; 3]) {
        self.work[0] += rows * n[CHEAP] as f64;
        self.work[2] += rows * n[STRING] as f64;
        self.work[1] += rows * n[HEAVY] as f64;
    }

    /// The columns a condition holds to a few values, with how many: an
    /// equality with a literal one, an IN list of literals its length, an or of such on one
    /// column their sum, an and's terms each (the fewest where two pin one column).
    fn pinned(&self, e: &Expression) -> Vec<(usize, f64)> {
        match &e.rex_type {
            Some(RexType::SingularOrList(l)) => {
                let literal = |o: &Expression| matches!(o.rex_type, Some(RexType::Literal(_)));
                match l.value.as_deref().and_then(plain_field) {
                    Some(i) if l.options.iter().take(PINNED_LOOK).all(literal) => vec![(i, l.options.len() as f64)],
                    _ => vec![],
                }
            }
            Some(RexType::ScalarFunction(f)) => {
                let args: Vec<&Expression> = f.arguments.iter().map(argument_value).collect();
                match self.plan.names.get(&f.function_reference).map(String::as_str) {
                    Some("and") => args.iter().flat_map(|a| self.pinned(a)).collect(),
                    Some("equal") => match args.as_slice() {
                        [a, b] if matches!(b.rex_type, Some(RexType::Literal(_))) => {
                            plain_field(a).map(|i| vec![(i, 1.0)]).unwrap_or_default()
                        }
                        [a, b] if matches!(a.rex_type, Some(RexType::Literal(_))) => {
                            plain_field(b).map(|i| vec![(i, 1.0)]).unwrap_or_default()
                        }
                        _ => vec![],
                    },
                    Some("or") => {
                        let terms: Vec<Vec<(usize, f64)>> = args.iter().map(|a| self.pinned(a)).collect();
                        let one = terms.iter().all(|t| t.len() == 1 && t[0].0 == terms[0][0].0);
                        if terms.is_empty() || !one {
                            return vec![];
                        }
                        vec![(terms[0][0].0, terms.iter().map(|t| t[0].1).sum())]
                    }
                    _ => vec![],
                }
            }
            _ => vec![],
        }
    }

    fn equi_keys(&self, e: &Expression, n_left: usize) -> Vec<(usize, usize)> {
        let Some(RexType::ScalarFunction(f)) = &e.rex_type else { return vec![] };
        let name = self.plan.names.get(&f.function_reference).map(String::as_str);
        let args: Vec<&Expression> = f.arguments.iter().map(argument_value).collect();
        match name {
            Some("and") => args.iter().flat_map(|a| self.equi_keys(a, n_left)).collect(),
            Some("equal") if args.iter().all(|a| matches!(a.rex_type, Some(RexType::Selection(_)))) => {
                let fields: Vec<i64> = args.iter().map(|a| i64::from(selected_field(a))).collect();
                match fields.as_slice() {
                    [i, j] if (*i < n_left as i64) != (*j < n_left as i64) && (*i).min(*j) >= 0 => {
                        vec![((*i).min(*j) as usize, (*i).max(*j) as usize)]
                    }
                    [_, _] => vec![],
                    _ => vec![], // the reference unpacks two: more arguments raise there
                }
            }
            _ => vec![],
        }
    }

    /// The terms of an and (nested ands flattened); 1 for any other.
    fn conjuncts(&self, e: &Expression) -> usize {
        match &e.rex_type {
            Some(RexType::ScalarFunction(f))
                if self.plan.names.get(&f.function_reference).map(String::as_str) == Some("and") =>
            {
                f.arguments.iter().map(|a| self.conjuncts(argument_value(a))).sum()
            }
            _ => 1,
        }
    }

    fn textual(&self, c: &Col) -> bool {
        c.source.is_some_and(|(t, i)| self.tables[t].columns[i].textual)
    }

    /// Distinct values of `c` among `rows` rows of its table (Cardenas).
    fn distinct(&self, c: &Col, rows: f64) -> Walk<f64, C::Error> {
        let Some((t, i)) = c.source else { return Ok(c.values.map_or(rows, |v| cardenas(v, rows))) };
        let st = &self.tables[t];
        let distinct = st.columns[i].distinct;
        if distinct.is_nan() {
            return no("a distinct count the native walk lacks");
        }
        let d = match c.values {
            Some(v) => distinct.max(1.0).min(v.max(1.0)),
            None => distinct.max(1.0),
        };
        Ok(match (rows >= st.rows as f64, c.values) {
            (true, _) => d,
            (false, None) => {
                let (profile, sampled) = &st.columns[i].profile;
                thinned(profile, d, rows, st.rows as f64, *sampled)
            }
            (false, Some(_)) => cardenas(d, rows), // a filter left these few: nothing known of their rows
        })
    }

    /// The values join key `c` is drawn from over `rows` rows: its data set column's distinct
    /// values where no filter below read it (a filter on other columns keeps keys at random:
    /// two such sides match a pair with chance 1 / the domain, not 1 / the keys each has
    /// left); else the keys left ([`Walker::distinct`]).
    fn key_domain(&self, c: &Col, rows: f64) -> Walk<f64, C::Error> {
        let whole = c.source.is_some() && !c.filtered;
        Ok(self.distinct(c, if whole { f64::INFINITY } else { rows })?.max(1.0))
    }

    /// A selection's (or a cast selection's) input column; else computed, its
    /// expression kept ([`Col::origin`]), with the years it spans where it is
    /// `date_part('year', column)`.
    fn expr_col(&mut self, e: &'a Expression, cols: &[Col]) -> Result<Col, Unsupported> {
        let plain = match &e.rex_type {
            Some(RexType::Selection(_)) => true,
            Some(RexType::Cast(c)) => {
                c.input.as_deref().is_some_and(|x| matches!(x.rex_type, Some(RexType::Selection(_))))
            }
            _ => false,
        };
        if plain {
            return expr_col(e, cols); // a column of the input, or a cast of one
        }
        self.origins.push((e, cols.to_vec()));
        let origin = Some(self.origins.len() as u32 - 1);
        Ok(Col { values: self.years(e, cols), origin, ..COMPUTED })
    }

    /// The data set `rel` reads where it is that one data set's reads, filters and projects
    /// (what runs on its sample as the plan runs it); None for anything else.
    fn one_data_set(&self, rel: &Rel) -> Walk<Option<usize>, C::Error> {
        let (mut reads, mut plain) = (Vec::new(), true);
        visit_all_rels(rel, &mut |x| {
            match &x.rel_type {
                Some(RelType::Read(read)) => reads.push(table_name(read)?),
                Some(RelType::Filter(_) | RelType::Project(_)) => {}
                _ => plain = false,
            }
            Ok(())
        })?;
        Ok(if plain && reads.len() == 1 { Some(self.table(reads[0])?) } else { None })
    }

    /// Where aggregate `r`'s keys, over its input's columns `cols`, can
    /// be grouped on a sample; None where no one data set's sample can give them.
    fn group_source(&self, r: &'a AggregateRel, cols: &[Col]) -> Walk<Option<GroupSource<'a>>, C::Error> {
        let Some(input) = r.input.as_deref() else { return Ok(None) };
        if let Some(table) = self.one_data_set(input)? {
            let keys = Cow::Borrowed(r.grouping_expressions.as_slice());
            return Ok(Some(GroupSource { table, rel: Cow::Borrowed(input), keys, filtered: true, width: cols.len() }));
        }
        let (mut table, mut keys) = (None, Vec::new());
        for e in &r.grouping_expressions {
            let Some((t, key)) = self.onto_table(e, cols) else { return Ok(None) };
            if table.is_some_and(|have| have != t) {
                return Ok(None);
            }
            table = Some(t);
            keys.push(key);
        }
        let Some(table) = table else { return Ok(None) };
        let Some(schema) = self.read_schema(&self.tables[table].name) else { return Ok(None) };
        let Ok(width) = top_level_names(Some(schema)).map(|names| names.len()) else { return Ok(None) };
        let read = ReadRel {
            base_schema: Some(schema.clone()),
            read_type: Some(ReadType::NamedTable(NamedTable {
                names: vec![self.tables[table].name.clone()],
                ..Default::default()
            })),
            ..Default::default()
        };
        let rel = Rel { rel_type: Some(RelType::Read(Box::new(read))) };
        Ok(Some(GroupSource { table, rel: Cow::Owned(rel), keys: Cow::Owned(keys), filtered: false, width }))
    }

    /// `e` over `cols` rewritten onto the columns of the one data set it
    /// reads, as the plan reads that data set (a computed column's expression in its place):
    /// (data set, expression); None where it reads several, a cast column or a subquery.
    fn onto_table(&self, e: &Expression, cols: &[Col]) -> Option<(usize, Expression)> {
        let mut out = e.clone();
        let mut table = None;
        self.onto(&mut out, cols, &mut table)?;
        Some((table?, out))
    }

    fn onto(&self, e: &mut Expression, cols: &[Col], table: &mut Option<usize>) -> Option<()> {
        let Some(RexType::Selection(f)) = &e.rex_type else {
            for child in expression_children_mut(e)? {
                self.onto(child, cols, table)?;
            }
            return Some(());
        };
        if !matches!(f.root_type, Some(RootType::RootReference(_))) {
            return None;
        }
        let c = *usize::try_from(selected_field(e)).ok().and_then(|i| cols.get(i))?;
        let (t, inner) = match c.origin {
            Some(o) => {
                let (x, over) = &self.origins[o as usize];
                self.onto_table(x, over)?
            }
            None => {
                let (t, i) = c.source.filter(|_| !c.cast)?;
                let names = top_level_names(self.read_schema(&self.tables[t].name)).ok()?;
                let at = names.iter().position(|n| *n == self.tables[t].columns[i].name)?;
                let mut x = e.clone();
                set_struct_field(&mut x, at);
                (t, x)
            }
        };
        if table.is_some_and(|have| have != t) {
            return None;
        }
        *table = Some(t);
        *e = inner;
        Some(())
    }

    /// `_read_schema`: the base schema of the plan's first read of `name`.
    fn read_schema(&self, name: &str) -> Option<&'a NamedStruct> {
        let root = self.plan.root()?.input.as_ref()?;
        let mut found = None;
        let _ = visit_all_rels(root, &mut |x| {
            if let (None, Some(RelType::Read(read))) = (&found, &x.rel_type) {
                if table_name(read).is_ok_and(|n| n == name) {
                    found = read.base_schema.as_ref();
                }
            }
            Ok(())
        });
        found
    }

    /// The years `e` can take where it is `date_part('year', column)` of a date or timestamp
    /// column read as it is (not cast): those its sketch spans; else None.
    fn years(&self, e: &Expression, cols: &[Col]) -> Option<f64> {
        let Some(RexType::ScalarFunction(f)) = &e.rex_type else { return None };
        if self.plan.names.get(&f.function_reference).map(String::as_str) != Some("date_part") {
            return None;
        }
        let [part, arg] = f.arguments.as_slice() else { return None };
        let year = match &argument_value(part).rex_type {
            Some(RexType::Literal(l)) => {
                matches!(&l.literal_type, Some(LiteralType::String(s)) if s.eq_ignore_ascii_case("year"))
            }
            _ => false,
        };
        let arg = argument_value(arg);
        if !year || !matches!(arg.rex_type, Some(RexType::Selection(_))) {
            return None;
        }
        let c = usize::try_from(selected_field(arg)).ok().and_then(|i| cols.get(i))?;
        let (t, i) = c.source.filter(|_| !c.cast)?;
        self.tables[t].columns[i].years
    }
}

/// The input column a selection reads where it is a plain one: a direct
/// struct field of the input, no child, no outer reference.
fn plain_field(e: &Expression) -> Option<usize> {
    let Some(RexType::Selection(f)) = &e.rex_type else { return None };
    let Some(ReferenceType::DirectReference(seg)) = &f.reference_type else { return None };
    let Some(reference_segment::ReferenceType::StructField(s)) = &seg.reference_type else { return None };
    let root = matches!(f.root_type, Some(RootType::RootReference(_)));
    if s.child.is_some() || !root {
        return None;
    }
    usize::try_from(s.field).ok()
}

/// The input columns condition `e` reads (a subquery's own columns are not its input's).
fn read_fields(e: &Expression, out: &mut Vec<usize>) {
    if let Some(i) = plain_field(e) {
        out.push(i);
    } else if let Ok((children, _)) = expression_children(e) {
        for child in children {
            read_fields(child, out);
        }
    }
}

/// The field a selection reads directly (0 where it is not a struct field: the reference reads
/// the default).
pub(crate) fn selected_field(e: &Expression) -> i32 {
    match &e.rex_type {
        Some(RexType::Selection(f)) => match &f.reference_type {
            Some(ReferenceType::DirectReference(seg)) => match &seg.reference_type {
                Some(reference_segment::ReferenceType::StructField(s)) => s.field,
                _ => 0,
            },
            _ => 0,
        },
        _ => 0,
    }
}

/// `estimate.JOIN_KINDS`: a Substrait join type (0, unspecified, as inner) as (kind, the side
/// kept).
fn join_kind(t: i32) -> (String, &'static str) {
    let (kind, side) = match t {
        0 | 1 => ("inner", ""),
        2 => ("outer", "full"),
        3 => ("outer", "left"),
        4 => ("outer", "right"),
        5 => ("semi", "left"),
        6 => ("anti", "left"),
        7 => ("single", "left"),
        8 => ("semi", "right"),
        9 => ("anti", "right"),
        10 => ("single", "right"),
        11 => ("mark", "left"),
        12 => ("mark", "right"),
        other => return (format!("type {other}"), ""),
    };
    (kind.to_string(), side)
}

/// Rows of a join of `left` and `right` rows with `dl` and `dr` distinct
/// keys (NaN: no equal keys) and a semi or anti join's kept side's key `domain`, and the step's
/// text after "join (".
pub fn join_rows(
    kind: &str,
    side: &str,
    [left, right]: [f64; 2],
    [dl, dr, domain]: [f64; 3],
    residual: bool,
) -> (f64, String) {
    let keyed = !dl.is_nan();
    let product = left * right;
    let inner = if keyed { product / dl.max(dr) } else { product };
    match kind {
        "inner" if keyed => (inner, format!("inner): {} x {} / {} distinct keys", f1(left), f1(right), f1(dl.max(dr)))),
        "inner" => (inner, format!("inner, no equal keys): cross product {}", f1(inner))),
        "outer" => {
            let kept = match side {
                "left" => left,
                "right" => right,
                _ => left.max(right),
            };
            let rows = inner.max(kept);
            let name = if side == "full" { "larger" } else { side };
            (rows, format!("{side} outer): at least the {name} side's rows, {}", f1(rows)))
        }
        _ if side.is_empty() => (product, format!("{kind}): the product, {}", f1(product))),
        _ => {
            let (own, mine, theirs, other) = if side == "left" { (left, dl, dr, right) } else { (right, dr, dl, left) };
            if (kind == "semi" || kind == "anti") && keyed {
                let mut found = (theirs / if domain.is_nan() { mine } else { mine.max(domain) }).min(1.0);
                let mut past = String::new();
                if residual {
                    let passes = 1.0 - (1.0 - DEFAULT_SELECTIVITY).powf((other / theirs).max(1.0));
                    found *= passes;
                    past = format!(" ({passes:.3} past the other conditions: a default per pair)");
                }
                let share = if kind == "semi" { found } else { 1.0 - found };
                let rows = own * share;
                return (rows, format!("{side} {kind}): {share:.3} of the {side} side's rows{past}, {}", f1(rows)));
            }
            (own, format!("{side} {kind}): at most the {side} side's rows, {}", f1(own)))
        }
    }
}

/// Points selection `e` at field `at` of its input (`...struct_field.field = at`).
fn set_struct_field(e: &mut Expression, at: usize) {
    use reference_segment::{ReferenceType as Segment, StructField};
    let Some(RexType::Selection(f)) = &mut e.rex_type else { return };
    let field = i32::try_from(at).unwrap_or(i32::MAX);
    let fresh = || Segment::StructField(Box::new(StructField { field, child: None }));
    match &mut f.reference_type {
        Some(ReferenceType::DirectReference(seg)) => match &mut seg.reference_type {
            Some(Segment::StructField(s)) => s.field = field,
            other => *other = Some(fresh()),
        },
        other => {
            *other = Some(ReferenceType::DirectReference(substrait::proto::expression::ReferenceSegment {
                reference_type: Some(fresh()),
            }))
        }
    }
}

/// The most distinct values a count over groups of `rows` rows takes (`estimate.count_values`).
fn count_values(rows: f64) -> f64 {
    ((1.0 + (1.0 + 8.0 * rows.max(0.0)).sqrt()) / 2.0).floor()
}

/// The distinct values among `rows` rows drawn at random from a data set of `table` rows whose
/// column takes `d` distinct values, as often each as its sample of `sampled` rows shows
/// (`profile`, [`ColumnStats::profile`]): the sum over the values of the chance that one of its
/// rows is drawn. A value seen k ≥ 2 times holds k × table / sampled rows; the values seen once
/// and those the sample missed share the rows of the values seen once. Cardenas's equally
/// common values where there is no profile, the most values any spread gives: a skewed key is
/// not counted as if each of its values were as common.
pub fn thinned(profile: &[(f64, f64)], d: f64, rows: f64, table: f64, sampled: f64) -> f64 {
    let seen: f64 = profile.iter().map(|&(_, v)| v).sum();
    if profile.is_empty() || sampled <= 0.0 || table <= 0.0 || seen <= 0.0 {
        return cardenas(d, rows);
    }
    let kept = (rows / table).clamp(0.0, 1.0);
    let drawn = |held: f64| 1.0 - (1.0 - kept).powf(held);
    let per_row = table / sampled;
    let once = profile.iter().filter(|&&(k, _)| k == 1.0).map(|&(_, v)| v).sum::<f64>();
    let mut values: f64 = profile.iter().filter(|&&(k, _)| k != 1.0).map(|&(k, v)| v * drawn(k * per_row)).sum();
    let pooled = once + (d - seen).max(0.0);
    if pooled > 0.0 {
        values += pooled * drawn(once * per_row / pooled);
    }
    values.min(d.max(1.0)).min(rows.max(1.0)).max(1.0)
}

/// Distinct values among `rows` rows drawn from `d` equally likely ones (`_cardenas`).
fn cardenas(d: f64, rows: f64) -> f64 {
    if d > 1.0 {
        d * (1.0 - (1.0 - 1.0 / d).powf(rows))
    } else {
        1.0
    }
}

/// A selection's (or a cast selection's) input column, else computed.
fn expr_col(e: &Expression, cols: &[Col]) -> Result<Col, Unsupported> {
    let (inner, cast) = match &e.rex_type {
        Some(RexType::Selection(_)) => (e, false),
        Some(RexType::Cast(c)) => match c.input.as_deref() {
            Some(x) if matches!(x.rex_type, Some(RexType::Selection(_))) => (x, true),
            _ => return Ok(COMPUTED),
        },
        _ => return Ok(COMPUTED),
    };
    let i = selected_field(inner);
    let col = usize::try_from(i).ok().and_then(|i| cols.get(i).copied());
    let col = col.ok_or_else(|| Unsupported("a field past the columns".into()))?;
    Ok(if cast { Col { cast: true, values: None, origin: None, ..col } } else { col })
}

/// An integer literal's value (unsigned variations unwrapped, floats
/// truncated, booleans 0 or 1), None for any other expression or kind.
fn literal_int(e: &Expression) -> Result<Option<i128>, Unsupported> {
    let Some(RexType::Literal(lit)) = &e.rex_type else { return Ok(None) };
    let unsigned = lit.type_variation_reference == 1;
    let wrap = |v: i64, bits: u32| -> i128 {
        if unsigned && v < 0 {
            i128::from(v) + (1i128 << bits)
        } else {
            i128::from(v)
        }
    };
    Ok(match &lit.literal_type {
        Some(LiteralType::I8(v)) => Some(wrap(i64::from(*v), 8)),
        Some(LiteralType::I16(v)) => Some(wrap(i64::from(*v), 16)),
        Some(LiteralType::I32(v)) => Some(wrap(i64::from(*v), 32)),
        Some(LiteralType::I64(v)) => Some(wrap(*v, 64)),
        Some(LiteralType::Boolean(b)) => Some(i128::from(*b)),
        Some(LiteralType::Fp64(v)) => Some(truncated(*v)?),
        Some(LiteralType::Fp32(v)) => Some(truncated(f64::from(*v))?),
        _ => None,
    })
}

fn truncated(v: f64) -> Result<i128, Unsupported> {
    if !v.is_finite() || v.abs() >= 1e36 {
        return Err(Unsupported("a count the reference cannot take".into())); // int(inf) raises there
    }
    Ok(v.trunc() as i128)
}

#[cfg(test)]
mod tests {
    use super::{count_values, thinned};
    use proptest::prelude::*;

    /// (times seen, values seen that often) of a column whose values occur `counts` times.
    fn profile_of(counts: &[u64]) -> Vec<(f64, f64)> {
        let mut by_times = std::collections::BTreeMap::new();
        for &c in counts {
            *by_times.entry(c).or_insert(0.0) += 1.0;
        }
        by_times.into_iter().map(|(k, v)| (k as f64, v)).collect()
    }

    proptest! {
        /// Over a whole-table sample, the distinct values a random draw of `rows` rows holds on
        /// average, computed exactly (a value is missed with chance C(N - c, m) / C(N, m)), for
        /// any spread: skewed, uniform, a value alone.
        #[test]
        fn thinned_is_the_distinct_values_a_random_draw_holds(
            counts in prop::collection::vec(1u64..60, 1..80),
            share in 0.0f64..=1.0,
        ) {
            let n: u64 = counts.iter().sum();
            let m = (share * n as f64).floor() as u64;
            let expected: f64 = counts
                .iter()
                .map(|&c| 1.0 - (0..c).map(|i| (n.saturating_sub(m + i)) as f64 / (n - i) as f64).product::<f64>())
                .sum();
            let got = thinned(&profile_of(&counts), counts.len() as f64, m as f64, n as f64, n as f64);
            prop_assert!((got - expected).abs() <= 0.03 * expected + 1.0, "{got} against {expected}");
        }

        /// No spread of `d` values holds more of them in a draw than equally common values do,
        /// whatever the sample saw.
        #[test]
        fn thinned_is_at_most_equally_common_values(
            counts in prop::collection::vec(1u64..60, 1..80),
            unseen in 0u64..500,
            scale in 1u64..1000,
            share in 0.0f64..=1.0,
        ) {
            let sampled: u64 = counts.iter().sum();
            let table = (sampled * scale) as f64;
            let d = (counts.len() as u64 + unseen) as f64;
            let rows = share * table;
            let got = thinned(&profile_of(&counts), d, rows, table, sampled as f64);
            let uniform = d * (1.0 - (1.0 - share).powf(table / d));
            prop_assert!(got <= uniform.max(1.0) * (1.0 + 1e-9) && got >= 1.0 && got <= rows.max(1.0), "{got} > {uniform}");
        }

        /// The bound holds for any group sizes (ties, zeros, one group, none): k distinct
        /// counts need 0 + 1 + ... + (k - 1) rows.
        #[test]
        fn a_count_takes_at_most_count_values_distinct_values(sizes in prop::collection::vec(0u64..500, 0..300)) {
            let distinct = sizes.iter().collect::<std::collections::HashSet<_>>().len();
            prop_assert!(distinct as f64 <= count_values(sizes.iter().sum::<u64>() as f64));
        }
    }

    #[test]
    fn the_bound_is_tight_where_the_counts_are_0_to_k() {
        for k in 1..200u64 {
            let rows = (k * (k - 1) / 2) as f64; // counts 0, 1, ..., k - 1
            assert_eq!(count_values(rows), k as f64);
        }
    }
}
