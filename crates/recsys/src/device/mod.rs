//! The in-storage device: its work (reads of a plan, pooled sums, RM-SSD's MLPs) in [`Device`],
//! which the engine calls in its own process or which a device emulator process serves over a
//! shared-memory channel (the MMIO/DMA link) — the same functions either way. The engine holds
//! either behind one trait, [`DeviceSide`]: where the drive's compute runs.
//!
//! | module | what it holds |
//! |---|---|
//! | `mod.rs` (here) | [`Device`], the in-process work; [`DeviceSide`]; what the host reports |
//! | `channel` | the shared memory: registers, payload areas, futex wait/wake |
//! | `wire` | encode/decode of the OPEN configuration, a batch's inputs and MLPs |
//! | `server` | the device's side: [`serve`] a channel until CLOSE, one request at a time |
//! | `link` | the host's side: [`DeviceLink`] starts the device (process or thread), pins its CPU, and calls it |
//!
//! The channel is one memfd mapped by both sides (the device opens `/proc/<host pid>/fd/<n>`):
//!
//! ```text
//! page 0  registers: magic, area size, request/response sequence words (futexes), request kind
//!         and arguments, response status, length and the device's stage times and counters
//! area 0  request payload (host → device): batch inputs, or the OPEN configuration
//! area 1  response payload (device → host): pooled sums, predictions, partial sums + vectors
//! ```
//!
//! Payloads are plain little-endian words. The host writes a request, stores its length, then
//! bumps the request sequence (release) and wakes the device's futex; the device answers in area
//! 1, stores the status, then sets the response sequence to the request's (release) and wakes the
//! host. Both sides spin briefly before sleeping on the futex; every host wait is bounded (the
//! reply timeout) and checks that the device process is still alive.
//!
//! What a batch moves through the areas is what the engine's `link_bytes` counts for
//! `emb-pagesum`, `emb-vectorsum` and `rm-ssd`: the inputs (dense, offsets, indices, as
//! `RM_send_inputs` sends them) and the pooled sums, or one float per sample for `rm-ssd`.
//! Registers (kind, batch size, status, times) are not counted, as MMIO register accesses are not.

mod channel;
mod link;
mod server;
mod wire;

pub use link::DeviceLink;
pub use server::serve;

use crate::error::{Error, Result};
use crate::extents::Extents;
use crate::flash::ReadKind;
use crate::mlp::Dlrm;
use crate::sls::{self, Bags, Granularity, ReadPlan};
use crate::table::{Table, TableMeta, PAGE};
use crate::timing::{IoCounters, Mode, Stages};
use crate::uring::DirectReader;
use std::collections::VecDeque;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

fn elapsed(t: Instant) -> f64 {
    t.elapsed().as_secs_f64()
}

// ---------------------------------------------------------------------------------------------
// The device's work, shared by the in-process path and the device process.

/// The device side over a model's table files: reads (O_DIRECT io_uring in `disk` mode, the
/// flash model's cycles plus the file's values in `flash` mode) and pooled sums.
pub struct Device {
    pub tables: Vec<Table>,
    pub metas: Vec<TableMeta>,
    pub extents: Vec<Extents>,
    pub mode: Mode,
    pub dim: usize,
    direct: Option<DirectReader>,
    /// rm-ssd batches sent ([`DeviceSide::rm_ssd_send`]) and not yet read: done at once in
    /// this process, their answers wait here in order.
    sent: VecDeque<(RmSsdOut, Stages, IoCounters)>,
}

/// RM-SSD's answer for a batch: predictions and the measured MLP times.
pub struct RmSsdOut {
    pub predictions: Vec<f32>,
    pub bot_s: f64,
    pub top_s: f64,
}

/// The unique (table, row) pairs of RecSSD's misses, sorted: the vectors the device returns.
pub fn fresh_of(misses: &[(usize, u64, usize)]) -> Vec<(usize, u64)> {
    let mut fresh: Vec<(usize, u64)> = misses.iter().map(|&(t, r, _)| (t, r)).collect();
    fresh.sort_unstable();
    fresh.dedup();
    fresh
}

/// Checks the checksum block of every row a unit was read for (the block lies inside the unit:
/// units are whole sectors or pages holding the row, blocks a sector or a row).
fn check_unit(tables: &[Table], plan: &ReadPlan, u: usize, bytes: &[u8]) -> Result<()> {
    let unit = plan.units[u];
    let uses = &plan.uses[plan.first_use[u] as usize..plan.first_use[u + 1] as usize];
    tables[unit.table as usize].check_rows_in(unit.offset, bytes, uses.iter().map(|x| x.at))
}

impl Device {
    pub fn open(paths: &[PathBuf], dim: usize, mode: Mode, queue_depth: usize) -> Result<Device> {
        let mut tables = Vec::with_capacity(paths.len());
        for p in paths {
            let t = Table::open(p)?;
            if t.meta.dim as usize != dim {
                return Err(Error::Shape(format!("{}: dim {} but the model's is {dim}", p.display(), t.meta.dim)));
            }
            tables.push(t);
        }
        let metas: Vec<TableMeta> = tables.iter().map(|t| t.meta).collect();
        let extents = tables.iter().map(|t| Extents::of(&t.file, t.meta.file_bytes())).collect();
        let direct = if mode == Mode::Disk {
            let ps: Vec<&Path> = tables.iter().map(|t| t.path.as_path()).collect();
            let max_row = metas.iter().map(|m| m.row_bytes as usize).max().unwrap_or(0);
            Some(DirectReader::open(&ps, queue_depth, max_row.div_ceil(4096) * 4096 + 4096)?)
        } else {
            None
        };
        Ok(Device { tables, metas, extents, mode, dim, direct, sent: VecDeque::new() })
    }

    /// Device reads of a plan and the pooled sums; `on_host` marks emb-mmio, whose sums the host
    /// does on the pages shipped to it.
    pub fn sums(
        &mut self,
        plan: &ReadPlan,
        pooled: &mut [f32],
        st: &mut Stages,
        io: &mut IoCounters,
        on_host: bool,
    ) -> Result<()> {
        self.sums_keeping(plan, pooled, st, io, on_host, |_, _| {})
    }

    /// `sums`, and `keep(unit, bytes)` sees each unit's bytes as they arrive (RecSSD takes the
    /// missed vectors from the pages it read anyway).
    fn sums_keeping(
        &mut self,
        plan: &ReadPlan,
        pooled: &mut [f32],
        st: &mut Stages,
        io: &mut IoCounters,
        on_host: bool,
        mut keep: impl FnMut(usize, &[u8]),
    ) -> Result<()> {
        let d = self.dim;
        io.media_reads += plan.units.len() as u64;
        match self.mode {
            Mode::Disk => {
                io.media_bytes += plan.media_bytes();
                let t0 = Instant::now();
                let mut sum_s = 0.0;
                let reader = self.direct.as_mut().expect("opened in disk mode");
                let tables = &self.tables;
                let mut damaged = None;
                reader.read_plan(plan, |u, bytes| {
                    let t1 = Instant::now();
                    if damaged.is_none() {
                        damaged = check_unit(tables, plan, u, bytes).err();
                    }
                    plan.scatter(u, bytes, d, pooled);
                    sum_s += elapsed(t1);
                    keep(u, bytes);
                })?;
                if let Some(e) = damaged {
                    return Err(e);
                }
                let total = elapsed(t0);
                st.emb_ssd += total - sum_s;
                if on_host {
                    st.emb_op += sum_s;
                } else {
                    st.emb_ssd += sum_s;
                }
            }
            Mode::Flash(m) => {
                let kind = |len: u32| if len as u64 >= PAGE { ReadKind::Page } else { ReadKind::Vector(d as u32 * 4) };
                let cycles = m.device_read_cycles(
                    plan.units.iter().map(|u| (self.extents[u.table as usize].translate(u.offset), kind(u.len))),
                );
                io.media_bytes += plan
                    .units
                    .iter()
                    .map(|u| if u.len as u64 >= PAGE { u64::from(u.len) } else { d as u64 * 4 })
                    .sum::<u64>();
                st.emb_ssd += m.seconds(cycles);
                // Reading the values is the emulator's bookkeeping, not timed. An FPGA sums as
                // vectors stream in, so in-device sums add no time; emb-mmio's host sums are
                // measured.
                let mut buf = vec![0u8; PAGE as usize * 2];
                let mut sum_s = 0.0;
                for (i, u) in plan.units.iter().enumerate() {
                    let b = &mut buf[..u.len as usize];
                    let t = &self.tables[u.table as usize];
                    t.file.read_exact_at(b, u.offset).map_err(|e| Error::io(&t.path, "pread", e))?;
                    let t1 = Instant::now();
                    check_unit(&self.tables, plan, i, b)?;
                    plan.scatter(i, b, d, pooled);
                    sum_s += elapsed(t1);
                    keep(i, b);
                }
                if on_host {
                    st.emb_op += sum_s;
                }
            }
        }
        Ok(())
    }

    /// The pooled sums of a batch's bags at a granularity.
    pub fn bag_sums(
        &mut self,
        gran: Granularity,
        on_host: bool,
        bags: &[Bags<'_>],
        pooled: &mut [f32],
        st: &mut Stages,
        io: &mut IoCounters,
    ) -> Result<()> {
        let plan = ReadPlan::new(&self.metas, gran, sls::lookups(bags));
        self.sums(&plan, pooled, st, io, on_host)
    }

    /// RM-SSD: vector-granular sums, the bottom MLP and the decomposed top MLP, all in the
    /// device.
    pub fn rm_ssd(
        &mut self,
        model: &Dlrm,
        dense: &[f32],
        bags: &[Bags<'_>],
        rows: usize,
        st: &mut Stages,
        io: &mut IoCounters,
    ) -> Result<RmSsdOut> {
        let mut pooled = vec![0f32; rows * model.tables * model.dim];
        model.check_batch(dense, &pooled, rows)?;
        self.bag_sums(Granularity::Vector, false, bags, &mut pooled, st, io)?;
        let t0 = Instant::now();
        let _ = model.bottom_forward(dense, rows);
        let bot_s = elapsed(t0);
        let t0 = Instant::now();
        let predictions = model.forward_decomposed(dense, &pooled, rows)?;
        Ok(RmSsdOut { predictions, bot_s, top_s: elapsed(t0) })
    }

    /// RecSSD's misses, (table, row, slot): page-granular partial sums into `partial`, and the
    /// missed vectors (the order of [`fresh_of`]) for the host's cache.
    pub fn recssd_misses(
        &mut self,
        misses: &[(usize, u64, usize)],
        partial: &mut [f32],
        st: &mut Stages,
        io: &mut IoCounters,
    ) -> Result<Vec<Vec<f32>>> {
        let plan = ReadPlan::new(&self.metas, Granularity::Page, misses.iter().copied());
        // The missed vectors go back too, cut from the pages read for the sums: for each unit,
        // which fresh vectors it holds and where.
        let fresh = fresh_of(misses);
        let mut by_unit: Vec<Vec<(usize, usize)>> = vec![Vec::new(); plan.units.len()];
        for (i, &(t, row)) in fresh.iter().enumerate() {
            let off = self.metas[t].row_offset(row);
            let u = plan.units.partition_point(|u| (u.table as usize, u.offset) <= (t, off)) - 1;
            by_unit[u].push((i, (off - plan.units[u].offset) as usize));
        }
        let d = self.dim;
        let mut vectors = vec![vec![0f32; d]; fresh.len()];
        self.sums_keeping(&plan, partial, st, io, false, |u, bytes| {
            for &(i, at) in &by_unit[u] {
                crate::table::add_row(&bytes[at..at + d * 4], &mut vectors[i]);
            }
        })?;
        Ok(vectors)
    }
}

// ---------------------------------------------------------------------------------------------
// Where the drive's compute runs.

/// Where the drive's compute runs: in this process ([`Device`]) or behind the channel
/// ([`DeviceLink`]). The engine holds one and calls the same operations either way, so answers
/// and counters do not depend on where the device is; the stages say where time went.
pub trait DeviceSide: Send + Sync {
    /// The pooled sums of a batch's bags at a granularity, added into `pooled`; `on_host` marks
    /// emb-mmio, whose sums the host does on the pages shipped to it (never behind a channel).
    #[allow(clippy::too_many_arguments)]
    fn bag_sums(
        &mut self,
        gran: Granularity,
        on_host: bool,
        dense: &[f32],
        bags: &[Bags<'_>],
        rows: usize,
        pooled: &mut [f32],
        st: &mut Stages,
        io: &mut IoCounters,
    ) -> Result<()>;

    /// RM-SSD: vector-granular sums, the bottom MLP and the decomposed top MLP, in the device.
    fn rm_ssd(
        &mut self,
        model: &Dlrm,
        dense: &[f32],
        bags: &[Bags<'_>],
        rows: usize,
        st: &mut Stages,
        io: &mut IoCounters,
    ) -> Result<RmSsdOut>;

    /// `RM_send_inputs`: the device starts on the batch; its answer is read by `rm_ssd_read`, in
    /// order.
    fn rm_ssd_send(&mut self, model: &Dlrm, dense: &[f32], bags: &[Bags<'_>], rows: usize) -> Result<()>;

    /// `RM_read_outputs`: the answer to the oldest batch sent, its stages and counters added.
    fn rm_ssd_read(&mut self, st: &mut Stages, io: &mut IoCounters) -> Result<RmSsdOut>;

    /// RecSSD's misses, (table, row, slot): page-granular partial sums added into `partial`,
    /// and the missed vectors (the order of [`fresh_of`]) for the host's cache.
    fn recssd_misses(
        &mut self,
        misses: &[(usize, u64, usize)],
        rows: usize,
        partial: &mut [f32],
        st: &mut Stages,
        io: &mut IoCounters,
    ) -> Result<Vec<Vec<f32>>>;

    /// Whether the device is behind the channel (a process or a thread), not in this process.
    fn behind_channel(&self) -> bool;

    /// Where the device runs and what it was given (pid, CPU, or why not).
    fn info(&self) -> DeviceInfo;

    /// Payload bytes batches moved through the channel (zero in this process).
    fn channel_bytes(&self) -> ChannelBytes {
        ChannelBytes::default()
    }

    /// The device process's id, where it has its own.
    fn child_pid(&self) -> Option<u32> {
        None
    }

    /// Stops the device (a process is asked to close, then killed if it does not).
    fn close(&mut self) {}
}

impl DeviceSide for Device {
    fn bag_sums(
        &mut self,
        gran: Granularity,
        on_host: bool,
        _dense: &[f32],
        bags: &[Bags<'_>],
        _rows: usize,
        pooled: &mut [f32],
        st: &mut Stages,
        io: &mut IoCounters,
    ) -> Result<()> {
        Device::bag_sums(self, gran, on_host, bags, pooled, st, io)
    }

    fn rm_ssd(
        &mut self,
        model: &Dlrm,
        dense: &[f32],
        bags: &[Bags<'_>],
        rows: usize,
        st: &mut Stages,
        io: &mut IoCounters,
    ) -> Result<RmSsdOut> {
        Device::rm_ssd(self, model, dense, bags, rows, st, io)
    }

    /// In this process the batch is done at once; its answer waits for `rm_ssd_read`.
    fn rm_ssd_send(&mut self, model: &Dlrm, dense: &[f32], bags: &[Bags<'_>], rows: usize) -> Result<()> {
        let (mut st, mut io) = (Stages::default(), IoCounters::default());
        let out = Device::rm_ssd(self, model, dense, bags, rows, &mut st, &mut io)?;
        self.sent.push_back((out, st, io));
        Ok(())
    }

    fn rm_ssd_read(&mut self, st: &mut Stages, io: &mut IoCounters) -> Result<RmSsdOut> {
        let (out, s, i) =
            self.sent.pop_front().ok_or_else(|| Error::Device("no batch was sent to read outputs of".into()))?;
        st.add(&s);
        io.add(&i);
        Ok(out)
    }

    fn recssd_misses(
        &mut self,
        misses: &[(usize, u64, usize)],
        _rows: usize,
        partial: &mut [f32],
        st: &mut Stages,
        io: &mut IoCounters,
    ) -> Result<Vec<Vec<f32>>> {
        Device::recssd_misses(self, misses, partial, st, io)
    }

    fn behind_channel(&self) -> bool {
        false
    }

    fn info(&self) -> DeviceInfo {
        DeviceInfo::in_process()
    }
}

// ---------------------------------------------------------------------------------------------
// What the host asks for and reports.

/// Where the device side runs.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum DeviceAt {
    /// In the engine's process (the device functions are called directly).
    #[default]
    InProcess,
    /// Its own process: `command` followed by the channel's path, on CPU `cpu` (default: the
    /// last CPU this process may use). `timeout_s` bounds every wait for an answer. A memory
    /// budget is the command's business: `python -m offload.recsys.device` joins the memory
    /// cgroup its options name (made by `offload.host.cgroups`, the one home of cgroup code).
    Process { command: Vec<String>, cpu: Option<usize>, timeout_s: f64 },
    /// A thread of this process serving the same channel (tests: the process's code path
    /// without spawning one).
    Thread { timeout_s: f64 },
}

/// Bytes of each payload area of a channel (tmpfs pages are only used when touched).
pub const DEFAULT_AREA_BYTES: usize = 64 << 20;

/// What the host applied to the device (reported by the engine).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct DeviceInfo {
    pub at: String,
    pub pid: Option<u32>,
    pub command: Vec<String>,
    pub channel: String,
    pub area_bytes: usize,
    pub cpu: Option<usize>,
    /// Why the CPU could not be set, where it could not.
    pub cpu_reason: Option<String>,
}

impl DeviceInfo {
    /// A device in this process: this process's id, nothing applied.
    pub fn in_process() -> DeviceInfo {
        DeviceInfo { at: "in-process".into(), pid: Some(std::process::id()), ..DeviceInfo::default() }
    }
}

/// Payload bytes moved through the channel by batch requests (OPEN and CLOSE not counted).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ChannelBytes {
    pub to_device: u64,
    pub from_device: u64,
}
