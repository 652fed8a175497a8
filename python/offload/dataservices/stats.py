"""Column statistics kept with each data set and updated as data is appended (Apache
DataSketches and a count sketch of our own): per column a KLL quantile sketch (numbers, and the
ordered values that are numbers underneath: dates as days, timestamps, times and durations as
ticks of their unit, decimals as their value), an HLL distinct count, the frequent items and a
count sketch (every value that can be compared for equality: integers, strings, dates,
timestamps, decimals, binaries, dictionary-encoded values by value; floating-point values are
taken as distinct) and the null count, for every Arrow type a Parquet file can hold; nested
columns (lists, structs, maps) are kept with their null count only, and their estimates are
unknown (``ColumnStats.estimable``); per data set a uniform row sample, which is what catches
correlated columns (the independence assumption is the known failure: the seed's design note
has 9.1% estimated against 0% or 28% true).

KLL's k defaults to 2000: a normalized rank error near 0.15% (99% confidence), so a range
selectivity is off by about that much of the table at most, at ~30 KB per column.

**Equality on a skewed column** (:class:`CountSketch`). Frequent items price the heavy keys
only; the tail was priced at its average, 3.75x off on a light Zipf key. The count sketch
prices any key, heavy, light or absent:

* the heavy keys are kept out of the sketch, counted exactly (Roy et al.'s augmented sketch,
  SIGMOD 2016): each appended part's most frequent keys (up to 256 of them, each at least
  1/4096 of the part's rows) join a set of at most 1,024 keys whose counts are exact from then
  on, so the sketch holds the tail only and a light key no longer shares a cell with a heavy
  one;
* the tail goes into a count-min sketch (Cormode & Muthukrishnan 2005) of 4 rows whose width
  scales with the rows, the next power of two over twice them, from 4,096 to 131,072 cells
  (int32 counters, int64 once a cell could pass 2^31 rows). As parts are appended and the rows
  call for a wider sketch, a wider one starts and the older ones keep what they counted (a
  key's estimate is the sum over them): doubling one sketch by copying its cells would put
  every old key in two cells, a ghost in one, and an absent key would meet them. Widths
  double, so all of them together take at most twice the widest: 4 MiB;
* a key is read as the minimum of its 4 cells (count-min) while the tail is sparse, fewer
  distinct tail keys than half the width (counted from the empty cells: linear counting), where
  a light key most likely has a cell of its own: an absent key then reads 0. Where the tail is
  denser (only where the width is capped: over ~65,000 distinct tail keys in the widest
  sketch, 3.1M user ids in 6.2M rows in the benchmark), every cell holds the sum of many small
  counts and the minimum is biased up by about the mean noise: the key is read as
  the median over its cells of the cell less the mean noise of a cell (count-mean-min, Deng &
  Rafiei 2007), at least the tail's average (the HLL's distinct count less the heavy keys: a
  light key the noise hides is priced as before, not at 0) and at most the minimum. Keys
  whose estimates are added up (an IN list) take the mean instead, unclipped: unbiased, so
  that a long list's sum is (clipping at 0 and the floor would bias every absent key up);
* at load, vectorized: the keys are the part's distinct values (value counts, which the other
  sketches need anyway), hashed with numpy (integers and everything stored as integers by their
  value; strings and binaries by a polynomial hash over their bytes, computed with cumulative
  sums over the Arrow buffers), and each row of the sketch is one bincount over them.
  ``datasketches.count_min_sketch`` updates one item per Python call: at a million distinct
  keys, 0.48 s (integers) and 1.36 s (strings) against 0.07 s and 0.23 s here (warm; the first
  call in a process pays ~0.3-0.9 s more for fresh memory), and it has no room for the heavy
  keys. At load the count sketches cost 0.063 s per million rows and column over the
  cardinality benchmark's tables (6.2M rows; 2 MiB each).
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from datasketches import (
    frequent_items_error_type,
    frequent_strings_sketch,
    hll_sketch,
    kll_doubles_sketch,
    tgt_hll_type,
)

KLL_K = 2000
HLL_LG_K = 14
FREQ_LG_MAX_K = 10
SAMPLE_ROWS = 1 << 16
COUNT_DEPTH = 4
KEPT = 1024
_NONE = object()
"""What a data set's statistics keep of what estimates derived from its sample, at most
(:meth:`TableStats.kept`: distinct counts, spaced subsets, conditions run on the sample)."""
COUNT_MIN_WIDTH = 1 << 12
COUNT_MAX_WIDTH = 1 << 17  # 4 rows x 2^17 cells x 4 B = 2 MiB (int32; int64 past 2^31 rows: 4 MiB)
HEAVY_KEYS = 1024
HEAVY_PER_PART = 256
HEAVY_SHARE = 1 / 4096
_UNITS = {"s": 0, "ms": 3, "us": 6, "ns": 9}
_EPOCH = dt.date(1970, 1, 1)


@dataclass(frozen=True)
class Ticks:
    """A timestamp or a time of day as it comes in a plan: ``value`` units of 10^-``digits``
    seconds (Substrait's precision_timestamp and precision_time)."""

    value: int
    digits: int


def _temporal(t: pa.DataType) -> bool:
    """Types stored as integer ticks: dates, timestamps, times, durations."""
    return pa.types.is_temporal(t) and not pa.types.is_interval(t)


def _ordered(t: pa.DataType) -> bool:
    """Types whose values are numbers underneath, which the KLL sketch takes."""
    t_ = pa.types
    return t_.is_integer(t) or t_.is_floating(t) or t_.is_boolean(t) or t_.is_decimal(t) or _temporal(t)


def _textual(t: pa.DataType) -> bool:
    """Strings and binaries of every layout: hashed by their bytes."""
    t_ = pa.types
    return (t_.is_string(t) or t_.is_large_string(t) or t_.is_binary(t) or t_.is_large_binary(t)
            or t_.is_fixed_size_binary(t) or t_.is_string_view(t) or t_.is_binary_view(t))  # fmt: skip


def variable_width(t: pa.DataType) -> bool:
    """Strings and binaries of variable length (dictionary-encoded ones by their values): what
    costs per byte, not per row, to serialize, send and receive."""
    v = _values_type(t)
    return _textual(v) and not pa.types.is_fixed_size_binary(v)


def bit_width(t: pa.DataType) -> int:
    """``t.bit_width``, 0 where the type has none (strings, nested types)."""
    try:
        return t.bit_width
    except ValueError:
        return 0


def fixed_width(t: pa.DataType) -> float:
    """Bytes a value where ``t`` is a fixed-width type (a bool an eighth), else 0 (strings,
    binaries, nested types, dictionaries of strings: their bytes are not one width a row)."""
    bits = 0 if variable_width(t) else bit_width(t)
    return bits / 8 if bits > 0 else 0.0


def _nested(t: pa.DataType) -> bool:
    """Lists, structs, maps, unions: no equality sketch (nor a value_counts kernel) for them."""
    return pa.types.is_nested(t) or pa.types.is_null(t)


def _values_type(t: pa.DataType) -> pa.DataType:
    """The type of a column's values: a dictionary-encoded column's value type."""
    return t.value_type if pa.types.is_dictionary(t) else t


def _decoded(a: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    """A dictionary-encoded column as its plain values (the sketches see values, not indices)."""
    if not pa.types.is_dictionary(a.type):
        return a
    if isinstance(a, pa.ChunkedArray):
        return pa.chunked_array([c.dictionary_decode() for c in a.chunks], a.type.value_type)
    return a.dictionary_decode()


def _sketch_key(v: Any) -> int | str:
    """What the HLL takes for a value: integers and strings as they are, anything else (a date,
    a timestamp, a decimal, bytes) by its text, which is also how the frequent items name it."""
    return v if isinstance(v, int | str) else str(v)


def _numbers(a: pa.Array) -> np.ndarray:
    """A column's values (no nulls) as the KLL takes them: numbers as they are, dates in days,
    timestamps, times and durations in ticks of their unit, decimals by value."""
    if isinstance(a, pa.ChunkedArray):
        a = a.combine_chunks()
    if _temporal(a.type):
        return np.asarray(_ints(a), dtype=np.float64)
    return np.array(pc.cast(a, pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float64)


# ----------------------------------------------------------------------------- hashing

_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_ROW_SEEDS = np.array([0x243F6A8885A308D3, 0x13198A2E03707344, 0xA4093822299F31D0, 0x082EFA98EC4E6C89],
                      dtype=np.uint64)  # fmt: skip
_BYTE_BASE = np.uint64(0x100000001B3)


def _mix(h: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer over an array (uint64 arithmetic wraps, as it should)."""
    h = h ^ (h >> np.uint64(30))
    h = h * _M1
    h = h ^ (h >> np.uint64(27))
    h = h * _M2
    return h ^ (h >> np.uint64(31))


def _ints(a: pa.Array) -> np.ndarray:
    """Values stored as integers (no nulls) as int64: integers, booleans, dates, timestamps,
    times and durations as they are stored; decimals by their unscaled words, folded."""
    t = a.type
    if pa.types.is_decimal(t):
        words = t.byte_width // 8
        raw = np.frombuffer(a.buffers()[1], dtype=np.int64)
        w = raw[a.offset * words : (a.offset + len(a)) * words].reshape(len(a), words)
        out = w[:, 0].copy()
        for i in range(1, words):
            out ^= (w[:, i].view(np.uint64) * _ROW_SEEDS[i % 4]).view(np.int64)
        return out
    if pa.types.is_boolean(t):
        return np.asarray(pc.cast(a, pa.int64()).to_numpy(zero_copy_only=False), dtype=np.int64)
    if _temporal(t):
        storage = pa.int32() if t.bit_width == 32 else pa.int64()
        return np.asarray(a.view(storage).to_numpy(zero_copy_only=False), dtype=np.int64)
    if t == pa.uint64():
        return np.asarray(a.to_numpy(zero_copy_only=False)).view(np.int64)
    return np.asarray(pc.cast(a, pa.int64()).to_numpy(zero_copy_only=False), dtype=np.int64)


def _hash_bytes(a: pa.Array) -> np.ndarray:
    """A stable 64-bit hash of each string or binary (no nulls): a polynomial over its bytes
    (cumulative sums over the Arrow buffers, no Python loop), then mixed with its length."""
    a = pc.cast(a, pa.large_binary())
    if isinstance(a, pa.ChunkedArray):
        a = a.combine_chunks()
    n = len(a)
    offsets = np.frombuffer(a.buffers()[1], dtype=np.int64)[a.offset : a.offset + n + 1]
    lens = np.diff(offsets)
    start, end = int(offsets[0]), int(offsets[-1])
    data = a.buffers()[2]
    raw = np.frombuffer(data, dtype=np.uint8)[start:end] if data is not None else np.zeros(0, np.uint8)
    longest = int(lens.max()) if n else 0
    powers = np.cumprod(np.full(max(1, longest), _BYTE_BASE, dtype=np.uint64))
    # each byte's position in its value: its index less its value's start, a step function
    starts = (offsets[:-1] - start)[lens > 0]
    step = np.zeros(end - start, dtype=np.int64)
    step[starts[1:]] = np.diff(starts)
    pos = np.arange(end - start, dtype=np.int64) - np.cumsum(step)
    sums = np.concatenate([[np.uint64(0)], np.cumsum(raw.astype(np.uint64) * powers[pos], dtype=np.uint64)])
    rel = offsets - start
    poly = sums[rel[1:]] - sums[rel[:-1]]
    return _mix(poly ^ _mix(lens.astype(np.uint64) + _GOLDEN))


def hashes(a: pa.Array) -> np.ndarray:
    """A stable 64-bit hash of each value of ``a`` (no nulls, plain values): equal values of one
    type hash alike, whatever the chunking; what the count sketch keys on."""
    if isinstance(a, pa.ChunkedArray):
        a = a.combine_chunks()
    if _textual(a.type):
        return _hash_bytes(a)
    return _mix(_ints(a).view(np.uint64) + _GOLDEN)


def _row_cells(h: np.ndarray, width: int) -> np.ndarray:
    """(COUNT_DEPTH, len(h)): each key's cell in each row of a sketch ``width`` wide."""
    mask = np.uint64(width - 1)
    return np.stack([(_mix(h ^ s) & mask).astype(np.int64) for s in _ROW_SEEDS[:COUNT_DEPTH]])


@dataclass
class CountSketch:
    """Counts of a column's values by key hash: the heavy keys exactly, the tail in count-min
    sketches (see the module's text). Mergeable across appended parts; at most 4 MiB."""

    tables: list[np.ndarray] = field(default_factory=list)
    """(COUNT_DEPTH, width) each, of doubling widths: the tail's counts of the parts counted
    while each was the newest; int32 until a cell could pass 2^31 - 1, then int64."""
    noise: list[float] = field(default_factory=list)
    """Per table, the expected count in a cell from other keys: its tail rows over its width."""
    heavy: dict[int, int] = field(default_factory=dict)
    """Key hash -> exact count since the key became heavy."""
    rows: int = 0
    seconds: float = 0.0
    _sparse: list[bool] | None = field(default=None, repr=False)

    @property
    def width(self) -> int:
        """The newest table's width."""
        return self.tables[-1].shape[1] if self.tables else 0

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.tables) + 16 * len(self.heavy)

    def update(self, h: np.ndarray, counts: np.ndarray) -> None:
        """Folds a part's distinct keys ``h`` (hashes) and their ``counts`` in."""
        t0 = time.perf_counter()
        counts = np.asarray(counts, dtype=np.int64)
        total = int(counts.sum())
        self._grow(total)
        heavy = self._take_heavy(h, counts, total)
        tail_h, tail_c = h[~heavy], counts[~heavy]
        cells, width = self.tables[-1], self.width
        for row, idx in enumerate(_row_cells(tail_h, width)):
            cells[row] += np.bincount(idx, weights=tail_c, minlength=width).astype(cells.dtype)
        self.noise[-1] += float(tail_c.sum()) / width
        self.rows += total
        self._sparse = None
        self.seconds += time.perf_counter() - t0

    def _grow(self, rows: int) -> None:
        """Starts a wider table where the rows seen, these included, call for one: twice them, a
        power of two within bounds. The older tables keep their parts: copying them into the
        wider one would spread each old key over two cells (a ghost in the second)."""
        want = 1 << max(0, math.ceil(math.log2(max(1, 2 * (self.rows + rows)))))
        want = min(COUNT_MAX_WIDTH, max(COUNT_MIN_WIDTH, want))
        if want > self.width:
            self.tables.append(np.zeros((COUNT_DEPTH, want), dtype=np.int32))
            self.noise.append(0.0)
        if self.tables[-1].dtype == np.int32 and self.rows + rows >= 2**31 - 1:
            self.tables[-1] = self.tables[-1].astype(np.int64)

    def _take_heavy(self, h: np.ndarray, counts: np.ndarray, total: int) -> np.ndarray:
        """Which of the part's keys are counted exactly: those already heavy, and the part's
        most frequent ones while there is room. Returns their mask."""
        known = np.fromiter(self.heavy.keys(), dtype=np.uint64, count=len(self.heavy))
        mask = np.isin(h, known) if len(known) else np.zeros(len(h), dtype=bool)
        room = min(HEAVY_PER_PART, HEAVY_KEYS - len(self.heavy))
        if room > 0 and len(h):
            top = min(len(h), room + int(mask.sum()))
            order = np.argpartition(-counts, top - 1)[:top]
            order = order[np.argsort(-counts[order], kind="stable")]
            floor = max(2, total * HEAVY_SHARE)
            new = [i for i in order if not mask[i] and counts[i] >= floor][:room]
            mask[new] = True
        for k, c in zip(h[mask].tolist(), counts[mask].tolist(), strict=True):
            self.heavy[k] = self.heavy.get(k, 0) + c
        return mask

    def counts(self, h: np.ndarray, distinct: float | None = None, summed: bool = False) -> np.ndarray:
        """Estimated rows of each key hash in ``h`` (float): its exact count if heavy, plus each
        table's estimate; ``distinct``: the column's distinct count, for the tail's average
        where a table is too dense to tell a key from noise. ``summed``: the estimates are to
        be added up (an IN list): a dense table gives each key its mean cell less the noise,
        unclipped, which is unbiased (a key the noise hides is as likely below 0 as above its
        count), so that their sum is too."""
        h = np.asarray(h, dtype=np.uint64)
        out = np.array([self.heavy.get(k, 0) for k in h.tolist()], dtype=np.float64)
        tail = self.rows - sum(self.heavy.values())
        for cells, noise, sparse in zip(self.tables, self.noise, self.sparse_tables, strict=True):
            got = np.take_along_axis(cells, _row_cells(h, cells.shape[1]), axis=1).astype(np.float64)
            low = got.min(axis=0)
            if sparse:
                out += low
                continue
            if summed:
                out += np.mean(got - noise, axis=0)
                continue
            est = np.median(got - noise, axis=0)
            if distinct is not None:  # dense: a key the noise hides is taken at the tail's average
                share = noise * cells.shape[1] / max(1.0, tail)  # this table's part of the tail
                est = np.maximum(est, share * tail / max(1.0, distinct - len(self.heavy)))
            out += np.clip(est, 0.0, low)
        return out

    @property
    def sparse(self) -> bool:
        """Whether the newest table is sparse (:attr:`sparse_tables`)."""
        return not self.tables or self.sparse_tables[-1]

    @property
    def sparse_tables(self) -> list[bool]:
        """Per table, whether it has fewer distinct keys than half its width (linear counting
        over its first row's empty cells), so that a light key most likely has a cell of its own."""
        if self._sparse is None:
            self._sparse = []
            for cells in self.tables:
                w = cells.shape[1]
                empty = max(1, int(np.count_nonzero(cells[0] == 0)))
                self._sparse.append(-w * math.log(empty / w) <= w / 2)
        return self._sparse


@dataclass
class ColumnStats:
    """Sketches of one column. ``kll`` for ordered values (numbers, dates, timestamps, times,
    durations, decimals); ``hll``, ``frequent`` (as strings) and ``count`` for every value that
    compares for equality, floating-point ones aside."""

    name: str
    type: pa.DataType
    nulls: int = 0
    kll: kll_doubles_sketch | None = None
    hll: hll_sketch | None = None
    frequent: frequent_strings_sketch | None = None
    count: CountSketch | None = None
    width_bytes: float = 8.0
    rows: int = 0
    _items: list[Any] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        t = _values_type(self.type)
        if _ordered(t) and self.kll is None:
            self.kll = kll_doubles_sketch(KLL_K)
        if not pa.types.is_floating(t) and not _nested(t):
            if self.hll is None:
                self.hll = hll_sketch(HLL_LG_K, tgt_hll_type.HLL_8)
            if self.frequent is None:
                self.frequent = frequent_strings_sketch(FREQ_LG_MAX_K)
            if self.count is None:
                self.count = CountSketch()

    @property
    def estimable(self) -> bool:
        """Whether the column's values are sketched: False for nested columns (lists, structs,
        maps), which are kept, with their null count, but whose estimates are unknown."""
        return not _nested(_values_type(self.type))

    def update(self, col: pa.ChunkedArray | pa.Array, rows_before: int) -> None:
        self.nulls += col.null_count
        valid = _decoded(pc.drop_null(col))
        if len(valid) == 0 or not self.estimable:
            self._widen(valid, len(col), rows_before)
            return
        if self.kll is not None:
            self.kll.update(_numbers(valid))
        if self.hll is not None:
            vc = pc.value_counts(valid)
            counts = np.asarray(vc.field("counts"))
            if self.count is not None:
                self.count.update(hashes(vc.field("values")), counts)
            values = vc.field("values").to_pylist()
            for v in values:  # distinct values only: the HLL has no bulk update
                self.hll.update(_sketch_key(v))
            if self.frequent is not None:
                for v, c in zip(values, counts, strict=True):
                    self.frequent.update(str(v), int(c))
                self._items = None
        self._widen(valid, len(col), rows_before)

    def _widen(self, valid: pa.ChunkedArray | pa.Array, rows: int, rows_before: int) -> None:
        """Folds the appended rows' mean width into the column's and counts them."""
        w = _width(valid) if len(valid) else self.width_bytes
        n = rows_before + rows
        self.width_bytes = (self.width_bytes * rows_before + w * rows) / max(1, n)
        self.rows = n

    @property
    def distinct(self) -> float:
        """HLL's estimate. Floating-point columns are not sketched (the HLL has no bulk update
        and would cost a second per million rows): :meth:`TableStats.distinct` estimates them
        from the sample."""
        if self.hll is None:
            return float(max(1, self.rows - self.nulls))
        return float(self.hll.get_estimate())

    def domain(self, v: Any) -> Any:
        """A plan's literal (int, float, bool, str, bytes, Decimal, date, :class:`Ticks`) as a
        value of this column's domain, the one its sketches and :meth:`number` use: numbers as
        they are, dates, timestamps, times and durations as integer ticks of the column's unit
        (a float where the literal falls between two ticks), decimals as Decimal; None where the
        literal does not compare with the column."""
        t = _values_type(self.type)
        if v is None or (isinstance(v, bool) and not (pa.types.is_boolean(t) or pa.types.is_integer(t))):
            return None
        if _temporal(t):
            return _ticks(v, t)
        if pa.types.is_decimal(t) or pa.types.is_integer(t) or pa.types.is_floating(t):
            if isinstance(v, decimal.Decimal | float | int):
                if pa.types.is_decimal(t):
                    return decimal.Decimal(repr(v)) if isinstance(v, float) else decimal.Decimal(v)
                if pa.types.is_floating(t):
                    return float(v)
                return int(v) if v == int(v) else float(v)
            return None
        if pa.types.is_boolean(t):
            return bool(v) if isinstance(v, bool | int) else None
        if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
            return v if isinstance(v, str) else None
        if _textual(t):
            return v.encode() if isinstance(v, str) else v if isinstance(v, bytes) else None
        return None

    @staticmethod
    def number(v: Any) -> float | None:
        """A domain value (:meth:`domain`) on the KLL's scale; None for strings and binaries."""
        return None if isinstance(v, str | bytes) else float(v)

    def counts(self, values: list[Any], summed: bool = False) -> np.ndarray | None:
        """Estimated rows of each domain value (count sketch); None where the column has none.
        A value the column's type cannot hold (a timestamp between two ticks, a decimal with more
        digits than its scale) is counted 0. ``summed``: see :meth:`CountSketch.counts`."""
        if self.count is None:
            return None
        t = _values_type(self.type)
        try:
            return self.count.counts(hashes(pa.array(values, t)), self.distinct, summed)
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            out = np.zeros(len(values))
            for i, v in enumerate(values):
                try:
                    out[i] = self.count.counts(hashes(pa.array([v], t)), self.distinct, summed)[0]
                except (pa.ArrowException, TypeError, ValueError, OverflowError):
                    pass  # not a value of this column: none of its rows
            return out

    def frequency(self, value: Any) -> float | None:
        """Estimated count of ``value`` where it is a frequent item, else None."""
        if self.frequent is None:
            return None
        for item, est, _lo, _hi in self._frequent_items():
            if item == str(value):
                return float(est)
        return None

    def frequent_total(self) -> tuple[float, int]:
        """(count of all frequent items, how many there are)."""
        if self.frequent is None:
            return 0.0, 0
        items = self._frequent_items()
        return float(sum(i[1] for i in items)), len(items)

    def _frequent_items(self) -> list[Any]:
        if self._items is None:
            assert self.frequent is not None
            self._items = self.frequent.get_frequent_items(frequent_items_error_type.NO_FALSE_POSITIVES)
        return self._items


def _ticks(v: Any, t: pa.DataType) -> int | float | None:
    """A date, :class:`Ticks` or integer as ticks of temporal type ``t`` (dates: days for
    date32, milliseconds for date64)."""
    if pa.types.is_date32(t):
        if isinstance(v, dt.date) and not isinstance(v, dt.datetime):
            return (v - _EPOCH).days
        return v if isinstance(v, int) and not isinstance(v, bool) else None
    digits = 3 if pa.types.is_date64(t) else _UNITS.get(getattr(t, "unit", ""), None)
    if digits is None:
        return None
    if isinstance(v, dt.date) and not isinstance(v, dt.datetime):
        v = Ticks((v - _EPOCH).days * 86400, 0)
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    if not isinstance(v, Ticks):
        return None
    if digits >= v.digits:
        return v.value * 10 ** (digits - v.digits)
    q, r = divmod(v.value, 10 ** (v.digits - digits))
    return q if r == 0 else v.value / 10 ** (v.digits - digits)


def _width(a: pa.ChunkedArray | pa.Array) -> float:
    """Mean bytes per value: text and binaries by their lengths (plus an offset), fixed-width
    types by their width, anything else (nested) by its buffers over its rows."""
    if pa.types.is_string(a.type) or pa.types.is_large_string(a.type):
        return float(pc.mean(pc.utf8_length(a)).as_py() or 0.0) + 4.0
    if pa.types.is_binary(a.type) or pa.types.is_large_binary(a.type):
        return float(pc.mean(pc.binary_length(a)).as_py() or 0.0) + 4.0
    try:
        return a.type.bit_width / 8 if a.type.bit_width else 8.0
    except ValueError:  # not fixed-width
        return a.nbytes / max(1, len(a))


@dataclass
class TableStats:
    """Statistics of a data set: rows, per-column sketches and a uniform sample of rows."""

    schema: pa.Schema
    rows: int = 0
    columns: dict[str, ColumnStats] = field(default_factory=dict)
    sample: pa.Table | None = None
    sample_rows: int = SAMPLE_ROWS
    seconds: float = 0.0
    _rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0), repr=False)
    _derived: dict[tuple[str, Any], Any] = field(default_factory=dict, repr=False, compare=False)
    """What estimates derive from the sample (distinct counts, spaced subsets, conditions run on
    it), kept until the next append (:meth:`kept`): a decision is not to recount the sample for
    each query."""

    def __post_init__(self) -> None:
        for f in self.schema:
            self.columns.setdefault(f.name, ColumnStats(f.name, f.type))
        if self.sample is None:
            self.sample = self.schema.empty_table()

    @classmethod
    def of(cls, table: pa.Table, sample_rows: int = SAMPLE_ROWS, seed: int = 0) -> TableStats:
        s = cls(table.schema, sample_rows=sample_rows, _rng=np.random.default_rng(seed))
        s.append(table)
        return s

    def append(self, table: pa.Table) -> None:
        """Folds ``table`` (rows appended to the data set) into the statistics."""
        if table.schema.names != self.schema.names:
            raise ValueError(f"appended columns {table.schema.names} differ from {self.schema.names}")
        t0 = time.perf_counter()
        for name in self.schema.names:
            self.columns[name].update(table.column(name), self.rows)
        self.sample = self._merge_sample(table)
        self.rows += table.num_rows
        self._derived = {}
        self.seconds += time.perf_counter() - t0

    def _merge_sample(self, new: pa.Table) -> pa.Table:
        """A uniform sample of all rows so far: how many come from the old rows is hypergeometric,
        and a uniform subset of a uniform sample is uniform."""
        assert self.sample is not None
        total = self.rows + new.num_rows
        n = min(self.sample_rows, total)
        if not self.rows or not new.num_rows:
            from_old = 0 if not self.rows else n
        else:
            from_old = int(self._rng.hypergeometric(self.rows, new.num_rows, n))
        old_idx = self._rng.choice(self.sample.num_rows, size=from_old, replace=False)
        new_idx = self._rng.choice(new.num_rows, size=n - len(old_idx), replace=False)
        parts = [self.sample.take(pa.array(np.sort(old_idx))), new.take(pa.array(np.sort(new_idx)))]
        return pa.concat_tables(parts).combine_chunks()

    def distinct(self, name: str) -> float:
        """Distinct values of a column: its HLL, or for floating-point columns the GEE estimator
        over the sample (Charikar et al., PODS 2000: sqrt(N/n) f1 + sum of f_j for j >= 2, f_j the
        values seen j times), taken as all rows where nearly every sampled value is unique."""
        c = self.columns[name]
        if c.hll is not None or not c.estimable or self.sample is None or self.sample.num_rows == 0:
            return c.distinct
        sample = self.sample

        def gee() -> float:
            counts = np.asarray(pc.value_counts(pc.drop_null(sample.column(name))).field("counts"))
            n = int(counts.sum())
            f1 = int((counts == 1).sum())
            if n == 0 or f1 >= 0.95 * n:  # nearly all unique
                return c.distinct
            return float(min(c.distinct, math.sqrt(self.rows / n) * f1 + (len(counts) - f1)))

        return self.kept(("distinct", name), gee)

    def spaced(self, rows: int) -> pa.Table:
        """``rows`` evenly spaced rows of the sample (all of it where it has no more): a
        systematic sample of a uniform sample, which keeps the table's order out of it."""
        assert self.sample is not None
        if self.sample.num_rows <= rows:
            return self.sample
        sample = self.sample
        step = sample.num_rows / rows
        return self.kept(
            ("spaced", rows), lambda: sample.take(pa.array((np.arange(rows) * step).astype(np.int64)))
        )

    def kept(self, key: tuple[str, Any], make: Callable[[], Any]) -> Any:
        """``make()``, made once for ``key`` until the next append (the latest KEPT of them).
        Threads may race to make one; either result is right."""
        derived = self._derived
        value = derived.get(key, _NONE)
        if value is _NONE:
            value = make()
            while len(derived) >= KEPT:
                derived.pop(next(iter(derived)), None)
            derived[key] = value
        return value

    def describe(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "sample_rows": self.sample.num_rows if self.sample is not None else 0,
            "seconds": round(self.seconds, 4),
            "columns": {
                n: {
                    "distinct": round(self.distinct(n)) if c.estimable else None,  # None: unknown
                    "nulls": c.nulls,
                    "min": c.kll.get_min_value() if c.kll is not None and not c.kll.is_empty() else None,
                    "max": c.kll.get_max_value() if c.kll is not None and not c.kll.is_empty() else None,
                    "width_bytes": round(c.width_bytes, 2),
                }
                for n, c in self.columns.items()
            },
        }
