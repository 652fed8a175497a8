"""Column statistics kept with each data set and updated as data is appended (Apache
DataSketches): per column a KLL quantile sketch (numbers), an HLL distinct count (every value
that can be compared for equality: integers, strings, dates, timestamps, decimals, binaries,
dictionary-encoded values; floating-point values are taken as distinct), the frequent items
(the same, as strings) and the null count, for every Arrow type a Parquet file can hold; nested
columns (lists, structs, maps) are kept with their null count only, and their estimates are
unknown (``ColumnStats.estimable``); per data set a uniform row sample, which is what
catches correlated columns (the independence assumption is the known failure: the seed's design
note has 9.1% estimated against 0% or 28% true).

KLL's k defaults to 2000: a normalized rank error near 0.15% (99% confidence), so a range
selectivity is off by about that much of the table at most, at ~30 KB per column.
"""

from __future__ import annotations

import math
import time
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


def _numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)


def _discrete(t: pa.DataType) -> bool:
    t_ = pa.types
    return t_.is_integer(t) or t_.is_boolean(t) or t_.is_string(t) or t_.is_large_string(t)


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


@dataclass
class ColumnStats:
    """Sketches of one column. ``kll`` only for numbers, ``frequent`` only for integers,
    booleans and strings (as strings)."""

    name: str
    type: pa.DataType
    nulls: int = 0
    kll: kll_doubles_sketch | None = None
    hll: hll_sketch | None = None
    frequent: frequent_strings_sketch | None = None
    width_bytes: float = 8.0
    rows: int = 0

    def __post_init__(self) -> None:
        t = _values_type(self.type)
        if _numeric(t) and self.kll is None:
            self.kll = kll_doubles_sketch(KLL_K)
        if not pa.types.is_floating(t) and not _nested(t) and self.hll is None:
            self.hll = hll_sketch(HLL_LG_K, tgt_hll_type.HLL_8)
        if not _numeric(t) or _discrete(t):
            if not _nested(t) and self.frequent is None:
                self.frequent = frequent_strings_sketch(FREQ_LG_MAX_K)

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
            values = pc.cast(valid, pa.float64()).to_numpy(zero_copy_only=False)
            self.kll.update(np.array(values, dtype=np.float64))  # a writable copy: the sketch insists
        if self.hll is not None:
            values, counts = _unique_counts(valid)
            for v in values:  # distinct values only: the HLL has no bulk update
                self.hll.update(_sketch_key(v))
            if self.frequent is not None:
                for v, c in zip(values, counts, strict=True):
                    self.frequent.update(str(v), int(c))
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

    def frequency(self, value: Any) -> float | None:
        """Estimated count of ``value`` where it is a frequent item, else None."""
        if self.frequent is None:
            return None
        items = self.frequent.get_frequent_items(frequent_items_error_type.NO_FALSE_POSITIVES)
        for item, est, _lo, _hi in items:
            if item == str(value):
                return float(est)
        return None

    def frequent_total(self) -> tuple[float, int]:
        """(count of all frequent items, how many there are)."""
        if self.frequent is None:
            return 0.0, 0
        items = self.frequent.get_frequent_items(frequent_items_error_type.NO_FALSE_POSITIVES)
        return float(sum(i[1] for i in items)), len(items)


def _unique_counts(a: pa.ChunkedArray | pa.Array) -> tuple[list[Any], np.ndarray]:
    vc = pc.value_counts(a)
    values = vc.field("values").to_pylist()
    if a.type == pa.float64() or pa.types.is_floating(a.type):
        values = [float(v) for v in values]
    return values, np.asarray(vc.field("counts"))


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
        counts = np.asarray(pc.value_counts(pc.drop_null(self.sample.column(name))).field("counts"))
        n = int(counts.sum())
        f1 = int((counts == 1).sum())
        if n == 0 or f1 >= 0.95 * n:
            return c.distinct
        return float(min(c.distinct, math.sqrt(self.rows / n) * f1 + (len(counts) - f1)))

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
