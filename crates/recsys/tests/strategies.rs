//! Every strategy, in both timing modes, gives the same predictions as a plain reference (rows
//! read back by a separate decoder, sums and layers by loops), on random models and batches with
//! empty bags, repeated indices, the last row, and tables whose size is not a whole page.

use offload_recsys::engine::{DeviceMlp, Mode, Options, Strategy, STRATEGIES};
use offload_recsys::table::{self, HEADER_BYTES};
use offload_recsys::{Bags, Dlrm, Engine, Error, FlashModel, Linear};
use proptest::prelude::*;
use std::path::{Path, PathBuf};

mod common;
use common::{model, Rng};

/// Rows straight from the file bytes (an independent decoder of the documented layout).
fn rows_of(path: &Path) -> Vec<Vec<f32>> {
    let b = std::fs::read(path).unwrap();
    let dim = u32::from_le_bytes(b[12..16].try_into().unwrap()) as usize;
    let rows = u64::from_le_bytes(b[16..24].try_into().unwrap()) as usize;
    let stride = u32::from_le_bytes(b[24..28].try_into().unwrap()) as usize;
    (0..rows)
        .map(|r| {
            let at = HEADER_BYTES as usize + r * stride;
            (0..dim).map(|k| f32::from_le_bytes(b[at + 4 * k..at + 4 * k + 4].try_into().unwrap())).collect()
        })
        .collect()
}

fn reference(
    m: &Dlrm,
    tables: &[Vec<Vec<f32>>],
    dense: &[f32],
    offs: &[Vec<i64>],
    idx: &[Vec<i64>],
    rows: usize,
) -> Vec<f32> {
    let lin = |l: &Linear, x: &[f32], relu: bool| -> Vec<f32> {
        (0..l.outputs)
            .map(|o| {
                let v = l.bias[o] + (0..l.inputs).map(|k| l.weight[o * l.inputs + k] * x[k]).sum::<f32>();
                if relu {
                    v.max(0.0)
                } else {
                    v
                }
            })
            .collect()
    };
    (0..rows)
        .map(|s| {
            let mut x = dense[s * m.dense_width..(s + 1) * m.dense_width].to_vec();
            for l in &m.bottom.layers {
                x = lin(l, &x, true);
            }
            for t in 0..m.tables {
                let mut acc = vec![0f32; m.dim];
                for &row in &idx[t][offs[t][s] as usize..offs[t][s + 1] as usize] {
                    acc.iter_mut().zip(&tables[t][row as usize]).for_each(|(a, v)| *a += v);
                }
                x.extend(acc);
            }
            let n = m.top.layers.len();
            for (i, l) in m.top.layers.iter().enumerate() {
                x = lin(l, &x, i + 1 < n);
            }
            1.0 / (1.0 + (-x[0]).exp())
        })
        .collect()
}

fn make_tables(dir: &Path, rows: &[u64], dim: u32, seed: u64) -> Vec<PathBuf> {
    rows.iter()
        .enumerate()
        .map(|(t, &n)| {
            let p = dir.join(format!("t{t}.emb"));
            table::create_random(&p, n, dim, seed + t as u64, |_| Ok(())).unwrap();
            p
        })
        .collect()
}

/// Bags with empty ones, repeats and each table's last row.
fn batch(r: &mut Rng, rows: &[u64], batch: usize, max_bag: u64) -> (Vec<Vec<i64>>, Vec<Vec<i64>>) {
    let mut offs = Vec::new();
    let mut idx = Vec::new();
    for &n in rows {
        let mut o = vec![0i64];
        let mut ix = Vec::new();
        for s in 0..batch {
            let len = if s == 1 { 0 } else { r.below(max_bag + 1) };
            for k in 0..len {
                ix.push(match k {
                    0 => n as i64 - 1,
                    1 => *ix.last().unwrap(),
                    _ => r.below(n) as i64,
                });
            }
            o.push(ix.len() as i64);
        }
        offs.push(o);
        idx.push(ix);
    }
    (offs, idx)
}

fn modes() -> Vec<Mode> {
    vec![Mode::Disk, Mode::Flash(FlashModel::default())]
}

fn check_all(seed: u64, rows: Vec<u64>, dim: usize, nbatch: usize, max_bag: u64) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let mut r = Rng(seed | 1);
    let m = model(&mut r, 5, rows.len(), dim);
    let paths = make_tables(dir.path(), &rows, dim as u32, seed);
    let decoded: Vec<Vec<Vec<f32>>> = paths.iter().map(|p| rows_of(p)).collect();
    let dense: Vec<f32> = (0..nbatch * 5).map(|_| r.f()).collect();
    let (offs, idx) = batch(&mut r, &rows, nbatch, max_bag);
    let want = reference(&m, &decoded, &dense, &offs, &idx, nbatch);
    let bags: Vec<Bags> = offs.iter().zip(&idx).map(|(o, i)| Bags { offsets: o, indices: i }).collect();
    for mode in modes() {
        for s in STRATEGIES {
            let mut opts = Options::new(s, mode);
            opts.host_cache_vectors = 3;
            if s == Strategy::RmSsd {
                opts.device_mlp = DeviceMlp { bottom_cycles: 100, emb_layer_cycles: 50, top_cycles: 200 };
            }
            let mut e = Engine::open(m.clone(), &paths, opts).unwrap();
            for round in 0..2 {
                let out = e.infer(&dense, &bags, nbatch).unwrap();
                for (i, (a, b)) in out.predictions.iter().zip(&want).enumerate() {
                    assert!(
                        (a - b).abs() <= 1e-5 * b.abs().max(1.0),
                        "{} {mode:?} round {round} sample {i}: {a} vs {b}",
                        s.as_str()
                    );
                }
                assert_eq!(out.io.lookups, idx.iter().map(|i| i.len() as u64).sum::<u64>());
                assert!(out.latency_s >= 0.0 && out.interval_s <= out.latency_s + 1e-12);
            }
        }
    }
}

#[test]
fn all_strategies_agree_on_a_fixed_case() {
    // 1000 rows × dim 32 = 128 KiB + header: not a whole number of pages once padded? 1000·128 =
    // 128,000 B: the last page is partly filled.
    check_all(7, vec![1000, 37, 1], 32, 6, 9);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, .. ProptestConfig::default() })]
    #[test]
    fn all_strategies_agree_on_random_cases(
        seed in 1u64..1_000_000,
        rows in prop::collection::vec(1u64..300, 1..4),
        dim in prop::sample::select(vec![4usize, 16, 24, 64, 200]),
        nbatch in 2usize..6,
        max_bag in 0u64..12,
    ) {
        check_all(seed, rows, dim, nbatch, max_bag);
    }
}

#[test]
fn counters_show_read_amplification() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let mut r = Rng(99);
    let rows = vec![5000u64, 5000];
    let m = model(&mut r, 5, 2, 32);
    let paths = make_tables(dir.path(), &rows, 32, 3);
    let dense: Vec<f32> = (0..4 * 5).map(|_| r.f()).collect();
    let (offs, idx) = batch(&mut r, &rows, 4, 20);
    let bags: Vec<Bags> = offs.iter().zip(&idx).map(|(o, i)| Bags { offsets: o, indices: i }).collect();
    let run =
        |s, mode| Engine::open(m.clone(), &paths, Options::new(s, mode)).unwrap().infer(&dense, &bags, 4).unwrap().io;
    let flash = Mode::Flash(FlashModel::default());
    let page = run(Strategy::EmbPagesum, flash);
    let vector = run(Strategy::EmbVectorsum, flash);
    let disk_vector = run(Strategy::EmbVectorsum, Mode::Disk);
    let mmio = run(Strategy::EmbMmio, flash);
    // Page reads fetch 4096 B per distinct page, vector reads 128 B per distinct row.
    assert!(page.read_amplification() > 20.0, "{page:?}");
    assert!(vector.read_amplification() <= 1.0 + 1e-9, "{vector:?}");
    assert_eq!(disk_vector.media_bytes, disk_vector.media_reads * 512);
    // emb-mmio ships the pages, the in-device sums ship the sums (plus the inputs).
    assert_eq!(mmio.link_bytes, mmio.media_bytes);
    assert!(page.link_bytes < mmio.link_bytes);
}

#[test]
fn bad_inputs_are_named() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let mut r = Rng(5);
    let m = model(&mut r, 5, 1, 8);
    let paths = make_tables(dir.path(), &[10], 8, 1);
    let mut e = Engine::open(m.clone(), &paths, Options::new(Strategy::Dram, Mode::Disk)).unwrap();
    let dense = vec![0f32; 10];
    let err = |o: &[i64], i: &[i64], e: &mut Engine| {
        e.infer(&dense, &[Bags { offsets: o, indices: i }], 2).unwrap_err().to_string()
    };
    assert_eq!(err(&[0, 1, 2], &[3, 10], &mut e), "table 0: indices[1]: row 10 out of range for a table of 10 rows");
    assert_eq!(err(&[0, 2, 1], &[3, 4], &mut e), "table 0: offsets[2]: 1 after 2: offsets must not decrease");
    assert!(err(&[0, 1], &[3], &mut e).contains("2 offsets for a batch of 2"));
    assert!(err(&[0, 1, 1], &[-1], &mut e).contains("row -1 out of range"));
    assert!(err(&[1, 1, 1], &[0], &mut e).contains("offsets[0]: is 1, must be 0"));

    // A truncated table, a foreign file, a dim the model does not have.
    let t = &paths[0];
    let len = std::fs::metadata(t).unwrap().len();
    let cut = dir.path().join("cut.emb");
    std::fs::copy(t, &cut).unwrap();
    std::fs::OpenOptions::new().write(true).open(&cut).unwrap().set_len(len - 4096).unwrap();
    let msg = Engine::open(m.clone(), &[cut], Options::new(Strategy::Dram, Mode::Disk)).err().unwrap().to_string();
    assert!(msg.contains("truncated"), "{msg}");
    let foreign = dir.path().join("passwd");
    std::fs::write(&foreign, "root:x:0:0:root:/root:/bin/bash\n").unwrap();
    let e2 = Engine::open(m.clone(), &[foreign], Options::new(Strategy::Dram, Mode::Disk)).err().unwrap();
    assert!(matches!(e2, Error::BadTable { .. }), "{e2}");
    std::fs::create_dir(dir.path().join("d16")).unwrap();
    let wrong_dim = make_tables(&dir.path().join("d16"), &[10], 16, 1);
    let msg = Engine::open(m, &wrong_dim, Options::new(Strategy::Dram, Mode::Disk)).err().unwrap().to_string();
    assert!(msg.contains("dim 16 but the model's is 8"), "{msg}");
}

#[test]
fn rm_ssd_flash_times_follow_the_kernel_design() {
    // Per-sample cycles of bottom′, L_e and top′ (eq. 1): the MLP stages take them, and the emb′
    // stage (flash reads ∥ L_e, eq. 1a) is no faster than L_e.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let mut r = Rng(5);
    let rows = vec![3000u64, 3000];
    let m = model(&mut r, 5, 2, 32);
    let paths = make_tables(dir.path(), &rows, 32, 4);
    let dense: Vec<f32> = (0..4 * 5).map(|_| r.f()).collect();
    let (offs, idx) = batch(&mut r, &rows, 4, 6);
    let bags: Vec<Bags> = offs.iter().zip(&idx).map(|(o, i)| Bags { offsets: o, indices: i }).collect();
    let fm = FlashModel::default();
    for emb_layer_cycles in [0u64, 2_000_000] {
        let mut opts = Options::new(Strategy::RmSsd, Mode::Flash(fm));
        opts.device_mlp = DeviceMlp { bottom_cycles: 1000, emb_layer_cycles, top_cycles: 3000 };
        let out = Engine::open(m.clone(), &paths, opts).unwrap().infer(&dense, &bags, 4).unwrap();
        let st = out.stages;
        assert!((st.bot_mlp - fm.seconds(4000)).abs() < 1e-12);
        assert!((st.top_mlp - fm.seconds(12_000)).abs() < 1e-12);
        let l_e = fm.seconds(4 * emb_layer_cycles);
        assert!(st.emb_ssd + st.emb_op >= l_e - 1e-12, "{st:?}");
        assert!(out.interval_s >= l_e && out.interval_s >= st.top_mlp);
        if emb_layer_cycles > 0 {
            assert!(st.emb_ssd < l_e, "the flash reads should be faster than L_e here");
        }
    }
}

#[test]
fn random_reads_cover_the_file_and_name_bad_blocks() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let paths = make_tables(dir.path(), &[20_000], 32, 9);
    match offload_recsys::uring::random_reads(&paths[0], 4096, 8, 500, 3) {
        Ok(r) => {
            assert!(r.reads == 500 && r.seconds > 0.0 && r.iops > 0.0, "{r:?}");
            eprintln!("fixed buffers {}, fixed files {}", r.fixed_buffers, r.fixed_files);
        }
        Err(Error::Unsupported(why)) => eprintln!("skipped: {why}"),
        Err(e) => panic!("{e}"),
    }
    let bad = offload_recsys::uring::random_reads(&paths[0], 1000, 8, 10, 3).unwrap_err();
    assert!(bad.to_string().contains("512 B"), "{bad}");
    let huge = offload_recsys::uring::random_reads(&paths[0], 1 << 30, 8, 10, 3).unwrap_err();
    assert!(huge.to_string().contains("holds no"), "{huge}");
}
