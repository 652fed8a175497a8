"""A log-structured merge tree of Arrow tables, the sift service of seed 003's particle flows
(slides 20 and 25): rows arrive in the producers' order (by position and time) and leave sorted
by the consumers' key (particle id, then time), queryable all the while.

* Rows go to a **memtable** (Arrow batches as they came). When it holds ``memtable_rows`` rows it
  is sorted by the key and frozen into an immutable **run** at level 0.
* A level holding ``fanout`` runs is **compacted**: its runs are merged into one run on the next
  level (size-tiered, as in Cassandra and RocksDB's universal compaction). A merge keeps the newest
  row of each key, so a key written twice reads as its last write.
* **Queries** read a snapshot (the memtable and the runs as they are when the query starts):
  :meth:`Lsm.get` looks keys up by binary search in each run, :meth:`Lsm.scan` filters every
  piece with an Arrow expression, and :meth:`Lsm.sorted` merges everything into the consumers'
  order.

Every row carries a sequence number (``_seq``, its arrival order) so that newest-wins holds across
the memtable, the runs and compactions. Thread-safe: one lock guards the structure; merging
happens outside readers' way (a reader holds a list of immutable tables).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

SEQ = "_seq"


@dataclass
class Stats:
    """What the tree did: rows in, flushes, compactions, and rows rewritten by compactions (the
    write amplification is ``(rows_in + rows_compacted) / rows_in``)."""

    rows_in: int = 0
    flushes: int = 0
    compactions: int = 0
    rows_compacted: int = 0
    duplicates_dropped: int = 0

    @property
    def write_amplification(self) -> float:
        return (self.rows_in + self.rows_compacted) / self.rows_in if self.rows_in else 0.0


@dataclass
class Lsm:
    """An LSM tree over tables of ``schema``, sorted by ``key`` (column names, most significant
    first). ``memtable_rows``: rows buffered before a flush; ``fanout``: runs per level before
    they are compacted into one on the next level."""

    schema: pa.Schema
    key: tuple[str, ...] = ("id", "t")
    memtable_rows: int = 1 << 16
    fanout: int = 4
    stats: Stats = field(default_factory=Stats)

    def __post_init__(self) -> None:
        missing = [k for k in self.key if k not in self.schema.names]
        if missing or not self.key:
            raise ValueError(f"sort key {list(self.key)} is not in the schema {self.schema.names}")
        if self.memtable_rows < 1 or self.fanout < 2:
            raise ValueError(f"need memtable_rows >= 1, fanout >= 2; got {self.memtable_rows}, {self.fanout}")
        self._lock = threading.Lock()
        self._memtable: list[pa.RecordBatch] = []
        self._memtable_len = 0
        self._levels: list[list[pa.Table]] = []
        self._seq = 0
        self._stored = self.schema.append(pa.field(SEQ, pa.int64()))

    # ------------------------------------------------------------------------------ writing

    def put(self, data: pa.Table | pa.RecordBatch) -> None:
        """Adds rows; flushes and compacts as the memtable and the levels fill."""
        if data.schema.remove_metadata() != self.schema.remove_metadata():
            raise ValueError(f"rows of schema {data.schema.names} do not fit the tree's {self.schema.names}")
        batches = data.to_batches() if isinstance(data, pa.Table) else [data]
        with self._lock:
            for b in batches:
                if not b.num_rows:
                    continue
                seq = pa.array(np.arange(self._seq, self._seq + b.num_rows, dtype=np.int64))
                self._seq += b.num_rows
                self._memtable.append(pa.RecordBatch.from_arrays([*b.columns, seq], schema=self._stored))
                self._memtable_len += b.num_rows
                self.stats.rows_in += b.num_rows
                if self._memtable_len >= self.memtable_rows:
                    self._flush()

    def flush(self) -> None:
        """Freezes the memtable into a run now (a no-op when it is empty)."""
        with self._lock:
            self._flush()

    def _flush(self) -> None:
        if not self._memtable:
            return
        run = self._merge([pa.Table.from_batches(self._memtable, schema=self._stored)], writing=True)
        self._memtable, self._memtable_len = [], 0
        self.stats.flushes += 1
        self._add_run(0, run)

    def _add_run(self, level: int, run: pa.Table) -> None:
        while len(self._levels) <= level:
            self._levels.append([])
        self._levels[level].append(run)
        if len(self._levels[level]) >= self.fanout:
            runs, self._levels[level] = self._levels[level], []
            merged = self._merge(runs, writing=True)
            self.stats.compactions += 1
            self.stats.rows_compacted += merged.num_rows
            self._add_run(level + 1, merged)

    def _merge(self, tables: Sequence[pa.Table], writing: bool = False) -> pa.Table:
        """One sorted run of ``tables``: sorted by the key, the newest row of each key kept.
        ``writing``: a flush or a compaction (under the lock), whose dropped rows are counted."""
        t = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
        order = [(k, "ascending") for k in self.key] + [(SEQ, "descending")]
        t = t.take(pc.sort_indices(t, sort_keys=order))
        keep = _first_of_each_key(t, self.key)
        if keep is not None:
            if writing:
                self.stats.duplicates_dropped += t.num_rows - int(np.count_nonzero(keep))
            t = t.filter(pa.array(keep))
        return t.combine_chunks()

    # ------------------------------------------------------------------------------ reading

    def _pieces(self) -> tuple[pa.Table | None, list[pa.Table]]:
        """The memtable as a table (None when empty) and every run, newest first, as they are now."""
        with self._lock:
            mem = pa.Table.from_batches(self._memtable, schema=self._stored) if self._memtable else None
            runs = [r for level in self._levels for r in reversed(level)]
        return mem, runs

    def snapshot(self) -> list[pa.Table]:
        """The tree's pieces as they are now: the memtable (unsorted) and every run."""
        mem, runs = self._pieces()
        return ([mem] if mem is not None else []) + runs

    def scan(self, where: pc.Expression | None = None) -> pa.Table:
        """Every live row (each key's newest) matching ``where``, all of them without it, sorted
        by the key. Newest-wins comes before the filter, so an old row never shows through."""
        live = self.sorted()
        return live if where is None else live.filter(where)

    def sorted(self) -> pa.Table:
        """Every live row in the consumers' order (by the key)."""
        pieces = self.snapshot()
        if not pieces:
            return self.schema.empty_table()
        return self._merge(pieces).drop_columns([SEQ])

    def get(self, key_values: dict[str, object]) -> pa.Table:
        """The live rows whose leading key columns equal ``key_values`` (e.g. ``{"id": 7}``: every
        time step of particle 7), sorted: a binary search in each run, a filter in the memtable."""
        names = list(key_values)
        if not names or names != list(self.key[: len(names)]):
            raise ValueError(f"look up by a prefix of the key {list(self.key)}, got {names}")
        mem, runs = self._pieces()
        found = [_prefix_range(r, key_values) for r in runs]
        if mem is not None:
            found.append(mem.filter(_equals(key_values)))
        if not found:
            return self.schema.empty_table()
        return self._merge(found).drop_columns([SEQ])

    def levels(self) -> list[list[int]]:
        """Rows per run, level by level (what ``offload flows`` shows of the tree)."""
        with self._lock:
            return [[r.num_rows for r in level] for level in self._levels]

    def __len__(self) -> int:
        """Rows stored, duplicates not yet compacted away included."""
        with self._lock:
            return self._memtable_len + sum(r.num_rows for level in self._levels for r in level)


def _first_of_each_key(t: pa.Table, key: Sequence[str]) -> np.ndarray | None:
    """For a table sorted by ``key``: True where a row starts a new key (None when all do)."""
    if t.num_rows < 2:
        return None
    new = np.zeros(t.num_rows, dtype=bool)
    new[0] = True
    for k in key:
        col = t.column(k).to_numpy()
        new[1:] |= col[1:] != col[:-1]
    return None if new.all() else new


def _prefix_range(run: pa.Table, key_values: dict[str, object]) -> pa.Table:
    """The rows of a sorted run whose leading key columns equal ``key_values``."""
    lo, hi = 0, run.num_rows
    for name, value in key_values.items():
        col = run.column(name).to_numpy()[lo:hi]
        a, b = np.searchsorted(col, value, "left"), np.searchsorted(col, value, "right")
        lo, hi = lo + int(a), lo + int(b)
    return run.slice(lo, hi - lo)


def _equals(key_values: dict[str, object]) -> pc.Expression:
    expr = None
    for name, value in key_values.items():
        e = pc.field(name) == value
        expr = e if expr is None else expr & e
    assert expr is not None
    return expr
