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

use super::{image_of, KERNEL_SOURCE};
use crate::encode::EncodedRules;
use crate::matcher::{DeviceStages, Matcher};
use cudarc::driver::{
    sys, CudaContext, CudaEvent, CudaFunction, CudaSlice, CudaStream, DriverError, LaunchConfig, PinnedHostSlice,
    PushKernelArg,
};
use std::sync::{Arc, Mutex};

/// Queries per chunk (one transfer, one launch): about 1 ms of kernel at 1 B queries/s, so a
/// launch (5-10 µs) and a copy's fixed cost stay small, while two lanes still overlap.
pub const DEFAULT_CHUNK: usize = 1 << 20;
const LANES: usize = 2;
/// Threads per block; blocks per SM at most [`BLOCKS_PER_SM`] (the kernel strides the grid).
const BLOCK: u32 = 256;
const BLOCKS_PER_SM: u32 = 32;

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
    let d = |e: DriverError| format!("CUDA: {e}");
    Ok(DeviceInfo {
        name: ctx.name().map_err(d)?,
        compute_capability: ctx.compute_capability().map_err(d)?,
        memory_bytes: ctx.total_mem().map_err(d)?,
        multiprocessors: ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT).map_err(d)?,
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
    image: CudaSlice<u32>,
    grid_max: u32,
    /// Lane pairs not in use. A batch takes one, or makes one when all are busy, so that k
    /// threads (the service's kernel executors) match k batches at once on 2k streams.
    idle: Mutex<Vec<Vec<Lane>>>,
    last: Mutex<DeviceStages>,
}

impl GpuMatcher {
    pub fn new(rules: &EncodedRules, cardinalities: &[usize]) -> Result<Self, String> {
        Self::with_chunk(rules, cardinalities, DEFAULT_CHUNK)
    }

    /// Like [`Self::new`] with `chunk` queries per transfer.
    pub fn with_chunk(rules: &EncodedRules, cardinalities: &[usize], chunk: usize) -> Result<Self, String> {
        let ctx = open()?;
        let device = info(&ctx)?;
        let (image, tree) = image_of(rules, cardinalities)?;
        let func = compile(&ctx, device.compute_capability)?;
        let (width, chunk) = (rules.width.max(1), chunk.clamp(1, u32::MAX as usize / rules.width.max(1)));
        let upload = ctx.new_stream().map_err(cuda)?;
        let d_image = upload.clone_htod(&image).map_err(cuda)?;
        upload.synchronize().map_err(cuda)?;
        let grid_max = (device.multiprocessors.max(1) as u32) * BLOCKS_PER_SM;
        let first = lanes(&ctx, chunk, width).map_err(cuda)?;
        Ok(GpuMatcher {
            width,
            chunk,
            image_words: image.len(),
            device,
            tree,
            ctx,
            func,
            image: d_image,
            grid_max,
            idle: Mutex::new(vec![first]),
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
    fn run(&self, lanes: &mut [Lane], queries: &[u32], out: &mut [u32]) -> Result<DeviceStages, DriverError> {
        let w = self.width;
        let mut t = DeviceStages::default();
        for (j, at) in (0..out.len()).step_by(self.chunk).enumerate() {
            let n = self.chunk.min(out.len() - at);
            let lane = &mut lanes[j % LANES];
            finish(lane, out, &mut t)?;
            lane.pin_in.as_mut_slice()?[..n * w].copy_from_slice(&queries[at * w..(at + n) * w]);
            let mark = |s: &CudaStream| s.record_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT));
            let e0 = mark(&lane.stream)?;
            lane.stream.memcpy_htod(&lane.pin_in.as_slice()?[..n * w], &mut lane.d_in.slice_mut(..n * w))?;
            let e1 = mark(&lane.stream)?;
            let n32 = n as u32;
            let cfg = LaunchConfig {
                grid_dim: (n32.div_ceil(BLOCK).min(self.grid_max), 1, 1),
                block_dim: (BLOCK, 1, 1),
                shared_mem_bytes: 0,
            };
            let mut launch = lane.stream.launch_builder(&self.func);
            launch.arg(&self.image).arg(&lane.d_in).arg(&n32).arg(&mut lane.d_out);
            // SAFETY: match_kernel takes (const u32* image, const u32* queries, u32 n, u32* out),
            // the argument order and types pushed here. The image passed image::check, so the
            // kernel reads inside it and inside the n query rows it is given (d_in holds chunk
            // rows, n <= chunk), and writes out[0..n) (d_out holds chunk answers). The image is
            // only read, by every lane.
            unsafe { launch.launch(cfg) }?;
            let e2 = mark(&lane.stream)?;
            lane.stream.memcpy_dtoh(&lane.d_out.slice(..n), &mut lane.pin_out.as_mut_slice()?[..n])?;
            let e3 = mark(&lane.stream)?;
            lane.pending = Some((at, n, [e0, e1, e2, e3]));
        }
        for lane in lanes.iter_mut() {
            finish(lane, out, &mut t)?;
        }
        Ok(t)
    }
}

fn cuda(e: DriverError) -> String {
    format!("CUDA: {e}")
}

/// Compiles the kernel with NVRTC to PTX for a virtual architecture (`compute_90` for Hopper).
/// Needs NVRTC only, no device: the tests compile the kernel on machines without a GPU.
pub fn kernel_ptx(arch: &str) -> Result<cudarc::nvrtc::Ptx, String> {
    // SAFETY: as in `open`, a dlopen of NVRTC by its usual names.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(NO_NVRTC.into());
    }
    let opts =
        cudarc::nvrtc::CompileOptions { options: vec![format!("--gpu-architecture={arch}")], ..Default::default() };
    cudarc::nvrtc::compile_ptx_with_opts(KERNEL_SOURCE, opts)
        .map_err(|e| format!("NVRTC could not compile the gpu matcher's kernel: {e}"))
}

/// Compiles the kernel for the device's architecture and loads it.
fn compile(ctx: &Arc<CudaContext>, (major, minor): (i32, i32)) -> Result<CudaFunction, String> {
    let ptx = kernel_ptx(&format!("compute_{major}{minor}"))?;
    let module = ctx.load_module(ptx).map_err(|e| format!("CUDA: loading the kernel: {e}"))?;
    module.load_function("match_kernel").map_err(|e| format!("CUDA: the kernel has no match_kernel: {e}"))
}

/// A lane pair: two streams, each with buffers for one chunk.
fn lanes(ctx: &Arc<CudaContext>, chunk: usize, width: usize) -> Result<Vec<Lane>, DriverError> {
    (0..LANES).map(|_| lane(ctx, chunk, width)).collect()
}

fn lane(ctx: &Arc<CudaContext>, chunk: usize, width: usize) -> Result<Lane, DriverError> {
    let stream = ctx.new_stream()?;
    // SAFETY: alloc_pinned leaves the memory unset; every read of these buffers reads only
    // what this module wrote first (a chunk's queries) or what a finished copy wrote (answers).
    // Write-combined memory suits the queries (written by the host, read by the device only);
    // answers are read by the host, so they get ordinary cached pinned memory.
    let pin_in = unsafe { ctx.alloc_pinned::<u32>(chunk * width) }?;
    let pin_out = unsafe { ctx.alloc_pinned_with_flags::<u32>(chunk, 0) }?;
    let d_in = stream.alloc_zeros::<u32>(chunk * width)?;
    let d_out = stream.alloc_zeros::<u32>(chunk)?;
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
        let idle = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
        // The Matcher contract has no error path: a device that fails mid-batch (lost, out of
        // memory) stops the caller with the driver's reason rather than answering wrongly.
        let fail = |e: DriverError| -> ! { panic!("gpu matcher: the device failed during a batch: {e}") };
        let mut pair = idle.map_or_else(|| lanes(&self.ctx, self.chunk, self.width), Ok).unwrap_or_else(|e| fail(e));
        let t = self.run(&mut pair, queries, out).unwrap_or_else(|e| fail(e));
        self.idle.lock().unwrap_or_else(|p| p.into_inner()).push(pair);
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = t;
        Some(t)
    }
    fn on_device(&self) -> bool {
        true
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
    fn no_gpu_is_said_cleanly() {
        match available() {
            Ok(d) => eprintln!("GPU present: {}", d.name),
            Err(why) => assert!(why.starts_with("no GPU") || why.starts_with("no NVRTC"), "{why}"),
        }
    }
}
