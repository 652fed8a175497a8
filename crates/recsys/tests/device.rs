//! The device side served over the shared-memory channel (by a thread: the device process's code
//! path, without spawning one) answers exactly as the in-process device, moves the bytes the
//! link counter says, and fails clearly — never hangs — on bad requests and dead devices.

use offload_recsys::device::DeviceAt;
use offload_recsys::engine::{DeviceMlp, Mode, Options, Strategy};
use offload_recsys::{table, Bags, Dlrm, Engine, FlashModel};
use std::path::{Path, PathBuf};
use std::time::Instant;

mod common;
use common::{model, Rng};

fn make_tables(dir: &Path, rows: &[u64], dim: u32) -> Vec<PathBuf> {
    rows.iter()
        .enumerate()
        .map(|(t, &n)| {
            let p = dir.join(format!("t{t}.emb"));
            table::create_random(&p, n, dim, 5 + t as u64, |_| Ok(())).unwrap();
            p
        })
        .collect()
}

struct Case {
    _dir: tempfile::TempDir,
    m: Dlrm,
    paths: Vec<PathBuf>,
    dense: Vec<f32>,
    offs: Vec<Vec<i64>>,
    idx: Vec<Vec<i64>>,
    rows: usize,
}

fn case() -> Case {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let mut r = Rng(17);
    let table_rows = [700u64, 37, 1];
    let m = model(&mut r, 5, 3, 32);
    let paths = make_tables(dir.path(), &table_rows, 32);
    let rows = 5;
    let dense = (0..rows * 5).map(|_| r.f()).collect();
    let (mut offs, mut idx) = (Vec::new(), Vec::new());
    for &n in &table_rows {
        let mut o = vec![0i64];
        let mut ix = Vec::new();
        for s in 0..rows {
            for k in 0..(if s == 1 { 0 } else { 1 + r.next() % 6 }) {
                ix.push(if k == 0 { n as i64 - 1 } else { (r.next() % n) as i64 });
            }
            o.push(ix.len() as i64);
        }
        offs.push(o);
        idx.push(ix);
    }
    Case { _dir: dir, m, paths, dense, offs, idx, rows }
}

fn opts(s: Strategy, mode: Mode, device: DeviceAt) -> Options {
    let mut o = Options::new(s, mode);
    o.host_cache_vectors = 4;
    o.device_mlp = DeviceMlp { bottom_cycles: 100, emb_layer_cycles: 50, top_cycles: 200 };
    o.device = device;
    o.channel_bytes = 1 << 20;
    o
}

const SERVED: [Strategy; 4] = [Strategy::EmbPagesum, Strategy::EmbVectorsum, Strategy::Recssd, Strategy::RmSsd];

#[test]
fn the_channel_answers_as_the_in_process_device() {
    let c = case();
    let bags: Vec<Bags> = c.offs.iter().zip(&c.idx).map(|(o, i)| Bags { offsets: o, indices: i }).collect();
    for mode in [Mode::Disk, Mode::Flash(FlashModel::default())] {
        for s in SERVED {
            let mut local = Engine::open(c.m.clone(), &c.paths, opts(s, mode, DeviceAt::InProcess)).unwrap();
            let mut far =
                Engine::open(c.m.clone(), &c.paths, opts(s, mode, DeviceAt::Thread { timeout_s: 20.0 })).unwrap();
            assert_eq!(far.device_info().at, "thread");
            let mut moved = 0;
            for round in 0..3 {
                let a = local.infer(&c.dense, &bags, c.rows).unwrap();
                let b = far.infer(&c.dense, &bags, c.rows).unwrap();
                let what = format!("{} {mode:?} round {round}", s.as_str());
                assert_eq!(a.predictions, b.predictions, "{what}");
                let (x, y) = (a.io, b.io);
                assert_eq!(
                    (
                        x.lookups,
                        x.useful_bytes,
                        x.media_reads,
                        x.media_bytes,
                        x.link_bytes,
                        x.cache_hits,
                        x.cache_misses
                    ),
                    (
                        y.lookups,
                        y.useful_bytes,
                        y.media_reads,
                        y.media_bytes,
                        y.link_bytes,
                        y.cache_hits,
                        y.cache_misses
                    ),
                    "{what}"
                );
                if let Mode::Flash(_) = mode {
                    assert_eq!(a.stages.emb_ssd, b.stages.emb_ssd, "{what}: modelled device time");
                }
                assert!(b.stages.emb_ssd > 0.0 && b.latency_s > 0.0, "{what}");
                moved += y.link_bytes;
                if matches!(s, Strategy::EmbVectorsum | Strategy::RmSsd) {
                    let ch = far.channel_bytes();
                    assert_eq!(ch.to_device + ch.from_device, moved, "{what}: channel bytes vs link_bytes");
                }
            }
            far.close();
            let e = far.infer(&c.dense, &bags, c.rows).unwrap_err();
            assert!(e.to_string().contains("closed"), "{e}");
        }
    }
}

#[test]
fn bad_requests_get_an_error_not_a_hang() {
    use offload_recsys::device::DeviceLink;
    let c = case();
    let at = DeviceAt::Thread { timeout_s: 5.0 };
    let flash = Mode::Flash(FlashModel::default());
    let mut link = DeviceLink::start(&at, &c.paths, 32, flash, 8, None, 1 << 16).unwrap();
    let e = link.raw_request(99, [0, 0, 0], &[]).unwrap_err().to_string();
    assert!(e.contains("unknown request kind 99"), "{e}");
    // A batch whose payload is cut short, then one with an index out of range.
    let e = link.raw_request(2, [4, 1, 0], &[0u8; 12]).unwrap_err().to_string();
    assert!(e.contains("malformed"), "{e}");
    let mut p = Vec::new();
    for t in 0..3 {
        let n: i64 = if t == 0 { 1 } else { 0 };
        for o in [0, n] {
            p.extend_from_slice(&o.to_le_bytes());
        }
        if t == 0 {
            p.extend_from_slice(&5000i64.to_le_bytes());
        }
    }
    let e = link.raw_request(2, [1, 1, 0], &p).unwrap_err().to_string();
    assert!(e.contains("out of range"), "{e}");
    // rm-ssd without a model, and a message larger than the area.
    let e = link.raw_request(3, [0, 1, 0], &[0u8; 24]).unwrap_err().to_string();
    assert!(e.contains("without a model"), "{e}");
    assert!(link.raw_request(2, [0, 0, 0], &vec![0u8; 1 << 17]).unwrap_err().to_string().contains("does not fit"));
    // The device still answers well-formed requests after all that.
    let mut p = Vec::new();
    for _ in 0..3 {
        p.extend_from_slice(&[0u8; 16]);
    }
    assert!(link.raw_request(2, [1, 1, 0], &p).unwrap().iter().all(|&b| b == 0));
}

#[test]
fn a_dead_or_silent_device_is_reported_in_bounded_time() {
    use offload_recsys::device::DeviceLink;
    let c = case();
    let flash = Mode::Flash(FlashModel::default());
    // A "device" that exits at once: the error says so, with its exit status.
    let dies =
        DeviceAt::Process { command: vec!["sh".into(), "-c".into(), "exit 3".into()], cpu: None, timeout_s: 20.0 };
    let t0 = Instant::now();
    let e = DeviceLink::start(&dies, &c.paths, 32, flash, 8, None, 1 << 16).err().unwrap().to_string();
    assert!(e.contains("is gone") && e.contains('3'), "{e}");
    assert!(t0.elapsed().as_secs_f64() < 10.0);
    // One that never answers: the timeout, then it is killed (no process left behind).
    let silent = DeviceAt::Process {
        command: vec!["sh".into(), "-c".into(), "exec sleep 30".into(), "device".into()],
        cpu: None,
        timeout_s: 0.3,
    };
    let t0 = Instant::now();
    let e = DeviceLink::start(&silent, &c.paths, 32, flash, 8, None, 1 << 16).err().unwrap().to_string();
    assert!(e.contains("did not answer within 0.300 s"), "{e}");
    assert!(t0.elapsed().as_secs_f64() < 5.0);
}

#[test]
fn rm_ssd_sends_the_next_batch_before_reading_this_one() {
    let c = case();
    let bags: Vec<Bags> = c.offs.iter().zip(&c.idx).map(|(o, i)| Bags { offsets: o, indices: i }).collect();
    // Three batches that differ in their dense features.
    let dense: Vec<Vec<f32>> = (0..3).map(|k| c.dense.iter().map(|x| x + k as f32 * 0.25).collect()).collect();
    for mode in [Mode::Disk, Mode::Flash(FlashModel::default())] {
        let mut local = Engine::open(c.m.clone(), &c.paths, opts(Strategy::RmSsd, mode, DeviceAt::InProcess)).unwrap();
        let want: Vec<_> = dense.iter().map(|d| local.infer(d, &bags, c.rows).unwrap()).collect();
        for at in [DeviceAt::InProcess, DeviceAt::Thread { timeout_s: 20.0 }] {
            let mut e = Engine::open(c.m.clone(), &c.paths, opts(Strategy::RmSsd, mode, at.clone())).unwrap();
            e.send_inputs(&dense[0], &bags, c.rows).unwrap();
            e.send_inputs(&dense[1], &bags, c.rows).unwrap();
            if at != DeviceAt::InProcess {
                let third = e.send_inputs(&dense[2], &bags, c.rows);
                assert!(third.unwrap_err().to_string().contains("in flight"), "a third batch must wait");
                assert!(e.infer(&dense[2], &bags, c.rows).is_err(), "infer while batches are in flight");
            }
            let mut got = vec![e.read_outputs().unwrap()];
            e.send_inputs(&dense[2], &bags, c.rows).unwrap();
            got.push(e.read_outputs().unwrap());
            got.push(e.read_outputs().unwrap());
            assert!(e.read_outputs().is_err(), "nothing left to read");
            for (k, (a, b)) in want.iter().zip(&got).enumerate() {
                assert_eq!(a.predictions, b.predictions, "{mode:?} {at:?} batch {k}");
                assert_eq!((a.io.lookups, a.io.link_bytes), (b.io.lookups, b.io.link_bytes), "batch {k}");
            }
            // Close with a batch still in the device: its answer is taken, nothing hangs.
            e.send_inputs(&dense[0], &bags, c.rows).unwrap();
            e.close();
        }
    }
    let mut other =
        Engine::open(c.m.clone(), &c.paths, opts(Strategy::EmbVectorsum, Mode::Disk, DeviceAt::InProcess)).unwrap();
    assert!(other.send_inputs(&c.dense, &bags, c.rows).unwrap_err().to_string().contains("rm-ssd"));
}
