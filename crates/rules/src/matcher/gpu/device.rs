//! The gpu matcher on a device: the image uploaded once, the kernel compiled by NVRTC for the
//! device found, and batches streamed through two lanes (a CUDA stream each, with pinned host
//! buffers) so that one chunk's copies overlap the other's kernel:
//!
//! ```text
//! lane 0:  H2D q0 | kernel q0 | D2H a0 |          | H2D q2 | ...
//! lane 1:         | H2D q1    | kernel q1 | D2H a1 |        ...
//! ```
//!
//! The driver (libcuda) and NVRTC are loaded at run time: without them, or without a device,
//! [`open`] and [`GpuMatcher::new`] say what is missing and nothing else changes.

use super::{image, KERNEL_SOURCE};
use crate::encode::EncodedRules;
use crate::matcher::fast::FastMatcher;
use crate::matcher::{DeviceStages, Matcher};
use cudarc::driver::{
    sys, CudaContext, CudaEvent, CudaFunction, CudaSlice, CudaStream, DriverError, LaunchConfig, PinnedHostSlice,
    PushKernelArg,
};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Queries per chunk (one transfer, one launch): about 1 ms of kernel at 1 B queries/s, so a
/// launch (5-10 µs) and a copy's fixed cost stay small, while two lanes still overlap.
pub const DEFAULT_CHUNK: usize = 1 << 20;
const LANES: usize = 2;
/// Threads per block; blocks per SM at most [`BLOCKS_PER_SM`] (the kernel strides the grid).
const BLOCK: u32 = 256;
const BLOCKS_PER_SM: u32 = 32;
/// The smallest lane (queries): a small batch gets small buffers, a larger one regrows them.
const MIN_LANE: usize = 4096;
/// Block sizes [`GpuMatcher::profile`] times the kernel with.
const PROFILE_BLOCKS: [u32; 5] = [64, 128, 256, 512, 1024];
/// Batch sizes [`GpuMatcher::profile`] times the kernel alone at: from one query (the latency
/// of one thread's search) to a chunk (the throughput of the whole device).
const PROFILE_SIZES: [usize; 7] = [1, 16, 256, 4096, 65536, 262144, 1 << 20];
/// Host threads that copy a large chunk into pinned memory: one core's memcpy into
/// write-combined memory (about 6 GB/s on the H200's host) would otherwise bound the device.
const MAX_STAGE_THREADS: usize = 8;
/// Words each staging thread copies at least (1 MB, ~200 µs of one core): a thread's start
/// (~30 µs) stays small beside it.
const STAGE_WORDS_PER_THREAD: usize = 1 << 18;

/// The device a gpu matcher runs on.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DeviceInfo {
    pub name: String,
    pub compute_capability: (i32, i32),
    pub memory_bytes: usize,
    pub multiprocessors: i32,
}

/// Opens device 0, or says why there is no GPU to use.
pub fn open() -> Result<Arc<CudaContext>, String> {
    // SAFETY: is_culib_present only tries to dlopen the driver library by its usual names;
    // loading it runs the library's own initialisers, which are made for any process.
    if !unsafe { sys::is_culib_present() } {
        return Err("no GPU: the CUDA driver library (libcuda.so) is not installed".into());
    }
    let count = CudaContext::device_count().map_err(|e| format!("no GPU: the CUDA driver reports {e}"))?;
    if count < 1 {
        return Err("no GPU: the CUDA driver found no device".into());
    }
    CudaContext::new(0).map_err(|e| format!("no GPU: device 0 could not be opened ({e})"))
}

/// The device behind `ctx`.
pub fn info(ctx: &Arc<CudaContext>) -> Result<DeviceInfo, String> {
    Ok(DeviceInfo {
        name: ctx.name().map_err(cuda)?,
        compute_capability: ctx.compute_capability().map_err(cuda)?,
        memory_bytes: ctx.total_mem().map_err(cuda)?,
        multiprocessors: ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(cuda)?,
    })
}

/// Whether a gpu matcher can run here: the device, or what is missing.
pub fn available() -> Result<DeviceInfo, String> {
    let ctx = open()?;
    // SAFETY: as in `open`, a dlopen of NVRTC by its usual names.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(NO_NVRTC.into());
    }
    info(&ctx)
}

const NO_NVRTC: &str = "no NVRTC: libnvrtc.so is not on the library path (it comes with the CUDA toolkit, \
     or `pip install nvidia-cuda-nvrtc-cu12` with its lib folder on LD_LIBRARY_PATH)";

/// One stream with its pinned host buffers and device buffers for a chunk.
struct Lane {
    stream: Arc<CudaStream>,
    pin_in: PinnedHostSlice<u32>,
    pin_out: PinnedHostSlice<u32>,
    d_in: CudaSlice<u32>,
    d_out: CudaSlice<u32>,
    /// The chunk in flight: first answer's index, answers, and events around its stages.
    pending: Option<(usize, usize, [CudaEvent; 4])>,
}

/// Two lanes with buffers for `cap` queries each.
struct LanePair {
    cap: usize,
    lanes: Vec<Lane>,
}

/// The gpu matcher: the fast matcher's tree as a flat image on the device, one kernel thread
/// per query. Answers are `linear`'s, checked by the same tests as the host build of the kernel.
pub struct GpuMatcher {
    width: usize,
    chunk: usize,
    image_words: usize,
    device: DeviceInfo,
    tree: serde_json::Value,
    ctx: Arc<CudaContext>,
    func: CudaFunction,
    /// Queries cross the bus as 16-bit codes (every criterion has fewer than 2^16 codes).
    narrow: bool,
    /// Waiting threads sleep rather than spin (`OFFLOAD_GPU_SYNC=block` when the device opened).
    blocking: bool,
    image: CudaSlice<u32>,
    grid_max: u32,
    stage_threads: usize,
    /// Criteria of the tree's partitions, the order [`Self::profile`] sorts queries by.
    partition_criteria: Vec<usize>,
    /// Lane pairs not in use. A batch takes one, or makes one when all are busy, so that k
    /// threads (the service's kernel executors) match k batches at once on 2k streams.
    idle: Mutex<Vec<LanePair>>,
    last: Mutex<DeviceStages>,
}

impl GpuMatcher {
    pub fn new(rules: &EncodedRules, cardinalities: &[usize]) -> Result<Self, String> {
        Self::with_chunk(rules, cardinalities, DEFAULT_CHUNK)
    }

    /// Like [`Self::new`] with `chunk` queries per transfer.
    pub fn with_chunk(rules: &EncodedRules, cardinalities: &[usize], chunk: usize) -> Result<Self, String> {
        let narrow = narrow_fits(cardinalities);
        kernel(narrow)?; // before building the tree: without a GPU, say so at once
        Self::from_fast(&FastMatcher::new(rules, cardinalities), narrow, chunk)
    }

    /// The kernel over a given tree (tests use tiny leaves to exercise deep trees), with 16-bit
    /// query codes if `narrow` (see [`narrow_fits`]).
    pub fn from_fast(fast: &FastMatcher, narrow: bool, chunk: usize) -> Result<Self, String> {
        let Kernel { ctx, device, blocking, func } = kernel(narrow)?;
        let (image, tree) = (image::build(fast)?, fast.stats());
        let width = fast.width.max(1);
        let chunk = chunk.clamp(1, u32::MAX as usize / width);
        let upload = ctx.new_stream().map_err(cuda)?;
        let d_image = upload.clone_htod(&image).map_err(cuda)?;
        upload.synchronize().map_err(cuda)?;
        let grid_max = (device.multiprocessors.max(1) as u32) * BLOCKS_PER_SM;
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Ok(GpuMatcher {
            width,
            chunk,
            image_words: image.len(),
            device,
            tree,
            ctx,
            func,
            narrow,
            blocking,
            image: d_image,
            grid_max,
            stage_threads: cores.min(MAX_STAGE_THREADS),
            partition_criteria: image::partition_criteria(&image),
            idle: Mutex::new(Vec::new()),
            last: Mutex::new(DeviceStages::default()),
        })
    }

    /// The device this matcher runs on.
    pub fn device(&self) -> &DeviceInfo {
        &self.device
    }

    /// Stage times of the last batch.
    pub fn last_stages(&self) -> DeviceStages {
        *self.last.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Matches a batch, chunk by chunk over a lane pair.
    fn run(&self, pair: &mut LanePair, queries: &[u32], out: &mut [u32]) -> Result<DeviceStages, DriverError> {
        let w = self.width;
        let mut t = DeviceStages::default();
        for (j, at) in (0..out.len()).step_by(pair.cap).enumerate() {
            let n = pair.cap.min(out.len() - at);
            let lane = &mut pair.lanes[j % LANES];
            finish(lane, out, &mut t)?;
            let words = self.words(n);
            stage(
                &mut lane.pin_in.as_mut_slice()?[..words],
                &queries[at * w..(at + n) * w],
                self.narrow,
                self.stage_threads,
            );
            self.enqueue(lane, at, n, BLOCK)?;
        }
        for lane in pair.lanes.iter_mut() {
            finish(lane, out, &mut t)?;
        }
        Ok(t)
    }

    /// Queues a chunk already in the lane's pinned input: H2D, kernel, D2H, with events between.
    fn enqueue(&self, lane: &mut Lane, at: usize, n: usize, block: u32) -> Result<(), DriverError> {
        let mark = |s: &CudaStream| s.record_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT));
        let words = self.words(n);
        let e0 = mark(&lane.stream)?;
        lane.stream.memcpy_htod(&lane.pin_in.as_slice()?[..words], &mut lane.d_in.slice_mut(..words))?;
        let e1 = mark(&lane.stream)?;
        self.launch(lane, n, block)?;
        let e2 = mark(&lane.stream)?;
        lane.stream.memcpy_dtoh(&lane.d_out.slice(..n), &mut lane.pin_out.as_mut_slice()?[..n])?;
        let e3 = mark(&lane.stream)?;
        lane.pending = Some((at, n, [e0, e1, e2, e3]));
        Ok(())
    }

    /// Launches the kernel on the first `n` query rows of the lane's device input.
    fn launch(&self, lane: &mut Lane, n: usize, block: u32) -> Result<(), DriverError> {
        let n32 = n as u32;
        let cfg = LaunchConfig {
            grid_dim: (n32.div_ceil(block).min(self.grid_max), 1, 1),
            block_dim: (block, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut launch = lane.stream.launch_builder(&self.func);
        launch.arg(&self.image).arg(&lane.d_in).arg(&n32).arg(&mut lane.d_out);
        // SAFETY: match_kernel takes (const u32* image, const qcode* queries, u32 n, u32* out),
        // the argument order pushed here, with qcode the u32 or u16 of the function loaded for
        // `self.narrow`. The image passed image::check, so the kernel reads inside it and inside
        // the n query rows it is given (d_in holds the lane's cap rows of that code width,
        // `words(cap)` words, and every caller passes n <= cap), and writes out[0..n) (d_out
        // holds cap answers). The image is only read, by every lane. Block sizes are BLOCK or
        // one of PROFILE_BLOCKS, all within CUDA's 1024 threads per block.
        unsafe { launch.launch(cfg) }?;
        Ok(())
    }

    /// An idle lane pair with room for `n` queries per chunk (up to the chunk size), or a new one.
    fn take_pair(&self, n: usize) -> Result<LanePair, DriverError> {
        let cap = n.max(MIN_LANE).next_power_of_two().min(self.chunk);
        match self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop() {
            Some(pair) if pair.cap >= cap => return Ok(pair),
            _ => {} // none idle, or too small: dropped, and a larger one made
        }
        let lanes = (0..LANES).map(|_| lane(&self.ctx, cap, self.words(cap))).collect::<Result<_, _>>()?;
        Ok(LanePair { cap, lanes })
    }

    fn give_back(&self, pair: LanePair) {
        self.idle.lock().unwrap_or_else(|p| p.into_inner()).push(pair);
    }

    /// Input words of `n` queries on the bus: two 16-bit codes a word when narrow.
    fn words(&self, n: usize) -> usize {
        if self.narrow {
            (n * self.width).div_ceil(2)
        } else {
            n * self.width
        }
    }

    /// Where the device's time goes on up to one chunk of `queries`, as JSON: the host's copy
    /// into pinned memory (bytes of the caller's u32 codes per second, one thread and the
    /// staging threads), the kernel alone with its data on the device at each block size of
    /// [`PROFILE_BLOCKS`], at each batch size of [`PROFILE_SIZES`] and with the queries sorted
    /// by partition, and the pipeline of H2D, kernel and D2H over both lanes from pinned memory
    /// (the device's rate with transfers, the host's staging apart). Medians of `repeats`.
    pub fn profile(&self, queries: &[u32], repeats: usize) -> Result<serde_json::Value, DriverError> {
        let w = self.width;
        let n = (queries.len() / w).min(self.chunk);
        if n == 0 {
            return Ok(serde_json::json!({"queries": 0}));
        }
        let (q, reps) = (&queries[..n * w], repeats.max(1));
        let mut pair = self.take_pair(n)?;
        let mut staging = serde_json::Map::new();
        for threads in [1, self.stage_threads] {
            let mut secs = Vec::with_capacity(reps);
            for _ in 0..reps {
                let dst = &mut pair.lanes[0].pin_in.as_mut_slice()?[..self.words(n)];
                let t0 = Instant::now();
                stage(dst, q, self.narrow, threads);
                secs.push(t0.elapsed().as_secs_f64());
            }
            staging.insert(threads.to_string(), (4.0 * (n * w) as f64 / median(secs)).into());
        }
        let mut kernel = serde_json::Map::new();
        for block in PROFILE_BLOCKS {
            let s = self.time_kernel(&mut pair.lanes[0], q, block, reps)?;
            kernel.insert(block.to_string(), (n as f64 / s).into());
        }
        let mut by_size = serde_json::Map::new();
        for size in PROFILE_SIZES.into_iter().filter(|&m| m <= n) {
            let s = self.time_kernel(&mut pair.lanes[0], &q[..size * w], BLOCK, reps)?;
            by_size.insert(size.to_string(), s.into());
        }
        let sorted = self.sorted_by_partition(q);
        let sorted_rate = n as f64 / self.time_kernel(&mut pair.lanes[0], &sorted, BLOCK, reps)?;
        let pipeline = self.time_pipeline(&mut pair, q, reps)?;
        self.give_back(pair);
        Ok(serde_json::json!({
            "queries": n,
            "bytes_per_query": self.words(n) * 4 / n,
            "block": BLOCK,
            "staging_bytes_per_s_by_threads": staging,
            "kernel_queries_per_s_by_block": kernel,
            "kernel_queries_per_s_sorted_by_partition": sorted_rate,
            "kernel_s_by_batch": by_size,
            "pipeline_queries_per_s": pipeline,
        }))
    }

    /// Seconds of the kernel alone (CUDA events) on `q`, uploaded once: the median of `reps`.
    fn time_kernel(&self, lane: &mut Lane, q: &[u32], block: u32, reps: usize) -> Result<f64, DriverError> {
        let words = self.words(q.len() / self.width);
        stage(&mut lane.pin_in.as_mut_slice()?[..words], q, self.narrow, self.stage_threads);
        lane.stream.memcpy_htod(&lane.pin_in.as_slice()?[..words], &mut lane.d_in.slice_mut(..words))?;
        let mut secs = Vec::with_capacity(reps);
        for _ in 0..reps {
            let e0 = lane.stream.record_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))?;
            self.launch(lane, q.len() / self.width, block)?;
            let e1 = lane.stream.record_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))?;
            lane.stream.synchronize()?;
            secs.push(f64::from(e0.elapsed_ms(&e1)?) / 1e3);
        }
        Ok(median(secs))
    }

    /// Queries per second of H2D + kernel + D2H over both lanes on chunks of `q` already in
    /// pinned memory, 4 chunks a round: the median round.
    fn time_pipeline(&self, pair: &mut LanePair, q: &[u32], reps: usize) -> Result<f64, DriverError> {
        const CHUNKS: usize = 4;
        let n = q.len() / self.width;
        let words = self.words(n);
        for lane in pair.lanes.iter_mut() {
            stage(&mut lane.pin_in.as_mut_slice()?[..words], q, self.narrow, self.stage_threads);
        }
        let (mut answers, mut t) = (vec![0u32; n], DeviceStages::default());
        let mut rates = Vec::with_capacity(reps);
        for _ in 0..reps {
            let t0 = Instant::now();
            for j in 0..CHUNKS {
                let lane = &mut pair.lanes[j % LANES];
                finish(lane, &mut answers, &mut t)?;
                self.enqueue(lane, 0, n, BLOCK)?;
            }
            for lane in pair.lanes.iter_mut() {
                finish(lane, &mut answers, &mut t)?;
            }
            rates.push((CHUNKS * n) as f64 / t0.elapsed().as_secs_f64());
        }
        Ok(median(rates))
    }

    /// The query rows of `q` ordered by their partition criteria's codes (by the first
    /// criterion if the tree has no partitions), so that neighbouring threads walk one subtree.
    fn sorted_by_partition(&self, q: &[u32]) -> Vec<u32> {
        let w = self.width;
        let crits = if self.partition_criteria.is_empty() { vec![0] } else { self.partition_criteria.clone() };
        let key = |i: usize| crits.iter().map(move |&c| q[i * w + c]);
        let mut rows: Vec<usize> = (0..q.len() / w).collect();
        rows.sort_unstable_by(|&a, &b| key(a).cmp(key(b)));
        rows.iter().flat_map(|&i| q[i * w..(i + 1) * w].iter().copied()).collect()
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Whether every criterion's codes fit 16 bits with one value to spare: queries then cross the
/// bus narrowed, and a code no criterion has (only a caller's own codes can be that large)
/// saturates to 0xFFFF, which is beyond every criterion too and so answers as it would.
pub fn narrow_fits(cardinalities: &[usize]) -> bool {
    cardinalities.iter().all(|&c| c < 1 << 16)
}

/// Copies query codes `src` into pinned `dst` (narrowed to 16 bits, two a word, if `narrow`),
/// split over up to `threads` threads when it is large.
fn stage(dst: &mut [u32], src: &[u32], narrow: bool, threads: usize) {
    let parts = threads.min(src.len() / STAGE_WORDS_PER_THREAD).max(1);
    // an even share of codes per thread, so that no word is split between two of them
    let per = src.len().div_ceil(parts).next_multiple_of(2);
    let copy = |d: &mut [u32], q: &[u32]| if narrow { pack16(d, q) } else { d.copy_from_slice(q) };
    if parts == 1 {
        return copy(dst, src);
    }
    let dst_per = if narrow { per / 2 } else { per };
    std::thread::scope(|s| {
        for (d, q) in dst.chunks_mut(dst_per).zip(src.chunks(per)) {
            s.spawn(move || copy(d, q));
        }
    });
}

/// Two codes a word, the first in the low half (the device reads them as little-endian u16).
fn pack16(dst: &mut [u32], src: &[u32]) {
    let narrow = |v: u32| v.min(0xFFFF);
    let pairs = src.chunks_exact(2); // whole pairs in a loop the compiler vectorises
    let last = pairs.remainder().first().map(|&v| narrow(v));
    for (d, pair) in dst.iter_mut().zip(pairs) {
        *d = narrow(pair[0]) | narrow(pair[1]) << 16;
    }
    if let Some(v) = last {
        dst[src.len() / 2] = v;
    }
}

fn cuda(e: DriverError) -> String {
    format!("CUDA: {e}")
}

/// Compiles the kernel with NVRTC to PTX for a virtual architecture (`compute_90` for Hopper).
/// Needs NVRTC only, no device: the tests compile the kernel on machines without a GPU.
pub fn kernel_ptx(arch: &str) -> Result<cudarc::nvrtc::Ptx, String> {
    kernel_ptx_with(arch, false)
}

/// Like [`kernel_ptx`], for 16-bit query codes if `narrow`.
pub fn kernel_ptx_with(arch: &str, narrow: bool) -> Result<cudarc::nvrtc::Ptx, String> {
    // SAFETY: as in `open`, a dlopen of NVRTC by its usual names.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(NO_NVRTC.into());
    }
    let mut options = vec![format!("--gpu-architecture={arch}")];
    if narrow {
        options.push("-DQCODE=unsigned short".into());
    }
    let opts = cudarc::nvrtc::CompileOptions { options, ..Default::default() };
    cudarc::nvrtc::compile_ptx_with_opts(KERNEL_SOURCE, opts)
        .map_err(|e| format!("NVRTC could not compile the gpu matcher's kernel: {e}"))
}

/// Whether a thread waiting for the device sleeps (`OFFLOAD_GPU_SYNC=block`) rather than spins
/// (the default, CUDA's choice when a process has fewer contexts than cores): spinning answers a
/// few microseconds sooner, but each waiting thread holds a core that the host side of the
/// service (clients, workers: the encoding) may need more. Read when the device is opened.
fn blocking_sync() -> bool {
    std::env::var("OFFLOAD_GPU_SYNC").is_ok_and(|v| v == "block")
}

/// Device 0, opened once per process, with the kernel for each query-code width loaded the
/// first time a matcher needs it.
struct Loaded {
    ctx: Arc<CudaContext>,
    device: DeviceInfo,
    blocking: bool,
    /// The kernel for 32-bit and for 16-bit codes, as loaded.
    funcs: [Option<CudaFunction>; 2],
}

/// What a gpu matcher runs with: the device and the kernel for its code width.
struct Kernel {
    ctx: Arc<CudaContext>,
    device: DeviceInfo,
    blocking: bool,
    func: CudaFunction,
}

/// The device and the kernel for `narrow` codes, shared by every gpu matcher of the process:
/// NVRTC and the driver's compile of the PTX take a few tenths of a second, which a service
/// reloading rules, or a test compiling hundreds of small rule sets, should pay once.
fn kernel(narrow: bool) -> Result<Kernel, String> {
    static LOADED: Mutex<Option<Loaded>> = Mutex::new(None);
    let mut guard = LOADED.lock().unwrap_or_else(|p| p.into_inner());
    let loaded = match guard.as_mut() {
        Some(l) => l,
        None => {
            let ctx = open()?;
            let blocking = blocking_sync();
            if blocking {
                ctx.set_blocking_synchronize().map_err(cuda)?;
            }
            let device = info(&ctx)?;
            guard.insert(Loaded { ctx, device, blocking, funcs: [None, None] })
        }
    };
    let slot = &mut loaded.funcs[usize::from(narrow)];
    let func = match slot {
        Some(f) => f.clone(),
        None => slot.insert(compile(&loaded.ctx, loaded.device.compute_capability, narrow)?).clone(),
    };
    Ok(Kernel { ctx: loaded.ctx.clone(), device: loaded.device.clone(), blocking: loaded.blocking, func })
}

/// Compiles the kernel for the device's architecture and loads it.
fn compile(ctx: &Arc<CudaContext>, (major, minor): (i32, i32), narrow: bool) -> Result<CudaFunction, String> {
    let ptx = kernel_ptx_with(&format!("compute_{major}{minor}"), narrow)?;
    let module = ctx.load_module(ptx).map_err(|e| format!("CUDA: loading the kernel: {e}"))?;
    module.load_function("match_kernel").map_err(|e| format!("CUDA: the kernel has no match_kernel: {e}"))
}

/// A stream with pinned and device buffers for `cap` queries of `words` input words.
fn lane(ctx: &Arc<CudaContext>, cap: usize, words: usize) -> Result<Lane, DriverError> {
    let stream = ctx.new_stream()?;
    // SAFETY: alloc_pinned leaves the memory unset; every read of these buffers reads only
    // what this module wrote first (a chunk's queries) or what a finished copy wrote (answers).
    // Write-combined memory suits the queries (written by the host, read by the device only);
    // answers are read by the host, so they get ordinary cached pinned memory.
    let pin_in = unsafe { ctx.alloc_pinned::<u32>(words) }?;
    let pin_out = unsafe { ctx.alloc_pinned_with_flags::<u32>(cap, 0) }?;
    let d_in = stream.alloc_zeros::<u32>(words)?;
    let d_out = stream.alloc_zeros::<u32>(cap)?;
    Ok(Lane { stream, pin_in, pin_out, d_in, d_out, pending: None })
}

/// Waits for the lane's chunk in flight, if any, and moves its answers and stage times out.
fn finish(lane: &mut Lane, out: &mut [u32], t: &mut DeviceStages) -> Result<(), DriverError> {
    let Some((at, n, [e0, e1, e2, e3])) = lane.pending.take() else { return Ok(()) };
    lane.stream.synchronize()?;
    out[at..at + n].copy_from_slice(&lane.pin_out.as_slice()?[..n]);
    t.h2d_s += f64::from(e0.elapsed_ms(&e1)?) / 1e3;
    t.kernel_s += f64::from(e1.elapsed_ms(&e2)?) / 1e3;
    t.d2h_s += f64::from(e2.elapsed_ms(&e3)?) / 1e3;
    t.chunks += 1;
    t.queries += n;
    Ok(())
}

impl Matcher for GpuMatcher {
    fn name(&self) -> &'static str {
        "gpu"
    }
    fn width(&self) -> usize {
        self.width
    }
    fn match_batch(&self, queries: &[u32], out: &mut [u32]) {
        self.match_batch_staged(queries, out);
    }
    fn match_batch_staged(&self, queries: &[u32], out: &mut [u32]) -> Option<DeviceStages> {
        assert_eq!(queries.len(), out.len() * self.width, "queries must hold width codes per answer");
        if out.is_empty() {
            return Some(DeviceStages::default());
        }
        // The Matcher contract has no error path: a device that fails mid-batch (lost, out of
        // memory) stops the caller with the driver's reason rather than answering wrongly.
        let fail = |e: DriverError| -> ! { panic!("gpu matcher: the device failed during a batch: {e}") };
        let mut pair = self.take_pair(out.len()).unwrap_or_else(|e| fail(e));
        let t = self.run(&mut pair, queries, out).unwrap_or_else(|e| fail(e));
        self.give_back(pair);
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = t;
        Some(t)
    }
    fn on_device(&self) -> bool {
        true
    }
    fn device_profile(&self, queries: &[u32], repeats: usize) -> Option<serde_json::Value> {
        Some(self.profile(queries, repeats).unwrap_or_else(|e| serde_json::json!({"error": format!("CUDA: {e}")})))
    }
    fn memory_bytes(&self) -> usize {
        self.image_words * 4
    }
    fn stats(&self) -> serde_json::Value {
        serde_json::json!({
            "device": self.device,
            "image_words": self.image_words,
            "chunk": self.chunk,
            "lanes": LANES,
            "lane_pairs": self.idle.lock().unwrap_or_else(|p| p.into_inner()).len(),
            "stage_threads": self.stage_threads,
            "query_bits": if self.narrow { 16 } else { 32 },
            "sync": if self.blocking { "block" } else { "spin" },
            "last_batch": self.last_stages(),
            "tree": self.tree,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without a GPU (every CI machine), asking for one gives the reason, never a panic.
    /// NVRTC compiles the kernel (no device needed) where NVRTC is installed; CI gets it from
    /// the nvidia-cuda-nvrtc wheel through the Python test of the same name.
    #[test]
    fn nvrtc_compiles_the_kernel_where_present() {
        match kernel_ptx("compute_90") {
            Ok(ptx) => assert!(ptx.to_src().contains(".entry match_kernel")),
            Err(why) => assert!(why.starts_with("no NVRTC"), "{why}"),
        }
    }

    #[test]
    fn nvrtc_compiles_the_narrow_kernel_where_present() {
        match kernel_ptx_with("compute_90", true) {
            Ok(ptx) => assert!(ptx.to_src().contains("ld.global.nc.u16") || ptx.to_src().contains(".u16")),
            Err(why) => assert!(why.starts_with("no NVRTC"), "{why}"),
        }
    }

    /// Staging narrows codes two a word, the first low, saturating codes beyond 16 bits, and
    /// splits over threads on whole words: the same words as one plain pass, odd lengths too.
    #[test]
    fn staging_narrows_and_splits_like_one_pass() {
        let n = 2 * STAGE_WORDS_PER_THREAD + 7;
        let src: Vec<u32> = (0..n as u32).map(|i| i.wrapping_mul(2_654_435_761) >> (i % 17)).collect();
        let want: Vec<u32> =
            src.chunks(2).map(|p| p[0].min(0xFFFF) | p.get(1).map_or(0, |&v| v.min(0xFFFF)) << 16).collect();
        for threads in [1, 3, 8] {
            let mut dst = vec![0u32; n.div_ceil(2)];
            stage(&mut dst, &src, true, threads);
            assert_eq!(dst, want, "narrow, {threads} threads");
            let mut wide = vec![0u32; n];
            stage(&mut wide, &src, false, threads);
            assert_eq!(wide, src, "wide, {threads} threads");
        }
        assert!(narrow_fits(&[1, 65_535]) && !narrow_fits(&[2, 65_536]) && narrow_fits(&[]));
    }

    #[test]
    fn no_gpu_is_said_cleanly() {
        match available() {
            Ok(d) => eprintln!("GPU present: {}", d.name),
            Err(why) => assert!(why.starts_with("no GPU") || why.starts_with("no NVRTC"), "{why}"),
        }
    }
}
