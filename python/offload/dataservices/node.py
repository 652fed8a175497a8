"""A near-data node: an Arrow Flight server that owns data sets and answers queries given as
Substrait plans, in one of two ways (seed 003, slides 26-31):

* ``offload``: the node runs the plan and ships only the result;
* ``pushback``: the node ships the columns the plan reads, and the host runs the plan.

The protocol is Flight's own. A query is a ``FlightDescriptor.for_command`` holding a JSON
request (:func:`.wire.request`); ``get_flight_info`` checks it and answers with one endpoint per
stream to fetch (one for ``offload``, one per table read for ``pushback``), each ticket a JSON
request the node can run without remembering anything. The last chunk of every stream carries
the node's timings as app_metadata. Data sets are uploaded with ``do_put`` or registered from
files under the node's data directory (action ``register``); ``list_flights`` lists them and
``get_flight_info`` on a path describes one.

``auto`` is decided by the node's time models (:mod:`.timemodel`), or where the estimate or a
model cannot answer, by a stated fallback. A node learns as it serves: every query, either way,
becomes samples (its own stage times, and the host's its client sends back with ``observe``), and
its models are refitted on a thread of its own within a CPU share (:class:`_Learner`); the
prediction error per stage is in ``status`` and in the Prometheus text of ``metrics``.

A node may host services beside its data sets (the particle flows of :mod:`offload.flows`): a
:data:`Service` registers its actions, the put paths it takes and the tickets it answers with
:meth:`Node.handle_action`, :meth:`Node.handle_put` and :meth:`Node.handle_get`. The node
knows them by name only, so this package imports none of them.

Safe by default: the node binds loopback unless told otherwise, and every call must carry the
node's bearer token (``authorization: Bearer <token>``). Errors sent to a peer name the problem
(unknown data set, unreadable plan, path outside the data directory) and never include file
contents.
"""

from __future__ import annotations

import functools
import hmac
import ipaddress
import itertools
import json
import math
import os
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

from offload.dataservices import engines, plans, tablefiles, wire
from offload.dataservices import timemodel as TM
from offload.dataservices.estimate import DEFAULTED, native_estimate, prepare
from offload.dataservices.stats import TableStats

ActionHandler = Callable[[bytes], Any]
"""An action's body in, its answer out (sent as JSON)."""
PutHandler = Callable[[list[str], flight.MetadataRecordBatchReader, flight.FlightMetadataWriter], None]
"""A ``do_put`` to a path that starts with the handler's head: the whole path, the batches, the
writer of the acknowledgements."""
GetHandler = Callable[[dict[str, Any]], pa.Table]
"""A ticket holding the handler's key (its version checked) in, the table to stream out."""
Service = Callable[["Node"], Any]
"""Something a node hosts beside its data sets: called once with the node, it registers its
handlers (``offload node serve`` hosts the particle flows: :class:`offload.flows.network.FlowService`)."""


@dataclass
class Dataset:
    """A data set the node owns: its table, where it came from, and its column statistics."""

    name: str
    table: pa.Table
    source: str
    stats: TableStats
    version: int = 0
    """New for every add and append on the node: what was decided over the data set before holds
    no longer."""
    replaced: int | None = None
    """The rows of the data set of that name this one replaced (None: it replaced none)."""
    path: Path | None = None
    """Its file in the node's spool, which engines memory-map (:class:`engines.Spool`)."""
    integrity: str = "uploaded"
    """What reading its file could check (``tablefiles.integrity``: "verified: page checksums"
    or "not verifiable: ..."), or "uploaded" for rows that came from no file."""
    schema: pa.Schema = field(init=False, repr=False)
    """The table's schema, one object (``table.schema`` makes a new one each time: what is kept
    per schema, as the features' column kinds, is kept per data set)."""
    columns: frozenset[str] = field(init=False, repr=False)
    """Its columns' names (every plan is checked against them)."""

    def __post_init__(self) -> None:
        self.schema = self.table.schema
        self.columns = frozenset(self.schema.names)

    def describe(self, with_stats: bool = False) -> dict[str, Any]:
        out = {
            "name": self.name,
            "rows": self.table.num_rows,
            "bytes": self.table.nbytes,
            "columns": self.table.schema.names,
            "source": self.source,
            "integrity": self.integrity,
            "stats_s": round(self.stats.seconds, 4),
        }
        if self.replaced is not None:
            out["replaced"] = self.replaced
        if with_stats:
            out["stats"] = self.stats.describe()
        return out


@dataclass
class NodeConfig:
    """How a node runs. ``host``: bind address (loopback unless ``allow_remote``); ``threads``:
    DataFusion partitions for offloaded queries; ``data_dir``: the only place ``register`` reads."""

    token: str
    host: str = "127.0.0.1"
    port: int = 0
    threads: int = 1
    data_dir: Path | None = None
    allow_remote: bool = False
    name: str = "node"
    stats: dict[str, float] = field(
        default_factory=lambda: {
            "queries": 0,
            "errors": 0,
            "decisions": 0,
            "decisions_reused": 0,
            "fallbacks": 0,
            "decision_cpu_s": 0.0,
        }
    )
    """Counters (``status``, ``metrics``): queries streamed, errors, ``auto`` decisions, those
    reused (the same plan decided before: :meth:`Node.explain`), those that fell back
    (:class:`timemodel.Fallback`), and the decisions' thread CPU seconds."""
    budget: dict[str, Any] = field(default_factory=dict)
    """What the node's budget (budget.apply, link.shape) did: reported by ``status``."""
    models: Any = None
    """timemodel.Models for the decision (None: ``auto`` falls back until online samples fit some)."""
    system: str = "host"
    """This node's system type in the models (its profile's name)."""
    batch_rows: int = 65_536
    batch_bytes: int = 4 << 20
    """The largest record batch a node sends, in rows and in Arrow bytes (whichever binds first):
    a stream of bounded batches keeps memory bounded on both sides and lets the first rows
    arrive before the last are read (a loaded file is one chunk of all its rows)."""
    adapt: bool = True
    """Learn online (:class:`timemodel.Adaptation`): every query served becomes samples, and the
    models are refitted in the background."""
    adapt_every: int = 25
    adapt_keep: int = 2000
    adapt_cpu_share: float = 0.05
    """Refit after this many new samples, keep this many recent ones, and spend at most this
    share of the time on refits."""
    seed: int = 0
    """The refits' seed: the same samples give the same models."""
    query_timeout_s: float = 120.0
    """The longest an offloaded query may run on the node (waiting for an engine included); it
    is then stopped and its client told so (``serve --query-timeout``; its default follows the
    node's CPU budget: :func:`serving.default_query_timeout`)."""
    drain_s: float = 10.0
    """At shutdown, how long queries running may go on before they are stopped."""
    engines: int = 2
    """Engine processes that run offloaded queries (:mod:`.engines`): a runaway query holds one,
    the others serve other clients."""
    verified_only: bool = False
    """Refuse a file whose pages carry no checksums (``serve --verified-only``), as a ``register``
    asking ``"verified_only": true`` does."""
    warm_engines: bool = True
    """Start an engine with the node (serving starts it once the budget holds the process, so
    that the engine is held to it too)."""
    learn_file: Path | None = None
    """Where the online samples are kept across restarts: read when the node starts (then
    refitted on), rewritten (temp file and rename) after each refit. A training file: it can be
    given to ``--models`` too. None: what the node learned goes with it."""


@functools.cache
def _warm_estimator() -> None:
    """Has the estimator's and the features' first run happen now, once a process (their
    modules imported, DataFusion's functions made ready): the node's first ``auto`` decision
    took 21-44 ms of CPU, the next ones 1-2 ms."""
    t = pa.table({"x": pa.array([0.25, 0.5, 0.75]), "s": pa.array(["a", "b", "c"])})
    sql = "select count(*) from w where sin(x) > 0.5 and s like 'a%' and x < 0.7"
    plan = plans.to_substrait(sql, {"w": t.schema})
    stats = {"w": TableStats.of(t)}
    info = plans.inspect(plan)
    native_estimate(info.native, plan, stats, info.reads)  # handing a condition back to Python


DECISIONS_KEPT = 256
"""Decisions a node keeps for plans asked again (a dashboard's query, a retry)."""


SWITCH_MARGIN = 0.25
"""How much faster refitted models must find the other way before a plan's kept way changes: a
refit moves near-ties back and forth (the models' median error is 6-16% a stage), and a
choice that flips with every refit is wrong half the time on one of them."""


def _settled(before: dict[str, Any], now: dict[str, Any]) -> dict[str, Any]:
    """The decision ``now`` (newly refitted models) for a plan decided ``before``: its way, or
    ``before``'s where both were decided by models, they differ, and the new models find the
    kept way less than SWITCH_MARGIN slower (``kept`` says so, and why)."""
    old, new = before.get("decision"), now.get("decision")
    if old is None or new is None or before.get("way") == now.get("way") or "uncertain" in now:
        return now
    way = before["way"]
    kept_s, other_s = new[f"{way}_s"], new[f"{now['way']}_s"]
    if kept_s > (1 + SWITCH_MARGIN) * other_s:
        return now
    why = (f"kept {way}: the refitted models find {now['way']} {100 * (1 - other_s / kept_s):.0f}% faster, "
           f"under the {100 * SWITCH_MARGIN:.0f}% a change needs; {now['why']}")  # fmt: skip
    return now | {"way": way, "why": why, "kept": True}


def _fell_back(out: dict[str, Any], fb: TM.Fallback) -> dict[str, Any]:
    out["way"], out["why"], out["fallback"] = fb.way, fb.why, fb.as_dict()
    return out


class _Recent:
    """The values last put or got, at most ``size`` of them, by key (the least recently used
    goes first); safe from every Flight thread."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._values: OrderedDict[Any, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Any) -> Any:
        """The value of ``key``, or None."""
        with self._lock:
            value = self._values.get(key)
            if value is not None:
                self._values.move_to_end(key)
            return value

    def put(self, key: Any, value: Any) -> Any:
        """Keeps ``value`` for ``key`` and gives it back."""
        with self._lock:
            self._values[key] = value
            self._values.move_to_end(key)
            while len(self._values) > self._size:
                self._values.popitem(last=False)
        return value


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _TokenCheck(flight.ServerMiddlewareFactory):
    def __init__(self, token: str) -> None:
        self._want = f"Bearer {token}".encode()

    def start_call(self, info: flight.CallInfo, headers: dict[str, list[Any]]) -> None:
        given = headers.get("authorization", [])
        for v in given:
            if hmac.compare_digest(v.encode() if isinstance(v, str) else bytes(v), self._want):
                return None
        if any((v if isinstance(v, str) else bytes(v).decode(errors="replace")).strip() not in ("", "Bearer")
               for v in given):  # fmt: skip
            raise flight.FlightUnauthenticatedError(
                f"{wire.WRONG_TOKEN}: the bearer token given is not this node's"
            )
        raise flight.FlightUnauthenticatedError(
            f"{wire.NO_TOKEN}: this node needs its bearer token (authorization header)"
        )


class Node(flight.FlightServerBase):
    """The Flight server of one node; it serves from construction until :meth:`shutdown`. Each of
    ``services`` is called with the node once its own actions are in place."""

    def __init__(self, config: NodeConfig, services: Sequence[Service] = ()) -> None:
        if not config.token:
            raise ValueError("a node needs a token")
        if not is_loopback(config.host) and not config.allow_remote:
            raise ValueError(
                f"refusing to listen on {config.host}: a node binds loopback unless allow_remote is set "
                "(the token then travels in clear text; put it behind TLS or a private network)"
            )
        self.config = config
        self._datasets: dict[str, Dataset] = {}
        self._lock = threading.Lock()
        self._actions: dict[str, tuple[str, ActionHandler]] = {}
        """Action name → (what it does and takes, for list_actions; its handler)."""
        self._puts: dict[str, PutHandler] = {}
        """First element of a put path → its handler (other paths are data set uploads)."""
        self._gets: dict[str, GetHandler] = {}
        """A ticket's key → its handler (other tickets are queries and scans)."""
        self._own_actions()
        for service in services:
            service(self)
        self._ids = itertools.count(1)
        self._active, self._last_active = 0, 0.0
        self._schemas = _Recent(256)
        """Result schemas of offloaded plans, by plan and input schemas."""
        self._planners = _Recent(8)
        """DataFusion sessions holding empty tables, by input schemas, that plan them."""
        self._versions = itertools.count(1)
        self._decisions = _Recent(DECISIONS_KEPT)
        """Decisions by plan, data sets' versions and link, each with the models it was made with."""
        self._spool = engines.Spool(f"{config.name}-{os.getpid()}")
        self.engines = engines.Pool(config.engines, config.threads)
        self._draining: float | None = None
        """Once shutting down: when the queries still running are stopped (monotonic)."""
        super().__init__(  # serving from here on: every handler is in place
            f"grpc://{config.host}:{config.port}", middleware={"auth": _TokenCheck(config.token)}
        )
        if config.warm_engines:
            self.engines.warm()
        self.learner = _Learner(self) if config.adapt else None
        if config.models is not None:
            TM.warm(config.models, config.system)
        _warm_estimator()

    def shutdown(self) -> None:
        """Stops serving: no new calls; queries running may go on for the drain time
        (``NodeConfig.drain_s``), then are stopped (their engines killed); then the learner's
        thread, the engines and the spool go."""
        self._draining = time.monotonic() + max(0.0, self.config.drain_s)
        super().shutdown()
        if self.learner is not None:
            self.learner.stop()
        self.engines.close()
        self._spool.close()

    # ------------------------------------------------------------------------------ handlers

    def handle_action(self, name: str, what: str, handler: ActionHandler) -> None:
        """Routes action ``name`` to ``handler``; ``what`` is what list_actions says of it."""
        if name in self._actions:
            raise ValueError(f"the node has an action {name!r} already")
        self._actions[name] = (what, handler)

    def handle_put(self, head: str, handler: PutHandler) -> None:
        """Routes a ``do_put`` whose path starts with ``head`` (no data set's name) to ``handler``."""
        if head in self._puts or _is_name(head):
            raise ValueError(f"put head {head!r} is taken or could be a data set's name")
        self._puts[head] = handler

    def handle_get(self, key: str, handler: GetHandler) -> None:
        """Routes a ``do_get`` whose ticket holds ``key`` to ``handler``."""
        if key in self._gets or key in ("scan", "way", "plan"):
            raise ValueError(f"ticket key {key!r} is taken")
        self._gets[key] = handler

    def _own_actions(self) -> None:
        def register(body: bytes) -> dict[str, Any]:
            args = wire.json_object(body, "register")
            replace = args.get("replace", True) is not False  # absent: replace, as a put to [name]
            checks = {k: args.get(k) is True for k in ("verified_only", "rewrite")}
            name, path = str(args.get("name", "")), str(args.get("path", ""))
            return self.register_file(name, path, replace, **checks).describe()

        def drop(body: bytes) -> dict[str, Any]:
            with self._lock:
                ds = self._datasets.pop(body.decode(), None)
            if ds is not None:
                self._spool.drop(ds.path)
            return {"dropped": ds is not None}

        own: list[tuple[str, str, ActionHandler]] = [
            ("register", 'load a file of the data directory: {"name": ..., "path": ..., "replace": '
             'true (the default) or false (refuse a name taken), "verified_only": refuse a file without '
             'page checksums, "rewrite": rewrite such a file with them first}', register),
            ("drop", "drop a data set: its name", drop),
            ("describe", "a data set's rows, bytes, columns, source and statistics: its name",
             lambda body: self.dataset(body.decode()).describe(with_stats=True)),
            ("estimate", "a plan's estimated result rows and bytes, and why: the plan's bytes",
             self.estimate),
            ("explain", "the estimate, both ways' predicted times and the choice: the plan's bytes",
             self.explain),
            ("status", "the node's name, threads, data sets and counters", lambda _: self.status()),
            ("observe", 'a query\'s host stages, to learn from: {"q": its id, "way": ..., "rows": ...,'
             ' "times": {stage: seconds}}', self._observe),
            ("metrics", "counters and prediction errors as Prometheus text", lambda _: self.metrics()),
            ("refit", "refit the time models now on every sample so far; the adaptation's status after",
             lambda _: self._refit_now()),
        ]  # fmt: skip
        for name, what, handler in own:
            self.handle_action(name, what, handler)

    # ------------------------------------------------------------------------------ data sets

    def add(self, name: str, table: pa.Table, source: str = "upload", replace: bool = True) -> Dataset:
        """Adds a data set and sketches its columns. One of that name already there is replaced
        where ``replace`` (its rows are then in ``Dataset.replaced``), else refused: checked
        before the sketching and again as the data set is put in place."""
        check_name(name)
        if not replace:
            self._refuse_existing(name)
        table = tablefiles.plain_layouts(table)  # view layouts as their plain forms
        ds = Dataset(name, table.combine_chunks(), source, TableStats.of(table), next(self._versions))
        prepare(name, ds.stats)  # what the first decision over it would make
        ds.path = self._keep(ds)
        with self._lock:
            old = self._datasets.get(name)
            if old is None or replace:
                self._datasets[name] = ds
        if old is not None and not replace:
            self._spool.drop(ds.path)
            raise self._exists(old)
        ds.replaced = old.table.num_rows if old is not None else None
        if old is not None:
            self._spool.drop(old.path)
        return ds

    def _keep(self, ds: Dataset) -> Path:
        """``ds``'s table written to the spool, for the engines; a disk that cannot take it is a
        Flight error saying so."""
        try:
            return self._spool.put(ds.name, ds.version, ds.table)
        except (OSError, pa.ArrowException) as e:
            raise flight.FlightServerError(
                f"{self.config.name} cannot keep data set {ds.name!r} for its engines in "
                f"{self._spool.path}: {plans.first_line(e)}"
            ) from None

    def _refuse_existing(self, name: str) -> None:
        with self._lock:
            old = self._datasets.get(name)
        if old is not None:
            raise self._exists(old)

    def _exists(self, old: Dataset) -> flight.FlightServerError:
        return flight.FlightServerError(
            f"data set {old.name!r} exists on {self.config.name} ({old.table.num_rows:,} rows, from "
            f"{old.source}): give --replace to replace it, or another name"
        )

    def append(self, name: str, table: pa.Table) -> Dataset:
        """Appends rows to a data set; its statistics take them in (no rebuild)."""
        ds = self.dataset(name)
        table = tablefiles.plain_layouts(table)
        if table.schema != ds.table.schema:
            raise flight.FlightServerError(
                f"appended schema {table.schema.names} differs from {name!r}'s {ds.table.schema.names}"
            )
        with self._lock:
            ds.stats.append(table)
            ds.table = pa.concat_tables([ds.table, table]).combine_chunks()
            ds.schema = ds.table.schema
            ds.version = next(self._versions)
            old, ds.path = ds.path, self._keep(ds)
        self._spool.drop(old)
        prepare(name, ds.stats)  # the statistics grew: what decisions kept is made again
        return ds

    def explain(self, plan: bytes, info: plans.PlanInfo | None = None) -> dict[str, Any]:
        """What the node expects of ``plan`` and would do: the estimate, the query's features,
        both ways' predicted stages and the choice, and the choice's thread CPU seconds. Where
        the estimate or a model cannot answer, the choice falls back (``fallback`` says why and
        by what rule: :class:`timemodel.Fallback`); ``auto`` never fails for that. The same plan
        asked again over the same data sets (not appended to since), with the same models and link,
        reuses its decision (``reused``; the last DECISIONS_KEPT); asked again after the models
        were refitted, it keeps its way unless the new models find the other clearly faster
        (:func:`_settled`)."""
        c0 = time.thread_time()
        info = info or self._check_plan(plan)
        key = self._decision_key(plan, info)
        models = self.config.models
        kept = self._decisions.get(key)
        if kept is not None and kept[0] is models:  # the same plan over the same data and models
            return self._decided(dict(kept[1]) | {"reused": True}, c0)
        out = self._decide(plan, info, models)
        if kept is not None:
            out = _settled(kept[1], out)
        self._decisions.put(key, (models, out))
        return self._decided(dict(out), c0)

    def _decision_key(self, plan: bytes, info: plans.PlanInfo) -> tuple[Any, ...]:
        link = self.config.budget.get("link") or {}
        versions = tuple((t, self.dataset(t).version) for t in info.reads)
        return wire.plan_key(plan), versions, link.get("rate_mbit"), link.get("delay_ms")

    def _decide(self, plan: bytes, info: plans.PlanInfo, models: Any) -> dict[str, Any]:
        """:meth:`explain`'s decision, made (not counted)."""
        out: dict[str, Any] = {"estimate": None, "features": None}
        try:
            est, f = self._features(plan, info)
        except Exception as e:  # the estimator failed (a shape or type it lacks): fall back
            return _fell_back(
                out, self._fallback(plan, info, None, f"the estimate failed ({plans.first_line(e)})")
            )
        out["estimate"], out["features"] = est, f
        if models is None or self.config.system not in models.systems():
            reason = f"no time models for {self.config.system!r} on this node"
            return _fell_back(out, self._fallback(plan, info, est, reason))
        t0 = time.perf_counter()
        try:
            d = TM.decide(models, self.config.system, f, TM.TransferLink.of(self.config.budget.get("link")))
        except Exception as e:  # a stage never learned, a model that cannot answer: fall back
            reason = f"the time models cannot answer ({plans.first_line(e)})"
            return _fell_back(out, self._fallback(plan, info, est, reason))
        out["decision"] = d.as_dict() | {"seconds": time.perf_counter() - t0}
        out["way"], out["why"] = d.way, d.why
        beyond = TM.beyond_training(models, self.config.system, f)
        if beyond:
            out["beyond_training"] = beyond
            out["why"] += f"; beyond the training, priced per row and byte: {'; '.join(beyond)}"
        unpriced = [s for s in est["steps"] if DEFAULTED in s]
        if unpriced:
            self._decide_for_the_worst(out, d, plan, info, models, unpriced)
        return out

    def _decide_for_the_worst(
        self,
        out: dict[str, Any],
        d: TM.Decision,
        plan: bytes,
        info: plans.PlanInfo,
        models: Any,
        unpriced: list[str],
    ) -> None:
        """Where a condition could be priced neither by the sketches nor on the sample (it got
        a default selectivity), the estimate may be far off: both ways are also predicted
        with the result at its bound from the plan (every row through the unpriced
        conditions), and the way whose worse case is faster is taken; ``why`` says so
        (``uncertain`` lists the steps). An unbounded result takes pushback, whose bytes are
        the columns read whatever the conditions keep."""
        est, f = out["estimate"], out["features"]
        rows = TM.rows_bound(plan, {t: float(r) for t, (r, _) in self._read_sizes(info).items()})
        scale = rows / max(est["rows"], 1.0) if math.isfinite(rows) else math.inf
        out["uncertain"] = unpriced
        say = f"{len(unpriced)} condition(s) not priced (a default selectivity): "
        if not math.isfinite(scale):
            out["way"] = "pushback"
            out["why"] = f"{say}the result has no bound: pushback, whose bytes are known"
            return
        worst = dict(f) | {"out_rows": rows, "out_bytes": est["bytes"] * scale,
                           "out_string_bytes": f.get("out_string_bytes", 0.0) * scale}  # fmt: skip
        link = TM.TransferLink.of(self.config.budget.get("link"))
        w = TM.decide(models, self.config.system, worst, link)
        offload, pushback = max(d.offload_s, w.offload_s), max(d.pushback_s, w.pushback_s)
        out["way"] = "offload" if offload <= pushback else "pushback"
        out["decision"]["worst_case"] = w.as_dict()
        out["why"] = (
            f"{say}{out['way']}, the faster in the worse case of the estimate and its bound "
            f"({rows:,.0f} rows): "
            f"offload {offload * 1e3:.1f} ms, pushback {pushback * 1e3:.1f} ms; as estimated: {d.why}"
        )

    def _decided(self, out: dict[str, Any], c0: float) -> dict[str, Any]:
        """``out`` with the thread CPU its decision took (or finding it kept), counted."""
        out["decision_cpu_s"] = time.thread_time() - c0
        with self._lock:
            self.config.stats["decisions"] += 1
            self.config.stats["decisions_reused"] += bool(out.get("reused"))
            self.config.stats["fallbacks"] += "fallback" in out
            self.config.stats["decision_cpu_s"] += out["decision_cpu_s"]
        return out

    def _features(self, plan: bytes, info: plans.PlanInfo) -> tuple[dict[str, Any], dict[str, Any]]:
        """The plan's estimate and its features, as dicts, by the native walk (whatever it
        raises passes: a plan it does not model is a PlanError saying what)."""
        stats = {t: self.dataset(t).stats for t in info.reads}
        got = native_estimate(info.native, plan, stats, info.reads)
        return got.estimate.as_dict(), got.features

    def _read_sizes(
        self, info: plans.PlanInfo, sets: dict[str, Dataset] | None = None
    ) -> dict[str, tuple[int, float]]:
        """Each data set read: its rows, and the bytes of the columns read (rows x widths)."""
        out = {}
        for t, cols in info.reads.items():
            st = (sets[t] if sets is not None else self.dataset(t)).stats
            out[t] = (st.rows, st.rows * sum(st.columns[c].width_bytes for c in cols))
        return out

    def _fallback(
        self, plan: bytes, info: plans.PlanInfo, est: dict[str, Any] | None, reason: str
    ) -> TM.Fallback:
        """The way that moves fewer bytes: pushback the columns read; offload its estimated
        result, or without an estimate a bound of it (the plan's rows bound, the output
        schema's width, strings as wide as the widest read). Nothing here may raise: a bound
        that cannot be had is unbounded, and pushback runs the plan on the host."""
        sizes = self._read_sizes(info)
        back = float(sum(b for _, b in sizes.values()))
        if est is not None:
            return TM.Fallback(reason, float(est["bytes"]), back, "the estimated result")
        try:
            rows = TM.rows_bound(plan, {t: float(r) for t, (r, _) in sizes.items()})
            widest = max(
                (
                    self.dataset(t).stats.columns[c].width_bytes
                    for t, cols in info.reads.items()
                    for c in cols
                ),
                default=8.0,
            )
            width = TM.row_width(self._result_schema(plan, info), widest)
            bound = rows * width if math.isfinite(rows) else math.inf
        except Exception:  # no bound is a bound too: unbounded
            bound = math.inf
        return TM.Fallback(reason, bound, back, "a bound of the result from the plan")

    def estimate(self, plan: bytes) -> dict[str, Any]:
        """The plan's estimated result (rows, bytes, the steps, the estimating time): the
        decision's."""
        info = self._check_plan(plan)
        stats = {t: self.dataset(t).stats for t in info.reads}
        try:
            return native_estimate(info.native, plan, stats, info.reads).estimate.as_dict()
        except plans.PlanError as e:
            raise flight.FlightServerError(str(e)) from None

    def dataset(self, name: str) -> Dataset:
        with self._lock:
            ds = self._datasets.get(name)
            known = sorted(self._datasets) if ds is None else []  # named only in the error
        if ds is None:
            raise flight.FlightServerError(
                f"unknown data set {name!r} on {self.config.name}; known: {', '.join(known) or 'none'}"
            )
        return ds

    def datasets(self) -> list[Dataset]:
        with self._lock:
            return list(self._datasets.values())

    def register_file(
        self,
        name: str,
        relative: str,
        replace: bool = True,
        verified_only: bool = False,
        rewrite: bool = False,
    ) -> Dataset:
        """Loads a Parquet or Arrow IPC file under the data directory as data set ``name``:
        ``relative`` to it, or absolute and inside it (a client makes its own relative paths
        absolute). Pages are checksum-verified (:mod:`.tablefiles`); errors name the file as
        given and carry none of its contents. A name taken is refused unless ``replace``. A
        file without page checksums is rewritten with them where ``rewrite``, else refused where
        ``verified_only`` (or the node's own), else loaded and said to be not verifiable."""

        check_name(name)
        if not replace:
            self._refuse_existing(name)
        root = self.config.data_dir
        if root is None:
            raise flight.FlightServerError("this node has no data directory: upload with do_put instead")
        path = (root / relative).resolve()
        if not path.is_relative_to(root.resolve()):
            raise flight.FlightServerError(f"{relative!r} is outside the node's data directory")
        if not path.is_file():
            raise flight.FlightServerError(f"{relative!r}: no such file in the node's data directory")
        shown = repr(relative)
        try:
            kind = tablefiles.integrity(path)
            if kind != tablefiles.VERIFIED and rewrite:
                tablefiles.rewrite_checksummed(path)
                kind = tablefiles.integrity(path)
            refused = kind != tablefiles.VERIFIED and (verified_only or self.config.verified_only)
            table = None if refused else tablefiles.read(path, name=shown)
        except (ValueError, OSError) as e:  # DamagedFile too; none carries the file's contents
            raise flight.FlightServerError(str(e).replace(str(path), shown)) from None
        if table is None:
            raise flight.FlightServerError(f"{shown}: {unverifiable(kind)}")
        ds = self.add(name, table, source=str(relative), replace=replace)
        ds.integrity = kind
        return ds

    # ------------------------------------------------------------------------------- Flight

    def list_flights(self, context: flight.ServerCallContext, criteria: bytes) -> Iterator[flight.FlightInfo]:
        for ds in self.datasets():
            yield self._describe(ds)

    def _describe(self, ds: Dataset) -> flight.FlightInfo:
        desc = flight.FlightDescriptor.for_path(ds.name)
        return flight.FlightInfo(ds.table.schema, desc, [], ds.table.num_rows, ds.table.nbytes)

    def get_flight_info(
        self, context: flight.ServerCallContext, descriptor: flight.FlightDescriptor
    ) -> flight.FlightInfo:
        self._activity(+1)
        try:
            return self._flight_info(descriptor)
        finally:
            self._activity(-1)

    def _activity(self, delta: int) -> None:
        """Counts requests and streams in progress (the learner works while there are none)."""
        with self._lock:
            self._active += delta
            self._last_active = time.monotonic()

    def idle(self, for_s: float) -> bool:
        """Whether nothing has been asked of or streamed by the node for ``for_s`` seconds. A
        stream its client never read does not end, so nothing heard of for a minute is idle."""
        with self._lock:
            quiet = time.monotonic() - self._last_active
            return (self._active == 0 or quiet > 60.0) and quiet >= for_s

    def _flight_info(self, descriptor: flight.FlightDescriptor) -> flight.FlightInfo:
        if descriptor.descriptor_type == flight.DescriptorType.PATH:
            return self._describe(self.dataset(descriptor.path[0].decode()))
        req = self._parse(descriptor.command)
        plan = req["plan"]
        info = self._check_plan(plan)
        meta, f = b"", None
        if req["way"] == "auto":
            t0 = time.perf_counter()
            ex = self.explain(plan, info)
            ex["decision_wall_s"] = time.perf_counter() - t0  # what the host's request time holds of it
            req["way"], f = ex["way"], ex["features"]
            meta = json.dumps(ex).encode()
        key = f"{wire.plan_key(plan)}.{next(self._ids)}"  # this query's id: its streams and observe
        if self.learner is not None:
            features = f and TM.QueryFeatures(**f)
            self.learner.submit(("query", key, plan, info, features, self.learner.epoch))
        if req["way"] == "offload":
            ticket = wire.request(plan, "offload", req["compression"], key)
            schema = self._result_schema(plan, info)
            return flight.FlightInfo(schema, descriptor, [flight.FlightEndpoint(ticket, [])], -1, -1,
                                     app_metadata=meta)  # fmt: skip
        endpoints = []
        for t, cols in info.reads.items():
            endpoints.append(flight.FlightEndpoint(wire.scan_ticket(t, cols, req["compression"], key), []))
        first, cols = next(iter(info.reads.items()))
        schema = self.dataset(first).table.select(cols).schema if len(info.reads) == 1 else pa.schema([])
        return flight.FlightInfo(schema, descriptor, endpoints, -1, -1, app_metadata=meta)

    def do_get(self, context: flight.ServerCallContext, ticket: flight.Ticket) -> flight.FlightDataStream:
        req = self._parse(ticket.ticket)
        for key, handler in self._gets.items():
            if key in req:
                return flight.RecordBatchStream(handler(req))
        opts = pa.ipc.IpcWriteOptions(compression=req.get("compression"))
        self.config.stats["queries"] += 1
        self._activity(+1)
        try:
            return self._query_stream(req, opts, context)
        except BaseException:
            self._activity(-1)
            raise

    def _query_stream(
        self, req: dict[str, Any], opts: pa.ipc.IpcWriteOptions, context: flight.ServerCallContext
    ) -> flight.FlightDataStream:
        """A query's stream (offload: run by an engine, :meth:`_run`) or a scan's (pushback);
        its end counts the activity down."""
        if "scan" in req:
            table = self.dataset(req["scan"]).table
            missing = [c for c in req["columns"] if c not in table.schema.names]
            if missing:
                raise flight.FlightServerError(f"data set {req['scan']!r} has no column {', '.join(missing)}")
            t0 = time.perf_counter()
            scanned = table.select(req["columns"])
            done = self._learn(str(req.get("q", "")), None)
            return _stream(
                scanned.schema, iter(scanned.to_batches()), t0, opts, "pushback", self._bounds(), done=done
            )
        info = self._check_plan(req["plan"])
        t0 = time.perf_counter()
        schema, batches = self._run(req["plan"], info, context)
        # planning and starting the engine are engine time too
        done = self._learn(str(req.get("q") or wire.plan_key(req["plan"])), req["plan"])
        return _stream(schema, batches, t0, opts, "offload", self._bounds(), time.perf_counter() - t0, done)

    def _run(
        self, plan: bytes, info: plans.PlanInfo, context: flight.ServerCallContext
    ) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
        """``plan`` run by one of the node's engines: stopped at the query's time limit, when its
        client goes away (the call cancelled) or when the node's drain time is over; each is a
        Flight error saying so and what to do."""
        tables = {t: str(self.dataset(t).path) for t in info.reads}
        limit = self.config.query_timeout_s
        deadline = time.monotonic() + limit

        def stop() -> str | None:
            if context.is_cancelled():
                return "its client went away"
            if self._draining is not None and time.monotonic() >= self._draining:
                return "the node is shutting down"
            return None

        try:
            schema, batches = self.engines.execute(plan, tables, stop, deadline)
        except (engines.EngineError, engines.Stopped) as e:
            raise self._stopped(e, limit) from None
        return schema, self._stoppable(batches, limit)

    def _stoppable(self, batches: Iterator[pa.RecordBatch], limit: float) -> Iterator[pa.RecordBatch]:
        try:
            yield from batches
        except (engines.EngineError, engines.Stopped) as e:
            raise self._stopped(e, limit) from None

    def _stopped(self, e: Exception, limit: float) -> flight.FlightError:
        """A query's end before its result, in words for its client (counted as an error)."""
        self.config.stats["errors"] += 1
        name = self.config.name
        if isinstance(e, engines.EngineError) and "died" in str(e):
            return flight.FlightServerError(f"{name} could not finish the query: {e}; run it again")
        if isinstance(e, engines.EngineError):
            return flight.FlightServerError(str(e))
        if str(e) == "its time limit":
            return flight.FlightServerError(
                f"{name} stopped the query at its time limit of {limit:g} s (node serve --query-timeout): "
                "narrow the query (a filter, a limit), or give the node a longer limit"
            )
        return flight.FlightServerError(f"{name} stopped the query: {e}; run it again once the node is back")

    def _learn(self, key: str, plan: bytes | None) -> Callable[[dict[str, Any] | None], None]:
        """What a stream calls at its end (None: it did not finish): its timings go to the
        learner, by query id, and the node's activity counts down."""
        learner = self.learner
        epoch = learner.epoch if learner is not None else 0

        def done(meta: dict[str, Any] | None) -> None:
            self._activity(-1)
            if meta is not None and learner is not None and key:
                learner.submit(("node", key, plan, meta, epoch, learner.epoch))

        return done

    def list_actions(self, context: flight.ServerCallContext) -> list[tuple[str, str]]:
        return [(name, what) for name, (what, _) in self._actions.items()]

    def do_action(self, context: flight.ServerCallContext, action: flight.Action) -> Iterator[bytes]:
        body = action.body.to_pybytes() if action.body is not None else b""
        if action.type not in self._actions:
            raise flight.FlightServerError(f"unknown action {action.type!r}; see list_actions")
        yield json.dumps(self._actions[action.type][1](body)).encode()

    def do_put(
        self,
        context: flight.ServerCallContext,
        descriptor: flight.FlightDescriptor,
        reader: flight.MetadataRecordBatchReader,
        writer: flight.FlightMetadataWriter,
    ) -> None:
        path = (
            [p.decode() for p in descriptor.path]
            if descriptor.descriptor_type == flight.DescriptorType.PATH
            else []
        )
        if path and path[0] in self._puts:
            self._puts[path[0]](path, reader, writer)
            return
        if len(path) == 1:
            ds = self._add_upload(path[0], reader.read_all())
        elif len(path) == 2 and path[1] == "new":  # refused before the rows are read
            check_name(path[0])
            self._refuse_existing(path[0])
            ds = self._add_upload(path[0], reader.read_all(), replace=False)
        elif len(path) == 2 and path[1] == "append":
            ds = self.append(path[0], reader.read_all())
        else:
            raise flight.FlightServerError(
                "upload to a path descriptor: [name] to add or replace, [name, 'new'] to add only, "
                "[name, 'append'] to append"
            )
        writer.write(json.dumps(ds.describe()).encode())

    def _add_upload(self, name: str, table: pa.Table, replace: bool = True) -> Dataset:
        """An uploaded data set: its file's integrity, where the client sent it in the schema's
        metadata, is taken off the table and kept with it (refused under ``verified_only``)."""
        from offload.dataservices import tablefiles

        meta = dict(table.schema.metadata or {})
        kind = meta.pop(tablefiles.INTEGRITY_KEY, b"uploaded").decode(errors="replace")[:200]
        if self.config.verified_only and kind.startswith("not verifiable"):
            raise flight.FlightServerError(f"the uploaded file is {unverifiable(kind)}")
        ds = self.add(name, table.replace_schema_metadata(meta or None), replace=replace)
        ds.integrity = kind
        return ds

    def status(self) -> dict[str, Any]:
        out = {
            "name": self.config.name,
            "system": self.config.system,
            "models": sorted(self.config.models.systems()) if self.config.models is not None else [],
            "threads": self.config.threads,
            "budget": self.config.budget,
            "datasets": [d.describe() for d in self.datasets()],
            "counters": dict(self.config.stats) | {"queries_stopped": self.engines.killed},
            "query_timeout_s": self.config.query_timeout_s,
            "engines": self.engines.size,
        }
        if self.learner is not None:
            out["adaptation"] = self.learner.status()
        return out

    def metrics(self) -> str:
        """The counters and the adaptation's prediction errors as Prometheus text."""
        adapt = self.learner.status() if self.learner is not None else {}
        return TM.prometheus(adapt, dict(self.config.stats), self.config.name)

    def _refit_now(self) -> dict[str, Any]:
        if self.learner is None:
            raise flight.FlightServerError(
                f"{self.config.name} does not learn (adapt is off): nothing to refit"
            )
        self.learner.refit_now()
        return self.learner.status()

    def _observe(self, body: bytes) -> dict[str, Any]:
        """A client's host stages of a query it ran (NodeClient.query sends them), joined with
        the node's own by the query's id, in the background."""
        args = wire.json_object(body, "observation")
        times = args.get("times")
        key, way = str(args.get("q", ""))[:64], args.get("way")
        if not isinstance(times, dict) or way not in wire.WAYS or not key:
            raise flight.FlightServerError(
                'an observation is {"q": key, "way": way, "times": {stage: seconds}}'
            )
        clean = {
            str(k): float(v)
            for k, v in times.items()
            if k in TM.STAGES and isinstance(v, int | float) and math.isfinite(v) and 0 <= v < 1e5
        }
        rows = args.get("rows")
        if self.learner is None:
            return {"learning": False}
        self.learner.submit(("host", key, way, rows if isinstance(rows, int) else None, clean))
        return {"learning": True}

    # ------------------------------------------------------------------------------ helpers

    def _result_schema(self, plan: bytes, info: plans.PlanInfo) -> pa.Schema:
        """The schema of an offloaded plan's result, kept for the 256 plans last asked; planned
        in a session kept per set of input schemas (the 8 last used), which a new plan's
        FlightInfo paid to make: 1.3 ms of CPU at full core, 0.15 ms now."""
        schemas = tuple((t, self.dataset(t).table.schema) for t in info.reads)
        key = (wire.plan_key(plan), schemas)
        schema = self._schemas.get(key)
        if schema is not None:
            return schema
        ctx = self._planners.get(schemas)
        if ctx is None:
            ctx = self._planners.put(schemas, plans.planner(dict(schemas)))
        try:
            schema = plans.result_schema(ctx, plan)
        except plans.PlanError as e:
            raise flight.FlightServerError(str(e)) from None
        return self._schemas.put(key, schema)

    def cores(self) -> float:
        """The CPU this node may use, in cores: its quota where its budget set one, else its
        engine threads."""
        cpu = self.config.budget.get("cpu", {}) if isinstance(self.config.budget, dict) else {}
        if cpu.get("quota_us") and cpu.get("period_us"):
            return float(cpu["quota_us"]) / float(cpu["period_us"])
        return float(max(1, self.config.threads))

    def _bounds(self) -> tuple[int, int]:
        return max(1, self.config.batch_rows), max(1, self.config.batch_bytes)

    def _parse(self, raw: bytes) -> dict[str, Any]:
        return wire.parse(raw, ("scan", *self._gets))

    def _check_plan(self, plan: bytes) -> plans.PlanInfo:
        try:
            info = plans.inspect(plan)
        except plans.PlanError as e:
            self.config.stats["errors"] += 1
            raise flight.FlightServerError(str(e)) from None
        for t, cols in info.reads.items():
            have = self.dataset(t).columns
            missing = [c for c in cols if c not in have]
            if missing:
                raise flight.FlightServerError(f"data set {t!r} has no column {', '.join(missing)}")
        return info


def _stream(
    schema: pa.Schema,
    batches: Iterator[pa.RecordBatch],
    t0: float,
    opts: pa.ipc.IpcWriteOptions,
    way: str,
    bounds: tuple[int, int],
    setup_s: float = 0.0,
    done: Callable[[dict[str, Any] | None], None] | None = None,
) -> flight.GeneratorStream:
    """The batches, each cut to at most ``bounds`` = (rows, Arrow bytes), then an empty batch
    whose app_metadata holds the node's timings: seconds in the engine (planning, then
    producing batches) and in all (producing, serializing and sending). ``done`` gets the
    timings (and the Arrow bytes sent) before the client can see the stream end, or None
    where the stream ends otherwise (an error, a client gone)."""

    def gen() -> Iterator[Any]:
        engine = setup_s
        rows = nbytes = 0
        finished = False
        try:
            it = iter(batches)
            while True:
                t = time.perf_counter()
                b = next(it, None)
                engine += time.perf_counter() - t
                if b is None:
                    break
                rows += b.num_rows
                nbytes += b.nbytes
                yield from bounded(b, *bounds)
            meta = {"way": way, "engine_s": engine, "node_s": time.perf_counter() - t0, "rows": rows}
            finished = True
            if done is not None:
                done(meta | {"bytes": nbytes})
            yield pa.RecordBatch.from_pylist([], schema=schema), json.dumps(meta).encode()
        finally:
            if not finished and done is not None:
                done(None)

    return flight.GeneratorStream(schema, gen(), options=opts)


def bounded(b: pa.RecordBatch, max_rows: int, max_bytes: int) -> Iterator[pa.RecordBatch]:
    """``b`` as zero-copy slices of at most ``max_rows`` rows and, at its average row width,
    ``max_bytes`` bytes (at least one row each)."""
    width = b.nbytes / max(1, b.num_rows)
    step = max(1, min(max_rows, int(max_bytes // max(width, 1e-9))))
    if b.num_rows <= step:
        yield b
        return
    for start in range(0, b.num_rows, step):
        yield b.slice(start, step)


_LINK_BOUND = frozenset(
    (
        "node_offload",
        "node_stream_out",
        "node_pushback",
        "node_stream_in",
        "host_receive_out",
        "host_receive_in",
    )
)
"""The stages a shaped link may have held back: the node's streams (they hold its sending) and
the host's receiving, which is its fetch beyond the node's stream: where the node's socket
buffers took the stream's tail faster than the link carried it, that is the link draining them
(learned as the host's own, it made adapted models price offload 1.1-1.9x too slow on links of
100 Mbit/s and 1 Gbit/s, the link counted twice)."""


def unverifiable(kind: str) -> str:
    """Why a file without page checksums is refused, and what to do, after its name."""
    return (f"{kind} (changed bytes in a page would load as wrong values): rewrite it with them "
            "(`offload node load --rewrite-checksummed`), or load it without --verified-only")  # fmt: skip


def _is_name(name: str) -> bool:
    return 0 < len(name) <= 128 and all(c.isalnum() or c in "_-." for c in name)


def check_name(name: str) -> None:
    """A data set's (or a hosted flow's) name: 1-128 letters, digits, _ - . (a Flight error if not)."""
    if not _is_name(name):
        raise flight.FlightServerError(f"bad data set name {name[:40]!r}: use 1-128 letters, digits, _ - .")


class _Learner:
    """A node's online learning, on one thread of its own: it joins the node's side of each
    query (its stream timings, by the query id in its tickets) with the host's (the client's
    ``observe``), turns them into samples for :class:`timemodel.Adaptation`, and refits the
    node's models when that says so. The request path only enqueues (a bounded queue: when
    full, events are dropped and counted); features of queries that did not go through
    ``auto`` are computed here, off it."""

    PENDING = 256
    """Queries awaiting their other side; the oldest is taken as it is beyond this."""
    PENDING_S = 10.0
    """A query whose client has not observed it within this is taken with the node's side only."""
    IDLE_S, WAIT_S = 0.02, 1.0
    """The learner works once the node has been idle IDLE_S, or has waited WAIT_S for it (a
    node never idle still learns, an event a second)."""
    QUIET_S, SETTLE_S = 1.0, 10.0
    """A node idle QUIET_S is quiet: a refit's pause ends, and its CPU from then on is free. A
    refit due waits up to SETTLE_S for the node to be quiet before it starts (then paced)."""
    LINK_HELD = 0.5
    """A stream whose bytes take this share of its time or more on the node's shaped link may
    have waited on the link: its time is not the node's own, nor the host's receiving (the models
    learn both on an unshaped link and add the link beyond the node's stream), so those stages
    are not learned (:data:`_LINK_BOUND`; counted ``link_held``; the request is)."""
    BURST_S = 0.5
    """CPU seconds the learner may spend ahead of its share (NodeConfig.adapt_cpu_share of the
    node's cores, over the time it has run: samples and its own refits together, not those
    asked for); beyond it, queries are not made samples (counted ``skipped``) until the share
    catches up."""

    def __init__(self, node: Node) -> None:
        cfg = node.config
        base = cfg.models.samples if cfg.models is not None else []
        self.adaptation = TM.Adaptation(base, cfg.system, keep=cfg.adapt_keep, every=cfg.adapt_every,
                                        cpu_share=cfg.adapt_cpu_share, seed=cfg.seed)  # fmt: skip
        self._node = node
        self._fitted: TM.Models | None = cfg.models
        """The models the base samples came from, or this learner's last refit."""
        self._queue: queue.Queue[tuple[Any, ...]] = queue.Queue(maxsize=4096)
        self._pending: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._stop = threading.Event()
        self.dropped = self.failed = self.skipped = 0
        self.sample_cpu_s = self.paced_cpu_s = 0.0
        """The learner's CPU on samples and on the refits it chose to run while the node was busy
        (refit_now is asked for; an idle node's CPU is free)."""
        self._started = time.monotonic()
        self._deferred: list[tuple[Any, ...]] = []
        self.epoch = 0
        """Counts the starts and ends of the learner's fitting steps (odd: fitting now). A query
        that saw it change, or odd, ran beside a refit: its times are not the node's own, and
        it is not made samples (counted ``disturbed``)."""
        self.disturbed = self.link_held = 0
        if cfg.learn_file is not None and cfg.learn_file.exists():
            self.adaptation.load(TM.Models.read_samples(cfg.learn_file))
        self._thread = threading.Thread(target=self._run, name=f"{cfg.name}-learner", daemon=True)
        self._thread.start()

    def submit(self, event: tuple[Any, ...]) -> None:
        try:
            self._queue.put_nowait(event)
        except queue.Full:
            self.dropped += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def refit_now(self, timeout_s: float = 60.0) -> TM.Models:
        """Takes every event queued so far in, then refits at once (whatever the CPU budget)."""
        box: list[TM.Models] = []
        ready = threading.Event()
        self._queue.put(("refit", box, ready), timeout=timeout_s)
        if not ready.wait(timeout_s) or not box:
            raise TimeoutError(
                f"the learner of {self._node.config.name} did not refit within {timeout_s:g} s"
            )
        return box[0]

    def status(self) -> dict[str, Any]:
        out = self.adaptation.status() | {
            "pending": len(self._pending), "queued": self._queue.qsize(), "dropped": self.dropped,
            "failed": self.failed, "skipped": self.skipped, "disturbed": self.disturbed,
            "link_held": self.link_held,
            "sample_cpu_s": round(self.sample_cpu_s, 4),
        }  # fmt: skip
        current = self._node.config.models
        if current is not self._fitted:  # given since the last refit: the next one starts from these
            out["training_samples"] = len(current.samples) if current is not None else 0
        return out

    def _run(self) -> None:
        while not self._stop.is_set():
            self._take(0.1)
            if self._pending and self._node.idle(self.IDLE_S):
                self._expire(time.monotonic() - self.PENDING_S)
            if self.adaptation.due(time.monotonic(), self._node.config.models):
                try:
                    self._refit(paced=True)
                except TM.RefitStopped:
                    return
                for event in self._deferred:  # refit_now asked during the paced refit
                    self._handle(event)
                self._deferred.clear()

    def _take(self, timeout_s: float, during_refit: bool = False) -> None:
        """Handles the next event, waiting at most ``timeout_s`` for one."""
        try:
            event = self._queue.get(timeout=timeout_s)
        except queue.Empty:
            return
        if during_refit and event[0] == "refit":
            self._deferred.append(event)
            return
        if event[0] != "refit":
            self._wait_idle()
        try:
            self._handle(event)
        except Exception:  # a query that cannot become a sample is skipped, and counted
            self.failed += 1

    def _expire(self, before: float) -> None:
        """Takes the queries pending since ``before`` as they are (their clients do not observe)."""
        while self._pending and next(iter(self._pending.values()))["t"] < before:
            self._finish(self._pending.popitem(last=False)[1])

    def _pause(self, seconds: float) -> bool:
        """A paced refit's pause: queries keep becoming samples meanwhile; it ends early once the
        node has been idle QUIET_S (an idle node's CPU is free); False if stopping."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0 and not self._stop.is_set():
            if self._node.idle(self.QUIET_S):
                break
            self._take(min(left, 0.1), during_refit=True)
        self._wait_idle()
        return not self._stop.is_set()

    def _wait_idle(self) -> None:
        """Waits for the node to be idle IDLE_S, at most WAIT_S: on a node held to a CPU quota a
        Python thread working beside a query holds the interpreter's lock while throttled, and
        the query waits with it (+10 ms a query on a quarter core, measured)."""
        deadline = time.monotonic() + self.WAIT_S
        while not self._node.idle(self.IDLE_S) and time.monotonic() < deadline and not self._stop.is_set():
            self._stop.wait(self.IDLE_S)

    def _refit(self, paced: bool = False) -> TM.Models:
        """Refits on the base and online samples: ``paced``, within the node's CPU share while it
        runs (refit_now is not), and given up if the node stops meanwhile."""
        current = self._node.config.models
        if current is not self._fitted:  # models given since (a training file): their samples are the base
            self.adaptation.base = list(current.samples) if current is not None else []
        wait = self._pause if paced else None
        if paced and not self._pause(self.SETTLE_S):  # a refit starts once the node is quiet, if it soon is
            raise TM.RefitStopped("the node stopped before a refit")
        spent = self.adaptation.charged_cpu_s
        node = self._node
        models = self._fitted = self.adaptation.refit(wait, node.cores(), node.idle, self._fitting)
        if paced:
            self.paced_cpu_s += self.adaptation.charged_cpu_s - spent
        self._node.config.models = models  # one assignment: a decision sees the old or the new
        self._keep()
        return models

    def _fitting(self, on: bool) -> None:
        if on != (self.epoch % 2 == 1):
            self.epoch += 1

    def _keep(self) -> None:
        """Writes the online samples to the node's learn file, whole or not at all."""
        path = self._node.config.learn_file
        if path is not None:
            TM.Models(self.adaptation.learned()).save(path)

    def _handle(self, event: tuple[Any, ...]) -> None:
        kind = event[0]
        if kind == "refit":
            try:
                while self._pending:
                    self._finish(self._pending.popitem(last=False)[1])
                event[1].append(self._refit())
            finally:  # refit_now waits for this, whatever happened
                event[2].set()
        elif kind == "query":
            _, key, plan, info, f, epoch = event
            if key in self._pending:
                self._finish(self._pending.pop(key))
            self._pending[key] = {"plan": plan, "info": info, "f": f, "node": {}, "streams": 0,
                                  "t": time.monotonic(), "epoch": epoch}  # fmt: skip
            while len(self._pending) > self.PENDING:
                self._finish(self._pending.popitem(last=False)[1])
        elif kind == "node":
            _, key, plan, meta, started, ended = event
            q = self._pending.get(key)
            if q is None and plan is not None:  # an offload ticket fetched without asking first
                q = self._pending[key] = {"plan": plan, "info": None, "f": None, "node": {}, "streams": 0,
                                          "t": time.monotonic(), "epoch": started}  # fmt: skip
            if q is not None:
                q["streams"] += 1
                q["disturbed"] = q.get("disturbed") or started % 2 or ended != q["epoch"]
                q["way"] = meta["way"]
                for k in ("engine_s", "node_s"):
                    q["node"][k] = max(q["node"].get(k, 0.0), meta[k])
                for k in ("rows", "bytes"):
                    q["node"][k] = q["node"].get(k, 0) + meta[k]
        elif kind == "host":
            _, key, way, rows, times = event
            q = self._pending.get(key)
            if q is not None and q["streams"] and q.get("way") == way:
                self._finish(self._pending.pop(key) | {"host": times, "host_rows": rows})

    def _finish(self, q: dict[str, Any]) -> None:
        """One query's samples, where the learner's CPU budget allows (else counted skipped)."""
        if not q["streams"]:
            return
        if q.get("disturbed") or q["epoch"] % 2:
            self.disturbed += 1
            return
        cfg = self._node.config
        allowed = cfg.adapt_cpu_share * self._node.cores() * (time.monotonic() - self._started) + self.BURST_S
        if self.paced_cpu_s + self.sample_cpu_s > allowed:
            self.skipped += 1
            return
        c0 = time.thread_time()
        try:
            self._samples(q)
        except Exception:  # a query that cannot become a sample (its features fail) is counted
            self.failed += 1
        finally:
            self.sample_cpu_s += time.thread_time() - c0

    def _samples(self, q: dict[str, Any]) -> None:
        """One query's samples: the node's stages (and the host's, where its client sent them)."""
        node = self._node
        info = q["info"] or node._check_plan(q["plan"])
        f = q["f"] or TM.QueryFeatures(**node._features(q["plan"], info)[1])
        times = dict(q.get("host") or {})
        engine, total = q["node"]["engine_s"], q["node"]["node_s"]
        if q["way"] == "offload":
            times |= {"node_engine": engine, "node_offload": total, "node_stream_out": total - engine}
            rows, nbytes = float(q["node"]["rows"]), float(q["node"]["bytes"])
        else:
            times |= {"node_pushback": total, "node_stream_in": total - engine}
            rows = float(q["host_rows"]) if q.get("host_rows") is not None else f.out_rows
            nbytes = f.out_bytes * rows / f.out_rows if f.out_rows > 0 else f.out_bytes
        shipped = nbytes if q["way"] == "offload" else f.in_bytes
        rate = TM.TransferLink.of(node.config.budget.get("link")).bytes_per_s
        if rate and shipped / rate >= self.LINK_HELD * total:
            self.link_held += 1
            times = {t: v for t, v in times.items() if t not in _LINK_BOUND}
        share = f.out_string_bytes / f.out_bytes if f.out_bytes > 0 else 0.0
        ran = replace(f, out_rows=rows, out_bytes=nbytes, out_string_bytes=nbytes * share)
        self.adaptation.observe(node.config.models, f, ran, times)
