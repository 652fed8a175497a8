//! Every strategy of the seed behind one interface (`Engine::infer`), with the same answers, a
//! per-stage breakdown (Fig. 2's bot-mlp, emb-ssd, emb-fs, emb-op, concat, top-mlp, plus the host
//! link) and I/O counters (bytes from the media, bytes over the host link, read amplification).
//!
//! Two timing modes. `disk`: every stage is measured on this machine, reading its disk for real
//! (ssd-s through the kernel's page cache, the others with O_DIRECT io_uring). `flash`: the media
//! and the device's work follow the seed's Table II model ([`FlashModel`]) and the device MLP the
//! kernel design's cycle counts; host work (MLPs, host sums, page-cache hits) is still measured.
//! In both modes the values come from the table files, so answers never depend on the mode.
//!
//! The device side runs in this process for now (same code path the device emulator process
//! will serve); where each step runs is what the counters and stages attribute.

use crate::error::{Error, Result};
use crate::extents::Extents;
use crate::flash::{FlashModel, ReadKind};
use crate::mlp::Dlrm;
use crate::sls::{self, Bags, Granularity, ReadPlan};
use crate::table::{Table, TableMeta, PAGE};
use crate::uring::DirectReader;
use lru::LruCache;
use serde::Serialize;
use std::num::NonZeroUsize;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    /// All tables in memory (the ideal).
    Dram,
    /// File reads through the page cache, DRAM held to 1/4 of the tables.
    SsdS,
    /// The same with 1/2.
    SsdM,
    /// Page-granular O_DIRECT reads into user space, sums on the host.
    EmbMmio,
    /// Page reads, sums in the device.
    EmbPagesum,
    /// Vector-granular reads, sums in the device.
    EmbVectorsum,
    /// Host LRU cache of hot vectors + in-device page-granular sums of the misses.
    Recssd,
    /// Everything in the device: lookups, sums, bottom and top MLPs.
    RmSsd,
}

pub const STRATEGIES: [Strategy; 8] = [
    Strategy::Dram,
    Strategy::SsdS,
    Strategy::SsdM,
    Strategy::EmbMmio,
    Strategy::EmbPagesum,
    Strategy::EmbVectorsum,
    Strategy::Recssd,
    Strategy::RmSsd,
];

impl Strategy {
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Dram => "dram",
            Strategy::SsdS => "ssd-s",
            Strategy::SsdM => "ssd-m",
            Strategy::EmbMmio => "emb-mmio",
            Strategy::EmbPagesum => "emb-pagesum",
            Strategy::EmbVectorsum => "emb-vectorsum",
            Strategy::Recssd => "recssd",
            Strategy::RmSsd => "rm-ssd",
        }
    }
    /// Share of the tables' bytes the host may keep in DRAM (page-cache strategies).
    pub fn dram_share(self) -> Option<f64> {
        match self {
            Strategy::SsdS => Some(0.25),
            Strategy::SsdM => Some(0.5),
            _ => None,
        }
    }
    fn granularity(self) -> Granularity {
        match self {
            Strategy::EmbVectorsum | Strategy::RmSsd => Granularity::Vector,
            _ => Granularity::Page,
        }
    }
}

impl FromStr for Strategy {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Strategy, String> {
        STRATEGIES
            .into_iter()
            .find(|x| x.as_str() == s)
            .ok_or_else(|| format!("unknown strategy {s:?}; one of {}", STRATEGIES.map(Strategy::as_str).join(", ")))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "mode", rename_all = "kebab-case")]
pub enum Mode {
    Disk,
    Flash(FlashModel),
}

/// Device MLP cycles per sample from the kernel design (eq. 1): bottom′ and top′ (incl. the
/// embedding part of the decomposed top layer 0); `flash` mode times the device MLP with them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Default)]
pub struct DeviceMlp {
    pub bottom_cycles: u64,
    pub top_cycles: u64,
}

#[derive(Debug, Clone)]
pub struct Options {
    pub strategy: Strategy,
    pub mode: Mode,
    /// io_uring queue depth for device reads in `disk` mode.
    pub queue_depth: usize,
    /// RecSSD's host cache, in vectors (all tables together).
    pub host_cache_vectors: usize,
    pub device_mlp: DeviceMlp,
}

impl Options {
    pub fn new(strategy: Strategy, mode: Mode) -> Options {
        Options { strategy, mode, queue_depth: 64, host_cache_vectors: 8192, device_mlp: DeviceMlp::default() }
    }
}

/// Seconds per stage for one batch (Fig. 2's names).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Stages {
    pub bot_mlp: f64,
    /// Time in the device / on the media.
    pub emb_ssd: f64,
    /// Time in the host I/O stack (page cache, system calls).
    pub emb_fs: f64,
    /// The pooled sums on the host (and merging partial sums).
    pub emb_op: f64,
    pub concat: f64,
    pub top_mlp: f64,
    /// Host↔device exchanges (inputs, pages or sums, outputs).
    pub link: f64,
}

impl Stages {
    pub fn total(&self) -> f64 {
        self.bot_mlp + self.emb_ssd + self.emb_fs + self.emb_op + self.concat + self.top_mlp + self.link
    }
    pub fn add(&mut self, o: &Stages) {
        self.bot_mlp += o.bot_mlp;
        self.emb_ssd += o.emb_ssd;
        self.emb_fs += o.emb_fs;
        self.emb_op += o.emb_op;
        self.concat += o.concat;
        self.top_mlp += o.top_mlp;
        self.link += o.link;
    }
}

/// I/O of one batch (or a sum of batches).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct IoCounters {
    pub lookups: u64,
    /// Bytes a byte-addressable device would read: lookups × vector bytes (Fig. 3's "ideal").
    pub useful_bytes: u64,
    pub media_reads: u64,
    pub media_bytes: u64,
    /// Bytes crossing the host↔device link (Table IV's I/O traffic).
    pub link_bytes: u64,
    pub cache_hits: u64,
    pub cache_misses: u64,
}

impl IoCounters {
    pub fn add(&mut self, o: &IoCounters) {
        self.lookups += o.lookups;
        self.useful_bytes += o.useful_bytes;
        self.media_reads += o.media_reads;
        self.media_bytes += o.media_bytes;
        self.link_bytes += o.link_bytes;
        self.cache_hits += o.cache_hits;
        self.cache_misses += o.cache_misses;
    }
    /// Media bytes over useful bytes.
    pub fn read_amplification(&self) -> f64 {
        if self.useful_bytes == 0 {
            0.0
        } else {
            self.media_bytes as f64 / self.useful_bytes as f64
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub predictions: Vec<f32>,
    pub stages: Stages,
    /// Time from inputs to outputs of this batch.
    pub latency_s: f64,
    /// Time between batches in steady state (smaller than the latency where stages overlap:
    /// rm-ssd sends the next batch's inputs before reading this one's outputs).
    pub interval_s: f64,
    pub io: IoCounters,
}

/// RecSSD's host cache: (table, row) → vector, least recently used evicted first.
type VectorCache = LruCache<(u32, u64), Box<[f32]>>;

/// The engine: a model, its tables on disk, one strategy in one mode.
pub struct Engine {
    pub model: Dlrm,
    pub tables: Vec<Table>,
    pub metas: Vec<TableMeta>,
    pub extents: Vec<Extents>,
    pub opts: Options,
    dram: Vec<Vec<f32>>,
    direct: Option<DirectReader>,
    /// RecSSD's host cache: (table, row) → vector.
    host_cache: Option<VectorCache>,
    /// `flash`-mode page cache of the ssd strategies: (table, page) of the DRAM budget.
    page_model: Option<LruCache<(u32, u64), ()>>,
}

fn elapsed(t: Instant) -> f64 {
    t.elapsed().as_secs_f64()
}

impl Engine {
    pub fn open(model: Dlrm, paths: &[PathBuf], opts: Options) -> Result<Engine> {
        if paths.len() != model.tables {
            return Err(Error::Shape(format!(
                "the model has {} tables, {} table files given",
                model.tables,
                paths.len()
            )));
        }
        let mut tables = Vec::new();
        for p in paths {
            let t = Table::open(p)?;
            if t.meta.dim as usize != model.dim {
                return Err(Error::Shape(format!(
                    "{}: dim {} but the model's is {}",
                    p.display(),
                    t.meta.dim,
                    model.dim
                )));
            }
            tables.push(t);
        }
        let metas: Vec<TableMeta> = tables.iter().map(|t| t.meta).collect();
        let extents = tables.iter().map(|t| Extents::of(&t.file, t.meta.file_bytes())).collect();
        let mut e = Engine {
            model,
            tables,
            metas,
            extents,
            opts,
            dram: Vec::new(),
            direct: None,
            host_cache: None,
            page_model: None,
        };
        e.prepare()?;
        Ok(e)
    }

    fn prepare(&mut self) -> Result<()> {
        let s = self.opts.strategy;
        let table_bytes: u64 = self.metas.iter().map(|m| m.file_bytes()).sum();
        match s {
            Strategy::Dram => {
                self.dram = self.tables.iter().map(Table::load_all).collect::<Result<_>>()?;
            }
            Strategy::SsdS | Strategy::SsdM => {
                for t in &self.tables {
                    advise_random(t)?;
                }
                if let Mode::Flash(_) = self.opts.mode {
                    let pages = ((table_bytes as f64 * s.dram_share().unwrap_or(1.0)) as u64 / PAGE).max(1);
                    self.page_model = Some(LruCache::new(NonZeroUsize::new(pages as usize).expect("≥ 1")));
                }
            }
            _ => {}
        }
        if s == Strategy::Recssd {
            let n = NonZeroUsize::new(self.opts.host_cache_vectors.max(1)).expect("≥ 1");
            self.host_cache = Some(LruCache::new(n));
        }
        let device_reads = !matches!(s, Strategy::Dram | Strategy::SsdS | Strategy::SsdM);
        if device_reads && self.opts.mode == Mode::Disk {
            let paths: Vec<&std::path::Path> = self.tables.iter().map(|t| t.path.as_path()).collect();
            let max_row = self.metas.iter().map(|m| m.row_bytes as usize).max().unwrap_or(0);
            self.direct =
                Some(DirectReader::open(&paths, self.opts.queue_depth, max_row.div_ceil(4096) * 4096 + 4096)?);
        }
        Ok(())
    }

    /// Bytes of all table files.
    pub fn table_bytes(&self) -> u64 {
        self.metas.iter().map(|m| m.file_bytes()).sum()
    }

    /// One batch: `dense` is rows × dense_width, `bags` one entry per table.
    pub fn infer(&mut self, dense: &[f32], bags: &[Bags<'_>], rows: usize) -> Result<Outcome> {
        sls::validate_all(&self.metas, rows, bags)?;
        let (t, d) = (self.model.tables, self.model.dim);
        let mut pooled = vec![0f32; rows * t * d];
        self.model.check_batch(dense, &pooled, rows)?;
        let mut st = Stages::default();
        let mut io = IoCounters::default();
        io.lookups = bags.iter().map(|b| b.indices.len() as u64).sum();
        io.useful_bytes = io.lookups * (d as u64 * 4);
        let pooled_bytes = (rows * t * d * 4) as u64;
        let input_bytes =
            (dense.len() * 4) as u64 + bags.iter().map(|b| (b.offsets.len() + b.indices.len()) as u64 * 8).sum::<u64>();
        let s = self.opts.strategy;
        match s {
            Strategy::Dram => {
                let t0 = Instant::now();
                sls::sum_in_memory(&self.dram, d, bags, &mut pooled);
                st.emb_op = elapsed(t0);
            }
            Strategy::SsdS | Strategy::SsdM => self.page_cache_sums(bags, &mut pooled, &mut st, &mut io)?,
            Strategy::EmbMmio | Strategy::EmbPagesum | Strategy::EmbVectorsum | Strategy::RmSsd => {
                let plan = ReadPlan::new(&self.metas, s.granularity(), sls::lookups(bags));
                let on_host = s == Strategy::EmbMmio;
                self.device_sums(&plan, &mut pooled, &mut st, &mut io, on_host)?;
                io.link_bytes += match s {
                    Strategy::EmbMmio => io.media_bytes,
                    Strategy::RmSsd => input_bytes + rows as u64 * 4,
                    _ => input_bytes + pooled_bytes,
                };
            }
            Strategy::Recssd => self.recssd_sums(bags, &mut pooled, &mut st, &mut io, input_bytes + pooled_bytes)?,
        }
        if s != Strategy::RmSsd {
            if let Mode::Flash(m) = self.opts.mode {
                if s != Strategy::Dram && !matches!(s, Strategy::SsdS | Strategy::SsdM) {
                    st.link += m.transfer_s(io.link_bytes);
                }
            }
        }
        // The MLPs. On the host for every strategy but rm-ssd; there, in the device.
        let t0 = Instant::now();
        let b = self.model.bottom_forward(dense, rows);
        let bot = elapsed(t0);
        let t0 = Instant::now();
        let predictions = if s == Strategy::RmSsd {
            self.model.forward_decomposed(dense, &pooled, rows)?
        } else {
            let z = self.model.concat(&b, &pooled, rows);
            st.concat = elapsed(t0);
            let t1 = Instant::now();
            let p = self.model.top_forward(&z, rows);
            st.top_mlp = elapsed(t1);
            p
        };
        let (latency, interval) = if s == Strategy::RmSsd {
            self.rm_ssd_times(&mut st, bot, elapsed(t0), rows, io.link_bytes)
        } else {
            st.bot_mlp = bot;
            (st.total(), st.total())
        };
        Ok(Outcome { predictions, stages: st, latency_s: latency, interval_s: interval, io })
    }

    /// rm-ssd: bottom MLP ∥ embeddings, then top; pipelined across batches (the next batch's
    /// inputs go out before this one's outputs are read), so the interval is the slowest stage.
    fn rm_ssd_times(
        &self,
        st: &mut Stages,
        bot_measured: f64,
        top_measured: f64,
        rows: usize,
        link_bytes: u64,
    ) -> (f64, f64) {
        match self.opts.mode {
            Mode::Flash(m) if self.opts.device_mlp != DeviceMlp::default() => {
                let dm = self.opts.device_mlp;
                st.bot_mlp = m.seconds(dm.bottom_cycles * rows as u64);
                st.top_mlp = m.seconds(dm.top_cycles * rows as u64);
                st.link = m.transfer_s(link_bytes) + m.doorbell_us * 1e-6;
            }
            _ => {
                st.bot_mlp = bot_measured;
                st.top_mlp = top_measured;
                if let Mode::Flash(m) = self.opts.mode {
                    st.link = m.transfer_s(link_bytes) + m.doorbell_us * 1e-6;
                }
            }
        }
        let latency = st.bot_mlp.max(st.emb_ssd + st.emb_op) + st.top_mlp + st.link;
        let interval = st.bot_mlp.max(st.emb_ssd + st.emb_op).max(st.top_mlp).max(st.link);
        (latency, interval)
    }

    /// ssd-s / ssd-m: one pread per lookup, in order, through the page cache (the seed's C++
    /// SLS operator with lseek + read). `flash` mode: an LRU of the DRAM budget's pages over the
    /// model's synchronous block reads.
    fn page_cache_sums(
        &mut self,
        bags: &[Bags<'_>],
        pooled: &mut [f32],
        st: &mut Stages,
        io: &mut IoCounters,
    ) -> Result<()> {
        let d = self.model.dim;
        let nt = bags.len();
        let mut buf = vec![0u8; d * 4];
        let before = proc_read_bytes();
        let (mut read_s, mut sum_s) = (0.0, 0.0);
        // flash mode: the host stack's time is what a read of a page the model holds costs
        // (that page was read earlier in this run, so it is in the kernel's cache too); a
        // modelled miss reads the real disk, and that time is not the emulated media's.
        let mut hit_read_s = 0.0;
        for (t, b) in bags.iter().enumerate() {
            for (s, &row) in sls::bag_of_each(b.offsets).zip(b.indices) {
                let meta = self.metas[t];
                let at = meta.row_offset(row as u64);
                let t0 = Instant::now();
                self.tables[t]
                    .file
                    .read_exact_at(&mut buf, at)
                    .map_err(|e| Error::io(&self.tables[t].path, "pread", e))?;
                let took = elapsed(t0);
                read_s += took;
                if let Some(pm) = self.page_model.as_mut() {
                    if pm.put((t as u32, at / PAGE), ()).is_none() {
                        io.cache_misses += 1;
                    } else {
                        io.cache_hits += 1;
                        hit_read_s += took;
                    }
                }
                let t1 = Instant::now();
                let slot = s * nt + t;
                crate::table::add_row(&buf, &mut pooled[slot * d..slot * d + d]);
                sum_s += elapsed(t1);
            }
        }
        st.emb_op = sum_s;
        match self.opts.mode {
            Mode::Flash(m) => {
                io.media_reads = io.cache_misses;
                io.media_bytes = io.cache_misses * PAGE;
                st.emb_ssd = io.cache_misses as f64 * m.host_block_read_s();
                // The host stack's share: what a page-cache hit costs here, for every lookup
                // (a miss goes through the same system call and cache look-up first).
                st.emb_fs = if io.cache_hits > 0 {
                    hit_read_s / io.cache_hits as f64 * io.lookups as f64
                } else {
                    read_s.min(1e-6 * io.lookups as f64)
                };
            }
            Mode::Disk => {
                io.media_bytes = proc_read_bytes().saturating_sub(before);
                io.media_reads = io.media_bytes.div_ceil(PAGE);
                // The kernel does not tell device time from stack time per read: the whole
                // pread time (device waits included) is reported as emb-fs in this mode.
                st.emb_fs = read_s;
            }
        }
        Ok(())
    }

    /// Device reads of a plan and the pooled sums; `on_host` marks emb-mmio, whose sums the host
    /// does on the pages shipped to it.
    fn device_sums(
        &mut self,
        plan: &ReadPlan,
        pooled: &mut [f32],
        st: &mut Stages,
        io: &mut IoCounters,
        on_host: bool,
    ) -> Result<()> {
        let d = self.model.dim;
        io.media_reads += plan.units.len() as u64;
        match self.opts.mode {
            Mode::Disk => {
                io.media_bytes += plan.media_bytes();
                let t0 = Instant::now();
                let mut sum_s = 0.0;
                let reader = self.direct.as_mut().expect("opened in prepare");
                reader.read_plan(plan, |u, bytes| {
                    let t1 = Instant::now();
                    plan.scatter(u, bytes, d, pooled);
                    sum_s += elapsed(t1);
                })?;
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
                    plan.scatter(i, b, d, pooled);
                    sum_s += elapsed(t1);
                }
                if on_host {
                    st.emb_op += sum_s;
                }
            }
        }
        Ok(())
    }

    /// RecSSD: the host cache answers what it holds; the device sums the misses page-granularly
    /// and returns partial sums and the missed vectors (to keep the LRU current: counted on the
    /// link); the host merges.
    fn recssd_sums(
        &mut self,
        bags: &[Bags<'_>],
        pooled: &mut [f32],
        st: &mut Stages,
        io: &mut IoCounters,
        sums_bytes: u64,
    ) -> Result<()> {
        let d = self.model.dim;
        let nt = bags.len();
        let t0 = Instant::now();
        let mut misses = Vec::new();
        let cache = self.host_cache.as_mut().expect("made in prepare");
        for (t, b) in bags.iter().enumerate() {
            for (s, &row) in sls::bag_of_each(b.offsets).zip(b.indices) {
                let slot = s * nt + t;
                if let Some(v) = cache.get(&(t as u32, row as u64)) {
                    pooled[slot * d..slot * d + d].iter_mut().zip(v.iter()).for_each(|(a, x)| *a += x);
                    io.cache_hits += 1;
                } else {
                    misses.push((t, row as u64, slot));
                    io.cache_misses += 1;
                }
            }
        }
        let hit_s = elapsed(t0);
        let plan = ReadPlan::new(&self.metas, Granularity::Page, misses.iter().copied());
        let mut partial = vec![0f32; pooled.len()];
        self.device_sums(&plan, &mut partial, st, io, false)?;
        // Missed vectors for the LRU: unique (table, row) pairs.
        let mut fresh: Vec<(usize, u64)> = misses.iter().map(|&(t, r, _)| (t, r)).collect();
        fresh.sort_unstable();
        fresh.dedup();
        io.link_bytes += sums_bytes + fresh.len() as u64 * d as u64 * 4;
        // The missed vectors' values: the device sends them (counted above); the emulator reads
        // them from the file, which is bookkeeping and not timed.
        let mut vectors = Vec::with_capacity(fresh.len());
        for &(t, row) in &fresh {
            let mut v = vec![0f32; d];
            self.tables[t].read_row(row, &mut v)?;
            vectors.push(((t as u32, row), v.into_boxed_slice()));
        }
        let t1 = Instant::now();
        pooled.iter_mut().zip(&partial).for_each(|(a, p)| *a += p);
        let cache = self.host_cache.as_mut().expect("made in prepare");
        for (key, v) in vectors {
            cache.put(key, v);
        }
        st.emb_op += hit_s + elapsed(t1);
        Ok(())
    }
}

/// No readahead (embedding lookups are random; readahead would read, and count, neighbours),
/// and a cold start: the table's cached pages are dropped (clean pages only; a no-op for pages
/// other processes keep in use), so the page cache holds only what this run reads.
fn advise_random(t: &Table) -> Result<()> {
    nix::fcntl::posix_fadvise(&t.file, 0, 0, nix::fcntl::PosixFadviseAdvice::POSIX_FADV_DONTNEED)
        .map_err(|e| Error::io(&t.path, "posix_fadvise", e))?;
    nix::fcntl::posix_fadvise(&t.file, 0, 0, nix::fcntl::PosixFadviseAdvice::POSIX_FADV_RANDOM)
        .map_err(|e| Error::io(&t.path, "posix_fadvise", e))
}

/// Bytes this process caused to be fetched from storage (/proc/self/io read_bytes), 0 where the
/// kernel does not account it.
pub fn proc_read_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("read_bytes:").and_then(|v| v.trim().parse().ok())))
        .unwrap_or(0)
}
