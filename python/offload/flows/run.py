"""Running a particle data flow over several nodes (:mod:`.network`): start the nodes (each an
``offload node serve`` process with its own budget and link), or take running ones; put each
producer's messages to its node; flush; read the sorted data back; account for every row.

Producer i is a simulation rank whose messages go to node i (its SmartNIC), as in the seed.
If a node is lost, its producer stops, keeps what the node did not acknowledge, and the run
reports where every row is: :func:`account`.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

from offload.dataservices.client import NodeClient, NodeError
from offload.dataservices.cluster import NodeSpec, load_cluster
from offload.flows import datasets as D
from offload.flows import network as W
from offload.flows import partition as F
from offload.host.children import wait_ready

# ------------------------------------------------------------------------------ node processes


@dataclass
class NodeProcesses:
    """Nodes started as ``offload node serve`` processes; killed (and their budgets released by
    their own exit) when the context ends."""

    specs: list[NodeSpec] = field(default_factory=list)
    procs: list[subprocess.Popen[str]] = field(default_factory=list)

    def kill(self, i: int) -> None:
        """Loses node ``i`` at once, as a crashed SmartNIC (SIGKILL: nothing is flushed)."""
        self.procs[i].kill()
        self.procs[i].wait(10)


@contextmanager
def start_nodes(
    n: int,
    profile: str,
    work: Path,
    netns: str | None = None,
    link: str | None = None,
    max_seconds: float = 3600,
    cpu_per_thread: float | None = None,
) -> Iterator[NodeProcesses]:
    """Starts ``n`` nodes under ``profile`` (its CPU share per thread replaced by
    ``cpu_per_thread`` if given; in ``netns``, its loopback shaped to ``link`` per node), each on
    a free port with its own token; every node stops itself after ``max_seconds`` at the latest."""
    if not 1 <= n <= 16:
        raise ValueError(f"1-16 nodes on one machine, got {n}")
    out = NodeProcesses()
    try:
        for i in range(n):
            token = secrets.token_urlsafe(24)
            cmd = [sys.executable, "-m", "offload.cli", "node", "serve", "--port", "0", "--profile", profile,
                   "--name", f"n{i}", "--token-file", str((work / f"n{i}.token").absolute()),
                   "--max-seconds", str(max_seconds)]  # fmt: skip
            if netns:
                cmd += ["--netns", netns] + (["--link", link] if link else [])
            if cpu_per_thread is not None:
                cmd += ["--cpu-per-thread", str(cpu_per_thread)]
            env = os.environ | {"OFFLOAD_NODE_TOKEN": token, "COLUMNS": "200"}
            work.mkdir(parents=True, exist_ok=True)
            p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
            out.procs.append(p)
            out.specs.append(NodeSpec(f"n{i}", _wait_serving(p, f"n{i}"), token))
        yield out
    finally:
        for p in out.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in out.procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()


def _wait_serving(p: subprocess.Popen[str], name: str, timeout_s: float = 60) -> str:
    """The endpoint a starting node prints ("... serving on grpc://HOST:PORT")."""
    said = wait_ready(p, "serving on grpc://", timeout_s, f"node {name}")
    assert p.stdout is not None
    threading.Thread(target=p.stdout.read, daemon=True).start()  # keep its pipe drained
    return said.split("grpc://", 1)[1].split()[0]


# ------------------------------------------------------------------------------------ the run


@dataclass
class Producer:
    """One simulation rank: its messages, and what became of their rows."""

    node: int
    messages: list[tuple[bytes, int]]
    acked: int = 0
    unsent: int = 0
    """Rows the node never acknowledged (kept here: the producer still has them)."""
    error: str | None = None


def messages(name: str, rows: int, work: Path, message_rows: int, seed: int = 0) -> list[tuple[bytes, int]]:
    """The data set's producer messages, packed (as the simulation packs them) with their rows."""
    return F.read_messages(F.data_file(name, rows, work, seed, message_rows))


def setup(specs: list[NodeSpec], name: str, dataset: str, rows: int, parts: int, codec: str | None,
          memtable_rows: int, fanout: int) -> dict[str, Any]:  # fmt: skip
    """The flow's setup as node 0 gets it (each node's has its own index)."""
    nodes = [{"endpoint": s.endpoint, "token": s.token} for s in specs]
    cfg = {"name": name, "dataset": dataset, "rows_hint": rows, "parts": parts, "codec": codec,
           "memtable_rows": memtable_rows, "fanout": fanout, "index": 0, "nodes": nodes}  # fmt: skip
    return W.check_setup(cfg)


def run(
    specs: list[NodeSpec],
    dataset: str,
    rows: int,
    work: Path,
    parts: int = 8,
    codec: str | None = None,
    message_rows: int = 1 << 14,
    memtable_rows: int = 1 << 16,
    fanout: int = 4,
    name: str = "flow",
    midway: Callable[[], None] | None = None,
    queries: bool = True,
    progress: Callable[[int, int], None] | None = None,
    timeout_s: float = 120.0,
    keep: bool = False,
) -> dict[str, Any]:
    """Runs one flow of ``rows`` rows of ``dataset`` over the nodes and returns the result:
    per node its breakdown and rows; the wall time from the first put to the last ack after the
    flush; the seed's queries midway (unless not ``queries``: they take node time from the flow)
    and at the end; the sorted read; the accounting. ``midway`` runs when half the rows are
    acknowledged (a test loses a node there). ``keep`` leaves the
    flow on the nodes (else it is dropped)."""
    cfg = setup(specs, name, dataset, rows, parts, codec, memtable_rows, fanout)
    msgs = messages(dataset, rows, work, message_rows)
    producers = [Producer(i, msgs[i :: len(specs)]) for i in range(len(specs))]
    clients = [NodeClient(s.endpoint, s.token, timeout_s) for s in specs]
    dead: set[int] = set()
    try:
        for i, c in enumerate(clients):
            c.action("flow-setup", json.dumps(cfg | {"index": i}).encode())
        out: dict[str, Any] = {"dataset": dataset, "nodes": len(specs), "parts": parts,
                               "codec": codec or "none", "rows": rows, "message_rows": message_rows,
                               "bytes_in": sum(len(m) for m, _ in msgs)}  # fmt: skip
        half = threading.Event()
        t0, cpu0, busy0 = time.perf_counter(), time.process_time(), machine_busy_s()
        with ThreadPoolExecutor(len(specs)) as pool:
            done = [pool.submit(_produce, p, specs[p.node], name, producers, half, progress, timeout_s)
                    for p in producers]  # fmt: skip
            half.wait()
            if midway is not None:
                midway()
            if queries:
                out["midway"] = _queries(clients, name, dead)
            for d in done:
                d.result()
        dead |= {p.node for p in producers if p.error}
        _call_all(clients, "flow-flush", name, dead)
        out["wall_s"] = time.perf_counter() - t0
        out["driver_cpu_s"] = time.process_time() - cpu0  # the producers' and this driver's share of the CPU
        out["machine_busy_s"] = machine_busy_s() - busy0  # every process's: the rest is other load
        status = _call_all(clients, "flow-status", name, dead)
        out["per_node"] = status
        out["end"] = _queries(clients, name, dead)
        t1 = time.perf_counter()
        sorted_parts = {
            i: clients[i].get(W.ticket(name, read="sorted")) for i in range(len(specs)) if i not in dead
        }
        out["read_s"] = time.perf_counter() - t1
        out["rows_read"] = sum(t.num_rows for t in sorted_parts.values())
        kept = _keep_lost(clients, producers, name, dead, work) if dead else {}
        key = D.dataset(dataset).key
        out["accounting"] = account(producers, status, dead, list(sorted_parts.values()), kept, key)
        out["gb_per_s"] = out["bytes_in"] / 1e9 / out["wall_s"]
        out["sorted"] = (
            pa.concat_tables([sorted_parts[i] for i in sorted(sorted_parts)]) if sorted_parts else None
        )
        if not keep:
            _call_all(clients, "flow-drop", name, dead)
        return out
    finally:
        for c in clients:
            c.close()


@dataclass
class Nodes:
    """Where a scaling run's flows run: on the nodes of a ``cluster`` file (running already), or
    on nodes started here, each under ``profile`` (with ``cpu_per_thread`` of a core per thread,
    if given) and, given a ``link``, in the "flows" namespace with its loopback shaped to it."""

    profile: str = "bluefield2"
    link: str | None = None
    cpu_per_thread: float | None = None
    cluster: Path | None = None


def run_on(n: int, where: Nodes, check: bool = True, **flow: Any) -> dict[str, Any]:
    """One node count of a scaling run: :func:`run` with ``flow`` (its arguments but the nodes)
    over ``n`` nodes of ``where``. With ``check``, and every row stored, the sorted read is
    compared with a plain sort of the producers' data (``matches_plain_sort``). The result, its
    sorted table left out, says the nodes' profile and link, this machine's cores and a node's
    share of a core."""
    if where.cluster is not None:
        specs = load_cluster(where.cluster)[:n]
        if len(specs) < n:
            raise ValueError(f"{where.cluster} has {len(specs)} nodes, fewer than {n}")
        r = run(specs, **flow)
    else:
        netns = "flows" if where.link else None
        with start_nodes(
            n, where.profile, flow["work"], netns, where.link, cpu_per_thread=where.cpu_per_thread
        ) as procs:
            r = run(procs.specs, **flow)
    table = r.pop("sorted")
    if check and r["accounting"]["explained"] and not r["accounting"]["lost_nodes"]:
        # the producers' own file, sorted plainly: generated once, not again here
        name, rows, work = flow["dataset"], flow["rows"], flow["work"]
        sent = pa.ipc.open_file(
            F.data_file(name, rows, work, 0, flow.get("message_rows", 1 << 14))
        ).read_all()
        want = sent.sort_by([(k, "ascending") for k in D.dataset(name).key])
        r["matches_plain_sort"] = table is not None and table.equals(want)
    where_ = {"profile": where.profile, "link": where.link or "none", "cores": os.cpu_count(),
              "share": share(where.profile, where.cpu_per_thread)}  # fmt: skip
    return r | where_


def machine_busy_s() -> float:
    """CPU seconds the whole machine has been busy (all cores, all processes: /proc/stat), or 0."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return 0.0
    user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in fields[:7])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def _produce(p: Producer, spec: NodeSpec, name: str, producers: list[Producer], half: threading.Event,
             progress: Callable[[int, int], None] | None, timeout_s: float) -> None:  # fmt: skip
    """Puts a producer's messages, one per batch; stops at the node's first failure."""
    total = sum(n for q in producers for _, n in q.messages)
    lock = threading.Lock()

    def ack(rows: int) -> None:
        with lock:
            p.acked += rows
        done = sum(q.acked for q in producers)
        if progress is not None:
            progress(done, total)
        if 2 * done >= total:
            half.set()

    def lost(_: pa.RecordBatch, rows: int) -> None:
        p.unsent += rows

    try:
        stream = W.AckedStream(spec.endpoint, spec.token, [W.HEAD, name], W.BLOBS, ack, lost, timeout_s)
    except (flight.FlightError, pa.ArrowException, OSError, NodeError) as e:
        p.error, p.unsent = W.short(e), sum(n for _, n in p.messages)
        half.set()
        return
    for k, (blob, n) in enumerate(p.messages):
        if not stream.send(pa.RecordBatch.from_arrays([pa.array([blob], pa.binary())], schema=W.BLOBS), n):
            p.unsent += sum(m for _, m in p.messages[k + 1 :])
            break
    stream.close()
    p.error = stream.failed
    if p.error:
        half.set()  # a lost node must not hold the run up


def _call_all(clients: list[NodeClient], action: str, name: str, dead: set[int]) -> dict[int, Any]:
    """``action`` on every live node at once; a node that fails it joins ``dead``."""
    live = [i for i in range(len(clients)) if i not in dead]

    def call(i: int) -> Any:
        try:
            return clients[i].action(action, name.encode())
        except NodeError as e:
            return e

    with ThreadPoolExecutor(max(1, len(live))) as pool:
        answers = dict(zip(live, pool.map(call, live), strict=True))
    for i, a in answers.items():
        if isinstance(a, NodeError):
            dead.add(i)
    return {i: a for i, a in answers.items() if not isinstance(a, NodeError)}


def _queries(clients: list[NodeClient], name: str, dead: set[int]) -> dict[str, Any]:
    """The seed's two queries over the live nodes, on what they store now (nodes that do not
    answer are named in ``unreachable``)."""
    t0 = time.perf_counter()
    box, lo, hi, unreachable = 0, None, None, []
    for i in (i for i in range(len(clients)) if i not in dead):
        try:
            box += clients[i].get(W.ticket(name, query="box")).num_rows
            s = clients[i].get(W.ticket(name, query="speed")).to_pylist()[0]
        except NodeError:
            unreachable.append(f"n{i}")
            continue
        if s["speed2_min"] is not None:
            lo = s["speed2_min"] if lo is None else min(lo, s["speed2_min"])
            hi = s["speed2_max"] if hi is None else max(hi, s["speed2_max"])
    return {"box_rows": box, "speed2_min": lo, "speed2_max": hi, "s": time.perf_counter() - t0,
            "unreachable": unreachable}  # fmt: skip


def _keep_lost(clients: list[NodeClient], producers: list[Producer], name: str, dead: set[int],
               work: Path) -> dict[str, pa.Table]:  # fmt: skip
    """Writes what the live nodes hold for lost ones, and what producers could not send, to
    Arrow files under ``work``: nothing the flow was given is dropped. Returns them by file."""
    kept = {}
    for i in range(len(clients)):
        if i in dead:
            continue
        held = clients[i].get(W.ticket(name, read="held"))
        if held.num_rows:
            kept[_write(held, work / f"{name}-held-by-n{i}.arrow")] = held
    for p in producers:
        if p.unsent:
            sent = len(p.messages) - _unsent_messages(p)
            table = pa.concat_tables(F.unpack(m) for m, _ in p.messages[sent:])
            kept[_write(table, work / f"{name}-unsent-by-producer{p.node}.arrow")] = table
    return kept


def _unsent_messages(p: Producer) -> int:
    """How many of the producer's last messages hold its unsent rows."""
    rows, k = 0, 0
    for _, n in reversed(p.messages):
        if rows >= p.unsent:
            break
        rows, k = rows + n, k + 1
    return k


def _write(table: pa.Table, path: Path) -> str:
    """An Arrow file of kept rows, whole or not at all (a full disk is a WriteError naming it)."""
    from offload.files import atomic_write

    path = path.absolute()
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path, "wb") as f, pa.ipc.new_file(f, table.schema) as w:
        w.write_table(table)
    return str(path)


def account(producers: list[Producer], status: dict[int, Any], dead: set[int], stored: list[pa.Table],
            kept: dict[str, pa.Table], key: tuple[str, str]) -> dict[str, Any]:  # fmt: skip
    """Where every produced row is: stored on a live node (``stored``: the sorted reads), or kept
    in a file (held by a live node for a lost one, or not acknowledged by a lost node, so its
    producer kept it), or lost with a node. A message a node partitioned but did not acknowledge
    before it died may be both stored and kept: sending the file again is safe, since the sift
    keeps one row per key. Lost rows are the produced ones in neither place, and ``explained``
    says they are no more than the lost nodes could have had: what live nodes delivered to them
    and what they acknowledged to their producers. Without a lost node, every row is stored once."""
    produced = sum(n for p in producers for _, n in p.messages)
    n_stored = sum(t.num_rows for t in stored)
    out: dict[str, Any] = {"produced": produced, "stored": n_stored, "kept_in": list(kept),
                           "kept": sum(t.num_rows for t in kept.values()),
                           "lost_nodes": {f"n{d}": producers[d].error or "failed a call"
                                          for d in sorted(dead)}}  # fmt: skip
    if not dead:
        received = sum(s["stored_rows"] for s in status.values())
        return out | {"lost_with_nodes": 0, "could_be_on_lost_nodes": 0,
                      "explained": n_stored == produced == received}  # fmt: skip
    distinct = _distinct_keys([*stored, *kept.values()], key)
    bound = sum(s["delivered_rows"].get(str(d), 0) for s in status.values() for d in dead)
    bound += sum(producers[d].acked for d in dead)
    lost = produced - distinct
    return out | {"lost_with_nodes": lost, "could_be_on_lost_nodes": bound,
                  "explained": 0 <= lost <= bound and _distinct_keys(stored, key) == n_stored}  # fmt: skip


def _distinct_keys(tables: list[pa.Table], key: tuple[str, str]) -> int:
    """Distinct (id, time) keys over the tables."""
    tables = [t.select(list(key)) for t in tables if t.num_rows]
    return pa.concat_tables(tables).group_by(list(key)).aggregate([]).num_rows if tables else 0


def share(profile: str, cpu_per_thread: float | None = None) -> float:
    """The cores one node of ``profile`` gets (all of this machine's where it sets no quota)."""
    from offload.host import budgets as B

    p = B.profile(profile)
    per = cpu_per_thread if cpu_per_thread is not None else p.cpu_per_thread
    return p.threads * per if per is not None else float(os.cpu_count() or 1)


def plot_nodes(results: list[dict[str, Any]], path: Path) -> Path:
    """Each run's nodes as stacked bars of seconds by step (the seed's per-node breakdown), with
    the run's input rate in its label."""
    import numpy as np

    from offload.files import save_figure
    from offload.host.plots import pyplot

    plt = pyplot()
    steps = ("unpack_s", "split_s", "repack_s", "compress_s", "transfer_s", "merge_s")
    bars = [(f"{r['nodes']}n: n{i}", n["breakdown"]) for r in results for i, n in r["per_node"].items()]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.4 * len(bars) + 2), 4.5))
    bottom = np.zeros(len(bars))
    for step in steps:
        v = np.array([b[step] for _, b in bars])
        ax.bar(range(len(bars)), v, bottom=bottom, label=step.removesuffix("_s"))
        bottom += v
    ax.set_xticks(range(len(bars)))
    ax.set_xticklabels([label for label, _ in bars], rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("seconds")
    rates = ", ".join(f"{r['nodes']}n {1e3 * r['gb_per_s']:.0f} MB/s" for r in results)
    ax.set_title(f"particle pipeline, each node's time by step ({rates})", fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))  # beside the bars, hiding none
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
    return path
