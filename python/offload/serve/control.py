"""The control socket's client: one command (`stats`, `reload`, `set`) and its JSON answer,
watching the CURVE handshake so that a refused key is an error at once, not a timeout
(docs/serve-protocol.md, "Control socket")."""

from __future__ import annotations

import json
import time
from typing import Any

import zmq
from zmq.utils.monitor import recv_monitor_message

from offload.serve import CurveKeys


def control_request(
    endpoint: str, message: str | list[bytes], timeout_s: float, curve: CurveKeys | None = None
) -> dict[str, Any]:
    """Sends one control command (a text, or the frames of a multipart command) and returns the
    daemon's JSON answer. With CURVE, a refused key is an error at once, not a timeout."""
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    if curve is not None:
        curve.apply(sock)
    monitor = sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_DISCONNECTED)
    try:
        sock.connect(endpoint)
        sock.send_multipart([message.encode()] if isinstance(message, str) else message)
        return dict(json.loads(_answer(sock, monitor, endpoint, timeout_s, curve is not None)))
    finally:
        sock.disable_monitor()
        monitor.close(linger=0)
        sock.close(linger=0)


def _answer(
    sock: zmq.Socket[Any], monitor: zmq.Socket[Any], endpoint: str, timeout_s: float, curve: bool
) -> str:
    """Waits for the answer, watching the handshake: a key the daemon refuses is an error at once,
    and a timeout after connections closed mid-handshake says what is likely wrong."""
    poller = zmq.Poller()
    poller.register(sock, zmq.POLLIN)
    poller.register(monitor, zmq.POLLIN)
    deadline, dropped = time.monotonic() + timeout_s, 0
    while (left := deadline - time.monotonic()) > 0:
        ready = dict(poller.poll(int(left * 1000) + 1))
        if sock in ready:
            return str(sock.recv_string())
        if monitor in ready:
            if recv_monitor_message(monitor)["event"] == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
                raise PermissionError(
                    f"{endpoint} refused this client's key: the daemon must admit its public half "
                    "(--curve-client NAME.key)"
                )
            dropped += 1
    hint = ""
    if dropped:
        why = "is --server-key the daemon's?" if curve else "does it need CURVE (--server-key, --client-key)?"
        hint = f"; the daemon closed the connection {dropped} times during the handshake: {why}"
    raise TimeoutError(f"no answer from {endpoint} within {timeout_s} s{hint}")
