//! The emulated device (benchmarks only, `--matcher emulated`): a [`Matcher`] that answers
//! exactly without spending the host's matching CPU, and holds each batch for the time a measured
//! device profile says (`data/plans/whatif/gpu-h200.toml`), so a benchmark on a machine without
//! a GPU measures whether the service's host path could feed that device.
//!
//! - **Answers.** Before serving, the real matcher (`fast`) answers every row of a query file
//!   (the benchmark's trace, `offload rules synth`'s `queries.csv`); the device looks each
//!   encoded row up in that table. A row not in it is matched by the real matcher, still on the
//!   device's thread, and counted as a **miss**: answers are always exact.
//! - **The device's own thread.** One thread per device stands for the device's silicon: an
//!   executor hands its batch over (a bounded [`HandOff`] queue, which sleeps on a futex; copying
//!   the codes stands for the staging into pinned memory a real device call does on the
//!   executor). That thread is **not registered** in [`crate::metrics::CpuAccounts`], which reads
//!   only registered threads' clocks: its lookups and misses are not the daemon's host path
//!   (`stats` → `emulated` shows its own CPU, per batch). It never waits on a clock: it looks the
//!   batch up, hands the answers back and sleeps until the next batch, so between batches it takes
//!   no host core.
//! - **Time.** [`DeviceCosts::batch`] is the one place of the device-time formula: the planner
//!   (python/offload/plan/simulate.py) calls it through the bindings. The device runs batches one
//!   after another through three one-at-a-time stages, as a GPU with a copy engine each way and
//!   one compute queue: H2D, then kernel, then D2H ([`Lanes`]). The host's launch (`invoke_s`)
//!   comes first and takes no lane. So a batch's H2D may overlap the previous batch's kernel (with
//!   k ≥ 2 executors; with k = 1 one batch is out at a time and each is held for exactly the
//!   planner's time). A batch is due when its D2H ends. The executor books the lanes when it hands
//!   the batch over, so it knows the due instant at once.
//! - **The hold.** The executor blocks in the device call until the batch is due, as on a real
//!   device call, and never returns before ([`hold_until`]): it sleeps on its thread's timerfd
//!   (CLOCK_MONOTONIC, an absolute instant; a timerfd is not delayed by the thread's timer slack)
//!   armed a measured early wake before the due instant (the 10th percentile of the timer's
//!   overshoot, measured at start), then spins what is left, [`SPIN_AT_MOST`] at most; woken
//!   earlier than that, it sleeps again until the due instant itself. Then it takes the answers,
//!   there by then unless the lookups outlasted the device's time (counted `late`). How late each
//!   batch was answered against its due instant is the emulation's **timing error**
//!   ([`TimingError`]: p50, p99, max). The floor: a batch due sooner than the early wake is held
//!   until due plus the timer's overshoot (tens of µs on a VM), and one whose lookups outlast its
//!   device time until they end.
//! - **Reload** recompiles with the served `MatcherKind` (`fast`): a reload turns the emulation
//!   off, and the daemon then answers from the host's `fast` matcher.

use crate::handoff::{HandOff, Popped, Producer};
use offload_rules::{DeviceStages, Encoder, Matcher, RuleType, NO_MATCH};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The emulated device's name (`Matcher::name`, `--matcher emulated`, `stats`).
pub const NAME: &str = "emulated";

/// What the emulated device's daemon says at start and in `stats`.
pub const NOTE: &str = "emulated device: benchmark only, no device is used: answers come from a table precomputed \
                        by the fast matcher, and each batch is held for the time a device profile says";

/// Bytes of one answer (a u32 rule index) on the way back: `ANSWER_BYTES` of
/// python/offload/plan/measured.py, which folds them into the profile's bytes per query.
pub const ANSWER_BYTES: f64 = 4.0;

/// The longest an executor waits for the device thread (to take a batch, then to answer it)
/// before it matches on its own thread instead (counted `fallbacks`).
const DEVICE_WAIT: Duration = Duration::from_secs(60);

/// Batches that may wait for the device (the executors hold one each at most).
const JOB_QUEUE: usize = 16;

/// A device's costs: the `[costs]` of a what-if profile (`offload plan preset`), the fields
/// python/offload/plan/simulate.py's `Costs` reads for the kernel side.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct DeviceCosts {
    pub invoke_s: f64,
    pub transfer_latency_s: f64,
    pub transfer_bps: f64,
    pub transfer_bytes_per_query: f64,
    pub kernel_query_s: f64,
    pub kernel_fixed_s: f64,
}

/// The modeled time of one batch, by stage.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct BatchTime {
    pub invoke_s: f64,
    pub h2d_s: f64,
    pub kernel_s: f64,
    pub d2h_s: f64,
}

impl BatchTime {
    /// The whole batch alone on the device: the planner's time for it.
    pub fn total_s(&self) -> f64 {
        self.invoke_s + self.h2d_s + self.kernel_s + self.d2h_s
    }
    /// The stages as a reply carries them (the launch is in none, as on the gpu matcher, whose
    /// events frame the copies and the kernel only).
    pub fn stages(&self, queries: usize) -> DeviceStages {
        DeviceStages { h2d_s: self.h2d_s, kernel_s: self.kernel_s, d2h_s: self.d2h_s, chunks: 1, queries }
    }
}

impl DeviceCosts {
    const FIELDS: [&'static str; 6] = [
        "invoke_s",
        "transfer_latency_s",
        "transfer_bps",
        "transfer_bytes_per_query",
        "kernel_query_s",
        "kernel_fixed_s",
    ];

    /// Reads a profile's `[costs]`; every problem is one line naming the file.
    pub fn from_file(path: &Path) -> Result<DeviceCosts, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("device profile {}: {e}", path.display()))?;
        DeviceCosts::from_toml(&text).map_err(|e| format!("device profile {}: {e}", path.display()))
    }

    /// Parses a profile's text (see [`DeviceCosts::from_file`]).
    pub fn from_toml(text: &str) -> Result<DeviceCosts, String> {
        let doc: toml::Table = toml::from_str(text).map_err(|e| e.to_string().replace('\n', " ").trim().to_string())?;
        let costs = doc.get("costs").and_then(toml::Value::as_table).ok_or("no [costs] table")?;
        if costs.get("kernel_on_host").and_then(toml::Value::as_bool) == Some(true) {
            return Err("kernel_on_host = true: the profile's kernel runs on the host, not on a device".into());
        }
        let mut v = [0.0f64; 6];
        for (slot, key) in v.iter_mut().zip(Self::FIELDS) {
            let x = match costs.get(key) {
                Some(toml::Value::Float(f)) => *f,
                Some(toml::Value::Integer(i)) => *i as f64,
                Some(other) => return Err(format!("[costs] {key}: expected a number ≥ 0, not {other}")),
                None => return Err(format!("[costs] has no {key}")),
            };
            if !(x.is_finite() && x >= 0.0) {
                return Err(format!("[costs] {key}: expected a number ≥ 0, not {x}"));
            }
            *slot = x;
        }
        let [invoke_s, transfer_latency_s, transfer_bps, transfer_bytes_per_query, kernel_query_s, kernel_fixed_s] = v;
        Ok(DeviceCosts {
            invoke_s,
            transfer_latency_s,
            transfer_bps,
            transfer_bytes_per_query,
            kernel_query_s,
            kernel_fixed_s,
        })
    }

    /// The time of a batch of `n` queries on a device whose kernel spreads them over `engines`
    /// (at least 1): the one place of the device-time formula, which the planner calls
    /// (python/offload/plan/simulate.py, through `offload._native.device_batch_time`).
    ///
    /// - launch: `invoke_s` (takes no lane);
    /// - H2D: `transfer_latency_s / 2 + n × (transfer_bytes_per_query − a) ÷ transfer_bps`;
    /// - kernel: `⌈n / engines⌉ × kernel_query_s + kernel_fixed_s` (the slowest engine's share);
    /// - D2H: `transfer_latency_s / 2 + n × a ÷ transfer_bps`,
    ///
    /// with `a` = min([`ANSWER_BYTES`], `transfer_bytes_per_query`) and no bytes term when
    /// `transfer_bps` is 0 (unbounded). The profile's transfer is both ways in one (measured.py:
    /// the latency is H2D's + D2H's, the bytes per query the query's + the answer's), split here
    /// for the stages; the sum is the whole transfer, `transfer_latency_s + n ×
    /// transfer_bytes_per_query ÷ transfer_bps`.
    pub fn batch(&self, n: usize, engines: usize) -> BatchTime {
        let per_engine = n.div_ceil(engines.max(1)) as f64;
        let n = n as f64;
        let per_byte = if self.transfer_bps > 0.0 { 1.0 / self.transfer_bps } else { 0.0 };
        let out_bytes = ANSWER_BYTES.min(self.transfer_bytes_per_query);
        let half_latency = self.transfer_latency_s / 2.0;
        BatchTime {
            invoke_s: self.invoke_s,
            h2d_s: half_latency + n * (self.transfer_bytes_per_query - out_bytes) * per_byte,
            kernel_s: per_engine * self.kernel_query_s + self.kernel_fixed_s,
            d2h_s: half_latency + n * out_bytes * per_byte,
        }
    }
}

/// The device's three one-at-a-time stages (copy in, compute, copy out): when each is next
/// free, in seconds from the device's start. Batches go through in the order they come.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Lanes {
    pub h2d_free_s: f64,
    pub kernel_free_s: f64,
    pub d2h_free_s: f64,
}

impl Lanes {
    /// Books a batch handed over at `sent_s`: its launch, then H2D once the copy-in engine is
    /// free, the kernel once its H2D is done and the compute queue free, D2H likewise. Returns
    /// when it is due (its D2H done).
    pub fn book(&mut self, sent_s: f64, t: &BatchTime) -> f64 {
        self.h2d_free_s = (sent_s + t.invoke_s).max(self.h2d_free_s) + t.h2d_s;
        self.kernel_free_s = self.h2d_free_s.max(self.kernel_free_s) + t.kernel_s;
        self.d2h_free_s = self.kernel_free_s.max(self.d2h_free_s) + t.d2h_s;
        self.d2h_free_s
    }
}

/// The longest a hold spins before a due instant: what is left after its timer fired, or
/// after the answers came, if that is this much or less. Woken earlier, it sleeps again.
pub const SPIN_AT_MOST: Duration = Duration::from_micros(5);

/// A one-shot timer of this thread on CLOCK_MONOTONIC (`Instant`'s clock on Linux), armed at an
/// absolute instant: a timerfd, which the thread's timer slack does not delay (a nanosleep of a
/// normal thread may end up to its slack late, 50 µs by default).
pub struct Alarm(OwnedFd);

impl Alarm {
    /// A new timer, or None where the kernel refuses one (the hold then sleeps with
    /// `std::thread::sleep`).
    pub fn new() -> Option<Alarm> {
        // SAFETY: timerfd_create takes two integers and returns a new descriptor or -1; no memory
        // is passed.
        let fd = unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_CLOEXEC) };
        // SAFETY: `fd` was just created and nothing else owns it: the OwnedFd closes it once.
        (fd >= 0).then(|| Alarm(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Blocks until `at` (at once if it has passed). False if the timer failed: the caller
    /// sleeps another way.
    pub fn sleep_until(&self, at: Instant) -> bool {
        let left = at.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return true;
        }
        let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: clock_gettime writes one timespec through the valid, exclusive pointer given.
        if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) } != 0 {
            return false;
        }
        let nanos = now.tv_nsec as u64 + u64::from(left.subsec_nanos());
        let value = libc::timespec {
            tv_sec: now.tv_sec + (left.as_secs() + nanos / 1_000_000_000) as libc::time_t,
            tv_nsec: (nanos % 1_000_000_000) as libc::c_long,
        };
        let zero = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        let spec = libc::itimerspec { it_interval: zero, it_value: value };
        let fd = self.0.as_raw_fd();
        // SAFETY: `fd` is this timer's open timerfd; `spec` is a valid itimerspec read by the
        // call; the old value is not asked for (a null pointer is allowed there).
        if unsafe { libc::timerfd_settime(fd, libc::TFD_TIMER_ABSTIME, &spec, std::ptr::null_mut()) } != 0 {
            return false;
        }
        // A read blocks until the timer fires (a signal may interrupt it: read again, a bounded
        // number of times).
        for _ in 0..1000 {
            let mut fired = 0u64;
            // SAFETY: read writes at most 8 bytes into `fired`, an 8-byte local.
            let got = unsafe { libc::read(fd, (&mut fired as *mut u64).cast(), 8) };
            if got == 8 {
                return true;
            }
            if got >= 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                return false;
            }
        }
        false
    }
}

thread_local! {
    /// Each thread that holds batches (executors, the inline broker) has its own timer.
    static ALARM: Option<Alarm> = Alarm::new();
}

/// Holds the calling thread until `due`, never returning before it: sleeps on the thread's
/// timer until `early` before it, then spins what is left ([`SPIN_AT_MOST`] at most) or, woken
/// earlier than that, sleeps again until `due` itself. Returns the ns spent spinning.
pub fn hold_until(due: Instant, early: Duration) -> u64 {
    let mut spun = 0;
    // At most: a sleep to the early instant, one to the due instant, a spin (more only if the
    // timer fails, then each round sleeps until due).
    for _ in 0..4 {
        let now = Instant::now();
        let Some(left) = due.checked_duration_since(now).filter(|d| !d.is_zero()) else { break };
        if left <= SPIN_AT_MOST {
            spun += spin_until(due);
            break;
        }
        let at = due.checked_sub(early).filter(|&at| at > now).unwrap_or(due);
        if !ALARM.with(|alarm| alarm.as_ref().is_some_and(|a| a.sleep_until(at))) {
            std::thread::sleep(at.saturating_duration_since(Instant::now()));
        }
    }
    // Never before due, whatever the rounds above did: a sleep lasts at least what it is asked.
    std::thread::sleep(due.saturating_duration_since(Instant::now()));
    spun
}

/// Spins until `due` (called with [`SPIN_AT_MOST`] or less left); returns the ns spun.
fn spin_until(due: Instant) -> u64 {
    let t = Instant::now();
    // Each round reads the clock (tens of ns): the bound is far above a 5 µs spin's rounds.
    for _ in 0..10_000_000u32 {
        if Instant::now() >= due {
            break;
        }
        std::hint::spin_loop();
    }
    t.elapsed().as_nanos() as u64
}

/// How late this machine's timer wakes a sleeping thread: the overshoot of 20 timerfd sleeps of
/// 50 µs, sorted (each at most 1 ms).
pub fn timer_overshoot() -> Vec<Duration> {
    let asked = Duration::from_micros(50);
    let Some(alarm) = Alarm::new() else { return vec![Duration::ZERO] };
    let mut over: Vec<Duration> = (0..20)
        .map(|_| {
            let t = Instant::now();
            alarm.sleep_until(t + asked);
            t.elapsed().saturating_sub(asked).min(Duration::from_millis(1))
        })
        .collect();
    over.sort();
    over
}

/// How late each batch was answered against its due instant (the executor's return from the
/// device call): a histogram of 16 buckets per power of two of ns (within 6.25%), and the
/// largest exactly. Relaxed atomics: one add per batch.
#[derive(Debug)]
pub struct TimingError {
    counts: Box<[AtomicU64]>,
    max_ns: AtomicU64,
}

impl Default for TimingError {
    fn default() -> Self {
        TimingError {
            counts: (0..TimingError::BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            max_ns: AtomicU64::new(0),
        }
    }
}

impl TimingError {
    const SUB: u32 = 16;
    const BUCKETS: usize = 61 * 16;

    /// Values below 16 ns have a bucket each; above, bucket (e − 3) × 16 + the 4 bits below the
    /// leading one, for a value in [2^e, 2^(e+1)).
    fn bucket(ns: u64) -> usize {
        if ns < u64::from(Self::SUB) {
            return ns as usize;
        }
        let e = 63 - ns.leading_zeros();
        ((e - 3) * Self::SUB + ((ns >> (e - 4)) & 15) as u32) as usize
    }

    /// The largest value bucket `b` holds.
    fn upper(b: usize) -> u64 {
        if b < Self::SUB as usize {
            return b as u64;
        }
        let (e, sub) = (b as u32 / Self::SUB + 3, b as u128 % 16);
        u64::try_from(((16 + sub + 1) << (e - 4)) - 1).unwrap_or(u64::MAX)
    }

    pub fn record(&self, ns: u64) {
        self.counts[Self::bucket(ns)].fetch_add(1, Ordering::Relaxed);
        self.max_ns.fetch_max(ns, Ordering::Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    pub fn max_ns(&self) -> u64 {
        self.max_ns.load(Ordering::Relaxed)
    }

    /// The largest value of the bucket that holds quantile `q` (never above the max; 0 when empty).
    pub fn quantile_ns(&self, q: f64) -> u64 {
        let n = self.count();
        let target = ((q.clamp(0.0, 1.0) * n as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (b, c) in self.counts.iter().enumerate() {
            seen += c.load(Ordering::Relaxed);
            if n > 0 && seen >= target {
                return Self::upper(b).min(self.max_ns());
            }
        }
        0
    }

    /// p50, p99 and max in µs, and the batches counted (`stats` → `emulated.timing_error_us`).
    pub fn summary(&self) -> serde_json::Value {
        let us = |ns: u64| ns as f64 / 1e3;
        serde_json::json!({
            "p50": us(self.quantile_ns(0.5)),
            "p99": us(self.quantile_ns(0.99)),
            "max": us(self.max_ns()),
            "batches": self.count(),
        })
    }
}

/// A fast hash of a row's codes (FxHash's step): the index's lookups are the device's work, and
/// SipHash would cost several times more per row.
fn hash_row(row: &[u32]) -> u64 {
    row.iter().fold(0u64, |h, &c| (h.rotate_left(5) ^ u64::from(c)).wrapping_mul(0x517c_c1b7_2722_0a95))
}

/// Rows a lookup compares at once where the batch follows the trace (one slice comparison).
const RUN: usize = 32;

/// The trace's codes in its order, 2 bytes each where every code fits (half the memory a lookup
/// reads: the lookups are bound by it), else 4.
enum Trace {
    Narrow(Vec<u16>),
    Wide(Vec<u32>),
}

impl Trace {
    fn new(codes: Vec<u32>) -> Trace {
        if codes.iter().all(|&c| c <= u32::from(u16::MAX)) {
            Trace::Narrow(codes.iter().map(|&c| c as u16).collect())
        } else {
            Trace::Wide(codes)
        }
    }

    /// Whether the codes from `start` are `codes` (false past the end).
    fn equals(&self, start: usize, codes: &[u32]) -> bool {
        let end = start + codes.len();
        match self {
            Trace::Wide(v) => v.get(start..end) == Some(codes),
            // No early exit: the loop vectorises, and a mismatch is rare.
            Trace::Narrow(v) => v
                .get(start..end)
                .is_some_and(|s| s.iter().zip(codes).fold(0, |d, (&a, &b)| d | (u32::from(a) ^ b)) == 0),
        }
    }

    fn copy(&self, start: usize, into: &mut [u32]) {
        match self {
            Trace::Wide(v) => into.copy_from_slice(&v[start..start + into.len()]),
            Trace::Narrow(v) => into.iter_mut().zip(&v[start..]).for_each(|(o, &c)| *o = u32::from(c)),
        }
    }

    fn bytes(&self) -> usize {
        match self {
            Trace::Wide(v) => 4 * v.len(),
            Trace::Narrow(v) => 2 * v.len(),
        }
    }
}

/// Encoded row → winning rule (or [`NO_MATCH`]), precomputed by the real matcher: the trace's
/// rows in its order ([`Trace`]), their answers, and an open-addressed index of each distinct
/// row's first place. A lookup first compares the rows that follow the last one found, up to
/// [`RUN`] at once: requests are windows of the trace, so within a request that is nearly always
/// them (one comparison, no hash, memory read in order); else the index. A row is answered only
/// when all its codes compare equal: answers are exact.
pub struct AnswerTable {
    width: usize,
    rows: Trace,
    answers: Vec<u32>,
    /// Place + 1 of a distinct row (0: empty); a power of two, at least twice the rows.
    slots: Vec<u32>,
    /// 64 − log2(slots): a hash's top bits pick the first slot.
    shift: u32,
    distinct: usize,
}

impl AnswerTable {
    /// Reads `path` (a query file: `QUERY_ID`, then one column per criterion) for `rule_type`,
    /// encodes it and answers every row with `matcher`. Errors name the file.
    pub fn precompute(
        rule_type: &RuleType,
        encoder: &Encoder,
        matcher: &dyn Matcher,
        path: &Path,
    ) -> Result<Self, String> {
        let what = |e: &dyn std::fmt::Display| format!("emulated device, queries to precompute: {e}");
        let file = offload_rules::queries::load_queries(rule_type, path).map_err(|e| what(&e))?;
        let codes = file.encode(encoder, path).map_err(|e| what(&e))?;
        Ok(AnswerTable::from_codes(matcher, codes))
    }

    /// The table of `codes`' rows, answered by `matcher`.
    pub fn from_codes(matcher: &dyn Matcher, mut codes: Vec<u32>) -> Self {
        let width = matcher.width().max(1);
        let n = codes.len() / width;
        codes.truncate(n * width);
        let mut answers = vec![NO_MATCH; n];
        offload_rules::match_parallel(
            matcher,
            &codes,
            &mut answers,
            std::thread::available_parallelism().map_or(1, |n| n.get()),
        );
        let slots = (2 * n).next_power_of_two().max(2);
        let mut table = AnswerTable {
            width,
            rows: Trace::new(codes),
            answers,
            slots: vec![0; slots],
            shift: 64 - slots.trailing_zeros(),
            distinct: 0,
        };
        let mut row = vec![0; width];
        for place in 0..n.min(u32::MAX as usize - 1) {
            table.rows.copy(place * width, &mut row);
            if let Err(slot) = table.find(&row) {
                table.slots[slot] = place as u32 + 1;
                table.distinct += 1;
            }
        }
        table
    }

    /// Whether the trace's rows from `place` are `rows` (false past its end).
    fn follows(&self, place: usize, rows: &[u32]) -> bool {
        self.rows.equals(place * self.width, rows)
    }

    /// The first place of `row` in the trace, or the empty slot where it would go.
    fn find(&self, row: &[u32]) -> Result<usize, usize> {
        let mask = self.slots.len() - 1;
        let mut slot = (hash_row(row) >> self.shift) as usize & mask;
        // At most every slot once; the table is at most half full, so an empty one ends it.
        for _ in 0..self.slots.len() {
            match self.slots[slot] {
                0 => return Err(slot),
                s if self.follows(s as usize - 1, row) => return Ok(s as usize - 1),
                _ => slot = (slot + 1) & mask,
            }
        }
        Err(usize::MAX)
    }

    /// Distinct rows held.
    pub fn len(&self) -> usize {
        self.distinct
    }
    pub fn is_empty(&self) -> bool {
        self.distinct == 0
    }

    /// Bytes held: the rows, their answers and the index.
    pub fn memory_bytes(&self) -> usize {
        self.rows.bytes() + 4 * (self.answers.len() + self.slots.len())
    }

    /// The answers of `codes`' rows: from the table, and for rows not in it (returned: their
    /// count) from `matcher`. `cursor` is the place after the last row found (the caller keeps
    /// it from one batch to the next).
    pub fn answer(&self, matcher: &dyn Matcher, codes: &[u32], cursor: &mut usize) -> (Vec<u32>, usize) {
        let w = self.width;
        let n = codes.len() / w;
        let mut rule = Vec::with_capacity(n);
        let mut missed = Vec::new();
        // Runs are tried while the batch follows the trace: after one that did not, one row at a
        // time over its span, then again once a row is at the cursor (a batch in no order, or
        // windows of the trace, cost a failed run at most per break).
        let (mut in_order, mut single_until) = (true, 0);
        while rule.len() < n {
            let i = rule.len();
            // A run of up to RUN rows that follows the trace from the cursor: one comparison.
            let run = RUN.min(n - i).min(self.answers.len().saturating_sub(*cursor));
            if in_order && i >= single_until && run > 1 {
                if self.follows(*cursor, &codes[i * w..(i + run) * w]) {
                    rule.extend_from_slice(&self.answers[*cursor..*cursor + run]);
                    *cursor += run;
                    continue;
                }
                single_until = i + run;
            }
            let row = &codes[i * w..(i + 1) * w];
            in_order = self.follows(*cursor, row);
            let place = if in_order { Some(*cursor) } else { self.find(row).ok() };
            match place {
                Some(p) => {
                    rule.push(self.answers[p]);
                    *cursor = p + 1;
                }
                None => {
                    missed.push(i);
                    rule.push(NO_MATCH);
                }
            }
        }
        if !missed.is_empty() {
            let rows: Vec<u32> = missed.iter().flat_map(|&i| codes[i * w..(i + 1) * w].iter().copied()).collect();
            let mut found = vec![NO_MATCH; missed.len()];
            matcher.match_batch(&rows, &mut found);
            for (&i, r) in missed.iter().zip(found) {
                rule[i] = r;
            }
        }
        (rule, missed.len())
    }
}

/// What `--matcher emulated` needs: the device profile and the trace to precompute answers for.
#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    pub profile: PathBuf,
    pub costs: DeviceCosts,
    pub queries: PathBuf,
}

/// The device's counters, live (relaxed atomics, one add each per batch), and what it was
/// started with.
#[derive(Debug, Default)]
pub struct Counters {
    pub batches: AtomicU64,
    pub queries: AtomicU64,
    /// Rows not in the table, matched by the real matcher on the device thread.
    pub misses: AtomicU64,
    /// Batches whose lookups ended after their due instant (answered then), and by how much in
    /// all (ns): what the emulation's own work added to the profile's time.
    pub late_batches: AtomicU64,
    pub late_ns: AtomicU64,
    /// Device-thread wall ns in lookups (and misses).
    pub lookup_ns: AtomicU64,
    /// Executor ns spun before due instants (each hold [`SPIN_AT_MOST`] at most).
    pub spin_ns: AtomicU64,
    /// How late each batch came back from the device call against its due instant.
    pub timing_error: TimingError,
    /// Batches the executor matched itself: the device thread did not answer within a minute.
    pub fallbacks: AtomicU64,
    /// The device thread's id (0 until it runs), to read its CPU clock.
    pub thread_id: AtomicU64,
}

impl Counters {
    /// The device thread's CPU (ns) so far, if it can be read.
    pub fn device_thread_cpu_ns(&self) -> Option<u64> {
        let tid = self.thread_id.load(Ordering::Relaxed);
        u32::try_from(tid).ok().filter(|&t| t != 0).and_then(crate::metrics::thread_cpu_ns)
    }

    /// The device thread's CPU per batch so far (µs), if it can be read.
    pub fn device_thread_cpu_us_per_batch(&self) -> Option<f64> {
        let batches = self.batches.load(Ordering::Relaxed).max(1) as f64;
        self.device_thread_cpu_ns().map(|ns| ns as f64 / 1e3 / batches)
    }

    /// The line the daemon prints when it stops.
    pub fn summary_line(&self, spec: &Spec) -> String {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let e = &self.timing_error;
        let us = |ns: u64| ns as f64 / 1e3;
        let cpu = self.device_thread_cpu_us_per_batch().map_or("?".into(), |c| format!("{c:.1}"));
        format!(
            "emulated device: {} batches, {} queries, {} misses (rows not in {}: matched by fast on the device \
             thread), timing error (answered after due) p50 {:.1} µs, p99 {:.1} µs, max {:.1} µs; {} late batches \
             ({:.0} µs late on average: lookups that outlasted the device's time); device thread {} µs of CPU per \
             batch, {:.0} ns of lookups per query; {:.2} µs of spin per batch; {} fallbacks",
            l(&self.batches),
            l(&self.queries),
            l(&self.misses),
            spec.queries.display(),
            us(e.quantile_ns(0.5)),
            us(e.quantile_ns(0.99)),
            us(e.max_ns()),
            l(&self.late_batches),
            l(&self.late_ns) as f64 / 1e3 / l(&self.late_batches).max(1) as f64,
            cpu,
            l(&self.lookup_ns) as f64 / l(&self.queries).max(1) as f64,
            l(&self.spin_ns) as f64 / 1e3 / l(&self.batches).max(1) as f64,
            l(&self.fallbacks)
        )
    }
}

/// One batch handed to the device thread, and when it is due.
struct Job {
    codes: Vec<u32>,
    due: Instant,
    done: Producer<Vec<u32>>,
}

/// The kernel's engines of the emulated device: one (its profile's `kernel_query_s` is the
/// whole device's, measured with one launch per batch; the daemon's `--engine-threads` is for
/// host matchers).
pub const ENGINES: usize = 1;

/// The emulated device: see the module's documentation.
pub struct EmulatedDevice {
    inner: Arc<dyn Matcher>,
    jobs: Producer<Job>,
    counters: Arc<Counters>,
    spec: Spec,
    rows: usize,
    table_bytes: usize,
    /// The lanes, booked by the executors as they hand batches over, and their time origin.
    lanes: Mutex<Lanes>,
    epoch: Instant,
    /// The timer's overshoot at start (sorted): a hold wakes its 10th percentile early.
    overshoot: Vec<Duration>,
    early: Duration,
}

impl EmulatedDevice {
    /// Precomputes the answers of `spec.queries` with `inner` (the real matcher) and starts the
    /// device thread. Errors (the queries file) name the file.
    pub fn start(
        inner: Box<dyn Matcher>,
        rule_type: &RuleType,
        encoder: &Encoder,
        spec: &Spec,
    ) -> Result<Self, String> {
        let table = AnswerTable::precompute(rule_type, encoder, &*inner, &spec.queries)?;
        EmulatedDevice::with_table(inner.into(), table, spec.clone())
    }

    /// The device over a table already made.
    pub fn with_table(inner: Arc<dyn Matcher>, table: AnswerTable, spec: Spec) -> Result<Self, String> {
        let (rx, jobs) = HandOff::new(JOB_QUEUE);
        let counters = Arc::new(Counters::default());
        let (rows, table_bytes) = (table.len(), table.memory_bytes());
        let (m, c) = (inner.clone(), counters.clone());
        let (measured, overshoot) = std::sync::mpsc::sync_channel(1);
        std::thread::Builder::new()
            .name("emulated-device".into())
            .spawn(move || {
                if measured.send(timer_overshoot()).is_ok() {
                    device_thread(&rx, &*m, &table, &c)
                }
            })
            .map_err(|e| format!("emulated device: its thread: {e}"))?;
        let overshoot = overshoot.recv().map_err(|_| "emulated device: its thread ended at start".to_string())?;
        let early = overshoot.get(overshoot.len() / 10).copied().unwrap_or_default();
        let lanes = Mutex::new(Lanes::default());
        Ok(EmulatedDevice {
            inner,
            jobs,
            counters,
            spec,
            rows,
            table_bytes,
            lanes,
            epoch: Instant::now(),
            overshoot,
            early,
        })
    }

    /// The live counters (for the line at the end).
    pub fn counters(&self) -> Arc<Counters> {
        self.counters.clone()
    }

    /// The measured timer, as a person reads it.
    pub fn margins(&self) -> String {
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        let median = self.overshoot.get(self.overshoot.len() / 2).copied().unwrap_or_default();
        format!(
            "timer overshoot {:.0} µs (10th percentile), {:.0} µs (median): a hold wakes {:.0} µs early and spins \
             {:.0} µs at most",
            us(self.early),
            us(median),
            us(self.early),
            us(SPIN_AT_MOST)
        )
    }

    /// Books a batch of `time` handed over now on the lanes; returns when it is due.
    fn book(&self, time: &BatchTime) -> Instant {
        let mut lanes = self.lanes.lock().unwrap_or_else(|p| p.into_inner());
        let sent = Instant::now();
        let due_s = lanes.book(sent.saturating_duration_since(self.epoch).as_secs_f64(), time);
        (self.epoch + Duration::from_secs_f64(due_s)).max(sent)
    }
}

/// The device: takes batches in order and answers each from the table as soon as it is looked
/// up (the executor holds it until due). Ends when the device (its sender) is dropped.
fn device_thread(jobs: &HandOff<Job>, inner: &dyn Matcher, table: &AnswerTable, counters: &Counters) {
    counters.thread_id.store(crate::metrics::thread_id().map_or(0, u64::from), Ordering::Relaxed);
    let mut cursor = 0;
    while let Some(job) = jobs.pop() {
        let t0 = Instant::now();
        let (rule, misses) = table.answer(inner, &job.codes, &mut cursor);
        let looked_up = Instant::now();
        counters.lookup_ns.fetch_add(looked_up.duration_since(t0).as_nanos() as u64, Ordering::Relaxed);
        if looked_up > job.due {
            counters.late_batches.fetch_add(1, Ordering::Relaxed);
            counters.late_ns.fetch_add(looked_up.duration_since(job.due).as_nanos() as u64, Ordering::Relaxed);
        }
        counters.misses.fetch_add(misses as u64, Ordering::Relaxed);
        let _ = job.done.try_push(rule);
    }
}

impl Matcher for EmulatedDevice {
    fn name(&self) -> &'static str {
        NAME
    }
    fn width(&self) -> usize {
        self.inner.width()
    }
    fn match_batch(&self, queries: &[u32], out: &mut [u32]) {
        self.match_batch_staged(queries, out);
    }
    fn memory_bytes(&self) -> usize {
        self.inner.memory_bytes() + self.table_bytes
    }
    fn stats(&self) -> serde_json::Value {
        let c = &self.counters;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        serde_json::json!({
            "benchmark_only": NOTE,
            "profile": self.spec.profile.display().to_string(),
            "costs": self.spec.costs,
            "queries_file": self.spec.queries.display().to_string(),
            "precomputed_rows": self.rows,
            "batches": l(&c.batches),
            "queries": l(&c.queries),
            "misses": l(&c.misses),
            "late_batches": l(&c.late_batches),
            "late_ns": l(&c.late_ns),
            "fallbacks": l(&c.fallbacks),
            "lookup_ns": l(&c.lookup_ns),
            "spin_ns": l(&c.spin_ns),
            "timing_error_us": c.timing_error.summary(),
            "early_wake_us": us(self.early),
            "spin_at_most_us": us(SPIN_AT_MOST),
            "device_thread_cpu_ns": c.device_thread_cpu_ns(),
            "device_thread_cpu_us_per_batch": c.device_thread_cpu_us_per_batch(),
            "matcher": self.inner.name(),
        })
    }
    /// Books the batch on the lanes, hands it to the device thread, holds until it is due and
    /// takes the answers. Should the device thread be gone, or not answer within
    /// [`DEVICE_WAIT`], matches here (exact, counted `fallbacks`, no stages).
    fn match_batch_staged(&self, queries: &[u32], out: &mut [u32]) -> Option<DeviceStages> {
        let n = queries.len() / self.inner.width().max(1);
        let time = self.spec.costs.batch(n, ENGINES);
        let due = self.book(&time);
        let (answered, done) = HandOff::new(1);
        let reply = match self.jobs.push(Job { codes: queries.to_vec(), due, done }) {
            Ok(()) => {
                let spun = hold_until(due, self.early);
                self.counters.spin_ns.fetch_add(spun, Ordering::Relaxed);
                answered.pop_until(Instant::now() + DEVICE_WAIT)
            }
            Err(_) => Popped::Closed,
        };
        match reply {
            Popped::Item(rule) if rule.len() == out.len() => {
                out.copy_from_slice(&rule);
                let c = &self.counters;
                c.timing_error.record(due.elapsed().as_nanos() as u64);
                c.batches.fetch_add(1, Ordering::Relaxed);
                c.queries.fetch_add(n as u64, Ordering::Relaxed);
                Some(time.stages(n))
            }
            _ => {
                self.counters.fallbacks.fetch_add(1, Ordering::Relaxed);
                self.inner.match_batch(queries, out);
                None
            }
        }
    }
    fn on_device(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The timer's overshoot against a nanosleep's with the default slack, side by side:
    /// `cargo test -p offload-serve --lib -- --ignored --nocapture overshoot`.
    #[test]
    #[ignore]
    fn overshoot_of_the_timer_and_of_a_sleep() {
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        for _ in 0..5 {
            let sleeps: Vec<f64> = (0..20)
                .map(|_| {
                    let t = Instant::now();
                    std::thread::sleep(Duration::from_micros(50));
                    us(t.elapsed()) - 50.0
                })
                .collect();
            let timer: Vec<f64> = timer_overshoot().into_iter().map(us).collect();
            println!(
                "overshoot of 20 sleeps of 50 us, us: timerfd {timer:.0?}; nanosleep (default slack) {sleeps:.0?}"
            );
        }
    }

    fn round() -> DeviceCosts {
        DeviceCosts {
            invoke_s: 10e-6,
            transfer_latency_s: 20e-6,
            transfer_bps: 1e9,
            transfer_bytes_per_query: 100.0,
            kernel_query_s: 1e-9,
            kernel_fixed_s: 50e-6,
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 + 1e-9 * b.abs()
    }

    #[test]
    fn a_batch_takes_the_planners_time_split_into_stages() {
        // 1,000 queries: H2D 10 µs + 1,000 × 96 B / 1 GB/s = 106 µs; kernel 1 µs + 50 µs = 51 µs;
        // D2H 10 µs + 1,000 × 4 B / 1 GB/s = 14 µs; with the launch's 10 µs, 181 µs.
        let t = round().batch(1000, 1);
        assert!(close(t.invoke_s, 10e-6) && close(t.h2d_s, 106e-6), "{t:?}");
        assert!(close(t.kernel_s, 51e-6) && close(t.d2h_s, 14e-6), "{t:?}");
        assert!(close(t.total_s(), 181e-6), "{t:?}");
        // The planner's: invoke + latency + n × bytes / bps + n × per query + fixed.
        assert!(close(t.total_s(), 10e-6 + (20e-6 + 1000.0 * 100.0 / 1e9) + 1000.0 * 1e-9 + 50e-6));
        let s = t.stages(1000);
        assert_eq!((s.chunks, s.queries), (1, 1000));
        // No bytes term without a rate (the planner's `_transfer`), an empty batch its floors.
        let t = DeviceCosts { transfer_bps: 0.0, ..round() }.batch(1000, 1);
        assert!(close(t.h2d_s, 10e-6) && close(t.d2h_s, 10e-6), "{t:?}");
        let t = round().batch(0, 1);
        assert!(close(t.total_s(), 10e-6 + 20e-6 + 50e-6), "{t:?}");
    }

    #[test]
    fn the_h200_profile_reads_and_agrees_with_the_planner() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/plans/whatif/gpu-h200.toml");
        let c = DeviceCosts::from_file(&path).unwrap();
        assert!(close(c.invoke_s, 1.3562319999209649e-05) && close(c.kernel_fixed_s, 6.343861235911587e-05));
        for n in [1usize, 256, 16384] {
            let planner = c.invoke_s
                + c.transfer_latency_s
                + n as f64 * c.transfer_bytes_per_query / c.transfer_bps
                + n as f64 * c.kernel_query_s
                + c.kernel_fixed_s;
            assert!(close(c.batch(n, 1).total_s(), planner), "{n}");
        }
        // 16,384 queries: 13.6 + 26.3 + 31.6 (1.64 MB at 51.9 GB/s) + 5.2 + 63.4 ≈ 140 µs.
        assert!((c.batch(16384, 1).total_s() - 140.0e-6).abs() < 1e-6, "{:?}", c.batch(16384, 1));
    }

    #[test]
    fn the_next_batchs_h2d_overlaps_this_ones_kernel() {
        let t = round().batch(1000, 1); // invoke 10, H2D 106, kernel 51, D2H 14 (µs)
        let mut lanes = Lanes::default();
        let first = lanes.book(0.0, &t);
        assert!(close(first, 181e-6), "{first}");
        // Handed over at once too: H2D 116..222 (after the first's), kernel 222..273, D2H 273..287.
        let second = lanes.book(0.0, &t);
        assert!(close(second, 287e-6), "{second}");
        assert!(second < 2.0 * first, "the copies overlap");
        // One handed over later than the device is busy starts on its own time.
        let third = lanes.book(1.0, &t);
        assert!(close(third, 1.0 + 181e-6), "{third}");
    }

    #[test]
    fn bad_profiles_are_one_line_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("none.toml");
        let e = DeviceCosts::from_file(&missing).unwrap_err();
        assert!(e.starts_with("device profile ") && e.contains("none.toml"), "{e}");
        let cases = [
            ("[costs\n", "expected"),
            ("[about]\nname = 'x'\n", "no [costs] table"),
            ("[costs]\ninvoke_s = 1e-5\n", "no transfer_latency_s"),
            ("[costs]\nkernel_on_host = true\n", "kernel_on_host"),
            ("[costs]\ninvoke_s = 'fast'\n", "invoke_s: expected a number"),
            ("[costs]\ninvoke_s = -1.0\n", "invoke_s: expected a number"),
        ];
        for (i, (text, says)) in cases.iter().enumerate() {
            let p = dir.path().join(format!("p{i}.toml"));
            std::fs::write(&p, text).unwrap();
            let e = DeviceCosts::from_file(&p).unwrap_err();
            assert!(!e.contains('\n') && e.contains(&format!("p{i}.toml")) && e.contains(says), "{e}");
        }
    }

    #[test]
    fn the_kernel_splits_over_engines_the_slowest_taking_the_ceiling() {
        // 1,000 queries over 3 engines: the slowest takes 334, 334 ns + 50 µs; the copies do not
        // change with the engines.
        let (one, three) = (round().batch(1000, 1), round().batch(1000, 3));
        assert!(close(three.kernel_s, 334e-9 + 50e-6), "{three:?}");
        assert_eq!((one.invoke_s, one.h2d_s, one.d2h_s), (three.invoke_s, three.h2d_s, three.d2h_s));
        assert_eq!(round().batch(1000, 0), one, "no engines counts as one");
        assert!(close(round().batch(1000, 1000).kernel_s, 1e-9 + 50e-6));
    }

    #[test]
    fn a_hold_lasts_at_least_until_due() {
        let over = timer_overshoot();
        assert_eq!(over.len(), 20);
        assert!(over.windows(2).all(|w| w[0] <= w[1]) && over[19] <= Duration::from_millis(1));
        for early in [Duration::ZERO, over[2], Duration::from_millis(5)] {
            for wait in [Duration::ZERO, Duration::from_micros(3), Duration::from_micros(30), Duration::from_millis(2)]
            {
                let t = Instant::now();
                hold_until(t + wait, early);
                assert!(t.elapsed() >= wait, "{:?} < {wait:?}", t.elapsed());
            }
        }
    }

    #[test]
    fn the_timing_error_keeps_quantiles_within_a_sixteenth_and_the_max() {
        let e = TimingError::default();
        assert_eq!((e.quantile_ns(0.5), e.max_ns(), e.count()), (0, 0, 0));
        for ns in [0u64, 7, 15, 16, 17, 31, 32, 1000, 65_535, 123_456_789, u64::MAX] {
            let b = TimingError::bucket(ns);
            assert!(b < TimingError::BUCKETS && TimingError::upper(b) >= ns, "{ns}");
            assert!(ns < 16 || (TimingError::upper(b) - ns) as f64 <= ns as f64 / 16.0, "{ns}");
            assert!(b == 0 || TimingError::upper(b - 1) < ns, "{ns}: buckets are contiguous");
        }
        for us in 1..=100u64 {
            e.record(us * 1000);
        }
        let p50 = e.quantile_ns(0.5);
        assert!((50_000..=50_000 + 50_000 / 16).contains(&p50), "{p50}");
        assert!((99_000..=100_000).contains(&e.quantile_ns(0.99)));
        assert_eq!((e.max_ns(), e.count(), e.quantile_ns(1.0)), (100_000, 100, 100_000));
        assert_eq!(e.summary()["max"], 100.0);
    }

    /// A matcher that answers each row with its first code (a stand-in for `fast`), counting rows.
    struct FirstCode(AtomicU64);

    impl Matcher for FirstCode {
        fn name(&self) -> &'static str {
            "first-code"
        }
        fn width(&self) -> usize {
            2
        }
        fn match_batch(&self, queries: &[u32], out: &mut [u32]) {
            self.0.fetch_add(out.len() as u64, Ordering::Relaxed);
            for (o, row) in out.iter_mut().zip(queries.chunks_exact(2)) {
                *o = row[0];
            }
        }
        fn memory_bytes(&self) -> usize {
            0
        }
        fn stats(&self) -> serde_json::Value {
            serde_json::Value::Null
        }
    }

    #[test]
    fn the_table_answers_exactly_in_the_traces_order_or_not_and_misses_go_to_the_matcher() {
        // A trace of 6 rows, one twice; the answer of a row is its first code. Codes of 2 bytes
        // (kept narrow), then past 2 bytes (kept wide).
        for big in [0, 70_000] {
            let trace = vec![1, big, 2, big, 3, big, 2, big, 4, big, 5, big];
            let m = FirstCode(AtomicU64::new(0));
            let table = AnswerTable::from_codes(&m, trace.clone());
            assert_eq!(matches!(table.rows, Trace::Narrow(_)), big == 0);
            assert_eq!((table.len(), m.0.load(Ordering::Relaxed)), (5, 6), "5 distinct rows precomputed");
            m.0.store(0, Ordering::Relaxed);
            let mut cursor = 0;
            // In order, out of order, a duplicate, and two rows not in the trace (9, big) and (1, 1).
            let batch = [3, big, 2, big, 4, big, 1, big, 9, big, 5, big, 1, 1, 2, big];
            let (rule, misses) = table.answer(&m, &batch, &mut cursor);
            assert_eq!(rule, vec![3, 2, 4, 1, 9, 5, 1, 2]);
            assert_eq!((misses, m.0.load(Ordering::Relaxed)), (2, 2), "the misses, and only they, were matched");
            assert_eq!(cursor, 2, "after the last row found: (2, big) at its first place, 1");
            // The whole trace in order (runs of rows compared at once), from its start and not.
            assert_eq!(table.answer(&m, &trace, &mut 0), (vec![1, 2, 3, 2, 4, 5], 0));
            assert_eq!(table.answer(&m, &trace[4..], &mut 2), (vec![3, 2, 4, 5], 0));
            let (rule, misses) = table.answer(&m, &[], &mut cursor);
            assert_eq!((rule, misses), (vec![], 0));
        }
        let m = FirstCode(AtomicU64::new(0));
        let empty = AnswerTable::from_codes(&m, vec![]);
        assert!(empty.is_empty());
        assert_eq!(empty.answer(&m, &[7, 0], &mut 0), (vec![7], 1));
    }
}

#[cfg(test)]
mod lookup_speed {
    use super::*;

    /// ns per row of `AnswerTable::answer` on a trace of 500k rows of 22 codes, batches of 16
    /// windows of 256 rows (requests are windows of the trace): `cargo test -p offload-serve --release
    /// --lib -- --ignored --nocapture lookup_speed`.
    #[test]
    #[ignore]
    fn lookups_per_row() {
        struct Echo;
        impl Matcher for Echo {
            fn name(&self) -> &'static str {
                "echo"
            }
            fn width(&self) -> usize {
                22
            }
            fn match_batch(&self, q: &[u32], out: &mut [u32]) {
                for (o, r) in out.iter_mut().zip(q.chunks_exact(22)) {
                    *o = r[0];
                }
            }
            fn memory_bytes(&self) -> usize {
                0
            }
            fn stats(&self) -> serde_json::Value {
                serde_json::Value::Null
            }
        }
        let n = 500_000usize;
        let mut x = 1u64;
        let trace: Vec<u32> = (0..n * 22)
            .map(|_| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (x >> 50) as u32
            })
            .collect();
        let table = AnswerTable::from_codes(&Echo, trace.clone());
        let mut cursor = 0;
        let (mut took, mut rows) = (Duration::ZERO, 0);
        for start in (0..n - 4096).step_by(4096 * 3) {
            // 16 windows of 256 rows, each from another place (requests of 256 queries).
            let batch: Vec<u32> = (0..16)
                .flat_map(|k| {
                    let at = (start + k * 7919 * 13) % (n - 256);
                    trace[at * 22..(at + 256) * 22].iter().copied()
                })
                .collect();
            let t = Instant::now();
            let (r, m) = table.answer(&Echo, &batch, &mut cursor);
            took += t.elapsed();
            assert_eq!(m, 0);
            rows += r.len();
        }
        println!("{:.1} ns per row", took.as_nanos() as f64 / rows as f64);
    }
}
