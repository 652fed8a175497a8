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
//! The device side runs in this process by default, or in a device emulator process behind a
//! shared-memory channel ([`DeviceAt::Process`], `crate::device`); the engine holds either as one
//! [`DeviceSide`] and calls the same functions, so the answers and counters are the same; where
//! each step runs is what the counters and stages attribute.

pub use crate::device::DeviceAt;
use crate::device::{ChannelBytes, Device, DeviceInfo, DeviceLink, DeviceSide, RmSsdOut};
use crate::error::{Error, Result};
use crate::extents::Extents;
use crate::mlp::Dlrm;
use crate::sls::{self, Bags, Granularity};
use crate::table::{Table, TableMeta, PAGE};
pub use crate::timing::{IoCounters, Mode, Stages};
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

/// Device MLP cycles per sample from the kernel design (eq. 1): bottom′, `L_e` (the embedding
/// half of the decomposed top layer 0, which runs beside the flash reads: eq. 1a's emb′ stage is
/// the slower of the two) and top′; `flash` mode times the device MLP with them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Default)]
pub struct DeviceMlp {
    pub bottom_cycles: u64,
    pub emb_layer_cycles: u64,
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
    /// Where the device side of emb-pagesum, emb-vectorsum, recssd and rm-ssd runs.
    pub device: DeviceAt,
    /// Bytes of each payload area of the device channel (the largest batch message).
    pub channel_bytes: usize,
}

impl Options {
    pub fn new(strategy: Strategy, mode: Mode) -> Options {
        Options {
            strategy,
            mode,
            queue_depth: 64,
            host_cache_vectors: 8192,
            device_mlp: DeviceMlp::default(),
            device: DeviceAt::InProcess,
            channel_bytes: crate::device::DEFAULT_AREA_BYTES,
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
    /// Where the drive's compute runs, for every strategy that reads through the device (and
    /// emb-mmio's host reads): in this process, or behind the channel (`Options::device`) for
    /// the strategies whose sums the device does.
    device: Option<Box<dyn DeviceSide>>,
    /// RecSSD's host cache: (table, row) → vector.
    host_cache: Option<VectorCache>,
    /// `flash`-mode page cache of the ssd strategies: (table, page) of the DRAM budget.
    page_model: Option<LruCache<(u32, u64), ()>>,
    /// `flash` mode, ssd-s / ssd-m: what one read through the kernel costs when the page is in
    /// its cache, measured on this machine when the engine opens (the host stack's time).
    page_hit_s: f64,
    /// Batches given to `send_inputs` and not yet to `read_outputs`: their rows, the counters
    /// known before the device answers, and their input bytes.
    sent: std::collections::VecDeque<Sent>,
    closed: bool,
}

/// One batch in flight between `send_inputs` and `read_outputs`.
struct Sent {
    rows: usize,
    io: IoCounters,
    input_bytes: u64,
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
            device: None,
            host_cache: None,
            page_model: None,
            page_hit_s: 0.0,
            sent: std::collections::VecDeque::new(),
            closed: false,
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
                    if let Some(t) = self.tables.first() {
                        self.page_hit_s = page_hit_seconds(t)?;
                    }
                }
            }
            _ => {}
        }
        if s == Strategy::Recssd {
            let n = NonZeroUsize::new(self.opts.host_cache_vectors.max(1)).expect("≥ 1");
            self.host_cache = Some(LruCache::new(n));
        }
        let device_reads = !matches!(s, Strategy::Dram | Strategy::SsdS | Strategy::SsdM);
        let paths: Vec<PathBuf> = self.tables.iter().map(|t| t.path.clone()).collect();
        let (d, mode, qd) = (self.model.dim, self.opts.mode, self.opts.queue_depth);
        if device_reads && self.opts.device != DeviceAt::InProcess && self.served_by_device() {
            let model = (s == Strategy::RmSsd).then_some(&self.model);
            let at = self.opts.device.clone();
            self.device = Some(Box::new(DeviceLink::start(&at, &paths, d, mode, qd, model, self.opts.channel_bytes)?));
        } else if device_reads {
            self.device = Some(Box::new(Device::open(&paths, d, mode, qd)?));
        }
        Ok(())
    }

    /// Whether the strategy's sums run in the device (and so in the device process, where one
    /// is asked for); emb-mmio's host reads and the host strategies stay in this process.
    fn served_by_device(&self) -> bool {
        matches!(self.opts.strategy, Strategy::EmbPagesum | Strategy::EmbVectorsum | Strategy::Recssd | Strategy::RmSsd)
    }

    /// Where the device runs and what it was given (pid, CPU, memory limit, or why not).
    pub fn device_info(&self) -> DeviceInfo {
        let mut info = self.device.as_deref().map_or_else(DeviceInfo::in_process, DeviceSide::info);
        if !self.device.as_deref().is_some_and(DeviceSide::behind_channel) && self.opts.device != DeviceAt::InProcess {
            info.at = format!("in-process ({} has no device side)", self.opts.strategy.as_str());
        }
        info
    }

    /// Payload bytes this engine moved through the device channel (zero in process).
    pub fn channel_bytes(&self) -> ChannelBytes {
        self.device.as_deref().map(DeviceSide::channel_bytes).unwrap_or_default()
    }

    /// The device process's id, where there is one.
    pub fn device_pid(&self) -> Option<u32> {
        self.device.as_deref().and_then(DeviceSide::child_pid)
    }

    /// Stops the device process (if any); later batches of a device strategy fail.
    pub fn close(&mut self) {
        if self.device.as_deref().is_some_and(DeviceSide::behind_channel) {
            if let Some(mut d) = self.device.take() {
                d.close();
            }
            self.closed = true;
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn device_sums(
        &mut self,
        gran: Granularity,
        dense: &[f32],
        bags: &[Bags<'_>],
        rows: usize,
        pooled: &mut [f32],
        st: &mut Stages,
        io: &mut IoCounters,
    ) -> Result<()> {
        let on_host = self.opts.strategy == Strategy::EmbMmio;
        match self.device.as_mut() {
            Some(d) => d.bag_sums(gran, on_host, dense, bags, rows, pooled, st, io),
            None => Err(self.no_device()),
        }
    }

    fn no_device(&self) -> Error {
        Error::Device(if self.closed { "the engine was closed".into() } else { "no device side opened".into() })
    }

    fn rm_ssd(
        &mut self,
        dense: &[f32],
        bags: &[Bags<'_>],
        rows: usize,
        st: &mut Stages,
        io: &mut IoCounters,
    ) -> Result<RmSsdOut> {
        match self.device.as_mut() {
            Some(d) => d.rm_ssd(&self.model, dense, bags, rows, st, io),
            None => Err(self.no_device()),
        }
    }

    /// Steady state before measuring, for the modelled page cache of ssd-s / ssd-m in `flash`
    /// mode: the pages of these lookups of `table` enter the LRU as reads would put them there,
    /// but nothing is read or timed (filling a budget of GBs by real reads would take hours).
    /// Returns (pages held, capacity); (0, 0) where the strategy or mode has no modelled cache.
    pub fn warm_page_cache(&mut self, table: usize, rows: &[i64]) -> Result<(usize, usize)> {
        let Some(meta) = self.metas.get(table).copied() else {
            return Err(Error::Shape(format!("table {table} of {}", self.metas.len())));
        };
        let Some(pm) = self.page_model.as_mut() else { return Ok((0, 0)) };
        for (i, &row) in rows.iter().enumerate() {
            if row < 0 || row as u64 >= meta.rows {
                return Err(Error::Shape(format!(
                    "warm-up lookup {i} of table {table}: row {row} is not in 0..{}",
                    meta.rows
                )));
            }
            pm.put((table as u32, meta.row_offset(row as u64) / PAGE), ());
        }
        Ok((pm.len(), pm.cap().get()))
    }

    /// `RM_send_inputs` (rm-ssd): the batch goes to the device, which starts on it while the
    /// host goes on; send the next batch before reading this one's outputs to overlap them (up
    /// to two in flight with a device process). Answers and counters are `infer`'s.
    pub fn send_inputs(&mut self, dense: &[f32], bags: &[Bags<'_>], rows: usize) -> Result<()> {
        if self.opts.strategy != Strategy::RmSsd {
            return Err(Error::Shape(format!(
                "send_inputs / read_outputs pipeline rm-ssd; {} runs with infer",
                self.opts.strategy.as_str()
            )));
        }
        sls::validate_all(&self.metas, rows, bags)?;
        let pooled = vec![0f32; rows * self.model.tables * self.model.dim];
        self.model.check_batch(dense, &pooled, rows)?;
        let lookups: u64 = bags.iter().map(|b| b.indices.len() as u64).sum();
        let io = IoCounters { lookups, useful_bytes: lookups * self.model.dim as u64 * 4, ..IoCounters::default() };
        let input_bytes =
            (dense.len() * 4) as u64 + bags.iter().map(|b| (b.offsets.len() + b.indices.len()) as u64 * 8).sum::<u64>();
        let Some(device) = self.device.as_mut() else { return Err(self.no_device()) };
        device.rm_ssd_send(&self.model, dense, bags, rows)?;
        self.sent.push_back(Sent { rows, io, input_bytes });
        Ok(())
    }

    /// `RM_read_outputs`: the outcome of the oldest batch sent.
    pub fn read_outputs(&mut self) -> Result<Outcome> {
        let Some(sent) = self.sent.pop_front() else {
            return Err(Error::Shape("read_outputs: no batch was sent".into()));
        };
        let Sent { rows, mut io, input_bytes } = sent;
        let mut st = Stages::default();
        let device = self.device.as_mut().ok_or_else(|| Error::Device("the engine was closed".into()))?;
        let out = device.rm_ssd_read(&mut st, &mut io)?;
        io.link_bytes += input_bytes + rows as u64 * 4;
        let (latency_s, interval_s) = self.rm_ssd_times(&mut st, out.bot_s, out.top_s, rows, io.link_bytes);
        Ok(Outcome { predictions: out.predictions, stages: st, latency_s, interval_s, io })
    }

    /// Bytes of all table files.
    pub fn table_bytes(&self) -> u64 {
        self.metas.iter().map(|m| m.file_bytes()).sum()
    }

    /// One batch: `dense` is rows × dense_width, `bags` one entry per table.
    pub fn infer(&mut self, dense: &[f32], bags: &[Bags<'_>], rows: usize) -> Result<Outcome> {
        if self.device.as_deref().is_some_and(DeviceSide::behind_channel) && !self.sent.is_empty() {
            return Err(Error::Shape("infer: read the outputs of the batches sent first".into()));
        }
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
        let mut rm: Option<RmSsdOut> = None;
        match s {
            Strategy::Dram => {
                let t0 = Instant::now();
                sls::sum_in_memory(&self.dram, d, bags, &mut pooled);
                st.emb_op = elapsed(t0);
            }
            Strategy::SsdS | Strategy::SsdM => self.page_cache_sums(bags, &mut pooled, &mut st, &mut io)?,
            Strategy::EmbMmio | Strategy::EmbPagesum | Strategy::EmbVectorsum => {
                self.device_sums(s.granularity(), dense, bags, rows, &mut pooled, &mut st, &mut io)?;
                io.link_bytes += match s {
                    Strategy::EmbMmio => io.media_bytes,
                    _ => input_bytes + pooled_bytes,
                };
            }
            Strategy::RmSsd => {
                rm = Some(self.rm_ssd(dense, bags, rows, &mut st, &mut io)?);
                io.link_bytes += input_bytes + rows as u64 * 4;
            }
            Strategy::Recssd => {
                self.recssd_sums(bags, rows, &mut pooled, &mut st, &mut io, input_bytes + pooled_bytes)?
            }
        }
        if let Some(out) = rm {
            // rm-ssd: everything ran in the device; only the times are put together here.
            let (latency, interval) = self.rm_ssd_times(&mut st, out.bot_s, out.top_s, rows, io.link_bytes);
            return Ok(Outcome {
                predictions: out.predictions,
                stages: st,
                latency_s: latency,
                interval_s: interval,
                io,
            });
        }
        if s != Strategy::RmSsd {
            if let Mode::Flash(m) = self.opts.mode {
                if s != Strategy::Dram && !matches!(s, Strategy::SsdS | Strategy::SsdM) {
                    st.link += m.transfer_s(io.link_bytes);
                }
            }
        }
        // The MLPs, on the host (rm-ssd's ran in the device, above).
        let t0 = Instant::now();
        let b = self.model.bottom_forward(dense, rows);
        st.bot_mlp = elapsed(t0);
        let t0 = Instant::now();
        let z = self.model.concat(&b, &pooled, rows);
        st.concat = elapsed(t0);
        let t1 = Instant::now();
        let predictions = self.model.top_forward(&z, rows);
        st.top_mlp = elapsed(t1);
        Ok(Outcome { predictions, stages: st, latency_s: st.total(), interval_s: st.total(), io })
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
                // emb′ = max(flash reads, L_e) (eq. 1a): what L_e takes beyond the reads is
                // charged to emb-op, the in-device work on the pooled vectors.
                st.emb_op += (m.seconds(dm.emb_layer_cycles * rows as u64) - st.emb_ssd).max(0.0);
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
        let max_block = self.metas.iter().map(|m| m.block_bytes() as usize).max().unwrap_or(0);
        let mut buf = vec![0u8; max_block];
        let before = proc_read_bytes();
        let (mut read_s, mut sum_s) = (0.0, 0.0);
        for (t, b) in bags.iter().enumerate() {
            for (s, &row) in sls::bag_of_each(b.offsets).zip(b.indices) {
                let meta = self.metas[t];
                let at = meta.row_offset(row as u64);
                // The pread takes the row's checksum block (the row, or the 512 B sector of
                // rows holding it) and checks it: part of the operator's time.
                let block = meta.block_of(row as u64);
                let blk = &mut buf[..meta.block_bytes() as usize];
                let t0 = Instant::now();
                let table = &self.tables[t];
                table
                    .file
                    .read_exact_at(blk, meta.block_offset(block))
                    .map_err(|e| Error::io(&table.path, "pread", e))?;
                table.check_block(block, blk, Some(row as u64))?;
                read_s += elapsed(t0);
                if let Some(pm) = self.page_model.as_mut() {
                    if pm.put((t as u32, at / PAGE), ()).is_none() {
                        io.cache_misses += 1;
                    } else {
                        io.cache_hits += 1;
                    }
                }
                let t1 = Instant::now();
                let slot = s * nt + t;
                let within = (at - meta.block_offset(block)) as usize;
                crate::table::add_row(&buf[within..within + d * 4], &mut pooled[slot * d..slot * d + d]);
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
                // (a miss goes through the same system call and cache look-up first). Not the
                // reads above: whether they hit the real page cache says nothing of the model's.
                st.emb_fs = self.page_hit_s * io.lookups as f64;
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

    /// RecSSD: the host cache answers what it holds; the device sums the misses page-granularly
    /// and returns partial sums and the missed vectors (to keep the LRU current: counted on the
    /// link); the host merges.
    #[allow(clippy::too_many_arguments)]
    fn recssd_sums(
        &mut self,
        bags: &[Bags<'_>],
        rows: usize,
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
        let mut partial = vec![0f32; pooled.len()];
        // The device sums the misses and sends the missed vectors (unique (table, row) pairs)
        // for the LRU.
        let Some(device) = self.device.as_mut() else { return Err(self.no_device()) };
        let vectors = device.recssd_misses(&misses, rows, &mut partial, st, io)?;
        let fresh = crate::device::fresh_of(&misses);
        io.link_bytes += sums_bytes + fresh.len() as u64 * d as u64 * 4;
        let t1 = Instant::now();
        pooled.iter_mut().zip(&partial).for_each(|(a, p)| *a += p);
        let cache = self.host_cache.as_mut().expect("made in prepare");
        for ((t, row), v) in fresh.into_iter().zip(vectors) {
            cache.put((t as u32, row), v.into_boxed_slice());
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

/// Median time of a `pread` of a row whose page is in the kernel's page cache, with the check of
/// its checksum block as ssd-s does it: 64 rows spread over the table are read once (bringing
/// their pages in), then timed on a second pass — random pages, as the lookups' hits are, not
/// one hot row.
fn page_hit_seconds(t: &Table) -> Result<f64> {
    if t.meta.rows == 0 {
        return Ok(0.0);
    }
    let mut buf = vec![0u8; t.meta.block_bytes() as usize];
    let step = (t.meta.rows / 64).max(1);
    let rows: Vec<u64> = (0..64u64).map(|i| (i * step + i * 7919) % t.meta.rows).collect();
    let mut times = Vec::with_capacity(rows.len());
    for pass in 0..2 {
        for &r in &rows {
            let t0 = Instant::now();
            let block = t.meta.block_of(r);
            t.file.read_exact_at(&mut buf, t.meta.block_offset(block)).map_err(|e| Error::io(&t.path, "pread", e))?;
            t.check_block(block, &buf, Some(r))?;
            if pass == 1 {
                times.push(elapsed(t0));
            }
        }
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// Bytes this process caused to be fetched from storage (/proc/self/io read_bytes), 0 where the
/// kernel does not account it.
pub fn proc_read_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("read_bytes:").and_then(|v| v.trim().parse().ok())))
        .unwrap_or(0)
}
