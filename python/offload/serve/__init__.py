"""The rule engine as a service: a client for the ZeroMQ daemon (`offload serve`).

>>> from offload.serve import Client
>>> with Client("tcp://127.0.0.1:5555", criteria=rs.criterion_codes) as c:
...     reply = c.match({"CTN_TYPE": ["II"], ...}, deadline_s=0.05)
>>> reply.status, reply.rule, reply.content, reply.stages

Frames are built and parsed by the same Rust code the daemon uses (one protocol definition,
docs/serve-protocol.md); this module only moves bytes with pyzmq.

Where things live (docs/serve-protocol.md, "Where things live"):

- ``__init__``: the clients (``Client``, ``AsyncClient``), ``CurveKeys``, ``ServeReply``
- ``cli``: ``offload serve`` (its arguments go untouched to the daemon's one settings parser,
  ``offload_serve::config::Settings`` in Rust) and ``keys``, ``stats``, ``reload``, ``set``,
  ``inject``, ``sweep``
- ``daemon``: the daemon as a child process, started and stopped with bounded waits
- ``inject``: replays a user-request trace; latency percentiles as the simulator's
  (``np.percentile``, linear)
- ``sweep``: a grid of configurations measured with the injector, and the Pareto front
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
import zmq

from offload import _native
from offload.rules import NO_MATCH, _to_column

__all__ = ["AsyncClient", "Client", "CurveKeys", "ServeError", "ServeReply"]


class ServeError(RuntimeError):
    """The service did not answer in time, or answered with something unreadable."""


@dataclass(frozen=True)
class CurveKeys:
    """What a client needs to reach a socket that requires CURVE (docs/serve-protocol.md,
    "Security"): the daemon's public key file (``server.key``) and this client's secret key file
    (``NAME.key_secret``, whose public half the daemon admits). Files from ``offload serve keys``.

    >>> keys = CurveKeys("keys/server.key", "keys/ops.key_secret")
    >>> Client("tcp://10.0.0.5:5555", criteria=codes, curve=keys)
    """

    server_key: str | Path
    client_key: str | Path

    def apply(self, sock: zmq.Socket[Any]) -> None:
        """Makes ``sock`` a CURVE client; call before connecting."""
        if not zmq.has("curve"):
            raise ServeError("this pyzmq's libzmq has no CURVE support")
        server, _ = _native.read_curve_key(str(Path(self.server_key).expanduser()))
        public, secret = _native.read_curve_key(str(Path(self.client_key).expanduser()))
        if secret is None:
            raise ValueError(f"{self.client_key}: holds no secret key (give NAME.key_secret, not NAME.key)")
        sock.curve_serverkey = server.encode()
        sock.curve_publickey = public.encode()
        sock.curve_secretkey = secret.encode()


@dataclass(frozen=True)
class ServeReply:
    """One reply. ``status`` is ``Ok``, ``Busy``, ``DeadlineExceeded``, ``Malformed``,
    ``BadRequest`` or ``ShuttingDown``; ``rule`` is -1 where nothing matched. With
    ``stop_after``, fewer answers than queries come back (the rest were not evaluated)."""

    request_id: int
    status: str
    version: int
    rule: np.ndarray
    content: np.ndarray
    stages_ns: dict[str, int] = field(default_factory=dict)
    message: str = ""
    round_trip_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "Ok"

    @property
    def matched(self) -> np.ndarray:
        return self.rule >= 0


def _decode(frame: bytes, t0: float) -> ServeReply:
    rid, status, version, rule, content, stages, message = _native.decode_reply(frame)
    rule = np.asarray(rule)
    return ServeReply(
        request_id=rid,
        status=status,
        version=version,
        rule=np.where(rule == NO_MATCH, -1, rule.astype(np.int64)),
        content=np.asarray(content),
        stages_ns=dict(stages),
        message=message,
        round_trip_s=time.perf_counter() - t0,
    )


class Client:
    """A synchronous client (one request in flight). ``criteria``: the criterion codes in the
    server's rule-type order (``RuleSet.criterion_codes``); every request carries their
    fingerprint, and the server answers BadRequest to columns that follow other criteria or
    another order. ZeroMQ reconnects by itself, so a client
    survives a daemon restart; a reply that does not come within ``timeout_s`` raises
    :class:`ServeError` and a late one is discarded by its request id. ``curve``: the keys for
    data endpoints that require CURVE (a key the daemon does not admit shows as a timeout)."""

    def __init__(
        self,
        endpoint: str = "tcp://127.0.0.1:5555",
        criteria: Sequence[str] | None = None,
        timeout_s: float = 10.0,
        context: zmq.Context[Any] | None = None,
        curve: CurveKeys | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.criteria = list(criteria) if criteria is not None else None
        self._fp: int | None = None
        self.timeout_s = timeout_s
        self._ctx = context or zmq.Context.instance()
        self._sock = self._ctx.socket(zmq.DEALER)
        self._sock.setsockopt(zmq.LINGER, 0)
        if curve is not None:
            curve.apply(self._sock)
        self._sock.connect(endpoint)
        self._ids = itertools.count(1)

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._sock.close(linger=0)

    def _fingerprint(self) -> int:
        """The fingerprint of ``criteria`` every request carries (protocol version 2): the server
        refuses columns in another order instead of misreading them."""
        if self.criteria is None:
            raise ValueError(
                "give Client(criteria=...), the criterion codes in the server's rule-type order "
                "(e.g. rules.load(...).criterion_codes): requests carry their fingerprint"
            )
        if self._fp is None:
            self._fp = int(_native.criteria_fingerprint(self.criteria))
        return self._fp

    def _columns(self, queries: Any) -> list[Any]:
        self._fingerprint()
        assert self.criteria is not None
        if isinstance(queries, Mapping) or hasattr(queries, "column_names") or hasattr(queries, "columns"):
            return [_to_column(queries[c], c) for c in self.criteria]
        cols = [_to_column(col, name) for col, name in zip(queries, self.criteria, strict=False)]
        if len(cols) != len(queries) or len(cols) != len(self.criteria):
            raise ValueError(f"{len(queries)} query columns for {len(self.criteria)} criteria")
        return cols

    def send_frame(self, frame: bytes) -> None:
        """Sends a raw frame (for tests and tools); read the answer with :meth:`receive`."""
        self._sock.send(frame)

    def receive(self, request_id: int | None = None, started: float | None = None) -> ServeReply:
        """Waits for the reply to ``request_id`` (any reply when None)."""
        t0 = started if started is not None else time.perf_counter()
        deadline = t0 + self.timeout_s
        while True:
            left = deadline - time.perf_counter()
            if left <= 0 or not self._sock.poll(int(left * 1000) + 1):
                raise ServeError(f"no reply from {self.endpoint} within {self.timeout_s} s")
            reply = _decode(self._sock.recv(), t0)
            if request_id is not None and reply.request_id != request_id:
                continue  # a late reply to an earlier request that timed out
            return reply

    def request_frame(
        self, queries: Any, deadline_s: float | None = None, stop_after: int = 0
    ) -> tuple[int, bytes]:
        """(request id, frame) for raw query columns (keyed by criterion code, or positional in
        the order of ``criteria``), or for a uint32 array from ``CompiledRules.encode`` (then
        ``encoding_version`` must be the server's version, 1)."""
        rid = next(self._ids)
        deadline_us = int((time.time() + deadline_s) * 1e6) if deadline_s is not None else 0
        if isinstance(queries, np.ndarray) and queries.dtype == np.uint32 and queries.ndim == 2:
            codes = np.ascontiguousarray(queries)
            frame = _native.encode_request_codes(rid, deadline_us, stop_after, self._fingerprint(), 1, codes)
        else:
            cols = self._columns(queries)
            frame = _native.encode_request(rid, deadline_us, stop_after, self._fingerprint(), cols)
        return rid, bytes(frame)

    def match(self, queries: Any, deadline_s: float | None = None, stop_after: int = 0) -> ServeReply:
        """Sends one request and waits for its reply. ``deadline_s``: relative deadline after
        which the server answers DeadlineExceeded instead of executing; ``stop_after``: stop
        once that many queries have matched (related-query batching with early stop)."""
        t0 = time.perf_counter()
        rid, frame = self.request_frame(queries, deadline_s, stop_after)
        self._sock.send(frame)
        return self.receive(rid, t0)


class AsyncClient:
    """An asyncio client: many requests in flight on one socket, each awaiting its own reply
    (a background task routes replies by request id).

    >>> async with AsyncClient(endpoint, criteria=codes) as c:
    ...     replies = await asyncio.gather(*(c.match(q) for q in batches))
    """

    def __init__(
        self,
        endpoint: str,
        criteria: Sequence[str] | None = None,
        timeout_s: float = 10.0,
        curve: CurveKeys | None = None,
    ) -> None:
        import asyncio

        import zmq.asyncio

        self._frames = Client.__new__(Client)  # reuse Client's frame building, no socket
        self._frames.criteria = list(criteria) if criteria is not None else None
        self._frames._fp = None
        self._frames._ids = itertools.count(1)
        self.endpoint, self.timeout_s = endpoint, timeout_s
        self._ctx = zmq.asyncio.Context.instance()
        self._sock = self._ctx.socket(zmq.DEALER)
        self._sock.setsockopt(zmq.LINGER, 0)
        if curve is not None:
            curve.apply(self._sock)  # type: ignore[arg-type]
        self._sock.connect(endpoint)
        self._waiting: dict[int, tuple[asyncio.Future[ServeReply], float]] = {}
        self._reader: asyncio.Task[None] | None = None

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
        self._sock.close(linger=0)

    async def _read(self) -> None:
        while True:
            frame = await self._sock.recv()
            rid = int.from_bytes(frame[4:12], "little") if len(frame) >= 12 else 0
            waiter = self._waiting.pop(rid, None)
            if waiter is not None and not waiter[0].done():
                waiter[0].set_result(_decode(frame, waiter[1]))

    async def match(self, queries: Any, deadline_s: float | None = None, stop_after: int = 0) -> ServeReply:
        """Like :meth:`Client.match`, awaitable, many at a time."""
        import asyncio

        if self._reader is None:
            self._reader = asyncio.get_running_loop().create_task(self._read())
        t0 = time.perf_counter()
        rid, frame = self._frames.request_frame(queries, deadline_s, stop_after)
        fut: asyncio.Future[ServeReply] = asyncio.get_running_loop().create_future()
        self._waiting[rid] = (fut, t0)
        await self._sock.send(frame)
        try:
            return await asyncio.wait_for(fut, self.timeout_s)
        except TimeoutError:
            self._waiting.pop(rid, None)
            raise ServeError(f"no reply from {self.endpoint} within {self.timeout_s} s") from None
