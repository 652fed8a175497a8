"""The media-based work unit (seed 003, slides 8 and 46-51; Liu, Kufeldt, Maltzahn, HPC-IODC '19).

An MBWU is the throughput a workload reaches on *one* storage device when nothing but the device
limits it: the host drives it with enough threads that adding one more no longer helps. A system
is then worth ``its throughput / MBWU`` work units, and three ratios compare systems of any kind:
``$/MBWU`` (cost), ``kWh/MBWU`` (energy) and ``m³/MBWU`` (space).

The seed automates the measurement; this module does the same on this machine's disk:

1. *precondition*: load the key space, then overwrite part of it at a controlled rate, so that the
   LSM tree holds several runs and stale versions as in service, not one fresh sorted run;
2. *rate-controlled load*: each worker is an open-loop generator (operations scheduled at a
   target rate, issued late rather than skipped when behind), or runs flat out with no rate;
3. *thread sweep*: the worker count rises until throughput stops rising by more than a threshold
   (the plateau); the best throughput so far is the MBWU;
4. *steady-state window*: each step runs a warm-up uncounted, then its throughput is sampled in
   buckets; the value is the median of the longest tail of buckets whose spread stays within a
   bound.

Workloads: YCSB A (50 % reads, 50 % updates) and C (reads only) on RocksDB (``rocksdict``), zipfian
keys, 1 KiB values; and an Arrow scan (``pyarrow.dataset``, a filter over Parquet files). Workers
are processes, not threads: rocksdict holds the GIL inside ``get`` (two threads read no faster than
one here, two processes do), so the key space is split into shards, one RocksDB per shard, each
opened by exactly one worker. The Arrow scan uses Arrow's own thread pools, which run without the GIL.

The page cache: RocksDB reads, flushes and compactions use direct I/O and no block cache, so reads
go to the device; the scan evicts its files (``posix_fadvise(DONTNEED)``) before every pass. The
virtual disk's host may still cache: what is measured is the disk as this VM sees it.
"""

from __future__ import annotations

import errno
import math
import multiprocessing as mp
import os
import shutil
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from offload.host.machine import machine

# ---- the procedure's knobs ---------------------------------------------------------------

VALUE_BYTES = 1024  # YCSB's default record: 10 fields x 100 B; one 1 KiB field here
ZIPF_THETA = 0.99  # YCSB's zipfian constant
KV_WORKLOADS = {"ycsb-a": 0.5, "ycsb-c": 1.0}  # name -> fraction of reads (the rest are updates)
WORKLOADS = (*KV_WORKLOADS, "arrow-scan")
UNITS = {"ycsb-a": "ops/s", "ycsb-c": "ops/s", "arrow-scan": "rows/s"}
HOURS_PER_YEAR = 8760


# ---- the two detectors: plateau and steady state -------------------------------------------


def _check_series(values: Sequence[float], what: str) -> list[float]:
    xs = [float(v) for v in values]
    bad = [v for v in xs if not math.isfinite(v) or v < 0]
    if bad:
        raise ValueError(f"{what} must be finite and >= 0, got {bad[0]!r}")
    return xs


def steady_window(series: Sequence[float], bound: float = 0.15, min_len: int = 3) -> tuple[int, int] | None:
    """The longest tail ``series[start:]`` of at least ``min_len`` samples whose spread
    (max − min) is at most ``bound`` × its median; ``(start, len(series))``, or None.

    A tail, because a run settles: warm-up (empty caches, a memtable not yet flushed) is at the
    start, and the longest steady tail keeps the most samples for the median."""
    xs = _check_series(series, "throughput samples")
    if bound < 0:
        raise ValueError(f"the steady-state bound must be >= 0, got {bound}")
    if min_len < 1:
        raise ValueError(f"a steady-state window needs at least 1 sample, got {min_len}")
    for start in range(len(xs) - min_len + 1):
        tail = xs[start:]
        if max(tail) - min(tail) <= bound * statistics.median(tail):
            return start, len(xs)
    return None


def plateau(values: Sequence[float], threshold: float = 0.05) -> int | None:
    """Index of the plateau in a sweep's throughputs (by rising thread count): the best step
    before the first step that fails to beat it by more than ``threshold``; None while every
    step still gains (the sweep ended on the rise, or has a single step: no evidence yet).

    The best so far, not the last: a step past the knee may lose throughput to contention."""
    xs = _check_series(values, "sweep throughputs")
    if threshold < 0:
        raise ValueError(f"the plateau threshold must be >= 0, got {threshold}")
    best = 0
    for i in range(1, len(xs)):
        if xs[i] <= xs[best] * (1 + threshold):
            return best
        best = i
    return None


# ---- YCSB keys -----------------------------------------------------------------------------


def zipf_cdf(n_keys: int, theta: float = ZIPF_THETA) -> np.ndarray:
    """Cumulative probabilities of ranks 1..n under Zipf(theta), as YCSB's generator draws them."""
    if n_keys < 1:
        raise ValueError(f"the key space needs at least one key, got {n_keys}")
    w = 1.0 / np.arange(1, n_keys + 1, dtype=np.float64) ** theta
    cdf = np.cumsum(w)
    return cdf / cdf[-1]


def zipf_ids(rng: np.random.Generator, cdf: np.ndarray, perm: np.ndarray, size: int) -> np.ndarray:
    """``size`` key ids: zipfian ranks scattered over the key space by a fixed permutation (YCSB's
    scrambled zipfian hashes the rank; either way the hot keys are not neighbours, so they do not
    all fall in one shard or one block)."""
    ranks = np.searchsorted(cdf, rng.random(size), side="right")
    return perm[np.minimum(ranks, len(perm) - 1)]


def key(i: int) -> bytes:
    return b"user%012d" % i


# ---- RocksDB: layout, precondition, workers ---------------------------------------------------


@dataclass(frozen=True)
class KvLayout:
    """A key space of ``n_keys`` spread over ``shards`` RocksDB directories under ``root`` by
    ``id % shards``; ``shards`` bounds the sweep's worker count (one writer per RocksDB).
    ``block_cache``: bytes of RocksDB block cache per shard, 0 for none."""

    root: Path
    n_keys: int
    shards: int
    seed: int = 7
    block_cache: int = 0

    def shard_dir(self, s: int) -> Path:
        return self.root / f"shard-{s:02d}"


def _open(path: Path, create: bool = False, block_cache: int = 0) -> Any:
    import rocksdict as R

    o = R.Options(raw_mode=True)
    o.create_if_missing(create)
    o.set_use_direct_reads(True)  # reads reach the device, not the page cache
    o.set_use_direct_io_for_flush_and_compaction(True)
    o.set_compression_type(R.DBCompressionType.none())  # random values do not compress anyway
    bb = R.BlockBasedOptions()
    if block_cache:
        bb.set_block_cache(R.Cache(block_cache))
    else:
        bb.disable_cache()  # the MBWU excludes caching effects: every data block read is the device's
    o.set_block_based_table_factory(bb)
    return R.Rdict(str(path), o)


def _values(seed: int) -> bytes:
    return np.random.default_rng(seed).bytes(1 << 20)


def _value(buf: bytes, i: int) -> bytes:
    off = (i * 7919) % (len(buf) - VALUE_BYTES)
    return buf[off : off + VALUE_BYTES]


def precondition(layout: KvLayout, overwrite: float = 0.5, rate: float | None = None) -> dict[str, Any]:
    """Loads every key, then overwrites ``overwrite`` x n_keys zipfian keys (at ``rate`` ops/s,
    open loop; None: flat out) so the LSM tree holds several runs and stale versions. Returns the
    phases' timings and the data's size on disk. A write RocksDB refuses (a full disk) removes
    the key space and is a `WriteError` naming it (RocksDB raises a bare Exception)."""
    from offload.files import WriteError, describe

    try:
        return _precondition(layout, overwrite, rate)
    except (ValueError, OSError):
        raise
    except Exception as e:  # rocksdict's errors are bare Exceptions: "IO error: No space left ..."
        shutil.rmtree(layout.root, ignore_errors=True)
        text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        code = errno.ENOSPC if "No space left" in text else errno.EIO
        why = OSError(code, os.strerror(code) if code == errno.ENOSPC else text)
        raise WriteError(code, describe(layout.root, why)) from None


def _precondition(layout: KvLayout, overwrite: float, rate: float | None) -> dict[str, Any]:
    import rocksdict as R

    if layout.n_keys < layout.shards:
        raise ValueError(f"{layout.n_keys} keys cannot fill {layout.shards} shards")
    if overwrite < 0:
        raise ValueError(f"the overwrite fraction must be >= 0, got {overwrite}")
    if layout.root.exists():
        shutil.rmtree(layout.root)
    layout.root.mkdir(parents=True)
    buf = _values(layout.seed)
    dbs = [_open(layout.shard_dir(s), create=True) for s in range(layout.shards)]
    t0 = time.perf_counter()
    for s, db in enumerate(dbs):
        wb = R.WriteBatch(raw_mode=True)
        for n, i in enumerate(range(s, layout.n_keys, layout.shards)):
            wb.put(key(i), _value(buf, i))
            if n % 1000 == 999:
                db.write(wb)
                wb = R.WriteBatch(raw_mode=True)
        db.write(wb)
    t1 = time.perf_counter()
    rng = np.random.default_rng(layout.seed + 1)
    cdf, perm = zipf_cdf(layout.n_keys), rng.permutation(layout.n_keys)
    ids = zipf_ids(rng, cdf, perm, int(overwrite * layout.n_keys))
    start = time.monotonic()
    for n, i in enumerate(ids.tolist()):
        if rate is not None:
            _wait_until(start + n / rate)
        dbs[i % layout.shards].put(key(i), _value(buf, i + 1))
    t2 = time.perf_counter()
    for db in dbs:
        db.flush()
        db.close()
    return {
        "keys": layout.n_keys, "shards": layout.shards, "value_bytes": VALUE_BYTES,
        "load_s": t1 - t0, "overwrites": len(ids), "overwrite_s": t2 - t1, "overwrite_rate": rate,
        "bytes_on_disk": _du(layout.root),
    }  # fmt: skip


def _wait_until(t: float) -> None:
    """Open loop: sleep to the op's scheduled time; when behind, go at once (never skip an op, so
    a slow device shows as a lower rate, not as fewer operations asked of it)."""
    d = t - time.monotonic()
    if d > 0:
        time.sleep(d)


def _du(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def _kv_worker(
    layout: KvLayout, mine: list[int], reads: float, rate: float | None, seconds: float, bucket_s: float,
    warmup_s: float, seed: int, ready: Any, go: Any, start_at: Any, out: Any,
) -> None:  # fmt: skip
    """One worker: opens its shards, waits for the common start, runs the workload ``warmup_s``
    uncounted (a freshly opened RocksDB reads at about 2/3 speed for its first 1-2 s here), then
    ``seconds`` more, counting completed operations per bucket of ``bucket_s``."""
    dbs = {s: _open(layout.shard_dir(s), block_cache=layout.block_cache) for s in mine}
    buf = _values(layout.seed)
    rng = np.random.default_rng(seed)
    cdf = zipf_cdf(layout.n_keys)
    perm = np.random.default_rng(layout.seed + 1).permutation(layout.n_keys)
    owned = np.zeros(layout.shards, dtype=bool)
    owned[mine] = True
    counts = [0] * max(1, round(seconds / bucket_s))
    _settle(list(dbs.values()))
    ready.put(os.getpid())
    go.wait()
    t0 = start_at.value + warmup_s  # the counted part starts here; ops are scheduled from the start
    _wait_until(start_at.value)
    end, n = t0 + seconds, 0
    while True:
        ids = zipf_ids(rng, cdf, perm, 4096)
        ids = ids[owned[ids % layout.shards]]  # the keys of this worker's shards
        is_read = rng.random(len(ids)) < reads
        for i, r in zip(ids.tolist(), is_read.tolist(), strict=True):
            if rate is not None:
                _wait_until(start_at.value + n / rate)
            db = dbs[i % layout.shards]
            if r:
                db.get(key(i))
            else:
                db.put(key(i), _value(buf, i + n))
            n += 1
            now = time.monotonic()
            if now >= end:
                for db in dbs.values():
                    db.close()
                out.put(counts)
                return
            if now >= t0:
                counts[min(len(counts) - 1, int((now - t0) / bucket_s))] += 1


def _settle(dbs: list[Any], limit_s: float = 20.0) -> None:
    """Waits (at most ``limit_s``) until no compaction runs or is pending: a step starts on the LSM
    tree the last one left, not on the compactions that closing the DB cut short."""
    end = time.monotonic() + limit_s
    while time.monotonic() < end and any(
        (db.property_int_value("rocksdb.num-running-compactions") or 0)
        + (db.property_int_value("rocksdb.compaction-pending") or 0)
        for db in dbs
    ):
        time.sleep(0.05)


def run_kv_step(
    layout: KvLayout, workload: str, workers: int, seconds: float = 3.0, bucket_s: float = 0.25,
    rate: float | None = None, warmup_s: float = 0.0,
) -> list[float]:  # fmt: skip
    """``workers`` processes run ``workload`` together (shard s goes to worker s % workers);
    returns the summed throughput (ops/s) per bucket."""
    if workload not in KV_WORKLOADS:
        raise ValueError(f"unknown key-value workload {workload!r}; one of {', '.join(KV_WORKLOADS)}")
    if not 1 <= workers <= layout.shards:
        raise ValueError(f"workers must be in 1..{layout.shards} (the shard count), got {workers}")
    if seconds <= 0 or bucket_s <= 0 or bucket_s > seconds:
        raise ValueError(f"need 0 < bucket ({bucket_s} s) <= run ({seconds} s)")
    if rate is not None and rate <= 0:
        raise ValueError(f"the target rate must be > 0 ops/s, got {rate}")
    if warmup_s < 0:
        raise ValueError(f"the warm-up must be >= 0 s, got {warmup_s}")
    ctx = mp.get_context("spawn")  # no RocksDB handle or thread state crosses a fork
    ready, out, go, start_at = ctx.Queue(), ctx.Queue(), ctx.Event(), ctx.Value("d", 0.0)
    per_rate = None if rate is None else rate / workers
    procs = [
        ctx.Process(
            target=_kv_worker,
            args=(
                layout,
                list(range(w, layout.shards, workers)),
                KV_WORKLOADS[workload],
                per_rate,
                seconds,
                bucket_s,
                warmup_s,
                1000 + w,
                ready,
                go,
                start_at,
                out,
            ),
        )
        for w in range(workers)
    ]
    for p in procs:
        p.start()
    try:
        _collect(ready, procs, 60)
        start_at.value = time.monotonic() + 0.05
        go.set()
        parts = _collect(out, procs, warmup_s + seconds + 60)
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    return [sum(c) / bucket_s for c in zip(*parts, strict=True)]


def _collect(q: Any, procs: list[Any], timeout: float) -> list[Any]:
    """One message from each of ``procs``; a worker that died says so at once, not at the timeout."""
    import queue

    got: list[Any] = []
    end = time.monotonic() + timeout
    while len(got) < len(procs):
        try:
            got.append(q.get(timeout=0.2))
        except queue.Empty:
            dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            if dead:
                raise RuntimeError(f"a key-value worker exited with code {dead[0]}") from None
            if time.monotonic() > end:
                raise RuntimeError(f"the key-value workers did not answer within {timeout:.0f} s") from None
    return got


# ---- the Arrow scan ---------------------------------------------------------------------------


def make_scan_data(root: Path, rows: int = 4_000_000, files: int = 8, seed: int = 7) -> dict[str, Any]:
    """Parquet files of (id int64, key int64, value float64, tag string) under ``root``: several
    files and row groups, so a scan has parallel work for several threads. Pages carry CRC32
    checksums, verified by every scan; the directory appears whole or not at all (a full disk
    is a `WriteError` naming the file, and leaves nothing behind)."""

    from offload.files import atomic_dir

    if rows < files or files < 1:
        raise ValueError(f"need at least one row per file, got {rows} rows in {files} files")
    with atomic_dir(root, overwrite=True) as tmp:
        _write_scan_files(tmp, rows, files, seed)
    return {"rows": rows, "files": files, "bytes_on_disk": _du(root)}


def _write_scan_files(root: Path, rows: int, files: int, seed: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from offload.files import atomic_write

    rng = np.random.default_rng(seed)
    per = rows // files
    tags = np.array([f"tag-{i:04d}" for i in range(256)], dtype=object)
    for f in range(files):
        n = per if f < files - 1 else rows - per * (files - 1)
        t = pa.table({
            "id": np.arange(f * per, f * per + n, dtype=np.int64),
            "key": rng.integers(0, 1 << 40, n),
            "value": rng.random(n),
            "tag": tags[rng.integers(0, len(tags), n)],
        })  # fmt: skip
        with atomic_write(root / f"part-{f:03d}.parquet", "wb") as out:
            pq.write_table(t, out, row_group_size=128 * 1024, write_page_checksum=True)


def _evict(root: Path) -> None:
    """Drops the files' pages from the page cache, so each pass reads the device."""
    for p in root.glob("*.parquet"):
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _culprit(root: Path) -> Path:
    """The first file under ``root`` that does not read whole (Arrow's scan error names none);
    ``root`` itself when each reads alone."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for p in sorted(root.glob("*.parquet")):
        try:
            pq.read_table(p, page_checksum_verification=True)
        except (pa.ArrowException, OSError):
            return p
    return root


def _scan_error(e: BaseException) -> str:
    """One line: the file named where Arrow names it, and a page checksum said as such."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    if "CRC checksum verification failed" in str(e) or "verify page integrity" in str(e):
        return f"a page's checksum does not match its bytes (damaged after it was written): {text}"
    return text


def run_scan_step(root: Path, threads: int, seconds: float = 3.0, cold: bool = True) -> list[float]:
    """Scans the data set with a filter (value < 0.01) at ``threads`` CPU and I/O threads, pass
    after pass for about ``seconds`` (at least 3 passes); returns each pass's rows/s."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    if not any(root.glob("*.parquet")):
        raise ValueError(f"no Parquet files under {root}; run make_scan_data first")
    old = pa.cpu_count(), pa.io_thread_count()
    pa.set_cpu_count(threads)
    pa.set_io_thread_count(threads)
    opts = ds.ParquetFragmentScanOptions(page_checksum_verification=True)  # a damaged page is an error
    try:
        data = ds.dataset(root, format=ds.ParquetFileFormat(default_fragment_scan_options=opts))
        total = data.count_rows()  # from the footers: the rows each pass reads
        out: list[float] = []
        end = time.monotonic() + seconds
        while time.monotonic() < end or len(out) < 3:
            if cold:
                _evict(root)
            t = time.perf_counter()
            data.to_table(columns=["id", "value"], filter=pc.field("value") < 0.01, use_threads=True)
            out.append(total / (time.perf_counter() - t))
        return out
    except (pa.ArrowException, OSError) as e:
        raise ValueError(f"the scan of {_culprit(root)} failed: {_scan_error(e)}") from None
    finally:
        pa.set_cpu_count(old[0])
        pa.set_io_thread_count(old[1])


# ---- the sweep --------------------------------------------------------------------------------


def summarize(threads: int, samples: Sequence[float], bound: float, min_len: int) -> dict[str, Any]:
    """One sweep step: its samples, the steady window and the window's median; without a steady
    window, the median of the second half, flagged (the run was too short or too noisy)."""
    xs = _check_series(samples, "throughput samples")
    if not xs:
        raise ValueError(f"the step at {threads} threads produced no samples")
    w = steady_window(xs, bound, min(min_len, len(xs)))
    part = xs[w[0] : w[1]] if w else xs[len(xs) // 2 :]
    return {
        "threads": threads, "samples": xs, "window": list(w) if w else None, "steady": w is not None,
        "value": statistics.median(part),
    }  # fmt: skip


def sweep(
    step: Callable[[int], list[float]], threads: Sequence[int], threshold: float = 0.05, bound: float = 0.15,
    min_len: int = 3, progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Runs ``step(n)`` for rising ``threads`` until the plateau; the MBWU is the best steady
    throughput up to it (a lower bound, flagged, when the sweep ends still rising)."""
    ts = list(threads)
    if not ts or any(t < 1 for t in ts) or ts != sorted(set(ts)):
        raise ValueError(f"thread counts must be rising and >= 1, got {ts}")
    steps: list[dict[str, Any]] = []
    for n in ts:
        if progress:
            progress(f"{n} thread{'s' if n > 1 else ''}")
        steps.append(summarize(n, step(n), bound, min_len))
        if plateau([s["value"] for s in steps], threshold) is not None:
            break
    values = [s["value"] for s in steps]
    p = plateau(values, threshold)
    best = p if p is not None else int(np.argmax(values))
    return {
        "steps": steps, "plateau_index": p, "plateau_reached": p is not None,
        "mbwu": values[best], "threads_at_mbwu": steps[best]["threads"],
        "threshold": threshold, "bound": bound, "min_window": min_len,
    }  # fmt: skip


# ---- a whole measurement --------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """What :func:`measure` runs: workloads, where (a directory on the disk under test), sizes,
    the sweep and its detectors, and an optional node budget to measure as the embedded side."""

    workloads: tuple[str, ...] = WORKLOADS
    work_dir: Path = Path("/var/tmp/offload-mbwu")
    keys: int = 500_000
    threads: tuple[int, ...] = (1, 2, 4, 8)
    seconds: float = 4.0
    warmup_s: float = 2.0
    bucket_s: float = 0.5
    rate: float | None = None
    overwrite: float = 0.5
    precondition_rate: float | None = None
    scan_rows: int = 4_000_000
    threshold: float = 0.05
    bound: float = 0.15
    min_window: int = 4
    embedded: str | None = None

    def check(self) -> None:
        bad = [w for w in self.workloads if w not in WORKLOADS]
        if bad or not self.workloads:
            raise ValueError(f"unknown workload {', '.join(bad) or '(none)'}; one of {', '.join(WORKLOADS)}")
        ts = list(self.threads)
        if not ts or ts[0] < 1 or ts != sorted(set(ts)):
            raise ValueError(f"thread counts must be rising and >= 1, got {ts}")
        if self.keys < max(self.threads, default=1):
            raise ValueError(
                f"{self.keys} keys are fewer than the {max(self.threads)} shards the sweep needs"
            )
        if self.warmup_s < 0:
            raise ValueError(f"the warm-up must be >= 0 s, got {self.warmup_s}")
        if self.seconds <= 0 or not 0 < self.bucket_s <= self.seconds:
            raise ValueError(f"need 0 < bucket ({self.bucket_s} s) <= step ({self.seconds} s)")
        for name, v in (("rate", self.rate), ("precondition rate", self.precondition_rate)):
            if v is not None and v <= 0:
                raise ValueError(f"the {name} must be > 0 ops/s, got {v}")
        if _tmpfs(self.work_dir):
            raise ValueError(
                f"{self.work_dir} is on a memory file system; the MBWU is a disk's: choose a disk"
            )


def _tmpfs(path: Path) -> bool:
    """Whether ``path`` (or its nearest existing parent) is on tmpfs/ramfs, by /proc/mounts."""
    p = path.resolve()
    while not p.exists():
        p = p.parent
    best, fstype = "", ""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return False
    for line in mounts:
        parts = line.split()
        if (
            len(parts) > 2
            and (str(p) + "/").startswith(parts[1].rstrip("/") + "/")
            and len(parts[1]) >= len(best)
        ):
            best, fstype = parts[1], parts[2]
    return fstype in ("tmpfs", "ramfs")


def _workload_sweep(plan: Plan, workload: str, progress: Callable[[str], None] | None) -> dict[str, Any]:
    if workload in KV_WORKLOADS:
        layout = KvLayout(plan.work_dir / "kv", plan.keys, max(plan.threads))

        def step(n: int) -> list[float]:
            return run_kv_step(layout, workload, n, plan.seconds, plan.bucket_s, plan.rate, plan.warmup_s)
    else:

        def step(n: int) -> list[float]:
            return run_scan_step(plan.work_dir / "scan", n, plan.seconds)

    return sweep(step, plan.threads, plan.threshold, plan.bound, plan.min_window, progress)


def _node(profile: str, plan: Plan, workload: str, out: Any) -> None:
    """The embedded side: this process holds itself to the node budget (its worker processes
    inherit the cgroup), then sweeps as the host does."""
    from offload.host import budgets as B

    applied = B.apply(B.profile(profile), "mbwu")
    try:
        out.put({"budget": applied, **_workload_sweep(plan, workload, None)})
    except Exception as e:  # the parent reports it
        out.put({"error": f"{type(e).__name__}: {e}"})
    finally:
        B.release(applied)


def _embedded_sweep(plan: Plan, workload: str) -> dict[str, Any]:
    assert plan.embedded is not None
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    p = ctx.Process(target=_node, args=(plan.embedded, plan, workload, out))
    p.start()
    try:
        r = out.get(timeout=len(plan.threads) * (plan.warmup_s + plan.seconds + 90) + 60)
    finally:
        p.join(timeout=30)
    if "error" in r:
        raise RuntimeError(f"the {plan.embedded} node failed: {r['error']}")
    return r


def measure(plan: Plan, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The procedure for every workload of ``plan``: precondition, sweep to the plateau, MBWU;
    with ``plan.embedded``, the same sweep in a process held to that node budget, and its
    throughput in MBWUs (the seed's 0.37-0.5 for its Arm board)."""
    plan.check()
    say = progress or (lambda _s: None)
    plan.work_dir.mkdir(parents=True, exist_ok=True)
    here = machine(plan.work_dir) | {"load_average_at_start": os.getloadavg()}  # the disk under work_dir too
    report: dict[str, Any] = {"machine": here, "plan": _plan_json(plan), "workloads": {}}
    try:
        if any(w in KV_WORKLOADS for w in plan.workloads):
            say("precondition: load and overwrite the key space")
            layout = KvLayout(plan.work_dir / "kv", plan.keys, max(plan.threads))
            report["precondition"] = precondition(layout, plan.overwrite, plan.precondition_rate)
        if "arrow-scan" in plan.workloads:
            say("write the Parquet data set")
            report["scan_data"] = make_scan_data(plan.work_dir / "scan", plan.scan_rows)
        for w in plan.workloads:
            r: dict[str, Any] = {
                "unit": UNITS[w],
                "host": _workload_sweep(plan, w, lambda s, w=w: say(f"{w}: {s}")),
            }
            r["mbwu"] = r["host"]["mbwu"]
            if plan.embedded:
                say(f"{w}: {plan.embedded} node")
                e = _embedded_sweep(plan, w)
                r["embedded"] = e
                r["embedded_mbwus"] = e["mbwu"] / r["mbwu"] if r["mbwu"] > 0 else None
            report["workloads"][w] = r
        report["machine"]["load_average_at_end"] = os.getloadavg()  # others' work shares the CPUs
    finally:
        shutil.rmtree(plan.work_dir / "kv", ignore_errors=True)
        shutil.rmtree(plan.work_dir / "scan", ignore_errors=True)
    return report


def _plan_json(plan: Plan) -> dict[str, Any]:
    d = {k: getattr(plan, k) for k in plan.__dataclass_fields__}
    d["work_dir"], d["workloads"], d["threads"] = str(plan.work_dir), list(plan.workloads), list(plan.threads)
    return d


def plot(r: dict[str, Any], path: Path) -> None:
    """Throughput against workers per workload: each step's steady median with min-max bars, the
    MBWU (a red star and line); the embedded budget's sweep beside the host's when measured."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ws = list(r["workloads"])
    fig, axes = plt.subplots(1, len(ws), figsize=(4.5 * len(ws), 3.8), squeeze=False)
    for ax, w in zip(axes[0], ws, strict=True):
        x = r["workloads"][w]
        for side, style in (("host", "o-"), ("embedded", "s--")):
            if side not in x:
                continue
            sw = x[side]
            ts = [s["threads"] for s in sw["steps"]]
            vs = [s["value"] for s in sw["steps"]]
            win = [s["samples"][slice(*(s["window"] or (0, None)))] for s in sw["steps"]]
            lo = [v - min(xs) for v, xs in zip(vs, win, strict=True)]
            hi = [max(xs) - v for v, xs in zip(vs, win, strict=True)]
            label = "host" if side == "host" else f"{r['plan']['embedded']} budget"
            bars = ax.errorbar(ts, vs, yerr=[lo, hi], fmt=style, capsize=3, label=label)
            shaky = [(t, v) for t, v, s in zip(ts, vs, sw["steps"], strict=True) if not s["steady"]]
            if shaky:  # hollow: no steady window within the bound
                ax.plot(*zip(*shaky, strict=True), style[0], mfc="white", color=bars[0].get_color(), zorder=3)
            best = next(s for s in sw["steps"] if s["threads"] == sw["threads_at_mbwu"])
            ax.plot([best["threads"]], [best["value"]], "r*", ms=14, zorder=4)
            if side == "host":
                ax.axhline(sw["mbwu"], color="red", lw=0.8, ls=":")
                ax.set_xticks(ts)
        note = "at the plateau" if x["host"]["plateau_reached"] else "no plateau: a lower bound"
        ax.set_xlabel("workers (processes; Arrow: threads)")
        ax.set_ylabel(x["unit"])
        ax.set_title(f"{w}: MBWU {x['mbwu']:,.0f} {x['unit']}\n({note}, red star)", fontsize=10)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
    m = r["machine"]
    fig.suptitle(
        f"MBWU sweep on {m['cpus']} CPUs: each step's steady-window median, min-max bars "
        "(hollow: no window within the bound, second-half median)"
    )
    fig.tight_layout()
    save_figure(fig, path)


def save_figure(fig: Any, path: Path) -> None:
    """A matplotlib figure written whole or not at all (format from the suffix; png without)."""
    import matplotlib.pyplot as plt

    from offload.files import atomic_write

    try:
        with atomic_write(path, "wb") as f:
            fig.savefig(f, format=path.suffix.lstrip(".").lower() or "png")
    finally:
        plt.close(fig)


# ---- $/MBWU, kWh/MBWU, m³/MBWU -----------------------------------------------------------------

SEED_HOST = "hp-2x-e5-2630v2"
SEED_EMBEDDED = "rockpro64"
# The seed's key-value case study (slide 51): (test, host MBWUs, embedded MBWUs, reported reduction
# in $/MBWU, reported reduction in kWh/MBWU). Inputs to reproduce, not results of ours. The slide
# lists the six percentages without saying which bar is which; this pairing is the one the
# MBWUs and the slide's "33x more expensive" reproduce (see docs/metrics.md).
SEED_CASES: tuple[tuple[str, float, float, float, float], ...] = (
    ("network", 5.95, 0.5, 0.64, 0.459),
    ("integrated", 5.2, 0.37, 0.579, 0.396),
    ("disaggregated", 3.28, 0.37, 0.734, 0.707),
)


def per_mbwu(item: Any, mbwus: float, hours: int = HOURS_PER_YEAR) -> dict[str, float | None]:
    """A purchased system's cost, energy over ``hours`` at its catalog watts, and volume, each per
    MBWU it delivers; None where the catalog lacks the figure."""
    if not mbwus > 0:
        raise ValueError(f"a system must deliver > 0 MBWUs, got {mbwus}")
    if item.hourly:
        raise ValueError(f"{item.id} is rented by the hour; $/MBWU compares purchases")
    w, v = getattr(item, "watts", None), getattr(item, "volume_m3", None)
    return {
        "usd_per_mbwu": float(item.price) / mbwus,
        "kwh_per_mbwu": None if w is None else float(w) * hours / 1000 / mbwus,
        "m3_per_mbwu": None if v is None else float(v) / mbwus,
    }


def reduction(host: float | None, embedded: float | None) -> float | None:
    """How much less the embedded side needs per MBWU: 1 − embedded/host (negative: it needs more)."""
    if host is None or embedded is None:
        return None
    if host <= 0:
        raise ValueError(f"the host's figure per MBWU must be > 0, got {host}")
    return 1 - embedded / host


def implied_ratio(reported: float, host_mbwus: float, embedded_mbwus: float) -> float:
    """The host/embedded ratio of a resource (price, watts) that a reported reduction implies:
    1 − (r_e / r_h) × (M_h / M_e) = R  ⇒  r_h / r_e = (M_h / M_e) / (1 − R)."""
    if not reported < 1:
        raise ValueError(f"a reduction must be < 1, got {reported}")
    if host_mbwus <= 0 or embedded_mbwus <= 0:
        raise ValueError("MBWUs must be > 0")
    return (host_mbwus / embedded_mbwus) / (1 - reported)


def compare(host: Any, embedded: Any, host_mbwus: float, embedded_mbwus: float) -> dict[str, Any]:
    """Host and embedded per MBWU, and the reductions, for one configuration."""
    h, e = per_mbwu(host, host_mbwus), per_mbwu(embedded, embedded_mbwus)
    return {
        "host": {"item": host.id, "mbwus": host_mbwus, **h},
        "embedded": {"item": embedded.id, "mbwus": embedded_mbwus, **e},
        "reduction": {k: reduction(h[k], e[k]) for k in h},
    }


def seed_case_study(catalog: Path | str | None = None) -> dict[str, Any]:
    """The seed's three tests recomputed from its MBWUs and the catalog's host and embedded
    items, beside the reductions the slide reports and the price/power ratios those imply."""
    from offload.plan.cost import CATALOG, load_catalog

    items = load_catalog(catalog or CATALOG)
    missing = [i for i in (SEED_HOST, SEED_EMBEDDED) if i not in items]
    if missing:
        raise ValueError(f"the catalog lacks {', '.join(missing)} (the seed's host and embedded systems)")
    host, emb = items[SEED_HOST], items[SEED_EMBEDDED]
    rows = []
    for test, mh, me, r_usd, r_kwh in SEED_CASES:
        c = compare(host, emb, mh, me)
        c["test"] = test
        c["reported"] = {"usd_per_mbwu": r_usd, "kwh_per_mbwu": r_kwh, "m3_per_mbwu": None}
        c["implied_host_over_embedded"] = {
            "price": implied_ratio(r_usd, mh, me), "watts": implied_ratio(r_kwh, mh, me),
        }  # fmt: skip
        rows.append(c)
    ratio = {"price": float(host.price / emb.price)}
    for k, attr in (("watts", "watts"), ("volume", "volume_m3")):
        a, b = getattr(host, attr, None), getattr(emb, attr, None)
        ratio[k] = None if a is None or b is None else float(a / b)
    return {
        "host": _item_json(host), "embedded": _item_json(emb), "catalog_host_over_embedded": ratio,
        "tests": rows,
    }  # fmt: skip


def _item_json(item: Any) -> dict[str, Any]:
    def f(x: Fraction | None) -> float | None:
        return None if x is None else float(x)

    return {
        "id": item.id, "name": item.name, "usd": float(item.price), "price_date": item.date,
        "price_source": item.source, "watts": f(getattr(item, "watts", None)),
        "volume_m3": f(getattr(item, "volume_m3", None)), "spec_source": getattr(item, "spec_source", None),
        "spec_date": getattr(item, "spec_date", None),
    }  # fmt: skip


def this_machine_costs(report: dict[str, Any], catalog: Path | str | None = None) -> dict[str, Any]:
    """With an embedded budget measured: each workload's embedded MBWUs here (host = 1, the one
    disk), priced with the seed's host and embedded items — this machine's ratio, the seed's hardware."""
    from offload.plan.cost import CATALOG, load_catalog

    items = load_catalog(catalog or CATALOG)
    out = {}
    for w, r in report["workloads"].items():
        if r.get("embedded_mbwus"):
            out[w] = compare(items[SEED_HOST], items[SEED_EMBEDDED], 1.0, r["embedded_mbwus"])
    return out
