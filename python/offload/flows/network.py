"""Particle data flows over several nodes (seed 003, slides 45-74): producers put packed
tables to partition services on the nodes, which forward each partition east-west to the node
that owns it, where a sift service merges it into an LSM tree, queryable while data arrives.

Every node is an ordinary query node (:mod:`offload.dataservices.node`), a process with its own
budget and link, that hosts a :class:`FlowService` (``offload node serve`` does), and the flow is
Flight's own protocol:

* ``flow-setup`` (action): the flow's data set, partitions, codec and the nodes in order. Node
  i owns a contiguous run of partitions, so reading the nodes in turn reads the ids in order;
* producer → node: ``do_put`` on path ``[:flow, NAME]`` (``:flow`` is no data set's name),
  batches of one ``blob`` column, each blob one producer message (an Arrow IPC stream, as
  Faodel carries a blob);
* node → node: ``do_put`` on path ``[:flow, NAME, from, I]``, batches of (``part``, ``blob``);
* ``flow-flush`` (action) when the producers are done; ``flow-status`` (action) for the
  breakdown and the accounting; ``do_get`` tickets read the sorted partitions, run the seed's
  two queries, or return the rows held for a lost node.

Nothing accepted is lost silently. Every put is acknowledged batch by batch, and a sender
keeps each batch until its acknowledgement arrives. Where a peer dies, the sender keeps what
the peer did not acknowledge ("held") and counts what it did ("delivered to a node now
lost"). :func:`account` checks that every produced row is stored, held, or named as lost with
a node.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.flight as flight

from offload.dataservices import wire
from offload.dataservices.client import NodeClient
from offload.dataservices.node import Node, check_name
from offload.flows import datasets as D
from offload.flows import partition as F

HEAD = ":flow"
"""The first element of a flow's put paths."""
BLOBS = pa.schema([("blob", pa.binary())])
"""A producer's batch: each row one packed message."""
PARTS = pa.schema([("part", pa.int32()), ("blob", pa.binary())])
"""An east-west batch: each row one partition's packed piece."""


def short(e: BaseException) -> str:
    """A Flight error's message without gRPC's debug context."""
    msg = str(e)
    for cut in (". Detail:", " gRPC client debug context", ". Client context"):
        msg = msg.split(cut)[0]
    return msg.removeprefix("Flight returned unavailable error, with message: ").strip()[:200]


def owner(part: int, parts: int, nodes: int) -> int:
    """The node that sifts ``part``: contiguous runs, so node i's ids precede node i + 1's."""
    return part * nodes // parts


def check_setup(setup: dict[str, Any]) -> dict[str, Any]:
    """A flow's setup, checked: data set, rows hint, partitions (2-16, at least one per node),
    codec, memtable rows, fanout, this node's index and the nodes (endpoint and token)."""
    D.dataset(str(setup.get("dataset")))
    nodes = setup.get("nodes")
    if not isinstance(nodes, list) or not nodes or not all(isinstance(n, dict) for n in nodes):
        raise ValueError("a flow needs its nodes: a list of {endpoint, token}")
    parts = int(setup.get("parts", 0))
    if not 2 <= parts <= 16 or parts < len(nodes):
        raise ValueError(f"a flow needs 2-16 partitions and at least one per node: {parts} for {len(nodes)}")
    if not 0 <= int(setup.get("index", -1)) < len(nodes):
        raise ValueError(f"this node's index {setup.get('index')!r} is not one of the {len(nodes)} nodes")
    if setup.get("codec") not in F.CODECS:
        raise ValueError(f"codec must be one of lz4, zstd or none, got {setup.get('codec')!r}")
    if int(setup.get("memtable_rows", 1)) < 1 or int(setup.get("fanout", 2)) < 2:
        raise ValueError("memtable rows must be >= 1 and the fanout >= 2")
    return setup


@dataclass
class _Sent:
    seq: int
    batch: pa.RecordBatch
    rows: int


class AckedStream:
    """A put stream whose receiver acknowledges every batch (its ack is the last sequence number
    it stored). Batches stay pending until acknowledged; ``on_ack(rows)`` counts delivered rows.
    If the stream fails, every pending batch, and every later one, goes to ``on_lost(batch,
    rows)``: the sender keeps what the receiver did not confirm. A thread reads the acks while the
    sender writes."""

    def __init__(
        self,
        endpoint: str,
        token: str,
        path: list[str],
        schema: pa.Schema,
        on_ack: Callable[[int], None],
        on_lost: Callable[[pa.RecordBatch, int], None],
        timeout_s: float = 60.0,
    ) -> None:
        self.client = NodeClient(endpoint, token, timeout_s)
        self.on_ack, self.on_lost, self.timeout_s = on_ack, on_lost, timeout_s
        self.pending: deque[_Sent] = deque()
        self.seq = 0
        self.failed: str | None = None
        self.lock = threading.Lock()
        self.writer, self.acks = self.client.put_stream(path, schema)
        self.reader = threading.Thread(target=self._read_acks, daemon=True)
        self.reader.start()

    def send(self, batch: pa.RecordBatch, rows: int) -> bool:
        """Writes a batch (or hands it to ``on_lost`` if the stream has failed); False once failed."""
        with self.lock:
            if self.failed is not None:
                self.on_lost(batch, rows)
                return False
            self.seq += 1
            self.pending.append(_Sent(self.seq, batch, rows))
        try:
            self.writer.write_batch(batch)
        except (flight.FlightError, pa.ArrowException, OSError) as e:
            self.fail(e)
        return self.failed is None

    def _read_acks(self) -> None:
        try:
            while (buf := self.acks.read()) is not None:
                acked = int(buf.to_pybytes())
                with self.lock:
                    while self.pending and self.pending[0].seq <= acked:
                        self.on_ack(self.pending.popleft().rows)
        except (flight.FlightError, pa.ArrowException, OSError, ValueError) as e:
            self.fail(e)

    def fail(self, e: BaseException) -> None:
        """The receiver is lost: what it has not acknowledged goes to ``on_lost``."""
        with self.lock:
            if self.failed is None:
                self.failed = short(e)
            while self.pending:
                s = self.pending.popleft()
                self.on_lost(s.batch, s.rows)

    def close(self) -> None:
        """Ends the stream and waits for the last acknowledgement."""
        try:
            if self.failed is None:
                self.writer.done_writing()
            self.reader.join(self.timeout_s)
            self.writer.close()
        except (flight.FlightError, pa.ArrowException, OSError) as e:
            self.fail(e)
        if self.pending:
            self.fail(RuntimeError("the stream ended before every batch was acknowledged"))
        self.client.close()


@dataclass
class Flow:
    """One node's part of a flow: its partition service and the sift of the partitions it owns."""

    name: str
    setup: dict[str, Any]
    timeout_s: float = 60.0
    data: D.DataSet = field(init=False)
    index: int = field(init=False)
    transfer_s: float = 0.0
    batches_sent: int = 0
    batches_received: int = 0
    """East-west batches: one per message and remote owner (each costs a Flight write and an ack)."""
    accepted: int = 0
    """Producer rows this node acknowledged."""
    local: int = 0
    """Rows of its own partitions, sifted here without a transfer."""
    received: dict[int, int] = field(default_factory=dict)
    """Rows sifted here, by the node that partitioned them (this node included)."""

    def __post_init__(self) -> None:
        s = check_setup(self.setup)
        self.data, self.index = D.dataset(s["dataset"]), int(s["index"])
        self.nodes, parts = len(s["nodes"]), int(s["parts"])
        self.partitioner = F.Partitioner(self.data, parts, int(s.get("rows_hint", 0)), s.get("codec"))
        self.sift = F.Sift(self.data, parts, int(s.get("memtable_rows", 1 << 16)), int(s.get("fanout", 4)))
        self.owners = [owner(p, parts, self.nodes) for p in range(parts)]
        self.owned = [p for p in range(parts) if self.owners[p] == self.index]
        self.delivered = dict.fromkeys(range(self.nodes), 0)
        self.held: dict[int, list[pa.RecordBatch]] = {}
        self.held_rows: dict[int, int] = {}
        self.streams: dict[int, AckedStream] = {}
        self.partition_lock, self.sift_lock, self.lock = threading.Lock(), threading.Lock(), threading.Lock()
        self.cpu0 = time.process_time()

    # ------------------------------------------------------------------------ partition service

    def produce(self, reader: flight.MetadataRecordBatchReader, writer: flight.FlightMetadataWriter) -> None:
        """A producer's stream: each message partitioned, its pieces sifted here or forwarded;
        each batch acknowledged once all its pieces are stored, sent or held."""
        for batch in _acked(reader, writer, BLOBS, "a producer sends one 'blob' column"):
            for blob in batch.column(0).to_pylist():
                self._partition(blob)

    def _partition(self, blob: bytes) -> None:
        with self.partition_lock:  # one partitioner (its breakdown) per node
            try:
                pieces = self.partitioner.run(blob)
            except ValueError as e:
                raise flight.FlightServerError(f"flow {self.name}: {e}") from None
            rows = list(self.partitioner.last_rows)
        with self.lock:
            self.accepted += sum(rows)
        by_peer: dict[int, list[tuple[int, bytes]]] = {}
        for p, (piece, n) in enumerate(zip(pieces, rows, strict=True)):
            if n:
                by_peer.setdefault(self.owners[p], []).append((p, piece))
        for peer, items in by_peer.items():
            n = sum(rows[p] for p, _ in items)
            if peer == self.index:
                for p, piece in items:
                    self.store(p, piece, self.index)
                with self.lock:
                    self.local += n
                continue
            batch = pa.RecordBatch.from_arrays(
                [pa.array([p for p, _ in items], pa.int32()), pa.array([b for _, b in items], pa.binary())],
                schema=PARTS,
            )
            t0 = time.perf_counter()
            self._stream(peer).send(batch, n)
            with self.lock:
                self.transfer_s += time.perf_counter() - t0
                self.batches_sent += 1

    def _stream(self, peer: int) -> AckedStream:
        with self.lock:
            if peer not in self.streams:
                spec = self.setup["nodes"][peer]
                path = [HEAD, self.name, "from", str(self.index)]

                def ack(rows: int) -> None:
                    self.delivered[peer] += rows  # under the stream's lock, one stream per peer

                def lost(batch: pa.RecordBatch, rows: int) -> None:
                    self.hold(peer, batch, rows)

                try:
                    self.streams[peer] = AckedStream(
                        spec["endpoint"], spec["token"], path, PARTS, ack, lost, self.timeout_s
                    )
                except (flight.FlightError, pa.ArrowException, OSError) as e:
                    raise flight.FlightServerError(
                        f"flow {self.name}: cannot reach node {peer}: {short(e)}"
                    ) from None
            return self.streams[peer]

    def hold(self, peer: int, batch: pa.RecordBatch, rows: int) -> None:
        """Keeps a batch a lost peer did not acknowledge (readable with the ``held`` ticket)."""
        with self.lock:
            self.held.setdefault(peer, []).append(batch)
            self.held_rows[peer] = self.held_rows.get(peer, 0) + rows

    def flush(self) -> None:
        """The producers are done: close every forwarding stream, waiting for its acks."""
        with self.lock:
            streams = list(self.streams.values())
        for s in streams:
            s.close()

    def flushed(self) -> dict[str, Any]:
        """:meth:`flush`, then the status."""
        self.flush()
        return self.status()

    # ------------------------------------------------------------------------------ sift service

    def store(self, part: int, blob: bytes, source: int) -> int:
        if part not in self.owned:
            raise flight.FlightServerError(f"flow {self.name}: partition {part} is not node {self.index}'s")
        with self.sift_lock:
            try:
                rows = self.sift.put(part, blob)
            except ValueError as e:
                raise flight.FlightServerError(f"flow {self.name}: {e}") from None
            self.received[source] = self.received.get(source, 0) + rows
        return rows

    def receive(self, source: int, reader: flight.MetadataRecordBatchReader,
                writer: flight.FlightMetadataWriter) -> None:  # fmt: skip
        """A peer's forwarded pieces, acknowledged batch by batch once sifted."""
        for batch in _acked(reader, writer, PARTS, "forwarded batches are (part, blob)"):
            for part, blob in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(), strict=True):
                self.store(int(part), blob, source)
            with self.lock:
                self.batches_received += 1

    def sorted(self) -> pa.Table:
        """The partitions this node owns, by (id, time)."""
        return pa.concat_tables([self.sift.trees[p].sorted() for p in self.owned])

    def query(self, which: str) -> pa.Table:
        """The seed's queries on what is stored now: ``box`` (the rows in an eighth of the
        bounding box) or ``speed`` (the smallest and largest squared speed, one row)."""
        if which == "box":
            return pa.concat_tables([self.sift.trees[p].scan(D.BOX[self.data.name]) for p in self.owned])
        if which == "speed":
            lo, hi = D.speed_range(self.sorted(), self.data)
            return pa.table(
                {"speed2_min": pa.array([lo], pa.float64()), "speed2_max": pa.array([hi], pa.float64())}
            )
        raise flight.FlightServerError(f"unknown flow query {which!r}: box or speed")

    def held_table(self) -> pa.Table:
        """What this node holds for lost peers, as the data set's rows."""
        tables = [F.unpack(b) for batches in self.held.values() for batch in batches
                  for b in batch.column(1).to_pylist()]  # fmt: skip
        return pa.concat_tables(tables) if tables else self.data.schema.empty_table()

    def status(self) -> dict[str, Any]:
        """The breakdown, the node's CPU seconds since the setup (all its threads: Flight's
        receiving and sending too, which the steps do not time; one flow at a time makes them the
        flow's), and the row accounting."""
        with self.lock:
            lost = {str(p): s.failed for p, s in self.streams.items() if s.failed}
            return {
                "node": self.index,
                "owned": self.owned,
                "breakdown": self.partitioner.breakdown.as_dict() | {"transfer_s": self.transfer_s,
                                                                   "merge_s": self.sift.merge_s},
                "cpu_s": time.process_time() - self.cpu0,
                "batches": {"sent": self.batches_sent, "received": self.batches_received},
                "accepted_rows": self.accepted,
                "local_rows": self.local,
                "delivered_rows": {str(k): v for k, v in self.delivered.items() if k != self.index},
                "held_rows": {str(k): v for k, v in self.held_rows.items()},
                "received_rows": {str(k): v for k, v in self.received.items()},
                "stored_rows": sum(self.received.values()),
                "write_amplification": float(np.mean([self.sift.trees[p].stats.write_amplification
                                                      for p in self.owned])),
                "lost_peers": lost,
            }  # fmt: skip


def _acked(
    reader: flight.MetadataRecordBatchReader,
    writer: flight.FlightMetadataWriter,
    schema: pa.Schema,
    what: str,
) -> Iterator[pa.RecordBatch]:
    """A put stream's batches, each acknowledged (its sequence number as app metadata) once the
    caller has handled it and asks for the next: the sender keeps a batch until then."""
    seq = 0
    for chunk in reader:
        if chunk.data is None:
            continue
        if chunk.data.schema.names != schema.names:
            raise flight.FlightServerError(f"{what}, not {chunk.data.schema.names}")
        yield chunk.data
        seq += 1
        writer.write(str(seq).encode())


def ticket(flow: str, **what: Any) -> bytes:
    """A flow's do_get ticket: ``read="sorted"``, ``read="held"`` or ``query="box"|"speed"``."""
    return wire.message(flow=flow, **what)


class FlowService:
    """The flows one node takes part in, by name: the node's ``flow-*`` actions, its puts to
    ``[:flow, ...]`` and its ``flow`` tickets, registered on the node at construction (a node
    :data:`~offload.dataservices.node.Service`)."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.flows: dict[str, Flow] = {}
        self.lock = threading.Lock()
        actions = [
            ("flow-setup", "join a particle data flow (check_setup): JSON with its name", self.setup),
            ("flow-flush", "the producers are done: forward the rest and wait for acks: the flow's name",
             lambda body: self.flow(body.decode(errors="replace")).flushed()),
            ("flow-status", "a flow's breakdown and row accounting: its name",
             lambda body: self.flow(body.decode(errors="replace")).status()),
            ("flow-drop", "leave a flow and free its data: its name", self.drop),
        ]  # fmt: skip
        for name, what, handler in actions:
            node.handle_action(name, what, handler)
        node.handle_put(HEAD, self.put)
        node.handle_get("flow", self.read)

    def flow(self, name: str) -> Flow:
        with self.lock:
            if name not in self.flows:
                raise flight.FlightServerError(
                    f"no flow {name[:40]!r} on this node; set it up with flow-setup"
                )
            return self.flows[name]

    def setup(self, body: bytes) -> dict[str, Any]:
        args = wire.json_object(body, "flow setup")
        name = str(args.get("name", ""))
        check_name(name)
        try:
            f = Flow(name, args)
        except (ValueError, TypeError) as e:
            raise flight.FlightServerError(f"flow {name}: {e}") from None
        pa.set_cpu_count(self.node.config.threads)  # the codecs compress on Arrow's pool: the budget's
        with self.lock:
            self.flows[name] = f
        return f.status()

    def drop(self, body: bytes) -> dict[str, Any]:
        with self.lock:
            return {"dropped": self.flows.pop(body.decode(errors="replace"), None) is not None}

    def put(
        self, path: list[str], reader: flight.MetadataRecordBatchReader, writer: flight.FlightMetadataWriter
    ) -> None:
        if len(path) == 2:
            self.flow(path[1]).produce(reader, writer)
        elif len(path) == 4 and path[2] == "from" and path[3].isdigit():
            self.flow(path[1]).receive(int(path[3]), reader, writer)
        else:
            raise flight.FlightServerError("a flow put goes to [:flow, NAME] or [:flow, NAME, from, I]")

    def read(self, req: dict[str, Any]) -> pa.Table:
        f = self.flow(str(req["flow"]))
        if req.get("read") == "sorted":
            return f.sorted()
        if req.get("read") == "held":
            return f.held_table()
        return f.query(str(req.get("query")))
