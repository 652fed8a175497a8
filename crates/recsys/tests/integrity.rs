//! Damaged rows are found where they are read: every strategy, in both timing modes, refuses a
//! batch that looks up a row whose checksum block was overwritten, naming the table file and the
//! row; `Table::verify` finds it without a lookup; a table of the old format (no row checksums)
//! is refused with what to do; the writer leaves nothing behind when it does not finish.

use offload_recsys::engine::{Mode, Options, STRATEGIES};
use offload_recsys::table::{self, Table, HEADER_BYTES};
use offload_recsys::{Bags, Engine, Error, FlashModel};
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

mod common;
use common::{model, Rng};

fn overwrite(path: &Path, at: u64, bytes: &[u8]) {
    let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.seek(SeekFrom::Start(at)).unwrap();
    f.write_all(bytes).unwrap();
}

fn tables(dir: &Path, rows: u64, dim: u32) -> Vec<PathBuf> {
    (0..2)
        .map(|t| {
            let p = dir.join(format!("t{t}.emb"));
            table::create_random(&p, rows, dim, 7 + t, |_| Ok(())).unwrap();
            p
        })
        .collect()
}

#[test]
fn a_damaged_row_is_refused_by_every_strategy_naming_file_and_row() {
    let dir = tempfile::tempdir().unwrap();
    let (rows, dim) = (300u64, 16u32);
    let paths = tables(dir.path(), rows, dim);
    let meta = Table::open(&paths[1]).unwrap().meta;
    // 8 bytes inside row 123 of table 1 (as the reproduction: values, not the header).
    overwrite(&paths[1], meta.row_offset(123) + 8, &[0x3f, 0x80, 0, 0, 0x3f, 0x80, 0, 0]);
    let m = model(&mut Rng(5), 3, 2, dim as usize);
    let dense = vec![0.25f32; 2 * 3];
    let (o0, i0) = (vec![0i64, 1, 2], vec![5i64, 6]);
    let (o1, i1) = (vec![0i64, 1, 2], vec![1i64, 123]);
    let bags = [Bags { offsets: &o0, indices: &i0 }, Bags { offsets: &o1, indices: &i1 }];
    for mode in [Mode::Disk, Mode::Flash(FlashModel::default())] {
        for s in STRATEGIES {
            let got =
                Engine::open(m.clone(), &paths, Options::new(s, mode)).and_then(|mut e| e.infer(&dense, &bags, 2));
            let msg = match got {
                Err(e) => e.to_string(),
                Ok(_) => panic!("{s:?} {mode:?}: a damaged row was accepted"),
            };
            assert!(msg.contains("t1.emb"), "{s:?}: {msg}");
            assert!(msg.contains("checksum"), "{s:?}: {msg}");
            assert!(!msg.contains('\n'), "{s:?}: {msg}");
            // dram reads (and checks) everything when it opens; the others name the row looked up.
            assert!(msg.contains("row"), "{s:?}: {msg}");
        }
    }
    // A batch that does not touch the damaged block still runs on the lookup strategies.
    let (o1b, i1b) = (vec![0i64, 1, 2], vec![1i64, 2]);
    let ok = [Bags { offsets: &o0, indices: &i0 }, Bags { offsets: &o1b, indices: &i1b }];
    let mut e =
        Engine::open(m.clone(), &paths, Options::new(offload_recsys::Strategy::EmbVectorsum, Mode::Disk)).unwrap();
    e.infer(&dense, &ok, 2).unwrap();
}

#[test]
fn verify_finds_every_damaged_block_and_the_reads_name_the_row() {
    let dir = tempfile::tempdir().unwrap();
    let paths = tables(dir.path(), 1000, 32);
    let t = Table::open(&paths[0]).unwrap();
    t.verify(|_| Ok(())).unwrap();
    overwrite(&paths[0], t.meta.row_offset(900) + 4, &[1, 2, 3, 4, 5, 6, 7, 8]);
    overwrite(&paths[0], t.meta.row_offset(10), &[9]);
    let e = t.verify(|_| Ok(())).unwrap_err();
    assert!(matches!(e, Error::BadTable { .. }), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("t0.emb") && msg.contains("block 2 (rows 8-11)") && msg.contains("2 damaged blocks"), "{msg}");
    let mut out = vec![0f32; 32];
    let msg = t.read_row(900, &mut out).unwrap_err().to_string();
    assert!(msg.contains("row 900") && msg.contains("checksum"), "{msg}");
    t.read_row(500, &mut out).unwrap();
    // The checksum area itself damaged: refused on open.
    let sums_at = std::fs::metadata(&paths[1]).unwrap().len() - 4096;
    overwrite(&paths[1], sums_at, &[0xff; 4]);
    let msg = Table::open(&paths[1]).unwrap_err().to_string();
    assert!(msg.contains("t1.emb") && msg.contains("checksum"), "{msg}");
}

#[test]
fn old_tables_without_row_checksums_are_refused_with_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let p = tables(dir.path(), 64, 8).remove(0);
    // A version-1 header (the old format: no row checksums), its own header checksum right.
    let mut h = std::fs::read(&p).unwrap()[..HEADER_BYTES as usize].to_vec();
    h[8..12].copy_from_slice(&1u32.to_le_bytes());
    overwrite(&p, 0, &h);
    let msg = Table::open(&p).unwrap_err().to_string();
    assert!(msg.contains("version 1") && msg.contains("recreate"), "{msg}");
}

#[test]
fn the_writer_leaves_nothing_when_it_does_not_finish() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("t.emb");
    let mut w = table::TableWriter::create(&p, 10, 4).unwrap();
    w.write_rows(&[1.0; 8]).unwrap();
    assert!(w.finish().is_err()); // 2 of 10 rows
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
    // A finished table replaces an older one whole.
    table::create_random(&p, 10, 4, 1, |_| Ok(())).unwrap();
    table::create_random(&p, 20, 4, 1, |_| Ok(())).unwrap();
    assert_eq!(Table::open(&p).unwrap().meta.rows, 20);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

/// What the checks cost (run: `cargo test --release -p offload-recsys --test integrity -- --ignored
/// --nocapture`): CRC-32C per 512 B block, and ssd-s's page-cache hit as it was (a pread of the
/// 128 B row) against now (a pread of its 512 B block and the check). Numbers in docs/recsys.md.
#[test]
#[ignore]
fn checksum_cost() {
    use std::os::unix::fs::FileExt;
    use std::time::Instant;
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("t.emb");
    let rows = 1u64 << 18; // 32 MiB of dim-32 rows, in the page cache after writing
    table::create_random(&p, rows, 32, 1, |_| Ok(())).unwrap();
    let t = Table::open(&p).unwrap();
    let block = vec![7u8; 512];
    let n = 2_000_000;
    let t0 = Instant::now();
    let mut acc = 0u32;
    for i in 0..n {
        acc ^= table::crc32c(i, &block);
    }
    let crc_ns = t0.elapsed().as_secs_f64() * 1e9 / n as f64;
    let t0 = Instant::now();
    t.verify(|_| Ok(())).unwrap();
    let verify_gbs = t.meta.file_bytes() as f64 / t0.elapsed().as_secs_f64() / 1e9;
    let lookups: Vec<u64> = (0..200_000u64).map(|i| (i * 2_654_435_761) % rows).collect();
    let (mut row, mut blk) = (vec![0u8; 128], vec![0u8; 512]);
    let mut best = (f64::MAX, f64::MAX);
    for _ in 0..5 {
        let t0 = Instant::now();
        for &r in &lookups {
            t.file.read_exact_at(&mut row, t.meta.row_offset(r)).unwrap();
        }
        best.0 = best.0.min(t0.elapsed().as_secs_f64() * 1e9 / lookups.len() as f64);
        let t0 = Instant::now();
        for &r in &lookups {
            let b = t.meta.block_of(r);
            t.file.read_exact_at(&mut blk, t.meta.block_offset(b)).unwrap();
            t.check_block(b, &blk, Some(r)).unwrap();
        }
        best.1 = best.1.min(t0.elapsed().as_secs_f64() * 1e9 / lookups.len() as f64);
    }
    println!(
        "crc32c of 512 B: {crc_ns:.1} ns ({:.1} GB/s; {acc:x}); verify: {verify_gbs:.2} GB/s; \
         page-cache hit, 128 B pread: {:.0} ns, 512 B pread + check: {:.0} ns",
        512.0 / crc_ns,
        best.0,
        best.1
    );
}
