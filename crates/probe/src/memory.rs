//! Memory: the CPU analog of the seed's staging losses. Allocation and first touch per page,
//! copies into a fresh mapping (allocate + fault + copy, what a naive staging buffer costs),
//! into a prefaulted buffer, and into a locked (pinned) buffer; memcpy bandwidth by size.

use crate::measure::{sizes, summarise, time_op, Budget, Channel};
use memmap2::MmapMut;
use std::hint::black_box;
use std::time::Instant;

pub const PAGE: usize = 4096;
/// Copies into warm buffers are fitted from this size up: past the last-level cache of common
/// servers (32 MiB), so B is DRAM bandwidth. The quick mode stops below it and fits nothing.
const BEYOND_CACHE: u64 = 32 << 20;

/// memcpy between two prefaulted buffers, `lo..=hi` bytes.
pub fn memcpy(budget: Budget, lo: u64, hi: u64) -> Channel {
    let src = vec![7u8; hi as usize];
    let mut dst = vec![0u8; hi as usize];
    let points = sizes(lo, hi)
        .into_iter()
        .map(|n| {
            let n = n as usize;
            time_op(n as u64, budget, || {
                dst[..n].copy_from_slice(black_box(&src[..n]));
                black_box(&mut dst);
            })
        })
        .collect();
    Channel::fitted_from("memory/memcpy", "copy n bytes between two prefaulted heap buffers", points, BEYOND_CACHE)
}

/// Where a copy lands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// A new anonymous mapping per copy: mmap, a page fault per 4 KiB, munmap.
    Fresh,
    /// One mapping, touched beforehand.
    Prefaulted,
    /// One mapping, touched and locked in RAM (mlock): the CPU side of "pinned" memory.
    Locked,
}

impl Target {
    pub fn name(self) -> &'static str {
        match self {
            Target::Fresh => "memory/copy-fresh",
            Target::Prefaulted => "memory/copy-prefaulted",
            Target::Locked => "memory/copy-locked",
        }
    }
}

fn touched(n: usize) -> std::io::Result<MmapMut> {
    let mut m = MmapMut::map_anon(n.max(1))?;
    for i in (0..n).step_by(PAGE) {
        m[i] = 1;
    }
    Ok(m)
}

/// Copies of `lo..=hi` bytes into `target`. A locked target that the system refuses (the
/// RLIMIT_MEMLOCK limit) is an error naming the limit.
pub fn copy_into(target: Target, budget: Budget, lo: u64, hi: u64) -> Result<Channel, String> {
    let src = vec![7u8; hi as usize];
    let mut points = Vec::new();
    let mut keep = match target {
        Target::Fresh => None,
        _ => Some(touched(hi as usize).map_err(|e| format!("mapping {hi} bytes: {e}"))?),
    };
    if target == Target::Locked {
        if let Some(m) = &keep {
            m.lock().map_err(|e| format!("mlock of {hi} bytes refused ({e}); raise `ulimit -l` or probe less"))?;
        }
    }
    for n in sizes(lo, hi) {
        let n = n as usize;
        let p = match &mut keep {
            Some(m) => time_op(n as u64, budget, || {
                m[..n].copy_from_slice(black_box(&src[..n]));
                black_box(&mut *m);
            }),
            None => {
                let mut err = None;
                let p = time_op(n as u64, budget, || match MmapMut::map_anon(n) {
                    Ok(mut m) => {
                        m.copy_from_slice(black_box(&src[..n]));
                        black_box(&mut m);
                    }
                    Err(e) => err = Some(e),
                });
                if let Some(e) = err {
                    return Err(format!("mapping {n} bytes: {e}"));
                }
                p
            }
        };
        points.push(p);
    }
    let op = match target {
        Target::Fresh => "mmap a new anonymous region of n bytes, copy n bytes into it, munmap",
        Target::Prefaulted => "copy n bytes into a mapping touched beforehand",
        Target::Locked => "copy n bytes into a mapping touched and locked (mlock) beforehand",
    };
    let from = if target == Target::Fresh { 0 } else { BEYOND_CACHE };
    Ok(Channel::fitted_from(target.name(), op, points, from))
}

/// Allocation and first touch: map n bytes and write one byte per page (the map is timed, the
/// unmap is not). The fitted bandwidth gives the cost per page: 4096 / B.
pub fn first_touch(budget: Budget, lo: u64, hi: u64) -> Result<Channel, String> {
    let mut points = Vec::new();
    for n in sizes(lo.max(PAGE as u64), hi) {
        let mut per_op = Vec::with_capacity(budget.samples);
        for _ in 0..budget.samples.max(1) {
            let t = Instant::now();
            let m = touched(n as usize).map_err(|e| format!("mapping {n} bytes: {e}"))?;
            per_op.push(t.elapsed().as_secs_f64());
            drop(black_box(m));
        }
        points.push(summarise(n, &mut per_op));
    }
    Ok(Channel::new("memory/alloc-first-touch", "mmap n bytes and write one byte per 4 KiB page", points))
}
