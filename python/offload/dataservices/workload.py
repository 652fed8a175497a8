"""Generated workloads: seeded random schemas (a fact table of every column type the node serves
and a small dimension table it joins on) and queries over them of every kind the decision meets
(filters on numbers, strings and dates, LIKE, string and heavy math functions, group-bys on
strings, integers and dates, joins, order by + limit, distinct, narrow and wide projections).

The time models are trained on some seeds and judged on others (benches/dataservices_generalize.py):
a schema is a :class:`SchemaSpec` (names, column kinds, their distributions), its data
:meth:`SchemaSpec.tables`, its queries :func:`queries`; all three depend on their seeds only.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

KINDS = ("id", "key", "int", "float", "amount", "category", "code", "text", "date", "timestamp", "flag")
"""Column kinds: ``id`` unique integers; ``key`` Zipf-skewed keys into the dimension table;
``int`` uniform integers; ``float`` uniform and ``amount`` log-normal reals; ``category``
low-cardinality strings (skewed); ``code`` high-cardinality codes (``AB-012345``); ``text``
words of varying length (10-300 bytes); ``date`` date32; ``timestamp`` microseconds; ``flag``
booleans."""
NUMERIC = ("int", "float", "amount")
STRINGS = ("category", "code", "text")
TEMPORAL = ("date", "timestamp")
SHAPES = ("wide", "narrow", "medium")
"""Fact table widths: ~30 columns, 4 (a key, a number, a string, a date) and ~10."""
_ARROW = {"id": pa.int64(), "key": pa.int64(), "int": pa.int64(), "float": pa.float64(),
          "amount": pa.float64(), "category": pa.string(), "code": pa.string(), "text": pa.string(),
          "date": pa.date32(), "timestamp": pa.timestamp("us"), "flag": pa.bool_()}  # fmt: skip
_SYLLABLES = tuple(c + v for c in "bdfgklmnprstvz" for v in "aeiou")
_EPOCH = dt.date(1970, 1, 1)


@dataclass(frozen=True)
class Column:
    """A generated column: its kind and distribution. Numbers and dates are uniform over
    [lo, hi) (dates in days, timestamps in seconds since 1970; ``amount``: log-normal of mean
    ``lo`` and sigma ``hi`` in logs); strings draw from ``values`` with ``weights`` (``code``:
    ``values`` are the prefixes, uniform; ``text``: the words); ``nulls``: the share of nulls."""

    name: str
    kind: str
    lo: float = 0.0
    hi: float = 1.0
    values: tuple[str, ...] = ()
    weights: tuple[float, ...] = ()
    nulls: float = 0.0

    @property
    def type(self) -> pa.DataType:
        return _ARROW[self.kind]

    def quantile(self, q: float) -> float:
        """The value below which a share ``q`` of the (non-null) values lie (numbers, dates)."""
        if self.kind == "amount":
            return math.exp(self.lo + self.hi * NormalDist().inv_cdf(min(max(q, 1e-9), 1 - 1e-9)))
        return self.lo + q * (self.hi - self.lo)


@dataclass(frozen=True)
class SchemaSpec:
    """A generated schema: fact table ``fact`` (``rows`` rows) joinable on ``fact_key`` with
    dimension table ``dim`` (``dim_rows`` rows, unique ``dim_key``)."""

    seed: int
    shape: str
    fact: str
    dim: str
    rows: int
    dim_rows: int
    columns: tuple[Column, ...]
    dim_columns: tuple[Column, ...]
    fact_key: str
    dim_key: str
    text_pool: tuple[str, ...] = field(default=(), repr=False)

    def schemas(self) -> dict[str, pa.Schema]:
        return {
            self.fact: pa.schema([(c.name, c.type) for c in self.columns]),
            self.dim: pa.schema([(c.name, c.type) for c in self.dim_columns]),
        }

    def tables(self) -> dict[str, pa.Table]:
        """Both tables' data, the same for the same spec (seeded by ``seed``)."""
        rng = np.random.default_rng([self.seed, 1])
        fact = pa.table({c.name: _values(c, self.rows, rng, self) for c in self.columns})
        dim = pa.table({c.name: _values(c, self.dim_rows, rng, self) for c in self.dim_columns})
        return {self.fact: fact, self.dim: dim}

    def of(self, *kinds: str, table: str = "fact") -> list[Column]:
        """Columns of these kinds (in the fact table or ``table="dim"``)."""
        cols = self.columns if table == "fact" else self.dim_columns
        return [c for c in cols if c.kind in kinds]


DIM_ROWS = 1000
"""A generated dimension table's rows unless told."""


def schema(seed: int, rows: int, shape: str | None = None, dim_rows: int = DIM_ROWS) -> SchemaSpec:
    """The schema of ``seed``: a fact table of ``rows`` rows in ``shape`` (default SHAPES by seed,
    so any three seeds in a row hold all three) and a dimension table of ``dim_rows``."""
    rng = np.random.default_rng([seed, 0])
    shape = shape or SHAPES[seed % len(SHAPES)]
    if shape not in SHAPES:
        raise ValueError(f"shape {shape!r}: give one of {', '.join(SHAPES)}")
    names = _names(rng, 40)
    words = tuple(_word(rng, 2) for _ in range(400))
    kinds = _fact_kinds(shape, rng)
    columns = tuple(_column(names[i], k, rng, words, rows, dim_rows) for i, k in enumerate(kinds))
    dim_kinds = ("id", "category", "code", "int", "float")
    dim_cols = tuple(
        _column(names[32 + i], k, rng, words, dim_rows, dim_rows) for i, k in enumerate(dim_kinds)
    )
    tables = _names(rng, 2)
    pool = tuple(" ".join(rng.choice(words, int(rng.integers(1, 12)), p=_zipf(len(words), 1.1)))
                 for _ in range(2048))  # fmt: skip
    fkey = next(c.name for c in columns if c.kind == "key")
    return SchemaSpec(seed, shape, f"f{seed}_{tables[0]}", f"d{seed}_{tables[1]}", rows, dim_rows, columns,
                      dim_cols, fkey, dim_cols[0].name, pool)  # fmt: skip


def _fact_kinds(shape: str, rng: np.random.Generator) -> list[str]:
    """A key always (the join), then by shape: every kind at least once and more drawn at random
    (wide, medium), or one number, one string and one date (narrow)."""
    if shape == "narrow":
        return ["key", str(rng.choice(NUMERIC)), str(rng.choice(STRINGS)), str(rng.choice(TEMPORAL))]
    extra = 19 if shape == "wide" else 2
    pool = ["int", "float", "float", "amount", "category", "code", "text", "date", "timestamp", "flag"]
    kinds = ["id", "key", *NUMERIC, *STRINGS, *TEMPORAL, "flag", *rng.choice(pool, extra)]
    return [str(k) for k in kinds]


def _column(
    name: str, kind: str, rng: np.random.Generator, words: tuple[str, ...], rows: int, keys: int
) -> Column:
    nulls = float(rng.choice([0.0, 0.0, 0.05])) if kind in ("int", "float", "amount", "text", "date") else 0.0
    if kind == "id":
        return Column(name, kind, 0, rows)
    if kind == "key":
        return Column(name, kind, 0, keys, weights=(float(rng.uniform(1.05, 1.6)),))
    if kind == "int":
        return Column(name, kind, 0, float(10 ** rng.integers(2, 7)), nulls=nulls)
    if kind == "float":
        lo = float(np.round(rng.uniform(-100, 100), 1))
        return Column(name, kind, lo, lo + float(10 ** rng.uniform(0, 4)), nulls=nulls)
    if kind == "amount":
        return Column(name, kind, float(rng.uniform(0, 6)), float(rng.uniform(0.5, 2)), nulls=nulls)
    if kind == "category":
        n = int(rng.integers(3, 60))
        values = tuple(dict.fromkeys(_word(rng, int(rng.integers(1, 4))) for _ in range(n)))
        return Column(
            name, kind, values=values, weights=tuple(_zipf(len(values), float(rng.uniform(0.5, 1.5))))
        )
    if kind == "code":
        return Column(name, kind, values=tuple(dict.fromkeys(_word(rng, 1).upper() for _ in range(24))))
    if kind == "text":
        return Column(name, kind, values=words, nulls=nulls)
    if kind in ("date", "timestamp"):
        start = (dt.date(int(rng.integers(1995, 2020)), 1, 1) - _EPOCH).days
        days = float(rng.integers(30, 3650))
        scale = 1 if kind == "date" else 86_400
        return Column(name, kind, start * scale, (start + days) * scale, nulls=nulls)
    return Column(name, "flag", lo=float(rng.uniform(0.05, 0.95)))  # lo: the share of trues


def _values(c: Column, rows: int, rng: np.random.Generator, spec: SchemaSpec) -> pa.Array:
    """Column ``c``'s ``rows`` values, vectorized (a million rows of a wide table in about a second)."""
    if c.kind == "id":
        arr: pa.Array = pa.array(np.arange(rows, dtype=np.int64))
    elif c.kind == "key":
        order = rng.permutation(int(c.hi))  # the popular keys are spread over the key range
        arr = pa.array(order[rng.choice(int(c.hi), rows, p=_zipf(int(c.hi), c.weights[0]))].astype(np.int64))
    elif c.kind == "int":
        arr = pa.array(rng.integers(int(c.lo), int(c.hi), rows, dtype=np.int64))
    elif c.kind == "float":
        arr = pa.array(rng.uniform(c.lo, c.hi, rows))
    elif c.kind == "amount":
        arr = pa.array(np.round(rng.lognormal(c.lo, c.hi, rows), 2))
    elif c.kind == "category":
        arr = pa.array(c.values).take(rng.choice(len(c.values), rows, p=np.array(c.weights)))
    elif c.kind == "code":
        prefix = pa.array(c.values).take(rng.integers(0, len(c.values), rows))
        number = pc.utf8_lpad(pc.cast(pa.array(rng.integers(0, 1_000_000, rows)), pa.string()), 6, "0")
        arr = pc.binary_join_element_wise(prefix, number, "-")
    elif c.kind == "text":
        pool = pa.array(spec.text_pool)
        arr = pc.binary_join_element_wise(pool.take(rng.integers(0, len(pool), rows)),
                                          pool.take(rng.integers(0, len(pool), rows)), " ")  # fmt: skip
    elif c.kind == "date":
        arr = pa.array(rng.integers(int(c.lo), int(c.hi), rows).astype(np.int32), pa.date32())
    elif c.kind == "timestamp":
        arr = pa.array(rng.integers(int(c.lo * 1e6), int(c.hi * 1e6), rows), pa.timestamp("us"))
    else:
        arr = pa.array(rng.random(rows) < c.lo)
    if c.nulls:
        arr = pc.if_else(pa.array(rng.random(rows) < c.nulls), pa.scalar(None, arr.type), arr)
    return arr


def _zipf(n: int, s: float) -> np.ndarray:
    w = 1.0 / np.arange(1, n + 1) ** s
    return w / w.sum()


def _word(rng: np.random.Generator, syllables: int) -> str:
    return "".join(rng.choice(_SYLLABLES, syllables))


def _names(rng: np.random.Generator, n: int) -> list[str]:
    """``n`` distinct identifiers: syllables and a digit, so never an SQL keyword."""
    out: dict[str, None] = {}
    while len(out) < n:
        out[f"{_word(rng, int(rng.integers(2, 4)))}{int(rng.integers(0, 10))}"] = None
    return list(out)


# ---------------------------------------------------------------------------------- queries


class Query(NamedTuple):
    """A generated query: its kind (a key of TEMPLATES) and its SQL."""

    kind: str
    sql: str


class _Skip(Exception):
    """A template that does not apply to a schema (it lacks the columns)."""


class _Pick:
    """A template's view of a schema: columns of a kind and literals, drawn from ``rng``."""

    def __init__(self, spec: SchemaSpec, rng: np.random.Generator) -> None:
        self.s, self.rng = spec, rng
        self.f, self.d = spec.fact, spec.dim

    def col(self, *kinds: str, table: str = "fact", other_than: Column | None = None) -> Column:
        cols = [c for c in self.s.of(*kinds, table=table) if c != other_than]
        if not cols:
            raise _Skip
        return cols[int(self.rng.integers(0, len(cols)))]

    def share(self) -> float:
        """A selectivity from 0.1% to 100%, log-uniform."""
        return float(10 ** self.rng.uniform(-3, 0))

    def below(self, c: Column) -> str:
        """``c < v`` keeping about share() of the rows."""
        return f"{c.name} < {_literal(c, c.quantile(self.share()))}"

    def between(self, c: Column) -> str:
        lo = float(self.rng.uniform(0, 1 - (w := self.share())))
        return f"{c.name} between {_literal(c, c.quantile(lo))} and {_literal(c, c.quantile(lo + w))}"

    def value(self, c: Column) -> str:
        return c.values[int(self.rng.integers(0, len(c.values)))].replace("'", "''")

    def prefix(self, c: Column) -> str:
        """A LIKE prefix of a string column: a code's letters and 0-2 of its digits, a category's
        first letters, a text's first word's first letters."""
        v = self.value(c)
        if c.kind == "code":
            return v + "-" + "".join(str(d) for d in self.rng.integers(0, 10, int(self.rng.integers(0, 3))))
        return v[: int(self.rng.integers(1, 4))]

    def cols(self, k: int, other_than: Column | None = None) -> str:
        """``k`` of the fact table's columns (a narrow projection), ``other_than`` not among them."""
        cols = [c for c in self.s.columns if c != other_than]
        idx = sorted(self.rng.choice(len(cols), min(k, len(cols)), replace=False))
        return ", ".join(cols[i].name for i in idx)


def _literal(c: Column, v: float) -> str:
    if c.kind == "date":
        return f"date '{_EPOCH + dt.timedelta(days=int(v))}'"
    if c.kind == "timestamp":
        return f"timestamp '{dt.datetime(1970, 1, 1) + dt.timedelta(seconds=int(v))}'"
    if c.kind in ("id", "key", "int"):
        return str(round(v))
    return f"{v:.6g}"


def _number_filter(p: _Pick) -> str:
    return f"select * from {p.f} where {p.below(p.col(*NUMERIC))}"


def _number_range(p: _Pick) -> str:
    c = p.col(*NUMERIC, "id")
    return f"select {p.cols(2, c)}, {c.name} from {p.f} where {p.between(c)}"


def _string_equal(p: _Pick) -> str:
    c = p.col("category")
    return f"select {p.cols(3)} from {p.f} where {c.name} = '{p.value(c)}'"


def _string_in(p: _Pick) -> str:
    c = p.col("category")
    values = ", ".join(f"'{p.value(c)}'" for _ in range(int(p.rng.integers(2, 5))))
    return f"select * from {p.f} where {c.name} in ({values})"


def _like_prefix(p: _Pick) -> str:
    c = p.col("code", "category")
    return f"select {p.cols(3)} from {p.f} where {c.name} like '{p.prefix(c)}%'"


def _like_contains(p: _Pick) -> str:
    c = p.col("text", "code")
    part = p.value(c) if c.kind == "text" else str(int(p.rng.integers(0, 1000)))
    return f"select * from {p.f} where {c.name} like '%{part}%'"


def _date_range(p: _Pick) -> str:
    return f"select {p.cols(3)} from {p.f} where {p.between(p.col(*TEMPORAL))}"


def _string_functions(p: _Pick) -> str:
    a, b = p.col(*STRINGS), p.col(*STRINGS)
    n = int(p.rng.integers(2, 8))
    return (
        f"select lower({a.name}) as lo, upper({b.name}) as up, substr({a.name}, 1, {n}) as head, "
        f"length({b.name}) as len, concat({a.name}, '/', {b.name}) as joined from {p.f} "
        f"where {p.below(p.col(*NUMERIC, *TEMPORAL))}"
    )


def _heavy_math(p: _Pick) -> str:
    x, y = p.col(*NUMERIC), p.col(*NUMERIC)
    return (
        f"select {p.s.fact_key}, sqrt(abs({x.name})) as r, sin({x.name}) + cos({y.name}) as w, "
        f"ln(abs({y.name}) + 1) as l, atan2({y.name}, {x.name}) as phi from {p.f} where {p.below(x)}"
    )


def _group_string(p: _Pick) -> str:
    g, x = p.col("category", "code"), p.col(*NUMERIC)
    return (
        f"select {g.name}, count(*) as n, avg({x.name}) as m, max({x.name}) as hi from {p.f} "
        f"where {p.below(p.col(*NUMERIC, *TEMPORAL))} group by {g.name}"
    )


def _group_int(p: _Pick) -> str:
    x = p.col(*NUMERIC)
    return (
        f"select {p.s.fact_key}, count(*) as n, sum({x.name}) as s from {p.f} "
        f"where {p.below(x)} group by {p.s.fact_key}"
    )


def _group_date(p: _Pick) -> str:
    t = p.col(*TEMPORAL)
    g = t.name if t.kind == "date" else f"date_trunc('{p.rng.choice(['day', 'month'])}', {t.name})"
    where = p.below(p.col(*NUMERIC, *TEMPORAL))
    return f"select {g} as period, count(*) as n from {p.f} where {where} group by {g}"


def _join_filter(p: _Pick) -> str:
    a, b = p.col("category", "code", table="dim"), p.col("int", "float", table="dim")
    return (
        f"select {p.f}.{p.col(*NUMERIC, *STRINGS).name}, {p.d}.{a.name}, {p.d}.{b.name} from {p.f} "
        f"join {p.d} on {p.f}.{p.s.fact_key} = {p.d}.{p.s.dim_key} "
        f"where {p.d}.{p.below(b)} and {p.f}.{p.below(p.col(*NUMERIC, *TEMPORAL))}"
    )


def _join_group(p: _Pick) -> str:
    g, x = p.col("category", table="dim"), p.col(*NUMERIC)
    return (
        f"select {p.d}.{g.name}, count(*) as n, sum({p.f}.{x.name}) as s from {p.f} "
        f"join {p.d} on {p.f}.{p.s.fact_key} = {p.d}.{p.s.dim_key} "
        f"where {p.f}.{p.below(p.col(*NUMERIC, *TEMPORAL))} group by {p.d}.{g.name}"
    )


def _order_limit(p: _Pick) -> str:
    x = p.col(*NUMERIC, *TEMPORAL)
    limit = int(10 ** p.rng.uniform(1, 4))
    return (
        f"select {p.cols(3, x)}, {x.name} from {p.f} where {p.below(x)} order by {x.name} desc limit {limit}"
    )


def _distinct(p: _Pick) -> str:
    if p.rng.random() < 0.5:
        c, where = p.col("code", "text", "key"), p.below(p.col(*NUMERIC))
        return f"select count(distinct {c.name}) as n from {p.f} where {where}"
    a = p.col(*STRINGS, "flag")
    return f"select distinct {a.name}, {p.col('category', 'flag', 'key', other_than=a).name} from {p.f}"


def _wide_flag(p: _Pick) -> str:
    return f"select * from {p.f} where {p.col('flag').name} and {p.below(p.col(*NUMERIC))}"


TEMPLATES: dict[str, Callable[[_Pick], str]] = {
    "number filter": _number_filter, "number range": _number_range, "string equal": _string_equal,
    "string in": _string_in, "like prefix": _like_prefix, "like contains": _like_contains,
    "date range": _date_range, "string functions": _string_functions, "heavy math": _heavy_math,
    "group by string": _group_string, "group by int": _group_int, "group by date": _group_date,
    "join filter": _join_filter, "join group by": _join_group, "order limit": _order_limit,
    "distinct": _distinct, "flag filter": _wide_flag,
}  # fmt: skip
"""Query kinds. Every one filters with a selectivity drawn log-uniform from 0.1% to 100%, or
picks a value of a skewed column (the same spread); ``select *`` is the wide projection."""


def queries(spec: SchemaSpec, n: int, seed: int = 0, start: int | None = None) -> list[Query]:
    """``n`` queries over ``spec``'s tables, the kinds of TEMPLATES in turn from the ``start``-th
    (default: drawn), skipping those the schema lacks columns for (a narrow table has no flag);
    the same for the same seeds. A suite over several schemas covers every kind when each
    schema starts where the one before stopped."""
    rng = np.random.default_rng([spec.seed, seed, 2])
    kinds = list(TEMPLATES)
    first = int(rng.integers(0, len(kinds))) if start is None else start
    out: list[Query] = []
    for i in range(n * len(kinds)):  # bounded: every template may skip
        if len(out) == n:
            break
        kind = kinds[(first + i) % len(kinds)]
        try:
            out.append(Query(kind, TEMPLATES[kind](_Pick(spec, rng))))
        except _Skip:
            continue
    return out


def suite(specs: Sequence[SchemaSpec], n: int, seed: int = 0) -> list[Query]:
    """``n`` queries spread over ``specs``, every kind in turn across them (as many as ``n``
    allows), each schema's share in a row."""
    out: list[Query] = []
    kinds = list(TEMPLATES)
    for i, spec in enumerate(specs):
        share = n // len(specs) + (i < n % len(specs))
        start = (kinds.index(out[-1].kind) + 1) % len(kinds) if out else 0
        out += queries(spec, share, seed, start)
    return out


ROW_SHARE = {"narrow": 1.0, "medium": 0.4, "wide": 0.1}
"""Rows of a fact table by shape, as a share of a narrow one's: a wide row is ~15 times a
narrow one's bytes, so a suite's tables stay within a few times each other's size."""


def rows_of(shape: str, rows: int) -> int:
    """The rows of a ``shape`` fact table in a suite whose narrow tables have ``rows``."""
    return max(1, int(rows * ROW_SHARE[shape]))
