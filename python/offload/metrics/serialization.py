"""(De)serialization against memcpy by object size (seed 003, slide 39).

The seed merges objects on the SmartNIC and asks whether going through Apache Arrow's IPC format
(deserialize the parts, serialize the merged table) costs much more than copying bytes. On the
BlueField-2 it found the two similar even for small objects (< 10 MiB; its point: 131,072 rows,
9 MiB). Slide 27 adds that deserialization costs a constant, serialization does not.

Here, on this host, per object size (particle tables, :mod:`offload.dataservices.particles`,
64 B a row):

* ``memcpy``: copying the object's IPC bytes into a buffer allocated once (numpy ``copyto``);
* ``arrow``: deserializing the IPC stream (``pa.ipc.open_stream(...).read_all()``, zero-copy) and
  serializing the table into a new stream (``RecordBatchStreamWriter``), each timed alone; the
  stream grows as it is written (``BufferOutputStream``), so ``arrow_sized`` also writes it into
  a buffer of the right size, allocated once (the size from a ``MockOutputStream`` pass);
* ``pickle``: ``pickle.loads`` and ``pickle.dumps`` of the same table (protocol 5, in band), the
  format a Python service would reach for first.

Each figure is the median of repeats that together last at least ``min_seconds`` (and at least
three). The ratio (deserialize + serialize) / memcpy is the seed's comparison.
"""

from __future__ import annotations

import pickle
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from offload.dataservices import particles as P
from offload.files import save_figure
from offload.host.plots import pyplot

SEED_ROWS = 131_072
SEED_MIB = 9.0
FORMATS: tuple[str, ...] = ("arrow", "arrow_sized", "pickle")
LINKS_GBIT: tuple[float, ...] = (10.0, 100.0)
"""Links for the injection arithmetic: the ``bluefield2`` budget's shaped link, the seed's 100 Gb/s."""
SEED_INJECTION_SHARE = 0.81  # slide 66: the transfer to the local SmartNIC, of the whole injection
DEFAULT_ROWS: tuple[int, ...] = tuple(1 << k for k in range(10, 22))  # 1 Ki .. 2 Mi rows: 64 KiB .. 128 MiB


def ipc_bytes(table: pa.Table) -> pa.Buffer:
    """The table as one Arrow IPC stream."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue()


def ipc_into(table: pa.Table, buf: pa.Buffer) -> None:
    """The table as an Arrow IPC stream written into ``buf`` (mutable, of the stream's size)."""
    with pa.ipc.new_stream(pa.FixedSizeBufferWriter(buf), table.schema) as w:
        w.write_table(table)


def ipc_size(table: pa.Table) -> int:
    """The bytes of ``table``'s IPC stream, counted without writing them."""
    mock = pa.MockOutputStream()
    with pa.ipc.new_stream(mock, table.schema) as w:
        w.write_table(table)
    return int(mock.size())


def timed(fn: Callable[[], Any], min_seconds: float, max_repeats: int = 10_000) -> float:
    """The median wall time of ``fn`` over repeats lasting at least ``min_seconds`` in all (at
    least 3, at most ``max_repeats``)."""
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < max_repeats and (len(times) < 3 or time.perf_counter() - start < min_seconds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure_size(rows: int, min_seconds: float = 0.2) -> dict[str, Any]:
    """Every operation on one particle table of ``rows`` rows; checks each round trip."""
    table = P.generate(rows, seed=rows).combine_chunks()
    buf = ipc_bytes(table)
    src = np.frombuffer(buf, dtype=np.uint8)
    dst = np.empty_like(src)
    pickled = pickle.dumps(table, protocol=5)
    sized = pa.allocate_buffer(ipc_size(table))
    if not pa.ipc.open_stream(buf).read_all().equals(table) or not pickle.loads(pickled).equals(table):
        raise RuntimeError(f"a round trip of {rows} rows did not give the table back")
    out: dict[str, Any] = {
        "rows": rows,
        "bytes": buf.size,
        "pickle_bytes": len(pickled),
        "memcpy_s": timed(lambda: np.copyto(dst, src), min_seconds),
        "arrow_deserialize_s": timed(lambda: pa.ipc.open_stream(buf).read_all(), min_seconds),
        "arrow_serialize_s": timed(lambda: ipc_bytes(table), min_seconds),
        "arrow_sized_serialize_s": timed(lambda: ipc_into(table, sized), min_seconds),
        "pickle_deserialize_s": timed(lambda: pickle.loads(pickled), min_seconds),
        "pickle_serialize_s": timed(lambda: pickle.dumps(table, protocol=5), min_seconds),
    }
    out["arrow_sized_deserialize_s"] = out["arrow_deserialize_s"]  # the same stream is read
    for fmt in FORMATS:
        both = out[f"{fmt}_deserialize_s"] + out[f"{fmt}_serialize_s"]
        out[f"{fmt}_over_memcpy"] = both / out["memcpy_s"]
    return out


def sweep(
    rows: Sequence[int] = DEFAULT_ROWS,
    min_seconds: float = 0.2,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """:func:`measure_size` over ``rows``, with the seed's figure for comparison."""
    if not rows or min(rows) < 1:
        raise ValueError(f"row counts must be >= 1, got {list(rows)}")
    if min_seconds < 0:
        raise ValueError(f"min_seconds must be >= 0, got {min_seconds}")
    sizes = []
    for n in rows:
        if progress:
            progress(f"{n:,} rows")
        sizes.append(measure_size(n, min_seconds))
    return {
        "injection": injection_shares(sizes),
        "table": "particles (id int64, x y z vx vy vz t float64: 64 B a row)",
        "min_seconds": min_seconds,
        "sizes": sizes,
        "seed": {
            "rows": SEED_ROWS,
            "mib": SEED_MIB,
            "claim": "similar performance even with small objects (< 10 MiB)",
        },
    }


def injection_shares(
    sizes: Sequence[dict[str, Any]], links: Sequence[float] = LINKS_GBIT
) -> list[dict[str, Any]]:
    """Arithmetic, not a measured injection (seed 003, slide 66: the transfer to the local SmartNIC
    is 81% of a producer's injection time): a producer packs each object (this host's measured
    serialization) and sends it over a link of an assumed rate; the transfer's share of the two is
    (bytes / rate) / (bytes / rate + serialize seconds), for each size, link and Arrow writer."""
    out = []
    for x in sizes:
        for gbit in links:
            wire = x["bytes"] * 8 / (gbit * 1e9)
            shares = {fmt: wire / (wire + x[f"{fmt}_serialize_s"]) for fmt in ("arrow", "arrow_sized")}
            out.append({"rows": x["rows"], "bytes": x["bytes"], "link_gbit": gbit, "transfer_s": wire,
                        "transfer_share": shares})  # fmt: skip
    return out


def plot(r: dict[str, Any], path: Path) -> None:
    """Seconds per operation against object size (log-log), and the ratio to memcpy; the seed's
    131,072-row, 9 MiB point marked."""
    plt = pyplot()
    s = r["sizes"]
    mib = [x["bytes"] / 2**20 for x in s]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 4.5))
    ax.plot(mib, [x["memcpy_s"] for x in s], "k-o", label="memcpy (buffer allocated once)")
    for fmt, color in zip(FORMATS, ("C0", "C2", "C1"), strict=True):
        both = [x[f"{fmt}_deserialize_s"] + x[f"{fmt}_serialize_s"] for x in s]
        ax.plot(mib, both, "-o", color=color, label=f"{fmt}: deserialize + serialize")
        ax.plot(mib, [x[f"{fmt}_serialize_s"] for x in s], ":", color=color, label=f"{fmt}: serialize")
        ax.plot(mib, [x[f"{fmt}_deserialize_s"] for x in s], "--", color=color, label=f"{fmt}: deserialize")
        bx.plot(mib, [x[f"{fmt}_over_memcpy"] for x in s], "-o", color=color, label=fmt)
    for a in (ax, bx):
        a.set_xscale("log")
        a.axvline(r["seed"]["mib"], color="grey", ls="--", lw=0.8)
        a.set_xlabel("object size, MiB (IPC bytes)")
        a.grid(True, which="major", alpha=0.3)
        a.legend(fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("seconds")
    bx.axhline(1.0, color="black", lw=0.8)
    bx.set_yscale("log")
    bx.set_ylabel("(deserialize + serialize) ÷ memcpy")
    fig.suptitle("(de)serialization vs memcpy on this host; dashed: the seed's 131,072 rows, 9 MiB")
    fig.tight_layout()
    save_figure(fig, path)
