"""Where a request's time goes, by request size, through the real service: the seed's Figure 2
(`benches/serve_breakdown.py`; BENCHMARKS.md "Fig. 2").

One client (the seed's single Domain Explorer process) sends requests of 1, 2, 4, … 65,536
queries, one at a time, to a daemon with one worker, one kernel executor and one engine thread
(the seed's single Worker and single ERBIUM kernel). Each request's time is split into what the
client measures and what the reply's stages say (docs/serve-protocol.md, "Reply"):

============== ==============================================================================
category       what it is
============== ==============================================================================
client         building the request frame (raw text, or codes encoded with the daemon's
               dictionary with ``encoded``) and decoding the reply, timed around the calls
zeromq         the round trip less the server's stages: ZeroMQ both ways (IPC) and the broker's
               forwarding
queues         the request-queue and kernel-queue waits (near 0 with one request out)
encode         the worker's decode + encode stage (the seed's encoder)
invocation     a device's call less its device stages: the launch, staging and synchronisation
               (on the emulated device: its profile's launch, ``invoke_s``)
emulation      the emulated device only: the rest of its call, its own thread's hand-over,
               wake-ups and lookups (late when they take longer than the profile's time; the
               per-size count of late batches is in the result): neither movement nor work
h2d, d2h       a device's copies (the seed's data movement over PCIe)
compute        a device's kernel stage, or a CPU matcher's match stage
reply          building and handing over the reply
============== ==============================================================================

"Movement" (the seed's ZeroMQ and data movement) is zeromq + invocation + h2d + d2h; "work" is
encode + compute. The result names the size from which work stays at or above movement (the
seed: data movement dominates up to 4,096 queries), the ZeroMQ share at each size (the seed: 60%
down to 30%), and per size the median and 90th percentile of every stage (the seed quotes the
90th percentile of 1,000 iterations; medians are what the stacked plot adds up). Shares are of
the response time (the round trip at the client: every category but the client's own work, which
is reported beside it: building a raw frame from Python lists costs ~0.4 µs a query).

On a machine without an accelerator the device is the emulated one (``--matcher emulated``):
its h2d, kernel and d2h stages are its profile's formula (the seed's published ERBIUM costs,
``data/plans/whatif/erbium-fpga.toml``, or our measured H200's), held in real time inside the
real service; everything else is measured. With a GPU, backend ``gpu`` measures the device too.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from offload.files import save_figure

if TYPE_CHECKING:
    from offload.serve import Client

# The seed's request sizes: 1 to 65,536 queries per request.
SIZES = tuple(2**i for i in range(17))
# Server stages a reply may carry (docs/serve-protocol.md), and a device matcher's parts of `match`.
SERVER_STAGES = ("queue", "encode", "kernel_queue", "match", "reply")
DEVICE_STAGES = ("h2d", "kernel", "d2h")
CATEGORIES = (
    "client",
    "zeromq",
    "queues",
    "encode",
    "invocation",
    "emulation",
    "h2d",
    "d2h",
    "compute",
    "reply",
)
MOVEMENT = ("zeromq", "invocation", "h2d", "d2h")
WORK = ("encode", "compute")
# What the seed says of its Figure 2 (§3.2).
SEED = {
    "movement_dominates_up_to": 4096,
    "zeromq_share_from": 0.6,
    "zeromq_share_to": 0.3,
    "statistic": "90th percentile of 1,000 iterations",
    "text": "data movement dominates up to 4,096 queries (2 MiB); beyond, the encoder exceeds the kernel; "
    "ZeroMQ takes 60% to 30% of the response time",
}
ROOT = Path(__file__).resolve().parents[3]
PROFILES = ROOT / "data" / "plans" / "whatif"


@dataclass(frozen=True)
class Backend:
    """What sits behind the executor: a matcher, and for the emulated device its profile."""

    name: str
    label: str
    matcher: str
    profile: Path | None = None

    def invoke_us(self) -> float | None:
        """The emulated device's launch (its profile's `invoke_s`, µs); None for a real matcher."""
        if self.profile is None:
            return None
        import tomllib

        return float(tomllib.loads(self.profile.read_text())["costs"]["invoke_s"]) * 1e6

    def flags(self, queries: Path) -> list[str]:
        f = ["--matcher", self.matcher]
        if self.profile is not None:
            f += ["--emulate-profile", str(self.profile), "--emulate-queries", str(queries)]
        return f


BACKENDS = {
    "fast": Backend("fast", "fast (CPU matcher)", "fast"),
    "erbium": Backend(
        "erbium", "ERBIUM FPGA, emulated (the seed's costs)", "emulated", PROFILES / "erbium-fpga.toml"
    ),
    "h200": Backend("h200", "H200, emulated (our measured profile)", "emulated", PROFILES / "gpu-h200.toml"),
    "gpu": Backend("gpu", "gpu (CUDA device)", "gpu"),
}


@dataclass(frozen=True)
class Budget:
    """How many requests each size gets: up to `iterations`, or fewer once `seconds` have passed,
    never fewer than `min_iterations`; `warmup` more go first, unrecorded."""

    iterations: int = 1000
    seconds: float = 2.0
    min_iterations: int = 10
    warmup: int = 3


def windows(n_queries: int, size: int, count: int) -> list[int]:
    """First queries of up to `count` distinct windows of `size` consecutive queries (spread over
    the file; the queries repeat when the file is shorter than a window)."""
    if n_queries < 1 or size < 1:
        raise ValueError("no queries" if n_queries < 1 else "the request size must be at least 1")
    span = max(n_queries - size, 0)
    count = max(1, min(count, span + 1))
    return sorted({round(i * span / count) for i in range(count)})


def distinct_frames(size: int) -> int:
    """Distinct request frames per size: 8 for small requests, fewer for large ones (each
    65,536-query raw frame is ~10 MB)."""
    return max(2, min(8, 262_144 // size))


def build_frames(
    columns: list[list[str]], criteria: list[str], size: int, encoder: Any = None
) -> tuple[list[bytes], list[float]]:
    """Request frames of `size` queries from the query columns and the seconds each took to build
    (raw text, or with `encoder` an `EncodingDictionary`: codes encoded here, 16-bit where they
    fit). The queries repeat to fill a request larger than the file."""
    from offload import _native

    n = len(columns[0]) if columns else 0
    fingerprint = int(_native.criteria_fingerprint(list(criteria)))
    reps = -(-size // max(n, 1))
    cols = [c * reps for c in columns] if reps > 1 else columns
    frames, seconds = [], []
    for k, first in enumerate(windows(len(cols[0]) if cols else 0, size, distinct_frames(size))):
        part = [c[first : first + size] for c in cols]
        t0 = time.perf_counter()
        if encoder is not None:
            frame = encoder.frame(k + 1, part, 0, 0, None)
        else:
            frame = bytes(_native.encode_request(k + 1, 0, 0, fingerprint, part))
        seconds.append(time.perf_counter() - t0)
        frames.append(frame)
    return frames, seconds


def categories(
    stages_ns: dict[str, int], rtt_s: float, client_s: float, invoke_us: float | None = None
) -> dict[str, float]:
    """One request's time by category (µs), from its reply's stages, its round trip and the
    client's own time. On a device, `match` less the device stages is the invocation; with
    `invoke_us` (the emulated device's profile) the invocation is that launch and the rest of it
    is the emulation's own hand-over, wake-ups and lookups (`emulation`, an artefact of emulating
    the device on this machine: neither movement nor work)."""
    us = {k: v / 1e3 for k, v in stages_ns.items()}
    server = sum(us.get(k, 0.0) for k in SERVER_STAGES)
    device = all(k in us for k in DEVICE_STAGES)
    match = us.get("match", 0.0)
    dev = sum(us.get(k, 0.0) for k in DEVICE_STAGES) if device else 0.0
    rest = max(match - dev, 0.0) if device else 0.0
    invocation = rest if invoke_us is None else min(invoke_us, rest)
    return {
        "client": client_s * 1e6,
        "zeromq": max(rtt_s * 1e6 - server, 0.0),
        "queues": us.get("queue", 0.0) + us.get("kernel_queue", 0.0),
        "encode": us.get("encode", 0.0),
        "invocation": invocation,
        "emulation": rest - invocation,
        "h2d": us.get("h2d", 0.0) if device else 0.0,
        "d2h": us.get("d2h", 0.0) if device else 0.0,
        "compute": us.get("kernel", 0.0) if device else match,
        "reply": us.get("reply", 0.0),
    }


def _quantiles(values: Sequence[float]) -> dict[str, float]:
    v = np.asarray(values, dtype=float)
    if not len(v):
        return {"p50": 0.0, "p90": 0.0}
    return {"p50": float(np.percentile(v, 50)), "p90": float(np.percentile(v, 90))}


def measure_size(
    client: Client,
    frames: list[bytes],
    build_s: list[float],
    budget: Budget,
    invoke_us: float | None = None,
) -> dict[str, Any]:
    """Sends `frames` in turn through `client` (each with a fresh request id), one request out
    at a time, and summarizes the replies: per stage and category the median and 90th
    percentile (µs). No reply within the client's timeout is a ServeError."""
    from offload import _native

    records: list[tuple[float, float, dict[str, int], int, str]] = []
    t_end = float("inf")
    for sent in range(1, budget.warmup + budget.iterations + 1):
        recorded = sent - 1 - budget.warmup  # requests recorded so far (negative while warming up)
        if recorded == 0:
            t_end = time.perf_counter() + budget.seconds
        if recorded >= budget.min_iterations and time.perf_counter() > t_end:
            break
        k = sent % len(frames)
        rid, frame = client.restamp(frames[k])
        t0 = time.perf_counter()
        client.send_frame(frame)
        reply = client.receive_frame(rid, t0)
        t1 = time.perf_counter()
        _rid, status, _v, _rule, _c, stages, message = _native.decode_reply(reply)
        decode_s = time.perf_counter() - t1
        if status != "Ok":
            raise RuntimeError(f"the daemon answered {status}: {message}")
        if recorded >= 0:
            records.append((t1 - t0, build_s[k] + decode_s, dict(stages), len(reply), status))
    cats = [categories(st, rtt, client, invoke_us) for rtt, client, st, _, _ in records]
    stages = sorted({s for _, _, st, _, _ in records for s in st})
    row: dict[str, Any] = {
        "iterations": len(records),
        "request_bytes": int(statistics.median(len(f) for f in frames)),
        "reply_bytes": int(statistics.median(r[3] for r in records)),
        "round_trip_us": _quantiles([r[0] * 1e6 for r in records]),
        "client_build_us": _quantiles([s * 1e6 for s in build_s]),
        "stages_us": {s: _quantiles([r[2].get(s, 0) / 1e3 for r in records]) for s in stages},
        "categories_us": {c: _quantiles([x[c] for x in cats]) for c in CATEGORIES},
        "movement_us": _quantiles([sum(x[c] for c in MOVEMENT) for x in cats]),
        "work_us": _quantiles([sum(x[c] for c in WORK) for x in cats]),
        "total_us": _quantiles([sum(x.values()) for x in cats]),
    }
    # Shares of the response time (the round trip: everything but the client's own work), as the
    # seed's "share of the total response time"; the client's share is of round trip + client.
    medians = {c: row["categories_us"][c]["p50"] for c in CATEGORIES}
    total = sum(v for c, v in medians.items() if c != "client") or 1.0
    row["shares"] = {c: v / total for c, v in medians.items() if c != "client"}
    row["client_share"] = medians["client"] / (total + medians["client"] or 1.0)
    row["zeromq_share"] = medians["zeromq"] / total
    row["movement_share"] = sum(medians[c] for c in MOVEMENT) / total
    row["work_share"] = sum(medians[c] for c in WORK) / total
    return row


def crossover(rows: Sequence[dict[str, Any]], statistic: str = "p50") -> int | None:
    """The smallest size from which work (encode + compute) stays at or above movement (ZeroMQ,
    invocation, copies) at every larger size measured; None when movement dominates throughout."""
    found = None
    for r in sorted(rows, key=lambda r: -r["size"]):
        if r["work_us"][statistic] >= r["movement_us"][statistic]:
            found = r["size"]
        else:
            break
    return found


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """What the seed states, read off our rows: the crossover (median and p90), the largest size
    movement still dominates, and the ZeroMQ share at the smallest and largest sizes."""
    rows = sorted(rows, key=lambda r: r["size"])
    cross = crossover(rows)
    below = [r["size"] for r in rows if cross is None or r["size"] < cross]
    shares = [r["zeromq_share"] for r in rows]
    return {
        "work_dominates_from": cross,
        "work_dominates_from_p90": crossover(rows, "p90"),
        "movement_dominates_up_to": max(below) if below else None,
        "zeromq_share_first": shares[0] if shares else None,
        "zeromq_share_last": shares[-1] if shares else None,
        "zeromq_share_max": max(shares) if shares else None,
        "zeromq_share_min": min(shares) if shares else None,
    }


def _late(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The emulated device over one size: batches, and those its own thread answered after their
    due instant (its lookups took longer than the profile's time: the emulation's delay, in
    `invocation`), with the mean delay."""
    d = {
        k: int(after.get(k, 0)) - int(before.get(k, 0))
        for k in ("batches", "late_batches", "late_ns", "misses")
    }
    late = d.pop("late_ns")
    d["late_us_mean"] = late / 1e3 / d["late_batches"] if d["late_batches"] else 0.0
    return d


def run_backend(
    backend: Backend,
    ruletype: str,
    rules: str,
    queries: Path,
    columns: list[list[str]],
    criteria: list[str],
    sizes: Sequence[int],
    budget: Budget,
    encoded: bool = False,
    say: Callable[[str], None] = lambda _m: None,
) -> dict[str, Any]:
    """One backend's daemon (1 worker, 1 executor, 1 engine thread, one request per matcher
    call), every size measured through it, the daemon stopped; its rows and summary."""
    from offload.serve import Client, daemon
    from offload.serve.control import control_request

    tmp = tempfile.mkdtemp(prefix="offload-breakdown-")
    ep, ctl = f"ipc://{tmp}/d-{os.getpid()}.sock", f"ipc://{tmp}/c-{os.getpid()}.sock"
    flags = [*daemon.rule_flags(ruletype, rules), "-e", ep, "-c", ctl, "--workers", "1", "--kernels", "1",
             "--engine-threads", "1", "--queue", "1024", "--batch-max-queries", "0",
             *backend.flags(queries)]  # fmt: skip
    proc = daemon.start(*flags, timeout_s=300)
    rows = []
    stats: dict[str, Any] = {}
    client = Client(ep, criteria, 60, encode="client" if encoded else "server")
    try:
        encoder = client.fetch_dictionary() if encoded else None
        for size in sizes:
            frames, build_s = build_frames(columns, criteria, size, encoder)
            before = control_request(ctl, "stats", 10).get("emulated") if backend.profile else None
            row = {
                "size": size,
                **measure_size(client, frames, build_s, budget, invoke_us=backend.invoke_us()),
            }
            if before is not None:
                row["emulated"] = _late(before, control_request(ctl, "stats", 10).get("emulated") or {})
            say(
                f"{backend.name} {size:>6,} queries: {row['iterations']:>4} requests, round trip p50 "
                f"{row['round_trip_us']['p50']:,.0f} µs, zeromq {row['zeromq_share']:.0%}, "
                f"movement {row['movement_share']:.0%}, work {row['work_share']:.0%}"
            )
            rows.append(row)
            del frames
        stats = control_request(ctl, "stats", 10)
    finally:
        client.close()
        daemon.stop(proc)
        for f in Path(tmp).glob("*"):
            f.unlink(missing_ok=True)
        os.rmdir(tmp)
    out = {"name": backend.name, "label": backend.label, "matcher": backend.matcher,
           "profile": str(backend.profile.relative_to(ROOT)) if backend.profile else None,
           "rows": rows, **summarize(rows)}  # fmt: skip
    if stats.get("emulated"):
        e = stats["emulated"]
        kept = ("batches", "queries", "misses", "late_batches", "late_ns", "lookup_ns", "fallbacks", "costs")
        out["emulated"] = {k: e.get(k) for k in kept}
    return out


def run(
    ruletype: str,
    rules: str,
    queries: Path,
    backends: Sequence[Backend],
    sizes: Sequence[int] = SIZES,
    budget: Budget = Budget(),
    encoded: bool = False,
    say: Callable[[str], None] = lambda _m: None,
) -> dict[str, Any]:
    """Every backend, every size: the JSON result."""
    from offload import rules as rules_api
    from offload.host.machine import machine
    from offload.rules.bench import load_query_columns

    load_start = os.getloadavg()
    rs = rules_api.load(ruletype, rules)
    _, columns = load_query_columns(rs, queries)
    criteria = list(rs.criterion_codes)
    results = [
        run_backend(b, ruletype, rules, queries, columns, criteria, sizes, budget, encoded, say)
        for b in backends
    ]
    return {
        "benchmark": "serve-breakdown",
        "figure": "seed 000/001, Fig. 2",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        # The 1-minute load average before and after: other work on the machine shows here.
        "load_average": {"start": load_start[0], "end": os.getloadavg()[0]},
        "ruletype": ruletype,
        "rules": rules,
        "queries": str(queries),
        "layout": "encoded16" if encoded else "raw",
        "configuration": "1 client process, 1 worker, 1 kernel executor, 1 engine thread, one request per "
        "matcher call, one request out at a time (IPC)",
        "budget": budget.__dict__,
        "categories": list(CATEGORIES),
        "movement": list(MOVEMENT),
        "work": list(WORK),
        "seed": SEED,
        "backends": results,
    }


COLORS = {
    "client": "#bbbbbb", "zeromq": "C0", "queues": "#dddddd", "encode": "C1", "invocation": "C4",
    "emulation": "#eeeeee", "h2d": "C9", "d2h": "C6", "compute": "C2", "reply": "C7",
}  # fmt: skip


def plot(result: dict[str, Any], path: Path) -> Path:
    """Per backend: the share of each category by request size (the medians, stacked to 100%),
    and the median round trip; the seed's crossover (4,096) and ours marked."""
    from offload.host.plots import pyplot

    plt = pyplot()
    backends = result["backends"]
    fig, axes = plt.subplots(1, len(backends) + 1, figsize=(5 * (len(backends) + 1), 5.8), squeeze=False)
    for ax, b in zip(axes[0], backends, strict=False):
        rows = b["rows"]
        x = np.arange(len(rows))
        bottom = np.zeros(len(rows))
        for c in CATEGORIES[1:]:
            v = np.array([r["shares"][c] for r in rows])
            if v.any():
                hatch = "//" if c == "emulation" else None
                ax.bar(
                    x, v, bottom=bottom, label=c, color=COLORS[c], width=0.85, hatch=hatch, edgecolor="white"
                )
                bottom += v
        ticks = [i for i, r in enumerate(rows) if r["size"] in (1, 16, 256, 4096, 65536)]
        ax.set_xticks(ticks, [f"{rows[i]['size']:,}" for i in ticks])
        seed = next((i for i, r in enumerate(rows) if r["size"] == SEED["movement_dominates_up_to"]), None)
        if seed is not None:
            ax.axvline(seed + 0.5, color="black", linestyle="--", linewidth=1, label="seed: movement ≤ 4,096")
        cross = b.get("work_dominates_from")
        at = next((i for i, r in enumerate(rows) if r["size"] == cross), None)
        if at is not None:
            ax.axvline(at - 0.5, color="red", linewidth=1.5, label=f"ours: work ≥ movement from {cross:,}")
        ax.set_ylim(0, 1)
        ax.set_xlabel("queries per request")
        ax.set_ylabel("share of the response time (medians)")
        ax.set_title(b["label"], fontsize=9)
        ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3)
    ax = axes[0][-1]
    for b in backends:
        rows = b["rows"]
        ax.plot(
            [r["size"] for r in rows], [r["round_trip_us"]["p50"] for r in rows], "o-", ms=3, label=b["label"]
        )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("queries per request")
    ax.set_ylabel("round trip at the client, median (µs)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title(f"{result['layout']} requests, 1p 1w 1k 1e", fontsize=9)
    fig.suptitle("Where a request's time goes, by request size (seed 000/001, Fig. 2)", fontsize=10)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    return path
