//! What goes through the channel's payload areas, as plain little-endian words: the OPEN
//! configuration (mode, flash model, table paths, the rm-ssd model's MLPs), a batch's inputs as
//! `RM_send_inputs` sends them, and the reader and writer both sides use. A message that runs
//! past its area is an error that says so, never a read out of bounds.

use crate::error::{Error, Result};
use crate::flash::FlashModel;
use crate::mlp::{Dlrm, Linear, Mlp};
use crate::sls::Bags;
use crate::timing::Mode;
use std::path::PathBuf;

/// Little-endian writer over a payload area.
pub(super) struct Writer<'a> {
    pub(super) buf: &'a mut [u8],
    pub(super) at: usize,
}

impl Writer<'_> {
    pub(super) fn bytes(&mut self, b: &[u8]) -> Result<()> {
        let end = self.at + b.len();
        if end > self.buf.len() {
            return Err(Error::Device(format!(
                "a message of more than {} bytes does not fit the channel's {} B area; open the engine with a \
                 larger channel",
                end,
                self.buf.len()
            )));
        }
        self.buf[self.at..end].copy_from_slice(b);
        self.at = end;
        Ok(())
    }
    pub(super) fn u64(&mut self, v: u64) -> Result<()> {
        self.bytes(&v.to_le_bytes())
    }
    pub(super) fn f64(&mut self, v: f64) -> Result<()> {
        self.bytes(&v.to_le_bytes())
    }
    pub(super) fn f32s(&mut self, v: &[f32]) -> Result<()> {
        self.words(v.iter().map(|x| x.to_le_bytes()))
    }
    pub(super) fn i64s(&mut self, v: &[i64]) -> Result<()> {
        self.words(v.iter().map(|x| x.to_le_bytes()))
    }
    /// Fixed-size little-endian words, one after the other.
    fn words<const N: usize>(&mut self, v: impl ExactSizeIterator<Item = [u8; N]>) -> Result<()> {
        let n = v.len() * N;
        self.room(n)?;
        for (c, x) in self.buf[self.at..self.at + n].chunks_exact_mut(N).zip(v) {
            c.copy_from_slice(&x);
        }
        self.at += n;
        Ok(())
    }
    fn room(&self, n: usize) -> Result<()> {
        if self.at + n > self.buf.len() {
            return Err(Error::Device(format!(
                "a message of more than {} bytes does not fit the channel's {} B area; open the engine with a \
                 larger channel",
                self.at + n,
                self.buf.len()
            )));
        }
        Ok(())
    }
}

/// Little-endian reader over a payload area; running past the end is a malformed message.
pub(super) struct Reader<'a> {
    pub(super) buf: &'a [u8],
    pub(super) at: usize,
}

impl<'a> Reader<'a> {
    pub(super) fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.buf.len()).ok_or_else(|| {
            Error::Device(format!("malformed message: {n} more bytes wanted at byte {} of {}", self.at, self.buf.len()))
        })?;
        let s = &self.buf[self.at..end];
        self.at = end;
        Ok(s)
    }
    pub(super) fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    pub(super) fn usize(&mut self) -> Result<usize> {
        let v = self.u64()?;
        usize::try_from(v).map_err(|_| Error::Device(format!("malformed message: count {v}")))
    }
    pub(super) fn f64(&mut self) -> Result<f64> {
        Ok(f64::from_bits(self.u64()?))
    }
    pub(super) fn f32s(&mut self, n: usize) -> Result<Vec<f32>> {
        Ok(self.words(n)?.map(f32::from_le_bytes).collect())
    }
    pub(super) fn i64s(&mut self, n: usize) -> Result<Vec<i64>> {
        Ok(self.words(n)?.map(i64::from_le_bytes).collect())
    }
    /// `n` fixed-size little-endian words.
    fn words<const N: usize>(&mut self, n: usize) -> Result<impl Iterator<Item = [u8; N]> + 'a> {
        let b = self.take(n.checked_mul(N).ok_or_else(|| Error::Device("malformed message".into()))?)?;
        Ok(b.chunks_exact(N).map(|c| c.try_into().expect("N bytes")))
    }
}

fn write_mlp(w: &mut Writer<'_>, m: &Mlp) -> Result<()> {
    w.u64(m.layers.len() as u64)?;
    for l in &m.layers {
        w.u64(l.inputs as u64)?;
        w.u64(l.outputs as u64)?;
        w.f32s(&l.weight)?;
        w.f32s(&l.bias)?;
    }
    Ok(())
}

fn read_mlp(r: &mut Reader<'_>) -> Result<Mlp> {
    let n = r.usize()?;
    let mut layers = Vec::new();
    for _ in 0..n {
        let (i, o) = (r.usize()?, r.usize()?);
        let w = r.f32s(i.checked_mul(o).ok_or_else(|| Error::Device("malformed layer".into()))?)?;
        let b = r.f32s(o)?;
        layers.push(Linear::new(i, o, w, b)?);
    }
    Mlp::new(layers)
}

/// The OPEN request: what the device needs to serve a model's tables.
pub(super) struct OpenConfig {
    pub(super) paths: Vec<PathBuf>,
    pub(super) dim: usize,
    pub(super) mode: Mode,
    pub(super) queue_depth: usize,
    pub(super) model: Option<Dlrm>,
}

pub(super) fn write_open(w: &mut Writer<'_>, c: &OpenConfig) -> Result<()> {
    match c.mode {
        Mode::Disk => w.u64(0)?,
        Mode::Flash(m) => {
            w.u64(1)?;
            for v in [
                f64::from(m.channels),
                f64::from(m.page_bytes),
                m.t_page_us,
                m.flush_fraction,
                m.host_iops_4k,
                m.clock_mhz,
                m.link_bytes_per_s,
                m.doorbell_us,
            ] {
                w.f64(v)?;
            }
        }
    }
    w.u64(c.queue_depth as u64)?;
    w.u64(c.dim as u64)?;
    w.u64(c.paths.len() as u64)?;
    for p in &c.paths {
        let b = p.as_os_str().as_encoded_bytes();
        w.u64(b.len() as u64)?;
        w.bytes(b)?;
    }
    match &c.model {
        None => w.u64(0)?,
        Some(m) => {
            w.u64(1)?;
            w.u64(m.dense_width as u64)?;
            w.u64(m.tables as u64)?;
            w.u64(m.dim as u64)?;
            write_mlp(w, &m.bottom)?;
            write_mlp(w, &m.top)?;
        }
    }
    Ok(())
}

pub(super) fn read_open(r: &mut Reader<'_>) -> Result<OpenConfig> {
    let mode = match r.u64()? {
        0 => Mode::Disk,
        1 => {
            let mut v = [0f64; 8];
            for x in &mut v {
                *x = r.f64()?;
            }
            Mode::Flash(FlashModel {
                channels: v[0] as u32,
                page_bytes: v[1] as u32,
                t_page_us: v[2],
                flush_fraction: v[3],
                host_iops_4k: v[4],
                clock_mhz: v[5],
                link_bytes_per_s: v[6],
                doorbell_us: v[7],
            })
        }
        m => return Err(Error::Device(format!("malformed OPEN: mode {m}"))),
    };
    let queue_depth = r.usize()?;
    let dim = r.usize()?;
    let n = r.usize()?;
    let mut paths = Vec::new();
    for _ in 0..n {
        let len = r.usize()?;
        let b = r.take(len)?;
        let s = std::str::from_utf8(b).map_err(|_| Error::Device("malformed OPEN: a path is not UTF-8".into()))?;
        paths.push(PathBuf::from(s));
    }
    let model = match r.u64()? {
        0 => None,
        _ => {
            let (dw, tables, d) = (r.usize()?, r.usize()?, r.usize()?);
            let bottom = read_mlp(r)?;
            let top = read_mlp(r)?;
            Some(Dlrm::new(dw, bottom, top, tables, d)?)
        }
    };
    Ok(OpenConfig { paths, dim, mode, queue_depth, model })
}

/// Writes a batch's inputs: dense, then per table its offsets and indices.
pub(super) fn write_inputs(w: &mut Writer<'_>, dense: &[f32], bags: &[Bags<'_>]) -> Result<()> {
    w.f32s(dense)?;
    for b in bags {
        w.i64s(b.offsets)?;
        w.i64s(b.indices)?;
    }
    Ok(())
}

pub(super) type Inputs = (Vec<f32>, Vec<(Vec<i64>, Vec<i64>)>);

pub(super) fn read_inputs(r: &mut Reader<'_>, dense_len: usize, rows: usize, tables: usize) -> Result<Inputs> {
    let dense = r.f32s(dense_len)?;
    let mut bags = Vec::with_capacity(tables);
    for t in 0..tables {
        let offsets = r.i64s(rows.checked_add(1).ok_or_else(|| Error::Device("malformed batch".into()))?)?;
        let n = *offsets.last().expect("rows + 1 ≥ 1");
        let n =
            usize::try_from(n).map_err(|_| Error::Device(format!("malformed batch: table {t} ends at offset {n}")))?;
        bags.push((offsets, r.i64s(n)?));
    }
    Ok((dense, bags))
}
