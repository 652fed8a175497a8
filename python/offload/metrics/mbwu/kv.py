"""The key-value workloads on RocksDB (``rocksdict``): the sharded layout, the precondition
(load, then zipfian overwrites), and a step of worker processes (open loop or flat out) that
returns throughput per bucket.

Workers are processes, not threads: rocksdict holds the GIL inside ``get``, so the key space is
split into shards, one RocksDB per shard, each opened by exactly one worker. RocksDB reads,
flushes and compactions use direct I/O and no block cache, so reads go to the device."""

from __future__ import annotations

import errno
import multiprocessing as mp
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from offload.metrics.mbwu.keys import key, zipf_ids, zipf_keys

VALUE_BYTES = 1024  # YCSB's default record: 10 fields x 100 B; one 1 KiB field here
KV_WORKLOADS = {"ycsb-a": 0.5, "ycsb-c": 1.0}  # name -> fraction of reads (the rest are updates)


@dataclass(frozen=True)
class KvLayout:
    """A key space of ``n_keys`` spread over ``shards`` RocksDB directories under ``root`` by
    ``id % shards``; ``shards`` bounds the sweep's worker count (one writer per RocksDB).
    ``block_cache``: bytes of RocksDB block cache per shard, 0 for none. ``memtable``: bytes of a
    memtable and of an SST file, with 4x that in level 1 (RocksDB's defaults are 64 MiB, 64 MiB and
    256 MiB); 0 keeps the defaults. A smaller one scales the LSM tree down, so that flushes and
    compactions reach their steady share of the traffic within seconds."""

    root: Path
    n_keys: int
    shards: int
    seed: int = 7
    block_cache: int = 0
    memtable: int = 0

    def shard_dir(self, s: int) -> Path:
        return self.root / f"shard-{s:02d}"


def _open(path: Path, create: bool = False, block_cache: int = 0, memtable: int = 0) -> Any:
    import rocksdict as R

    o = R.Options(raw_mode=True)
    if memtable:
        o.set_write_buffer_size(memtable)
        o.set_target_file_size_base(memtable)
        o.set_max_bytes_for_level_base(4 * memtable)
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
    dbs = [_open(layout.shard_dir(s), create=True, memtable=layout.memtable) for s in range(layout.shards)]
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
    ranks, perm = zipf_keys(layout.n_keys), rng.permutation(layout.n_keys)
    ids = zipf_ids(rng, ranks, perm, int(overwrite * layout.n_keys))
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
        "bytes_on_disk": bytes_on_disk(layout.root),
    }  # fmt: skip


def _wait_until(t: float) -> None:
    """Open loop: sleep to the op's scheduled time; when behind, go at once (never skip an op, so
    a slow device shows as a lower rate, not as fewer operations asked of it)."""
    d = t - time.monotonic()
    if d > 0:
        time.sleep(d)


def bytes_on_disk(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def _kv_worker(
    layout: KvLayout, mine: list[int], reads: float, rate: float | None, seconds: float, bucket_s: float,
    warmup_s: float, seed: int, ready: Any, go: Any, start_at: Any, out: Any,
) -> None:  # fmt: skip
    """One worker: opens its shards, waits for the common start, runs the workload ``warmup_s``
    uncounted (a freshly opened RocksDB reads at about 2/3 speed for its first 1-2 s here), then
    ``seconds`` more, counting completed operations per bucket of ``bucket_s``."""
    dbs = {
        s: _open(layout.shard_dir(s), block_cache=layout.block_cache, memtable=layout.memtable) for s in mine
    }
    buf = _values(layout.seed)
    rng = np.random.default_rng(seed)
    ranks = zipf_keys(layout.n_keys)
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
    io0: tuple[int, int, float] | None = None
    done = {"reads": 0, "updates": 0, "user_bytes": 0}
    while True:
        ids = zipf_ids(rng, ranks, perm, 4096)
        ids = ids[owned[ids % layout.shards]]  # the keys of this worker's shards
        is_read = rng.random(len(ids)) < reads
        for i, r in zip(ids.tolist(), is_read.tolist(), strict=True):
            if rate is not None:
                _wait_until(start_at.value + n / rate)
            db = dbs[i % layout.shards]
            k = key(i)
            if r:
                got = db.get(k)
                size = len(k) + (len(got) if got is not None else 0)
            else:
                v = _value(buf, i + n)
                db.put(k, v)
                size = len(k) + len(v)
            n += 1
            now = time.monotonic()
            if now >= end:
                r1, w1 = io_bytes()
                cpu = time.process_time() - io0[2] if io0 else 0.0
                io = {"read_bytes": r1 - io0[0], "write_bytes": w1 - io0[1]} if io0 else {}
                for db in dbs.values():
                    db.close()
                out.put({"counts": counts, "io": io, "cpu_s": cpu, **done})
                return
            if now >= t0:
                if io0 is None:  # the window's first op: the device's and the CPU's count start here
                    io0 = (*io_bytes(), time.process_time())
                counts[min(len(counts) - 1, int((now - t0) / bucket_s))] += 1
                done["reads" if r else "updates"] += 1
                done["user_bytes"] += size


def io_bytes() -> tuple[int, int]:
    """(read_bytes, write_bytes) this process has caused at the storage layer, all its threads
    (RocksDB's flushes and compactions too): /proc/self/io. (0, 0) where it cannot be read."""
    try:
        fields = dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())
        return int(fields["read_bytes"]), int(fields["write_bytes"])
    except (OSError, KeyError, ValueError):
        return 0, 0


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
    rate: float | None = None, warmup_s: float = 0.0, detail: dict[str, Any] | None = None,
) -> list[float]:  # fmt: skip
    """``workers`` processes run ``workload`` together (shard s goes to worker s % workers);
    returns the summed throughput (ops/s) per bucket. ``detail``, if given, receives the counted
    window's totals over the workers: reads, updates, the bytes of keys and values they moved
    (``user_bytes``), the bytes their processes read and wrote at the storage layer
    (``read_bytes``, ``write_bytes``: RocksDB's data access) and their CPU seconds."""
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
    if detail is not None:
        for k in ("reads", "updates", "user_bytes", "cpu_s"):
            detail[k] = sum(p[k] for p in parts)
        for k in ("read_bytes", "write_bytes"):
            detail[k] = sum(p["io"].get(k, 0) for p in parts)
        detail["seconds"] = seconds
    return [sum(c) / bucket_s for c in zip(*(p["counts"] for p in parts), strict=True)]


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
