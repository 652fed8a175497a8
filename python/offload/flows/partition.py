"""Particle data flows (seed 003, slides 20 and 25): producers emit tables sorted by position and
time, consumers want them by id and time. In between, a service unpacks the producers' Arrow
data, splits it into 2-16 partitions by id and repacks each (the *partition* step), and a sift
merges each partition's arrivals into sorted runs with an LSM tree (:mod:`.lsm`). Both run here
over the data sets of :mod:`.datasets`, alone or in a child process held to a node budget.

The partition step's time is broken down as the seed breaks it down: unpack (IPC bytes to a
table), split (partition of each row, rows grouped by partition), repack (each partition to IPC
bytes) and, with a codec, compress (the compressed repack's time beyond the plain one).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from offload.flows.datasets import BOX, DataSet, dataset, speed_range

CODECS = (None, "lz4", "zstd")
"""Arrow IPC's codecs (``lz4`` is LZ4 frame); None ships uncompressed."""


# ------------------------------------------------------------------------------ partition


@dataclass
class Breakdown:
    """Seconds of each step of the partition service, and the bytes in and out."""

    unpack: float = 0.0
    split: float = 0.0
    repack: float = 0.0
    compress: float = 0.0
    bytes_in: int = 0
    bytes_out: int = 0
    rows: int = 0

    @property
    def total(self) -> float:
        return self.unpack + self.split + self.repack + self.compress

    def add(self, other: Breakdown) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def as_dict(self) -> dict[str, float]:
        return {"unpack_s": self.unpack, "split_s": self.split, "repack_s": self.repack,
                "compress_s": self.compress, "total_s": self.total, "bytes_in": self.bytes_in,
                "bytes_out": self.bytes_out, "rows": self.rows}  # fmt: skip


@dataclass
class Partitioner:
    """Splits a data set's tables into ``parts`` partitions by equal ranges of its id domain, so
    that partition i holds smaller ids than partition i + 1 (the consumers read them in order)."""

    data: DataSet
    parts: int
    rows_hint: int = 0
    """The data set's size, for domains that depend on it (particle ids are 0 .. rows - 1)."""
    codec: str | None = None
    breakdown: Breakdown = field(default_factory=Breakdown)
    last_rows: list[int] = field(default_factory=list)
    """The rows of each partition :meth:`run` made last (a flow counts what it forwards)."""

    def __post_init__(self) -> None:
        if not 2 <= self.parts <= 16:
            raise ValueError(f"partitions must be 2-16 (the seed's range), got {self.parts}")
        if self.codec not in CODECS:
            raise ValueError(f"codec must be one of lz4, zstd or none, got {self.codec!r}")
        self.lo, self.hi = self.data.id_range(self.rows_hint)

    def partition_of(self, ids: np.ndarray) -> np.ndarray:
        """Each id's partition (ids outside the domain go to the first or the last)."""
        span = max(1, self.hi - self.lo)
        inside = np.clip(ids, self.lo, self.lo + span - 1)  # first: huge ids would overflow below
        return (inside - self.lo) * self.parts // span

    def run(self, ipc: bytes) -> list[bytes]:
        """One producer's IPC stream in, one IPC stream per partition out (empty partitions are
        empty streams with the schema). Adds the steps' times to :attr:`breakdown`."""
        b = Breakdown(bytes_in=len(ipc))
        t0 = time.perf_counter()
        table = unpack(ipc)
        t1 = time.perf_counter()
        if table.schema.remove_metadata() != self.data.schema:
            raise ValueError(f"batches of schema {table.schema.names} are not {self.data.name} data")
        ids = table.column(self.data.id_column).to_numpy()
        part = self.partition_of(ids)
        order = np.argsort(part, kind="stable")  # producer order is kept inside a partition
        bounds = np.searchsorted(part[order], np.arange(self.parts + 1))
        grouped = table.take(pa.array(order))
        pieces = [grouped.slice(bounds[i], bounds[i + 1] - bounds[i]) for i in range(self.parts)]
        t2 = time.perf_counter()
        plain = [pack(p, None) for p in pieces]
        t3 = time.perf_counter()
        out = plain if self.codec is None else [pack(p, self.codec) for p in pieces]
        t4 = time.perf_counter()
        b.unpack, b.split, b.repack = t1 - t0, t2 - t1, t3 - t2
        b.compress = max(0.0, (t4 - t3) - (t3 - t2)) if self.codec else 0.0
        b.bytes_out, b.rows = sum(len(o) for o in out), table.num_rows
        self.breakdown.add(b)
        self.last_rows = np.diff(bounds).tolist()
        return out


def pack(table: pa.Table, codec: str | None = None) -> bytes:
    """A table as one Arrow IPC stream, its buffers compressed with ``codec``."""
    sink = pa.BufferOutputStream()
    opts = pa.ipc.IpcWriteOptions(compression=codec)
    with pa.ipc.new_stream(sink, table.schema, options=opts) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def unpack(ipc: bytes) -> pa.Table:
    """An Arrow IPC stream's table; a clear error where the bytes are not one."""
    try:
        return pa.ipc.open_stream(pa.py_buffer(ipc)).read_all()
    except (pa.ArrowInvalid, OSError) as e:
        raise ValueError(f"not an Arrow IPC stream ({len(ipc)} bytes): {str(e).splitlines()[0]}") from None


# ------------------------------------------------------------------------------ sift


@dataclass
class Sift:
    """One LSM tree per partition (:mod:`.lsm`), sorted by the data set's (id, time): the
    consumers' order, queryable while partitions keep arriving. Partition i holds smaller ids
    than partition i + 1, so the trees read in turn are the whole data set in order."""

    data: DataSet
    parts: int
    memtable_rows: int = 1 << 16
    fanout: int = 4
    merge_s: float = 0.0
    """Seconds spent unpacking arrivals and merging them into the trees."""

    def __post_init__(self) -> None:
        from offload.flows.lsm import Lsm

        self.trees = [
            Lsm(self.data.schema, self.data.key, self.memtable_rows, self.fanout) for _ in range(self.parts)
        ]

    def put(self, part: int, ipc: bytes) -> int:
        """A partition's IPC stream arrives (from any producer); returns its rows."""
        if not 0 <= part < self.parts:
            raise ValueError(f"partition {part} of {self.parts}")
        t0 = time.perf_counter()
        table = unpack(ipc)
        self.trees[part].put(table)
        self.merge_s += time.perf_counter() - t0
        return table.num_rows

    def sorted(self) -> pa.Table:
        """The whole data set by (id, time)."""
        return pa.concat_tables([t.sorted() for t in self.trees])

    def scan(self, where: pc.Expression) -> pa.Table:
        """The rows matching ``where``, by (id, time)."""
        return pa.concat_tables([t.scan(where) for t in self.trees])


# ------------------------------------------------------------------------- runs under a budget


def data_file(name: str, rows: int, work: Path, seed: int = 0, message_rows: int = 1 << 16) -> Path:
    """The data set as an Arrow IPC file of producer messages of ``message_rows`` rows, made once
    under ``work`` and reused."""
    from offload.files import atomic_write

    path = work / f"{name}-{rows}-{seed}-{message_rows}.arrow"
    if not path.exists():
        table = dataset(name).generate(rows, seed)
        work.mkdir(parents=True, exist_ok=True)
        with atomic_write(path, "wb") as f, pa.ipc.new_file(f, table.schema) as w:
            for b in table.to_batches(max_chunksize=message_rows):
                w.write_batch(b)
    return path


def read_messages(path: Path) -> list[tuple[bytes, int]]:
    """A :func:`data_file`'s producer messages, each packed as the producer sends it, with its
    rows (packing happens here, outside any timing)."""
    reader = pa.ipc.open_file(pa.memory_map(str(path)))
    out = []
    for i in range(reader.num_record_batches):
        b = reader.get_batch(i)
        out.append((pack(pa.Table.from_batches([b])), b.num_rows))
    return out


def partition_under(
    profile: str,
    name: str,
    rows: int,
    parts: int,
    codec: str | None,
    work: Path,
    seed: int = 0,
    timeout_s: float = 1800,
    sift: tuple[int, int] | None = None,
    message_rows: int = 1 << 16,
) -> dict[str, Any]:
    """Runs the partition service over a data set in a child process held to a node budget
    (:mod:`offload.host.budgets`: ``host``, ``core``, ``bluefield2``), one producer message at a time, and
    returns its breakdown with the budget as applied and the seconds per GB. Producer messages
    have ``message_rows`` rows. ``decode_s`` is the time to read the partitions back (unpack,
    decompressing), in the same budget: a receiver's cost. Given ``sift`` =
    (memtable rows, fanout), the same process also sifts every partition into an LSM tree, as a
    node that both partitions and sifts: ``merge_s`` is that, ``read_s`` the
    consumers' sorted read, and ``sift_gb_per_s`` the input rate through both."""
    import subprocess
    import sys

    dataset(name), Partitioner(dataset(name), parts, rows, codec)  # refuse bad input here
    path = data_file(name, rows, work, seed, message_rows)
    args = {"profile": profile, "name": name, "rows": rows, "parts": parts, "codec": codec, "path": str(path),
            "sift": list(sift) if sift else None}  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "offload.flows.partition", json.dumps(args)],
                          capture_output=True, text=True, timeout=timeout_s)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"partition worker ({profile}) failed: {done.stderr.strip().splitlines()[-1:]}")
    out = json.loads(done.stdout)
    out["s_per_gb"] = out["total_s"] / (out["bytes_in"] / 1e9) if out["bytes_in"] else 0.0
    if sift and out["bytes_in"]:
        out["sift_gb_per_s"] = out["bytes_in"] / 1e9 / (out["total_s"] + out["merge_s"])
    return out | {"dataset": name, "profile": profile, "codec": codec or "none", "parts": parts}


def _worker(args: dict[str, Any]) -> dict[str, Any]:
    """The child of :func:`partition_under`: holds itself to the budget, then times the service
    over every message of the data file (packed beforehand, outside the timing)."""
    from offload.host import budgets as B

    prof = B.profile(args["profile"])
    applied = B.apply(prof, "flows")
    pa.set_cpu_count(prof.threads)  # the codecs compress buffers on Arrow's CPU pool
    try:
        messages = [m for m, _ in read_messages(Path(args["path"]))]
        data = dataset(args["name"])
        p = Partitioner(data, args["parts"], args["rows"], args["codec"])
        sift = Sift(data, args["parts"], *args["sift"]) if args.get("sift") else None
        queries = {}
        decode_s = 0.0
        for k, m in enumerate(messages):
            pieces = p.run(m)
            t0 = time.perf_counter()
            for piece in pieces:  # what the receiving side pays to read them (decompressing)
                unpack(piece)
            decode_s += time.perf_counter() - t0
            for i, part in enumerate(pieces):
                if sift is not None:
                    sift.put(i, part)
            if sift is not None and k == len(messages) // 2:  # queryable while data keeps arriving
                queries["midway"] = _seed_queries(sift, data)
        out = p.breakdown.as_dict() | {"budget": applied, "decode_s": decode_s}
        if sift is not None:
            t0 = time.perf_counter()
            rows = sum(t.sorted().num_rows for t in sift.trees)
            amp = float(np.mean([t.stats.write_amplification for t in sift.trees]))
            queries["end"] = _seed_queries(sift, data)
            out |= {"merge_s": sift.merge_s, "read_s": time.perf_counter() - t0, "rows_sorted": rows,
                    "write_amplification": amp, "queries": queries}  # fmt: skip
        return out
    finally:
        B.release(applied)


def _seed_queries(sift: Sift, data: DataSet) -> dict[str, Any]:
    """The seed's two queries on the sift as it is: the rows in an eighth of the bounding box
    and the smallest and largest squared speed, with the rows stored and the seconds each took."""
    t0 = time.perf_counter()
    box = sift.scan(BOX[data.name]).num_rows
    t1 = time.perf_counter()
    lo, hi = speed_range(sift.sorted(), data)
    t2 = time.perf_counter()
    stored = sum(len(t) for t in sift.trees)
    return {"rows_stored": stored, "box_rows": box, "box_s": t1 - t0, "speed2_min": lo, "speed2_max": hi,
            "speed_s": t2 - t1}  # fmt: skip


def plot_partition(runs: list[dict[str, Any]], path: Path) -> Path:
    """The partition runs as stacked bars, seconds per GB of input by step, one bar per data set,
    budget and codec (the seed's timing breakdown)."""
    from offload.files import save_figure
    from offload.host.plots import pyplot

    plt = pyplot()
    steps = ("unpack_s", "split_s", "repack_s", "compress_s")
    labels = [f"{r['dataset']}\n{r['profile']}, {r['codec']}" for r in runs]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.55 * len(runs) + 2), 4.5))
    bottom = np.zeros(len(runs))
    for step in steps:
        v = np.array([r[step] / (r["bytes_in"] / 1e9) for r in runs])
        ax.bar(range(len(runs)), v, bottom=bottom, label=step.removesuffix("_s"))
        bottom += v
    ax.set_xticks(range(len(runs)))
    ax.set_xticklabels(labels, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("seconds per GB of input")
    ax.set_title("partition service: where the time goes")
    ax.legend()
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
    return path


if __name__ == "__main__":
    import sys

    print(json.dumps(_worker(json.loads(sys.argv[1]))))
