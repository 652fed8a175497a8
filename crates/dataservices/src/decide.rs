//! The decision, native: a query's feature vectors (its own and its scan's), every stage model
//! at once ([`Forest`]), both ways' stages over the link, the faster way, why, and the link
//! rate where the faster way changes. It mirrors `timemodel.decide` (with `_predicted`,
//! `_stages`, `link_crossover`, `QueryFeatures.vector`), which stays the reference it is
//! tested against.

use crate::estimate::{Estimate, TableStats};
use crate::pyfmt::f0;
use crate::Forest;

/// `timemodel.QueryFeatures`, its fields in their order.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Features {
    pub in_rows: f64,
    pub in_bytes: f64,
    pub out_rows: f64,
    pub out_bytes: f64,
    pub functions: f64,
    pub aggregate: bool,
    pub join: bool,
    pub sort: bool,
    pub heavy: f64,
    pub heavy_rows: f64,
    pub cheap_rows: f64,
    pub aggregate_rows: f64,
    pub sort_rows: f64,
    pub string_rows: f64,
    pub in_string_bytes: f64,
    pub out_string_bytes: f64,
    pub join_rows: f64,
    pub group_bytes: f64,
    pub string_key_rows: f64,
}

/// The names of [`Features`]' fields, in order (`QueryFeatures`' fields).
pub const FIELDS: [&str; 19] = [
    "in_rows",
    "in_bytes",
    "out_rows",
    "out_bytes",
    "functions",
    "aggregate",
    "join",
    "sort",
    "heavy",
    "heavy_rows",
    "cheap_rows",
    "aggregate_rows",
    "sort_rows",
    "string_rows",
    "in_string_bytes",
    "out_string_bytes",
    "join_rows",
    "group_bytes",
    "string_key_rows",
];

pub const VECTOR: usize = 21;

/// What each operator works through, in plain units (rows, bytes; `one` for the fixed cost):
/// the quantities a stage's time is linear in ([`Features::priced_work`]), whose unit costs the
/// time models fit (`timemodel.Models.fit`) so that a query larger than any trained on is
/// priced per row and byte, not at the largest time the trees saw.
pub const PRICED: [&str; 15] = [
    "one",
    "in_rows",
    "in_bytes",
    "in_string_bytes",
    "out_rows",
    "out_bytes",
    "out_string_bytes",
    "cheap_rows",
    "heavy_rows",
    "string_rows",
    "aggregate_rows",
    "group_bytes",
    "sort_rows",
    "join_rows",
    "string_key_rows",
];

/// A stage's time is never priced under this (seconds): the floor of the learned times.
pub const FLOOR_S: f64 = 1e-6;

impl Features {
    /// `timemodel.features` of an estimated plan: `reads`, each data set read with its columns
    /// (`PlanInfo.reads`), over `tables` (their statistics, found by name); None where a data
    /// set or column read is not among them. The sums run in the reference's order, so that
    /// the features are its own to the last bit.
    pub fn of(e: &Estimate, reads: &[(String, Vec<String>)], tables: &[&TableStats]) -> Option<Features> {
        let (mut in_rows, mut in_bytes, mut in_string) = (0u64, 0.0, 0.0);
        for (name, cols) in reads {
            let t = tables.iter().find(|t| &t.name == name)?;
            let cs = cols.iter().map(|c| t.column(c).map(|i| &t.columns[i])).collect::<Option<Vec<_>>>()?;
            let rows = t.rows as f64;
            let read = rows * cs.iter().fold(0.0, |a, c| a + c.width);
            in_rows += t.rows;
            in_bytes += read;
            if cs.iter().any(|c| c.textual) {
                // fixed widths are multiples of 1/8: their sum is exact in any order
                in_string += (read - rows * cs.iter().fold(0.0, |a, c| a + c.fixed)).max(0.0);
            }
        }
        let in_rows = in_rows as f64;
        let has = |kind: &str| e.shape.kinds.contains(&kind);
        let (aggregate, join) = (has("AggregateRel"), has("JoinRel") || has("HashJoinRel"));
        let w = &e.work;
        Some(Features {
            in_rows,
            in_bytes,
            out_rows: e.rows,
            out_bytes: e.bytes,
            functions: e.shape.functions as f64,
            aggregate,
            join,
            sort: has("SortRel"),
            heavy: e.shape.heavy as f64,
            heavy_rows: w[1],
            cheap_rows: w[0],
            aggregate_rows: w[3],
            sort_rows: w[4],
            string_rows: w[2],
            in_string_bytes: in_string,
            out_string_bytes: e.bytes * if in_bytes > 0.0 { in_string / in_bytes } else { 0.0 },
            join_rows: w[6],
            group_bytes: if aggregate && e.rows > 1.0 { e.bytes } else { 0.0 },
            string_key_rows: w[5],
        })
    }

    /// The fields in [`FIELDS`]' order, flags as 0 or 1.
    pub fn values(&self) -> [f64; 19] {
        let b = |x: bool| if x { 1.0 } else { 0.0 };
        [
            self.in_rows,
            self.in_bytes,
            self.out_rows,
            self.out_bytes,
            self.functions,
            b(self.aggregate),
            b(self.join),
            b(self.sort),
            self.heavy,
            self.heavy_rows,
            self.cheap_rows,
            self.aggregate_rows,
            self.sort_rows,
            self.string_rows,
            self.in_string_bytes,
            self.out_string_bytes,
            self.join_rows,
            self.group_bytes,
            self.string_key_rows,
        ]
    }

    /// Features from [`Features::values`] (a flag is any value but 0).
    pub fn from_values(v: [f64; 19]) -> Features {
        let [in_rows, in_bytes, out_rows, out_bytes, functions, aggregate, join, sort, heavy, heavy_rows, cheap_rows, aggregate_rows, sort_rows, string_rows, in_string_bytes, out_string_bytes, join_rows, group_bytes, string_key_rows] =
            v;
        Features {
            in_rows,
            in_bytes,
            out_rows,
            out_bytes,
            functions,
            aggregate: aggregate != 0.0,
            join: join != 0.0,
            sort: sort != 0.0,
            heavy,
            heavy_rows,
            cheap_rows,
            aggregate_rows,
            sort_rows,
            string_rows,
            in_string_bytes,
            out_string_bytes,
            join_rows,
            group_bytes,
            string_key_rows,
        }
    }

    /// `QueryFeatures.vector`: what the models read.
    pub fn vector(&self) -> [f64; VECTOR] {
        let per_row = 1.0 / self.in_rows.max(1.0);
        let b = |x: bool| if x { 1.0 } else { 0.0 };
        [
            self.in_rows.ln_1p(),
            self.in_bytes.ln_1p(),
            self.out_rows.ln_1p(),
            self.out_bytes.ln_1p(),
            self.functions,
            b(self.aggregate),
            b(self.join),
            b(self.sort),
            self.heavy,
            self.heavy_rows.ln_1p(),
            self.cheap_rows.ln_1p(),
            self.aggregate_rows.ln_1p(),
            self.sort_rows.ln_1p(),
            self.string_rows.ln_1p(),
            self.in_string_bytes.ln_1p(),
            self.out_string_bytes.ln_1p(),
            self.join_rows.ln_1p(),
            self.group_bytes.ln_1p(),
            self.in_bytes * per_row,
            self.in_string_bytes * per_row,
            self.string_key_rows.ln_1p(),
        ]
    }

    /// The quantities of [`PRICED`], in its order.
    pub fn priced_work(&self) -> [f64; PRICED.len()] {
        [
            1.0,
            self.in_rows,
            self.in_bytes,
            self.in_string_bytes,
            self.out_rows,
            self.out_bytes,
            self.out_string_bytes,
            self.cheap_rows,
            self.heavy_rows,
            self.string_rows,
            self.aggregate_rows,
            self.group_bytes,
            self.sort_rows,
            self.join_rows,
            self.string_key_rows,
        ]
    }

    /// `scan_features`: shipping the query's input as it is (pushback's stream).
    pub fn scan(&self) -> Features {
        Features {
            in_rows: self.in_rows,
            in_bytes: self.in_bytes,
            out_rows: self.in_rows,
            out_bytes: self.in_bytes,
            in_string_bytes: self.in_string_bytes,
            out_string_bytes: self.in_string_bytes,
            ..Features::default()
        }
    }
}

/// Which regressors of the forest are which (`timemodel._prediction_plan`): the host's
/// receive out, receive in and engine first, then the node's request where it has one, then
/// `offload` node stages summed for offload and `pushback` for pushback.
#[derive(Debug, Clone, Copy)]
pub struct Layout {
    pub request: bool,
    pub offload: usize,
    pub pushback: usize,
}

/// The learned parts of both ways (`_predicted`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Parts {
    pub request: f64,
    pub node_offload: f64,
    pub node_pushback: f64,
    pub receive_out: f64,
    pub receive_in: f64,
    pub host_engine: f64,
}

/// A stage's time from its unit costs `cost` (one per [`PRICED`] quantity) and the trees'
/// correction: the work priced at those costs (at least [`FLOOR_S`]) times the exponential of
/// `log_correction`; a stage without unit costs (all 0) is the exponential alone.
pub fn priced(cost: &[f64], work: &[f64; PRICED.len()], log_correction: f64) -> f64 {
    let scale = if cost.iter().all(|&c| c == 0.0) {
        1.0
    } else {
        cost.iter().zip(work).fold(0.0, |a, (c, w)| a + c * w).max(FLOOR_S)
    };
    scale * log_correction.exp()
}

/// Each regressor's seconds (`Forest.predict`): its work at its unit costs (`cost`, [`PRICED`]
/// of them a regressor, in the forest's order) times the exponential of its base plus its
/// trees. The host's receiving of the scan and the pushback stages read the scan's features
/// and work, the others the query's.
pub fn predict(forest: &Forest, base: &[f64], cost: &[f64], layout: Layout, f: &Features) -> Result<Parts, String> {
    let scan = f.scan();
    let mut x = f.vector().to_vec();
    x.extend(scan.vector());
    let raw = forest.raw(&x)?;
    let n = 3 + usize::from(layout.request);
    let count = n + layout.offload + layout.pushback;
    if raw.len() != base.len() || raw.len() != count || cost.len() != count * PRICED.len() {
        return Err(format!(
            "{} regressors against {} bases, {} unit costs and a layout of {count}",
            raw.len(),
            base.len(),
            cost.len() / PRICED.len()
        ));
    }
    let (work, scan_work) = (f.priced_work(), scan.priced_work());
    let y: Vec<f64> = (0..count)
        .map(|j| {
            let reads_scan = j == 1 || j >= n + layout.offload;
            let w = if reads_scan { &scan_work } else { &work };
            priced(&cost[j * PRICED.len()..(j + 1) * PRICED.len()], w, base[j] + raw[j])
        })
        .collect();
    Ok(Parts {
        request: if layout.request { y[3] } else { 0.0 },
        node_offload: y[n..n + layout.offload].iter().sum(),
        node_pushback: y[n + layout.offload..].iter().sum(),
        receive_out: y[0],
        receive_in: y[1],
        host_engine: y[2],
    })
}

/// `TransferLink`: its rate (None: unshaped) and latency.
#[derive(Debug, Clone, Copy)]
pub struct Link {
    pub bytes_per_s: Option<f64>,
    pub latency_s: f64,
}

impl Link {
    fn seconds(&self, bytes: f64) -> f64 {
        self.latency_s + self.bytes_per_s.filter(|&r| r != 0.0).map_or(0.0, |r| bytes / r)
    }
}

/// `timemodel.Decision`.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub way: &'static str,
    pub offload: Vec<(&'static str, f64)>,
    pub pushback: Vec<(&'static str, f64)>,
    pub why: String,
    pub crossover_mbit: Option<f64>,
    pub above: Option<&'static str>,
}

/// `timemodel.decide` from the predicted parts.
pub fn decide(p: &Parts, f: &Features, link: Link) -> Decision {
    let (t_o, t_b) = (link.seconds(f.out_bytes), link.seconds(f.in_bytes));
    let offload = vec![
        ("request", p.request),
        ("node (engine, stream)", p.node_offload),
        ("link beyond the node", (t_o - p.node_offload).max(0.0)),
        ("host receive", p.receive_out),
    ];
    let pushback = vec![
        ("request", p.request),
        ("node stream", p.node_pushback),
        ("link beyond the node", (t_b - p.node_pushback).max(0.0)),
        ("host receive", p.receive_in),
        ("host engine", p.host_engine),
    ];
    let total = |s: &[(&str, f64)]| s.iter().fold(0.0, |a, (_, v)| a + v);
    let (o, b) = (total(&offload), total(&pushback));
    let way = if o <= b { "offload" } else { "pushback" };
    let loser = if way == "offload" { &pushback } else { &offload };
    let (big, big_s) = loser.iter().fold(loser[0], |m, &s| if s.1 > m.1 { s } else { m });
    let (lo, hi) = (o.min(b), o.max(b));
    let mut why = format!(
        "{way}: {:.1} ms against {:.1} ms ({:.1}% less); the other way's largest stage is {big} ({:.1} ms)",
        lo * 1e3,
        hi * 1e3,
        100.0 * (1.0 - lo / hi),
        big_s * 1e3
    );
    let (rate, above) = crossover(
        (p.request + p.receive_out, p.node_offload, f.out_bytes),
        (p.request + p.receive_in + p.host_engine, p.node_pushback, f.in_bytes),
        link.latency_s,
    );
    if let (Some(r), Some(a)) = (rate, above) {
        why += &format!("; {a} wins on links above {} Mbit/s", f0(r * 8e-6));
    }
    Decision { way, offload, pushback, why, crossover_mbit: rate.map(|r| r * 8e-6), above }
}

/// Halvings of the segment the crossover lies in (`timemodel.CROSSOVER_STEPS`).
const CROSSOVER_STEPS: usize = 64;

/// The slowest and fastest rates the crossover is looked for over (`timemodel.RATES`' ends).
const SLOWEST_RATE: f64 = 1e5;
const FASTEST_RATE: f64 = 1.25e11;

/// `timemodel.link_crossover`: the fastest rate (bytes/s) where the faster way changes, and
/// the way that wins above it; each way is (fixed s, node stream s, bytes).
pub fn crossover(
    offload: (f64, f64, f64),
    pushback: (f64, f64, f64),
    latency: f64,
) -> (Option<f64>, Option<&'static str>) {
    let gap = |u: f64| {
        let o = offload.0 + offload.1.max(latency + offload.2 * u);
        let b = pushback.0 + pushback.1.max(latency + pushback.2 * u);
        o - b
    };
    let (fastest, slowest) = (1.0 / FASTEST_RATE, 1.0 / SLOWEST_RATE);
    let mut us = vec![fastest];
    let mut breaks: Vec<f64> = [offload, pushback]
        .iter()
        .filter(|w| w.2 > 0.0)
        .map(|w| (w.1 - latency) / w.2)
        .filter(|&u| fastest < u && u < slowest)
        .collect();
    breaks.sort_by(f64::total_cmp);
    us.extend(breaks);
    us.push(slowest);
    let d0 = gap(fastest);
    let above = if d0 <= 0.0 { "offload" } else { "pushback" };
    for w in us.windows(2) {
        let (mut a, mut b) = (w[0], w[1]);
        if (gap(b) <= 0.0) != (d0 <= 0.0) {
            // bisected, not interpolated: where the ways tie beyond a break point, bytes x u
            // misses the stream there by an ulp and the line through the ends crosses at b
            for _ in 0..CROSSOVER_STEPS {
                let mid = (a + b) / 2.0;
                if !(a < mid && mid < b) {
                    break;
                }
                if (gap(mid) <= 0.0) != (d0 <= 0.0) {
                    b = mid;
                } else {
                    a = mid;
                }
            }
            return (Some(1.0 / b), Some(above));
        }
    }
    (None, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stage_is_its_work_at_unit_costs_times_the_trees_correction() {
        let f = Features { in_rows: 1e6, in_bytes: 64e6, ..Features::default() };
        let mut cost = [0.0; PRICED.len()];
        assert_eq!(priced(&cost, &f.priced_work(), 0.5), 0.5f64.exp(), "no unit costs: the trees alone");
        cost[0] = 1e-3;
        cost[1] = 2e-7;
        let got = priced(&cost, &f.priced_work(), 0.0);
        assert!((got - (1e-3 + 0.2)).abs() < 1e-12, "{got}");
        assert!((priced(&cost, &f.priced_work(), 2f64.ln()) - 2.0 * got).abs() < 1e-12);
        let none = Features::default();
        cost[0] = 0.0;
        assert_eq!(priced(&cost, &none.priced_work(), 0.0), FLOOR_S, "no work: the floor");
    }
}
