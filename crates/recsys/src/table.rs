//! Embedding tables as files (`RM_create_table` / `RM_open_table` of the seed).
//!
//! Layout: a 4 KiB header, then `rows` rows of `dim` little-endian f32, each row padded to
//! `row_bytes` so that no row straddles a 512 B sector (rows of ≤ 512 B take the next power of
//! two; larger rows a multiple of 512 B), then zero padding to a 4 KiB multiple so that every
//! page of the table can be read with O_DIRECT. The header is checksummed: a foreign, damaged or
//! truncated file is refused with the reason.

use crate::error::{Error, Result};
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

pub const MAGIC: &[u8; 8] = b"OFLDEMB1";
pub const VERSION: u32 = 1;
/// Header size and data offset: one page, so that data pages are page-aligned in the file.
pub const HEADER_BYTES: u64 = 4096;
/// The smallest O_DIRECT unit we rely on (this machine's disk takes 512 B-aligned reads).
pub const SECTOR: u64 = 512;
/// The page: the unit of the page cache and of page-granular device reads.
pub const PAGE: u64 = 4096;
/// Header bytes covered by the checksum (everything before the checksum field).
const SUMMED: usize = 40;

/// Bytes per stored row for `dim` f32 values (see the module doc).
pub fn row_bytes(dim: u32) -> u32 {
    let v = dim.max(1) * 4;
    if u64::from(v) <= SECTOR {
        v.next_power_of_two()
    } else {
        v.div_ceil(SECTOR as u32) * SECTOR as u32
    }
}

/// What a table file says about itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableMeta {
    pub rows: u64,
    pub dim: u32,
    pub row_bytes: u32,
}

impl TableMeta {
    pub fn new(rows: u64, dim: u32) -> TableMeta {
        TableMeta { rows, dim, row_bytes: row_bytes(dim) }
    }
    /// File offset of row `row`.
    pub fn row_offset(&self, row: u64) -> u64 {
        HEADER_BYTES + row * u64::from(self.row_bytes)
    }
    /// Bytes of useful data in one row (what a byte-addressable device would read).
    pub fn vector_bytes(&self) -> u32 {
        self.dim * 4
    }
    /// The file's size: header, rows, padding to a page.
    pub fn file_bytes(&self) -> u64 {
        (HEADER_BYTES + self.rows * u64::from(self.row_bytes)).div_ceil(PAGE) * PAGE
    }
    fn header(&self) -> [u8; HEADER_BYTES as usize] {
        let mut h = [0u8; HEADER_BYTES as usize];
        h[0..8].copy_from_slice(MAGIC);
        h[8..12].copy_from_slice(&VERSION.to_le_bytes());
        h[12..16].copy_from_slice(&self.dim.to_le_bytes());
        h[16..24].copy_from_slice(&self.rows.to_le_bytes());
        h[24..28].copy_from_slice(&self.row_bytes.to_le_bytes());
        h[32..40].copy_from_slice(&HEADER_BYTES.to_le_bytes());
        let sum = fnv1a(&h[..SUMMED]);
        h[SUMMED..SUMMED + 8].copy_from_slice(&sum.to_le_bytes());
        h
    }
    fn parse(path: &Path, h: &[u8]) -> Result<TableMeta> {
        let bad = |p: String| Error::bad_table(path, p);
        if h.len() < SUMMED + 8 {
            return Err(bad(format!("{} bytes, shorter than the {HEADER_BYTES} B header", h.len())));
        }
        if &h[0..8] != MAGIC {
            return Err(bad(format!(
                "no table magic (starts with {:?}; expected {:?})",
                ascii(&h[0..8]),
                ascii(MAGIC)
            )));
        }
        let u32_at = |i: usize| u32::from_le_bytes(h[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(h[i..i + 8].try_into().expect("8 bytes"));
        if u32_at(8) != VERSION {
            return Err(bad(format!("format version {} (this build reads {VERSION})", u32_at(8))));
        }
        if u64_at(SUMMED) != fnv1a(&h[..SUMMED]) {
            return Err(bad("header checksum mismatch (the header is damaged)".into()));
        }
        let meta = TableMeta { rows: u64_at(16), dim: u32_at(12), row_bytes: u32_at(24) };
        if meta.dim == 0 || meta.row_bytes != row_bytes(meta.dim) || u64_at(32) != HEADER_BYTES {
            return Err(bad(format!("inconsistent header: dim {} row_bytes {}", meta.dim, meta.row_bytes)));
        }
        Ok(meta)
    }
}

fn ascii(b: &[u8]) -> String {
    b.iter().map(|&c| if c.is_ascii_graphic() { c as char } else { '.' }).collect()
}

fn fnv1a(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| (h ^ u64::from(x)).wrapping_mul(0x0100_0000_01b3))
}

/// Writes a table row by row (sequential, buffered), then pads and syncs it.
pub struct TableWriter {
    path: PathBuf,
    meta: TableMeta,
    out: BufWriter<File>,
    written: u64,
    pad: Vec<u8>,
}

impl TableWriter {
    pub fn create(path: &Path, rows: u64, dim: u32) -> Result<TableWriter> {
        if dim == 0 {
            return Err(Error::Shape("an embedding table needs dim ≥ 1".into()));
        }
        let meta = TableMeta::new(rows, dim);
        let file = File::create(path).map_err(|e| Error::io(path, "create", e))?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        out.write_all(&meta.header()).map_err(|e| Error::io(path, "write", e))?;
        let pad = vec![0u8; (meta.row_bytes - meta.vector_bytes()) as usize];
        Ok(TableWriter { path: path.to_path_buf(), meta, out, written: 0, pad })
    }

    /// Appends rows given as a flat slice of whole rows.
    pub fn write_rows(&mut self, values: &[f32]) -> Result<()> {
        let dim = self.meta.dim as usize;
        if !values.len().is_multiple_of(dim) {
            return Err(Error::Shape(format!("{} values is not a whole number of rows of {dim}", values.len())));
        }
        let n = (values.len() / dim) as u64;
        if self.written + n > self.meta.rows {
            return Err(Error::Shape(format!("{} rows written to a table of {}", self.written + n, self.meta.rows)));
        }
        for row in values.chunks_exact(dim) {
            for v in row {
                self.out.write_all(&v.to_le_bytes()).map_err(|e| Error::io(&self.path, "write", e))?;
            }
            self.out.write_all(&self.pad).map_err(|e| Error::io(&self.path, "write", e))?;
        }
        self.written += n;
        Ok(())
    }

    /// Pads to a page, flushes and fsyncs; fails if fewer rows were written than declared.
    pub fn finish(mut self) -> Result<TableMeta> {
        if self.written != self.meta.rows {
            return Err(Error::Shape(format!("{} of {} rows written", self.written, self.meta.rows)));
        }
        let used = HEADER_BYTES + self.meta.rows * u64::from(self.meta.row_bytes);
        let tail = vec![0u8; (self.meta.file_bytes() - used) as usize];
        self.out.write_all(&tail).map_err(|e| Error::io(&self.path, "write", e))?;
        let file = self.out.into_inner().map_err(|e| Error::io(&self.path, "write", e.error()))?;
        file.sync_all().map_err(|e| Error::io(&self.path, "fsync", e))?;
        Ok(self.meta)
    }
}

/// A deterministic row: DLRM's initial distribution U(-√(1/rows), √(1/rows)) from a counter-based
/// generator, so a table of any size can be written, and checked, without storing it anywhere.
pub fn init_row(seed: u64, rows: u64, row: u64, out: &mut [f32]) {
    let bound = (1.0 / rows.max(1) as f64).sqrt();
    for (j, v) in out.iter_mut().enumerate() {
        let x = splitmix(seed ^ splitmix(row.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ j as u64));
        let u = (x >> 11) as f64 / (1u64 << 53) as f64; // [0, 1)
        *v = ((2.0 * u - 1.0) * bound) as f32;
    }
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Writes a table of `rows` × `dim` filled by [`init_row`] (`progress` gets rows written so far).
pub fn create_random(path: &Path, rows: u64, dim: u32, seed: u64, mut progress: impl FnMut(u64)) -> Result<TableMeta> {
    let mut w = TableWriter::create(path, rows, dim)?;
    let chunk_rows = (1u64 << 16).min(rows.max(1));
    let mut buf = vec![0f32; (chunk_rows * u64::from(dim)) as usize];
    let mut row = 0;
    while row < rows {
        let n = chunk_rows.min(rows - row);
        let part = &mut buf[..(n * u64::from(dim)) as usize];
        for (i, r) in part.chunks_exact_mut(dim as usize).enumerate() {
            init_row(seed, rows, row + i as u64, r);
        }
        w.write_rows(part)?;
        row += n;
        progress(row);
    }
    w.finish()
}

/// An opened, validated table.
#[derive(Debug)]
pub struct Table {
    pub path: PathBuf,
    pub meta: TableMeta,
    pub file: File,
}

impl Table {
    /// Opens and validates a table (`RM_open_table`): magic, version, header checksum, size.
    pub fn open(path: &Path) -> Result<Table> {
        let file = OpenOptions::new().read(true).open(path).map_err(|e| Error::io(path, "open", e))?;
        let len = file.metadata().map_err(|e| Error::io(path, "stat", e))?.len();
        let mut h = vec![0u8; HEADER_BYTES.min(len) as usize];
        file.read_exact_at(&mut h, 0).map_err(|e| Error::io(path, "read", e))?;
        let meta = TableMeta::parse(path, &h)?;
        if len < meta.file_bytes() {
            return Err(Error::bad_table(
                path,
                format!(
                    "truncated: {len} bytes, a table of {} rows × {} needs {}",
                    meta.rows,
                    meta.dim,
                    meta.file_bytes()
                ),
            ));
        }
        Ok(Table { path: path.to_path_buf(), meta, file })
    }

    /// Reads one row through the page cache (pread).
    pub fn read_row(&self, row: u64, out: &mut [f32]) -> Result<()> {
        let mut b = vec![0u8; self.meta.vector_bytes() as usize];
        self.file.read_exact_at(&mut b, self.meta.row_offset(row)).map_err(|e| Error::io(&self.path, "pread", e))?;
        decode_row(&b, out);
        Ok(())
    }

    /// The whole table in memory (the `dram` strategy), rows packed to `dim`.
    pub fn load_all(&self) -> Result<Vec<f32>> {
        let dim = self.meta.dim as usize;
        let mut out = vec![0f32; self.meta.rows as usize * dim];
        let rb = self.meta.row_bytes as usize;
        let chunk_rows = ((8 << 20) / rb).max(1);
        let mut buf = vec![0u8; chunk_rows * rb];
        for (c, rows_out) in out.chunks_mut(chunk_rows * dim).enumerate() {
            let n = rows_out.len() / dim;
            let b = &mut buf[..n * rb];
            let at = self.meta.row_offset((c * chunk_rows) as u64);
            self.file.read_exact_at(b, at).map_err(|e| Error::io(&self.path, "read", e))?;
            for (i, r) in rows_out.chunks_exact_mut(dim).enumerate() {
                decode_row(&b[i * rb..i * rb + dim * 4], r);
            }
        }
        Ok(out)
    }
}

/// Little-endian f32 bytes → values.
pub fn decode_row(bytes: &[u8], out: &mut [f32]) {
    for (v, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
        *v = f32::from_le_bytes(b.try_into().expect("4 bytes"));
    }
}

/// Adds little-endian f32 bytes into `acc` (the pooled sum's inner loop).
pub fn add_row(bytes: &[u8], acc: &mut [f32]) {
    for (a, b) in acc.iter_mut().zip(bytes.chunks_exact(4)) {
        *a += f32::from_le_bytes(b.try_into().expect("4 bytes"));
    }
}
