//! The in-storage device: its work (reads of a plan, pooled sums, RM-SSD's MLPs) in [`Device`],
//! which the engine calls in its own process or which a device emulator process serves over a
//! shared-memory channel (the MMIO/DMA link) — the same functions either way.
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

use crate::engine::{IoCounters, Mode, Stages};
use crate::error::{Error, Result};
use crate::extents::Extents;
use crate::flash::{FlashModel, ReadKind};
use crate::mlp::{Dlrm, Linear, Mlp};
use crate::sls::{self, Bags, Granularity, ReadPlan};
use crate::table::{Table, TableMeta, PAGE};
use crate::uring::DirectReader;
use memmap2::MmapMut;
use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::FileExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

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
        Ok(Device { tables, metas, extents, mode, dim, direct })
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
// The shared-memory channel.

const MAGIC: u64 = u64::from_le_bytes(*b"OFLDDEV1");
const HEADER: usize = 4096;

// Register byte offsets in page 0 (u64 unless said otherwise).
const R_MAGIC: usize = 0;
const R_AREA: usize = 8;
const R_REQ_SEQ: usize = 16; // u32, futex
const R_RESP_SEQ: usize = 20; // u32, futex
const R_KIND: usize = 24;
const R_ROWS: usize = 32;
const R_ARG: usize = 40;
const R_DENSE: usize = 48;
const R_REQ_LEN: usize = 56;
const R_STATUS: usize = 64;
const R_RESP_LEN: usize = 72;
const R_EMB_SSD: usize = 80; // f64 bits
const R_EMB_OP: usize = 88; // f64 bits
const R_BOT: usize = 96; // f64 bits
const R_TOP: usize = 104; // f64 bits
const R_MEDIA_READS: usize = 112;
const R_MEDIA_BYTES: usize = 120;
const R_DEVICE_PID: usize = 128;
const R_HOST_PID: usize = 136;
const R_CLOSED: usize = 144;

const K_OPEN: u64 = 1;
const K_SUMS: u64 = 2;
const K_RMSSD: u64 = 3;
const K_RECSSD: u64 = 4;
const K_CLOSE: u64 = 5;

/// Spins before sleeping on a futex (a device answer often comes within microseconds).
const SPINS: u32 = 20_000;

/// One side's mapping of the channel.
struct Channel {
    /// Keeps the mapping alive; every access goes through `base`.
    _map: MmapMut,
    base: *mut u8,
    /// Bytes of one slot's payload area (each direction).
    area: usize,
    /// The slot (0 or 1) that per-slot registers and the payload areas refer to. Two requests
    /// may be in flight — rm-ssd sends the next batch's inputs before reading this one's
    /// outputs — so each has its own registers and areas; request n uses slot n mod 2.
    slot: usize,
}

/// Per-slot registers lie in [SLOT_FIRST, SLOT_END); slot 1's copies are SLOT_STRIDE above.
const SLOT_FIRST: usize = 24;
const SLOT_END: usize = 128;
const SLOT_STRIDE: usize = 2048;

// SAFETY: `Channel` owns its mapping (`_map`); `base` points into it and is only dereferenced
// through `&self` (atomic registers) or `&mut self` (the payload areas), so moving the channel
// to another thread moves the only handle to those bytes in this process.
unsafe impl Send for Channel {}
// SAFETY: through `&self` only the registers are reached, and only atomically; the payload
// areas need `&mut self`. Sharing `&Channel` between threads is therefore race-free.
unsafe impl Sync for Channel {}

impl Channel {
    fn map(file: &File) -> Result<Channel> {
        // SAFETY: the file is a memfd (or the same memfd reached through /proc) that only the
        // host and its device map; neither truncates it while mapped (its size is set once,
        // before the device is started). Concurrent access is ordered by the protocol below.
        let mut map = unsafe { MmapMut::map_mut(file) }.map_err(|e| Error::io("device channel", "mmap", e))?;
        if map.len() < HEADER {
            return Err(Error::Device(format!("the channel is {} bytes, smaller than its registers", map.len())));
        }
        let base = map.as_mut_ptr();
        let area = (map.len() - HEADER) / 4;
        Ok(Channel { _map: map, base, area, slot: 0 })
    }

    fn u64_at(&self, off: usize) -> &AtomicU64 {
        let off = if (SLOT_FIRST..SLOT_END).contains(&off) { off + self.slot * SLOT_STRIDE } else { off };
        debug_assert!(off.is_multiple_of(8) && off + 8 <= HEADER);
        // SAFETY: `off` is a register offset below HEADER, 8-aligned within a page-aligned
        // mapping, which lives as long as `self`. Every access to registers, in both processes,
        // is atomic, so the shared reference to an atomic is sound.
        unsafe { &*(self.base.add(off) as *const AtomicU64) }
    }

    fn u32_at(&self, off: usize) -> &AtomicU32 {
        debug_assert!(off.is_multiple_of(4) && off + 4 <= HEADER);
        // SAFETY: as in `u64_at`, for a 4-aligned 32-bit register.
        unsafe { &*(self.base.add(off) as *const AtomicU32) }
    }

    fn get(&self, off: usize) -> u64 {
        self.u64_at(off).load(Ordering::Relaxed)
    }
    fn set(&self, off: usize, v: u64) {
        self.u64_at(off).store(v, Ordering::Relaxed)
    }
    fn getf(&self, off: usize) -> f64 {
        f64::from_bits(self.get(off))
    }
    fn setf(&self, off: usize, v: f64) {
        self.set(off, v.to_bits())
    }

    /// The current slot's (request area, response area). The host writes the first and reads
    /// the second, the device the other way round, each only while the protocol hands the area
    /// to it. Layout after the registers: request areas of slots 0 and 1, then response areas.
    fn areas(&mut self) -> (&mut [u8], &mut [u8]) {
        let (req, resp) = (HEADER + self.slot * self.area, HEADER + (2 + self.slot) * self.area);
        // SAFETY: both areas lie inside the mapping (HEADER + 4·area ≤ its length) and do not
        // overlap (distinct quarters). `&mut self` makes these the only references in this process; the other side
        // touches an area only when the sequence protocol hands it over (the host writes the
        // request and reads the response only between its release of the request sequence and
        // its acquire of the response sequence, the device the other way round).
        unsafe {
            (
                std::slice::from_raw_parts_mut(self.base.add(req), self.area),
                std::slice::from_raw_parts_mut(self.base.add(resp), self.area),
            )
        }
    }
}

fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec { tv_sec: timeout.as_secs() as libc::time_t, tv_nsec: timeout.subsec_nanos() as _ };
    // SAFETY: FUTEX_WAIT reads the aligned 32-bit word `word` points to (alive for the call) and
    // `ts`, a valid timespec on this stack; it writes nothing. A shared (not private) futex,
    // since the word is in a mapping shared between processes. Errors (EAGAIN when the word
    // already changed, EINTR, ETIMEDOUT) all mean "look again", which every caller does.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

fn futex_wake(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE only uses the word's address as a key; it reads and writes no memory.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            std::ptr::null::<u32>(),
            0usize,
            0u32,
        );
    }
}

/// Little-endian writer over a payload area.
struct Writer<'a> {
    buf: &'a mut [u8],
    at: usize,
}

impl Writer<'_> {
    fn bytes(&mut self, b: &[u8]) -> Result<()> {
        let end = self.at + b.len();
        if end > self.buf.len() {
            return Err(Error::Device(format!(
                "a message of more than {} bytes does not fit the channel's {} B area; open the engine with a \
                 larger channel",
                end,
                self.buf.len()
            )));
        }
        self.buf[self.at..end].copy_from_slice(b);
        self.at = end;
        Ok(())
    }
    fn u64(&mut self, v: u64) -> Result<()> {
        self.bytes(&v.to_le_bytes())
    }
    fn f64(&mut self, v: f64) -> Result<()> {
        self.bytes(&v.to_le_bytes())
    }
    fn f32s(&mut self, v: &[f32]) -> Result<()> {
        self.words(v.iter().map(|x| x.to_le_bytes()))
    }
    fn i64s(&mut self, v: &[i64]) -> Result<()> {
        self.words(v.iter().map(|x| x.to_le_bytes()))
    }
    /// Fixed-size little-endian words, one after the other.
    fn words<const N: usize>(&mut self, v: impl ExactSizeIterator<Item = [u8; N]>) -> Result<()> {
        let n = v.len() * N;
        self.room(n)?;
        for (c, x) in self.buf[self.at..self.at + n].chunks_exact_mut(N).zip(v) {
            c.copy_from_slice(&x);
        }
        self.at += n;
        Ok(())
    }
    fn room(&self, n: usize) -> Result<()> {
        if self.at + n > self.buf.len() {
            return Err(Error::Device(format!(
                "a message of more than {} bytes does not fit the channel's {} B area; open the engine with a \
                 larger channel",
                self.at + n,
                self.buf.len()
            )));
        }
        Ok(())
    }
}

/// Little-endian reader over a payload area; running past the end is a malformed message.
struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.buf.len()).ok_or_else(|| {
            Error::Device(format!("malformed message: {n} more bytes wanted at byte {} of {}", self.at, self.buf.len()))
        })?;
        let s = &self.buf[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    fn usize(&mut self) -> Result<usize> {
        let v = self.u64()?;
        usize::try_from(v).map_err(|_| Error::Device(format!("malformed message: count {v}")))
    }
    fn f64(&mut self) -> Result<f64> {
        Ok(f64::from_bits(self.u64()?))
    }
    fn f32s(&mut self, n: usize) -> Result<Vec<f32>> {
        Ok(self.words(n)?.map(f32::from_le_bytes).collect())
    }
    fn i64s(&mut self, n: usize) -> Result<Vec<i64>> {
        Ok(self.words(n)?.map(i64::from_le_bytes).collect())
    }
    /// `n` fixed-size little-endian words.
    fn words<const N: usize>(&mut self, n: usize) -> Result<impl Iterator<Item = [u8; N]> + 'a> {
        let b = self.take(n.checked_mul(N).ok_or_else(|| Error::Device("malformed message".into()))?)?;
        Ok(b.chunks_exact(N).map(|c| c.try_into().expect("N bytes")))
    }
}

fn write_mlp(w: &mut Writer<'_>, m: &Mlp) -> Result<()> {
    w.u64(m.layers.len() as u64)?;
    for l in &m.layers {
        w.u64(l.inputs as u64)?;
        w.u64(l.outputs as u64)?;
        w.f32s(&l.weight)?;
        w.f32s(&l.bias)?;
    }
    Ok(())
}

fn read_mlp(r: &mut Reader<'_>) -> Result<Mlp> {
    let n = r.usize()?;
    let mut layers = Vec::new();
    for _ in 0..n {
        let (i, o) = (r.usize()?, r.usize()?);
        let w = r.f32s(i.checked_mul(o).ok_or_else(|| Error::Device("malformed layer".into()))?)?;
        let b = r.f32s(o)?;
        layers.push(Linear::new(i, o, w, b)?);
    }
    Mlp::new(layers)
}

/// The OPEN request: what the device needs to serve a model's tables.
struct OpenConfig {
    paths: Vec<PathBuf>,
    dim: usize,
    mode: Mode,
    queue_depth: usize,
    model: Option<Dlrm>,
}

fn write_open(w: &mut Writer<'_>, c: &OpenConfig) -> Result<()> {
    match c.mode {
        Mode::Disk => w.u64(0)?,
        Mode::Flash(m) => {
            w.u64(1)?;
            for v in [
                f64::from(m.channels),
                f64::from(m.page_bytes),
                m.t_page_us,
                m.flush_fraction,
                m.host_iops_4k,
                m.clock_mhz,
                m.link_bytes_per_s,
                m.doorbell_us,
            ] {
                w.f64(v)?;
            }
        }
    }
    w.u64(c.queue_depth as u64)?;
    w.u64(c.dim as u64)?;
    w.u64(c.paths.len() as u64)?;
    for p in &c.paths {
        let b = p.as_os_str().as_encoded_bytes();
        w.u64(b.len() as u64)?;
        w.bytes(b)?;
    }
    match &c.model {
        None => w.u64(0)?,
        Some(m) => {
            w.u64(1)?;
            w.u64(m.dense_width as u64)?;
            w.u64(m.tables as u64)?;
            w.u64(m.dim as u64)?;
            write_mlp(w, &m.bottom)?;
            write_mlp(w, &m.top)?;
        }
    }
    Ok(())
}

fn read_open(r: &mut Reader<'_>) -> Result<OpenConfig> {
    let mode = match r.u64()? {
        0 => Mode::Disk,
        1 => {
            let mut v = [0f64; 8];
            for x in &mut v {
                *x = r.f64()?;
            }
            Mode::Flash(FlashModel {
                channels: v[0] as u32,
                page_bytes: v[1] as u32,
                t_page_us: v[2],
                flush_fraction: v[3],
                host_iops_4k: v[4],
                clock_mhz: v[5],
                link_bytes_per_s: v[6],
                doorbell_us: v[7],
            })
        }
        m => return Err(Error::Device(format!("malformed OPEN: mode {m}"))),
    };
    let queue_depth = r.usize()?;
    let dim = r.usize()?;
    let n = r.usize()?;
    let mut paths = Vec::new();
    for _ in 0..n {
        let len = r.usize()?;
        let b = r.take(len)?;
        let s = std::str::from_utf8(b).map_err(|_| Error::Device("malformed OPEN: a path is not UTF-8".into()))?;
        paths.push(PathBuf::from(s));
    }
    let model = match r.u64()? {
        0 => None,
        _ => {
            let (dw, tables, d) = (r.usize()?, r.usize()?, r.usize()?);
            let bottom = read_mlp(r)?;
            let top = read_mlp(r)?;
            Some(Dlrm::new(dw, bottom, top, tables, d)?)
        }
    };
    Ok(OpenConfig { paths, dim, mode, queue_depth, model })
}

/// Writes a batch's inputs: dense, then per table its offsets and indices.
fn write_inputs(w: &mut Writer<'_>, dense: &[f32], bags: &[Bags<'_>]) -> Result<()> {
    w.f32s(dense)?;
    for b in bags {
        w.i64s(b.offsets)?;
        w.i64s(b.indices)?;
    }
    Ok(())
}

type Inputs = (Vec<f32>, Vec<(Vec<i64>, Vec<i64>)>);

fn read_inputs(r: &mut Reader<'_>, dense_len: usize, rows: usize, tables: usize) -> Result<Inputs> {
    let dense = r.f32s(dense_len)?;
    let mut bags = Vec::with_capacity(tables);
    for t in 0..tables {
        let offsets = r.i64s(rows.checked_add(1).ok_or_else(|| Error::Device("malformed batch".into()))?)?;
        let n = *offsets.last().expect("rows + 1 ≥ 1");
        let n =
            usize::try_from(n).map_err(|_| Error::Device(format!("malformed batch: table {t} ends at offset {n}")))?;
        bags.push((offsets, r.i64s(n)?));
    }
    Ok((dense, bags))
}

// ---------------------------------------------------------------------------------------------
// The device's side: serve requests until CLOSE.

struct Served {
    dev: Device,
    model: Option<Dlrm>,
}

/// What a handled request reports in the registers besides its payload.
#[derive(Default)]
struct Report {
    len: usize,
    st: Stages,
    io: IoCounters,
    bot_s: f64,
    top_s: f64,
}

fn handle(kind: u64, regs: [u64; 3], req: &[u8], resp: &mut [u8], state: &mut Option<Served>) -> Result<Report> {
    let [rows, arg, dense_len] = regs;
    let rows = usize::try_from(rows).map_err(|_| Error::Device("malformed batch size".into()))?;
    let mut r = Reader { buf: req, at: 0 };
    let mut w = Writer { buf: resp, at: 0 };
    let mut rep = Report::default();
    if kind == K_OPEN {
        let c = read_open(&mut r)?;
        let dev = Device::open(&c.paths, c.dim, c.mode, c.queue_depth)?;
        *state = Some(Served { dev, model: c.model });
        return Ok(rep);
    }
    if kind == K_CLOSE {
        *state = None;
        return Ok(rep);
    }
    let s = state.as_mut().ok_or_else(|| Error::Device(format!("request {kind} before OPEN")))?;
    let (nt, d) = (s.dev.tables.len(), s.dev.dim);
    let pooled_len = rows.checked_mul(nt * d).ok_or_else(|| Error::Device("malformed batch size".into()))?;
    if pooled_len.saturating_mul(4) > w.buf.len() {
        return Err(Error::Device(format!(
            "sums of a batch of {rows} ({} B) do not fit the channel's {} B area; open the engine with a larger channel",
            pooled_len.saturating_mul(4),
            w.buf.len()
        )));
    }
    match kind {
        K_SUMS | K_RMSSD => {
            let (dense, owned) = read_inputs(&mut r, dense_len as usize, rows, nt)?;
            let bags: Vec<Bags<'_>> = owned.iter().map(|(o, i)| Bags { offsets: o, indices: i }).collect();
            sls::validate_all(&s.dev.metas, rows, &bags)?;
            if kind == K_SUMS {
                let gran = if arg == 1 { Granularity::Vector } else { Granularity::Page };
                let mut pooled = vec![0f32; pooled_len];
                s.dev.bag_sums(gran, false, &bags, &mut pooled, &mut rep.st, &mut rep.io)?;
                w.f32s(&pooled)?;
            } else {
                let model = s.model.as_ref().ok_or_else(|| Error::Device("rm-ssd without a model".into()))?;
                let out = s.dev.rm_ssd(model, &dense, &bags, rows, &mut rep.st, &mut rep.io)?;
                w.f32s(&out.predictions)?;
                rep.bot_s = out.bot_s;
                rep.top_s = out.top_s;
            }
        }
        K_RECSSD => {
            if !req.len().is_multiple_of(16) {
                return Err(Error::Device(format!("malformed misses: {} bytes, not whole 16 B records", req.len())));
            }
            let n = req.len() / 16;
            let mut misses = Vec::with_capacity(n);
            for _ in 0..n {
                let (tr, row) = (r.u64()?, r.u64()?);
                let (t, slot) = ((tr & 0xffff_ffff) as usize, (tr >> 32) as usize);
                if t >= nt || row >= s.dev.metas[t].rows || slot >= rows * nt {
                    return Err(Error::Device(format!("malformed miss: table {t}, row {row}, slot {slot}")));
                }
                misses.push((t, row, slot));
            }
            let mut partial = vec![0f32; pooled_len];
            let vectors = s.dev.recssd_misses(&misses, &mut partial, &mut rep.st, &mut rep.io)?;
            w.f32s(&partial)?;
            for v in &vectors {
                w.f32s(v)?;
            }
        }
        k => return Err(Error::Device(format!("unknown request kind {k}"))),
    }
    rep.len = w.at;
    Ok(rep)
}

fn pid_alive(pid: u64) -> bool {
    // SAFETY: kill with signal 0 sends nothing; it only checks that the process exists.
    pid == 0
        || unsafe { libc::kill(pid as libc::pid_t, 0) } == 0
        || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Serves the channel at `path` (the host's memfd, `/proc/<pid>/fd/<n>`) until CLOSE, or until
/// the host is gone. This is the device process's main loop (`python -m offload.recsys.device`).
pub fn serve(path: &Path) -> Result<()> {
    let file = OpenOptions::new().read(true).write(true).open(path).map_err(|e| Error::io(path, "open", e))?;
    let mut chan = Channel::map(&file)?;
    if chan.get(R_MAGIC) != MAGIC {
        return Err(Error::Device(format!("{}: not a device channel (no magic)", path.display())));
    }
    chan.set(R_DEVICE_PID, u64::from(std::process::id()));
    let host = chan.get(R_HOST_PID);
    let mut state: Option<Served> = None;
    let mut last = chan.u32_at(R_RESP_SEQ).load(Ordering::Acquire);
    loop {
        // Wait for the next request.
        let mut spins = 0u32;
        loop {
            let cur = chan.u32_at(R_REQ_SEQ).load(Ordering::Acquire);
            if cur != last {
                break;
            }
            if spins < SPINS {
                spins += 1;
                std::hint::spin_loop();
                continue;
            }
            if chan.get(R_CLOSED) != 0 || !pid_alive(host) {
                return Ok(());
            }
            futex_wait(chan.u32_at(R_REQ_SEQ), cur, Duration::from_millis(500));
        }
        // Requests are served in order, one slot after the other (a second may already wait).
        let seq = last.wrapping_add(1);
        last = seq;
        chan.slot = (seq & 1) as usize;
        let kind = chan.get(R_KIND);
        let regs = [chan.get(R_ROWS), chan.get(R_ARG), chan.get(R_DENSE)];
        let req_len = (chan.get(R_REQ_LEN) as usize).min(chan.area);
        let (req, resp) = chan.areas();
        let out = handle(kind, regs, &req[..req_len], resp, &mut state);
        match out {
            Ok(rep) => {
                chan.set(R_STATUS, 0);
                chan.set(R_RESP_LEN, rep.len as u64);
                chan.setf(R_EMB_SSD, rep.st.emb_ssd);
                chan.setf(R_EMB_OP, rep.st.emb_op);
                chan.setf(R_BOT, rep.bot_s);
                chan.setf(R_TOP, rep.top_s);
                chan.set(R_MEDIA_READS, rep.io.media_reads);
                chan.set(R_MEDIA_BYTES, rep.io.media_bytes);
            }
            Err(e) => {
                let msg = e.to_string();
                let n = msg.len().min(resp.len());
                resp[..n].copy_from_slice(&msg.as_bytes()[..n]);
                chan.set(R_STATUS, 1);
                chan.set(R_RESP_LEN, n as u64);
            }
        }
        chan.u32_at(R_RESP_SEQ).store(seq, Ordering::Release);
        futex_wake(chan.u32_at(R_RESP_SEQ));
        if kind == K_CLOSE {
            return Ok(());
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The host's side.

/// Where the device side runs.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum DeviceAt {
    /// In the engine's process (the device functions are called directly).
    #[default]
    InProcess,
    /// Its own process: `command` followed by the channel's path, on CPU `cpu` (default: the
    /// last CPU this process may use), in a memory cgroup of `memory_bytes` where cgroup v1's
    /// memory controller is writable. `timeout_s` bounds every wait for an answer.
    Process { command: Vec<String>, cpu: Option<usize>, memory_bytes: Option<u64>, timeout_s: f64 },
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
    pub memory_limit_bytes: Option<u64>,
    /// The cgroup, or why there is no limit.
    pub memory_cgroup: Option<String>,
    pub memory_reason: Option<String>,
}

/// Payload bytes moved through the channel by batch requests (OPEN and CLOSE not counted).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ChannelBytes {
    pub to_device: u64,
    pub from_device: u64,
}

/// The host's end of a device served elsewhere (a process or a thread).
pub struct DeviceLink {
    chan: Channel,
    _file: File,
    child: Option<Child>,
    thread: Option<std::thread::JoinHandle<Result<()>>>,
    seq: u32,
    timeout: Duration,
    dead: Option<String>,
    cgroup: Option<PathBuf>,
    pub info: DeviceInfo,
    pub bytes: ChannelBytes,
    dim: usize,
    /// disk mode: the channel's time is measured (a round trip less the device's own time) and
    /// reported as the link stage; flash mode models the link instead.
    link_measured: bool,
    /// Wall time of the last request, from ringing the doorbell to the answer.
    last_call_s: f64,
    /// The last request whose answer was taken (`seq` is the last sent; at most 2 apart).
    done: u32,
    /// When each slot's request was sent.
    sent_at: [Option<Instant>; 2],
    /// When the last answer was taken: a request sent while another was in the device waits
    /// for it there, and that wait is not the channel's time.
    last_done_at: Option<Instant>,
    /// rm-ssd batches sent and not yet read: (request, input bytes, rows).
    pending: std::collections::VecDeque<(u32, usize, usize)>,
}

fn memfd(bytes: usize) -> Result<File> {
    let name = c"offload-recsys-device";
    // SAFETY: `name` is a NUL-terminated string; memfd_create returns a new descriptor or -1.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(Error::io("memfd", "memfd_create", std::io::Error::last_os_error()));
    }
    // SAFETY: `fd` was just created and is owned by nothing else.
    let f = unsafe { File::from_raw_fd(fd) };
    f.set_len(bytes as u64).map_err(|e| Error::io("memfd", "ftruncate", e))?;
    Ok(f)
}

/// The last CPU this process may run on.
fn last_cpu() -> Option<usize> {
    // SAFETY: an all-zero cpu_set_t is valid (plain integers, no invariants).
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 is this thread; `set` is a valid, writable cpu_set_t of the size given.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0 {
        return None;
    }
    // SAFETY: CPU_ISSET reads the set for CPU numbers below CPU_SETSIZE.
    (0..libc::CPU_SETSIZE as usize).rev().find(|&c| unsafe { libc::CPU_ISSET(c, &set) })
}

fn set_cpu(pid: u32, cpu: usize) -> std::result::Result<(), String> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(format!("CPU {cpu} is beyond CPU_SETSIZE"));
    }
    // SAFETY: an all-zero cpu_set_t is the empty set (plain integers, no invariants).
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: CPU_SET writes bit `cpu` of `set`, and `cpu` < CPU_SETSIZE (checked above).
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a valid cpu_set_t of the size given; the call only reads it.
    if unsafe { libc::sched_setaffinity(pid as libc::pid_t, std::mem::size_of::<libc::cpu_set_t>(), &set) } != 0 {
        return Err(format!("sched_setaffinity(CPU {cpu}): {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

const MEMORY_ROOT: &str = "/sys/fs/cgroup/memory";

/// Puts `pid` in a new child of this process's v1 memory cgroup limited to `bytes`.
fn memory_cgroup(pid: u32, bytes: u64) -> std::result::Result<PathBuf, String> {
    let own = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                let mut parts = l.splitn(3, ':');
                let (_, ctl, path) = (parts.next()?, parts.next()?, parts.next()?);
                ctl.split(',').any(|c| c == "memory").then(|| Path::new(MEMORY_ROOT).join(path.trim_start_matches('/')))
            })
        })
        .filter(|p| p.join("memory.limit_in_bytes").exists())
        .ok_or_else(|| format!("no cgroup v1 memory controller at {MEMORY_ROOT}"))?;
    let child = own.join(format!("offload-recsys-device-{pid}"));
    std::fs::create_dir_all(&child).map_err(|e| format!("{}: {e} (root needed)", child.display()))?;
    let apply = || -> std::io::Result<()> {
        std::fs::write(child.join("memory.limit_in_bytes"), bytes.to_string())?;
        std::fs::write(child.join("cgroup.procs"), pid.to_string())
    };
    if let Err(e) = apply() {
        let _ = std::fs::remove_dir(&child);
        return Err(format!("{}: {e}", child.display()));
    }
    Ok(child)
}

impl DeviceLink {
    /// Starts a device (`at` is `Process` or `Thread`) for these tables and asks it to OPEN them;
    /// `model` is sent for rm-ssd.
    pub fn start(
        at: &DeviceAt,
        paths: &[PathBuf],
        dim: usize,
        mode: Mode,
        queue_depth: usize,
        model: Option<&Dlrm>,
        area_bytes: usize,
    ) -> Result<DeviceLink> {
        let file = memfd(HEADER + 4 * area_bytes)?;
        let chan = Channel::map(&file)?;
        chan.set(R_MAGIC, MAGIC);
        chan.set(R_AREA, area_bytes as u64);
        chan.set(R_HOST_PID, u64::from(std::process::id()));
        let path = format!("/proc/{}/fd/{}", std::process::id(), file.as_raw_fd());
        let mut info = DeviceInfo { channel: path.clone(), area_bytes, ..DeviceInfo::default() };
        let (mut child, mut thread, mut cgroup) = (None, None, None);
        let timeout_s = match at {
            DeviceAt::InProcess => return Err(Error::Device("DeviceLink::start with DeviceAt::InProcess".into())),
            DeviceAt::Thread { timeout_s } => {
                info.at = "thread".into();
                let p = PathBuf::from(&path);
                thread = Some(
                    std::thread::Builder::new()
                        .name("recsys-device".into())
                        .spawn(move || serve(&p))
                        .map_err(|e| Error::Device(format!("cannot start the device thread: {e}")))?,
                );
                *timeout_s
            }
            DeviceAt::Process { command, cpu, memory_bytes, timeout_s } => {
                info.at = "process".into();
                info.command = command.clone();
                let (prog, args) = command.split_first().ok_or_else(|| Error::Device("empty device command".into()))?;
                let mut cmd = Command::new(prog);
                cmd.args(args).arg(&path).stdin(Stdio::null());
                let host_pid = std::process::id() as libc::pid_t;
                // SAFETY: the closure runs in the child between fork and exec; it allocates
                // nothing and only calls prctl, getppid and _exit, which are async-signal-safe.
                // PR_SET_PDEATHSIG survives exec (the interpreter is not set-user-ID), so the
                // device is killed when the host's spawning thread dies; a host that died before
                // prctl ran is caught by the getppid check (the child was re-parented).
                unsafe {
                    cmd.pre_exec(move || {
                        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) != 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                        if libc::getppid() != host_pid {
                            libc::_exit(1);
                        }
                        Ok(())
                    });
                }
                let c =
                    cmd.spawn().map_err(|e| Error::Device(format!("cannot start the device process {prog:?}: {e}")))?;
                let pid = c.id();
                info.pid = Some(pid);
                match cpu.or_else(last_cpu) {
                    Some(cpu) => match set_cpu(pid, cpu) {
                        Ok(()) => info.cpu = Some(cpu),
                        Err(why) => info.cpu_reason = Some(why),
                    },
                    None => info.cpu_reason = Some("this process's CPU set is unknown".into()),
                }
                match memory_bytes {
                    None => info.memory_reason = Some("no memory limit asked".into()),
                    Some(b) => match memory_cgroup(pid, *b) {
                        Ok(cg) => {
                            info.memory_limit_bytes = Some(*b);
                            info.memory_cgroup = Some(cg.display().to_string());
                            cgroup = Some(cg);
                        }
                        Err(why) => info.memory_reason = Some(why),
                    },
                }
                child = Some(c);
                *timeout_s
            }
        };
        let mut link = DeviceLink {
            chan,
            _file: file,
            child,
            thread,
            seq: 0,
            timeout: Duration::from_secs_f64(timeout_s.max(0.001)),
            dead: None,
            cgroup,
            info,
            bytes: ChannelBytes::default(),
            dim,
            link_measured: mode == Mode::Disk,
            last_call_s: 0.0,
            done: 0,
            sent_at: [None, None],
            last_done_at: None,
            pending: std::collections::VecDeque::new(),
        };
        let cfg = OpenConfig { paths: paths.to_vec(), dim, mode, queue_depth, model: model.cloned() };
        link.use_next_slot()?;
        let (req, _) = link.chan.areas();
        let mut w = Writer { buf: req, at: 0 };
        write_open(&mut w, &cfg)?;
        let n = w.at;
        link.call(K_OPEN, [0, 0, 0], n)?;
        if link.info.pid.is_none() {
            link.info.pid = Some(link.chan.get(R_DEVICE_PID) as u32);
        }
        Ok(link)
    }

    /// Sends the request already written (`len` bytes) and waits for the answer; returns the
    /// response's length (the channel is left on the answer's slot).
    fn call(&mut self, kind: u64, regs: [u64; 3], len: usize) -> Result<usize> {
        let seq = self.submit(kind, regs, len)?;
        self.complete(seq)
    }

    /// Points the channel at the slot the next request will use (write its payload there).
    fn use_next_slot(&mut self) -> Result<()> {
        if self.seq.wrapping_sub(self.done) >= 2 {
            return Err(Error::Device("two requests are in flight: read an answer before sending more".into()));
        }
        self.chan.slot = (self.seq.wrapping_add(1) & 1) as usize;
        Ok(())
    }

    /// Rings the doorbell for the request written in the next slot; returns its number.
    fn submit(&mut self, kind: u64, regs: [u64; 3], len: usize) -> Result<u32> {
        if let Some(why) = &self.dead {
            return Err(Error::Device(why.clone()));
        }
        self.use_next_slot()?;
        self.chan.set(R_KIND, kind);
        self.chan.set(R_ROWS, regs[0]);
        self.chan.set(R_ARG, regs[1]);
        self.chan.set(R_DENSE, regs[2]);
        self.chan.set(R_REQ_LEN, len as u64);
        self.seq = self.seq.wrapping_add(1);
        self.sent_at[self.chan.slot] = Some(Instant::now());
        self.chan.u32_at(R_REQ_SEQ).store(self.seq, Ordering::Release);
        futex_wake(self.chan.u32_at(R_REQ_SEQ));
        Ok(self.seq)
    }

    /// Waits for the answer to request `seq` (the oldest in flight) and points the channel at
    /// its slot; returns the response's length.
    fn complete(&mut self, seq: u32) -> Result<usize> {
        if let Some(why) = &self.dead {
            return Err(Error::Device(why.clone()));
        }
        debug_assert_eq!(seq, self.done.wrapping_add(1), "answers are taken in order");
        if let Err(e) = self.wait(seq) {
            self.dead = Some(e.to_string());
            return Err(e);
        }
        self.done = seq;
        self.chan.slot = (seq & 1) as usize;
        let now = Instant::now();
        let start = match (self.sent_at[self.chan.slot].take(), self.last_done_at) {
            (Some(sent), Some(prev)) => sent.max(prev),
            (Some(sent), None) => sent,
            (None, _) => now,
        };
        self.last_call_s = now.duration_since(start).as_secs_f64();
        self.last_done_at = Some(now);
        let n = (self.chan.get(R_RESP_LEN) as usize).min(self.chan.area);
        if self.chan.get(R_STATUS) != 0 {
            let (_, resp) = self.chan.areas();
            return Err(Error::Device(format!("the device answered: {}", String::from_utf8_lossy(&resp[..n]))));
        }
        Ok(n)
    }

    fn wait(&mut self, seq: u32) -> Result<()> {
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            let cur = self.chan.u32_at(R_RESP_SEQ).load(Ordering::Acquire);
            if cur.wrapping_sub(seq) as i32 >= 0 {
                return Ok(());
            }
            if spins < SPINS {
                spins += 1;
                std::hint::spin_loop();
                continue;
            }
            if let Some(c) = self.child.as_mut() {
                if let Ok(Some(status)) = c.try_wait() {
                    return Err(Error::Device(format!(
                        "the device process (pid {}) is gone: {status}; open the engine again",
                        c.id()
                    )));
                }
            }
            if self.thread.as_ref().is_some_and(|t| t.is_finished()) {
                return Err(Error::Device("the device thread is gone".into()));
            }
            let waited = start.elapsed();
            if waited >= self.timeout {
                return Err(Error::Device(format!(
                    "the device process did not answer within {:.3} s",
                    self.timeout.as_secs_f64()
                )));
            }
            futex_wait(self.chan.u32_at(R_RESP_SEQ), cur, (self.timeout - waited).min(Duration::from_millis(50)));
        }
    }

    fn add_report(&self, st: &mut Stages, io: &mut IoCounters) {
        let (ssd, op) = (self.chan.getf(R_EMB_SSD), self.chan.getf(R_EMB_OP));
        st.emb_ssd += ssd;
        st.emb_op += op;
        if self.link_measured {
            let busy = ssd + op + self.chan.getf(R_BOT) + self.chan.getf(R_TOP);
            st.link += (self.last_call_s - busy).max(0.0);
        }
        io.media_reads += self.chan.get(R_MEDIA_READS);
        io.media_bytes += self.chan.get(R_MEDIA_BYTES);
    }

    fn send_inputs(&mut self, dense: &[f32], bags: &[Bags<'_>]) -> Result<usize> {
        self.use_next_slot()?;
        let (req, _) = self.chan.areas();
        let mut w = Writer { buf: req, at: 0 };
        write_inputs(&mut w, dense, bags)?;
        Ok(w.at)
    }

    /// The device's pooled sums of a batch (emb-pagesum, emb-vectorsum). The inputs go as
    /// `RM_send_inputs` sends them, dense features included.
    #[allow(clippy::too_many_arguments)]
    pub fn bag_sums(
        &mut self,
        gran: Granularity,
        dense: &[f32],
        bags: &[Bags<'_>],
        rows: usize,
        pooled: &mut [f32],
        st: &mut Stages,
        io: &mut IoCounters,
    ) -> Result<()> {
        let n = self.send_inputs(dense, bags)?;
        let g = u64::from(gran == Granularity::Vector);
        let m = self.call(K_SUMS, [rows as u64, g, dense.len() as u64], n)?;
        if m != pooled.len() * 4 {
            return Err(Error::Device(format!("the device sent {m} B of sums, {} expected", pooled.len() * 4)));
        }
        let (_, resp) = self.chan.areas();
        let mut r = Reader { buf: resp, at: 0 };
        let got = r.f32s(pooled.len())?;
        pooled.iter_mut().zip(got).for_each(|(a, v)| *a += v);
        self.bytes.to_device += n as u64;
        self.bytes.from_device += m as u64;
        self.add_report(st, io);
        Ok(())
    }

    /// RM-SSD in the device: predictions and the device's measured MLP times.
    pub fn rm_ssd(
        &mut self,
        dense: &[f32],
        bags: &[Bags<'_>],
        rows: usize,
        st: &mut Stages,
        io: &mut IoCounters,
    ) -> Result<RmSsdOut> {
        self.rm_ssd_send(dense, bags, rows)?;
        self.rm_ssd_read(st, io)
    }

    /// `RM_send_inputs`: the batch goes to the device, which starts on it at once; up to two
    /// batches may be in flight (the next one's inputs are sent before this one's outputs are
    /// read).
    pub fn rm_ssd_send(&mut self, dense: &[f32], bags: &[Bags<'_>], rows: usize) -> Result<()> {
        let n = self.send_inputs(dense, bags)?;
        let seq = self.submit(K_RMSSD, [rows as u64, 1, dense.len() as u64], n)?;
        self.pending.push_back((seq, n, rows));
        Ok(())
    }

    /// `RM_read_outputs`: the predictions of the oldest batch sent.
    pub fn rm_ssd_read(&mut self, st: &mut Stages, io: &mut IoCounters) -> Result<RmSsdOut> {
        let (seq, n, rows) =
            self.pending.pop_front().ok_or_else(|| Error::Device("no batch was sent to read outputs of".into()))?;
        let m = self.complete(seq)?;
        if m != rows * 4 {
            return Err(Error::Device(format!("the device sent {m} B of predictions, {} expected", rows * 4)));
        }
        let (_, resp) = self.chan.areas();
        let predictions = Reader { buf: resp, at: 0 }.f32s(rows)?;
        self.bytes.to_device += n as u64;
        self.bytes.from_device += m as u64;
        self.add_report(st, io);
        Ok(RmSsdOut { predictions, bot_s: self.chan.getf(R_BOT), top_s: self.chan.getf(R_TOP) })
    }

    /// RecSSD's misses in the device: partial sums into `partial`, the missed vectors returned.
    pub fn recssd_misses(
        &mut self,
        misses: &[(usize, u64, usize)],
        rows: usize,
        partial: &mut [f32],
        st: &mut Stages,
        io: &mut IoCounters,
    ) -> Result<Vec<Vec<f32>>> {
        self.use_next_slot()?;
        let (req, _) = self.chan.areas();
        let mut w = Writer { buf: req, at: 0 };
        for &(t, row, slot) in misses {
            w.u64(t as u64 | (slot as u64) << 32)?;
            w.u64(row)?;
        }
        let n = w.at;
        let m = self.call(K_RECSSD, [rows as u64, 0, 0], n)?;
        let nf = fresh_of(misses).len();
        let want = (partial.len() + nf * self.dim) * 4;
        if m != want {
            return Err(Error::Device(format!("the device sent {m} B of partial sums and vectors, {want} expected")));
        }
        let (_, resp) = self.chan.areas();
        let mut r = Reader { buf: resp, at: 0 };
        let got = r.f32s(partial.len())?;
        partial.iter_mut().zip(got).for_each(|(a, v)| *a += v);
        let vectors = (0..nf).map(|_| r.f32s(self.dim)).collect::<Result<Vec<_>>>()?;
        self.bytes.to_device += n as u64;
        self.bytes.from_device += m as u64;
        self.add_report(st, io);
        Ok(vectors)
    }

    /// Sends a raw request (tests: malformed requests must get a clear error, not a hang).
    pub fn raw_request(&mut self, kind: u64, regs: [u64; 3], payload: &[u8]) -> Result<Vec<u8>> {
        self.use_next_slot()?;
        let (req, _) = self.chan.areas();
        Writer { buf: req, at: 0 }.bytes(payload)?;
        let m = self.call(kind, regs, payload.len())?;
        let (_, resp) = self.chan.areas();
        Ok(resp[..m].to_vec())
    }

    /// Asks the device to close and waits for it (a bounded wait), then kills what is left.
    pub fn close(&mut self) {
        let mut answered = false;
        if self.dead.is_none() {
            let short = Duration::from_secs(2).min(self.timeout);
            let keep = std::mem::replace(&mut self.timeout, short);
            // Batches sent and never read: take their answers first (their slots are busy).
            while let Some((seq, _, _)) = self.pending.pop_front() {
                let _ = self.complete(seq);
            }
            answered = self.call(K_CLOSE, [0, 0, 0], 0).is_ok();
            self.timeout = keep;
            self.dead = Some("the engine was closed".into());
        }
        if let Some(mut c) = self.child.take() {
            // A device that acknowledged CLOSE exits at once; one that did not is killed now.
            let grace = if answered { Duration::from_secs(2) } else { Duration::ZERO };
            let deadline = Instant::now() + grace;
            loop {
                match c.try_wait() {
                    Ok(Some(_)) => break,
                    Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
                    _ => {
                        let _ = c.kill();
                        let _ = c.wait();
                        break;
                    }
                }
            }
        }
        self.chan.set(R_CLOSED, 1);
        futex_wake(self.chan.u32_at(R_REQ_SEQ));
        if let Some(t) = self.thread.take() {
            // A thread that did not answer CLOSE sees the closed register at its next wake-up
            // (within half a second); it is left to end on its own rather than joined.
            if t.is_finished() {
                let _ = t.join();
            }
        }
        if let Some(cg) = self.cgroup.take() {
            let _ = std::fs::write(cg.join("memory.force_empty"), "0");
            let _ = std::fs::remove_dir(&cg);
        }
    }

    /// The device process's id (None for a thread).
    pub fn child_pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }
}

impl Drop for DeviceLink {
    fn drop(&mut self) {
        self.close();
    }
}
