//! io_uring: the cost of a NOP round trip through the rings, and 4 KiB O_DIRECT random reads of
//! a file in a directory the user chooses, at queue depths 1..128 (IOPS and latency per depth).

use crate::measure::{summarise, time_op, Budget};
use io_uring::{opcode, types, IoUring};
use memmap2::MmapMut;
use serde::Serialize;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const BLOCK: usize = 4096;

#[derive(Debug, Clone, Serialize)]
pub struct NopCost {
    /// One NOP submitted and waited for: the floor of any io_uring operation (s).
    pub single_s: f64,
    /// Per NOP when 64 are submitted with one system call (s).
    pub batched_s: f64,
}

/// NOP cost, batch of 1 and of 64.
pub fn nop(budget: Budget) -> Result<NopCost, String> {
    let mut ring = IoUring::new(64).map_err(|e| format!("io_uring_setup: {e}"))?;
    let mut err = None;
    let mut run = |batch: usize| {
        let p = time_op(batch as u64, budget, || {
            for _ in 0..batch {
                // SAFETY: a NOP references no memory, so nothing must outlive the submission.
                let pushed = unsafe { ring.submission().push(&opcode::Nop::new().build()) };
                if pushed.is_err() {
                    err.get_or_insert("submission queue full".to_string());
                }
            }
            if let Err(e) = ring.submit_and_wait(batch) {
                err.get_or_insert(e.to_string());
            }
            ring.completion().for_each(drop);
        });
        p.median_s / batch as f64
    };
    let out = NopCost { single_s: run(1), batched_s: run(64) };
    match err {
        Some(e) => Err(format!("io_uring NOP: {e}")),
        None => Ok(out),
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct DepthPoint {
    pub queue_depth: usize,
    pub reads: u64,
    pub iops: f64,
    pub bandwidth_bps: f64,
    pub mean_s: f64,
    pub p50_s: f64,
    pub p90_s: f64,
    pub p99_s: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct RandomReads {
    pub file: PathBuf,
    pub file_bytes: u64,
    pub block_bytes: usize,
    pub seconds_per_depth: f64,
    pub points: Vec<DepthPoint>,
}

/// A file of `bytes` non-zero bytes (holes would be answered without touching the disk),
/// removed when dropped.
struct ProbeFile(PathBuf);

impl ProbeFile {
    fn create(dir: &Path, bytes: u64) -> Result<ProbeFile, String> {
        let path = dir.join(format!("offload-probe-{}.dat", std::process::id()));
        let f = ProbeFile(path.clone());
        let mut file = std::fs::File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut chunk = vec![0u8; 1 << 20];
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for b in chunk.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8 | 1;
        }
        for _ in 0..bytes.div_ceil(chunk.len() as u64) {
            file.write_all(&chunk).map_err(|e| format!("{}: {e}", path.display()))?;
        }
        file.sync_all().map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(f)
    }
}

impl Drop for ProbeFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// 4 KiB random reads with O_DIRECT through io_uring, each depth for `per_depth`.
pub fn random_reads(dir: &Path, file_bytes: u64, depths: &[usize], per_depth: Duration) -> Result<RandomReads, String> {
    let file = ProbeFile::create(dir, file_bytes)?;
    let f =
        std::fs::OpenOptions::new().read(true).custom_flags(nix::fcntl::OFlag::O_DIRECT.bits()).open(&file.0).map_err(
            |e| {
                format!(
                    "{}: cannot open with O_DIRECT ({e}); choose a directory on a disk filesystem (not tmpfs)",
                    dir.display()
                )
            },
        )?;
    let blocks = file_bytes / BLOCK as u64;
    let qd_max = depths.iter().copied().max().unwrap_or(1).max(1);
    // Completions are handled only when this thread enters the kernel (no inter-processor
    // interrupt per completion), as fio does on kernels that support it; plain ring otherwise.
    let entries = qd_max.next_power_of_two() as u32;
    let mut ring = IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(entries)
        .or_else(|_| IoUring::new(entries))
        .map_err(|e| format!("io_uring_setup: {e}"))?;
    // Page-aligned buffers, one per slot, as O_DIRECT requires.
    let mut buffers = MmapMut::map_anon(qd_max * BLOCK).map_err(|e| e.to_string())?;
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    let mut points = Vec::new();
    for &qd in depths {
        let run = match read_at_depth(&mut ring, &f, &mut buffers, blocks, qd, per_depth, &mut rng) {
            Ok(run) => run,
            Err(e) => {
                std::mem::forget(buffers); // reads may still land there: never unmap it
                return Err(e);
            }
        };
        if let Some(e) = run.failure {
            return Err(format!("{}: {e}", file.0.display()));
        }
        points.push(depth_point(qd, run.latencies, run.reads, run.elapsed_s, per_depth)?);
    }
    Ok(RandomReads {
        file: file.0.clone(),
        file_bytes,
        block_bytes: BLOCK,
        seconds_per_depth: per_depth.as_secs_f64(),
        points,
    })
}

/// What one queue depth's reads gave.
struct DepthRun {
    /// Latency of each read completed before the deadline (s).
    latencies: Vec<f64>,
    reads: u64,
    /// From the first submission until the last read in flight completed (s).
    elapsed_s: f64,
    /// The first read that did not return a whole block, if any (the depth then stops early).
    failure: Option<String>,
}

/// Keeps `qd` random 4 KiB reads of `f` (`blocks` blocks) in flight for `per_depth`, slot `i`
/// reading into block `i` of `buffers`, then waits for those still in flight. An `Err` means
/// the ring failed with reads possibly still in flight: the caller must then never unmap
/// `buffers`.
fn read_at_depth(
    ring: &mut IoUring,
    f: &std::fs::File,
    buffers: &mut MmapMut,
    blocks: u64,
    qd: usize,
    per_depth: Duration,
    rng: &mut u64,
) -> Result<DepthRun, String> {
    let mut started = vec![Instant::now(); qd];
    let mut lat = Vec::new();
    let (mut in_flight, mut done) = (0usize, 0u64);
    let mut failure = None;
    let t0 = Instant::now();
    let mut free: Vec<usize> = (0..qd).collect();
    loop {
        let stop = failure.is_some() || t0.elapsed() >= per_depth;
        if !stop {
            while let Some(slot) = free.pop() {
                *rng ^= *rng << 13;
                *rng ^= *rng >> 7;
                *rng ^= *rng << 17;
                let offset = (*rng % blocks) * BLOCK as u64;
                let buf = buffers[slot * BLOCK..].as_mut_ptr();
                let e = opcode::Read::new(types::Fd(f.as_raw_fd()), buf, BLOCK as u32)
                    .offset(offset)
                    .build()
                    .user_data(slot as u64);
                started[slot] = Instant::now();
                // SAFETY: the read targets slot `slot` of `buffers` (4 KiB, in bounds) and
                // `f`; both outlive this function, which returns Ok only after every submitted
                // read has completed (the loop drains `in_flight` to 0); if the ring fails it
                // returns Err and the caller leaks `buffers` rather than unmapping it.
                if unsafe { ring.submission().push(&e) }.is_err() {
                    free.push(slot);
                    break;
                }
                in_flight += 1;
            }
        }
        if in_flight == 0 {
            break;
        }
        if let Err(e) = ring.submit_and_wait(1) {
            if e.raw_os_error() == Some(nix::libc::EINTR) {
                continue;
            }
            return Err(format!("io_uring_enter: {e}"));
        }
        for cqe in ring.completion() {
            let slot = cqe.user_data() as usize;
            in_flight -= 1;
            free.push(slot);
            if cqe.result() != BLOCK as i32 {
                failure.get_or_insert(format!("a 4 KiB read returned {}", cqe.result()));
            } else if !stop {
                lat.push(started[slot].elapsed().as_secs_f64());
                done += 1;
            }
        }
    }
    Ok(DepthRun { latencies: lat, reads: done, elapsed_s: t0.elapsed().as_secs_f64(), failure })
}

/// The IOPS, bandwidth and latency summary of `reads` reads at queue depth `qd` in
/// `elapsed` seconds, `lat` their latencies; an error if none completed.
fn depth_point(
    qd: usize,
    mut lat: Vec<f64>,
    reads: u64,
    elapsed: f64,
    per_depth: Duration,
) -> Result<DepthPoint, String> {
    let mean = lat.iter().sum::<f64>() / lat.len().max(1) as f64;
    if lat.is_empty() {
        return Err(format!("no read completed within {per_depth:?} at queue depth {qd}"));
    }
    let s = summarise(BLOCK as u64, &mut lat.clone());
    lat.sort_by(f64::total_cmp);
    let p99 = lat.get(((lat.len() as f64 - 1.0) * 0.99).round() as usize).copied().unwrap_or(0.0);
    Ok(DepthPoint {
        queue_depth: qd,
        reads,
        iops: reads as f64 / elapsed,
        bandwidth_bps: reads as f64 * BLOCK as f64 / elapsed,
        mean_s: mean,
        p50_s: s.median_s,
        p90_s: s.p90_s,
        p99_s: p99,
    })
}
