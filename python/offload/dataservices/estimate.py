"""Cardinality of a Substrait plan from the data sets' statistics (:mod:`.stats`): how many rows
and bytes the query's result will have, and why — without running it.

Per relation, in the plan's own tree:

* read: the data set's rows;
* filter: rows times the condition's selectivity. A condition is taken apart into and / or / not
  of comparisons ``column op literal`` (the literal brought to the column's domain: a date in
  days, a timestamp in ticks of the column's unit, a decimal by value) and of ``column IN
  (list)``. Comparisons on one column are reduced to one interval (``x > 0.5 and x > 0.7`` is
  ``x > 0.7``) priced with the column's KLL sketch (numbers, dates, timestamps, decimals);
  equalities with its count sketch (heavy, light and absent keys alike), or for floating-point
  columns its distinct count. An IN list, or an or of equalities on one column, is the sum of
  its equalities, over at most :data:`IN_VALUES` of them taken evenly from the list and scaled,
  at most 1. Columns are independent unless the sample says otherwise: for a conjunction over
  several columns the sample's joint selectivity over the product of its marginals is a
  correction factor, applied when it differs from 1 by more than three standard errors.
  Anything else (compute functions, column against column, casts) is measured on the sample;
  a condition that cannot run there either is given :data:`DEFAULT_SELECTIVITY`, and the step
  says so: an estimate never fails for a condition it cannot price;
* project, sort: rows unchanged; fetch: at most its count;
* aggregate: one row without grouping, else the groups' distinct count (HLL, thinned by the
  rows that reach it: Cardenas' formula), at most the input rows;
* join (inner, on equal keys): |L| |R| / max(distinct(L key), distinct(R key));
* set: a union all adds its inputs' rows, a union (distinct) too (an upper bound), an
  intersection takes the fewest, a minus the first input's;
* any other relation over one input keeps its rows, and the step says so.

Bytes are rows times the output row's width: a column's average width where the output is a
column, 8 bytes for a computed value.

Beside the result, the estimate counts the work on the way (:data:`WORK`), what the time models
need beyond sizes: the rows each function call runs on, cheap (comparisons, arithmetic), string
(like, substring, lower...) and heavy (sqrt, sin...) apart (plans.function_class), and the rows
reaching aggregates and sorts. A filter's condition
runs on the rows it reads (an ``and``'s later terms only on those its earlier ones kept, where
these are few); whatever sits above it only on the rows it keeps.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
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
PRE_SELECTION = 0.2
"""DataFusion's PRE_SELECTION_THRESHOLD: an ``and`` whose left side keeps at most this share of
a batch's rows evaluates its right side on those rows only."""


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
    """Where an output column of a relation comes from: a data set's column, or computed.
    ``cast``: a cast of that column projected below (DataFusion projects a cast a condition
    uses twice, as in a BETWEEN): its values are not the column's, so conditions on it are
    not priced by the column's sketches (the sample runs them)."""

    table: str | None
    name: str | None
    width: float = 8.0
    cast: bool = False
    values: float | None = None
    """A computed column's most distinct values, where known (the years of a date column)."""
    expr: Any = field(default=None, compare=False, repr=False)
    """A computed column's expression, over the columns ``over``: what a group-by on it is
    measured by on a sample (:meth:`_Ctx._group_source`)."""
    over: list[_Col] | None = field(default=None, compare=False, repr=False)


_GroupSource = tuple[str, Any, list[Any], bool, int]
"""Where an aggregate's computed keys are grouped on a sample (:meth:`_Ctx._group_source`): (data
set, relation, key expressions over it, whether it holds the plan's filters, its columns)."""
_NativeSource = tuple[str, bytes, list[bytes], bool, int]
"""A :data:`_GroupSource` as the native walk hands it over: the relation and keys as bytes."""
_NativeCol = tuple[str | None, str | None, bool, float | None]
"""A column as the native walk hands it to a callback: (data set, column, whether a cast of it,
its most distinct values where known); (None, None, False, values) where computed."""


@dataclass
class _Rel:
    rows: float
    cols: list[_Col]


def estimate(plan: Any, stats: Mapping[str, TableStats], index: plans.PlanIndex | None = None) -> Estimate:
    """The cardinality of ``plan`` (its bytes, or the parsed ``substrait.plan_pb2.Plan``: a
    caller that has parsed it saves the parse, 8 ms for a 100k-value IN list) over data sets
    with these statistics; ``index``: the parsed plan's, where the caller has it."""
    from substrait.plan_pb2 import Plan

    t0 = time.perf_counter()
    if isinstance(plan, Plan):
        p = plan
    else:
        p = Plan()
        p.ParseFromString(plan)
    ctx = _Ctx(p, stats, index)
    rel = ctx.rel(p.relations[0].root.input)
    width = sum(c.width for c in rel.cols)
    est = Estimate(rel.rows, rel.rows * width, ctx.steps, work=ctx.work)
    est.steps.append(f"result: {rel.rows:,.1f} rows x {width:g} B")
    est.seconds = time.perf_counter() - t0
    return est


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
) -> NativeEstimate | None:
    """:func:`estimate`, the plan's shape (:meth:`plans.PlanIndex.shape`) and its features by
    the native walk (``native``: the plan's ``offload._native.SubstraitPlan``, ``plan`` its
    bytes, ``reads`` its reads: ``plans.PlanInfo.reads``, ``stats`` every data set read), the
    conditions it does not price priced here as :func:`estimate` prices them; None where it
    does not model the plan (:func:`estimate` then answers). Equal to :func:`estimate` and
    ``timemodel.features`` (tested on generated plans); a walk of the plan in Python was a
    fifth of a decision's CPU, the features a tenth."""
    t0 = time.perf_counter()
    tables = [_plan_table(name, st) for name, st in stats.items()]
    ctx: list[_Ctx] = []  # made for the first condition the walk hands back, if any

    def made() -> _Ctx:
        if not ctx:
            ctx.append(_Ctx(None, stats, _Calls(native.names()), raw=plan))
        return ctx[0]

    def selectivity(cond: bytes, cols: list[_NativeCol], rows: float) -> tuple[float, list[str]]:
        return made().native_selectivity(cond, cols, rows)

    def groups(source: _NativeSource | None, rows: float) -> tuple[float | None, list[str]]:
        return made().native_groups(source, rows)

    got = native.estimate(tables, plans.native_classes(), selectivity, groups)
    if got is None:
        return None
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
            (c, cs.width_bytes, *kinds[c], distinct(c), cs.nulls, _years_spanned(cs))
            for c, cs in st.columns.items()
        ]
        rows = st.sample.num_rows if st.sample is not None else 0
        numeric = {c: got for c, cs in st.columns.items() if (got := _numeric(cs, st.sample)) is not None}
        return _native.PlanTable(name, st.rows, cols, rows, numeric)

    return st.kept(("native table", name), make)


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
    """:class:`plans.PlanIndex`'s ``calls`` for a plan read natively: each expression walked."""

    def __init__(self, names: dict[int, str]) -> None:
        self.names = names

    def calls(self, msg: Any) -> dict[str, int]:
        return plans.call_counts(msg, self.names)


class _Ctx:
    def __init__(
        self, plan: Any, stats: Mapping[str, TableStats], index: Any, raw: bytes | None = None
    ) -> None:
        self._plan, self._raw = plan, raw  # parsed, or its bytes until a condition runs on the sample
        self.stats = stats
        self.index = index or plans.PlanIndex(plan)
        self.fns = self.index.names
        self.steps: list[str] = []
        self.work = dict.fromkeys(WORK, 0.0)
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

    def rel(self, r: Any) -> _Rel:
        kind = r.WhichOneof("rel_type")
        if kind is None:
            raise plans.PlanError("cannot estimate an empty relation")
        node = getattr(r, kind)
        handler = getattr(self, f"_{kind}", None)
        if handler is None:
            if not node.HasField("input"):
                raise plans.PlanError(f"cannot estimate a {kind} relation")
            out = self.rel(node.input)
            self.steps.append(f"{kind}: {out.rows:,.1f} rows, taken unchanged (not estimated)")
        else:
            out = handler(node)
        if node.HasField("common") and node.common.HasField("emit"):
            cols = [
                out.cols[i] if i < len(out.cols) else _Col(None, None)
                for i in node.common.emit.output_mapping
            ]
            out = _Rel(out.rows, cols)
        return out

    def _read(self, r: Any) -> _Rel:
        name = r.named_table.names[-1]
        st = self.stats.get(name)
        if st is None:
            raise plans.PlanError(f"no statistics for data set {name!r}")
        names = [f[0] for f in plans.field_names(r.base_schema)]
        if r.HasField("projection"):
            names = [names[i.field] for i in r.projection.select.struct_items]
        self.steps.append(f"read {name}: {st.rows:,} rows")
        return _Rel(float(st.rows), [_Col(name, n, st.columns[n].width_bytes) for n in names])

    def _filter(self, r: Any) -> _Rel:
        inp = self.rel(r.input)
        self._condition_calls(r.condition, inp.rows, inp)
        sel = self.selectivity(r.condition, inp)
        self.steps.append(f"filter: selectivity {sel:.5f} -> {inp.rows * sel:,.1f} rows")
        cols = list(inp.cols)
        for i, k in self._pinned(r.condition):
            if 0 <= i < len(cols):
                c = cols[i]
                cols[i] = replace(c, values=k if c.values is None else min(c.values, k))
        return _Rel(inp.rows * sel, cols)

    def _pinned(self, e: Any) -> list[tuple[int, float]]:
        """The columns condition ``e`` holds to a few values, with how many: an equality with a
        literal one, an IN list of literals its length, an or of such on one column their sum,
        an and's terms each (an IN list's first PINNED_LOOK options read). A group-by on such a
        column has at most that many."""
        if e.HasField("singular_or_list"):
            lst = e.singular_or_list
            i = _plain_field(lst.value)
            ok = i is not None and all(o.HasField("literal") for o in lst.options[:PINNED_LOOK])
            return [(i, float(len(lst.options)))] if ok and i is not None else []
        if not e.HasField("scalar_function"):
            return []
        f = e.scalar_function
        name, args = self.fns.get(f.function_reference), [a.value for a in f.arguments]
        if name == "and":
            return [p for a in args for p in self._pinned(a)]
        if name == "equal" and len(args) == 2:
            a, b = args
            i = (
                _plain_field(a)
                if b.HasField("literal")
                else _plain_field(b)
                if a.HasField("literal")
                else None
            )
            return [] if i is None else [(i, 1.0)]
        if name == "or":
            terms = [self._pinned(a) for a in args]
            if not terms or not all(len(t) == 1 and t[0][0] == terms[0][0][0] for t in terms):
                return []
            return [(terms[0][0][0], sum(t[0][1] for t in terms))]
        return []

    def _project(self, r: Any) -> _Rel:
        inp = self.rel(r.input)
        self._calls(inp.rows, r.expressions)
        extra = [self._expr_col(e, inp) for e in r.expressions]
        return _Rel(inp.rows, inp.cols + extra)

    def _sort(self, r: Any) -> _Rel:
        inp = self.rel(r.input)
        self.work["sort_rows"] += inp.rows
        return inp

    def _fetch(self, r: Any) -> _Rel:
        inp = self.rel(r.input)
        count = _literal_int(r.count_expr) if r.HasField("count_expr") else None
        offset = _literal_int(r.offset_expr) if r.HasField("offset_expr") else 0
        rows = max(0.0, inp.rows - (offset or 0))
        if count is not None and count >= 0:
            rows = min(rows, float(count))
        self.steps.append(f"fetch: {rows:,.1f} rows")
        return _Rel(rows, inp.cols)

    def _aggregate(self, r: Any) -> _Rel:
        inp = self.rel(r.input)
        self._calls(inp.rows, [*r.grouping_expressions, *r.measures])
        self.work["aggregate_rows"] += inp.rows
        keys = [self._expr_col(e, inp) for e in r.grouping_expressions]  # the groupings refer to these
        counts = (self.fns.get(m.measure.function_reference) == "count" for m in r.measures)
        measures = [_Col(None, None, 8.0, values=count_values(inp.rows) if c else None) for c in counts]
        if any(self._textual(k) for k in keys):
            self.work["string_key_rows"] += inp.rows
        if not keys:
            self.steps.append("aggregate without grouping: 1 row")
            return _Rel(1.0, measures)
        sampled = None
        if any(k.table is None and k.values is None for k in keys):
            sampled = self._sample_groups(r, inp)
        groups = 1.0
        if sampled is not None:
            groups = sampled
        else:
            for k in keys:
                groups *= self._distinct(k, inp.rows)
        rows = min(groups, inp.rows)
        self.steps.append(f"aggregate: {rows:,.1f} groups")
        return _Rel(rows, keys + measures)

    def _join(self, r: Any) -> _Rel:
        """Inner on equal keys: |L| |R| / max(distinct keys), else the product; outer joins at
        least their kept side(s); a semi (anti) join the share of its side's keys found (not
        found) among the other side's keys, out of its key's whole domain (:func:`join_rows`), at
        most that side; single and mark joins that side's rows. Semi and anti joins give their
        side's columns, mark joins those and the mark."""
        left, right = self.rel(r.left), self.rel(r.right)
        cols = left.cols + right.cols
        keys = self._equi_keys(r.expression, len(left.cols)) if r.HasField("expression") else []
        residual = r.HasField("expression") and self._conjuncts(r.expression) > len(keys)
        kind, side = JOIN_KINDS.get(r.type, (f"type {r.type}", ""))
        if keys and any(self._textual(cols[i]) for k in keys for i in k):
            self.work["string_key_rows"] += left.rows + right.rows
        self.work["join_rows"] += left.rows + right.rows
        dl = dr = domain = math.nan
        if keys:
            dl = max(self._distinct(cols[keys[0][0]], left.rows), 1.0)
            dr = max(self._distinct(cols[keys[0][1]], right.rows), 1.0)
            kept = cols[keys[0][0]] if side == "left" else cols[keys[0][1]]
            domain = (
                max(self._distinct(kept, math.inf), 1.0) if kept.table else (dl if side == "left" else dr)
            )
        rows, how = join_rows(kind, side, left.rows, right.rows, dl, dr, residual, domain)
        self.steps.append(f"join ({how}")
        out = {"semi": [], "anti": [], "mark": [_Col(None, None, 1.0)]}.get(kind)
        if out is None:
            return _Rel(rows, cols)
        return _Rel(rows, (left.cols if side == "left" else right.cols) + out)

    def _set(self, r: Any) -> _Rel:
        """Union all (and union, as an upper bound): the inputs' rows added; intersection: the
        fewest; minus: the first input's (an upper bound)."""
        ins = [self.rel(i) for i in r.inputs]
        if not ins:
            raise plans.PlanError("cannot estimate a set relation without inputs")
        op = r.op  # SET_OP_MINUS_* 1, 2, 7; _INTERSECTION_* 3, 4, 8; _UNION_DISTINCT 5, _UNION_ALL 6
        if op in (1, 2, 7):
            rows, how = ins[0].rows, "minus: the first input's rows"
        elif op in (3, 4, 8):
            rows, how = min(i.rows for i in ins), "intersection: the fewest rows"
        else:
            rows, how = sum(i.rows for i in ins), "union: the inputs' rows added"
        self.steps.append(f"{how}, {rows:,.1f}")
        return _Rel(rows, ins[0].cols)

    def _cross(self, r: Any) -> _Rel:
        left, right = self.rel(r.left), self.rel(r.right)
        rows = left.rows * right.rows
        self.work["join_rows"] += left.rows + right.rows
        self.steps.append(f"cross join: {rows:,.1f} rows")
        return _Rel(rows, left.cols + right.cols)

    def _condition_calls(self, e: Any, rows: float, inp: _Rel) -> None:
        """Counts a filter condition's calls into the work, on the rows DataFusion runs them on:
        an ``and``'s later terms see only the rows its earlier ones kept when those are at most
        PRE_SELECTION of them, and every row otherwise; an ``or``'s terms see every row. (On this
        machine ``x >= 0.99 and y < 0.5 and z < 0.5`` costs a third of ``x >= 0.8 and ...``.)
        The terms' selectivities come from the same sketches as the filter's."""
        f = e.scalar_function if e.HasField("scalar_function") else None
        name = self.fns.get(f.function_reference) if f is not None else None
        if f is None or name not in ("and", "or") or len(f.arguments) < 2:
            self._calls(rows, [e])
            return
        self.work["cheap_rows"] += rows * (len(f.arguments) - 1)  # the and / or themselves
        kept = 1.0
        for a in f.arguments:
            self._condition_calls(a.value, rows * kept if kept <= PRE_SELECTION else rows, inp)
            if name == "and":
                kept *= self.selectivity(a.value, inp)

    def _calls(self, rows: float, exprs: Any) -> None:
        """Counts the function calls of ``exprs``, each run on ``rows`` rows, into the work."""
        for e in exprs:
            for cls, n in self.index.calls(e).items():
                self.work[f"{cls}_rows"] += rows * n

    # ------------------------------------------------------------------------ expressions

    def _expr_col(self, e: Any, inp: _Rel) -> _Col:
        if e.HasField("selection"):
            return inp.cols[e.selection.direct_reference.struct_field.field]
        if e.HasField("cast") and e.cast.input.HasField("selection"):
            c = inp.cols[e.cast.input.selection.direct_reference.struct_field.field]
            return _Col(c.table, c.name, c.width, cast=True)
        return _Col(None, None, 8.0, values=self._years(e, inp), expr=e, over=inp.cols)

    def _years(self, e: Any, inp: _Rel) -> float | None:
        """The years ``e`` can take where it is ``date_part('year', column)`` (``extract``) of a
        date or timestamp column: those its sketch's minimum and maximum span; else None."""
        f = e.scalar_function if e.HasField("scalar_function") else None
        if f is None or self.fns.get(f.function_reference) != "date_part" or len(f.arguments) != 2:
            return None
        part, arg = f.arguments[0].value, f.arguments[1].value
        year = part.HasField("literal") and part.literal.string.lower() == "year"
        if not (year and arg.HasField("selection")):
            return None
        c = inp.cols[arg.selection.direct_reference.struct_field.field]
        if c.table is None or c.name is None or c.cast:
            return None
        return _years_spanned(self.stats[c.table].columns[c.name])

    def _equi_keys(self, e: Any, n_left: int) -> list[tuple[int, int]]:
        if not e.HasField("scalar_function"):
            return []
        f = e.scalar_function
        name = self.fns.get(f.function_reference)
        args = [a.value for a in f.arguments]
        if name == "and":
            return [k for a in args for k in self._equi_keys(a, n_left)]
        if name == "equal" and all(a.HasField("selection") for a in args):
            i, j = (a.selection.direct_reference.struct_field.field for a in args)
            return [(min(i, j), max(i, j))] if (i < n_left) != (j < n_left) else []
        return []

    def _conjuncts(self, e: Any) -> int:
        """The terms of an and (nested ands flattened); 1 for any other expression."""
        if e.HasField("scalar_function") and self.fns.get(e.scalar_function.function_reference) == "and":
            return sum(self._conjuncts(a.value) for a in e.scalar_function.arguments)
        return 1

    def _textual(self, c: _Col) -> bool:
        """Whether ``c`` is a data set's string or binary column (a computed one: not known)."""
        if c.table is None or c.name is None:
            return False
        return variable_width(self.stats[c.table].columns[c.name].type)

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

    def _sample_groups(self, r: Any, inp: _Rel) -> float | None:
        """The groups of aggregate ``r``, whose keys are computed (``substr(code, 1, 2)``,
        ``date_trunc('month', d)``), over ``inp``, measured on a data set's sample
        (:meth:`_group_source`): the keys grouped there, and the groups of all the rows
        estimated from how often each was seen (:func:`gee_groups`); over the table unfiltered,
        thinned to ``inp.rows`` (Cardenas). None, and a step saying why, where no one data set's
        sample can give them or none of its rows reach the keys."""
        return self._measured_groups(self._group_source(r, inp), inp.rows)

    def _measured_groups(self, source: _GroupSource | None, into: float) -> float | None:
        """:meth:`_sample_groups` from where the keys are grouped (:meth:`_group_source`), over
        the aggregate's input of ``into`` rows."""
        if source is None:
            self.steps.append("groups of computed keys: not over one data set's columns, taken as unique")
            return None
        table, rel, exprs, filtered, width = source
        st = self.stats.get(table)
        if st is None or st.sample is None or st.sample.num_rows == 0:
            self.steps.append(f"groups of computed keys: no rows sampled of {table}, taken as unique")
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
            self.steps.append(
                f"groups of computed keys not measurable on the sample ({counts}), taken as unique"
            )
            return None
        seen, once, rows = counts
        if rows == 0:
            self.steps.append(f"groups of computed keys: none of {sample.num_rows:,} sampled rows reach them")
            return None
        groups = gee_groups(seen, once, rows, into if filtered else float(st.rows))
        over = "" if filtered else f" of {table}, unfiltered"
        if not filtered:
            groups = _cardenas(groups, into)
        over += "" if made else " (by an earlier query)"
        self.steps.append(
            f"groups of computed keys measured on {rows:,} sampled rows{over}: {seen:,} seen, {once:,} once; "
            f"{groups:,.1f} of {into:,.1f} rows"
        )
        return groups

    def _group_source(self, r: Any, inp: _Rel) -> _GroupSource | None:
        """Where ``r``'s keys can be grouped on a sample: (data set, relation, key expressions
        over it, whether the relation holds the plan's filters, its columns). The aggregate's
        own input where it is one data set's reads, filters and projects; else a read of the one
        data set all the keys' columns come from, the keys rewritten onto its columns
        (:meth:`_onto_table`); else None."""
        reads = plans.find(r.input, "ReadRel")
        tables = {x.named_table.names[-1] for x in reads if x.named_table.names}
        if len(reads) == 1 and len(tables) == 1 and _rel_kinds(r.input) <= {"read", "filter", "project"}:
            return tables.pop(), r.input, list(r.grouping_expressions), True, len(inp.cols)
        from substrait.algebra_pb2 import Rel

        onto = [self._onto_table(e, inp.cols) for e in r.grouping_expressions]
        tables = {t for t, _ in filter(None, onto)}
        if None in onto or len(tables) != 1:
            return None
        table = tables.pop()
        exprs = [e for _, e in filter(None, onto)]
        rel = Rel()
        rel.read.named_table.names.append(table)
        rel.read.base_schema.CopyFrom(_read_schema(self.plan, table))
        return table, rel, exprs, False, len(plans.field_names(rel.read.base_schema))

    def _onto_table(self, e: Any, cols: list[_Col]) -> tuple[str, Any] | None:
        """``e`` over ``cols`` rewritten onto the columns of the one data set it reads, as the
        plan reads that data set (a computed column's expression put in its place): (data set,
        expression); None where it reads several, a cast column or a subquery."""
        from substrait.algebra_pb2 import Expression

        out = Expression()
        out.CopyFrom(e)
        table: str | None = None
        for m in [out, *plans.walk(out)]:  # walk gives what is under a message, not itself
            kind = m.DESCRIPTOR.name
            if kind.endswith("Rel") or kind == "Subquery":
                return None
            if kind != "Expression" or not m.HasField("selection"):
                continue
            at = m.selection.direct_reference.struct_field.field
            if not m.selection.HasField("root_reference") or not 0 <= at < len(cols):
                return None
            c = cols[at]
            if c.expr is not None and c.over is not None:
                inner = self._onto_table(c.expr, c.over)
                if inner is None or table not in (None, inner[0]):
                    return None
                table = inner[0]
                m.CopyFrom(inner[1])
                continue
            declared = _read_schema(self.plan, c.table) if c.table is not None else None
            names = [f[0] for f in plans.field_names(declared)] if declared is not None else []
            if c.name not in names or c.cast or table not in (None, c.table):
                return None
            table = c.table
            m.selection.direct_reference.struct_field.field = names.index(c.name)
        return None if table is None else (table, out)

    def _group_counts(
        self, rel: Any, width: int, exprs: list[Any], table: str, st: TableStats, sample: pa.Table
    ) -> Any:
        """(groups seen, groups seen once, rows) of ``exprs`` over ``rel`` (``width`` columns)
        run on ``sample``; the error's first line where DataFusion cannot run it."""
        from substrait.plan_pb2 import Plan

        p = Plan()
        p.CopyFrom(self.plan)  # extensions, their URNs, the version
        del p.relations[:]
        root = p.relations.add().root
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
        if st.sample is None or st.sample.num_rows == 0:
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
    if st.sample is None or st.sample.num_rows == 0:
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


UNIQUE_SHARE = 0.5
"""The share of sampled rows seen once above which a computed key is taken as near unique."""


PINNED_LOOK = 1000
"""An IN list's options read to see they are literals (a 100,000-value list is not walked)."""


def _plain_field(e: Any) -> int | None:
    """The input column a selection reads where it is a plain one: a direct struct field of the
    input, no child, no outer reference."""
    if not e.HasField("selection"):
        return None
    sel = e.selection
    field_ = sel.direct_reference.struct_field
    plain = sel.HasField("root_reference") and sel.direct_reference.HasField("struct_field")
    return field_.field if plain and not field_.HasField("child") else None


def count_values(rows: float) -> float:
    """The most distinct values a count over groups of ``rows`` rows in all takes: k distinct
    counts add up to at least 0 + 1 + ... + (k - 1) rows, so k(k - 1) / 2 <= rows. What a
    group-by on a count (TPC-H q13's ``c_count``) can give, where the sample cannot measure it."""
    return float(math.floor((1.0 + math.sqrt(1.0 + 8.0 * max(rows, 0.0))) / 2.0))


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


def join_rows(
    kind: str,
    side: str,
    left: float,
    right: float,
    dl: float,
    dr: float,
    residual: bool = False,
    domain: float = math.nan,
) -> tuple[float, str]:
    """Rows of a join of ``left`` and ``right`` rows with ``dl`` and ``dr`` distinct keys (NaN:
    no equal keys), and the step's text after "join (": see :meth:`_Ctx._join`. A semi or anti
    join's side finds the share of its key's whole domain (``domain``: the key column's distinct
    values in its table, where it is one) that the other side holds: its own filters do not
    choose which keys the other side has (TPC-H q22: the customers without orders, a third of
    all, were 0 with the filtered customers' keys as the domain). ``residual``:
    the join's condition has terms beside the equal keys (TPC-H q21's ``l3.l_suppkey <>
    l1.l_suppkey``); a semi or anti join's key then finds a match only where one of its m
    matches (the other side's rows per key) passes them, each at a default selectivity:
    1 - (1 - 1/3)^m."""
    keyed = not math.isnan(dl)
    product = left * right
    inner = product / max(dl, dr) if keyed else product
    if kind == "inner" and keyed:
        return inner, f"inner): {left:,.1f} x {right:,.1f} / {max(dl, dr):,.1f} distinct keys"
    if kind == "inner":
        return inner, f"inner, no equal keys): cross product {inner:,.1f}"
    if kind == "outer":
        rows = max(inner, {"left": left, "right": right, "full": max(left, right)}[side])
        kept = "larger" if side == "full" else side
        return rows, f"{side} outer): at least the {kept} side's rows, {rows:,.1f}"
    if not side:
        return product, f"{kind}): the product, {product:,.1f}"
    own, mine, theirs, other = (left, dl, dr, right) if side == "left" else (right, dr, dl, left)
    if kind in ("semi", "anti") and keyed:
        found = min(1.0, theirs / (mine if math.isnan(domain) else max(mine, domain)))
        past = ""
        if residual:
            passes = 1.0 - (1.0 - DEFAULT_SELECTIVITY) ** max(1.0, other / theirs)
            found *= passes
            past = f" ({passes:.3f} past the other conditions: {DEFAULTED} per pair)"
        share = found if kind == "semi" else 1.0 - found
        return own * share, f"{side} {kind}): {share:.3f} of the {side} side's rows{past}, {own * share:,.1f}"
    return own, f"{side} {kind}): at most the {side} side's rows, {own:,.1f}"


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


def _run_on_sample(
    plan: Any, cond: Any, inp: _Rel, table: str, ctx: Any, sample: pa.Table, own: Any
) -> float:
    """Builds ``select * from table where cond`` as a Substrait plan and runs it in ``ctx``,
    which holds ``sample`` as ``table``: over ``own``, the plan's input of the condition's filter
    (:func:`_filter_input`), where given (computed columns, a projected cast, are computed as
    the plan does); else over the plan's own read of the table, its schema as the plan declares
    it, projected to the condition's input. PlanError where it cannot."""
    from substrait.plan_pb2 import Plan

    p = Plan()
    p.CopyFrom(plan)  # extensions, their URNs, the version
    del p.relations[:]
    root = p.relations.add().root
    if own is not None:  # the plan's own input, computed columns and all: one column out
        top = root.input.project
        top.expressions.add().literal.boolean = True
        top.common.emit.output_mapping.append(len(inp.cols))
        root.names.append("hit")
        top.input.filter.input.CopyFrom(own)
        top.input.filter.condition.CopyFrom(cond)
        return plans.count_rows_in(ctx, p.SerializeToString()) / sample.num_rows
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


def _rel_kinds(rel: Any) -> set[str]:
    """The kinds of relation in ``rel``'s tree (subqueries in its expressions included)."""
    kind = rel.WhichOneof("rel_type")
    return {kind}.union(*(_rel_kinds(r) for r in plans.find(getattr(rel, kind), "Rel")))


def _holds(e: Any, want: bytes) -> bool:
    """Whether expression ``e`` is the one serialized as ``want``, or an argument of it is."""
    if e.SerializeToString(deterministic=True) == want:
        return True
    if e.HasField("scalar_function"):
        return any(a.HasField("value") and _holds(a.value, want) for a in e.scalar_function.arguments)
    return False


def _read_schema(plan: Any, table: str) -> Any:
    """The base schema (a NamedStruct) of the plan's first read of ``table``, or None."""
    for read in plans.find(plan.relations[0].root, "ReadRel"):
        if read.HasField("named_table") and read.named_table.names[-1:] == [table]:
            return read.base_schema
    return None


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


def _literal_int(e: Any) -> int | None:
    if e.HasField("literal"):
        v = _literal(e.literal)
        return int(v) if isinstance(v, int | float) else None
    return None
