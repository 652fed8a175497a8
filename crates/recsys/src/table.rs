//! Embedding tables as files (`RM_create_table` / `RM_open_table` of the seed).
//!
//! Layout (format version 2): a 4 KiB header, then `rows` rows of `dim` little-endian f32, each
//! row padded to `row_bytes` so that no row straddles a 512 B sector (rows of ≤ 512 B take the
//! next power of two; larger rows a multiple of 512 B), then zero padding to a 4 KiB multiple so
//! that every page of the table can be read with O_DIRECT; then the row checksums: one CRC-32C
//! per checksum block (a 512 B sector of rows for rows ≤ 512 B, else one row), 4 bytes each,
//! padded to a page. The header (FNV-1a checksummed) holds the CRC-32C of the checksum area.
//!
//! What is checked when: opening checks the header, the size and the checksum area (a foreign,
//! damaged or truncated file is refused with the reason); every read a strategy makes checks the
//! blocks holding the rows it looks up (a block is the smallest unit any strategy reads, so the
//! check needs no extra read); [`Table::verify`] checks every block. A damaged block is an error
//! naming the file, the row and the block. Files are written to a temporary name, fsynced and
//! renamed: a table is there whole or not at all.

use crate::error::{Error, Result};
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

pub const MAGIC: &[u8; 8] = b"OFLDEMB1";
/// 2: row checksums. Version 1 (no row checksums) is refused: recreate such tables.
pub const VERSION: u32 = 2;
/// Header size and data offset: one page, so that data pages are page-aligned in the file.
pub const HEADER_BYTES: u64 = 4096;
/// The smallest O_DIRECT unit we rely on (this machine's disk takes 512 B-aligned reads).
pub const SECTOR: u64 = 512;
/// The page: the unit of the page cache and of page-granular device reads.
pub const PAGE: u64 = 4096;
/// Header bytes covered by the header checksum (everything before the checksum field).
const SUMMED: usize = 64;
/// The element type code in the header: little-endian f32.
const DTYPE_F32: u32 = 1;

/// The most values a row may hold (1 GiB rows), so that `row_bytes` fits 32 bits.
pub const MAX_DIM: u32 = 1 << 28;

/// Bytes per stored row for `dim` f32 values (see the module doc); `dim` ≤ [`MAX_DIM`].
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
    /// The checksum block: a 512 B sector of whole rows for rows ≤ 512 B, else one row. Every
    /// read a strategy makes (a sector, the sectors of a row, a page, a row's block) holds the
    /// whole block of each row it looks up.
    pub fn block_bytes(&self) -> u32 {
        self.row_bytes.max(SECTOR as u32)
    }
    /// Checksum blocks of the table.
    pub fn blocks(&self) -> u64 {
        (self.rows * u64::from(self.row_bytes)).div_ceil(u64::from(self.block_bytes()))
    }
    /// The block holding row `row`.
    pub fn block_of(&self, row: u64) -> u64 {
        row * u64::from(self.row_bytes) / u64::from(self.block_bytes())
    }
    /// File offset of block `block`.
    pub fn block_offset(&self, block: u64) -> u64 {
        HEADER_BYTES + block * u64::from(self.block_bytes())
    }
    /// The rows of block `block`, as words ("row 7" or "rows 4-7").
    pub fn rows_of_block(&self, block: u64) -> String {
        let per = u64::from(self.block_bytes() / self.row_bytes);
        let first = block * per;
        let last = (first + per).min(self.rows.max(1)) - 1;
        if first >= last {
            format!("row {first}")
        } else {
            format!("rows {first}-{last}")
        }
    }
    /// Where the row checksums start: after the rows, padded to a page.
    pub fn sums_offset(&self) -> u64 {
        (HEADER_BYTES + self.blocks() * u64::from(self.block_bytes())).div_ceil(PAGE) * PAGE
    }
    /// The file's size: header, rows, padding to a page, checksums, padding to a page.
    pub fn file_bytes(&self) -> u64 {
        self.sums_offset() + (self.blocks() * 4).div_ceil(PAGE) * PAGE
    }
    fn header(&self, sums_crc: u32) -> [u8; HEADER_BYTES as usize] {
        let mut h = [0u8; HEADER_BYTES as usize];
        h[0..8].copy_from_slice(MAGIC);
        h[8..12].copy_from_slice(&VERSION.to_le_bytes());
        h[12..16].copy_from_slice(&self.dim.to_le_bytes());
        h[16..24].copy_from_slice(&self.rows.to_le_bytes());
        h[24..28].copy_from_slice(&self.row_bytes.to_le_bytes());
        h[28..32].copy_from_slice(&self.block_bytes().to_le_bytes());
        h[32..40].copy_from_slice(&HEADER_BYTES.to_le_bytes());
        h[40..48].copy_from_slice(&self.sums_offset().to_le_bytes());
        h[48..56].copy_from_slice(&self.blocks().to_le_bytes());
        h[56..60].copy_from_slice(&sums_crc.to_le_bytes());
        h[60..64].copy_from_slice(&DTYPE_F32.to_le_bytes());
        let sum = fnv1a(&h[..SUMMED]);
        h[SUMMED..SUMMED + 8].copy_from_slice(&sum.to_le_bytes());
        h
    }
    /// Whether the sizes of a table of `rows` × `dim` (the file's, and every offset in it) fit
    /// 64 bits: false only for a crafted header, whose arithmetic would otherwise wrap (in a
    /// release build) into a small file that is accepted (found by fuzzing, docs/fuzzing.md).
    fn size_fits(&self) -> bool {
        // Beyond the rows: their roundings to a block and a page (< 2^31 B) and the checksums
        // (4 B a block of ≥ 512 B: < rows' bytes / 64).
        self.dim <= MAX_DIM
            && self
                .rows
                .checked_mul(u64::from(row_bytes(self.dim)))
                .is_some_and(|b| b.checked_add(b / 64 + (1 << 31)).is_some())
    }
    /// The header's metadata and the CRC-32C of the checksum area.
    fn parse(path: &Path, h: &[u8]) -> Result<(TableMeta, u32)> {
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
        if u32_at(8) == 1 {
            return Err(bad("format version 1 has no row checksums: recreate the model with \
                 `offload recsys create` (or the table with this build)"
                .into()));
        }
        if u32_at(8) != VERSION {
            return Err(bad(format!("format version {} (this build reads {VERSION})", u32_at(8))));
        }
        if u64_at(SUMMED) != fnv1a(&h[..SUMMED]) {
            return Err(bad("header checksum mismatch (the header is damaged)".into()));
        }
        let meta = TableMeta { rows: u64_at(16), dim: u32_at(12), row_bytes: u32_at(24) };
        if !meta.size_fits() {
            return Err(bad(format!(
                "impossible size: {} rows × {} (the file size overflows 64 bits)",
                meta.rows, meta.dim
            )));
        }
        if meta.dim == 0
            || meta.row_bytes != row_bytes(meta.dim)
            || u64_at(32) != HEADER_BYTES
            || u32_at(28) != meta.block_bytes()
            || u64_at(40) != meta.sums_offset()
            || u64_at(48) != meta.blocks()
            || u32_at(60) != DTYPE_F32
        {
            return Err(bad(format!(
                "inconsistent header: dim {} row_bytes {} block_bytes {} blocks {} dtype {}",
                meta.dim,
                meta.row_bytes,
                u32_at(28),
                u64_at(48),
                u32_at(60)
            )));
        }
        Ok((meta, u32_at(56)))
    }
}

fn ascii(b: &[u8]) -> String {
    b.iter().map(|&c| if c.is_ascii_graphic() { c as char } else { '.' }).collect()
}

fn fnv1a(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| (h ^ u64::from(x)).wrapping_mul(0x0100_0000_01b3))
}

/// CRC-32C (Castagnoli) of `b`, continuing from `crc` (0 to start): the SSE4.2 instruction where
/// the CPU has it (~8 B per cycle), a table otherwise.
pub fn crc32c(crc: u32, b: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("sse4.2") {
            // SAFETY: the CPU has SSE4.2 (checked just above).
            return unsafe { crc32c_sse42(crc, b) };
        }
    }
    crc32c_table(crc, b)
}

/// # Safety
/// The caller must have checked that the CPU has SSE4.2 (`crc32c` does): the intrinsics are
/// then sound on any input, as they read only the values passed and no memory.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
unsafe fn crc32c_sse42(crc: u32, b: &[u8]) -> u32 {
    use std::arch::x86_64::{_mm_crc32_u64, _mm_crc32_u8};
    let mut words = b.chunks_exact(8);
    let mut c = u64::from(!crc);
    for w in &mut words {
        c = _mm_crc32_u64(c, u64::from_le_bytes(w.try_into().expect("8 bytes")));
    }
    let mut c = c as u32;
    for &x in words.remainder() {
        c = _mm_crc32_u8(c, x);
    }
    !c
}

/// The portable CRC-32C (one table lookup per byte).
pub fn crc32c_table(crc: u32, b: &[u8]) -> u32 {
    static TABLE: std::sync::OnceLock<[u32; 256]> = std::sync::OnceLock::new();
    let t = TABLE.get_or_init(|| {
        let mut t = [0u32; 256];
        for (i, e) in t.iter_mut().enumerate() {
            let mut c = i as u32;
            for _ in 0..8 {
                c = if c & 1 != 0 { (c >> 1) ^ 0x82F6_3B78 } else { c >> 1 };
            }
            *e = c;
        }
        t
    });
    !b.iter().fold(!crc, |c, &x| t[((c ^ u32::from(x)) & 0xff) as usize] ^ (c >> 8))
}

/// A temporary name beside `path` (same directory, so the rename is atomic).
pub fn temp_beside(path: &Path) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let n = N.fetch_add(1, Ordering::Relaxed);
    path.with_file_name(format!(".{name}.{}.{n}.tmp", std::process::id()))
}

/// Makes `tmp` (written and fsynced) appear as `path`, and syncs the directory.
pub fn rename_into_place(tmp: &Path, path: &Path) -> Result<()> {
    std::fs::rename(tmp, path).map_err(|e| Error::io(path, "rename", e))?;
    if let Some(dir) = path.parent() {
        let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all(); // some file systems refuse fsync on a directory
        }
    }
    Ok(())
}

/// Writes a table row by row (sequential, buffered) to a temporary name beside `path`, with the
/// row checksums; [`TableWriter::finish`] pads, fsyncs and renames it into place. Dropped
/// unfinished (an error, a full disk), it removes the temporary: nothing half-written remains.
pub struct TableWriter {
    path: PathBuf,
    tmp: PathBuf,
    meta: TableMeta,
    out: Option<BufWriter<File>>,
    written: u64,
    pad: Vec<u8>,
    /// CRC-32C of the block being written, rows in it so far, and the finished blocks' CRCs.
    crc: u32,
    in_block: u32,
    sums: Vec<u32>,
}

impl TableWriter {
    pub fn create(path: &Path, rows: u64, dim: u32) -> Result<TableWriter> {
        if dim == 0 || dim > MAX_DIM {
            return Err(Error::Shape(format!("an embedding table needs 1 ≤ dim ≤ {MAX_DIM}")));
        }
        let meta = TableMeta::new(rows, dim);
        if !meta.size_fits() {
            return Err(Error::Shape(format!("{rows} rows × {dim} overflows a file's size")));
        }
        let tmp = temp_beside(path);
        let file = File::create(&tmp).map_err(|e| Error::io(path, "create", e))?;
        let mut w = TableWriter {
            path: path.to_path_buf(),
            tmp,
            meta,
            out: Some(BufWriter::with_capacity(1 << 20, file)),
            written: 0,
            pad: vec![0u8; (meta.row_bytes - meta.vector_bytes()) as usize],
            crc: 0,
            in_block: 0,
            sums: Vec::with_capacity(meta.blocks() as usize),
        };
        // The header goes last (it holds the checksum area's CRC): a placeholder until then.
        w.put(&[0u8; HEADER_BYTES as usize])?;
        Ok(w)
    }

    fn put(&mut self, b: &[u8]) -> Result<()> {
        let out = self.out.as_mut().expect("open until finish");
        out.write_all(b).map_err(|e| Error::io(&self.path, "write", e))
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
        let per_block = self.meta.block_bytes() / self.meta.row_bytes;
        let mut row_buf = vec![0u8; self.meta.row_bytes as usize];
        for row in values.chunks_exact(dim) {
            for (b, v) in row_buf.chunks_exact_mut(4).zip(row) {
                b.copy_from_slice(&v.to_le_bytes());
            }
            let used = dim * 4;
            row_buf[used..].copy_from_slice(&self.pad);
            self.put(&row_buf)?;
            self.crc = crc32c(self.crc, &row_buf);
            self.in_block += 1;
            if self.in_block == per_block {
                self.sums.push(self.crc);
                (self.crc, self.in_block) = (0, 0);
            }
        }
        self.written += n;
        Ok(())
    }

    /// Pads to a page, writes the checksums and the header, fsyncs and renames into place; fails
    /// (leaving nothing) if fewer rows were written than declared.
    pub fn finish(mut self) -> Result<TableMeta> {
        if self.written != self.meta.rows {
            return Err(Error::Shape(format!("{} of {} rows written", self.written, self.meta.rows)));
        }
        let m = self.meta;
        if self.in_block > 0 {
            // The last block runs on into the zero padding.
            let rest = (m.block_bytes() - self.in_block * m.row_bytes) as usize;
            self.crc = crc32c(self.crc, &vec![0u8; rest]);
            self.sums.push(self.crc);
        }
        debug_assert_eq!(self.sums.len() as u64, m.blocks());
        let used = HEADER_BYTES + m.rows * u64::from(m.row_bytes);
        self.put(&vec![0u8; (m.sums_offset() - used) as usize])?;
        let mut area: Vec<u8> = self.sums.iter().flat_map(|s| s.to_le_bytes()).collect();
        let sums_crc = crc32c(0, &area);
        area.resize((m.file_bytes() - m.sums_offset()) as usize, 0);
        self.put(&area)?;
        let out = self.out.take().expect("open until finish");
        let file = out.into_inner().map_err(|e| Error::io(&self.path, "write", e.error()))?;
        file.write_all_at(&m.header(sums_crc), 0).map_err(|e| Error::io(&self.path, "write", e))?;
        file.sync_all().map_err(|e| Error::io(&self.path, "fsync", e))?;
        drop(file);
        rename_into_place(&self.tmp, &self.path)?;
        self.tmp = PathBuf::new(); // renamed: nothing to remove
        Ok(m)
    }
}

impl Drop for TableWriter {
    fn drop(&mut self) {
        if !self.tmp.as_os_str().is_empty() {
            drop(self.out.take().map(BufWriter::into_parts)); // unwritten rows are dropped
            let _ = std::fs::remove_file(&self.tmp);
        }
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

/// Writes a table of `rows` × `dim` filled by [`init_row`] (`progress` gets rows written so far;
/// an error it returns, e.g. [`Error::Stopped`] at Ctrl-C, stops the write and leaves no file).
pub fn create_random(
    path: &Path,
    rows: u64,
    dim: u32,
    seed: u64,
    mut progress: impl FnMut(u64) -> Result<()>,
) -> Result<TableMeta> {
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
        progress(row)?;
    }
    w.finish()
}

/// A table's header as read, without the checksum area: what a model directory compares with
/// its manifest (cheap: one 4 KiB read and a stat).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub meta: TableMeta,
    pub version: u32,
    /// CRC-32C of the checksum area: a fingerprint of the table's contents.
    pub sums_crc: u32,
}

impl Header {
    /// Reads and validates a table's header and size.
    pub fn read(path: &Path) -> Result<Header> {
        let file = OpenOptions::new().read(true).open(path).map_err(|e| Error::io(path, "open", e))?;
        Ok(Self::of(path, &file)?.0)
    }

    fn of(path: &Path, file: &File) -> Result<(Header, u64)> {
        let len = file.metadata().map_err(|e| Error::io(path, "stat", e))?.len();
        let mut h = vec![0u8; HEADER_BYTES.min(len) as usize];
        file.read_exact_at(&mut h, 0).map_err(|e| Error::io(path, "read", e))?;
        let (meta, sums_crc) = TableMeta::parse(path, &h)?;
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
        Ok((Header { meta, version: VERSION, sums_crc }, len))
    }
}

/// An opened, validated table and its row checksums (4 bytes per 512 B of rows, in memory).
#[derive(Debug)]
pub struct Table {
    pub path: PathBuf,
    pub meta: TableMeta,
    pub file: File,
    /// CRC-32C of each checksum block.
    pub sums: Vec<u32>,
    /// CRC-32C of the checksum area (the header's fingerprint of the contents).
    pub sums_crc: u32,
}

impl Table {
    /// Opens and validates a table (`RM_open_table`): magic, version, header checksum, size, and
    /// the checksum area against the header.
    pub fn open(path: &Path) -> Result<Table> {
        let file = OpenOptions::new().read(true).open(path).map_err(|e| Error::io(path, "open", e))?;
        let (h, _) = Header::of(path, &file)?;
        let meta = h.meta;
        let mut area = vec![0u8; (meta.blocks() * 4) as usize];
        file.read_exact_at(&mut area, meta.sums_offset()).map_err(|e| Error::io(path, "read", e))?;
        if crc32c(0, &area) != h.sums_crc {
            return Err(Error::bad_table(path, "the row checksum area is damaged (checksum mismatch)"));
        }
        let sums = area.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes"))).collect();
        Ok(Table { path: path.to_path_buf(), meta, file, sums, sums_crc: h.sums_crc })
    }

    fn damaged(&self, block: u64, row: Option<u64>) -> Error {
        let at = self.meta.block_offset(block);
        let what = match row {
            Some(r) => format!("row {r} (block {block}: {})", self.meta.rows_of_block(block)),
            None => format!("block {block} ({})", self.meta.rows_of_block(block)),
        };
        Error::bad_table(
            &self.path,
            format!(
                "{what}, bytes {at}-{}: checksum mismatch (the rows are damaged; recreate or restore the table)",
                at + u64::from(self.meta.block_bytes()) - 1
            ),
        )
    }

    /// Checks block `block` given its bytes; `row` is the row looked up, for the error.
    pub fn check_block(&self, block: u64, bytes: &[u8], row: Option<u64>) -> Result<()> {
        if crc32c(0, bytes) == self.sums[block as usize] {
            Ok(())
        } else {
            Err(self.damaged(block, row))
        }
    }

    /// Checks the block of every row looked up in a unit read at file offset `unit_offset`
    /// (`rows_at`: the rows' offsets within `bytes`); each block once per call when repeated
    /// uses are adjacent.
    pub fn check_rows_in(&self, unit_offset: u64, bytes: &[u8], rows_at: impl Iterator<Item = u32>) -> Result<()> {
        let bb = u64::from(self.meta.block_bytes());
        let mut last = u64::MAX;
        for at in rows_at {
            let row = (unit_offset + u64::from(at) - HEADER_BYTES) / u64::from(self.meta.row_bytes);
            let block = self.meta.block_of(row);
            if block == last {
                continue;
            }
            last = block;
            let lo = (self.meta.block_offset(block) - unit_offset) as usize;
            self.check_block(block, &bytes[lo..lo + bb as usize], Some(row))?;
        }
        Ok(())
    }

    /// Reads one row through the page cache (pread of its checksum block, checked).
    pub fn read_row(&self, row: u64, out: &mut [f32]) -> Result<()> {
        let block = self.meta.block_of(row);
        let mut b = vec![0u8; self.meta.block_bytes() as usize];
        self.file
            .read_exact_at(&mut b, self.meta.block_offset(block))
            .map_err(|e| Error::io(&self.path, "pread", e))?;
        self.check_block(block, &b, Some(row))?;
        let at = (self.meta.row_offset(row) - self.meta.block_offset(block)) as usize;
        decode_row(&b[at..at + self.meta.vector_bytes() as usize], out);
        Ok(())
    }

    /// Reads every block in 8 MiB chunks: `each(first_block, bytes)`.
    fn for_each_chunk(&self, mut each: impl FnMut(u64, &[u8]) -> Result<()>) -> Result<()> {
        let bb = u64::from(self.meta.block_bytes());
        let per_chunk = ((8 << 20) / bb).max(1);
        let mut buf = vec![0u8; (per_chunk * bb) as usize];
        let mut block = 0;
        while block < self.meta.blocks() {
            let n = per_chunk.min(self.meta.blocks() - block);
            let b = &mut buf[..(n * bb) as usize];
            self.file.read_exact_at(b, self.meta.block_offset(block)).map_err(|e| Error::io(&self.path, "read", e))?;
            each(block, b)?;
            block += n;
        }
        Ok(())
    }

    /// Checks every row's checksum (`progress(bytes checked)`; an error it returns stops the
    /// check); the error names the first damaged block and counts them all.
    pub fn verify(&self, mut progress: impl FnMut(u64) -> Result<()>) -> Result<()> {
        let bb = self.meta.block_bytes() as usize;
        let (mut first, mut bad) = (None, 0u64);
        self.for_each_chunk(|b0, bytes| {
            for (i, blk) in bytes.chunks_exact(bb).enumerate() {
                if crc32c(0, blk) != self.sums[b0 as usize + i] {
                    first = first.or(Some(b0 + i as u64));
                    bad += 1;
                }
            }
            progress((b0 * bb as u64) + bytes.len() as u64)
        })?;
        match first {
            None => Ok(()),
            Some(b) => {
                let e = self.damaged(b, None).to_string();
                Err(Error::bad_table(
                    &self.path,
                    format!(
                        "{}; {bad} damaged block{} in all",
                        e.split_once(": not a usable embedding table: ").map_or(e.as_str(), |x| x.1),
                        if bad == 1 { "" } else { "s" }
                    ),
                ))
            }
        }
    }

    /// The whole table in memory (the `dram` strategy), rows packed to `dim`, every block checked.
    pub fn load_all(&self) -> Result<Vec<f32>> {
        let dim = self.meta.dim as usize;
        let (rb, bb) = (self.meta.row_bytes as usize, self.meta.block_bytes() as usize);
        let mut out = vec![0f32; self.meta.rows as usize * dim];
        self.for_each_chunk(|b0, bytes| {
            for (i, blk) in bytes.chunks_exact(bb).enumerate() {
                self.check_block(b0 + i as u64, blk, None)?;
            }
            let first_row = (b0 as usize * bb) / rb;
            let n = (bytes.len() / rb).min(self.meta.rows as usize - first_row);
            for (i, r) in out[first_row * dim..(first_row + n) * dim].chunks_exact_mut(dim).enumerate() {
                decode_row(&bytes[i * rb..i * rb + dim * 4], r);
            }
            Ok(())
        })?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_matches_the_standard_check_value_both_ways() {
        assert_eq!(crc32c(0, b"123456789"), 0xE306_9283);
        assert_eq!(crc32c_table(0, b"123456789"), 0xE306_9283);
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
        assert_eq!(crc32c(0, &data), crc32c_table(0, &data));
        assert_eq!(crc32c(crc32c(0, &data[..333]), &data[333..]), crc32c(0, &data));
    }

    /// A version-2 header with these fields and a right checksum (what a crafted file has).
    fn crafted(dim: u32, rows: u64, row_bytes: u32, block_bytes: u32, sums_offset: u64, blocks: u64) -> Vec<u8> {
        let mut h = vec![0u8; HEADER_BYTES as usize];
        h[0..8].copy_from_slice(MAGIC);
        h[8..12].copy_from_slice(&VERSION.to_le_bytes());
        h[12..16].copy_from_slice(&dim.to_le_bytes());
        h[16..24].copy_from_slice(&rows.to_le_bytes());
        h[24..28].copy_from_slice(&row_bytes.to_le_bytes());
        h[28..32].copy_from_slice(&block_bytes.to_le_bytes());
        h[32..40].copy_from_slice(&HEADER_BYTES.to_le_bytes());
        h[40..48].copy_from_slice(&sums_offset.to_le_bytes());
        h[48..56].copy_from_slice(&blocks.to_le_bytes());
        h[60..64].copy_from_slice(&DTYPE_F32.to_le_bytes());
        let sum = fnv1a(&h[..SUMMED]);
        h[SUMMED..SUMMED + 8].copy_from_slice(&sum.to_le_bytes());
        h
    }

    /// Fuzzing found these (fuzz/, target recsys_table): sizes that overflow were computed from
    /// a crafted header, a panic in a debug build and, wrapped in a release one, a 4 KiB file
    /// accepted as a table of 2^62 rows whose reads then index past its checksums.
    #[test]
    fn headers_whose_sizes_overflow_are_refused_not_wrapped() {
        let path = Path::new("t.bin");
        let huge_dim = crafted(0xecec_0010, 16, 16, 512, 4096, 0);
        let e = TableMeta::parse(path, &huge_dim).unwrap_err().to_string();
        assert!(e.contains("impossible size"), "{e}");
        // 2^62 rows of 4 B: 2^64 bytes, which wraps to 0 (0 blocks, checksums at 4096).
        let wrapping_rows = crafted(1, 1 << 62, 4, 512, 4096, 0);
        let e = TableMeta::parse(path, &wrapping_rows).unwrap_err().to_string();
        assert!(e.contains("impossible size"), "{e}");
        let m = TableMeta::new(1000, MAX_DIM);
        assert!(m.size_fits() && !TableMeta::new(u64::MAX / 2, 1).size_fits());
        assert!(matches!(TableWriter::create(Path::new("/nonexistent/t.bin"), 1, MAX_DIM + 1), Err(Error::Shape(_))));
    }

    #[test]
    fn blocks_hold_whole_rows_and_fit_the_padded_rows() {
        for dim in [1u32, 3, 16, 32, 64, 128, 129, 200, 384] {
            for rows in [0u64, 1, 2, 3, 7, 100, 1001] {
                let m = TableMeta::new(rows, dim);
                let bb = u64::from(m.block_bytes());
                assert_eq!(bb % u64::from(m.row_bytes), 0);
                assert!(m.block_offset(m.blocks()) <= m.sums_offset());
                assert!(m.sums_offset().is_multiple_of(PAGE) && m.file_bytes().is_multiple_of(PAGE));
                if rows > 0 {
                    assert_eq!(m.block_of(rows - 1), m.blocks() - 1);
                }
            }
        }
    }
}
