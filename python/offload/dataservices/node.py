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

import hmac
import ipaddress
import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

from offload.dataservices import plans, wire
from offload.dataservices.estimate import estimate
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

    def describe(self, with_stats: bool = False) -> dict[str, Any]:
        out = {
            "name": self.name,
            "rows": self.table.num_rows,
            "bytes": self.table.nbytes,
            "columns": self.table.schema.names,
            "source": self.source,
            "stats_s": round(self.stats.seconds, 4),
        }
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
    stats: dict[str, int] = field(default_factory=lambda: {"queries": 0, "errors": 0})
    budget: dict[str, Any] = field(default_factory=dict)
    """What the node's budget (budget.apply, link.shape) did: reported by ``status``."""
    models: Any = None
    """timemodel.Models for the decision (None: no decision, ``auto`` offloads)."""
    system: str = "host"
    """This node's system type in the models (its profile's name)."""
    batch_rows: int = 65_536
    batch_bytes: int = 4 << 20
    """The largest record batch a node sends, in rows and in Arrow bytes (whichever binds first):
    a stream of bounded batches keeps memory bounded on both sides and lets the first rows
    arrive before the last are read (a loaded file is one chunk of all its rows)."""


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
        super().__init__(  # serving from here on: every handler is in place
            f"grpc://{config.host}:{config.port}", middleware={"auth": _TokenCheck(config.token)}
        )

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
            return self.register_file(str(args.get("name", "")), str(args.get("path", ""))).describe()

        def drop(body: bytes) -> dict[str, Any]:
            with self._lock:
                return {"dropped": self._datasets.pop(body.decode(), None) is not None}

        own: list[tuple[str, str, ActionHandler]] = [
            ("register", 'load a file of the data directory: {"name": ..., "path": ...}', register),
            ("drop", "drop a data set: its name", drop),
            ("describe", "a data set's rows, bytes, columns, source and statistics: its name",
             lambda body: self.dataset(body.decode()).describe(with_stats=True)),
            ("estimate", "a plan's estimated result rows and bytes, and why: the plan's bytes",
             self.estimate),
            ("explain", "the estimate, both ways' predicted times and the choice: the plan's bytes",
             self.explain),
            ("status", "the node's name, threads, data sets and counters", lambda _: self.status()),
        ]  # fmt: skip
        for name, what, handler in own:
            self.handle_action(name, what, handler)

    # ------------------------------------------------------------------------------ data sets

    def add(self, name: str, table: pa.Table, source: str = "upload") -> Dataset:
        """Adds (or replaces) a data set and sketches its columns."""
        check_name(name)
        ds = Dataset(name, table.combine_chunks(), source, TableStats.of(table))
        with self._lock:
            self._datasets[name] = ds
        return ds

    def append(self, name: str, table: pa.Table) -> Dataset:
        """Appends rows to a data set; its statistics take them in (no rebuild)."""
        ds = self.dataset(name)
        if table.schema != ds.table.schema:
            raise flight.FlightServerError(
                f"appended schema {table.schema.names} differs from {name!r}'s {ds.table.schema.names}"
            )
        with self._lock:
            ds.stats.append(table)
            ds.table = pa.concat_tables([ds.table, table]).combine_chunks()
        return ds

    def explain(self, plan: bytes) -> dict[str, Any]:
        """What the node expects of ``plan`` and would do: the estimate, the query's features,
        both ways' predicted stages and the choice (offload where it has no time models)."""
        from offload.dataservices import timemodel as TM

        est = self.estimate(plan)
        reads = plans.inspect(plan).reads
        sizes = {}
        for t, cols in reads.items():
            st = self.dataset(t).stats
            sizes[t] = (st.rows, st.rows * sum(st.columns[c].width_bytes for c in cols))
        f = TM.features(plan, est["rows"], est["bytes"], sizes, est)
        out: dict[str, Any] = {"estimate": est, "features": f.__dict__}
        models = self.config.models
        if models is None or self.config.system not in models.systems():
            out["way"] = "offload"
            out["why"] = f"no time models for {self.config.system!r} on this node: offload by default"
            return out
        t0 = time.perf_counter()
        d = TM.decide(models, self.config.system, f, TM.TransferLink.of(self.config.budget.get("link")))
        out["decision"] = d.as_dict() | {"seconds": time.perf_counter() - t0}
        out["way"], out["why"] = d.way, d.why
        return out

    def estimate(self, plan: bytes) -> dict[str, Any]:
        """The plan's estimated result (rows, bytes, the steps, the estimating time)."""
        info = self._check_plan(plan)
        stats = {t: self.dataset(t).stats for t in info.reads}
        try:
            return estimate(plan, stats).as_dict()
        except plans.PlanError as e:
            raise flight.FlightServerError(str(e)) from None

    def dataset(self, name: str) -> Dataset:
        with self._lock:
            ds = self._datasets.get(name)
            known = sorted(self._datasets)
        if ds is None:
            raise flight.FlightServerError(
                f"unknown data set {name!r} on {self.config.name}; known: {', '.join(known) or 'none'}"
            )
        return ds

    def datasets(self) -> list[Dataset]:
        with self._lock:
            return list(self._datasets.values())

    def register_file(self, name: str, relative: str) -> Dataset:
        """Loads a Parquet or Arrow IPC file under the data directory as data set ``name``:
        ``relative`` to it, or absolute and inside it (a client makes its own relative paths
        absolute). Pages are checksum-verified (:mod:`.tablefiles`); errors name the file as
        given and carry none of its contents."""
        from offload.dataservices import tablefiles

        root = self.config.data_dir
        if root is None:
            raise flight.FlightServerError("this node has no data directory: upload with do_put instead")
        path = (root / relative).resolve()
        if not path.is_relative_to(root.resolve()):
            raise flight.FlightServerError(f"{relative!r} is outside the node's data directory")
        if not path.is_file():
            raise flight.FlightServerError(f"{relative!r}: no such file in the node's data directory")
        try:
            table = tablefiles.read(path, name=repr(relative))
        except tablefiles.DamagedFile as e:
            raise flight.FlightServerError(str(e)) from None
        return self.add(name, table, source=str(relative))

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
        if descriptor.descriptor_type == flight.DescriptorType.PATH:
            return self._describe(self.dataset(descriptor.path[0].decode()))
        req = self._parse(descriptor.command)
        info = self._check_plan(req["plan"])
        meta = b""
        if req["way"] == "auto":
            ex = self.explain(req["plan"])
            req["way"] = ex["way"]
            meta = json.dumps(ex).encode()
        if req["way"] == "offload":
            tables = {t: self.dataset(t).table for t in info.reads}
            ticket = wire.request(req["plan"], "offload", req["compression"])
            endpoints = [flight.FlightEndpoint(ticket, [])]
            schema = _result_schema(req["plan"], tables)
            return flight.FlightInfo(schema, descriptor, endpoints, -1, -1, app_metadata=meta)
        endpoints = []
        for t, cols in info.reads.items():
            endpoints.append(flight.FlightEndpoint(wire.scan_ticket(t, cols, req["compression"]), []))
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
        if "scan" in req:
            table = self.dataset(req["scan"]).table
            missing = [c for c in req["columns"] if c not in table.schema.names]
            if missing:
                raise flight.FlightServerError(f"data set {req['scan']!r} has no column {', '.join(missing)}")
            t0 = time.perf_counter()
            scanned = table.select(req["columns"])
            return _stream(scanned.schema, iter(scanned.to_batches()), t0, opts, "pushback", self._bounds())
        info = self._check_plan(req["plan"])
        tables = {t: self.dataset(t).table for t in info.reads}
        t0 = time.perf_counter()
        try:
            schema, batches = plans.execute_batches(req["plan"], tables, self.config.threads)
        except plans.PlanError as e:
            self.config.stats["errors"] += 1
            raise flight.FlightServerError(str(e)) from None
        # planning and starting the engine are engine time too
        return _stream(schema, batches, t0, opts, "offload", self._bounds(), time.perf_counter() - t0)

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
            ds = self.add(path[0], reader.read_all())
        elif len(path) == 2 and path[1] == "append":
            ds = self.append(path[0], reader.read_all())
        else:
            raise flight.FlightServerError(
                "upload to a path descriptor: [name] to replace, [name, 'append'] to append"
            )
        writer.write(json.dumps(ds.describe()).encode())

    def status(self) -> dict[str, Any]:
        return {
            "name": self.config.name,
            "system": self.config.system,
            "models": sorted(self.config.models.systems()) if self.config.models is not None else [],
            "threads": self.config.threads,
            "budget": self.config.budget,
            "datasets": [d.describe() for d in self.datasets()],
            "counters": dict(self.config.stats),
        }

    # ------------------------------------------------------------------------------ helpers

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
            have = self.dataset(t).table.schema.names
            missing = [c for c in cols if c not in have]
            if missing:
                raise flight.FlightServerError(f"data set {t!r} has no column {', '.join(missing)}")
        return info


def _result_schema(plan: bytes, tables: dict[str, pa.Table]) -> pa.Schema:
    """The schema of ``plan``'s result, planned over empty tables of the same schemas."""
    try:
        schema, _ = plans.execute_batches(plan, {n: t.schema.empty_table() for n, t in tables.items()}, 1)
    except plans.PlanError as e:
        raise flight.FlightServerError(str(e)) from None
    return schema


def _stream(
    schema: pa.Schema,
    batches: Iterator[pa.RecordBatch],
    t0: float,
    opts: pa.ipc.IpcWriteOptions,
    way: str,
    bounds: tuple[int, int],
    setup_s: float = 0.0,
) -> flight.GeneratorStream:
    """The batches, each cut to at most ``bounds`` = (rows, Arrow bytes), then an empty batch
    whose app_metadata holds the node's timings: seconds in the engine (planning, then
    producing batches) and in all (producing, serializing and sending)."""

    def gen() -> Iterator[Any]:
        engine = setup_s
        rows = 0
        it = iter(batches)
        while True:
            t = time.perf_counter()
            b = next(it, None)
            engine += time.perf_counter() - t
            if b is None:
                break
            rows += b.num_rows
            yield from bounded(b, *bounds)
        meta = {"way": way, "engine_s": engine, "node_s": time.perf_counter() - t0, "rows": rows}
        yield pa.RecordBatch.from_pylist([], schema=schema), json.dumps(meta).encode()

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


def _is_name(name: str) -> bool:
    return 0 < len(name) <= 128 and all(c.isalnum() or c in "_-." for c in name)


def check_name(name: str) -> None:
    """A data set's (or a hosted flow's) name: 1-128 letters, digits, _ - . (a Flight error if not)."""
    if not _is_name(name):
        raise flight.FlightServerError(f"bad data set name {name[:40]!r}: use 1-128 letters, digits, _ - .")
