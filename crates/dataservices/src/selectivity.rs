//! A condition's selectivity, native, for the conditions most queries filter with: and / or /
//! not of comparisons (`<`, `<=`, `>`, `>=`) between a float64 or signed integer column and a
//! number. It mirrors `estimate._Ctx.selectivity` for them: comparisons on one column reduced
//! to one interval priced with the column's KLL sketch (its sorted view, ranked as
//! DataSketches ranks it), columns independent unless the data set's sample shows otherwise
//! (the joint share against the product of the sample's own marginals, beyond
//! `Z` standard errors). Any other condition is `None`: the Python estimator prices it.

use std::collections::HashMap;

use substrait::proto::{
    expression::{literal::LiteralType, RexType},
    r#type::Kind,
    Expression,
};

use crate::estimate::{Col, TableStats};
use crate::plan::{argument_value, SubstraitPlan};

/// `estimate.Z`: standard errors before the sample overrides independence.
pub const Z: f64 = 3.0;

/// 2^53: integers below it are exact as f64, so comparing them as f64 is comparing them as
/// integers (the columns taken hold only such values; larger literals are the reference's).
pub const EXACT: f64 = 9_007_199_254_740_992.0;

/// A numeric column's sketch and sample, as the selectivity needs them.
#[derive(Debug, Clone, Default)]
pub struct Numeric {
    /// The KLL sketch's sorted view: items ascending and the cumulative weight up to each.
    pub items: Vec<f64>,
    pub cumulative: Vec<u64>,
    /// Values the sketch has seen (0: empty).
    pub n: u64,
    /// The sample's values (as f64; exact for the integers accepted) and where they are valid
    /// (empty: all are).
    pub sample: Vec<f64>,
    pub valid: Vec<bool>,
}

impl Numeric {
    /// DataSketches' `get_rank`: the share of weight at items below `v` (at or below, inclusive).
    fn rank(&self, v: f64, inclusive: bool) -> f64 {
        let i =
            if inclusive { self.items.partition_point(|&x| x <= v) } else { self.items.partition_point(|&x| x < v) };
        if i == 0 {
            0.0
        } else {
            self.cumulative[i - 1] as f64 / self.n as f64
        }
    }
}

/// One column's comparisons: (operator, number).
type Comparisons = Vec<(Op, f64)>;
/// Prices one column's conjunction of comparisons: (table, column, comparisons) to a share.
type Marginal<'a> = dyn FnMut(usize, usize, &[(Op, f64)]) -> f64 + 'a;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Op {
    Gt,
    Ge,
    Lt,
    Le,
}

/// A condition taken apart (`_Ctx._tree`, flattened).
#[derive(Debug, Clone)]
enum Tree {
    And(Vec<Tree>),
    Or(Vec<Tree>),
    Not(Box<Tree>),
    /// (table, column) indices, the operator, the number compared with.
    Cmp(usize, usize, Op, f64),
}

/// The selectivity of `cond` over input columns `cols`, with the steps it took; None where the
/// condition is not one this module prices.
pub fn selectivity(
    plan: &SubstraitPlan,
    tables: &[&TableStats],
    cond: &Expression,
    cols: &[Col],
    steps: &mut Vec<String>,
) -> Option<f64> {
    let tree = flatten(tree(plan, tables, cond, cols)?);
    let mut columns: Vec<(usize, usize)> = Vec::new();
    columns_of(&tree, &mut columns);
    let mut model = independent(&tree, tables, &mut |t, c, preds| sketch_marginal(tables[t], c, preds));
    if columns.len() >= 2 && columns.iter().all(|&(t, _)| t == columns[0].0) {
        model *= correlation(&tree, tables, columns[0].0, &columns, steps);
    }
    Some(model.clamp(0.0, 1.0))
}

fn tree(plan: &SubstraitPlan, tables: &[&TableStats], e: &Expression, cols: &[Col]) -> Option<Tree> {
    let Some(RexType::ScalarFunction(f)) = &e.rex_type else { return None };
    let args: Vec<&Expression> = f.arguments.iter().map(argument_value).collect();
    match plan.names.get(&f.function_reference).map(String::as_str)? {
        // (an empty and / or: the reference's sample mask fails on it; its error is its own)
        "and" | "or" if args.is_empty() => None,
        "and" => Some(Tree::And(args.iter().map(|a| tree(plan, tables, a, cols)).collect::<Option<_>>()?)),
        "or" => Some(Tree::Or(args.iter().map(|a| tree(plan, tables, a, cols)).collect::<Option<_>>()?)),
        "not" if args.len() == 1 => Some(Tree::Not(Box::new(tree(plan, tables, args[0], cols)?))),
        name @ ("gt" | "gte" | "lt" | "lte") if args.len() == 2 => {
            let op = match name {
                "gt" => Op::Gt,
                "gte" => Op::Ge,
                "lt" => Op::Lt,
                _ => Op::Le,
            };
            let (mut a, mut b, mut op) = (args[0], args[1], op);
            let column_like = |x: &Expression| matches!(x.rex_type, Some(RexType::Selection(_) | RexType::Cast(_)));
            if column_like(b) && matches!(a.rex_type, Some(RexType::Literal(_))) {
                (a, b) = (b, a);
                op = match op {
                    Op::Gt => Op::Lt,
                    Op::Ge => Op::Le,
                    Op::Lt => Op::Gt,
                    Op::Le => Op::Ge,
                };
            }
            let (t, c) = column(tables, a, cols)?;
            let v = number(b)?;
            Some(Tree::Cmp(t, c, op, v))
        }
        _ => None,
    }
}

/// (table, column) where `e` reads a numeric column (or casts one to double), else None.
fn column(tables: &[&TableStats], e: &Expression, cols: &[Col]) -> Option<(usize, usize)> {
    let inner = match &e.rex_type {
        Some(RexType::Selection(_)) => e,
        Some(RexType::Cast(c)) => {
            let to_double = matches!(c.r#type.as_ref().and_then(|t| t.kind.as_ref()), Some(Kind::Fp64(_)));
            match c.input.as_deref() {
                Some(x) if to_double && matches!(x.rex_type, Some(RexType::Selection(_))) => x,
                _ => return None,
            }
        }
        _ => return None,
    };
    let field = crate::estimate::selected_field(inner);
    let col = usize::try_from(field).ok().and_then(|i| cols.get(i))?;
    let (t, c) = if col.cast { None } else { col.source }?;
    tables[t].columns[c].numeric.as_ref()?;
    Some((t, c))
}

/// A finite number literal's value (unsigned integers as the reference unwraps them).
fn number(e: &Expression) -> Option<f64> {
    let Some(RexType::Literal(lit)) = &e.rex_type else { return None };
    let unsigned = lit.type_variation_reference == 1;
    let int = |v: i64, bits: u32| -> f64 {
        if unsigned && v < 0 {
            (i128::from(v) + (1i128 << bits)) as f64
        } else {
            v as f64
        }
    };
    let v = match &lit.literal_type {
        Some(LiteralType::I8(v)) => int(i64::from(*v), 8),
        Some(LiteralType::I16(v)) => int(i64::from(*v), 16),
        Some(LiteralType::I32(v)) => int(i64::from(*v), 32),
        Some(LiteralType::I64(v)) if !unsigned => *v as f64,
        Some(LiteralType::Fp64(v)) => *v,
        _ => return None,
    };
    // exact as f64, and within what the reference casts to the column's type
    (v.is_finite() && v.abs() < EXACT).then_some(v)
}

/// Nested and (or or) merged into one level (`estimate._flatten`; no equalities here, so no
/// IN lists of an or's).
fn flatten(t: Tree) -> Tree {
    match t {
        Tree::And(parts) => Tree::And(merge(parts, |p| matches!(p, Tree::And(_)))),
        Tree::Or(parts) => Tree::Or(merge(parts, |p| matches!(p, Tree::Or(_)))),
        Tree::Not(x) => Tree::Not(Box::new(flatten(*x))),
        cmp => cmp,
    }
}

fn merge(parts: Vec<Tree>, same: fn(&Tree) -> bool) -> Vec<Tree> {
    let mut out = Vec::new();
    for p in parts.into_iter().map(flatten) {
        if same(&p) {
            match p {
                Tree::And(inner) | Tree::Or(inner) => out.extend(inner),
                other => out.push(other),
            }
        } else {
            out.push(p);
        }
    }
    out
}

fn columns_of(t: &Tree, out: &mut Vec<(usize, usize)>) {
    match t {
        Tree::Cmp(tb, c, _, _) => {
            if !out.contains(&(*tb, *c)) {
                out.push((*tb, *c));
            }
        }
        Tree::And(ps) | Tree::Or(ps) => ps.iter().for_each(|p| columns_of(p, out)),
        Tree::Not(x) => columns_of(x, out),
    }
}

fn non_null(st: &TableStats, c: usize) -> f64 {
    1.0 - st.columns[c].nulls as f64 / st.rows.max(1) as f64
}

/// `_Ctx._sel`: the tree's selectivity with columns independent, one column's conjunction of
/// comparisons priced by `marginal(table, column, comparisons)`.
fn independent(t: &Tree, tables: &[&TableStats], marginal: &mut Marginal<'_>) -> f64 {
    match t {
        Tree::Not(inner) => {
            let s = independent(inner, tables, marginal);
            match **inner {
                Tree::Cmp(tb, c, _, _) => (non_null(tables[tb], c) - s).max(0.0),
                _ => 1.0 - s,
            }
        }
        Tree::Or(parts) => {
            let mut miss = 1.0;
            for p in parts {
                miss *= 1.0 - independent(p, tables, marginal);
            }
            1.0 - miss
        }
        Tree::Cmp(tb, c, op, v) => marginal(*tb, *c, &[(*op, *v)]),
        Tree::And(parts) => {
            let mut by_col: Vec<((usize, usize), Comparisons)> = Vec::new();
            let mut s = 1.0;
            for p in parts {
                if let Tree::Cmp(tb, c, op, v) = p {
                    match by_col.iter_mut().find(|(k, _)| *k == (*tb, *c)) {
                        Some((_, preds)) => preds.push((*op, *v)),
                        None => by_col.push(((*tb, *c), vec![(*op, *v)])),
                    }
                } else {
                    s *= independent(p, tables, marginal);
                }
            }
            for ((tb, c), preds) in &by_col {
                s *= marginal(*tb, *c, preds);
            }
            s
        }
    }
}

/// `estimate._interval` for inequalities: (lo, lo inclusive, hi, hi inclusive).
fn interval(preds: &[(Op, f64)]) -> (Option<f64>, bool, Option<f64>, bool) {
    let (mut lo, mut lo_incl, mut hi, mut hi_incl) = (None, true, None, true);
    for &(op, v) in preds {
        match op {
            Op::Gt | Op::Ge => {
                if lo.is_none_or(|l| v > l || (v == l && op == Op::Gt)) {
                    (lo, lo_incl) = (Some(v), op == Op::Ge);
                }
            }
            Op::Lt | Op::Le => {
                if hi.is_none_or(|h| v < h || (v == h && op == Op::Lt)) {
                    (hi, hi_incl) = (Some(v), op == Op::Le);
                }
            }
        }
    }
    (lo, lo_incl, hi, hi_incl)
}

/// `_Ctx._sketch_marginal` for inequalities: the interval's share by the KLL sketch, of the
/// non-null rows.
fn sketch_marginal(st: &TableStats, c: usize, preds: &[(Op, f64)]) -> f64 {
    let k = st.columns[c].numeric.as_ref().expect("a numeric column");
    let nn = non_null(st, c);
    let (lo, lo_incl, hi, hi_incl) = interval(preds);
    let mut s = nn;
    if (lo.is_some() || hi.is_some()) && k.n > 0 {
        let upper = hi.map_or(1.0, |h| k.rank(h, hi_incl));
        let lower = lo.map_or(0.0, |l| k.rank(l, !lo_incl));
        s = (upper - lower).max(0.0) * nn;
    }
    s.max(0.0)
}

/// Where a sample's column meets one comparison (a null meets none): one bit a row.
fn leaf_mask(k: &Numeric, op: Op, v: f64) -> Vec<u64> {
    let meets = |x: f64| match op {
        Op::Gt => x > v,
        Op::Ge => x >= v,
        Op::Lt => x < v,
        Op::Le => x <= v,
    };
    let mut out = vec![0u64; k.sample.len().div_ceil(64)];
    for (w, chunk) in out.iter_mut().zip(k.sample.chunks(64)) {
        for (j, &x) in chunk.iter().enumerate() {
            *w |= u64::from(meets(x)) << j;
        }
    }
    if !k.valid.is_empty() {
        for (i, _) in k.valid.iter().enumerate().filter(|(_, &ok)| !ok) {
            out[i / 64] &= !(1u64 << (i % 64));
        }
    }
    out
}

fn count(mask: &[u64]) -> f64 {
    mask.iter().map(|w| w.count_ones()).sum::<u32>() as f64
}

/// A mask's key: the column, the comparison and the number's bits.
type LeafKey = (usize, u8, u64);

fn leaf_key(c: usize, op: Op, v: f64) -> LeafKey {
    (c, op as u8, v.to_bits())
}

/// `_Ctx._correlation`: the sample's joint share against what independence predicts on the
/// sample itself, the ratio where they differ by more than Z standard errors, else 1.
fn correlation(
    t: &Tree,
    tables: &[&TableStats],
    table: usize,
    columns: &[(usize, usize)],
    steps: &mut Vec<String>,
) -> f64 {
    let st = tables[table];
    let n = st.sample_rows;
    if n == 0 {
        return 1.0;
    }
    let nf = n as f64;
    let mut masks: HashMap<LeafKey, Vec<u64>> = HashMap::new(); // each comparison's mask once
    leaves(t, &mut |c, op, v| {
        let k = st.columns[c].numeric.as_ref().expect("a numeric column");
        masks.entry(leaf_key(c, op, v)).or_insert_with(|| leaf_mask(k, op, v));
    });
    let mask = |c: usize, op: Op, v: f64| &masks[&leaf_key(c, op, v)];
    let indep = independent(t, tables, &mut |_, c, preds| match preds {
        [(op, v)] => count(mask(c, *op, *v)) / nf,
        _ => {
            let mut m = mask(c, preds[0].0, preds[0].1).clone();
            for &(op, v) in &preds[1..] {
                m.iter_mut().zip(mask(c, op, v)).for_each(|(a, b)| *a &= b);
            }
            count(&m) / nf
        }
    });
    let joint = count(&tree_mask(t, n, &mask)) / nf;
    let se = ((indep * (1.0 - indep)).max(1.0 / nf) / nf).sqrt();
    if (joint - indep).abs() <= Z * se {
        return 1.0;
    }
    let factor = if indep > 0.0 { joint / indep } else { 1.0 };
    let mut names: Vec<&str> = columns.iter().map(|&(tb, c)| tables[tb].columns[c].name.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    steps.push(format!("columns {} are correlated in the sample: factor {factor:.3}", names.join(", ")));
    factor
}

/// Every comparison of the tree: (column, operator, number).
fn leaves(t: &Tree, f: &mut dyn FnMut(usize, Op, f64)) {
    match t {
        Tree::Cmp(_, c, op, v) => f(*c, *op, *v),
        Tree::Not(x) => leaves(x, f),
        Tree::And(parts) | Tree::Or(parts) => parts.iter().for_each(|p| leaves(p, f)),
    }
}

/// `estimate._tree_mask`: the sample's `n` rows where the tree holds (a not inverts: a null row
/// that met no comparison meets its negation, as pyarrow's invert of the filled mask does).
fn tree_mask<'m>(t: &Tree, n: usize, mask: &dyn Fn(usize, Op, f64) -> &'m Vec<u64>) -> Vec<u64> {
    match t {
        Tree::Cmp(_, c, op, v) => mask(*c, *op, *v).clone(),
        Tree::Not(x) => {
            let mut out: Vec<u64> = tree_mask(x, n, mask).into_iter().map(|w| !w).collect();
            if !n.is_multiple_of(64) {
                if let Some(last) = out.last_mut() {
                    *last &= (1u64 << (n % 64)) - 1; // no rows past the sample's
                }
            }
            out
        }
        Tree::And(parts) | Tree::Or(parts) => {
            let and = matches!(t, Tree::And(_));
            let mut out = tree_mask(&parts[0], n, mask);
            for p in &parts[1..] {
                let m = tree_mask(p, n, mask);
                out.iter_mut().zip(m).for_each(|(a, b)| *a = if and { *a & b } else { *a | b });
            }
            out
        }
    }
}
