//! The shared-memory channel between the host and its device (the MMIO/DMA link): one memfd
//! mapped by both sides, its registers and payload areas, and the futex wait/wake the two sides
//! ring each other with. The protocol over it is told in `device/mod.rs`.

use crate::error::{Error, Result};
use memmap2::MmapMut;
use std::fs::File;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

pub(super) const MAGIC: u64 = u64::from_le_bytes(*b"OFLDDEV1");
pub(super) const HEADER: usize = 4096;

// Register byte offsets in page 0 (u64 unless said otherwise).
pub(super) const R_MAGIC: usize = 0;
pub(super) const R_AREA: usize = 8;
pub(super) const R_REQ_SEQ: usize = 16; // u32, futex
pub(super) const R_RESP_SEQ: usize = 20; // u32, futex
pub(super) const R_KIND: usize = 24;
pub(super) const R_ROWS: usize = 32;
pub(super) const R_ARG: usize = 40;
pub(super) const R_DENSE: usize = 48;
pub(super) const R_REQ_LEN: usize = 56;
pub(super) const R_STATUS: usize = 64;
pub(super) const R_RESP_LEN: usize = 72;
pub(super) const R_EMB_SSD: usize = 80; // f64 bits
pub(super) const R_EMB_OP: usize = 88; // f64 bits
pub(super) const R_BOT: usize = 96; // f64 bits
pub(super) const R_TOP: usize = 104; // f64 bits
pub(super) const R_MEDIA_READS: usize = 112;
pub(super) const R_MEDIA_BYTES: usize = 120;
pub(super) const R_DEVICE_PID: usize = 128;
pub(super) const R_HOST_PID: usize = 136;
pub(super) const R_CLOSED: usize = 144;

pub(super) const K_OPEN: u64 = 1;
pub(super) const K_SUMS: u64 = 2;
pub(super) const K_RMSSD: u64 = 3;
pub(super) const K_RECSSD: u64 = 4;
pub(super) const K_CLOSE: u64 = 5;

/// Spins before sleeping on a futex (a device answer often comes within microseconds).
pub(super) const SPINS: u32 = 20_000;

/// One side's mapping of the channel.
pub(super) struct Channel {
    /// Keeps the mapping alive; every access goes through `base`.
    _map: MmapMut,
    base: *mut u8,
    /// Bytes of one slot's payload area (each direction).
    pub(super) area: usize,
    /// The slot (0 or 1) that per-slot registers and the payload areas refer to. Two requests
    /// may be in flight — rm-ssd sends the next batch's inputs before reading this one's
    /// outputs — so each has its own registers and areas; request n uses slot n mod 2.
    pub(super) slot: usize,
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
    pub(super) fn map(file: &File) -> Result<Channel> {
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

    pub(super) fn u64_at(&self, off: usize) -> &AtomicU64 {
        let off = if (SLOT_FIRST..SLOT_END).contains(&off) { off + self.slot * SLOT_STRIDE } else { off };
        debug_assert!(off.is_multiple_of(8) && off + 8 <= HEADER);
        // SAFETY: `off` is a register offset below HEADER, 8-aligned within a page-aligned
        // mapping, which lives as long as `self`. Every access to registers, in both processes,
        // is atomic, so the shared reference to an atomic is sound.
        unsafe { &*(self.base.add(off) as *const AtomicU64) }
    }

    pub(super) fn u32_at(&self, off: usize) -> &AtomicU32 {
        debug_assert!(off.is_multiple_of(4) && off + 4 <= HEADER);
        // SAFETY: as in `u64_at`, for a 4-aligned 32-bit register.
        unsafe { &*(self.base.add(off) as *const AtomicU32) }
    }

    pub(super) fn get(&self, off: usize) -> u64 {
        self.u64_at(off).load(Ordering::Relaxed)
    }
    pub(super) fn set(&self, off: usize, v: u64) {
        self.u64_at(off).store(v, Ordering::Relaxed)
    }
    pub(super) fn getf(&self, off: usize) -> f64 {
        f64::from_bits(self.get(off))
    }
    pub(super) fn setf(&self, off: usize, v: f64) {
        self.set(off, v.to_bits())
    }

    /// The current slot's (request area, response area). The host writes the first and reads
    /// the second, the device the other way round, each only while the protocol hands the area
    /// to it. Layout after the registers: request areas of slots 0 and 1, then response areas.
    pub(super) fn areas(&mut self) -> (&mut [u8], &mut [u8]) {
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

pub(super) fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
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

pub(super) fn futex_wake(word: &AtomicU32) {
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
