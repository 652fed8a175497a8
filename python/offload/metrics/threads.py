"""Multi-threaded services on a node against the host, by thread count (seed 003, slide 21).

The seed ran two services at 1 to 8 threads on a BlueField-2 and on hosts. One was Faodel's
LocalKV test, multi-threaded put/get/delete on a 2D in-memory hash map: "at 8 threads, the host
is only 37.8% faster than the SmartNIC", the card's bookkeeping overhead being small. The other
was two queries on Arrow particle data, a filter (a 1/8 bounding box) and an aggregation (min and
max squared speed): "servers are roughly four times faster at the same number of threads".

Here each service runs with k threads in two placements:

* ``host``: this machine, no quota;
* ``node``: a process held to the ``bluefield2`` budget at k threads, a quarter of a core per
  thread (quota k/4 cores, :mod:`offload.host.budgets`).

The services:

* ``localkv``: k Python threads, each putting, getting and deleting its own keys in a 2D map
  (rows of dicts, a lock per row). Python threads share one interpreter lock, so this measures the
  bookkeeping of a locked map under contention, not parallel work;
* ``arrow-filter`` and ``arrow-aggregate``: k threads each run the query over their share of a
  particle table's batches; Arrow's kernels release the interpreter lock, so these run in parallel
  up to the cores there are.

Throughput is operations (or rows) per second over ``seconds``, after one uncounted pass.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

SERVICES = ("localkv", "arrow-filter", "arrow-aggregate")
SEED_LOCALKV_HOST_OVER_NODE_AT_8 = 1.378  # "the host is only 37.8% faster than the SmartNIC"
SEED_QUERY_HOST_OVER_NODE = 4.0  # "roughly four times faster when using the same number of threads"
ROWS = 1 << 20
KV_ROWS = 64  # the map's first dimension


def localkv(threads: int, seconds: float, keys_per_thread: int = 1000) -> float:
    """put/get/delete ops per second of ``threads`` threads on a 2D map with a lock per row."""
    rows: list[dict[bytes, bytes]] = [{} for _ in range(KV_ROWS)]
    locks = [threading.Lock() for _ in range(KV_ROWS)]
    value = bytes(64)
    stop = threading.Event()
    counts = [0] * threads

    def work(t: int) -> None:
        keys = [f"{t}:{i}".encode() for i in range(keys_per_thread)]
        where = [hash(k) % KV_ROWS for k in keys]
        n = 0
        while not stop.is_set():
            for k, r in zip(keys, where, strict=True):
                with locks[r]:
                    rows[r][k] = value
                with locks[r]:
                    rows[r].get(k)
                with locks[r]:
                    del rows[r][k]
            n += 3 * len(keys)
        counts[t] = n

    return _run_threads(work, threads, seconds, stop, counts)


def _run_threads(work: Callable[[int], None], threads: int, seconds: float, stop: threading.Event,
                 counts: list[int]) -> float:  # fmt: skip
    """Runs ``work`` on ``threads`` threads for ``seconds``; their summed counts per second."""
    pool = [threading.Thread(target=work, args=(t,), daemon=True) for t in range(threads)]
    t0 = time.perf_counter()
    for p in pool:
        p.start()
    time.sleep(seconds)
    stop.set()
    for p in pool:
        p.join(timeout=seconds + 30)
    return sum(counts) / (time.perf_counter() - t0)


def particles(rows: int = ROWS, batches: int = 64) -> pa.Table:
    """A particle table in ``batches`` record batches (:mod:`offload.dataservices.particles`)."""
    from offload.dataservices import particles as P

    t = P.generate(rows, seed=3)
    return pa.Table.from_batches(t.to_batches(max_chunksize=-(-rows // batches)))


def _filter(b: pa.RecordBatch) -> int:
    """The 1/8 bounding box: rows kept."""
    m = pc.and_(pc.and_(pc.less(b["x"], 0.5), pc.less(b["y"], 0.5)), pc.less(b["z"], 0.5))
    return b.filter(m).num_rows


def _aggregate(b: pa.RecordBatch) -> int:
    """Min and max of the squared speed; the batch's rows."""
    v2 = pc.add(
        pc.add(pc.multiply(b["vx"], b["vx"]), pc.multiply(b["vy"], b["vy"])), pc.multiply(b["vz"], b["vz"])
    )
    pc.min_max(v2)
    return b.num_rows


def query(service: str, threads: int, seconds: float, table: pa.Table) -> float:
    """Rows per second of ``threads`` threads running the query over the table's batches, passes
    repeated until ``seconds`` have gone (one uncounted pass first)."""
    fn = _filter if service == "arrow-filter" else _aggregate
    batches = table.to_batches()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(fn, batches))
        t0, rows = time.perf_counter(), 0
        while time.perf_counter() - t0 < seconds:
            list(pool.map(fn, batches))
            rows += table.num_rows
        return rows / (time.perf_counter() - t0)


def measure(
    services: Sequence[str], threads: Sequence[int], seconds: float, rows: int = ROWS
) -> dict[str, dict[int, float]]:
    """Each service at each thread count, in this process as it is; under ``cores:<service>``, the
    CPU this process used per second of each point (what it got of a machine others share)."""
    bad = [s for s in services if s not in SERVICES]
    if bad or not services:
        raise ValueError(f"unknown service {', '.join(bad) or '(none)'}; one of {', '.join(SERVICES)}")
    if not threads or min(threads) < 1 or seconds <= 0:
        raise ValueError(f"need thread counts >= 1 and seconds > 0, got {list(threads)} and {seconds}")
    table = particles(rows) if any(s != "localkv" for s in services) else None
    out: dict[str, dict[int, float]] = {s: {} for s in services}
    out |= {f"cores:{s}": {} for s in services}
    for s in services:
        for k in threads:
            cpu0, t0 = time.process_time(), time.perf_counter()
            out[s][k] = localkv(k, seconds) if s == "localkv" else query(s, k, seconds, table)  # type: ignore[arg-type]
            out[f"cores:{s}"][k] = (time.process_time() - cpu0) / (time.perf_counter() - t0)
    return out


def on_node(
    profile: str, services: Sequence[str], k: int, seconds: float, rows: int = ROWS
) -> dict[str, Any]:
    """:func:`measure` at ``k`` threads in a child process held to ``profile`` at ``k`` threads."""
    from offload.host import budgets as B
    from offload.metrics.budgeted import run_in_budget

    timeout = len(services) * (2 * seconds + 60) + 60
    prof = B.profile(profile).with_(threads=k)
    budget, result = run_in_budget(prof, "threads", measure, (list(services), [k], seconds, rows), timeout)
    return {"budget": budget, "result": result}


def compare(
    services: Sequence[str] = SERVICES,
    threads: Sequence[int] = (1, 2, 4, 8),
    seconds: float = 1.0,
    profile: str = "bluefield2",
    rows: int = ROWS,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Every service at every thread count on the host and on the node; host ÷ node per point.
    Host and node take turns at each thread count, so that load from other work falls on both."""
    say = progress or (lambda _s: None)
    host: dict[str, dict[int, float]] = {}
    node: dict[str, dict[int, float]] = {}
    budgets = {}
    for k in threads:
        say(f"host, {k} threads")
        here = measure(services, [k], seconds, rows)
        say(f"{profile} node, {k} threads")
        r = on_node(profile, services, k, seconds, rows)
        budgets[k] = r["budget"]
        for s in (*services, *(f"cores:{s}" for s in services)):
            host.setdefault(s, {})[k] = here[s][k]
            node.setdefault(s, {})[k] = r["result"][s][k]
    ratio = {s: {k: host[s][k] / node[s][k] for k in threads} for s in services}
    cores = {p: {s: d.pop(f"cores:{s}") for s in services} for p, d in (("host", host), ("node", node))}
    return {
        "services": list(services), "threads": list(threads), "seconds": seconds, "rows": rows,
        "profile": profile, "host": host, "node": node, "host_over_node": ratio, "cores_used": cores,
        "budgets": budgets,
        "seed": {"localkv_host_over_node_at_8": SEED_LOCALKV_HOST_OVER_NODE_AT_8,
                 "query_host_over_node": SEED_QUERY_HOST_OVER_NODE},
    }  # fmt: skip
