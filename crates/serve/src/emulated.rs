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
//!   executor hands its batch over (a bounded [`HandOff`] queue, which sleeps on a futex; copying the codes stands for the staging
//!   into pinned memory a real device call does on the executor) and blocks until the answers
//!   come back, as on a real device call. That thread is **not registered** in
//!   [`crate::metrics::CpuAccounts`], which reads only registered threads' clocks: its lookups,
//!   misses and waits are not the daemon's host path (`stats` → `emulated` shows its own CPU).
//! - **Time.** [`DeviceCosts::batch`] is the one place of the formula, the planner's
//!   (python/offload/plan/simulate.py). The device runs batches one after another through three
//!   one-at-a-time stages, as a GPU with a copy engine each way and one compute queue: H2D, then
//!   kernel, then D2H ([`Lanes`]). The host's launch (`invoke_s`) comes first and takes no lane.
//!   So a batch's H2D may overlap the previous batch's kernel (with k ≥ 2 executors; with k = 1
//!   one batch is out at a time and each is held for exactly the planner's time). A batch is
//!   due when its D2H ends. The device thread asks for a timer slack of 1 ns
//!   ([`tight_timer_slack`]: Linux's default lets a sleep run 50 µs late) and sleeps until then
//!   less a margin it measures at start on its own thread (the sleep's overshoot; BENCHMARKS.md
//!   has it with either slack) and spins for the rest (a `sched_yield` loop would give the core away for a whole time slice on
//!   a busy machine); it answers one executor wake-up early (measured at start too,
//!   its 10th percentile), and the executor holds until the due instant itself, so a batch is
//!   never answered before it is due. A batch whose lookups end after its due instant is counted
//!   `late`. The floor: a hand-over costs the device thread's wake-up and the answer the
//!   executor's, so on a VM (tens of µs each) a batch shorter than about two wake-ups is held
//!   longer than the profile says.
//! - **Reload** recompiles with the served `MatcherKind` (`fast`): a reload turns the emulation
//!   off, and the daemon then answers from the host's `fast` matcher.

use crate::handoff::{HandOff, Popped, Producer};
use offload_rules::{DeviceStages, Encoder, Matcher, RuleType, NO_MATCH};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
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

    /// The time of a batch of `n` queries — the one place of this formula on the Rust side. It is
    /// the planner's (python/offload/plan/simulate.py: `request_time` and `_Model.executor`):
    /// `invoke_s + _transfer(transfer_latency_s, transfer_bps, n × transfer_bytes_per_query) +
    /// n × kernel_query_s + kernel_fixed_s`, `_transfer` = latency + bytes ÷ bps (no bytes term
    /// when bps is 0). The profile's transfer is both ways in one (measured.py: the latency is
    /// H2D's + D2H's, the bytes per query are the query's + the answer's); it is split here for the
    /// stages: half the latency each way, [`ANSWER_BYTES`] per query out, the rest in. The sum
    /// is the planner's.
    pub fn batch(&self, n: usize) -> BatchTime {
        let n = n as f64;
        let per_byte = if self.transfer_bps > 0.0 { 1.0 / self.transfer_bps } else { 0.0 };
        let out_bytes = ANSWER_BYTES.min(self.transfer_bytes_per_query);
        let half_latency = self.transfer_latency_s / 2.0;
        BatchTime {
            invoke_s: self.invoke_s,
            h2d_s: half_latency + n * (self.transfer_bytes_per_query - out_bytes) * per_byte,
            kernel_s: n * self.kernel_query_s + self.kernel_fixed_s,
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

/// Sleeps until `due`, waking `margin` early (the sleep's overshoot) and spinning for the rest.
/// Returns the ns spent spinning.
pub fn hold_until(due: Instant, margin: Duration) -> u64 {
    let mut spun = None;
    for _ in 0..1_000_000_000u64 {
        let now = Instant::now();
        let Some(left) = due.checked_duration_since(now).filter(|d| !d.is_zero()) else { break };
        if left > margin {
            std::thread::sleep(left - margin);
        } else {
            spun.get_or_insert(now);
            std::hint::spin_loop();
        }
    }
    spun.map_or(0, |t| t.elapsed().as_nanos() as u64)
}

/// Asks the kernel to wake this thread's timed sleeps on time: Linux lets a sleep of a normal
/// thread run late by up to its timer slack, 50 µs by default (most of the sleep's overshoot the
/// device measured), so that it may merge wake-ups; at 1 ns the device sleeps closer to each due
/// instant and spins less. Best effort: where it is refused, the slack stays and the measured
/// margin says so.
pub fn tight_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes one integer (the slack in ns) and changes only the calling
    // thread's timer slack; no pointer is passed and no memory is read or written.
    unsafe {
        libc::prctl(
            libc::PR_SET_TIMERSLACK,
            1 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        );
    }
}

/// How long a thread blocked on a hand-off queue takes to run again after a push, on this
/// machine: the 10th percentile of 20 hand-overs (a sleeping core's wake-up: tens of µs on a
/// VM), at most 1 ms.
pub fn wake_latency() -> Duration {
    let (rx, tx) = HandOff::<Instant>::new(1);
    let waker = std::thread::spawn(move || std::iter::from_fn(|| rx.pop()).map(|sent| sent.elapsed()).collect());
    for _ in 0..20 {
        std::thread::sleep(Duration::from_micros(200)); // the receiver is blocked again
        if tx.push(Instant::now()).is_err() {
            break;
        }
    }
    drop(tx);
    let mut woke: Vec<Duration> = waker.join().unwrap_or_default();
    woke.sort();
    woke.get(woke.len() / 10).copied().unwrap_or_default().min(Duration::from_millis(1))
}

/// The sleep's overshoot on this machine: the 90th percentile of 20 sleeps of 50 µs, at most 1 ms.
pub fn sleep_overshoot() -> Duration {
    let asked = Duration::from_micros(50);
    let mut over: Vec<Duration> = (0..20)
        .map(|_| {
            let t = Instant::now();
            std::thread::sleep(asked);
            t.elapsed().saturating_sub(asked)
        })
        .collect();
    over.sort();
    over[over.len() * 9 / 10].min(Duration::from_millis(1))
}

/// A fast hash of a row's codes (FxHash's step, 8 bytes at a time): the table's lookups are the
/// device's work, and SipHash would cost several times more per row.
#[derive(Default, Clone, Copy)]
struct RowHasher(u64);

impl Hasher for RowHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            let w = u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]);
            self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(0x517c_c1b7_2722_0a95);
        }
        for &b in words.remainder() {
            self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(0x517c_c1b7_2722_0a95);
        }
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// Encoded row → winning rule (or [`NO_MATCH`]), precomputed by the real matcher.
pub struct AnswerTable {
    width: usize,
    rows: HashMap<Box<[u32]>, u32, BuildHasherDefault<RowHasher>>,
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
        Ok(AnswerTable::from_codes(matcher, &codes))
    }

    /// The table of `codes`' rows, answered by `matcher`.
    pub fn from_codes(matcher: &dyn Matcher, codes: &[u32]) -> Self {
        let width = matcher.width();
        let n = codes.len().checked_div(width).unwrap_or(0);
        let mut answers = vec![NO_MATCH; n];
        offload_rules::match_parallel(
            matcher,
            codes,
            &mut answers,
            std::thread::available_parallelism().map_or(1, |n| n.get()),
        );
        let mut rows = HashMap::with_capacity_and_hasher(n, BuildHasherDefault::default());
        for (row, &rule) in codes.chunks_exact(width.max(1)).zip(&answers) {
            rows.insert(row.into(), rule);
        }
        AnswerTable { width, rows }
    }

    /// Distinct rows held.
    pub fn len(&self) -> usize {
        self.rows.len()
    }
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The answers of `codes`' rows: from the table, and for rows not in it (returned: their
    /// count) from `matcher`.
    pub fn answer(&self, matcher: &dyn Matcher, codes: &[u32]) -> (Vec<u32>, usize) {
        let w = self.width.max(1);
        let mut rule = Vec::with_capacity(codes.len() / w);
        let mut missed = Vec::new();
        for (i, row) in codes.chunks_exact(w).enumerate() {
            rule.push(self.rows.get(row).copied().unwrap_or_else(|| {
                missed.push(i);
                NO_MATCH
            }));
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
    /// Batches whose lookups ended after their due instant (answered at once), and by how
    /// much in all (ns): what the emulation added to the profile's time.
    pub late_batches: AtomicU64,
    pub late_ns: AtomicU64,
    /// Device-thread wall ns in lookups (and misses), and spinning before a due instant.
    pub lookup_ns: AtomicU64,
    pub spin_ns: AtomicU64,
    /// Batches the executor matched itself: the device thread did not answer within a minute.
    pub fallbacks: AtomicU64,
    /// The device thread's id (0 until it runs), to read its CPU clock.
    pub thread_id: AtomicU64,
}

impl Counters {
    /// The line the daemon prints when it stops.
    pub fn summary_line(&self, spec: &Spec) -> String {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        format!(
            "emulated device: {} batches, {} queries, {} misses (rows not in {}: matched by fast on the device \
             thread), {} late batches ({:.0} µs late on average: the emulation's own delay, its thread's wake-up \
             and lookups), {:.0} ns of lookups per query, {:.0} µs of spin per batch, {} fallbacks",
            l(&self.batches),
            l(&self.queries),
            l(&self.misses),
            spec.queries.display(),
            l(&self.late_batches),
            l(&self.late_ns) as f64 / 1e3 / l(&self.late_batches).max(1) as f64,
            l(&self.lookup_ns) as f64 / l(&self.queries).max(1) as f64,
            l(&self.spin_ns) as f64 / 1e3 / l(&self.batches).max(1) as f64,
            l(&self.fallbacks)
        )
    }
}

/// One batch handed to the device.
struct Job {
    codes: Vec<u32>,
    sent: Instant,
    done: Producer<Answered>,
}

/// A batch's answers, its stages, and when it is due (the executor holds until then).
type Answered = (Vec<u32>, DeviceStages, Instant);

/// The device's measured waits on this machine.
#[derive(Debug, Clone, Copy)]
struct Margins {
    /// The sleep's overshoot: the device wakes this much before a due instant and spins.
    sleep: Duration,
    /// A blocked executor's wake-up: the device answers this much before the due instant, and
    /// the executor holds the rest (rarely any: it is the 10th percentile).
    wake: Duration,
}

/// The emulated device: see the module's documentation.
pub struct EmulatedDevice {
    inner: Arc<dyn Matcher>,
    jobs: Producer<Job>,
    counters: Arc<Counters>,
    spec: Spec,
    rows: usize,
    table_bytes: usize,
    margins: Margins,
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
        let (rows, width) = (table.len(), table.width);
        let (m, c, costs) = (inner.clone(), counters.clone(), spec.costs);
        let (measured, margins) = std::sync::mpsc::sync_channel(1);
        std::thread::Builder::new()
            .name("emulated-device".into())
            .spawn(move || {
                // The margins are the device thread's own: measured after its timer slack is set.
                tight_timer_slack();
                let margins = Margins { sleep: sleep_overshoot(), wake: wake_latency() };
                if measured.send(margins).is_ok() {
                    device_thread(&rx, &*m, &table, costs, &c, margins)
                }
            })
            .map_err(|e| format!("emulated device: its thread: {e}"))?;
        let margins = margins.recv().map_err(|_| "emulated device: its thread ended at start".to_string())?;
        let table_bytes = rows * (width * 4 + 24);
        Ok(EmulatedDevice { inner, jobs, counters, spec, rows, table_bytes, margins })
    }

    /// The live counters (for the line at the end).
    pub fn counters(&self) -> Arc<Counters> {
        self.counters.clone()
    }

    /// The measured margins, as a person reads them.
    pub fn margins(&self) -> String {
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        format!(
            "sleep overshoot {:.0} µs, thread wake-up {:.0} µs (10th percentile)",
            us(self.margins.sleep),
            us(self.margins.wake)
        )
    }
}

/// The device: takes batches in order, books them on the lanes, answers from the table, holds
/// each until due less the executor's wake-up. Ends when the device (its sender) is dropped.
fn device_thread(
    jobs: &HandOff<Job>,
    inner: &dyn Matcher,
    table: &AnswerTable,
    costs: DeviceCosts,
    counters: &Counters,
    margins: Margins,
) {
    counters.thread_id.store(crate::metrics::thread_id().map_or(0, u64::from), Ordering::Relaxed);
    let epoch = Instant::now();
    let mut lanes = Lanes::default();
    while let Some(job) = jobs.pop() {
        let t0 = Instant::now();
        let n = job.codes.len() / table.width.max(1);
        let time = costs.batch(n);
        let due_s = lanes.book(job.sent.saturating_duration_since(epoch).as_secs_f64(), &time);
        let due = epoch + Duration::from_secs_f64(due_s);
        let (rule, misses) = table.answer(inner, &job.codes);
        let looked_up = Instant::now();
        counters.lookup_ns.fetch_add(looked_up.duration_since(t0).as_nanos() as u64, Ordering::Relaxed);
        if looked_up > due {
            counters.late_batches.fetch_add(1, Ordering::Relaxed);
            counters.late_ns.fetch_add(looked_up.duration_since(due).as_nanos() as u64, Ordering::Relaxed);
        }
        let answer_at = due.checked_sub(margins.wake).unwrap_or(due);
        counters.spin_ns.fetch_add(hold_until(answer_at, margins.sleep), Ordering::Relaxed);
        counters.batches.fetch_add(1, Ordering::Relaxed);
        counters.queries.fetch_add(n as u64, Ordering::Relaxed);
        counters.misses.fetch_add(misses as u64, Ordering::Relaxed);
        let _ = job.done.try_push((rule, time.stages(n), due));
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
        let tid = l(&c.thread_id);
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
            "sleep_margin_us": self.margins.sleep.as_secs_f64() * 1e6,
            "wake_margin_us": self.margins.wake.as_secs_f64() * 1e6,
            "device_thread_cpu_ns": u32::try_from(tid).ok().filter(|&t| t != 0).and_then(crate::metrics::thread_cpu_ns),
            "matcher": self.inner.name(),
        })
    }
    /// Hands the batch to the device thread and waits for its answers and stages, then holds
    /// until the batch is due (the device answers a wake-up early). Should the device thread be
    /// gone, or not answer within [`DEVICE_WAIT`], matches here (exact, counted `fallbacks`, no
    /// stages).
    fn match_batch_staged(&self, queries: &[u32], out: &mut [u32]) -> Option<DeviceStages> {
        let (answered, done) = HandOff::new(1);
        let job = Job { codes: queries.to_vec(), sent: Instant::now(), done };
        let reply = match self.jobs.push(job) {
            Ok(()) => answered.pop_until(Instant::now() + DEVICE_WAIT),
            Err(_) => Popped::Closed,
        };
        match reply {
            Popped::Item((rule, stages, due)) if rule.len() == out.len() => {
                out.copy_from_slice(&rule);
                hold_until(due, self.margins.sleep);
                Some(stages)
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

    fn timer_slack_ns() -> i64 {
        // SAFETY: PR_GET_TIMERSLACK takes no argument and returns the calling thread's slack.
        i64::from(unsafe { libc::prctl(libc::PR_GET_TIMERSLACK, 0, 0, 0, 0) })
    }

    #[test]
    fn the_device_thread_asks_for_tight_timers_and_only_it() {
        let (before, after) = std::thread::spawn(|| {
            let before = timer_slack_ns();
            tight_timer_slack();
            (before, timer_slack_ns())
        })
        .join()
        .unwrap();
        assert_eq!(after, 1, "the slack is 1 ns after the call");
        assert!(before > 1, "a thread starts with the default slack ({before} ns)");
        assert!(timer_slack_ns() > 1, "another thread's slack is its own");
    }

    /// The sleep's overshoot with the default slack and a tight one, side by side:
    /// `cargo test -p offload-serve --lib -- --ignored --nocapture overshoot`.
    #[test]
    #[ignore]
    fn overshoot_with_the_default_and_a_tight_timer_slack() {
        let medians: Vec<(f64, f64)> = (0..5)
            .map(|_| {
                let default = std::thread::spawn(sleep_overshoot).join().unwrap();
                let tight = std::thread::spawn(|| {
                    tight_timer_slack();
                    sleep_overshoot()
                })
                .join()
                .unwrap();
                (default.as_secs_f64() * 1e6, tight.as_secs_f64() * 1e6)
            })
            .collect();
        println!("sleep overshoot (90th percentile of 20 sleeps of 50 us), default slack vs 1 ns, us: {medians:?}");
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
        let t = round().batch(1000);
        assert!(close(t.invoke_s, 10e-6) && close(t.h2d_s, 106e-6), "{t:?}");
        assert!(close(t.kernel_s, 51e-6) && close(t.d2h_s, 14e-6), "{t:?}");
        assert!(close(t.total_s(), 181e-6), "{t:?}");
        // The planner's: invoke + latency + n × bytes / bps + n × per query + fixed.
        assert!(close(t.total_s(), 10e-6 + (20e-6 + 1000.0 * 100.0 / 1e9) + 1000.0 * 1e-9 + 50e-6));
        let s = t.stages(1000);
        assert_eq!((s.chunks, s.queries), (1, 1000));
        // No bytes term without a rate (the planner's `_transfer`), an empty batch its floors.
        let t = DeviceCosts { transfer_bps: 0.0, ..round() }.batch(1000);
        assert!(close(t.h2d_s, 10e-6) && close(t.d2h_s, 10e-6), "{t:?}");
        let t = round().batch(0);
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
            assert!(close(c.batch(n).total_s(), planner), "{n}");
        }
        // 16,384 queries: 13.6 + 26.3 + 31.6 (1.64 MB at 51.9 GB/s) + 5.2 + 63.4 ≈ 140 µs.
        assert!((c.batch(16384).total_s() - 140.0e-6).abs() < 1e-6, "{:?}", c.batch(16384));
    }

    #[test]
    fn the_next_batchs_h2d_overlaps_this_ones_kernel() {
        let t = round().batch(1000); // invoke 10, H2D 106, kernel 51, D2H 14 (µs)
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
    fn a_hold_lasts_at_least_until_due() {
        let margin = sleep_overshoot();
        assert!(margin <= Duration::from_millis(1) && wake_latency() <= Duration::from_millis(1));
        for wait in [Duration::ZERO, Duration::from_micros(30), Duration::from_millis(2)] {
            let t = Instant::now();
            hold_until(t + wait, margin);
            assert!(t.elapsed() >= wait);
        }
    }
}
