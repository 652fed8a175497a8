"""The service's host path by configuration: each configuration's daemon driven to its knee by
the open-loop generator, the daemon's CPU per query by thread role at the knee's rate (`stats` →
`cpu`), and the plot of it (`benches/serve_hostpath.py` runs the before/after set; `make demo` a
short one; `offload report --host-path` shows the result, offload.report.serve)."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from offload import rules as rules_api
from offload.files import save_figure
from offload.host.plots import pyplot
from offload.serve import bench, daemon
from offload.serve.control import control_request
from offload.serve.grid import TRANSPORTS, endpoint


@dataclass(frozen=True)
class Config:
    """One daemon configuration: which build, matcher, executors (0 = inline), batching policy,
    request layout, the transport its clients use (the generator's connections) and its socket
    shards (ROUTER, ZeroMQ I/O thread and broker each)."""

    label: str
    build: str  # "before" or "after"
    matcher: str  # fast, null, emulated
    kernels: int
    batch_max_queries: int
    batch_timeout_us: int
    layout: str  # raw, encoded32 (the old client's local encoding, version 1), encoded16
    transport: str = "ipc"  # ipc, tcp (loopback) or shm (shared memory, shm:///PATH)
    shards: int = 1

    def flags(self, profile: Path, queries: Path) -> list[str]:
        f = ["--matcher", self.matcher, "--workers", "1", "--kernels", str(self.kernels), "--queue", "1024"]
        f += [
            "--batch-max-queries",
            str(self.batch_max_queries),
            "--batch-timeout-us",
            str(self.batch_timeout_us),
        ]
        if self.shards > 1:
            f += ["--shards", str(self.shards)]
        if self.matcher == "emulated":
            f += ["--emulate-profile", str(profile), "--emulate-queries", str(queries)]
        return f


# before/after issue 25 (BENCHMARKS.md): "before" needs the daemon of the commit before it.
CONFIGS = [
    Config("before: fast, 1 executor, per request", "before", "fast", 1, 0, 200, "encoded32"),
    Config("before: null, 1 executor, per request", "before", "null", 1, 0, 200, "encoded32"),
    Config("after: fast, 1 executor, self-filling", "after", "fast", 1, 4096, 0, "encoded16"),
    Config("after: null, 1 executor, self-filling", "after", "null", 1, 4096, 0, "encoded16"),
    Config("after: fast, inline", "after", "fast", 0, 4096, 0, "encoded16"),
    Config("after: null, inline", "after", "null", 0, 4096, 0, "encoded16"),
    Config("after: emulated H200, inline", "after", "emulated", 0, 65536, 0, "encoded16"),
    Config("after: emulated H200, 1 executor", "after", "emulated", 1, 65536, 0, "encoded16"),
    Config("after: fast, raw, inline", "after", "fast", 0, 4096, 0, "raw"),
]


# Issue 40's matrix: each matcher (the host path alone, a real one, the emulated H200) over each
# transport, inline and with one executor (self-filling batches), 256-query 16-bit requests.


def _transport_config(matcher: str, kernels: int, transport: str) -> Config:
    batch = 65536 if matcher == "emulated" else 4096
    where = "inline" if kernels == 0 else "1 executor"
    return Config(
        f"{matcher}, {where}, {transport}", "after", matcher, kernels, batch, 0, "encoded16", transport
    )


TRANSPORT_CONFIGS = [
    _transport_config(m, k, t) for m in ("null", "fast", "emulated") for k in (0, 1) for t in TRANSPORTS
]


# Issue 40, item 3: the network path over one and two socket shards, inline (the broker matches),
# run once with the daemon and the generator on one core and once on two (`--daemon-cpus`).
SHARD_CONFIGS = [
    Config(f"{m}, inline, {t}, {n} shard{'s' * (n > 1)}", "after", m, 0, 4096, 0, "encoded16", t, n)
    for m in ("null", "fast")
    for t in ("tcp", "ipc")
    for n in (1, 2)
]


def frames_for(c: Config, ep: str, rs: Any, cols: list[list[str]], size: int) -> list[bytes]:
    criteria = list(rs.criterion_codes)
    if c.layout == "raw":
        return bench.frames(cols, criteria, size)[0]
    if c.layout == "encoded32":  # as the clients did before: encoded here against version 1
        return bench.frames(cols, criteria, size, rules_api.compile(rs, "fast").encode(cols))[0]
    return bench.encoded_frames(ep, cols, criteria, size, 16)[0]


@dataclass(frozen=True)
class Setup:
    """What every configuration runs on, and how hard the knee search looks."""

    ruletype: str
    rules: str
    queries: Path
    profile: Path  # the emulated device's
    request_size: int = 256
    connections: int = 4
    duration_s: float = 1.5  # per knee step
    steps: int = 5
    sla_p99_us: float = 5000.0
    start_rate: float = 0.0  # requests/s the knee search starts at (0: a closed loop's throughput)
    daemon_cpus: frozenset[int] | None = None  # the daemon's threads on these CPUs only
    generator_cpus: frozenset[int] | None = None  # the generator's (this process's) threads on these


def measure_config(
    c: Config, s: Setup, rs: Any, cols: list[list[str]], tmp: str, program: list[str] | None = None
) -> dict[str, Any]:
    """One configuration: its daemon (`program`, default `offload serve`) started, driven to its
    knee, its host path at the knee's rate, stopped (every wait bounded)."""
    ep, ctl = endpoint(c.transport, tmp), f"ipc://{tmp}/c.sock"
    flags = [*daemon.rule_flags(s.ruletype, s.rules), "-e", ep, "-c", ctl, *c.flags(s.profile, s.queries)]
    proc = daemon.start(*flags, timeout_s=180, program=program, cpus=set(s.daemon_cpus or ()) or None)
    try:
        frames = frames_for(c, ep, rs, cols, s.request_size)
        load = bench.Load(
            "knee", s.start_rate, s.connections, 1, 1, 1024, s.duration_s, 1.0, 5.0, s.sla_p99_us, s.steps
        )
        with bench.pinned(set(s.generator_cpus or ()) or None):
            bench.warm(ep, frames, load)
            result = bench.measure(ep, frames, load, control=ctl)
        stats = control_request(ctl, "stats", 10)
    finally:
        daemon.stop(proc)
    knee = result.get("knee") or {}
    return {
        "label": c.label, "config": c.__dict__, "knee": knee, "at_knee": result.get("at_knee"),
        "daemon_cpu": result.get("daemon_cpu"), "stopped": result.get("stopped"),
        "matcher": stats.get("matcher"), "emulated": stats.get("emulated"),
        "generator_to_host_path": result.get("generator_to_host_path"), "generator": result.get("generator"),
        "shard_requests": stats.get("shard_requests"),
        "at_knee_held": held(result.get("at_knee"), knee, s.sla_p99_us),
    }  # fmt: skip


def held(at_knee: dict[str, Any] | None, knee: dict[str, Any], sla_p99_us: float) -> bool | None:
    """Whether the run at the knee's rate, after the search, met the SLA again: its p99 within
    the bound and 99% of the rate answered (None without a knee)."""
    if not at_knee or not knee.get("rate_rps"):
        return None
    p99 = float((at_knee.get("latency_us") or {}).get("p99") or 0.0)
    return p99 <= sla_p99_us and float(at_knee.get("requests_per_s") or 0.0) >= 0.99 * float(knee["rate_rps"])


# A short set for `make demo`: the host path alone, with a real matcher, with the emulated H200.
DEMO_CONFIGS = [
    Config("null, inline", "after", "null", 0, 4096, 0, "encoded16"),
    Config("fast, inline", "after", "fast", 0, 4096, 0, "encoded16"),
    Config("emulated H200, inline", "after", "emulated", 0, 65536, 0, "encoded16"),
]


def run(
    setup: Setup,
    configs: list[Config],
    program: Callable[[Config], list[str] | None] = lambda c: None,
    log: Callable[[str], None] = lambda line: None,
) -> dict[str, Any]:
    """Every configuration in turn (`program(c)`: the daemon to run it with, None: `offload
    serve`), one line each to `log`; the result `offload report --host-path` reads."""
    from offload.host.machine import machine
    from offload.rules.bench import load_query_columns

    rs = rules_api.load(setup.ruletype, setup.rules)
    _, cols = load_query_columns(rs, setup.queries)
    runs = []
    for c in configs:
        t = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="hostpath-") as tmp:
            r = measure_config(c, setup, rs, cols, tmp, program(c))
        runs.append(r)
        k, cpu = r["knee"], r["daemon_cpu"] or {}
        host = cpu.get("ns_per_query", {}).get("host_path") or 0.0
        knee = f"{k.get('queries_per_s', 0) / 1e6:.2f} M q/s at {k.get('rate_rps', 0):,.0f} req/s"
        p99, took = k.get("p99_us", 0), time.monotonic() - t
        log(f"{c.label}: knee {knee}, p99 {p99:,.0f} µs; host path {host:,.0f} ns/query ({took:.0f} s)")
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"), "machine": machine(),
        "request_size": setup.request_size, "sla_p99_us": setup.sla_p99_us, "rules": setup.rules,
        "device_profile": str(setup.profile), "runs": runs,
    }  # fmt: skip


# The parts of the host path, as `stats` → `cpu` names them (`shm`: the shared-memory transport's
# thread, where a daemon has one; 0 elsewhere); `executor` less `match` is the executors' own share
# (the match is not host path).
PARTS = ("broker", "worker", "executor", "zmq_io", "shm")


def parts(run: dict[str, Any]) -> dict[str, float] | None:
    """ns per query of each part of the host path at the run's knee (matching taken out), or None."""
    cpu = run.get("daemon_cpu") or {}
    per = cpu.get("ns_per_query")
    if not per:
        return None
    out = {k: float(per.get(k, 0.0)) for k in PARTS}
    # The match is part of the role that matched: the executors, or in inline mode the broker
    # (pre-encoded requests) or the workers (raw ones).
    c = run["config"]
    matched = "executor" if c["kernels"] > 0 else ("worker" if c["layout"] == "raw" else "broker")
    out[matched] = max(0.0, out[matched] - float(per.get("match", 0.0)))
    return out


def plot(result: dict[str, Any], path: Path) -> None:
    """Horizontal stacked bars: host-path ns per query by part for each configuration, with its
    knee (queries/s) written beside."""
    plt = pyplot()
    runs = [r for r in result["runs"] if parts(r)]
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(runs) + 1.4))
    labels = [r["label"] for r in runs]
    left = [0.0] * len(runs)
    for part in PARTS:
        widths = [parts(r)[part] for r in runs]  # type: ignore[index]
        ax.barh(labels, widths, left=left, label=part)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    for y, (r, x) in enumerate(zip(runs, left, strict=True)):
        knee = (r.get("knee") or {}).get("queries_per_s", 0.0)
        ax.text(x, y, f"  knee {knee / 1e6:.1f} M q/s", va="center", fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, max(left, default=1) * 1.45)
    ax.set_xlabel("host path: the daemon's CPU ns per query at the knee (matching excluded)")
    ax.grid(axis="x")
    ax.legend(loc="lower right")
    m = result.get("machine", {})
    ax.set_title(f"{result.get('request_size')} queries per request; {m.get('cpus', '?')} CPUs", fontsize=9)
    fig.tight_layout()
    save_figure(fig, path)
