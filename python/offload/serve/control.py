"""The control socket's client: one command (`stats`, `reload`, `set`) and its JSON answer,
watching the CURVE handshake so that a refused key is an error at once, not a timeout
(docs/serve-protocol.md, "Control socket"). Every command first waits for a connection at most
its connect timeout (nothing listening there: an error then, whatever the answer's timeout),
then for the answer at most its timeout."""

from __future__ import annotations

import json
import time
from typing import Any

import zmq
from zmq.utils.monitor import recv_monitor_message

from offload.serve import CurveKeys

# Seconds a control command waits for a connection (`offload serve stats|reload|set
# --connect-timeout`).
CONNECT_TIMEOUT_S = 5.0


def control_request(
    endpoint: str,
    message: str | list[bytes],
    timeout_s: float,
    curve: CurveKeys | None = None,
    connect_timeout_s: float = CONNECT_TIMEOUT_S,
) -> dict[str, Any]:
    """Sends one control command (a text, or the frames of a multipart command) and returns the
    daemon's JSON answer. Nothing connected within `connect_timeout_s` (or `timeout_s`, if less)
    is a TimeoutError saying so; with CURVE, a refused key is an error at once; sending and
    waiting share the one deadline of `timeout_s`."""
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    # Only a connection made (handshake done) takes a message: POLLOUT then means "connected".
    sock.setsockopt(zmq.IMMEDIATE, 1)
    if curve is not None:
        curve.apply(sock)
    monitor = sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_DISCONNECTED)
    frames = [message.encode()] if isinstance(message, str) else message
    try:
        sock.connect(endpoint)
        handshake = _Handshake(sock, monitor, endpoint, timeout_s, curve is not None)
        connect_by = min(handshake.deadline, time.monotonic() + connect_timeout_s)
        while True:
            # A connection the daemon closed mid-handshake leaves the socket with nowhere to send
            # until it reconnects: a blocking send would wait for ever (it did, in CI).
            handshake.wait(zmq.POLLOUT, connect_by, min(connect_timeout_s, timeout_s))
            try:
                sock.send_multipart(frames, zmq.NOBLOCK)
                break
            except zmq.Again:
                continue  # the connection went between the poll and the send
        handshake.wait(zmq.POLLIN, handshake.deadline)
        return dict(json.loads(sock.recv_string()))
    finally:
        sock.disable_monitor()
        monitor.close(linger=0)
        sock.close(linger=0)


class _Handshake:
    """Waits on the socket until a deadline, watching the CURVE handshake: a key the daemon
    refuses is an error at once, and a timeout after connections closed mid-handshake says what
    is likely wrong."""

    def __init__(
        self, sock: zmq.Socket[Any], monitor: zmq.Socket[Any], endpoint: str, timeout_s: float, curve: bool
    ) -> None:
        self.sock, self.monitor, self.endpoint, self.curve = sock, monitor, endpoint, curve
        self.timeout_s, self.deadline, self.dropped = timeout_s, time.monotonic() + timeout_s, 0

    def wait(self, event: int, deadline: float, connect_timeout_s: float | None = None) -> None:
        """Returns once the socket is ready for ``event`` (POLLIN or POLLOUT) before
        ``deadline``; with ``connect_timeout_s``, the wait is for a connection, and its timeout
        says so."""
        poller = zmq.Poller()
        poller.register(self.sock, event)
        poller.register(self.monitor, zmq.POLLIN)
        while (left := deadline - time.monotonic()) > 0:
            ready = dict(poller.poll(int(left * 1000) + 1))
            if ready.get(self.sock, 0) & event:
                return
            if self.monitor in ready:
                if recv_monitor_message(self.monitor)["event"] == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
                    raise PermissionError(
                        f"{self.endpoint} refused this client's key: the daemon must admit its public "
                        "half (--curve-client NAME.key)"
                    )
                self.dropped += 1
        raise TimeoutError(self._timed_out(connect_timeout_s))

    def _timed_out(self, connect_timeout_s: float | None) -> str:
        hint = ""
        if self.dropped:
            why = (
                "is --server-key the daemon's?"
                if self.curve
                else "does it need CURVE (--server-key, --client-key)?"
            )
            hint = f"; the daemon closed the connection {self.dropped} times during the handshake: {why}"
        if connect_timeout_s is not None:
            return (
                f"no connection to {self.endpoint} within {connect_timeout_s:g} s (--connect-timeout): is "
                f"`offload serve -c {self.endpoint}` running?{hint}"
            )
        return f"no answer from {self.endpoint} within {self.timeout_s:g} s{hint}"
