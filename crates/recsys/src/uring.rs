//! O_DIRECT reads of a read plan's units through io_uring, up to a queue depth, into aligned
//! buffers; each completed unit is handed to a callback (which sums its rows) and its buffer
//! reused. This is the data path of `emb-mmio`, `emb-pagesum`, `emb-vectorsum`, `recssd` and
//! `rm-ssd` in `disk` mode.

use crate::error::{Error, Result};
use crate::sls::{ReadPlan, Unit};
use io_uring::{opcode, types, IoUring};
use memmap2::MmapMut;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;

/// Tables opened with O_DIRECT and a ring to read them.
pub struct DirectReader {
    files: Vec<File>,
    /// Declared before `buffers`, so it is dropped (and the buffers unregistered) first.
    ring: IoUring,
    qd: usize,
    /// `qd` slots of `slot_bytes`, page-aligned (an anonymous mapping is).
    buffers: MmapMut,
    slot_bytes: usize,
    /// `buffers` is registered with the ring as fixed buffer 0 (no page pinning per read), and the
    /// files as fixed files (no file lookup per read); where the kernel refuses either (old
    /// kernels, RLIMIT_MEMLOCK), plain reads are used.
    fixed_buffers: bool,
    fixed_files: bool,
    /// Reads submitted so far (one per unit).
    pub reads: u64,
}

impl DirectReader {
    /// Opens `paths` with O_DIRECT. `max_unit` bounds the unit size (a multiple of 4 KiB).
    pub fn open(paths: &[&Path], qd: usize, max_unit: usize) -> Result<DirectReader> {
        let mut files = Vec::with_capacity(paths.len());
        for p in paths {
            let f = OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(p).map_err(|e| {
                Error::Unsupported(format!(
                    "{}: cannot open with O_DIRECT ({e}): put the tables on a disk file system (not tmpfs)",
                    p.display()
                ))
            })?;
            files.push(f);
        }
        let qd = qd.clamp(1, 4096);
        let ring = IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .build(qd.next_power_of_two() as u32)
            .or_else(|_| IoUring::new(qd.next_power_of_two() as u32))
            .map_err(|e| {
                Error::Unsupported(format!("io_uring_setup: {e} (io_uring is missing or disabled on this kernel)"))
            })?;
        let slot_bytes = max_unit.div_ceil(4096).max(1) * 4096;
        let mut buffers = MmapMut::map_anon(qd * slot_bytes).map_err(|e| Error::io("anonymous memory", "mmap", e))?;
        let iov = libc::iovec { iov_base: buffers.as_mut_ptr().cast(), iov_len: buffers.len() };
        // SAFETY: the iovec covers exactly the mapping `buffers`, which stays mapped as long as the
        // ring exists: `ring` is dropped before `buffers` (field order), and `read_plan` leaks the
        // mapping instead of unmapping it when the ring fails.
        let fixed_buffers = unsafe { ring.submitter().register_buffers(&[iov]) }.is_ok();
        let fds: Vec<i32> = files.iter().map(|f| f.as_raw_fd()).collect();
        let fixed_files = ring.submitter().register_files(&fds).is_ok();
        Ok(DirectReader { files, ring, qd, buffers, slot_bytes, fixed_buffers, fixed_files, reads: 0 })
    }

    pub fn queue_depth(&self) -> usize {
        self.qd
    }

    /// (fixed buffers, fixed files): what the kernel accepted at `open`.
    pub fn registered(&self) -> (bool, bool) {
        (self.fixed_buffers, self.fixed_files)
    }

    /// The submission entry reading `u` into `buf` (inside `buffers`), through the fixed buffer
    /// and file where they are registered.
    fn read_entry(&self, u: Unit, buf: *mut u8) -> io_uring::squeue::Entry {
        let t = u.table as usize;
        match (self.fixed_files, self.fixed_buffers) {
            (true, true) => opcode::ReadFixed::new(types::Fixed(t as u32), buf, u.len, 0).offset(u.offset).build(),
            (true, false) => opcode::Read::new(types::Fixed(t as u32), buf, u.len).offset(u.offset).build(),
            (false, true) => {
                opcode::ReadFixed::new(types::Fd(self.files[t].as_raw_fd()), buf, u.len, 0).offset(u.offset).build()
            }
            (false, false) => {
                opcode::Read::new(types::Fd(self.files[t].as_raw_fd()), buf, u.len).offset(u.offset).build()
            }
        }
    }

    /// Reads every unit of `plan` once, calling `done(unit, bytes)` as each completes (in
    /// completion order). Returns only when nothing is in flight.
    pub fn read_plan(&mut self, plan: &ReadPlan, mut done: impl FnMut(usize, &[u8])) -> Result<()> {
        let mut next = 0usize;
        let mut in_flight = 0usize;
        let mut free: Vec<usize> = (0..self.qd).collect();
        let mut slot_unit = vec![usize::MAX; self.qd];
        let mut failure: Option<Error> = None;
        loop {
            while failure.is_none() && next < plan.units.len() {
                let Some(slot) = free.pop() else { break };
                let u = plan.units[next];
                if u.len as usize > self.slot_bytes {
                    failure =
                        Some(Error::Shape(format!("a {} B unit exceeds the {} B read buffer", u.len, self.slot_bytes)));
                    free.push(slot);
                    break;
                }
                let buf = self.buffers[slot * self.slot_bytes..].as_mut_ptr();
                let e = self.read_entry(u, buf).user_data(slot as u64);
                // SAFETY: the read writes at most `u.len` ≤ `slot_bytes` bytes into slot `slot`
                // of `self.buffers`, which no other in-flight read uses (slots come from `free`
                // and return there only on completion). `self.buffers` and the file outlive the
                // read: this function drains every submitted read before returning, and on a
                // ring failure the buffers are leaked rather than unmapped.
                if unsafe { self.ring.submission().push(&e) }.is_err() {
                    free.push(slot);
                    break;
                }
                slot_unit[slot] = next;
                next += 1;
                in_flight += 1;
                self.reads += 1;
            }
            if in_flight == 0 {
                break;
            }
            if let Err(e) = self.ring.submit_and_wait(1) {
                if e.raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                let dead = std::mem::replace(&mut self.buffers, MmapMut::map_anon(4096).expect("small mapping"));
                std::mem::forget(dead); // reads may still land there: never unmap it
                return Err(Error::io("io_uring", "io_uring_enter", e));
            }
            let completed: Vec<(usize, i32)> =
                self.ring.completion().map(|c| (c.user_data() as usize, c.result())).collect();
            for (slot, res) in completed {
                in_flight -= 1;
                let u = slot_unit[slot];
                let unit = plan.units[u];
                if res != unit.len as i32 && failure.is_none() {
                    let why = if res < 0 {
                        std::io::Error::from_raw_os_error(-res).to_string()
                    } else {
                        format!("short read: {res} of {} bytes", unit.len)
                    };
                    failure =
                        Some(Error::io(format!("table {} at byte {}", unit.table, unit.offset), "O_DIRECT read", why));
                }
                if failure.is_none() {
                    let start = slot * self.slot_bytes;
                    done(u, &self.buffers[start..start + unit.len as usize]);
                }
                free.push(slot);
            }
        }
        failure.map_or(Ok(()), Err)
    }
}

/// What [`random_reads`] measured: reads done and the seconds they took.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct ReadRate {
    pub reads: u64,
    pub seconds: f64,
    pub iops: f64,
    /// Whether the kernel took the buffers and the file as registered (fixed) ones.
    pub fixed_buffers: bool,
    pub fixed_files: bool,
}

/// The device's reader on fio's workload: `reads` random `block`-aligned reads of `block` bytes
/// over the whole of `path` (header included, as fio reads the file), `depth` in flight, one
/// plan so the queue never drains before the end. Uniform offsets from `seed` (splitmix64).
pub fn random_reads(path: &Path, block: u32, depth: usize, reads: u64, seed: u64) -> Result<ReadRate> {
    if block == 0 || !block.is_multiple_of(crate::table::SECTOR as u32) {
        return Err(Error::Shape(format!("block {block} B is not a multiple of the 512 B sector")));
    }
    let len = std::fs::metadata(path).map_err(|e| Error::io(path, "stat", e))?.len();
    let blocks = len / block as u64;
    if blocks == 0 {
        return Err(Error::Shape(format!("{}: {len} B holds no {block} B block", path.display())));
    }
    let mut s = seed;
    let mut next = || {
        s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let units = (0..reads).map(|_| Unit { table: 0, offset: next() % blocks * block as u64, len: block }).collect();
    let plan = ReadPlan { units, uses: Vec::new(), first_use: Vec::new(), lookups: 0 };
    let mut reader = DirectReader::open(&[path], depth, block as usize)?;
    let t0 = std::time::Instant::now();
    reader.read_plan(&plan, |_, _| {})?;
    let seconds = t0.elapsed().as_secs_f64();
    let (fixed_buffers, fixed_files) = reader.registered();
    Ok(ReadRate { reads, seconds, iops: reads as f64 / seconds.max(1e-12), fixed_buffers, fixed_files })
}
