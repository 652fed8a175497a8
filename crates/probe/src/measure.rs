//! Timing discipline shared by every probe: warm up, batch tiny operations so that one timed
//! sample lasts at least `min_sample`, take several samples, report the median and p10/p90 of
//! the time per operation.

use crate::fit::{fit, Fit};
use serde::Serialize;
use std::time::{Duration, Instant};

/// One payload size of one channel.
#[derive(Debug, Clone, Serialize)]
pub struct Point {
    pub bytes: u64,
    /// Time per operation (s): median, 10th and 90th percentile over the samples.
    pub median_s: f64,
    pub p10_s: f64,
    pub p90_s: f64,
    /// Mean time per operation over all samples (what fixed-count tools such as libzmq's
    /// perf programs report; above the median when a noisy machine stalls some samples).
    pub mean_s: f64,
    /// Effective bandwidth at the median (bytes/s).
    pub bandwidth_bps: f64,
    pub samples: usize,
}

/// A measured channel: its points and the fitted cost model.
#[derive(Debug, Clone, Serialize)]
pub struct Channel {
    /// e.g. `memory/copy-prefaulted`, `ipc/pipe`.
    pub name: String,
    /// What one operation is and how its bytes are counted.
    pub operation: String,
    pub points: Vec<Point>,
    pub fit: Option<Fit>,
    /// The fit uses the points from this size up.
    pub fit_from_bytes: u64,
}

impl Channel {
    pub fn new(name: &str, operation: &str, points: Vec<Point>) -> Channel {
        Channel::fitted_from(name, operation, points, 0)
    }

    /// Fits only the points of at least `min_bytes`: copies that fit in the caches run at
    /// cache speed, which a single L + n/B cannot describe together with DRAM-bound copies.
    pub fn fitted_from(name: &str, operation: &str, points: Vec<Point>, min_bytes: u64) -> Channel {
        let xy: Vec<(f64, f64)> =
            points.iter().filter(|p| p.bytes >= min_bytes).map(|p| (p.bytes as f64, p.median_s)).collect();
        Channel { name: name.into(), operation: operation.into(), fit: fit(&xy), points, fit_from_bytes: min_bytes }
    }

    /// The point measured at `bytes`, if any.
    pub fn at(&self, bytes: u64) -> Option<&Point> {
        self.points.iter().find(|p| p.bytes == bytes)
    }
}

/// How long and how often to measure.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    pub min_sample: Duration,
    pub samples: usize,
    /// Exactly this many operations per sample, after one warm-up operation, instead of as
    /// many as fill `min_sample`: a reference tool's fixed-count protocol, to compare with it.
    pub ops: Option<u64>,
}

impl Budget {
    pub const QUICK: Budget = Budget { min_sample: Duration::from_micros(500), samples: 5, ops: None };
    pub const FULL: Budget = Budget { min_sample: Duration::from_millis(2), samples: 11, ops: None };

    /// One sample of exactly `ops` operations.
    pub fn fixed(ops: u64) -> Budget {
        Budget { min_sample: Duration::ZERO, samples: 1, ops: Some(ops.max(1)) }
    }
}

/// Times `op` (which performs one operation of `bytes` bytes): a warm-up, then `samples`
/// samples of enough repetitions to last `min_sample` each.
pub fn time_op(bytes: u64, budget: Budget, mut op: impl FnMut()) -> Point {
    // Warm-up, and a first estimate of the repetitions one sample needs.
    let t = Instant::now();
    op();
    let one = t.elapsed().max(Duration::from_nanos(20));
    let reps = budget
        .ops
        .unwrap_or_else(|| (budget.min_sample.as_secs_f64() / one.as_secs_f64()).ceil().clamp(1.0, 1e7) as u64);
    let mut per_op: Vec<f64> = (0..budget.samples.max(1))
        .map(|_| {
            let t = Instant::now();
            for _ in 0..reps {
                op();
            }
            t.elapsed().as_secs_f64() / reps as f64
        })
        .collect();
    summarise(bytes, &mut per_op)
}

/// Median and p10/p90 of per-operation times measured some other way (e.g. each sample needs
/// fresh state that must not be timed).
pub fn summarise(bytes: u64, per_op: &mut [f64]) -> Point {
    let mean_s = per_op.iter().sum::<f64>() / per_op.len().max(1) as f64;
    per_op.sort_by(f64::total_cmp);
    let q = |x: f64| per_op[((per_op.len() - 1) as f64 * x).round() as usize];
    let median_s = q(0.5);
    Point {
        bytes,
        median_s,
        p10_s: q(0.1),
        p90_s: q(0.9),
        mean_s,
        bandwidth_bps: if median_s > 0.0 { bytes as f64 / median_s } else { 0.0 },
        samples: per_op.len(),
    }
}

/// Payload sizes from `lo` to `hi` bytes in powers of two.
pub fn sizes(lo: u64, hi: u64) -> Vec<u64> {
    std::iter::successors(Some(lo.max(1)), |&n| n.checked_mul(2)).take_while(|&n| n <= hi).collect()
}

/// The CPUs a two-party probe runs on: the first two this process may use, so the two sides
/// of a channel always sit on different cores (`None` on a one-CPU machine: then both share it).
/// Read once, before any probe pins a thread (threads inherit their creator's CPU set).
pub fn cpu_pair() -> Option<(usize, usize)> {
    static PAIR: std::sync::OnceLock<Option<(usize, usize)>> = std::sync::OnceLock::new();
    *PAIR.get_or_init(|| {
        let set = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).ok()?;
        let mut allowed = (0..nix::sched::CpuSet::count()).filter(|&c| set.is_set(c).unwrap_or(false));
        Some((allowed.next()?, allowed.next()?))
    })
}

/// Pins the calling thread to `cpu` (ignored when `None` or refused).
pub fn pin_current_thread(cpu: Option<usize>) {
    if let Some(c) = cpu {
        let mut set = nix::sched::CpuSet::new();
        if set.set(c).is_ok() {
            let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set);
        }
    }
}

/// Runs `f` with the calling thread pinned to `cpu`, then restores its previous CPU set.
pub fn with_pinned<T>(cpu: Option<usize>, f: impl FnOnce() -> T) -> T {
    let me = nix::unistd::Pid::from_raw(0);
    let before = nix::sched::sched_getaffinity(me).ok();
    pin_current_thread(cpu);
    let out = f();
    if let (Some(set), Some(_)) = (before, cpu) {
        let _ = nix::sched::sched_setaffinity(me, &set);
    }
    out
}
