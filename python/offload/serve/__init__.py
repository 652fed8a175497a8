"""The rule engine as a service: a client for the ZeroMQ daemon (`offload serve`).

>>> from offload.serve import Client
>>> with Client("tcp://127.0.0.1:5555", criteria=rs.criterion_codes) as c:
...     reply = c.match({"CTN_TYPE": ["II"], ...}, deadline_s=0.05)
>>> reply.status, reply.rule, reply.content, reply.stages

The clients wrap the Rust client (``offload_serve::client`` through ``_native.ServeClient`` and
``_native.ServeMultiplexed``): its socket (a ZeroMQ DEALER, or shared memory for ``shm://NAME``),
request ids, waits with their deadlines and skipping of late replies; frames are built and parsed
by the same Rust code the daemon uses (one protocol definition, docs/serve-protocol.md). With
``encode="client"`` a
client fetches the server's encoding dictionary (once per rule-set version) and sends codes
instead of text, encoded here by the server's own encoder rebuilt from it
(``_native.DictionaryEncoder``).

Where things live (docs/serve-protocol.md, "Where things live"):

- ``__init__``: the clients (``Client``, ``AsyncClient``), ``CurveKeys``, ``ServeReply``
- ``cli``: ``offload serve`` (its arguments go untouched to the daemon's one settings parser,
  ``offload_serve::config::Settings`` in Rust) and ``keys``, ``stats``, ``reload``, ``set``,
  ``inject``, ``sweep``
- ``control``: the control socket's client (``control_request``: stats, reload, set)
- ``bench``: the Rust load generator's frames, runs and the host path per query from ``stats``
- ``hostpath``: configurations side by side, each to its knee with its host path; the plot
- ``daemon``: the daemon as a child process, started and stopped with bounded waits
- ``inject``: replays a user-request trace through the Rust load generator (P connections), with
  the server's stage times by request size
- ``sweep``: a grid of configurations measured with the injector, and the Pareto front; p = w = k
  scaled together (``--together``, the seed's Fig. 5)
- ``breakdown``: where a request's time goes by request size, 1 to 65,536 queries (the seed's Fig. 2)
- ``earlystop``: CPU against the accelerator per user request with early stop (the seed's Fig. 10)
- ``h2d``: host-to-device rate by query batch from a recorded GPU probe (the seed's Fig. 9)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import numpy as np

from offload import _native
from offload.rules import NO_MATCH, _to_column

if TYPE_CHECKING:
    import zmq

__all__ = ["AsyncClient", "Client", "CurveKeys", "EncodingDictionary", "ServeError", "ServeReply"]


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

    def files(self) -> tuple[str, str]:
        """The two key files' paths, ``~`` expanded (what the Rust client reads)."""
        return str(Path(self.server_key).expanduser()), str(Path(self.client_key).expanduser())

    def apply(self, sock: zmq.Socket[Any]) -> None:
        """Makes a pyzmq ``sock`` a CURVE client; call before connecting (the control socket's
        client uses pyzmq; the clients here and the load generator are Rust)."""
        import zmq

        if not zmq.has("curve"):
            raise ServeError("this pyzmq's libzmq has no CURVE support")
        server, _ = _native.read_curve_key(self.files()[0])
        public, secret = _native.read_curve_key(self.files()[1])
        if secret is None:
            raise ValueError(f"{self.client_key}: holds no secret key (give NAME.key_secret, not NAME.key)")
        sock.curve_serverkey = server.encode()
        sock.curve_publickey = public.encode()
        sock.curve_secretkey = secret.encode()


def _key_files(curve: CurveKeys | None) -> tuple[str, str] | tuple[()]:
    return curve.files() if curve is not None else ()


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


ENCODE_MODES = ("server", "client")


@dataclass(frozen=True)
class EncodingDictionary:
    """The server's encoding dictionary of one rule-set version, ready to encode with:
    ``criteria`` (the columns' order), ``code_bits`` (16 when every code fits in a uint16)."""

    version: int
    fingerprint: int
    code_bits: int
    criteria: list[str]
    encoder: Any  # _native.DictionaryEncoder

    @staticmethod
    def from_reply(frame: bytes) -> EncodingDictionary:
        """Reads a dictionary reply; ServeError when the server could not send one."""
        _, status, version, fp, code_bits, dictionary, message = _native.decode_dictionary_reply(frame)
        if status != "Ok":
            raise ServeError(f"dictionary request answered {status}: {message}")
        encoder = _native.DictionaryEncoder(bytes(dictionary))
        criteria = list(encoder.criteria)
        if int(_native.criteria_fingerprint(criteria)) != fp:
            raise ServeError("the dictionary's criteria do not have the reply's fingerprint")
        bits = max(int(code_bits), int(encoder.code_bits))
        return EncodingDictionary(version, fp, bits, criteria, encoder)

    def frame(
        self, request_id: int, columns: list[Any], deadline_us: int, stop_after: int, code_bits: int | None
    ) -> bytes:
        """A request frame of ``columns`` encoded for this version: 16-bit codes where they fit
        (unless ``code_bits`` is 32)."""
        bits = 32 if code_bits == 32 or self.code_bits == 32 else 16
        codes = self.encoder.encode(columns, bits)
        frame = _native.encode_request_codes(
            request_id, deadline_us, stop_after, self.fingerprint, self.version, codes
        )
        return bytes(frame)


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


def _served(call: Callable[..., Any], *args: Any) -> Any:
    """Calls the Rust client; its timeouts and broken connections are ServeErrors."""
    try:
        return call(*args)
    except (TimeoutError, ConnectionError) as e:
        raise ServeError(str(e)) from None


def _stale(reply: ServeReply, version: int) -> bool:
    """Whether the server refused codes because it serves another version now."""
    return reply.status == "BadRequest" and reply.version != version


def _check_version(reply: ServeReply, version: int) -> ServeReply:
    if reply.ok and reply.version != version:
        raise ServeError(f"codes of version {version} answered by version {reply.version}")
    return reply


class _Requests:
    """What both clients share: the criteria and their fingerprint, the encoding mode and the
    dictionary held, and request frames built from query columns (ids from ``_next_id``)."""

    endpoint: str

    def __init__(self, criteria: Sequence[str] | None, encode: str, code_bits: int | None) -> None:
        if encode not in ENCODE_MODES:
            raise ValueError(f"encode is one of {', '.join(ENCODE_MODES)}, not {encode!r}")
        if code_bits not in (None, 16, 32):
            raise ValueError(f"code_bits is 16, 32 or None, not {code_bits!r}")
        self.criteria = list(criteria) if criteria is not None else None
        self._fp: int | None = None
        self.encode = encode
        self.code_bits = code_bits
        self.dictionary: EncodingDictionary | None = None
        self.dictionary_fetches = 0

    def _next_id(self) -> int:
        raise NotImplementedError

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

    def _keep(self, d: EncodingDictionary) -> EncodingDictionary:
        if self.criteria is not None and self.criteria != d.criteria:
            raise ValueError(f"criteria {self.criteria} are not the server's: {d.criteria}")
        self.criteria, self.dictionary = list(d.criteria), d
        self.dictionary_fetches += 1
        return d

    def _client_encoded(self, queries: Any) -> bool:
        return self.encode == "client" and not (isinstance(queries, np.ndarray) and queries.ndim == 2)

    def request_frame(
        self, queries: Any, deadline_s: float | None = None, stop_after: int = 0
    ) -> tuple[int, bytes]:
        """(request id, frame) for raw query columns (keyed by criterion code, or positional in
        the order of ``criteria``), or for a uint32 array from ``CompiledRules.encode`` (then
        ``encoding_version`` must be the server's version, 1)."""
        rid = self._next_id()
        deadline_us = int((time.time() + deadline_s) * 1e6) if deadline_s is not None else 0
        if self._client_encoded(queries):
            if self.dictionary is None:
                raise ServeError("no encoding dictionary yet: call fetch_dictionary() first")
            cols = self._columns(queries)
            return rid, self.dictionary.frame(rid, cols, deadline_us, stop_after, self.code_bits)
        if isinstance(queries, np.ndarray) and queries.dtype == np.uint32 and queries.ndim == 2:
            codes = np.ascontiguousarray(queries)
            frame = _native.encode_request_codes(rid, deadline_us, stop_after, self._fingerprint(), 1, codes)
        else:
            cols = self._columns(queries)
            frame = _native.encode_request(rid, deadline_us, stop_after, self._fingerprint(), cols)
        return rid, bytes(frame)

    def restamp(self, frame: bytes) -> tuple[int, bytes]:
        """A prebuilt request frame with a fresh request id of this client (bytes 4..12), for
        tools that send the same frames again and again (``breakdown``, ``earlystop``)."""
        rid = self._next_id()
        return rid, frame[:4] + rid.to_bytes(8, "little") + frame[12:]


class Client(_Requests):
    """A synchronous client (one request in flight) over the Rust client. ``endpoint``:
    tcp:// or ipc:// (a ZeroMQ DEALER: it reconnects by itself, so a client survives a daemon
    restart) or shm://NAME (shared memory with a daemon on this host; it must be serving).
    ``criteria``: the criterion codes in the server's rule-type order
    (``RuleSet.criterion_codes``); every request carries their fingerprint, and the server
    answers BadRequest to columns that follow other criteria or another order. A reply that does
    not come within ``timeout_s`` (sending included) raises :class:`ServeError` and a late one is
    skipped by its request id. ``curve``: the keys for data endpoints that require CURVE (a key
    the daemon does not admit shows as a timeout).

    ``encode``: ``"server"`` (default) sends raw values, which the server encodes;
    ``"client"`` fetches the server's encoding dictionary (:meth:`fetch_dictionary`, once per
    rule-set version), encodes here and sends codes, 16-bit where every code fits (``code_bits=32``
    forces 32). ``criteria`` may then be left out (the dictionary names them). After a hot
    reload the server refuses the old version's codes (BadRequest, never a wrong answer): the
    client fetches the new dictionary once and sends again."""

    def __init__(
        self,
        endpoint: str = "tcp://127.0.0.1:5555",
        criteria: Sequence[str] | None = None,
        timeout_s: float = 10.0,
        curve: CurveKeys | None = None,
        encode: str = "server",
        code_bits: int | None = None,
    ) -> None:
        super().__init__(criteria, encode, code_bits)
        self.endpoint = endpoint
        self._native = _served(_native.ServeClient, endpoint, timeout_s, *_key_files(curve))
        self._timeout_s = float(timeout_s)

    @property
    def timeout_s(self) -> float:
        """How long a send, or the wait for a reply, may take."""
        return self._timeout_s

    @timeout_s.setter
    def timeout_s(self, seconds: float) -> None:
        self._native.timeout_s = seconds
        self._timeout_s = float(seconds)

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._native.close()

    def _next_id(self) -> int:
        return int(self._native.next_id())

    def disconnect(self, endpoint: str) -> None:
        """Drops the socket's connection to ``endpoint`` (tests: a DEALER with nowhere to send)."""
        self._native.disconnect(endpoint)

    def send_frame(self, frame: bytes) -> None:
        """Sends a raw frame (for tests and tools) within the timeout; read the answer with
        :meth:`receive`."""
        _served(self._native.send_frame, frame)

    def receive_frame(self, request_id: int | None = None, started: float | None = None) -> bytes:
        """The reply frame to ``request_id`` (any reply when None) within the timeout from
        ``started`` (a ``time.perf_counter()``; now when None), undecoded."""
        t0 = started if started is not None else time.perf_counter()
        left = t0 + self.timeout_s - time.perf_counter()
        return bytes(_served(self._native.receive, request_id, max(left, 0.0)))

    def receive(self, request_id: int | None = None, started: float | None = None) -> ServeReply:
        """Waits for the reply to ``request_id`` (any reply when None)."""
        t0 = started if started is not None else time.perf_counter()
        return _decode(self.receive_frame(request_id, t0), t0)

    def fetch_dictionary(self) -> EncodingDictionary:
        """Fetches the server's encoding dictionary of the rule-set version it serves now and
        keeps it (``encode="client"`` does this by itself)."""
        rid, t0 = self._next_id(), time.perf_counter()
        self.send_frame(bytes(_native.encode_dictionary_request(rid)))
        left = t0 + self.timeout_s - time.perf_counter()
        frame = _served(self._native.receive, rid, max(left, 0.0), True)
        return self._keep(EncodingDictionary.from_reply(bytes(frame)))

    def match(self, queries: Any, deadline_s: float | None = None, stop_after: int = 0) -> ServeReply:
        """Sends one request and waits for its reply. ``deadline_s``: relative deadline after
        which the server answers DeadlineExceeded instead of executing; ``stop_after``: stop
        once that many queries have matched (related-query batching with early stop)."""
        t0 = time.perf_counter()
        if not self._client_encoded(queries):
            rid, frame = self.request_frame(queries, deadline_s, stop_after)
            self.send_frame(frame)
            return self.receive(rid, t0)
        d = self.dictionary or self.fetch_dictionary()
        for attempt in range(2):
            rid, frame = self.request_frame(queries, deadline_s, stop_after)
            self.send_frame(frame)
            reply = _check_version(self.receive(rid, t0), d.version)
            if not (attempt == 0 and _stale(reply, d.version)):
                return reply
            d = self.fetch_dictionary()  # the server reloaded: its new version's dictionary
        raise AssertionError("unreachable")  # pragma: no cover


class AsyncClient(_Requests):
    """An asyncio client: many requests in flight on one connection, each awaiting its own
    reply. The Rust side (``_native.ServeMultiplexed``) sends and takes replies by request id
    without blocking: over ZeroMQ in the event loop's thread, woken by the socket's fd
    (``add_reader``); over ``shm://`` through a Rust thread that files replies and timeouts and
    rings an fd. Each wait ends at ``timeout_s`` (a ServeError). Endpoints, ``curve`` and
    ``encode`` as :class:`Client`'s.

    >>> async with AsyncClient(endpoint, criteria=codes) as c:
    ...     replies = await asyncio.gather(*(c.match(q) for q in batches))
    """

    def __init__(
        self,
        endpoint: str,
        criteria: Sequence[str] | None = None,
        timeout_s: float = 10.0,
        curve: CurveKeys | None = None,
        encode: str = "server",
        code_bits: int | None = None,
    ) -> None:
        super().__init__(criteria, encode, code_bits)
        self.endpoint, self.timeout_s = endpoint, timeout_s
        self._native = _served(_native.ServeMultiplexed, endpoint, timeout_s, *_key_files(curve))
        self._fetch_lock = asyncio.Lock()
        self._waiting: dict[int, asyncio.Future[bytes]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._native.ready_fd)
        self._loop = None
        self._native.close()
        for fut in self._waiting.values():
            if not fut.done():
                fut.set_exception(ServeError(f"the client of {self.endpoint} was closed"))
        self._waiting.clear()

    def _next_id(self) -> int:
        return int(self._native.next_id())

    def _filed(self) -> None:
        """The event loop's reader: settles the futures of every outcome there is."""
        for rid, frame, why in self._native.take_done():
            fut = self._waiting.pop(rid, None)
            if fut is None or fut.done():
                continue
            if frame is None:
                fut.set_exception(ServeError(why))
            else:
                fut.set_result(bytes(frame))

    async def _exchange(self, rid: int, frame: bytes) -> bytes:
        """Sends ``frame`` and awaits the reply frame to ``rid`` until ``timeout_s``."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # the first wait, or a client used again under a new loop
            if self._loop is not None and not self._loop.is_closed():
                self._loop.remove_reader(self._native.ready_fd)
            self._loop = loop
            loop.add_reader(self._native.ready_fd, self._filed)
        fut: asyncio.Future[bytes] = loop.create_future()
        self._waiting[rid] = fut
        try:
            if _served(self._native.submit, rid, frame):
                loop.call_soon(self._filed)  # replies may wait that the fd will not signal
            return await asyncio.wait_for(fut, self.timeout_s)
        except TimeoutError:
            raise ServeError(f"no reply from {self.endpoint} within {self.timeout_s} s") from None
        finally:
            self._waiting.pop(rid, None)

    async def fetch_dictionary(self) -> EncodingDictionary:
        """Like :meth:`Client.fetch_dictionary`, awaitable."""
        rid = self._next_id()
        frame = await self._exchange(rid, bytes(_native.encode_dictionary_request(rid)))
        return self._keep(EncodingDictionary.from_reply(frame))

    async def match(self, queries: Any, deadline_s: float | None = None, stop_after: int = 0) -> ServeReply:
        """Like :meth:`Client.match`, awaitable, many at a time."""
        t0 = time.perf_counter()
        if not self._client_encoded(queries):
            rid, frame = self.request_frame(queries, deadline_s, stop_after)
            return _decode(await self._exchange(rid, frame), t0)
        d = await self._dictionary_newer_than(None)
        for attempt in range(2):
            rid, frame = self.request_frame(queries, deadline_s, stop_after)
            reply = _check_version(_decode(await self._exchange(rid, frame), t0), d.version)
            if not (attempt == 0 and _stale(reply, d.version)):
                return reply
            d = await self._dictionary_newer_than(d.version)  # the server reloaded
        raise AssertionError("unreachable")  # pragma: no cover

    async def _dictionary_newer_than(self, version: int | None) -> EncodingDictionary:
        """The dictionary held when it is newer than ``version`` (any, for None), else a fetched
        one: requests in flight together fetch it once."""
        async with self._fetch_lock:
            d = self.dictionary
            if d is not None and (version is None or d.version > version):
                return d
            return await self.fetch_dictionary()
