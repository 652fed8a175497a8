"""Cardinality of a Substrait plan from the data sets' statistics (:mod:`.stats`): how many rows
and bytes the query's result will have, and why — without running it.

The walk of the plan is native (``crates/dataservices/src/estimate.rs``, :func:`native_estimate`):
per relation, in the plan's own tree, reads give their data set's rows; filters their input's
rows times the condition's selectivity; projects and sorts keep their rows, a fetch at most its
count; an aggregate its groups (the keys' distinct counts, thinned by the rows that reach it:
Cardenas' formula; a date's year at most the years its sketch spans; a count at most what its
rows allow; computed keys measured on a sample); joins their keys' matches (semi and anti joins
the share of the key's domain found); sets add, take the fewest or the first. Beside the result
it counts the work on the way (:data:`WORK`), what the time models need beyond sizes.

What the walk hands back is priced here (:class:`_Ctx`). A condition is taken apart into and /
or / not of comparisons ``column op literal`` (the literal brought to the column's domain: a date
in days, a timestamp in ticks of the column's unit, a decimal by value) and of ``column IN
(list)``. Comparisons on one column are reduced to one interval priced with the column's KLL
sketch; equalities with its count sketch (heavy, light and absent keys alike), or for
floating-point columns its distinct count. An IN list, or an or of equalities on one column, is
the sum of its equalities, over at most :data:`IN_VALUES` of them taken evenly from the list and
scaled, at most 1. Columns are independent unless the sample says otherwise: for a conjunction
over several columns the sample's joint selectivity over the product of its marginals is a
correction factor, applied when it differs from 1 by more than three standard errors. Anything
else (compute functions, column against column, casts) is measured on the sample; a condition
that cannot run there either is given :data:`DEFAULT_SELECTIVITY`, and the step says so: an
estimate never fails for a condition it cannot price. Groups of computed keys are measured on
the sample the walk names (:meth:`_Ctx.native_groups`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from offload.dataservices import plans
from offload.dataservices.stats import TableStats, Ticks, fixed_width, variable_width

_EPOCH = dt.date(1970, 1, 1)

OPS = {"gt": ">", "gte": ">=", "lt": "<", "lte": "<=", "equal": "=", "not_equal": "!="}
FLIP = {">": "<", "<": ">", ">=": "<=", "<=": ">=", "=": "=", "!=": "!="}
Z = 3.0  # standard errors before the sample overrides independence


IN_VALUES = 1000
"""The most values of an IN list priced one by one; a longer list is priced from this many,
taken evenly from it, and scaled (a 100k-value list costs what a 1,000-value one does)."""
DEFAULT_SELECTIVITY = 1.0 / 3.0
"""A condition neither the sketches nor the sample can price (a type DataFusion cannot plan
over the sample, a condition over several tables): a third of the rows, said in the steps."""
DEFAULTED = "a default"
"""What the step of a condition given :data:`DEFAULT_SELECTIVITY` says: what a decision looks
for to know its estimate is uncertain (node.Node._decide_for_the_worst)."""
COSTLY_SAMPLE_SHARE = 0.01
COSTLY_SAMPLE_MIN = 8192
COSTLY_SAMPLE_MAX = 32_768
"""A condition with heavy or string calls runs on at most this share of the table's rows (at
least the minimum, at most the maximum) of the sample: its cost per row is what the query pays
per row, so a sample of 65,536 rows would cost a 1 M-row query 6.5% of its own work (the seed:
deciding costs ~1%). The maximum bounds the decision: on a quarter-core node a heavy condition
on 1% of the seed's 6.18 M rows took 7.6-10.2 ms of CPU, and a decision is to take at most
10 ms. A selectivity's standard error is at most 0.55% of the table at 8,192 rows, 0.28% at
32,768."""

WORK = (
    "cheap_rows",
    "heavy_rows",
    "string_rows",
    "aggregate_rows",
    "sort_rows",
    "string_key_rows",
    "join_rows",
)
"""The work counted on the way to the result, each a sum over the plan's relations:
``cheap_rows``, rows times the cheap function calls (plans.function_class "cheap", IN lists
included) run on them; ``string_rows``, the same for string functions (like, substring, lower,
concat, regexp...); ``heavy_rows``, for every other call (sqrt, sin, ...) — what a slow CPU
pays for beyond moving rows; ``aggregate_rows`` and ``sort_rows``, the rows entering aggregates
and sorts; ``string_key_rows``, the rows entering group-bys and equi-joins on a string or binary
key (both sides of a join), which hash and compare per character; ``join_rows``, the rows
entering joins (both sides): building and probing their hash tables."""


@dataclass
class Estimate:
    """Estimated result rows and bytes, the steps that led there, and what estimating cost."""

    rows: float
    bytes: float
    steps: list[str] = field(default_factory=list)
    seconds: float = 0.0
    work: dict[str, float] = field(default_factory=lambda: dict.fromkeys(WORK, 0.0))
    """The rows the plan's operators run on (:data:`WORK`)."""

    @property
    def heavy_rows(self) -> float:
        return self.work["heavy_rows"]

    @property
    def string_rows(self) -> float:
        return self.work["string_rows"]

    def as_dict(self) -> dict[str, Any]:
        return {"rows": self.rows, "bytes": self.bytes, "steps": self.steps, "seconds": self.seconds,
                **self.work}  # fmt: skip


@dataclass
class _Col:
    """An input column of a condition the native walk hands back: a data set's column, or
    computed (no table). ``cast``: a cast of that column projected below (DataFusion projects a
    cast a condition uses twice, as in a BETWEEN): its values are not the column's, so
    conditions on it are not priced by the column's sketches (the sample runs them)."""

    table: str | None
    name: str | None
    cast: bool = False
    values: float | None = None
    """The most distinct values the column takes, where known (a date's years, a count's, the
    values a filter below leaves)."""


_GroupSource = tuple[str, Any, list[Any], bool, int]
"""Where an aggregate's computed keys are grouped on a sample, as the native walk finds it
(``GroupSource`` in estimate.rs): (data set, relation, key expressions over it, whether it holds
the plan's filters, its columns)."""
_NativeSource = tuple[str, bytes, list[bytes], bool, int]
"""A :data:`_GroupSource` as the native walk hands it over: the relation and keys as bytes."""
_NativeCol = tuple[str | None, str | None, bool, float | None]
"""A column as the native walk hands it to a callback: (data set, column, whether a cast of it,
its most distinct values where known); (None, None, False, values) where computed."""


@dataclass
class _Rel:
    rows: float
    cols: list[_Col]


def estimate(plan: Any, stats: Mapping[str, TableStats]) -> Estimate:
    """The cardinality of ``plan`` (its bytes, or a parsed ``substrait.plan_pb2.Plan``) over data
    sets with these statistics, by the native walk (:func:`native_estimate`); PlanError, saying
    why, where it cannot estimate the plan."""
    raw = plan if isinstance(plan, bytes) else plan.SerializeToString()
    info = plans.inspect(raw)
    return native_estimate(info.native, raw, stats, info.reads).estimate


class NativeEstimate(NamedTuple):
    """What the native walk gives for a plan: the estimate, its features
    (``timemodel.features(shape, ...).as_dict()``, made natively), and what the plan's
    :attr:`shape` is made of, made only where it is asked for (a decision does not)."""

    estimate: Estimate
    features: dict[str, Any]
    calls: tuple[int, int, int, list[str]]
    """Scalar calls (all, heavy, string) and the relation kinds, as the native walk gives them."""
    reads: Mapping[str, list[str]]

    @property
    def shape(self) -> plans.PlanShape:
        """The plan's shape (:meth:`plans.PlanIndex.shape`)."""
        functions, heavy, strings, kinds = self.calls
        read = {t: frozenset(cols) for t, cols in self.reads.items()}
        return plans.PlanShape(functions, heavy, strings, frozenset(kinds), read)


def native_estimate(
    native: Any, plan: bytes, stats: Mapping[str, TableStats], reads: Mapping[str, list[str]]
) -> NativeEstimate:
    """The plan's estimate, its shape (:meth:`plans.PlanIndex.shape`) and its features
    (``timemodel.features``) by the native walk. ``native``: the plan's
    ``offload._native.SubstraitPlan``, or None where ``plans.inspect`` read it in Python (a plan
    the native reader does not model, which the walk then refuses); ``plan``: its bytes;
    ``reads``: ``plans.PlanInfo.reads``; ``stats``: every data set read. The conditions the walk
    does not price are priced here (:class:`_Ctx`); PlanError, saying what, where the walk does
    not model the plan."""
    from offload import _native

    t0 = time.perf_counter()
    native = native if native is not None else _native.SubstraitPlan(plan)
    tables = [_plan_table(name, st) for name, st in stats.items()]
    ctx: list[_Ctx] = []  # made for the first condition the walk hands back, if any

    def made() -> _Ctx:
        if not ctx:
            ctx.append(_Ctx(plan, stats, native.names()))
        return ctx[0]

    def selectivity(cond: bytes, cols: list[_NativeCol], rows: float) -> tuple[float, list[str]]:
        return made().native_selectivity(cond, cols, rows)

    def groups(source: _NativeSource | None, rows: float) -> tuple[float | None, list[str]]:
        return made().native_groups(source, rows)

    def joined(
        rel: bytes, names: tuple[str, str], width: int
    ) -> tuple[tuple[float, float] | None, list[str]]:
        return made().native_joined(rel, names, width)

    try:
        got = native.estimate(tables, plans.native_classes(), selectivity, groups, joined)
    except NotImplementedError as e:
        raise plans.PlanError(f"cannot estimate this plan: {e}") from None
    rows, nbytes, steps, work, calls, features = got
    est = Estimate(rows, nbytes, steps, time.perf_counter() - t0, dict(zip(WORK, work, strict=True)))
    return NativeEstimate(est, features, calls, reads)


def _plan_table(name: str, st: TableStats) -> Any:
    """A data set's statistics as the native walk takes them (``offload._native.PlanTable``),
    kept until it grows; a distinct count that cannot be had is NaN (the walk then leaves
    the plan to :func:`estimate`, which says why). Its float64 and signed integer columns
    carry their KLL sketch's sorted view and their sample, for the inequalities the walk
    prices itself."""

    def distinct(col: str) -> float:
        try:
            return float(st.distinct(col))
        except Exception:  # a column the sketches cannot count: not the native walk's to answer
            return math.nan

    def make() -> Any:
        from offload import _native

        kinds = {c: (variable_width(cs.type), fixed_width(cs.type)) for c, cs in st.columns.items()}
        cols = [
            (c, cs.width_bytes, *kinds[c], distinct(c), cs.nulls, _years_spanned(cs), *_profile(st, c))
            for c, cs in st.columns.items()
        ]
        rows = st.sample.num_rows if st.sample is not None else 0
        numeric = {c: got for c, cs in st.columns.items() if (got := _numeric(cs, st.sample)) is not None}
        return _native.PlanTable(name, st.rows, cols, rows, numeric)

    return st.kept(("native table", name), make)


def _profile(st: TableStats, column: str) -> tuple[list[tuple[float, float]], int]:
    """How often :data:`PROFILE_ROWS` evenly spaced rows of the data set's sample hold
    ``column``'s values: (times seen, values seen that often), nulls left out, and the rows
    looked at. None looked at where there is no sample, the column is floating-point (taken as
    near unique: a filter thins it as equally common values) or its values cannot be counted
    (nested). The native walk spreads a filter's rows over the values by it (``thinned``)."""
    if not _sampled(st) or pa.types.is_floating(st.columns[column].type):
        return [], 0
    sample = st.spaced(PROFILE_ROWS)
    try:
        counts = pc.value_counts(pc.drop_null(sample.column(column))).field("counts")
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
        return [], 0
    times, values = np.unique(counts.to_numpy(zero_copy_only=False), return_counts=True)
    return [(float(t), float(v)) for t, v in zip(times, values, strict=True)], sample.num_rows


PROFILE_ROWS = 16_384
"""Rows of the sample a column's profile is counted on (its values' spread, not their count:
the distinct count is the sketches'): 6-19 ms a 400,000-row table's columns on all 65,536."""


_EXACT = float(2**53)
"""Integers below it are exact as float64: the native walk compares such columns as floats."""


def _numeric(cs: Any, sample: pa.Table | None) -> tuple[Any, ...] | None:
    """A float64 or signed integer column's KLL sorted view (items ascending, cumulative
    weights, the values seen) and its sample (float64, where valid), for the native walk;
    None for any other column, or integers not all exact as float64."""
    t = cs.type
    if cs.kll is None or not (pa.types.is_float64(t) or pa.types.is_signed_integer(t)):
        return None
    empty = cs.kll.is_empty()
    if pa.types.is_signed_integer(t) and not empty:
        if max(abs(cs.kll.get_min_value()), abs(cs.kll.get_max_value())) >= _EXACT:
            return None
    pairs = np.array(list(cs.kll), dtype=np.float64).reshape(-1, 2)
    order = np.argsort(pairs[:, 0], kind="stable")
    items, weights = pairs[order, 0], pairs[order, 1].astype(np.uint64)
    values, valid = np.zeros(0), np.zeros(0, dtype=bool)
    if sample is not None and sample.num_rows:
        col = sample.column(cs.name).combine_chunks()
        values = np.asarray(pc.cast(pc.fill_null(col, 0), pa.float64()).to_numpy(zero_copy_only=False))
        if col.null_count:
            valid = np.asarray(pc.is_valid(col).to_numpy(zero_copy_only=False), dtype=bool)
    return items, np.cumsum(weights, dtype=np.uint64), 0 if empty else int(cs.kll.n), values, valid


class _Calls:
    """:meth:`plans.PlanIndex.calls` for a message of a plan no index holds."""

    def __init__(self, names: dict[int, str]) -> None:
        self.names = names

    def calls(self, msg: Any) -> dict[str, int]:
        return plans.call_counts(msg, self.names)


class _Ctx:
    """Prices what the native walk hands back: conditions the sketches and the sample price
    (:meth:`native_selectivity`), groups of keys measured on a sample (:meth:`native_groups`)
    and joins met on the samples (:meth:`native_joined`), with the steps that say how."""

    def __init__(self, raw: bytes, stats: Mapping[str, TableStats], names: dict[int, str]) -> None:
        self._plan: Any = None
        self._raw = raw  # parsed when a condition first runs on the sample
        self.stats = stats
        self.index = _Calls(names)
        self.fns = names
        self.steps: list[str] = []
        self._within: Any = None
        """The condition being priced, whose filter's input the sample runs its parts over."""
        self._sampled: dict[tuple[str, bytes], float] = {}
        """Conditions already run on a sample: the independent and the corrected estimate of
        one condition both need them."""

    @property
    def plan(self) -> Any:
        """The parsed plan (parsed here where the native walk has read it)."""
        if self._plan is None:
            from substrait.plan_pb2 import Plan

            self._plan = Plan.FromString(self._raw)
        return self._plan

    def native_selectivity(self, cond: bytes, cols: list[_NativeCol], rows: float) -> tuple[float, list[str]]:
        """:meth:`selectivity` for the native walk: the condition's bytes, each input column
        (:data:`_NativeCol`) and the input's rows; the selectivity and the steps it took."""
        from substrait.algebra_pb2 import Expression

        before = len(self.steps)
        inp = _Rel(rows, [_Col(t, n, cast=cast, values=values) for t, n, cast, values in cols])
        sel = self.selectivity(Expression.FromString(cond), inp)
        return sel, self.steps[before:]

    # -------------------------------------------------------------------------- relations

    # ------------------------------------------------------------------------ expressions

    def _distinct(self, c: _Col, rows: float) -> float:
        """Distinct values of ``c`` among ``rows`` rows of its table (Cardenas)."""
        if c.table is None or c.name is None:
            return rows if c.values is None else _cardenas(c.values, rows)
        st = self.stats[c.table]
        d = max(1.0, st.distinct(c.name))
        if c.values is not None:
            d = min(d, max(c.values, 1.0))
        return d if rows >= st.rows else _cardenas(d, rows)

    def native_groups(self, source: _NativeSource | None, rows: float) -> tuple[float | None, list[str]]:
        """:meth:`_measured_groups` for the native walk, which found the source (its
        ``GroupSource``: the relation and keys as bytes); the groups and the steps."""
        from substrait.algebra_pb2 import Expression, Rel

        before = len(self.steps)
        found = None
        if source is not None:
            table, rel, keys, filtered, width = source
            found = (table, Rel.FromString(rel), [Expression.FromString(k) for k in keys], filtered, width)
        got = self._measured_groups(found, rows)
        return got, self.steps[before:]

    def _measured_groups(self, source: _GroupSource | None, into: float) -> float | None:
        """The groups of an aggregate's keys (computed, or columns that may vary together) over
        its input of ``into`` rows: its
        ``source`` (:data:`_GroupSource`) run on its data set's sample and the keys grouped
        there, the groups of all the rows estimated from how often each was seen
        (:func:`gee_groups`); over the table unfiltered, thinned to ``into`` rows (Cardenas).
        None, and a step saying why, where no one data set's sample can give them or none of
        its rows reach the keys."""
        if source is None:
            self.steps.append("groups of the keys: not over one data set's columns")
            return None
        table, rel, exprs, filtered, width = source
        st = self.stats.get(table)
        if st is None or not _sampled(st):
            self.steps.append(f"groups of the keys: no rows sampled of {table}")
            return None
        costly = any(c["heavy"] or c["string"] for c in map(self.index.calls, exprs))
        sample = st.spaced(_costly_rows(st)) if costly else st.sample
        made: list[bool] = []
        key = ("groups", rel.SerializeToString(), tuple(e.SerializeToString() for e in exprs),
               tuple(sorted(self.fns.items())), sample.num_rows)  # fmt: skip
        counts = st.kept(
            key, lambda: made.append(True) or self._group_counts(rel, width, exprs, table, st, sample)
        )
        if isinstance(counts, str):
            self.steps.append(f"groups of the keys not measurable on the sample ({counts})")
            return None
        seen, once, rows = counts
        if rows == 0:
            self.steps.append(f"groups of the keys: none of {sample.num_rows:,} sampled rows reach them")
            return None
        groups = gee_groups(seen, once, rows, into if filtered else float(st.rows))
        over = "" if filtered else f" of {table}, unfiltered"
        if not filtered:
            groups = _cardenas(groups, into)
        over += "" if made else " (by an earlier query)"
        self.steps.append(
            f"groups of the keys measured on {rows:,} sampled rows{over}: {seen:,} seen, {once:,} once; "
            f"{groups:,.1f} of {into:,.1f} rows"
        )
        return groups

    def native_joined(
        self, rel: bytes, names: tuple[str, str], width: int
    ) -> tuple[tuple[float, float] | None, list[str]]:
        """The rows an inner join of two data sets' filtered reads (``rel``'s bytes, ``width``
        columns) can have, by the pairs it meets on their samples: each pair of rows is in the
        samples with chance n/N × n'/N', so k pairs met there put the join's rows within
        :func:`met_interval` (k) × N/n × N'/n' (exactly k where the samples are the data sets).
        None where a data set has no sample or the join cannot run there; the steps say why."""
        from substrait.algebra_pb2 import Rel

        before = len(self.steps)
        left, right = (self.stats.get(n) for n in names)
        if left is None or right is None or not _sampled(left) or not _sampled(right):
            self.steps.append("join not measured: a side has no sample")
            return None, self.steps[before:]
        samples = (left.spaced(JOIN_SAMPLE_ROWS), right.spaced(JOIN_SAMPLE_ROWS))
        ln, rn = (x.num_rows for x in samples)
        key = ("join", rel, names[1], right.rows, rn, tuple(sorted(self.fns.items())))
        met = left.kept(key, lambda: self._join_count(Rel.FromString(rel), width, names, samples))
        if isinstance(met, str):
            self.steps.append(f"join not measurable on the samples ({met})")
            return None, self.steps[before:]
        scale = left.rows / ln * right.rows / rn
        lo, hi = (met, met) if scale <= 1.0 else met_interval(met)
        self.steps.append(f"join met {met:,} pairs in {ln:,} x {rn:,} sampled rows")
        return (lo * scale, hi * scale), self.steps[before:]

    def _join_count(
        self, rel: Any, width: int, names: tuple[str, str], samples: tuple[pa.Table, pa.Table]
    ) -> Any:
        """The rows join ``rel`` gives over the two data sets' ``samples``; the error's first
        line where DataFusion cannot run it."""
        p, below = _counting_plan(self.plan, width)
        below.CopyFrom(rel)
        ctx = plans.session(1)
        plans.register(ctx, {names[0]: samples[0], names[1]: samples[1]})
        try:
            return plans.count_rows_in(ctx, p.SerializeToString())
        except Exception as e:  # DataFusion and Arrow raise plain exceptions; an estimate never fails here
            return plans.first_line(e)[:120]

    def _group_counts(
        self, rel: Any, width: int, exprs: list[Any], table: str, st: TableStats, sample: pa.Table
    ) -> Any:
        """(groups seen, groups seen once, rows) of ``exprs`` over ``rel`` (``width`` columns)
        run on ``sample``; the error's first line where DataFusion cannot run it."""
        p, root = _bare_plan(self.plan)
        project = root.input.project
        project.input.CopyFrom(rel)
        project.expressions.extend(exprs)
        project.common.emit.output_mapping.extend(range(width, width + len(exprs)))
        root.names.extend(f"k{i}" for i in range(len(exprs)))
        try:
            keys = plans.run_in(_sample_session(table, st, sample), p.SerializeToString())
            counts = keys.group_by(keys.column_names).aggregate([([], "count_all")]).column(-1)
        except Exception as e:  # DataFusion and Arrow raise plain exceptions; an estimate never fails here
            return plans.first_line(e)[:120]
        once = int(pc.sum(pc.equal(counts, 1)).as_py() or 0)
        return len(counts), once, keys.num_rows

    # ------------------------------------------------------------------------ selectivity

    def selectivity(self, cond: Any, inp: _Rel) -> float:
        """The condition's selectivity: the sketches' estimate under independence, corrected by
        the sample where the sample shows the columns are not independent."""
        self._within = cond
        tree = _others_together(_flatten(self._tree(cond, inp)), cond)
        model = self._sel(tree, self._sketch_marginal, inp)
        cols = _columns(tree)
        if len({c for c in cols}) >= 2 and len({t for t, _ in cols}) == 1:
            if _sampled_in(tree):  # the sample cannot check a list priced from part of it
                self.steps.append("a long IN list: columns taken as independent")
            else:
                model *= self._correlation(tree, cond, inp, next(iter(cols))[0])
        return min(1.0, max(0.0, model))

    def _tree(self, e: Any, inp: _Rel) -> Any:
        """("and"|"or", [..]), ("not", x), ("cmp", table, column, op, value), ("in", table,
        column, values, scale), ("one value", column) (a column equal to a scalar subquery:
        one of its distinct values), or ("other", e). Values are in the column's domain
        (ColumnStats.domain); ``scale``: the list's length over the values kept."""
        if e.HasField("singular_or_list"):
            return self._in_tree(e, inp)
        col = self._column(e, inp)
        if col is not None and pa.types.is_boolean(self.stats[col[0]].columns[col[1]].type):
            return ("cmp", col[0], col[1], "=", True)  # a boolean column as the condition
        if not e.HasField("scalar_function"):
            return ("other", e)
        f = e.scalar_function
        name = self.fns.get(f.function_reference, "?")
        args = [a.value for a in f.arguments]
        if name in ("and", "or"):
            return (name, [self._tree(a, inp) for a in args])
        if name == "not" and len(args) == 1:
            return ("not", self._tree(args[0], inp))
        if name == "equal" and len(args) == 2 and any(x.HasField("subquery") for x in args):
            known = [x for x in args if x.HasField("selection")]
            if len(known) == 1:  # a column against a value known only when the query runs
                return ("one value", inp.cols[known[0].selection.direct_reference.struct_field.field])
        if name in OPS and len(args) == 2:
            a, b = args
            op = OPS[name]
            if (b.HasField("selection") or b.HasField("cast")) and a.HasField("literal"):
                a, b, op = b, a, FLIP[op]
            col = self._column(a, inp)
            if col is not None and b.HasField("literal"):
                value = self.stats[col[0]].columns[col[1]].domain(_literal(b.literal))
                if value is not None:
                    return ("cmp", col[0], col[1], op, value)
        return ("other", e)

    def _in_tree(self, e: Any, inp: _Rel) -> Any:
        """``column IN (literals)``: at most IN_VALUES of them, taken evenly from the list (the
        options are never all read: a 100k-value list costs what a 1,000-value one does)."""
        sol = e.singular_or_list
        col = self._column(sol.value, inp)
        n = len(sol.options)
        if col is None or n == 0:
            return ("other", e)
        cs = self.stats[col[0]].columns[col[1]]
        picks = range(n) if n <= IN_VALUES else np.linspace(0, n - 1, IN_VALUES).astype(np.int64).tolist()
        values = _plain_values(sol.options, picks, cs)
        if values is None:
            values = []
            for i in picks:
                o = sol.options[i]
                if not o.HasField("literal"):
                    return ("other", e)
                v = cs.domain(_literal(o.literal))
                if v is not None:  # a null, or a value the column cannot hold, matches no row
                    values.append(v)
        if n <= IN_VALUES:
            values = list(dict.fromkeys(values))
        return ("in", col[0], col[1], values, n / len(picks))

    def _column(self, e: Any, inp: _Rel) -> tuple[str, str] | None:
        """(table, column) where ``e`` is a data set's estimable column, or a cast of one that
        keeps its values and order (DataFusion widens a decimal column to compare it with a
        float literal), else None."""
        cast = e.cast.type if e.HasField("cast") else None
        if cast is not None:
            e = e.cast.input
        if not e.HasField("selection"):
            return None
        c = inp.cols[e.selection.direct_reference.struct_field.field]
        if c.table is None or c.name is None or c.cast or not self.stats[c.table].columns[c.name].estimable:
            return None
        if cast is not None and not _widening(self.stats[c.table].columns[c.name].type, cast):
            return None
        return c.table, c.name

    def _sel(self, t: Any, marginal: Any, inp: _Rel) -> float:
        """Selectivity of tree ``t`` with columns independent; ``marginal(table, col, preds)``
        prices one column's conjunction of comparisons (or one ("in", values))."""
        kind = t[0]
        if kind == "not":  # a null stays null under not: one column's nulls are in neither
            inner = self._sel(t[1], marginal, inp)
            if t[1][0] in ("cmp", "in"):
                return max(0.0, self._non_null(t[1][1], t[1][2]) - inner)
            return 1.0 - inner
        if kind == "or":  # P(A or B) = 1 - P(not A) P(not B), folded over the parts
            miss = 1.0
            for part in t[1]:
                miss *= 1.0 - self._sel(part, marginal, inp)
            return 1.0 - miss
        if kind == "cmp":
            return marginal(t[1], t[2], [(t[3], t[4])])
        if kind == "in":  # disjoint equalities: their sum
            return min(1.0, t[4] * marginal(t[1], t[2], [("in", t[3])]))
        if kind == "other":
            return self._sample_sel(t[1], inp)
        if kind == "one value":  # TPC-H q15: total_revenue = (select max(total_revenue) ...)
            d = max(1.0, self._distinct(t[1], inp.rows))
            self.steps.append(
                f"a column equal to a value known only when run: 1 of its {d:,.1f} values ({DEFAULTED})"
            )
            return 1.0 / d
        by_col: dict[tuple[str, str], list[tuple[str, Any]]] = {}
        s = 1.0
        for p in t[1]:
            if p[0] == "cmp":
                by_col.setdefault((p[1], p[2]), []).append((p[3], p[4]))
            else:
                s *= self._sel(p, marginal, inp)
        for (table, col), preds in by_col.items():
            s *= marginal(table, col, preds)
        return s

    def _non_null(self, table: str, col: str) -> float:
        return 1.0 - self.stats[table].columns[col].nulls / max(1, self.stats[table].rows)

    def _sketch_marginal(self, table: str, col: str, preds: list[tuple[str, Any]]) -> float:
        """Selectivity of the conjunction ``preds`` (op, value) on one column, from its sketches:
        the comparisons reduced to one interval (KLL) or one value (count sketch, HLL); or of
        one ("in", values): the sum of their equalities."""
        if len(preds) == 1 and preds[0][0] == "in":
            return max(0.0, float(self._eq_sels(table, col, preds[0][1], summed=True).sum()))
        cs = self.stats[table].columns[col]
        n = max(1, self.stats[table].rows)
        bounds = _interval(preds)
        if bounds is None:
            return 0.0  # contradictory equalities
        lo, lo_incl, hi, hi_incl, eq, ne = bounds
        non_null = 1.0 - cs.nulls / n
        bounded = lo is not None or hi is not None
        if eq is not None:
            above = lo is None or lo < eq or (lo == eq and lo_incl)
            below = hi is None or eq < hi or (eq == hi and hi_incl)
            return self._eq_sel(table, col, eq) if above and below and eq not in ne else 0.0
        s = non_null
        if bounded and cs.kll is None:  # a range over strings: measured on the sample
            sample = self.stats[table].sample
            if sample is not None and sample.num_rows:
                range_preds = [(op, v) for op, v in preds if op not in ("=", "!=")]
                return (pc.sum(_mask(sample.column(col), range_preds)).as_py() or 0) / sample.num_rows
        if bounded and cs.kll is not None and not cs.kll.is_empty():
            upper = cs.kll.get_rank(cs.number(hi), inclusive=hi_incl) if hi is not None else 1.0
            lower = cs.kll.get_rank(cs.number(lo), inclusive=not lo_incl) if lo is not None else 0.0
            s = max(0.0, upper - lower) * non_null
        if ne:
            s -= float(self._eq_sels(table, col, list(dict.fromkeys(ne))).sum())
        return max(0.0, s)

    def _eq_sel(self, table: str, col: str, value: Any) -> float:
        """The share of rows equal to ``value``, kept per value until the data set grows (a
        flag's two values, a dashboard's key: a count sketch's lookup is ~0.1 ms)."""
        key = ("equal", col, type(value), value)
        try:
            hash(key)
        except TypeError:
            return float(self._eq_sels(table, col, [value])[0])
        return self.stats[table].kept(key, lambda: float(self._eq_sels(table, col, [value])[0]))

    def _eq_sels(self, table: str, col: str, values: list[Any], summed: bool = False) -> np.ndarray:
        """The share of rows equal to each value: the count sketch's counts, or for columns
        without one (floating point) the KLL's bounds and the average over the distinct values."""
        if not values:
            return np.zeros(0)
        cs = self.stats[table].columns[col]
        n = max(1, self.stats[table].rows)
        counts = cs.counts(values, summed)
        if counts is not None:
            return counts / n
        rest = max(0.0, n - cs.nulls) / max(1.0, self.stats[table].distinct(col)) / n
        out = np.full(len(values), rest)
        if cs.kll is not None and not cs.kll.is_empty():
            lo, hi = cs.kll.get_min_value(), cs.kll.get_max_value()
            out[[not lo <= cs.number(v) <= hi for v in values]] = 0.0
        return out

    def _correlation(self, tree: Any, cond: Any, inp: _Rel, table: str) -> float:
        """How far the sample's joint selectivity is from what independence predicts on the
        sample itself (its own marginals): the ratio where it is more than Z standard errors
        away, else 1."""
        sample = self.stats[table].sample
        if sample is None or sample.num_rows == 0:
            return 1.0
        n = sample.num_rows
        masks: dict[tuple[str, str, Any], Any] = {}

        def leaf(col: str, op: str, v: Any) -> Any:  # each comparison's mask once, for both
            key = (col, op, id(v) if op == "in" else v)
            if key not in masks:
                masks[key] = _mask(sample.column(col), [(op, v)])
            return masks[key]

        def sample_marginal(t: str, col: str, preds: list[tuple[str, Any]]) -> float:
            m = leaf(col, *preds[0])
            for p in preds[1:]:
                m = pc.and_(m, leaf(col, *p))
            return (pc.sum(m).as_py() or 0) / n

        indep = self._sel(tree, sample_marginal, inp)
        mask = _tree_mask(tree, leaf)
        joint = (pc.sum(mask).as_py() or 0) / n if mask is not None else self._sample_sel(cond, inp)
        se = math.sqrt(max(indep * (1.0 - indep), 1.0 / n) / n)
        if abs(joint - indep) <= Z * se:
            return 1.0
        factor = joint / indep if indep > 0 else 1.0
        names = sorted({c for _, c in _columns(tree)})
        self.steps.append(f"columns {', '.join(names)} are correlated in the sample: factor {factor:.3f}")
        return factor

    def _sample_sel(self, cond: Any, inp: _Rel) -> float:
        """The fraction of the sample where ``cond`` holds (run by DataFusion on the sample), or
        DEFAULT_SELECTIVITY where it cannot run there; the steps say which."""
        tables = {c.table for c in inp.cols if c.table is not None}
        if len(tables) != 1:
            self.steps.append(
                f"condition over several tables: selectivity {DEFAULT_SELECTIVITY:.3f} ({DEFAULTED})"
            )
            return DEFAULT_SELECTIVITY
        table = next(iter(tables))
        st = self.stats[table]
        if not _sampled(st):
            self.steps.append(
                f"no rows sampled of {table}: selectivity {DEFAULT_SELECTIVITY:.3f} ({DEFAULTED})"
            )
            return DEFAULT_SELECTIVITY
        names = tuple(c.name for c in inp.cols)
        own = None  # a column computed below the filter: the plan's own input computes it
        computed_below = any(c.table != table or c.name is None or c.cast for c in inp.cols)
        if computed_below or len(set(names)) < len(names):
            own = _filter_input(self.plan, self._within if self._within is not None else cond, table)
        computed = own.SerializeToString() if own is not None else b""
        key = (table, cond.SerializeToString(), computed)
        if key not in self._sampled:
            sample = self._affordable(cond, st)
            # the same condition over the same columns and functions gives the same answer until the
            # data set grows (a dashboard's LIKE, asked again, does not run again)
            kept = ("condition", key[1], computed, names, tuple(sorted(self.fns.items())), sample.num_rows)
            made: list[bool] = []
            sel, how = st.kept(
                kept, lambda: made.append(True) or self._measure(cond, inp, table, st, sample, own)
            )
            self._sampled[key] = sel
            how += "" if made else " (by an earlier query)"
            self.steps.append(f"condition {how}: {sel:.5f}")
        return self._sampled[key]

    def _measure(
        self, cond: Any, inp: _Rel, table: str, st: TableStats, sample: pa.Table, own: Any
    ) -> tuple[float, str]:
        """(selectivity, how it was had) of ``cond`` run on ``sample``, in a session kept with it;
        ``own``: the plan's input of the condition's filter, where it computes columns."""
        try:
            ctx = _sample_session(table, st, sample)
            sel = _run_on_sample(self.plan, cond, inp, table, ctx, sample, own)
        except Exception as e:  # DataFusion raises plain exceptions; an estimate never fails here
            return (
                DEFAULT_SELECTIVITY,
                f"not measurable on the sample ({plans.first_line(e)[:120]}), {DEFAULTED}",
            )
        return sel, f"measured on {sample.num_rows:,} sampled rows"

    def _affordable(self, cond: Any, st: TableStats) -> pa.Table:
        """The sample, or for a condition with heavy or string calls evenly spaced rows of it
        (:func:`_costly_rows`)."""
        assert st.sample is not None
        calls = self.index.calls(cond)
        if calls["heavy"] + calls["string"] == 0:
            return st.sample
        return st.spaced(_costly_rows(st))


def _costly_rows(st: TableStats) -> int:
    """The sampled rows a condition heavy in functions runs on: COSTLY_SAMPLE_SHARE of the
    table's rows, COSTLY_SAMPLE_MIN to COSTLY_SAMPLE_MAX."""
    return min(COSTLY_SAMPLE_MAX, max(COSTLY_SAMPLE_MIN, int(COSTLY_SAMPLE_SHARE * st.rows)))


def prepare(table: str, st: TableStats) -> None:
    """Makes now what decisions derive from data set ``table``'s sample and keep until it grows
    (:meth:`TableStats.kept`): its distinct counts, the spaced rows costly conditions run on, and
    a DataFusion session holding each, run once. A decision that made them took up to 17 ms (the
    first LIKE over a new data set; 0.7 ms the next); a node prepares a data set when it is added
    and after each append. Never fails a load: what cannot be made now is left to the decision
    that needs it, which says why in its steps. The statistics as the native walk takes them are
    made here too (a wide data set's sketches took a first decision over it 15-31 ms)."""
    with contextlib.suppress(Exception):  # what cannot be made now, the first decision tries again
        _plan_table(table, st)
    if not _sampled(st):
        return
    for name, c in st.columns.items():
        if c.estimable:
            with contextlib.suppress(Exception):
                st.distinct(name)
    samples = {s.num_rows: s for s in (st.sample, st.spaced(_costly_rows(st)))}  # one, on a small table
    for sample in samples.values():
        with contextlib.suppress(Exception):  # DataFusion raises plain exceptions
            _sample_session(table, st, sample).sql(f'select count(*) from "{table}"').collect()


def gee_groups(seen: int, once: int, sampled: int, rows: float) -> float:
    """The distinct values among ``rows`` rows of which ``sampled`` were drawn, holding
    ``seen`` distinct values, ``once`` of them seen once: the GEE estimator (Charikar,
    Chaudhuri, Motwani, Narasayya, PODS 2000), sqrt(rows / sampled) x once + (seen - once),
    whose ratio error is within sqrt(rows / sampled) of the truth. Where most sampled rows
    are values seen once the key is near unique, and those scale with the rows (rows /
    sampled x once): GEE's square root would put a unique key's groups at sqrt(rows x
    sampled). At most ``rows``, at least ``seen``."""
    if sampled <= 0:
        return rows
    ratio = max(rows, sampled) / sampled
    scale = ratio if once > UNIQUE_SHARE * sampled else math.sqrt(ratio)
    return min(max(rows, float(seen)), max(float(seen), scale * once + (seen - once)))


def _sampled(st: TableStats) -> bool:
    """Whether the data set has sampled rows."""
    return st.sample is not None and st.sample.num_rows > 0


JOIN_SAMPLE_ROWS = 16_384
"""Rows of each data set's sample a join runs on (evenly spaced): a key join of two 400,000-row
tables meets ~670 pairs in them, within 8%, for a quarter of the full samples' CPU."""


def met_interval(k: int) -> tuple[float, float]:
    """Where the mean of a count that came out ``k`` lies, 95% of the time (Poisson: k ± 2√k,
    the upper end widened for small counts; 0 to 4 for none met; exact bounds for 4 and 14
    met are 1.1-10.2 and 7.7-23.5, these 0-10.5 and 6.5-23.7)."""
    return max(0.0, k - 2.0 * math.sqrt(k)), k + 2.0 * math.sqrt(k + 1.0) + 2.0


UNIQUE_SHARE = 0.5
"""The share of sampled rows seen once above which a computed key is taken as near unique."""


def _cardenas(d: float, rows: float) -> float:
    """Distinct values among ``rows`` rows drawn from ``d`` equally likely ones (Cardenas)."""
    return d * (1.0 - (1.0 - 1.0 / d) ** rows) if d > 1 else 1.0


def _years_spanned(cs: Any) -> float | None:
    """The years a date or timestamp column's sketch spans, first to last; None for other
    types or an empty sketch."""
    if cs.kll is None or cs.kll.is_empty():
        return None
    lo, hi = (_year_of(v, cs.type) for v in (cs.kll.get_min_value(), cs.kll.get_max_value()))
    return None if lo is None or hi is None else float(hi - lo + 1)


def _year_of(v: float, t: pa.DataType) -> int | None:
    """The year of a date or timestamp column's value as its sketch holds it (days, or ticks of
    its unit); None for other types."""
    if pa.types.is_date32(t):
        return (_EPOCH + dt.timedelta(days=v)).year
    if pa.types.is_date64(t):
        return (_EPOCH + dt.timedelta(milliseconds=v)).year
    if pa.types.is_timestamp(t):
        per_s = {"s": 1, "ms": 1e3, "us": 1e6, "ns": 1e9}[t.unit]
        return (dt.datetime(1970, 1, 1) + dt.timedelta(seconds=v / per_s)).year
    return None


def _flatten(t: Any) -> Any:
    """Nested and (or or) merged into one level, so a column's comparisons meet; an or's
    equalities on one column become one IN list (they are disjoint: their shares add)."""
    if t[0] in ("and", "or"):
        parts = []
        for p in (_flatten(x) for x in t[1]):
            parts += p[1] if p[0] == t[0] else [p]
        return (t[0], _or_lists(parts) if t[0] == "or" else parts)
    if t[0] == "not":
        return ("not", _flatten(t[1]))
    return t


def _others_together(t: Any, cond: Any) -> Any:
    """An and's terms that neither sketch prices (``other``), joined into one condition the
    sample runs at once: two terms on one computed column (a cast's BETWEEN) are not
    independent, and the sample sees what they share."""
    if t[0] != "and" or sum(p[0] == "other" for p in t[1]) < 2:
        return t
    joined = type(cond)()
    joined.CopyFrom(cond)  # the and, its function reference and output type
    del joined.scalar_function.arguments[:]
    for p in t[1]:
        if p[0] == "other":
            joined.scalar_function.arguments.add().value.CopyFrom(p[1])
    return ("and", [p for p in t[1] if p[0] != "other"] + [("other", joined)])


def _or_lists(parts: list[Any]) -> list[Any]:
    by_col: dict[tuple[str, str], list[Any]] = {}
    for p in parts:
        if p[0] == "cmp" and p[3] == "=":
            by_col.setdefault((p[1], p[2]), []).append(p[4])
    out = [p for p in parts if not (p[0] == "cmp" and p[3] == "=" and len(by_col[(p[1], p[2])]) > 1)]
    out += [("in", t, c, list(dict.fromkeys(vs)), 1.0) for (t, c), vs in by_col.items() if len(vs) > 1]
    return out


JOIN_KINDS = {
    0: ("inner", ""), 1: ("inner", ""), 2: ("outer", "full"), 3: ("outer", "left"), 4: ("outer", "right"),
    5: ("semi", "left"), 6: ("anti", "left"), 7: ("single", "left"), 8: ("semi", "right"),
    9: ("anti", "right"), 10: ("single", "right"), 11: ("mark", "left"), 12: ("mark", "right"),
}  # fmt: skip
"""Substrait's join types (JoinRel.JoinType; 0, unspecified, as inner): (kind, the side kept)."""


_INT_BITS = {"i8": 8, "i16": 16, "i32": 32, "i64": 64}


def _widening(col: pa.DataType, to: Any) -> bool:
    """Whether casting a column of type ``col`` to Substrait type ``to`` keeps every value and
    their order: integers to wider integers, floats or decimals with room for them; decimals
    to decimals with as many digits each side of the point, or to a double; float to double."""
    kind = to.WhichOneof("kind")
    if pa.types.is_integer(col):
        if kind in _INT_BITS:
            return _INT_BITS[kind] > col.bit_width or (
                _INT_BITS[kind] == col.bit_width and pa.types.is_signed_integer(col)
            )
        digits = len(str(2**col.bit_width))
        return kind == "fp64" or (kind == "decimal" and to.decimal.precision - to.decimal.scale >= digits)
    if pa.types.is_decimal(col):
        if kind == "decimal":
            return (
                to.decimal.scale >= col.scale
                and to.decimal.precision - to.decimal.scale >= col.precision - col.scale
            )
        return kind == "fp64"
    return (pa.types.is_floating(col) and kind == "fp64") or (pa.types.is_float32(col) and kind == "fp32")


def _sampled_in(t: Any) -> bool:
    """Whether tree ``t`` holds an IN list priced from part of its values."""
    if t[0] == "in":
        return t[4] > 1.0
    if t[0] in ("and", "or"):
        return any(_sampled_in(p) for p in t[1])
    return t[0] == "not" and _sampled_in(t[1])


def _columns(t: Any) -> set[tuple[str, str]]:
    if t[0] in ("cmp", "in"):
        return {(t[1], t[2])}
    if t[0] in ("and", "or"):
        return set().union(*(_columns(p) for p in t[1]))
    if t[0] == "not":
        return _columns(t[1])
    return set()


def _interval(preds: list[tuple[str, Any]]) -> tuple[Any, bool, Any, bool, Any, list[Any]] | None:
    """(lo, lo inclusive, hi, hi inclusive, equal value, not-equal values) of a conjunction of
    comparisons on one column; None bounds are open, None overall when equalities contradict."""
    lo, lo_incl, hi, hi_incl = None, True, None, True
    eq, ne = None, []
    for op, v in preds:
        if op in (">", ">="):
            if lo is None or v > lo or (v == lo and op == ">"):
                lo, lo_incl = v, op == ">="
        elif op in ("<", "<="):
            if hi is None or v < hi or (v == hi and op == "<"):
                hi, hi_incl = v, op == "<="
        elif op == "=":
            if eq is not None and eq != v:
                return None
            eq = v
        else:
            ne.append(v)
    return lo, lo_incl, hi, hi_incl, eq, ne


_CMP = {">": pc.greater, ">=": pc.greater_equal, "<": pc.less, "<=": pc.less_equal, "=": pc.equal,
        "!=": pc.not_equal}  # fmt: skip


def _mask(col: Any, preds: list[tuple[str, Any]]) -> Any:
    """Where a sample's column meets the conjunction ``preds`` (op, domain value; or ("in",
    values)). Domain values become scalars of the column's type (a date's days a date)."""
    if pa.types.is_dictionary(col.type):
        col = pc.cast(col, col.type.value_type)
    m = None
    for op, v in preds:
        if op == "in":
            x = pc.is_in(col, value_set=_values(v, col.type))
        else:
            x = pc.fill_null(_CMP[op](col, _scalar(v, col.type)), False)
        m = x if m is None else pc.and_(m, x)
    return m


def _scalar(v: Any, t: pa.DataType) -> Any:
    """``v`` as a scalar of type ``t``; a number ``t`` cannot hold as it is (0.5 or 1e300
    against integers, which pyarrow truncates or refuses; 0.1 against float32) as a double, as
    DataFusion compares them."""
    try:
        s = pa.scalar(v, t)
        if not isinstance(v, float) or s.as_py() == v:
            return s
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        pass
    if isinstance(v, int | float) and not isinstance(v, bool):
        return pa.scalar(float(v))
    return v  # compared as it is


def _values(vs: list[Any], t: pa.DataType) -> pa.Array:
    try:
        return pa.array(vs, t)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return pa.array([x for x in (_scalar(v, t) for v in vs) if isinstance(x, pa.Scalar)], t)


def _tree_mask(t: Any, leaf: Callable[[str, str, Any], Any]) -> Any:
    """The rows of a sample where tree ``t`` holds, or None if it holds an "other" part;
    ``leaf(column, op, value)``: the sample's mask of one comparison (or ("in", values))."""
    if t[0] == "cmp":
        return leaf(t[2], t[3], t[4])
    if t[0] == "in":
        return leaf(t[2], "in", t[3]) if t[4] == 1.0 else None
    if t[0] == "not":
        m = _tree_mask(t[1], leaf)
        return None if m is None else pc.invert(m)
    if t[0] in ("and", "or"):
        parts = [_tree_mask(p, leaf) for p in t[1]]
        if any(p is None for p in parts):
            return None
        out = parts[0]
        for p in parts[1:]:
            out = pc.and_(out, p) if t[0] == "and" else pc.or_(out, p)
        return out
    return None


def _sample_session(table: str, st: TableStats, sample: pa.Table) -> Any:
    """A one-thread DataFusion session holding ``sample`` (the data set's, or spaced rows of
    it) as ``table``, kept with the data set's statistics."""

    def make() -> Any:
        ctx = plans.session(1)
        plans.register(ctx, {table: sample})
        return ctx

    return st.kept(("session", table, sample.num_rows), make)


def _bare_plan(plan: Any) -> tuple[Any, Any]:
    """A copy of ``plan`` (its extensions, their URNs, its version) with one empty root relation
    in place of its own: (the copy, that root)."""
    from substrait.plan_pb2 import Plan

    p = Plan()
    p.CopyFrom(plan)
    del p.relations[:]
    return p, p.relations.add().root


def _counting_plan(plan: Any, width: int) -> tuple[Any, Any]:
    """A :func:`_bare_plan` of one column, true, a row of its input (``width`` columns, which
    the caller sets): what ``plans.count_rows_in`` counts; (the plan, that input)."""
    p, root = _bare_plan(plan)
    top = root.input.project
    top.expressions.add().literal.boolean = True
    top.common.emit.output_mapping.append(width)
    root.names.append("hit")
    return p, top.input


def _run_on_sample(
    plan: Any, cond: Any, inp: _Rel, table: str, ctx: Any, sample: pa.Table, own: Any
) -> float:
    """Builds ``select * from table where cond`` as a Substrait plan and runs it in ``ctx``,
    which holds ``sample`` as ``table``: over ``own``, the plan's input of the condition's filter
    (:func:`_filter_input`), where given (computed columns, a projected cast, are computed as
    the plan does); else over the plan's own read of the table, its schema as the plan declares
    it, projected to the condition's input. PlanError where it cannot."""
    if own is not None:  # the plan's own input, computed columns and all: one column out
        counting, below = _counting_plan(plan, len(inp.cols))
        below.filter.input.CopyFrom(own)
        below.filter.condition.CopyFrom(cond)
        return plans.count_rows_in(ctx, counting.SerializeToString()) / sample.num_rows
    p, root = _bare_plan(plan)
    flt = root.input.filter
    names = [c.name for c in inp.cols]
    if any(c.table != table or c.name is None for c in inp.cols):
        raise plans.PlanError("the condition reads computed columns")
    if len(set(names)) < len(names):
        raise plans.PlanError("the condition reads a column twice under one name")
    read = flt.input.read
    read.named_table.names.append(table)
    declared = _read_schema(plan, table)
    if declared is None:
        read.base_schema.names.extend(names)
        for n in names:
            read.base_schema.struct.types.add().CopyFrom(plans.substrait_type(sample.schema.field(n).type))
        read.base_schema.struct.nullability = 2  # NULLABILITY_REQUIRED
        root.names.extend(names)
    else:
        read.base_schema.CopyFrom(declared)
        at = {f[0]: (i, f) for i, f in enumerate(plans.field_names(declared))}
        for n in names:
            read.projection.select.struct_items.add().field = at[n][0]
            root.names.extend(at[n][1])
        read.projection.maintain_singular_struct = True
    flt.condition.CopyFrom(cond)
    return plans.count_rows_in(ctx, p.SerializeToString()) / sample.num_rows


def _filter_input(plan: Any, cond: Any, table: str) -> Any:
    """The input of the plan's filter whose condition is ``cond`` or holds it (a term of an and),
    where that input reads ``table`` alone and nothing but reads, filters and projects; else
    None. Run on the sample, it computes the condition's columns as the plan does."""
    want = cond.SerializeToString(deterministic=True)
    for flt in plans.find(plan.relations[0].root, "FilterRel"):
        if not _holds(flt.condition, want):
            continue
        reads = plans.find(flt.input, "ReadRel")
        one = len(reads) == 1 and reads[0].named_table.names[-1:] == [table]
        if one and _rel_kinds(flt.input) <= {"read", "filter", "project"}:
            return flt.input
    return None


def _holds(e: Any, want: bytes) -> bool:
    """Whether expression ``e`` is the one serialized as ``want``, or an argument of it is."""
    if e.SerializeToString(deterministic=True) == want:
        return True
    if e.HasField("scalar_function"):
        return any(a.HasField("value") and _holds(a.value, want) for a in e.scalar_function.arguments)
    return False


_PLAIN = ("i64", "i32", "i16", "i8", "fp64", "fp32", "string")


def _plain_values(options: Any, picks: Any, cs: Any) -> list[Any] | None:
    """An IN list's picked values read fast where they are all plain literals of one kind
    (signed integers, floats, strings) that the column takes as they are; else None."""
    first = options[picks[0]]
    if not first.HasField("literal"):
        return None
    kind = first.literal.WhichOneof("literal_type")
    if kind not in _PLAIN or (kind != "string" and first.literal.type_variation_reference != 0):
        return None
    v0 = getattr(first.literal, kind)
    if cs.domain(v0) != v0 or type(cs.domain(v0)) is not type(v0):
        return None
    out = []
    for i in picks:
        lit = options[i].literal
        if lit.WhichOneof("literal_type") != kind:
            return None
        out.append(getattr(lit, kind))
    return out


def _literal(lit: Any) -> Any:
    """A Substrait literal as a Python value: numbers (unsigned variations unwrapped), strings,
    bytes, booleans, dates, Decimals, timestamps and times as stats.Ticks; None for a null or
    a kind not priced (intervals, lists, structs)."""
    kind = lit.WhichOneof("literal_type")
    if kind in ("i64", "i32", "i16", "i8"):
        v = getattr(lit, kind)
        bits = {"i8": 8, "i16": 16, "i32": 32, "i64": 64}[kind]
        return v + (1 << bits) if lit.type_variation_reference == 1 and v < 0 else v  # unsigned
    if kind in ("fp64", "fp32", "string", "boolean", "binary", "fixed_char", "var_char", "fixed_binary"):
        v = getattr(lit, kind)
        return v.value if kind == "var_char" else v
    if kind == "date":
        return _EPOCH + dt.timedelta(days=lit.date)
    if kind in ("precision_timestamp", "precision_timestamp_tz", "precision_time"):
        v = getattr(lit, kind)
        return Ticks(v.value, v.precision)
    if kind in ("timestamp", "timestamp_tz", "time"):
        return Ticks(getattr(lit, kind), 6)  # the deprecated kinds: microseconds
    if kind == "decimal":
        unscaled = int.from_bytes(lit.decimal.value, "little", signed=True)
        return decimal.Decimal(unscaled).scaleb(-lit.decimal.scale)
    return None


def _rel_kinds(rel: Any) -> set[str]:
    """The kinds of relation in ``rel``'s tree (subqueries in its expressions included)."""
    kind = rel.WhichOneof("rel_type")
    return {kind}.union(*(_rel_kinds(r) for r in plans.find(getattr(rel, kind), "Rel")))


def _read_schema(plan: Any, table: str) -> Any:
    """The base schema (a NamedStruct) of the plan's first read of ``table``, or None."""
    for read in plans.find(plan.relations[0].root, "ReadRel"):
        if read.HasField("named_table") and read.named_table.names[-1:] == [table]:
            return read.base_schema
    return None
