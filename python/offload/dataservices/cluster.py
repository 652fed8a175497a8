"""Several nodes: a cluster file names them, a data set is partitioned over them, and a query
fans out through Flight's own model — each node's FlightInfo, its endpoints fetched in
parallel — with every node making its own decision for its partition.

A query splits at its lowest blocking operator (aggregate, sort, fetch): the part below it
(reads, filters, projections: partition-local) goes to every node as its own plan, and the
host runs the rest over the union of what comes back (:func:`plans.split`). Without a blocking
operator the union is the answer.

Cluster file (TOML)::

    [nodes.n1]
    endpoint = "127.0.0.1:9201"          # any host:port: the same code runs across machines
    token_file = "~/.offload/node-9201.token"
    [nodes.n2]
    endpoint = "127.0.0.1:9202"
    token_file = "~/.offload/node-9202.token"
"""

from __future__ import annotations

import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from offload.dataservices import plans
from offload.dataservices.client import NodeClient, NodeError


@dataclass
class NodeSpec:
    name: str
    endpoint: str
    token: str


def load_cluster(path: str | Path) -> list[NodeSpec]:
    """The nodes of a cluster file; errors name the file and the node."""
    path = Path(path)
    try:
        doc = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ValueError(f"{path}: {e}") from None
    nodes = doc.get("nodes")
    if not isinstance(nodes, dict) or not nodes:
        raise ValueError(f"{path}: no [nodes.NAME] tables")
    out = []
    for name, spec in nodes.items():
        if not isinstance(spec, dict) or "endpoint" not in spec:
            raise ValueError(f"{path}: node {name!r} needs an endpoint")
        token = spec.get("token")
        if token is None:
            tf = Path(str(spec.get("token_file", ""))).expanduser()
            try:
                token = tf.read_text().strip()
            except OSError as e:
                raise ValueError(
                    f"{path}: node {name!r}: cannot read its token file {tf}: {e.strerror}"
                ) from None
        out.append(NodeSpec(name, str(spec["endpoint"]), str(token)))
    return out


@dataclass
class ClusterTiming:
    """A fanned-out query: per node its way and timing, and the host's final step."""

    nodes: dict[str, Any] = field(default_factory=dict)
    host_final: float = 0.0
    total: float = 0.0
    rows: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"nodes": self.nodes, "host_final": self.host_final, "total": self.total, "rows": self.rows}


class ClusterClient:
    """Talks to every node of a cluster."""

    def __init__(self, nodes: list[NodeSpec], timeout_s: float = 60.0) -> None:
        if not nodes:
            raise ValueError("a cluster needs at least one node")
        self.specs = nodes
        self.clients = {n.name: NodeClient(n.endpoint, n.token, timeout_s, name=n.name) for n in nodes}

    def close(self) -> None:
        for c in self.clients.values():
            c.close()

    def __enter__(self) -> ClusterClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def upload_partitioned(self, name: str, table: pa.Table, by: str | None = None) -> dict[str, int]:
        """Splits ``table`` over the nodes — by ``by``'s value modulo the node count (integers),
        else in contiguous slices — and uploads each part as data set ``name``."""
        k = len(self.clients)
        if by is not None:
            if by not in table.schema.names or not pa.types.is_integer(table.schema.field(by).type):
                raise ValueError(f"partition column {by!r} must be an integer column of the table")
            part = np.asarray(pc.fill_null(pc.abs(table.column(by)), 0)) % k
            parts = [table.filter(pa.array(part == i)) for i in range(k)]
        else:
            step = -(-table.num_rows // k)
            parts = [table.slice(i * step, step) for i in range(k)]
        with ThreadPoolExecutor(k) as pool:
            done = list(
                pool.map(lambda nc: nc[1].upload(name, nc[0]), zip(parts, self.clients.values(), strict=True))
            )
        return {n: d["rows"] for n, d in zip(self.clients, done, strict=True)}

    def schemas(self) -> dict[str, pa.Schema]:
        return next(iter(self.clients.values())).schemas()

    def query(self, sql: str, way: str = "auto") -> tuple[pa.Table, ClusterTiming]:
        """Runs ``sql`` over partitioned data sets: each node gets the partition-local part of the
        plan with ``way`` (``auto``: its own decision), the host finishes the plan."""
        t0 = time.perf_counter()
        timing = ClusterTiming()
        plan = plans.to_substrait(sql, self.schemas())
        local, final, names = plans.split(plan)
        with ThreadPoolExecutor(len(self.clients)) as pool:
            parts = list(pool.map(lambda c: self._node_part(c, local, way), self.clients.values()))
        for n, (_, t) in zip(self.clients, parts, strict=True):
            timing.nodes[n] = t.as_dict()
        union = pa.concat_tables([p for p, _ in parts], promote_options="permissive")
        t1 = time.perf_counter()
        result = union if final is None else plans.execute(final, {plans.PARTIAL: union})
        timing.host_final = time.perf_counter() - t1 if final is not None else 0.0
        if final is None:
            result = result.rename_columns(names)
        timing.total = time.perf_counter() - t0
        timing.rows = result.num_rows
        return result, timing

    def _node_part(self, c: NodeClient, local: bytes, way: str) -> tuple[pa.Table, Any]:
        try:
            return c.query(local, way)
        except NodeError as e:
            raise NodeError(str(e) if c.location in str(e) else f"{c.location}: {e}") from None
