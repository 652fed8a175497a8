"""The host side: talk to a node, turn SQL into Substrait, run a query either way and time it.

``pushback`` fetches the scanned columns (one stream per table, in parallel) and runs the plan
here; ``offload`` fetches the node's result. Both give the same table, and a :class:`Timing`
of where the time went.
"""

from __future__ import annotations

import json
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

from offload.dataservices import plans, wire


class NodeError(RuntimeError):
    """A node refused or failed a call; the message is the node's."""


@dataclass
class Timing:
    """Where one query's time went, in seconds. ``plan``: SQL to Substrait here; ``info``: the
    node's check of the query (get_flight_info); ``fetch``: the streams, first byte to last;
    ``node_engine``: the node producing batches (its query engine, or the scan); ``node``: the
    node's whole stream (engine, serialization, sending); ``host``: the plan run here (pushback);
    ``arrow_bytes``: the Arrow bytes received, decoded (the wire carries less when compressed);
    ``first_batch``: from the start of the fetch to the first rows received (a node sends
    bounded batches, so this does not wait for the whole stream); ``batches``: how many."""

    way: str
    plan: float = 0.0
    info: float = 0.0
    fetch: float = 0.0
    node_engine: float = 0.0
    node: float = 0.0
    host: float = 0.0
    total: float = 0.0
    arrow_bytes: int = 0
    rows: int = 0
    first_batch: float = 0.0
    batches: int = 0
    decision: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Bearer(flight.ClientMiddlewareFactory):
    def __init__(self, token: str) -> None:
        self.header = {"authorization": f"Bearer {token}"}

    def start_call(self, info: flight.CallInfo) -> flight.ClientMiddleware:
        header = self.header

        class _Send(flight.ClientMiddleware):
            def sending_headers(self) -> dict[str, str]:
                return header

        return _Send()


class NodeClient:
    """A connection to one node at ``endpoint`` (``host:port`` or ``grpc://host:port``)."""

    def __init__(
        self,
        endpoint: str,
        token: str,
        timeout_s: float = 60.0,
        token_source: str | None = None,
        name: str | None = None,
    ) -> None:
        self.location = endpoint if "://" in endpoint else f"grpc://{endpoint}"
        self.name = name
        """The node's name where the caller knows it (a cluster file's): errors say it."""
        self._client = flight.FlightClient(self.location, middleware=[_Bearer(token)])
        self._opts = flight.FlightCallOptions(timeout=timeout_s, read_options=READ)
        self._source = token_source
        """Where the token came from (a file, $OFFLOAD_NODE_TOKEN): named when the node refuses it."""
        self._observer: ThreadPoolExecutor | None = None
        """Sends the host's stages of each query to the node (``observe``) off the query's path."""

    def _call_errors(self) -> _errors:
        return _errors(self.location, self._source, self.name, self._opts.timeout)

    def close(self) -> None:
        if self._observer is not None:  # the observations in flight end within OBSERVE_S
            self._observer.shutdown(wait=True)
        self._client.close()

    def __enter__(self) -> NodeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------------------- data sets

    def upload(
        self,
        name: str,
        table: pa.Table,
        compression: str | None = None,
        append: bool = False,
        replace: bool = True,
    ) -> dict[str, Any]:
        """Sends ``table`` to the node as data set ``name`` (or appends it); returns its description
        (``replaced``: the rows of the one it replaced). Not ``replace``: a name taken is refused
        (NodeError) before the rows are read."""
        opts = flight.FlightCallOptions(
            timeout=self._opts.timeout,
            write_options=pa.ipc.IpcWriteOptions(compression=compression),
            read_options=READ,
        )
        path = (name, "append") if append else (name,) if replace else (name, "new")
        desc = flight.FlightDescriptor.for_path(*path)
        with self._call_errors():
            writer, meta = self._client.do_put(desc, table.schema, options=opts)
            writer.write_table(table, max_chunksize=1 << 16)
            writer.done_writing()
            ack = meta.read()
            writer.close()
        return json.loads(ack.to_pybytes()) if ack is not None else {}

    def register(
        self, name: str, path: str, replace: bool = True, verified_only: bool = False, rewrite: bool = False
    ) -> dict[str, Any]:
        """Loads a file of the node's data directory as data set ``name`` (not ``replace``: a name
        taken is refused; ``verified_only``: a file without page checksums is refused; ``rewrite``:
        such a file is rewritten with them first)."""
        body = {
            "name": name,
            "path": path,
            "replace": replace,
            "verified_only": verified_only,
            "rewrite": rewrite,
        }
        return self._action("register", json.dumps(body).encode())

    def drop(self, name: str) -> bool:
        return bool(self._action("drop", name.encode())["dropped"])

    def describe(self, name: str) -> dict[str, Any]:
        return self._action("describe", name.encode())

    def status(self) -> dict[str, Any]:
        return self._action("status", b"")

    def explain(self, sql_or_plan: str | bytes) -> dict[str, Any]:
        """The node's estimate, predicted times both ways and its choice for a query."""
        plan = self.plan(sql_or_plan) if isinstance(sql_or_plan, str) else sql_or_plan
        return self._action("explain", plan)

    def estimate(self, sql_or_plan: str | bytes) -> dict[str, Any]:
        """The node's estimate of a query's result: rows, bytes, the steps, the time it took."""
        plan = self.plan(sql_or_plan) if isinstance(sql_or_plan, str) else sql_or_plan
        return self._action("estimate", plan)

    def schemas(self) -> dict[str, pa.Schema]:
        """Every data set's schema."""
        with self._call_errors():
            infos = list(self._client.list_flights(options=self._opts))
        return {i.descriptor.path[0].decode(): i.schema for i in infos}

    def action(self, kind: str, body: bytes) -> dict[str, Any]:
        """Any of the node's actions (``list_actions``), its JSON answer decoded."""
        with self._call_errors():
            results = list(self._client.do_action(flight.Action(kind, body), options=self._opts))
        return json.loads(results[0].body.to_pybytes())

    _action = action

    def put_stream(
        self, path: list[str], schema: pa.Schema
    ) -> tuple[flight.FlightStreamWriter, flight.FlightMetadataReader]:
        """A ``do_put`` stream to ``path``: the writer, and the reader of the node's
        acknowledgements (its app metadata). Flight's errors pass as they are: a stream that
        fails part-way is the caller's to account for (as ``offload.flows.network.AckedStream``
        does)."""
        return self._client.do_put(flight.FlightDescriptor.for_path(*path), schema, options=self._opts)

    def get(self, ticket: bytes) -> pa.Table:
        """A ``do_get`` of a raw ticket, read whole."""
        with self._call_errors():
            return self._client.do_get(flight.Ticket(ticket), options=self._opts).read_all()

    # ------------------------------------------------------------------------------ queries

    def plan(self, sql: str) -> bytes:
        """``sql`` as a Substrait plan over the node's data sets."""
        return plans.to_substrait(sql, self.schemas())

    def query(
        self, sql_or_plan: str | bytes, way: str = "offload", compression: str | None = None
    ) -> tuple[pa.Table, Timing]:
        """Runs a query (SQL, or a Substrait plan's bytes) ``way`` = offload | pushback | auto (the
        node decides; ``Timing.way`` says what it chose and ``Timing.decision`` why)."""
        timing = Timing(way)
        t0 = time.perf_counter()
        plan = self.plan(sql_or_plan) if isinstance(sql_or_plan, str) else sql_or_plan
        timing.plan = time.perf_counter() - t0
        desc = flight.FlightDescriptor.for_command(wire.request(plan, way, compression))
        t1 = time.perf_counter()
        with self._call_errors():
            info = self._client.get_flight_info(desc, options=self._opts)
        timing.info = time.perf_counter() - t1
        if way == "auto":
            timing.decision = json.loads(info.app_metadata) if info.app_metadata else None
            scans = info.endpoints and "scan" in json.loads(info.endpoints[0].ticket.ticket)
            way = timing.way = "pushback" if scans else "offload"
        t2 = time.perf_counter()
        with ThreadPoolExecutor(max(1, len(info.endpoints))) as pool:
            streams = list(pool.map(self._fetch, info.endpoints))
        timing.fetch = time.perf_counter() - t2
        firsts = [s[3] for s in streams if s[3] is not None]
        timing.first_batch = (min(firsts) - t2) if firsts else timing.fetch
        for table, meta, nbytes, _ in streams:
            timing.batches += len(table.to_batches())
            timing.node_engine = max(timing.node_engine, meta.get("engine_s", 0.0))
            timing.node = max(timing.node, meta.get("node_s", 0.0))
            timing.arrow_bytes += nbytes
        if way == "offload":
            result = streams[0][0]
        else:
            t3 = time.perf_counter()
            names = [json.loads(ep.ticket.ticket)["scan"] for ep in info.endpoints]
            tables = {n: s[0] for n, s in zip(names, streams, strict=True)}
            result = plans.execute(plans.narrow(plan), tables)
            timing.host = time.perf_counter() - t3
        timing.total = time.perf_counter() - t0
        timing.rows = result.num_rows
        query = json.loads(info.endpoints[0].ticket.ticket).get("q") if info.endpoints else None
        if query is not None:  # a node that learns names the query in its tickets
            self._observer = self._observer or ThreadPoolExecutor(1, thread_name_prefix="observe")
            self._observer.submit(self._observe, str(query), timing)
        return result, timing

    def _observe(self, query: str, timing: Timing) -> None:
        """Tells the node the host's stages of a query it served (action ``observe``), so that it
        learns from it; best effort, on a thread of its own after the query is answered: any
        failure is ignored."""
        host = host_times(timing)
        body = json.dumps({"q": query, "way": timing.way, "rows": timing.rows, "times": host}).encode()
        opts = flight.FlightCallOptions(timeout=OBSERVE_S)
        try:
            list(self._client.do_action(flight.Action("observe", body), options=opts))
        except Exception:  # best effort: the query is answered already
            pass

    def _fetch(self, ep: flight.FlightEndpoint) -> tuple[pa.Table, dict[str, Any], int, float | None]:
        """One stream: its table (one chunk per batch received), the node's timings (last
        chunk's app_metadata), its IPC bytes, and when its first rows came (perf_counter)."""
        batches, meta, nbytes, first = [], {}, 0, None
        with self._call_errors():
            reader = self._client.do_get(ep.ticket, options=self._opts)
            schema = reader.schema
            for chunk in reader:
                if chunk.data is not None and chunk.data.num_rows:
                    first = first or time.perf_counter()
                    batches.append(chunk.data)
                    nbytes += chunk.data.nbytes
                if chunk.app_metadata is not None:
                    meta = json.loads(chunk.app_metadata.to_pybytes())
        return pa.Table.from_batches(batches, schema=schema), meta, nbytes, first


def host_times(timing: Timing) -> dict[str, float]:
    """The host's stages of a query as the node learns them: asking it (less what the node took
    to decide an ``auto`` query: training asks with the way given, so its requests hold no
    decision, and on a quarter core the decision is most of an auto request), receiving, and
    for pushback the host's engine."""
    decided = float((timing.decision or {}).get("decision_wall_s") or 0.0)
    host = {"node_request": max(0.0, timing.info - decided)}
    received = max(0.0, timing.fetch - timing.node)
    if timing.way == "offload":
        return host | {"host_receive_out": received}
    return host | {"host_receive_in": received, "host_engine": timing.host}


class _errors:
    """Turns Flight errors into NodeError with the node's message (gRPC detail stripped); a
    refused token names where it came from; a node that cannot be reached or went away
    mid-call (gRPC's UNAVAILABLE, "Stream removed"), or did not answer in time, is named, with
    what to do, in one line."""

    def __init__(
        self,
        location: str = "",
        token_source: str | None = None,
        name: str | None = None,
        timeout_s: float | None = None,
    ) -> None:
        self.location, self.source, self.name, self.timeout_s = location, token_source, name, timeout_s

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type | None, e: BaseException | None, tb: object) -> bool:
        if e is None or not isinstance(e, flight.FlightError | pa.ArrowException):
            return False
        msg = str(e).split(". Detail:")[0].strip()
        node = f"node {self.name} at {self.location}" if self.name else f"the node at {self.location}"
        if isinstance(e, flight.FlightUnavailableError) or "Stream removed" in msg:
            why = re.sub(r"^\w+ returned unavailable error, with message: ", "", msg).split(". gRPC")[0]
            raise NodeError(
                f"{node} went away or cannot be reached ({why[:200]}): check that it is running "
                "(`offload node list`), restart it if not, then run the command again"
            ) from None
        if isinstance(e, flight.FlightTimedOutError):
            raise NodeError(
                f"{node} did not answer within {self.timeout_s or 0:g} s: the query may be too heavy "
                "for it (see its --query-timeout), or the node is overloaded; try again or narrow the query"
            ) from None
        if isinstance(e, flight.FlightUnauthenticatedError):
            msg = msg.removeprefix("gRPC returned unauthenticated error, with message: ")
            where = f" ({self.source})" if self.source else ""
            if msg.startswith(wire.WRONG_TOKEN):
                msg = f"{self.location} refused the token{where}: it is not this node's token"
            elif msg.startswith(wire.NO_TOKEN):
                msg = f"{self.location} needs its bearer token, and none was given{where}"
        raise NodeError(msg) from None


OBSERVE_S = 5.0
"""How long an observation may take before it is given up (closing a client waits for them)."""

READ = pa.ipc.IpcReadOptions(ensure_alignment=pa.ipc.Alignment.DataTypeSpecific)
"""Flight hands a stream's buffers over where gRPC received them, often at odd addresses;
Arrow's engine (Acero) then warns "poorly aligned" once per batch and may run slower. Reads
copy such buffers to aligned memory (aligned ones are kept as they are)."""
