//! The device's side of the channel: [`serve`] answers requests in order until CLOSE or until
//! the host is gone (the device emulator process's main loop, `python -m offload.recsys.device`,
//! or a thread in tests); [`handle`] turns one request into the device's work and its answer.

use super::channel::*;
use super::wire::{read_inputs, read_open, Reader, Writer};
use super::Device;
use crate::error::{Error, Result};
use crate::mlp::Dlrm;
use crate::sls::{self, Bags, Granularity};
use crate::timing::{IoCounters, Stages};
use std::fs::OpenOptions;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;

struct Served {
    dev: Device,
    model: Option<Dlrm>,
}

/// What a handled request reports in the registers besides its payload.
#[derive(Default)]
struct Report {
    len: usize,
    st: Stages,
    io: IoCounters,
    bot_s: f64,
    top_s: f64,
}

fn handle(kind: u64, regs: [u64; 3], req: &[u8], resp: &mut [u8], state: &mut Option<Served>) -> Result<Report> {
    let [rows, arg, dense_len] = regs;
    let rows = usize::try_from(rows).map_err(|_| Error::Device("malformed batch size".into()))?;
    let mut r = Reader { buf: req, at: 0 };
    let mut w = Writer { buf: resp, at: 0 };
    let mut rep = Report::default();
    if kind == K_OPEN {
        let c = read_open(&mut r)?;
        let dev = Device::open(&c.paths, c.dim, c.mode, c.queue_depth)?;
        *state = Some(Served { dev, model: c.model });
        return Ok(rep);
    }
    if kind == K_CLOSE {
        *state = None;
        return Ok(rep);
    }
    let s = state.as_mut().ok_or_else(|| Error::Device(format!("request {kind} before OPEN")))?;
    let (nt, d) = (s.dev.tables.len(), s.dev.dim);
    let pooled_len = rows.checked_mul(nt * d).ok_or_else(|| Error::Device("malformed batch size".into()))?;
    if pooled_len.saturating_mul(4) > w.buf.len() {
        return Err(Error::Device(format!(
            "sums of a batch of {rows} ({} B) do not fit the channel's {} B area; open the engine with a larger channel",
            pooled_len.saturating_mul(4),
            w.buf.len()
        )));
    }
    match kind {
        K_SUMS | K_RMSSD => {
            let (dense, owned) = read_inputs(&mut r, dense_len as usize, rows, nt)?;
            let bags: Vec<Bags<'_>> = owned.iter().map(|(o, i)| Bags { offsets: o, indices: i }).collect();
            sls::validate_all(&s.dev.metas, rows, &bags)?;
            if kind == K_SUMS {
                let gran = if arg == 1 { Granularity::Vector } else { Granularity::Page };
                let mut pooled = vec![0f32; pooled_len];
                s.dev.bag_sums(gran, false, &bags, &mut pooled, &mut rep.st, &mut rep.io)?;
                w.f32s(&pooled)?;
            } else {
                let model = s.model.as_ref().ok_or_else(|| Error::Device("rm-ssd without a model".into()))?;
                let out = s.dev.rm_ssd(model, &dense, &bags, rows, &mut rep.st, &mut rep.io)?;
                w.f32s(&out.predictions)?;
                rep.bot_s = out.bot_s;
                rep.top_s = out.top_s;
            }
        }
        K_RECSSD => {
            if !req.len().is_multiple_of(16) {
                return Err(Error::Device(format!("malformed misses: {} bytes, not whole 16 B records", req.len())));
            }
            let n = req.len() / 16;
            let mut misses = Vec::with_capacity(n);
            for _ in 0..n {
                let (tr, row) = (r.u64()?, r.u64()?);
                let (t, slot) = ((tr & 0xffff_ffff) as usize, (tr >> 32) as usize);
                if t >= nt || row >= s.dev.metas[t].rows || slot >= rows * nt {
                    return Err(Error::Device(format!("malformed miss: table {t}, row {row}, slot {slot}")));
                }
                misses.push((t, row, slot));
            }
            let mut partial = vec![0f32; pooled_len];
            let vectors = s.dev.recssd_misses(&misses, &mut partial, &mut rep.st, &mut rep.io)?;
            w.f32s(&partial)?;
            for v in &vectors {
                w.f32s(v)?;
            }
        }
        k => return Err(Error::Device(format!("unknown request kind {k}"))),
    }
    rep.len = w.at;
    Ok(rep)
}

fn pid_alive(pid: u64) -> bool {
    // SAFETY: kill with signal 0 sends nothing; it only checks that the process exists.
    pid == 0
        || unsafe { libc::kill(pid as libc::pid_t, 0) } == 0
        || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Serves the channel at `path` (the host's memfd, `/proc/<pid>/fd/<n>`) until CLOSE, or until
/// the host is gone. This is the device process's main loop (`python -m offload.recsys.device`).
pub fn serve(path: &Path) -> Result<()> {
    let file = OpenOptions::new().read(true).write(true).open(path).map_err(|e| Error::io(path, "open", e))?;
    let mut chan = Channel::map(&file)?;
    if chan.get(R_MAGIC) != MAGIC {
        return Err(Error::Device(format!("{}: not a device channel (no magic)", path.display())));
    }
    chan.set(R_DEVICE_PID, u64::from(std::process::id()));
    let host = chan.get(R_HOST_PID);
    let mut state: Option<Served> = None;
    let mut last = chan.u32_at(R_RESP_SEQ).load(Ordering::Acquire);
    loop {
        // Wait for the next request.
        let mut spins = 0u32;
        loop {
            let cur = chan.u32_at(R_REQ_SEQ).load(Ordering::Acquire);
            if cur != last {
                break;
            }
            if spins < SPINS {
                spins += 1;
                std::hint::spin_loop();
                continue;
            }
            if chan.get(R_CLOSED) != 0 || !pid_alive(host) {
                return Ok(());
            }
            futex_wait(chan.u32_at(R_REQ_SEQ), cur, Duration::from_millis(500));
        }
        // Requests are served in order, one slot after the other (a second may already wait).
        let seq = last.wrapping_add(1);
        last = seq;
        chan.slot = (seq & 1) as usize;
        let kind = chan.get(R_KIND);
        let regs = [chan.get(R_ROWS), chan.get(R_ARG), chan.get(R_DENSE)];
        let req_len = (chan.get(R_REQ_LEN) as usize).min(chan.area);
        let (req, resp) = chan.areas();
        let out = handle(kind, regs, &req[..req_len], resp, &mut state);
        match out {
            Ok(rep) => {
                chan.set(R_STATUS, 0);
                chan.set(R_RESP_LEN, rep.len as u64);
                chan.setf(R_EMB_SSD, rep.st.emb_ssd);
                chan.setf(R_EMB_OP, rep.st.emb_op);
                chan.setf(R_BOT, rep.bot_s);
                chan.setf(R_TOP, rep.top_s);
                chan.set(R_MEDIA_READS, rep.io.media_reads);
                chan.set(R_MEDIA_BYTES, rep.io.media_bytes);
            }
            Err(e) => {
                let msg = e.to_string();
                let n = msg.len().min(resp.len());
                resp[..n].copy_from_slice(&msg.as_bytes()[..n]);
                chan.set(R_STATUS, 1);
                chan.set(R_RESP_LEN, n as u64);
            }
        }
        chan.u32_at(R_RESP_SEQ).store(seq, Ordering::Release);
        futex_wake(chan.u32_at(R_RESP_SEQ));
        if kind == K_CLOSE {
            return Ok(());
        }
    }
}
