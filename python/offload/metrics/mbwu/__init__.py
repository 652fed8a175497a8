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

Where things live: ``detect`` (steady window, plateau, the sweep), ``keys`` (YCSB's zipfian
keys), ``kv`` (RocksDB layout, precondition, worker processes), ``scan`` (the Arrow scan),
``procedure`` (`Plan`, `measure`), ``figure`` (`plot`), ``costs`` ($/kWh/m³ per MBWU, the seed's
case study).
"""

from __future__ import annotations

from offload.metrics.mbwu.costs import (
    SEED_CASES,
    SEED_EMBEDDED,
    SEED_HOST,
    compare,
    implied_ratio,
    per_mbwu,
    reduction,
    seed_case_study,
    this_machine_costs,
)
from offload.metrics.mbwu.detect import plateau, steady_window, summarize, sweep
from offload.metrics.mbwu.figure import plot
from offload.metrics.mbwu.keys import ZIPF_THETA, key, zipf_ids, zipf_keys
from offload.metrics.mbwu.kv import KV_WORKLOADS, VALUE_BYTES, KvLayout, precondition, run_kv_step
from offload.metrics.mbwu.procedure import UNITS, WORKLOADS, Plan, measure
from offload.metrics.mbwu.scan import make_scan_data, run_scan_step

__all__ = [
    "KV_WORKLOADS",
    "SEED_CASES",
    "SEED_EMBEDDED",
    "SEED_HOST",
    "UNITS",
    "VALUE_BYTES",
    "WORKLOADS",
    "ZIPF_THETA",
    "KvLayout",
    "Plan",
    "compare",
    "implied_ratio",
    "key",
    "make_scan_data",
    "measure",
    "per_mbwu",
    "plateau",
    "plot",
    "precondition",
    "reduction",
    "run_kv_step",
    "run_scan_step",
    "seed_case_study",
    "steady_window",
    "summarize",
    "sweep",
    "this_machine_costs",
    "zipf_ids",
    "zipf_keys",
]  # fmt: skip
