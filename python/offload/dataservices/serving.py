"""Serving a node as a process (``offload node serve``): its budget applied (CPU quota, memory
limit), its link shaped in a namespace, its token written where clients look for it, until a
signal or a deadline; and, in one line each, what keeps it from listening and what its budget is.
"""

from __future__ import annotations

import errno
import os
import secrets
import signal
import socket
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from offload.clitools import size_bytes
from offload.dataservices.node import Node, NodeConfig, Service
from offload.files import write_text
from offload.host import budgets as B
from offload.host import links as L
from offload.host.links import Link


class CannotServe(Exception):
    """Why a node could not start serving, in one line."""


def default_token_file(port: int) -> Path:
    return Path.home() / ".offload" / f"node-{port}.token"


def config(prof: B.Profile, base: B.Profile, host: str, port: int, data_dir: Path | None,
           allow_remote: bool, name: str, models: Path | None) -> NodeConfig:  # fmt: skip
    """A node's configuration under ``prof`` (``base`` with the user's changes): its token from
    $OFFLOAD_NODE_TOKEN or a fresh one, its system type, its time models from ``models``
    (ValueError where the file is not theirs)."""
    token = os.environ.get("OFFLOAD_NODE_TOKEN") or secrets.token_urlsafe(24)
    cfg = NodeConfig(token, host, port, prof.threads, data_dir, allow_remote, name, system=prof.system(base))
    if models is not None:
        from offload.dataservices.timemodel import Models

        cfg.models = Models.load(models)
    return cfg


@dataclass
class Served:
    """A node serving, with what its budget and link did (``budget.apply``, ``links.shape``)."""

    node: Node
    applied: dict[str, Any]
    netns: str | None
    token_file: Path | None
    """Where its token was written (None: $OFFLOAD_NODE_TOKEN gives it)."""

    @property
    def where(self) -> str:
        ns = f" in {L.namespace_name(self.netns)}" if self.netns else ""
        return f"grpc://{self.node.config.host}:{self.node.port}{ns}"

    def stop(self) -> bool:
        """Stops serving (queries running get the node's drain time, then are stopped), unshapes
        the link and releases the budget. False where calls were still open a few seconds past
        the drain time (a stream its client does not read holds gRPC's shutdown): the caller
        then ends the process rather than wait on them."""
        t = threading.Thread(target=self.node.shutdown, name="shutdown", daemon=True)
        t.start()
        t.join(self.node.config.drain_s + SHUTDOWN_GRACE_S)
        if self.netns is not None:
            L.unshape(L.namespace_name(self.netns), self.node.port)
        B.release(self.applied)
        return not t.is_alive()


SHUTDOWN_GRACE_S = 5.0
"""How long past its drain time a node's shutdown may take before its process ends anyway."""


def start(cfg: NodeConfig, prof: B.Profile, netns: str | None, token_file: Path | None,
          services: Sequence[Service] = ()) -> Served:  # fmt: skip
    """Starts a node hosting ``services``, writes its token (to ``token_file``, else the default
    for its port), holds it to ``prof``'s budget and, in ``netns``, shapes its link. CannotServe
    says in one line why it could not."""
    if cfg.port and (busy := port_in_use(cfg.host, cfg.port)):  # before gRPC logs its own lines
        raise CannotServe(busy)
    cfg.warm_engines = False  # started below, once the budget holds this process
    try:
        node = Node(cfg, services)
    except ValueError as e:
        raise CannotServe(str(e)) from None
    except Exception as e:  # gRPC says only "Server did not start properly"
        raise CannotServe(listen_error(cfg.host, cfg.port, e)) from None
    try:
        written = write_token(token_file or default_token_file(node.port), cfg.token)
    except OSError as e:
        node.shutdown()
        raise CannotServe(str(e)) from None
    applied = B.apply(prof, f"{cfg.name}-{node.port}")
    node.engines.warm()  # after the budget: engine processes are held to it too
    if netns is not None:
        applied["link"] = L.shape(L.namespace_name(netns), node.port, prof.link)
    cfg.budget = applied
    return Served(node, applied, netns, written)


QUERY_TIMEOUT_S = 120.0
"""A query's time limit on a node of one whole core (or no quota); a slower budget gets more."""


def default_query_timeout(prof: B.Profile) -> float:
    """The time limit that fits ``prof``'s CPU: QUERY_TIMEOUT_S over its cores where it has
    less than one (a quarter-core bluefield2 node: 480 s), at most 600 s."""
    cores = prof.threads * prof.cpu_per_thread if prof.cpu_per_thread is not None else float(prof.threads)
    return min(600.0, QUERY_TIMEOUT_S / min(1.0, max(cores, 0.01)))


def wait(max_seconds: float = 0.0) -> None:
    """Until SIGINT or SIGTERM, or ``max_seconds`` (0: no deadline)."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait(max_seconds or None)


def port_in_use(host: str, port: int) -> str | None:
    """One line saying ``host:port`` cannot be bound (another process has it), else None."""
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers do: TIME_WAIT is no owner
            s.bind((host, port))
    except OSError as b:
        if b.errno == errno.EADDRINUSE:
            return (
                f"cannot listen on {host}:{port}: the address is in use (another node?): pick another --port"
            )
        return f"cannot listen on {host}:{port}: {b.strerror}"
    return None


def listen_error(host: str, port: int, e: Exception) -> str:
    """Why a node could not listen, in one line: most often another process has the port."""
    return port_in_use(host, port) or f"cannot listen on {host}:{port}: {str(e).splitlines()[0]}"


def with_overrides(
    base: B.Profile, threads: int | None, cpu: float | None, memory: str | None, link: str | None
) -> B.Profile:
    """``base`` with what is given changed: threads, a core's share per thread, the memory limit
    (K/M/G/T, or "none"), the link (RATE[,DELAY]); ValueError where one does not parse."""
    changes: dict[str, Any] = {}
    if threads is not None:
        changes["threads"] = threads
    if cpu is not None:
        changes["cpu_per_thread"] = cpu
    if memory is not None:
        changes["memory_bytes"] = None if memory.lower() == "none" else size_bytes(memory)
    if link is not None:
        changes["link"] = Link.parse(link)
    return base.with_(**changes)


def write_token(path: Path, token: str) -> Path | None:
    """Writes the token file whole (temp + fsync + rename), readable by this user only, and says
    where; None where $OFFLOAD_NODE_TOKEN gives the token (nothing is written)."""
    if os.environ.get("OFFLOAD_NODE_TOKEN"):
        return None
    path = path.expanduser().absolute()
    path.parent.mkdir(parents=True, exist_ok=True)
    old = os.umask(0o077)  # the file is created 0600 and stays so through the rename
    try:
        write_text(path, token + "\n")
    finally:
        os.umask(old)
    return path


def budget_line(applied: dict[str, Any], threads: int | None = None) -> str:
    """What a node's budget is, as applied (budget.apply, link.shape): profile, CPU, memory, link."""
    if not applied:
        return f"{threads or '?'} thread(s); no budget applied (a node run in-process: no quota, no limits)"
    cpu, mem, link = applied.get("cpu", {}), applied.get("memory", {}), applied.get("link")
    parts = [f"profile {applied['profile']}, {applied['threads']} thread(s)"]
    if "cgroup" in cpu:  # a quota or limit was set (cgroup v1 or v2)
        parts.append(f"CPU quota {cpu['quota_us'] / cpu['period_us']:.2f} core")
    elif cpu.get("method") == "pinned":
        parts.append(f"pinned to CPU {cpu['cpus']} ({cpu['reason']})")
    if "cgroup" in mem:  # a quota or limit was set (cgroup v1 or v2)
        parts.append(f"memory {mem['limit_bytes'] / 2**30:.1f} GiB")
    elif "reason" in mem and "sets no" not in mem["reason"]:
        parts.append(f"memory unlimited ({mem['reason']})")
    if link:
        rate = f"{link['rate_mbit']:g} Mbit/s" if link["rate_mbit"] else "unlimited rate"
        parts.append(
            f"link {rate}, delay {link['delay_ms']:g} ms"
            + (f" ({link['delay_reason']})" if "delay_reason" in link else "")
        )
    return "; ".join(parts)
