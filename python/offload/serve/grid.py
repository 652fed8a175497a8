"""The one grid of what a deployment of the rule service chooses (issue 44): the matcher, the
pipeline's shape (w workers and k executors of e engine threads, or inline), the batching policy,
how clients encode their queries, how many queries a request holds, the transport and how many
connections the clients open. `offload serve sweep` measures its points and `offload plan
recommend` simulates them; both name a point by `Deployment.label`, in tables, plots and JSON.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from offload.serve.inject import MAX_PROCESSES as MAX_CONNECTIONS

DAEMON_BATCH_TIMEOUT_US = 200  # the daemon's batch_timeout_us default (crates/serve/src/config.rs)
MATCHERS = ("fast", "null", "emulated", "gpu")
ENCODINGS = ("raw", "codes16", "codes32")  # raw text, or codes from the daemon's dictionary
TRANSPORTS = ("ipc", "tcp", "shm")


@dataclass(frozen=True)
class Policy:
    """How executors batch: per request (`max_queries` 0), self-filling up to `max_queries`
    (what is queued when an executor frees, never waiting; `timeout_us` 0), or the seed's
    size-or-timeout (wait until `max_queries` or `timeout_us` after the first request)."""

    max_queries: int = 0
    timeout_us: int = 0

    def label(self) -> str:
        if not self.max_queries:
            return "per-req"
        n, t = self.max_queries, self.timeout_us
        return f"fill{n}" if not t else f"b{n}/{t}us"

    @staticmethod
    def parse(text: str) -> Policy:
        """`per-req` (or `per-request`), `fillN` (or `self-filling:N`), `bN/Tus` (or
        `size-or-timeout:N/T`); a ValueError that shows these for anything else."""
        t = text.strip()
        if t in ("per-req", "per-request"):
            return Policy()
        if m := re.fullmatch(r"(?:fill|self-filling:)(\d+)", t):
            return Policy(int(m[1]), 0)
        if m := re.fullmatch(r"(?:b|size-or-timeout:)(\d+)/(\d+)(?:us)?", t):
            return Policy(int(m[1]), int(m[2]))
        raise ValueError(
            f"a batching policy is per-req, fillN (self-filling up to N queries) or bN/Tus "
            f"(size-or-timeout: N queries or T µs), not {text!r}"
        )


@dataclass(frozen=True)
class Deployment:
    """One point of the grid, written like the seed: `2p 1w 1k 1e per-req raw ipc fast`
    (connections, workers, executors, engines, policy, encoding, transport, matcher; the request
    size after the encoding where it is fixed, `inline` for k = 0, the shards where more than one).
    Field names are those of `offload serve sweep`'s rows."""

    p: int = 1  # client connections (the generator's)
    w: int = 1  # workers (they decode raw requests; inline with raw requests they also match)
    k: int = 1  # kernel executors; 0 = inline (the broker matches encoded requests itself)
    e: int = 1  # engine threads per executor
    batch_max_queries: int = 0
    batch_timeout_us: int = 0
    encoding: str = "raw"
    request_queries: int = 0  # queries per request; 0 = the trace's own request sizes
    transport: str = "ipc"
    matcher: str = "fast"
    shards: int = 1  # socket shards (ROUTER, ZeroMQ I/O thread and broker each)

    @property
    def policy(self) -> Policy:
        return Policy(self.batch_max_queries, self.batch_timeout_us)

    def label(self) -> str:
        shape = f"{self.p}p {self.w}w " + ("inline" if self.k == 0 else f"{self.k}k {self.e}e")
        size = f" {self.request_queries}q" if self.request_queries else ""
        shards = f" {self.shards} shards" if self.shards > 1 else ""
        return f"{shape} {self.policy.label()} {self.encoding}{size} {self.transport}{shards} {self.matcher}"

    def check(self) -> None:
        """A ValueError naming the value and its range for what the daemon or the generator
        would refuse (the daemon's settings against its one table, config::BOUNDS)."""
        from offload import _native

        for name, known in (("encoding", ENCODINGS), ("transport", TRANSPORTS), ("matcher", MATCHERS)):
            if getattr(self, name) not in known:
                raise ValueError(f"{name} is one of {', '.join(known)}, not {getattr(self, name)!r}")
        settings = {
            "workers": self.w, "kernels": self.k, "engine_threads": self.e, "shards": self.shards,
            "batch_max_queries": self.batch_max_queries, "batch_timeout_us": self.batch_timeout_us,
        }  # fmt: skip
        for key, value in settings.items():
            if value < 0:
                raise ValueError(f"{key} {value} is out of range: a count of 0 or more")
            _native.serve_check_setting(key, value)
        if not 1 <= self.p <= MAX_CONNECTIONS:
            raise ValueError(f"connections (p) {self.p} is out of range: 1..={MAX_CONNECTIONS}")
        if not 0 <= self.request_queries <= MAX_REQUEST_QUERIES:
            raise ValueError(
                f"request size {self.request_queries} is out of range: 0 (as traced)..={MAX_REQUEST_QUERIES}"
            )
        if not self.batch_max_queries and self.batch_timeout_us:
            raise ValueError(f"{self.label()}: a per-request policy waits for nothing; no timeout")
        if self.k == 0 and self.batch_timeout_us:
            raise ValueError(f"{self.label()}: inline batches are what one read brings; no size-or-timeout")

    def daemon_flags(self) -> list[str]:
        """The `offload serve` options of this point (its endpoints apart)."""
        return [
            "--matcher", self.matcher, "--workers", str(self.w), "--kernels", str(self.k),
            "--engine-threads", str(self.e), "--batch-max-queries", str(self.batch_max_queries),
            "--batch-timeout-us", str(self.batch_timeout_us), "--shards", str(self.shards),
        ]  # fmt: skip

    def fields(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def of_row(row: dict[str, Any]) -> Deployment:
        """The point a sweep or recommend row describes (rows written before issue 44 lack the
        newer fields: raw requests as traced over ipc, `fast`, one shard)."""
        known = {f.name for f in fields(Deployment)}
        given = {key: value for key, value in row.items() if key in known}
        if given.get("batch_max_queries") and "batch_timeout_us" not in given:
            given["batch_timeout_us"] = DAEMON_BATCH_TIMEOUT_US
        return Deployment(**given)


MAX_REQUEST_QUERIES = 1 << 20  # the daemon's max_request_queries at most


def product(
    p: Sequence[int] = (1,),
    shapes: Sequence[tuple[int, int, int]] = ((1, 1, 1),),
    policies: Sequence[Policy] = (Policy(),),
    encodings: Sequence[str] = ("raw",),
    request_queries: Sequence[int] = (0,),
    transports: Sequence[str] = ("ipc",),
    matchers: Sequence[str] = ("fast",),
) -> list[Deployment]:
    """Every combination, in this order (the matcher varies slowest); points that differ only in
    what their shape ignores (e, and w with encoded requests, inline; a per-request policy's
    timeout) are kept once."""
    out: dict[Deployment, None] = {}
    for m, t, n, enc, pol, (w, k, e), pp in itertools.product(
        matchers, transports, request_queries, encodings, policies, shapes, p
    ):
        if k == 0:  # inline: no engine threads; encoded requests need no worker
            e, w = 1, (w if enc == "raw" else 1)
            pol = Policy(pol.max_queries, 0)
        if not pol.max_queries:  # per request: nothing to wait for
            pol = Policy()
        out.setdefault(Deployment(pp, w, k, e, pol.max_queries, pol.timeout_us, enc, n, t, m), None)
    return list(out)


def policies(text: str | None, batch_sizes: Sequence[int], timeout_us: int) -> list[Policy]:
    """The policies an option names (`per-req,fill4096`), else the older spelling's: each batch
    size (0 = per request) as size-or-timeout with `timeout_us`."""
    if text is not None:
        return [Policy.parse(x) for x in text.split(",") if x.strip()]
    return [Policy(b, timeout_us if b else 0) for b in batch_sizes]


def endpoint(transport: str, tmp: str) -> str:
    """The data endpoint of a daemon serving over `transport`: a file in `tmp` for ipc and shm,
    a free loopback port for tcp."""
    if transport == "ipc":
        return f"ipc://{tmp}/d.sock"
    if transport == "shm":
        return f"shm://{tmp}/d.shm"
    if transport == "tcp":
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return f"tcp://127.0.0.1:{s.getsockname()[1]}"
    raise ValueError(f"transport is one of {', '.join(TRANSPORTS)}, not {transport!r}")


def parse_shape(text: str) -> tuple[int, int, int]:
    """`inline`, `2w inline`, `2w 1k 1e` or `2w1k1e` (w workers, k executors, e engines each)."""
    t = text.replace(" ", "")
    if m := re.fullmatch(r"(?:(\d+)w)?inline", t):
        return int(m[1] or 1), 0, 1
    if m := re.fullmatch(r"(\d+)w(\d+)k(?:(\d+)e)?", t):
        return int(m[1]), int(m[2]), int(m[3] or 1)
    raise ValueError(f"a pipeline shape is inline, Nw inline or NwKkEe (as 2w1k1e), not {text!r}")
