//! The host's end of a device served elsewhere: [`DeviceLink`] starts the device (its own
//! process, pinned to a CPU and killed with the host; or a thread, in tests), sends OPEN, then
//! rings the channel for each request and waits — boundedly, watching that the device lives —
//! for its answer. Up to two requests are in flight (rm-ssd's next batch goes out before this
//! one's outputs are read), one per slot of the channel.

use super::channel::*;
use super::wire::{write_inputs, write_open, OpenConfig, Reader, Writer};
use super::{fresh_of, server, ChannelBytes, DeviceAt, DeviceInfo, DeviceSide, RmSsdOut};
use crate::error::{Error, Result};
use crate::mlp::Dlrm;
use crate::sls::{Bags, Granularity};
use crate::timing::{IoCounters, Mode, Stages};
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The host's end of a device served elsewhere (a process or a thread).
pub struct DeviceLink {
    chan: Channel,
    _file: File,
    child: Option<Child>,
    thread: Option<std::thread::JoinHandle<Result<()>>>,
    seq: u32,
    timeout: Duration,
    dead: Option<String>,
    pub info: DeviceInfo,
    pub bytes: ChannelBytes,
    dim: usize,
    /// disk mode: the channel's time is measured (a round trip less the device's own time) and
    /// reported as the link stage; flash mode models the link instead.
    link_measured: bool,
    /// Wall time of the last request, from ringing the doorbell to the answer.
    last_call_s: f64,
    /// The last request whose answer was taken (`seq` is the last sent; at most 2 apart).
    done: u32,
    /// When each slot's request was sent.
    sent_at: [Option<Instant>; 2],
    /// When the last answer was taken: a request sent while another was in the device waits
    /// for it there, and that wait is not the channel's time.
    last_done_at: Option<Instant>,
    /// rm-ssd batches sent and not yet read: (request, input bytes, rows).
    pending: std::collections::VecDeque<(u32, usize, usize)>,
}

fn memfd(bytes: usize) -> Result<File> {
    let name = c"offload-recsys-device";
    // SAFETY: `name` is a NUL-terminated string; memfd_create returns a new descriptor or -1.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(Error::io("memfd", "memfd_create", std::io::Error::last_os_error()));
    }
    // SAFETY: `fd` was just created and is owned by nothing else.
    let f = unsafe { File::from_raw_fd(fd) };
    f.set_len(bytes as u64).map_err(|e| Error::io("memfd", "ftruncate", e))?;
    Ok(f)
}

/// The last CPU this process may run on.
fn last_cpu() -> Option<usize> {
    // SAFETY: an all-zero cpu_set_t is valid (plain integers, no invariants).
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 is this thread; `set` is a valid, writable cpu_set_t of the size given.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0 {
        return None;
    }
    // SAFETY: CPU_ISSET reads the set for CPU numbers below CPU_SETSIZE.
    (0..libc::CPU_SETSIZE as usize).rev().find(|&c| unsafe { libc::CPU_ISSET(c, &set) })
}

fn set_cpu(pid: u32, cpu: usize) -> std::result::Result<(), String> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(format!("CPU {cpu} is beyond CPU_SETSIZE"));
    }
    // SAFETY: an all-zero cpu_set_t is the empty set (plain integers, no invariants).
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: CPU_SET writes bit `cpu` of `set`, and `cpu` < CPU_SETSIZE (checked above).
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a valid cpu_set_t of the size given; the call only reads it.
    if unsafe { libc::sched_setaffinity(pid as libc::pid_t, std::mem::size_of::<libc::cpu_set_t>(), &set) } != 0 {
        return Err(format!("sched_setaffinity(CPU {cpu}): {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Starts the device process (`command` + the channel's `path`), killed when the host dies, and
/// pins it to `cpu` (default: the last CPU this process may use); `info` records what was applied.
fn spawn_process(command: &[String], cpu: Option<usize>, path: &str, info: &mut DeviceInfo) -> Result<Child> {
    info.at = "process".into();
    info.command = command.to_vec();
    let (prog, args) = command.split_first().ok_or_else(|| Error::Device("empty device command".into()))?;
    let mut cmd = Command::new(prog);
    // A process group of its own: a terminal's Ctrl-C (SIGINT to the foreground group) reaches
    // the host only, which ends the run and then closes the device; the device never sees it.
    cmd.args(args).arg(path).stdin(Stdio::null()).process_group(0);
    let host_pid = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs in the child between fork and exec; it allocates
    // nothing and only calls prctl, getppid and _exit, which are async-signal-safe.
    // PR_SET_PDEATHSIG survives exec (the interpreter is not set-user-ID), so the
    // device is killed when the host's spawning thread dies; a host that died before
    // prctl ran is caught by the getppid check (the child was re-parented).
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != host_pid {
                libc::_exit(1);
            }
            Ok(())
        });
    }
    let c = cmd.spawn().map_err(|e| Error::Device(format!("cannot start the device process {prog:?}: {e}")))?;
    let pid = c.id();
    info.pid = Some(pid);
    match cpu.or_else(last_cpu) {
        Some(cpu) => match set_cpu(pid, cpu) {
            Ok(()) => info.cpu = Some(cpu),
            Err(why) => info.cpu_reason = Some(why),
        },
        None => info.cpu_reason = Some("this process's CPU set is unknown".into()),
    }
    Ok(c)
}

impl DeviceLink {
    /// Starts a device (`at` is `Process` or `Thread`) for these tables and asks it to OPEN them;
    /// `model` is sent for rm-ssd.
    pub fn start(
        at: &DeviceAt,
        paths: &[PathBuf],
        dim: usize,
        mode: Mode,
        queue_depth: usize,
        model: Option<&Dlrm>,
        area_bytes: usize,
    ) -> Result<DeviceLink> {
        let file = memfd(HEADER + 4 * area_bytes)?;
        let chan = Channel::map(&file)?;
        chan.set(R_MAGIC, MAGIC);
        chan.set(R_AREA, area_bytes as u64);
        chan.set(R_HOST_PID, u64::from(std::process::id()));
        let path = format!("/proc/{}/fd/{}", std::process::id(), file.as_raw_fd());
        let mut info = DeviceInfo { channel: path.clone(), area_bytes, ..DeviceInfo::default() };
        let (mut child, mut thread) = (None, None);
        let timeout_s = match at {
            DeviceAt::InProcess => return Err(Error::Device("DeviceLink::start with DeviceAt::InProcess".into())),
            DeviceAt::Thread { timeout_s } => {
                info.at = "thread".into();
                let p = PathBuf::from(&path);
                thread = Some(
                    std::thread::Builder::new()
                        .name("recsys-device".into())
                        .spawn(move || server::serve(&p))
                        .map_err(|e| Error::Device(format!("cannot start the device thread: {e}")))?,
                );
                *timeout_s
            }
            DeviceAt::Process { command, cpu, timeout_s } => {
                child = Some(spawn_process(command, *cpu, &path, &mut info)?);
                *timeout_s
            }
        };
        let mut link = DeviceLink {
            chan,
            _file: file,
            child,
            thread,
            seq: 0,
            timeout: Duration::from_secs_f64(timeout_s.max(0.001)),
            dead: None,
            info,
            bytes: ChannelBytes::default(),
            dim,
            link_measured: mode == Mode::Disk,
            last_call_s: 0.0,
            done: 0,
            sent_at: [None, None],
            last_done_at: None,
            pending: std::collections::VecDeque::new(),
        };
        let cfg = OpenConfig { paths: paths.to_vec(), dim, mode, queue_depth, model: model.cloned() };
        link.use_next_slot()?;
        let (req, _) = link.chan.areas();
        let mut w = Writer { buf: req, at: 0 };
        write_open(&mut w, &cfg)?;
        let n = w.at;
        link.call(K_OPEN, [0, 0, 0], n)?;
        if link.info.pid.is_none() {
            link.info.pid = Some(link.chan.get(R_DEVICE_PID) as u32);
        }
        Ok(link)
    }

    /// Sends the request already written (`len` bytes) and waits for the answer; returns the
    /// response's length (the channel is left on the answer's slot).
    fn call(&mut self, kind: u64, regs: [u64; 3], len: usize) -> Result<usize> {
        let seq = self.submit(kind, regs, len)?;
        self.complete(seq)
    }

    /// Points the channel at the slot the next request will use (write its payload there).
    fn use_next_slot(&mut self) -> Result<()> {
        if self.seq.wrapping_sub(self.done) >= 2 {
            return Err(Error::Device("two requests are in flight: read an answer before sending more".into()));
        }
        self.chan.slot = (self.seq.wrapping_add(1) & 1) as usize;
        Ok(())
    }

    /// Rings the doorbell for the request written in the next slot; returns its number.
    fn submit(&mut self, kind: u64, regs: [u64; 3], len: usize) -> Result<u32> {
        if let Some(why) = &self.dead {
            return Err(Error::Device(why.clone()));
        }
        self.use_next_slot()?;
        self.chan.set(R_KIND, kind);
        self.chan.set(R_ROWS, regs[0]);
        self.chan.set(R_ARG, regs[1]);
        self.chan.set(R_DENSE, regs[2]);
        self.chan.set(R_REQ_LEN, len as u64);
        self.seq = self.seq.wrapping_add(1);
        self.sent_at[self.chan.slot] = Some(Instant::now());
        self.chan.u32_at(R_REQ_SEQ).store(self.seq, Ordering::Release);
        futex_wake(self.chan.u32_at(R_REQ_SEQ));
        Ok(self.seq)
    }

    /// Waits for the answer to request `seq` (the oldest in flight) and points the channel at
    /// its slot; returns the response's length.
    fn complete(&mut self, seq: u32) -> Result<usize> {
        if let Some(why) = &self.dead {
            return Err(Error::Device(why.clone()));
        }
        debug_assert_eq!(seq, self.done.wrapping_add(1), "answers are taken in order");
        if let Err(e) = self.wait(seq) {
            self.dead = Some(e.to_string());
            return Err(e);
        }
        self.done = seq;
        self.chan.slot = (seq & 1) as usize;
        let now = Instant::now();
        let start = match (self.sent_at[self.chan.slot].take(), self.last_done_at) {
            (Some(sent), Some(prev)) => sent.max(prev),
            (Some(sent), None) => sent,
            (None, _) => now,
        };
        self.last_call_s = now.duration_since(start).as_secs_f64();
        self.last_done_at = Some(now);
        let n = (self.chan.get(R_RESP_LEN) as usize).min(self.chan.area);
        if self.chan.get(R_STATUS) != 0 {
            let (_, resp) = self.chan.areas();
            return Err(Error::Device(format!("the device answered: {}", String::from_utf8_lossy(&resp[..n]))));
        }
        Ok(n)
    }

    fn wait(&mut self, seq: u32) -> Result<()> {
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            let cur = self.chan.u32_at(R_RESP_SEQ).load(Ordering::Acquire);
            if cur.wrapping_sub(seq) as i32 >= 0 {
                return Ok(());
            }
            if spins < SPINS {
                spins += 1;
                std::hint::spin_loop();
                continue;
            }
            if let Some(c) = self.child.as_mut() {
                if let Ok(Some(status)) = c.try_wait() {
                    return Err(Error::Device(format!(
                        "the device process (pid {}) is gone: {status}; open the engine again",
                        c.id()
                    )));
                }
            }
            if self.thread.as_ref().is_some_and(|t| t.is_finished()) {
                return Err(Error::Device("the device thread is gone".into()));
            }
            let waited = start.elapsed();
            if waited >= self.timeout {
                return Err(Error::Device(format!(
                    "the device process did not answer within {:.3} s",
                    self.timeout.as_secs_f64()
                )));
            }
            futex_wait(self.chan.u32_at(R_RESP_SEQ), cur, (self.timeout - waited).min(Duration::from_millis(50)));
        }
    }

    fn add_report(&self, st: &mut Stages, io: &mut IoCounters) {
        let (ssd, op) = (self.chan.getf(R_EMB_SSD), self.chan.getf(R_EMB_OP));
        st.emb_ssd += ssd;
        st.emb_op += op;
        if self.link_measured {
            let busy = ssd + op + self.chan.getf(R_BOT) + self.chan.getf(R_TOP);
            st.link += (self.last_call_s - busy).max(0.0);
        }
        io.media_reads += self.chan.get(R_MEDIA_READS);
        io.media_bytes += self.chan.get(R_MEDIA_BYTES);
    }

    fn send_inputs(&mut self, dense: &[f32], bags: &[Bags<'_>]) -> Result<usize> {
        self.use_next_slot()?;
        let (req, _) = self.chan.areas();
        let mut w = Writer { buf: req, at: 0 };
        write_inputs(&mut w, dense, bags)?;
        Ok(w.at)
    }

    /// Sends a raw request (tests: malformed requests must get a clear error, not a hang).
    pub fn raw_request(&mut self, kind: u64, regs: [u64; 3], payload: &[u8]) -> Result<Vec<u8>> {
        self.use_next_slot()?;
        let (req, _) = self.chan.areas();
        Writer { buf: req, at: 0 }.bytes(payload)?;
        let m = self.call(kind, regs, payload.len())?;
        let (_, resp) = self.chan.areas();
        Ok(resp[..m].to_vec())
    }

    /// Asks the device to close and waits for it (a bounded wait), then kills what is left.
    pub fn close(&mut self) {
        let mut answered = false;
        if self.dead.is_none() {
            let short = Duration::from_secs(2).min(self.timeout);
            let keep = std::mem::replace(&mut self.timeout, short);
            // Batches sent and never read: take their answers first (their slots are busy).
            while let Some((seq, _, _)) = self.pending.pop_front() {
                let _ = self.complete(seq);
            }
            answered = self.call(K_CLOSE, [0, 0, 0], 0).is_ok();
            self.timeout = keep;
            self.dead = Some("the engine was closed".into());
        }
        if let Some(mut c) = self.child.take() {
            // A device that acknowledged CLOSE exits at once; one that did not is killed now.
            let grace = if answered { Duration::from_secs(2) } else { Duration::ZERO };
            let deadline = Instant::now() + grace;
            loop {
                match c.try_wait() {
                    Ok(Some(_)) => break,
                    Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
                    _ => {
                        let _ = c.kill();
                        let _ = c.wait();
                        break;
                    }
                }
            }
        }
        self.chan.set(R_CLOSED, 1);
        futex_wake(self.chan.u32_at(R_REQ_SEQ));
        if let Some(t) = self.thread.take() {
            // A thread that did not answer CLOSE sees the closed register at its next wake-up
            // (within half a second); it is left to end on its own rather than joined.
            if t.is_finished() {
                let _ = t.join();
            }
        }
    }
}

/// The model of rm-ssd went to the device with OPEN; the calls here send batches only.
impl DeviceSide for DeviceLink {
    /// The device's pooled sums of a batch (emb-pagesum, emb-vectorsum). The inputs go as
    /// `RM_send_inputs` sends them, dense features included.
    fn bag_sums(
        &mut self,
        gran: Granularity,
        _on_host: bool,
        dense: &[f32],
        bags: &[Bags<'_>],
        rows: usize,
        pooled: &mut [f32],
        st: &mut Stages,
        io: &mut IoCounters,
    ) -> Result<()> {
        let n = self.send_inputs(dense, bags)?;
        let g = u64::from(gran == Granularity::Vector);
        let m = self.call(K_SUMS, [rows as u64, g, dense.len() as u64], n)?;
        if m != pooled.len() * 4 {
            return Err(Error::Device(format!("the device sent {m} B of sums, {} expected", pooled.len() * 4)));
        }
        let (_, resp) = self.chan.areas();
        let mut r = Reader { buf: resp, at: 0 };
        let got = r.f32s(pooled.len())?;
        pooled.iter_mut().zip(got).for_each(|(a, v)| *a += v);
        self.bytes.to_device += n as u64;
        self.bytes.from_device += m as u64;
        self.add_report(st, io);
        Ok(())
    }

    /// RM-SSD in the device: predictions and the device's measured MLP times.
    fn rm_ssd(
        &mut self,
        _model: &Dlrm,
        dense: &[f32],
        bags: &[Bags<'_>],
        rows: usize,
        st: &mut Stages,
        io: &mut IoCounters,
    ) -> Result<RmSsdOut> {
        DeviceSide::rm_ssd_send(self, _model, dense, bags, rows)?;
        self.rm_ssd_read(st, io)
    }

    /// `RM_send_inputs`: the batch goes to the device, which starts on it at once; up to two
    /// batches may be in flight (the next one's inputs are sent before this one's outputs are
    /// read).
    fn rm_ssd_send(&mut self, _model: &Dlrm, dense: &[f32], bags: &[Bags<'_>], rows: usize) -> Result<()> {
        let n = self.send_inputs(dense, bags)?;
        let seq = self.submit(K_RMSSD, [rows as u64, 1, dense.len() as u64], n)?;
        self.pending.push_back((seq, n, rows));
        Ok(())
    }

    /// `RM_read_outputs`: the predictions of the oldest batch sent.
    fn rm_ssd_read(&mut self, st: &mut Stages, io: &mut IoCounters) -> Result<RmSsdOut> {
        let (seq, n, rows) =
            self.pending.pop_front().ok_or_else(|| Error::Device("no batch was sent to read outputs of".into()))?;
        let m = self.complete(seq)?;
        if m != rows * 4 {
            return Err(Error::Device(format!("the device sent {m} B of predictions, {} expected", rows * 4)));
        }
        let (_, resp) = self.chan.areas();
        let predictions = Reader { buf: resp, at: 0 }.f32s(rows)?;
        self.bytes.to_device += n as u64;
        self.bytes.from_device += m as u64;
        self.add_report(st, io);
        Ok(RmSsdOut { predictions, bot_s: self.chan.getf(R_BOT), top_s: self.chan.getf(R_TOP) })
    }

    /// RecSSD's misses in the device: partial sums into `partial`, the missed vectors returned.
    fn recssd_misses(
        &mut self,
        misses: &[(usize, u64, usize)],
        rows: usize,
        partial: &mut [f32],
        st: &mut Stages,
        io: &mut IoCounters,
    ) -> Result<Vec<Vec<f32>>> {
        self.use_next_slot()?;
        let (req, _) = self.chan.areas();
        let mut w = Writer { buf: req, at: 0 };
        for &(t, row, slot) in misses {
            w.u64(t as u64 | (slot as u64) << 32)?;
            w.u64(row)?;
        }
        let n = w.at;
        let m = self.call(K_RECSSD, [rows as u64, 0, 0], n)?;
        let nf = fresh_of(misses).len();
        let want = (partial.len() + nf * self.dim) * 4;
        if m != want {
            return Err(Error::Device(format!("the device sent {m} B of partial sums and vectors, {want} expected")));
        }
        let (_, resp) = self.chan.areas();
        let mut r = Reader { buf: resp, at: 0 };
        let got = r.f32s(partial.len())?;
        partial.iter_mut().zip(got).for_each(|(a, v)| *a += v);
        let vectors = (0..nf).map(|_| r.f32s(self.dim)).collect::<Result<Vec<_>>>()?;
        self.bytes.to_device += n as u64;
        self.bytes.from_device += m as u64;
        self.add_report(st, io);
        Ok(vectors)
    }

    fn behind_channel(&self) -> bool {
        true
    }

    fn info(&self) -> DeviceInfo {
        self.info.clone()
    }

    fn channel_bytes(&self) -> ChannelBytes {
        self.bytes
    }

    /// The device process's id (None for a thread).
    fn child_pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    fn close(&mut self) {
        DeviceLink::close(self);
    }
}

impl Drop for DeviceLink {
    fn drop(&mut self) {
        self.close();
    }
}
