"""What a node and its clients say to each other beyond Flight itself: the one definition of the
protocol's version, its requests and tickets, and the words of a refused call.

A query is a ``FlightDescriptor.for_command`` holding a JSON request (:func:`request`); the
node answers with tickets, each a JSON request it can run without remembering anything: the
query again (``offload``) or one scan per table read (``pushback``, :func:`scan_ticket`). A
service a node hosts (the particle flows) writes its tickets with :func:`message` too, under a
key of its own. Every request carries ``"v": PROTOCOL``; the node refuses any other version. A
node that learns from its queries names each in its tickets (``"q"``: :func:`plan_key` and a
count), and its client sends the host's stages back under that name (action ``observe``).
The node (:mod:`.node`), its client (:mod:`.client`) and the services a node hosts import this
module, and none of them each other for it.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import pyarrow.flight as flight

PROTOCOL = 1
WAYS = ("offload", "pushback")
REQUEST_WAYS = (*WAYS, "auto")
"""``auto``: the node decides (with its time models; offload where it has none)."""
COMPRESSIONS = (None, "lz4", "zstd")
WRONG_TOKEN = "wrong token"
NO_TOKEN = "no bearer token"
"""The words that start a refused call's error: a client tells the two apart by them."""


def message(**body: Any) -> bytes:
    """A request or ticket: ``body`` as JSON, after the protocol version (``{"v": 1, ...}``)."""
    return json.dumps({"v": PROTOCOL, **body}).encode()


def request(plan: bytes, way: str, compression: str | None = None, query: str | None = None) -> bytes:
    """The JSON command of a query (a FlightDescriptor command or, for offload, a ticket);
    ``query``: the id a node gave the query (in its tickets), by which it learns from it."""
    if way not in REQUEST_WAYS:
        raise ValueError(f"way must be one of {', '.join(REQUEST_WAYS)}, got {way!r}")
    if compression not in COMPRESSIONS:
        raise ValueError(f"compression must be none, lz4 or zstd, got {compression!r}")
    body = {"way": way, "plan": base64.b64encode(plan).decode(), "compression": compression}
    return message(**body) if query is None else message(**body, q=query)


def scan_ticket(table: str, columns: list[str], compression: str | None, query: str | None = None) -> bytes:
    """A pushback ticket: the columns of one data set, as they are; ``query``: the id of the
    query it is for (as in :func:`request`)."""
    if query is None:
        return message(scan=table, columns=columns, compression=compression)
    return message(scan=table, columns=columns, compression=compression, q=query)


def plan_key(plan: bytes) -> str:
    """A short name of a plan (a hash of its bytes): the start of a query's id, and the key of
    what a node keeps per plan."""
    return hashlib.blake2b(plan, digest_size=8).hexdigest()


def json_object(raw: bytes, what: str) -> dict[str, Any]:
    """``raw`` as a JSON object; a Flight error naming ``what`` where it is not one."""
    try:
        v = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise flight.FlightServerError(f"the {what} is not JSON") from None
    if not isinstance(v, dict):
        raise flight.FlightServerError(f"the {what} must be a JSON object")
    return v


def parse(raw: bytes, passthrough: tuple[str, ...] = ("scan",)) -> dict[str, Any]:
    """A request or ticket, its version checked. One with a key of ``passthrough`` (a scan, a
    hosted service's ticket) is returned as it is; a query's way and compression are checked and
    its plan decoded from base64."""
    req = json_object(raw, "request")
    if req.get("v") != PROTOCOL:
        raise flight.FlightServerError(f"request version {req.get('v')!r}; this node speaks {PROTOCOL}")
    if any(k in req for k in passthrough):
        return req
    way, compression = req.get("way"), req.get("compression")
    if way not in REQUEST_WAYS:
        raise flight.FlightServerError(f"way must be one of {', '.join(REQUEST_WAYS)}, got {way!r}")
    if compression not in COMPRESSIONS:
        raise flight.FlightServerError(f"compression must be none, lz4 or zstd, got {compression!r}")
    try:
        req["plan"] = base64.b64decode(req.get("plan", ""), validate=True)
    except ValueError:
        raise flight.FlightServerError("the plan is not base64") from None
    return req
