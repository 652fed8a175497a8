//! Embedding-table files (crates/recsys/src/table.rs): the input is a whole file, its header
//! checksums mostly made right (`fix_checksums`), written to a file in /dev/shm (the reader
//! takes a path) and opened as `Table::open` opens a model's tables. Any bytes give a table or the reason it is refused, never a panic. An accepted
//! header is one the writer makes (`TableMeta::new(rows, dim)`), and its rows read back as the
//! strategies read them (`read_row` of the first, middle and last row) give values or a
//! checksum error, never a panic. (`verify` and `load_all` are left out: each allocates an
//! 8 MiB buffer, which would hold the run to some 600 inputs a second.)
#![no_main]

use libfuzzer_sys::fuzz_target;
use offload_recsys::table::{crc32c, Table, TableMeta};
use std::path::PathBuf;
use std::sync::OnceLock;

/// The file each input is written to: a directory of this process under /dev/shm (memory).
fn path() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let base = if std::path::Path::new("/dev/shm").is_dir() { "/dev/shm".into() } else { std::env::temp_dir() };
        let dir = base.join(format!("offload-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a directory for the input file");
        dir.join("table.bin")
    })
}

/// FNV-1a, the header's checksum (table.rs).
fn fnv1a(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| (h ^ u64::from(x)).wrapping_mul(0x0100_0000_01b3))
}

/// Makes the header's two checksums right (the checksum area's CRC-32C where the header's
/// fields place it inside the file, then the header's FNV-1a), so that mutated headers get past
/// them and reach the checks behind. Done unless byte 72 (unused header padding) is odd, so the
/// checksums are fuzzed too.
fn fix_checksums(file: &mut [u8]) {
    if file.len() < 73 || file[72] & 1 == 1 {
        return;
    }
    let u64_at = |i: usize| u64::from_le_bytes(file[i..i + 8].try_into().expect("8 bytes"));
    let (sums_offset, blocks) = (u64_at(40), u64_at(48));
    let area = blocks.checked_mul(4).and_then(|n| sums_offset.checked_add(n).map(|end| (sums_offset, end)));
    if let Some((from, to)) = area.filter(|&(_, to)| to <= file.len() as u64) {
        let crc = crc32c(0, &file[from as usize..to as usize]);
        file[56..60].copy_from_slice(&crc.to_le_bytes());
    }
    let sum = fnv1a(&file[..64]);
    file[64..72].copy_from_slice(&sum.to_le_bytes());
}

fuzz_target!(|input: &[u8]| {
    let mut file = input.to_vec();
    fix_checksums(&mut file);
    let file = &file[..];
    let path = path();
    std::fs::write(path, file).expect("the input file is written");
    let table = match Table::open(path) {
        Ok(t) => t,
        Err(e) => return drop(e.to_string()),
    };
    let meta = table.meta;
    assert_eq!(TableMeta::new(meta.rows, meta.dim), meta, "an accepted header is not one the writer makes");
    assert!(meta.file_bytes() <= file.len() as u64, "a table shorter than its header says was accepted");
    let mut out = vec![0f32; meta.dim as usize];
    for row in [0, meta.rows / 2, meta.rows.saturating_sub(1)].into_iter().take(meta.rows.min(3) as usize) {
        if let Err(e) = table.read_row(row, &mut out) {
            drop(e.to_string());
        }
    }
});
