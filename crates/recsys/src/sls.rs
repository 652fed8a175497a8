//! SparseLengthSum over a batch: validation of EmbeddingBag inputs (offsets + indices per
//! table), the read plan (which aligned units of which files hold the rows), and the pooled sums
//! scattered from whatever reads the units.
//!
//! Output layout everywhere: `pooled[(sample * tables + table) * dim + k]`.

use crate::error::{Error, Result};
use crate::table::TableMeta;

/// One table's inputs for a batch, as PyTorch's EmbeddingBag takes them: bag `b` is
/// `indices[offsets[b]..offsets[b + 1]]`.
#[derive(Debug, Clone, Copy)]
pub struct Bags<'a> {
    pub offsets: &'a [i64],
    pub indices: &'a [i64],
}

/// Checks one table's bags: `batch + 1` offsets, starting at 0, never decreasing, ending at
/// `indices.len()`, and every index in `[0, rows)`. The error names the table and position.
pub fn validate(table: usize, rows: u64, batch: usize, bags: Bags<'_>) -> Result<()> {
    let bad = |what, position, problem: String| Error::BadInput { table, what, position, problem };
    let o = bags.offsets;
    if o.len() != batch + 1 {
        return Err(bad(
            "offsets",
            o.len().min(batch),
            format!("{} offsets for a batch of {batch} (need batch + 1)", o.len()),
        ));
    }
    if o[0] != 0 {
        return Err(bad("offsets", 0, format!("is {}, must be 0", o[0])));
    }
    for (i, w) in o.windows(2).enumerate() {
        if w[1] < w[0] {
            return Err(bad("offsets", i + 1, format!("{} after {}: offsets must not decrease", w[1], w[0])));
        }
    }
    let last = o[batch];
    if last != bags.indices.len() as i64 {
        return Err(bad(
            "offsets",
            batch,
            format!("is {last}, must equal the number of indices ({})", bags.indices.len()),
        ));
    }
    for (i, &ix) in bags.indices.iter().enumerate() {
        if ix < 0 || ix as u64 >= rows {
            return Err(bad("indices", i, format!("row {ix} out of range for a table of {rows} rows")));
        }
    }
    Ok(())
}

/// Validates all tables of a batch against their metadata.
pub fn validate_all(metas: &[TableMeta], batch: usize, bags: &[Bags<'_>]) -> Result<()> {
    if bags.len() != metas.len() {
        return Err(Error::Shape(format!("inputs for {} tables, the model has {}", bags.len(), metas.len())));
    }
    for (t, (m, b)) in metas.iter().zip(bags).enumerate() {
        validate(t, m.rows, batch, *b)?;
    }
    Ok(())
}

/// The bag each index belongs to, for one table (`offsets` already validated).
pub fn bag_of_each(offsets: &[i64]) -> impl Iterator<Item = usize> + '_ {
    offsets.windows(2).enumerate().flat_map(|(b, w)| std::iter::repeat_n(b, (w[1] - w[0]) as usize))
}

/// Read granularity on the media.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Granularity {
    /// 4 KiB pages (a conventional SSD, the page cache).
    Page,
    /// The smallest aligned unit holding the vector: 512 B sectors here (the seed's device reads
    /// exactly EV_size from the flash page buffer; its flash timing uses the vector size).
    Vector,
}

impl Granularity {
    pub fn unit(self) -> u64 {
        match self {
            Granularity::Page => crate::table::PAGE,
            Granularity::Vector => crate::table::SECTOR,
        }
    }
}

/// An aligned byte range of one table file that must be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Unit {
    pub table: u32,
    pub offset: u64,
    pub len: u32,
}

/// One lookup's place: which unit holds it, where in the unit, which (sample, table) sum it feeds.
#[derive(Debug, Clone, Copy)]
pub struct Use {
    pub unit: u32,
    pub at: u32,
    pub slot: u32,
}

/// The reads a batch needs: each unit once (sorted by table and offset, as RecSSD sorts ids so
/// that each page is read once for all the ids on it), and the uses of each unit.
#[derive(Debug, Default)]
pub struct ReadPlan {
    pub units: Vec<Unit>,
    /// Uses grouped by unit: `uses[first_use[u]..first_use[u + 1]]`.
    pub uses: Vec<Use>,
    pub first_use: Vec<u32>,
    /// Lookups planned (`uses.len()`).
    pub lookups: u64,
}

impl ReadPlan {
    /// Plans the reads for `lookups` = (table, row, slot) triples.
    pub fn new(metas: &[TableMeta], gran: Granularity, lookups: impl Iterator<Item = (usize, u64, usize)>) -> ReadPlan {
        let unit = gran.unit();
        let mut keyed: Vec<(Unit, u32, u32)> = lookups
            .map(|(t, row, slot)| {
                let m = &metas[t];
                let start = m.row_offset(row);
                let end = start + u64::from(m.vector_bytes());
                let lo = start / unit * unit;
                let hi = end.div_ceil(unit) * unit;
                (Unit { table: t as u32, offset: lo, len: (hi - lo) as u32 }, (start - lo) as u32, slot as u32)
            })
            .collect();
        keyed.sort_unstable_by_key(|k| (k.0, k.2));
        let mut plan = ReadPlan { lookups: keyed.len() as u64, ..ReadPlan::default() };
        for (u, at, slot) in keyed {
            if plan.units.last() != Some(&u) {
                plan.first_use.push(plan.uses.len() as u32);
                plan.units.push(u);
            }
            plan.uses.push(Use { unit: (plan.units.len() - 1) as u32, at, slot });
        }
        plan.first_use.push(plan.uses.len() as u32);
        plan
    }

    /// Bytes the plan reads from the media.
    pub fn media_bytes(&self) -> u64 {
        self.units.iter().map(|u| u64::from(u.len)).sum()
    }

    /// Adds unit `u`'s rows into their sums (`pooled` as in the module doc).
    /// All tables of a model share `dim` (the `cat` interaction needs it).
    pub fn scatter(&self, u: usize, bytes: &[u8], dim: usize, pooled: &mut [f32]) {
        let d = dim;
        for used in &self.uses[self.first_use[u] as usize..self.first_use[u + 1] as usize] {
            let at = used.at as usize;
            let slot = used.slot as usize;
            crate::table::add_row(&bytes[at..at + d * 4], &mut pooled[slot * d..slot * d + d]);
        }
    }
}

/// All lookups of a batch as (table, row, slot), slot = sample * tables + table.
pub fn lookups<'a>(bags: &'a [Bags<'a>]) -> impl Iterator<Item = (usize, u64, usize)> + 'a {
    let tables = bags.len();
    bags.iter().enumerate().flat_map(move |(t, b)| {
        bag_of_each(b.offsets).zip(b.indices).map(move |(s, &row)| (t, row as u64, s * tables + t))
    })
}

/// Pooled sums from tables held in memory (`dram`), rows packed to `dim`.
pub fn sum_in_memory(tables: &[Vec<f32>], dim: usize, bags: &[Bags<'_>], pooled: &mut [f32]) {
    pooled.fill(0.0);
    let nt = tables.len();
    for (t, b) in bags.iter().enumerate() {
        for (s, &row) in bag_of_each(b.offsets).zip(b.indices) {
            let src = &tables[t][row as usize * dim..row as usize * dim + dim];
            let acc = &mut pooled[(s * nt + t) * dim..(s * nt + t) * dim + dim];
            acc.iter_mut().zip(src).for_each(|(a, v)| *a += v);
        }
    }
}
