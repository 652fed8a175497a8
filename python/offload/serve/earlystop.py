"""CPU against the accelerator per user request, with early stop: the seed's Figure 10 and §4.2
(`benches/serve_earlystop.py`; BENCHMARKS.md "Fig. 10").

A user request of the Domain Explorer holds n candidate connections (queries) and wants W valid
answers (``requests.csv``: N_QUERIES, WANTED); a query's answer is valid when a rule matched it
(what the service's ``stop_after`` counts). Two ways to answer it:

- **CPU** (the Domain Explorer's own loop): the queries one after another, stopping at the W-th
  valid answer; it checks exactly k queries (k = n when fewer than W are valid). Its time is our
  encoder and matcher run over exactly those k queries, timed in Rust (``time_encode``,
  ``time_match``: no Python in the timed region), the median of ``repeats``; ``fast`` (ours),
  ``nfa`` (ERBIUM's design on a CPU) and ``nfa:given`` (the same, criteria in the rule type's
  order: ~4 µs a query on the 100k set, the nearest we have to the seed's CPU code).
- **Accelerator through the service** (the seed's FPGA flow): the client sends invocations of
  growing size (``Policy``: 64, then 128, 256, … queries, raw text, the worker encodes) as
  requests to ``offload serve``, one after another, and stops once W valid answers came back; it
  checks the sum of the invocations sent (capped at n), at least k. Its time is the sum of the
  round trips at the client (frames built before the clock, as a native Domain Explorer would
  build them in microseconds), the median of ``repeats`` passes. Also **one request** with
  ``stop_after`` = W (the service's own early stop: the daemon encodes the whole request, then
  evaluates chunks of 64, 128, …).

The device behind the executor is the emulated one on a machine without an accelerator
(``--matcher emulated``): the seed's published ERBIUM costs (``erbium-fpga.toml``: 70 µs launch,
70 µs kernel floor, 80 ns a query on one engine, PCIe at 4 GB/s) or our measured H200's, held in
real time inside the real service; everything around it (ZeroMQ, broker, worker encoding,
queues, replies) is measured.

Two sets of requests: the **trace** (every non-empty request of ``requests.csv``, its own W) for
the extra queries the accelerator checks (the seed: 23% on average) and the per-request scatter;
and a **sweep** of W over windows of n queries of the trace (checked counts from tens to
thousands, which the trace's W of 50–200 never reaches) for the crossover: the checked count
from which the accelerator's median time is below the CPU's (the seed: near 400 queries).
"""

from __future__ import annotations

import math
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from offload.files import save_figure
from offload.serve.breakdown import ROOT, Backend

SEED = {
    "extra_queries": 0.23,
    "crossover_checked_queries": 400,
    "requests": 6300,
    "text": "the FPGA checks 23% more queries on average; the CPU is faster up to ~400 checked queries, "
    "the FPGA beyond, even when called several times per request (1 Domain Explorer, 1 MCT Wrapper, "
    "1 kernel of 4 engines)",
}
# Our matcher, ERBIUM's NFA design with our level order, and the same with the criteria in the rule
# type's own order (~4 µs a query on the 100k set: the nearest we have to the seed's CPU code).
CPU_MATCHERS = ("fast", "nfa", "nfa:given")


def key(matcher: str) -> str:
    """A matcher's name as it appears in record fields and crossover names (no colon)."""
    return matcher.replace(":", "-")


# W of the sweep: checked counts from tens to thousands (the trace's W are 50-200).
SWEEP_WANTED = (16, 32, 64, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096)


@dataclass(frozen=True)
class Policy:
    """How the client grows its invocations: `first` queries, then each `growth` times the last
    (the service's own early stop uses 64 and 2)."""

    first: int = 64
    growth: float = 2.0

    def chunks(self, n: int) -> list[tuple[int, int]]:
        """(start, end) of every invocation over n queries, in order."""
        out, lo, size = [], 0, max(1, self.first)
        while lo < n:
            out.append((lo, min(lo + size, n)))
            lo += size
            size = max(size + 1, int(size * self.growth))
        return out


def cpu_checked(valid: np.ndarray, wanted: int) -> int:
    """Queries a sequential evaluation checks before its `wanted`-th valid answer (all when fewer
    are valid; none when nothing is wanted)."""
    if wanted <= 0:
        return 0
    found = np.flatnonzero(valid)
    return int(found[wanted - 1]) + 1 if len(found) >= wanted else len(valid)


def accelerator_chunks(valid: np.ndarray, wanted: int, policy: Policy) -> list[tuple[int, int]]:
    """The invocations a batching client sends: chunks in order until `wanted` valid answers came
    back (or the queries ran out)."""
    sent, found = [], 0
    for lo, hi in policy.chunks(len(valid)):
        if found >= wanted > 0:
            break
        sent.append((lo, hi))
        found += int(valid[lo:hi].sum())
    return sent


@dataclass(frozen=True)
class Work:
    """One user request: its queries [first, first + n) of the trace, and W."""

    first: int
    n: int
    wanted: int
    source: str  # "trace" or "sweep"


def crossover(points: Sequence[tuple[float, float, float]], bins_per_decade: int = 6) -> dict[str, Any]:
    """From (checked, cpu_us, accelerator_us) per request: medians in log bins of the checked
    count, and the checked count from which the accelerator's median stays at or below the
    CPU's (interpolated in log space between the two bins either side; None when it never
    does, the first bin when it always does)."""
    if not points:
        return {"bins": [], "checked": None}
    by_bin: dict[int, list[tuple[float, float, float]]] = {}
    for p in points:
        if p[0] >= 1:
            by_bin.setdefault(math.floor(math.log10(p[0]) * bins_per_decade), []).append(p)
    bins = []
    for b in sorted(by_bin):
        ps = by_bin[b]
        bins.append({
            "checked": float(statistics.median(p[0] for p in ps)), "requests": len(ps),
            "cpu_us": float(statistics.median(p[1] for p in ps)),
            "accelerator_us": float(statistics.median(p[2] for p in ps)),
        })  # fmt: skip
    at = None
    for i in range(len(bins) - 1, -1, -1):
        if bins[i]["accelerator_us"] <= bins[i]["cpu_us"]:
            at = i
        else:
            break
    if at is None:
        return {"bins": bins, "checked": None}
    if at == 0:
        return {"bins": bins, "checked": bins[0]["checked"], "always": True}
    lo, hi = bins[at - 1], bins[at]
    # Where the log-ratio accelerator/CPU crosses 0, linearly in log(checked).
    r0 = math.log(lo["accelerator_us"] / lo["cpu_us"])
    r1 = math.log(hi["accelerator_us"] / hi["cpu_us"])
    f = r0 / (r0 - r1) if r0 != r1 else 1.0
    x = math.exp(math.log(lo["checked"]) + f * (math.log(hi["checked"]) - math.log(lo["checked"])))
    return {"bins": bins, "checked": x}


class _Service:
    """One daemon (1 worker, 1 executor, 1 engine thread, one request per call) and a client."""

    def __init__(self, backend: Backend, ruletype: str, rules: str, queries: Path) -> None:
        from offload.serve import Client, daemon

        self.tmp = tempfile.mkdtemp(prefix="offload-earlystop-")
        self.ep, self.ctl = f"ipc://{self.tmp}/d-{os.getpid()}.sock", f"ipc://{self.tmp}/c-{os.getpid()}.sock"
        flags = [*daemon.rule_flags(ruletype, rules), "-e", self.ep, "-c", self.ctl, "--workers", "1",
                 "--kernels", "1", "--engine-threads", "1", "--queue", "1024", "--batch-max-queries", "0",
                 *backend.flags(queries)]  # fmt: skip
        self.proc = daemon.start(*flags, timeout_s=300)
        self.client = Client(self.ep, timeout_s=60)

    def call(self, frame: bytes) -> tuple[float, int]:
        """Sends one request frame (a fresh id stamped on it), waits for its reply within the
        client's timeout (else a ServeError): (round trip s, answers)."""
        from offload import _native

        rid, frame = self.client.restamp(frame)
        t0 = time.perf_counter()
        self.client.send_frame(frame)
        reply = self.client.receive_frame(rid, t0)
        rtt = time.perf_counter() - t0
        _rid, status, _v, rule, _c, _stages, message = _native.decode_reply(reply)
        if status != "Ok":
            raise RuntimeError(f"the daemon answered {status}: {message}")
        return rtt, len(rule)

    def stats(self) -> dict[str, Any]:
        from offload.serve.control import control_request

        return control_request(self.ctl, "stats", 10)

    def close(self) -> None:
        from offload.serve import daemon

        self.client.close()
        daemon.stop(self.proc)
        for f in Path(self.tmp).glob("*"):
            f.unlink(missing_ok=True)
        os.rmdir(self.tmp)


class _Trace:
    """The query columns (as Arrow strings, for cheap frames), their codes, and which are valid."""

    def __init__(self, ruletype: str, rules: str, queries: Path, matchers: Sequence[str]) -> None:
        import pyarrow as pa

        from offload import _native
        from offload import rules as rules_api
        from offload.rules.bench import load_query_columns

        self.rs = rules_api.load(ruletype, rules)
        _, cols = load_query_columns(self.rs, queries)
        self.text = cols
        self.criteria = list(self.rs.criterion_codes)
        self.fingerprint = int(_native.criteria_fingerprint(self.criteria))
        self.arrow = [pa.array(c, type=pa.large_string()) for c in cols]
        self.engines = {m: rules_api.compile(self.rs, m) for m in matchers}
        fast = self.engines.get("fast") or rules_api.compile(self.rs, "fast")
        self.codes = np.ascontiguousarray(fast.encode(self.arrow))
        self.valid = np.asarray(fast.match(self.codes).rule) >= 0
        self.n = len(self.valid)

    def frame(self, lo: int, hi: int, stop_after: int = 0) -> bytes:
        from offload import _native
        from offload.rules import _to_column

        cols = [_to_column(a.slice(lo, hi - lo), c) for a, c in zip(self.arrow, self.criteria, strict=True)]
        return bytes(_native.encode_request(1, 0, stop_after, self.fingerprint, cols))

    def cpu_us(self, matcher: str, lo: int, hi: int, repeats: int) -> tuple[float, float]:
        """(encode µs, match µs) of queries [lo, hi) in Rust, medians of `repeats`."""
        from offload import _native

        if hi <= lo:
            return 0.0, 0.0
        engine = self.engines[matcher]
        enc = _native.time_encode(engine._native, [c[lo:hi] for c in self.text], repeats)
        match = engine._native.time_match(self.codes[lo:hi], hi - lo, 1, repeats)
        return statistics.median(enc) * 1e6, statistics.median(match) * 1e6


def workloads(
    requests: Sequence[tuple[int, int, int]], n_queries: int, window: int, windows_per_w: int,
    wanted: Sequence[int] = SWEEP_WANTED,
) -> list[Work]:  # fmt: skip
    """The trace's non-empty requests, then for each W of the sweep `windows_per_w` windows of
    `window` queries spread over the trace."""
    out = [Work(f, n, w, "trace") for f, n, w in requests if n > 0]
    span = max(n_queries - window, 0)
    for w in wanted:
        for i in range(windows_per_w):
            first = (i * 7919 * window + w * 104729) % (span + 1) if span else 0
            out.append(Work(first, min(window, n_queries), w, "sweep"))
    return out


def measure(
    trace: _Trace,
    works: Sequence[Work],
    services: dict[str, _Service],
    policy: Policy,
    repeats: int,
    one_request: bool,
    say: Callable[[str], None],
) -> list[dict[str, Any]]:
    """Every user request through every flow: one record each."""
    records = []
    t_say = time.monotonic()
    for i, wk in enumerate(works):
        valid = trace.valid[wk.first : wk.first + wk.n]
        k = cpu_checked(valid, wk.wanted)
        chunks = accelerator_chunks(valid, wk.wanted, policy)
        rec: dict[str, Any] = {
            "source": wk.source, "first": wk.first, "n": wk.n, "wanted": wk.wanted, "cpu_checked": k,
            "accelerator_checked": chunks[-1][1] if chunks else 0, "invocations": len(chunks),
            "valid_found_cpu": int(valid[:k].sum()),
        }  # fmt: skip
        for m in trace.engines:
            enc, match = trace.cpu_us(m, wk.first, wk.first + k, repeats)
            rec[f"cpu_{key(m)}_encode_us"], rec[f"cpu_{key(m)}_match_us"] = enc, match
        frames = [trace.frame(wk.first + lo, wk.first + hi) for lo, hi in chunks]
        whole = trace.frame(wk.first, wk.first + wk.n, wk.wanted) if one_request else None
        for name, svc in services.items():
            # Each flow `repeats` times, the median: one pass is at the mercy of a busy machine.
            rec[f"{name}_us"] = (
                statistics.median(sum(svc.call(f)[0] for f in frames) for _ in range(repeats)) * 1e6
            )
            if whole is not None:
                calls = [svc.call(whole) for _ in range(repeats)]
                rec[f"{name}_one_request_us"] = statistics.median(c[0] for c in calls) * 1e6
                rec[f"{name}_one_request_checked"] = calls[0][1]
        records.append({k: round(v, 1) if isinstance(v, float) else v for k, v in rec.items()})  # 0.1 µs
        if time.monotonic() - t_say > 10:
            say(f"{i + 1:,} of {len(works):,} user requests")
            t_say = time.monotonic()
    return records


def summarize(
    records: Sequence[dict[str, Any]], matchers: Sequence[str], services: Sequence[str]
) -> dict[str, Any]:
    """Extra queries, invocations, and the crossover of every accelerator against every CPU
    matcher (encode + match), on the trace and on the sweep."""
    trace = [r for r in records if r["source"] == "trace"]
    out: dict[str, Any] = {}
    if trace:
        cpu = sum(r["cpu_checked"] for r in trace)
        acc = sum(r["accelerator_checked"] for r in trace)
        per = [r["accelerator_checked"] / r["cpu_checked"] - 1 for r in trace if r["cpu_checked"]]
        out["trace"] = {
            "requests": len(trace), "cpu_checked": cpu, "accelerator_checked": acc,
            "extra_queries": acc / cpu - 1 if cpu else None,
            "extra_queries_mean_per_request": float(np.mean(per)) if per else None,
            "invocations_mean": float(np.mean([r["invocations"] for r in trace])),
            "invocations_max": max(r["invocations"] for r in trace),
            "cpu_checked_max": max(r["cpu_checked"] for r in trace),
            "cpu_checked_median": float(statistics.median(r["cpu_checked"] for r in trace)),
        }  # fmt: skip
    out["crossover"] = []
    flows = [f for s in services for f in (s, f"{s}_one_request") if records and f"{f}_us" in records[0]]
    for s in flows:
        for m in matchers:
            for src in ("trace", "sweep"):
                rs = [r for r in records if r["source"] == src and r["cpu_checked"] > 0]
                pts = [
                    (
                        r["cpu_checked"],
                        r[f"cpu_{key(m)}_encode_us"] + r[f"cpu_{key(m)}_match_us"],
                        r[f"{s}_us"],
                    )
                    for r in rs
                ]
                c = crossover(pts)
                out["crossover"].append({
                    "name": f"{s}/{key(m)}/{src}", "flow": s, "cpu": m, "source": src,
                    "checked": c["checked"], "always": c.get("always", False),
                    "largest": c["bins"][-1] if c["bins"] else None, "bins": c["bins"],
                })  # fmt: skip
    return out


def run(
    ruletype: str,
    rules: str,
    queries: Path,
    requests_csv: Path,
    backends: Sequence[Backend],
    matchers: Sequence[str] = CPU_MATCHERS,
    policy: Policy = Policy(),
    window: int = 6000,
    windows_per_w: int = 16,
    wanted: Sequence[int] = SWEEP_WANTED,
    limit: int | None = None,
    repeats: int = 3,
    one_request: bool = True,
    say: Callable[[str], None] = lambda _m: None,
) -> dict[str, Any]:
    """The whole experiment: the JSON result."""
    from offload.host.machine import machine
    from offload.serve.inject import _load_requests

    load_start = os.getloadavg()
    say("loading the rules and the trace; compiling " + ", ".join(matchers))
    trace = _Trace(ruletype, rules, queries, matchers)
    reqs = _load_requests(requests_csv, trace.n)
    if limit is not None:
        reqs = reqs[:limit]
    works = workloads(reqs, trace.n, window, windows_per_w, wanted)
    services: dict[str, _Service] = {}
    emulated: dict[str, Any] = {}
    try:
        for b in backends:
            say(f"starting the daemon: {b.label}")
            services[b.name] = _Service(b, ruletype, rules, queries)
        records = measure(trace, works, services, policy, repeats, one_request, say)
        for name, svc in services.items():
            e = svc.stats().get("emulated")
            if e:
                emulated[name] = {
                    k: e.get(k) for k in ("batches", "queries", "misses", "late_batches", "late_ns", "costs")
                }
    finally:
        for svc in services.values():
            svc.close()
    return {
        "benchmark": "serve-earlystop",
        "figure": "seed 000/001, Fig. 10 and §4.2",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "load_average": {"start": load_start[0], "end": os.getloadavg()[0]},
        "ruletype": ruletype, "rules": rules, "queries": str(queries), "requests": str(requests_csv),
        "valid": "a rule matched the query (what the service's stop_after counts)",
        "policy": {"first": policy.first, "growth": policy.growth},
        "cpu": "encode + match of exactly the checked queries, in Rust, median of repeats "
        f"({repeats}); matchers {', '.join(matchers)}",
        "accelerator": "invocations of growing size as requests to offload serve (raw text, 1w 1k 1e), the "
        f"sum of their round trips; one_request: one request with stop_after; each the median of {repeats} "
        "passes",
        "backends": [_backend(b) for b in backends],
        "emulated": emulated,
        "sweep": {"window": window, "windows_per_w": windows_per_w, "wanted": list(wanted)},
        "seed": SEED,
        "summary": summarize(records, matchers, [b.name for b in backends]),
        "records": records,
    }  # fmt: skip


def _backend(b: Backend) -> dict[str, Any]:
    profile = str(b.profile.relative_to(ROOT)) if b.profile else None
    return {"name": b.name, "label": b.label, "matcher": b.matcher, "profile": profile}


def dumps(result: dict[str, Any]) -> str:
    """The result as JSON text: indented, with each user request's record on one line (thousands
    of them)."""
    import json

    head = json.dumps({**result, "records": "\0records"}, indent=1)
    rows = ",\n  ".join(json.dumps(r, separators=(",", ":")) for r in result["records"])
    return head.replace('"\\u0000records"', f"[\n  {rows}\n ]") + "\n"


def plot(result: dict[str, Any], path: Path) -> Path:
    """Per accelerator: every user request's time against the queries the CPU checks (CPU and
    accelerator), the binned medians and the crossover; the invocations per request on a second
    axis. The seed's crossover (~400) marked."""
    from offload.host.plots import pyplot

    plt = pyplot()
    recs = result["records"]
    backends = result["backends"]
    matchers = [m for m in CPU_MATCHERS if recs and f"cpu_{key(m)}_match_us" in recs[0]]
    crossings = {c["name"]: c for c in result["summary"]["crossover"]}
    fig, axes = plt.subplots(1, len(backends), figsize=(6.5 * len(backends), 5), squeeze=False)
    for ax, b in zip(axes[0], backends, strict=False):
        name = b["name"]
        for src, marker in (("trace", "."), ("sweep", "x")):
            rs = [r for r in recs if r["source"] == src and r["cpu_checked"] > 0]
            x = [r["cpu_checked"] for r in rs]
            for j, m in enumerate(matchers):
                y = [r[f"cpu_{key(m)}_encode_us"] + r[f"cpu_{key(m)}_match_us"] for r in rs]
                ax.scatter(x, y, s=4, marker=marker, color=f"C{j}", alpha=0.35,
                           label=f"CPU {m} ({src})" if src == "trace" else None)  # fmt: skip
            ax.scatter(x, [r[f"{name}_us"] for r in rs], s=4, marker=marker, color="C3", alpha=0.35,
                       label=f"{b['label']} ({src})" if src == "trace" else None)  # fmt: skip
        for j, m in enumerate(matchers):
            c = crossings.get(f"{name}/{key(m)}/sweep")
            if c and c["bins"]:
                bx = [q["checked"] for q in c["bins"]]
                ax.plot(bx, [q["cpu_us"] for q in c["bins"]], "-", color=f"C{j}", lw=1.5)
                if j == 0:  # the accelerator's medians are the same whichever CPU it is set against
                    ax.plot(bx, [q["accelerator_us"] for q in c["bins"]], "-", color="C3", lw=1.5)
                if c["checked"]:
                    ax.axvline(c["checked"], color=f"C{j}", ls=":", lw=1.2,
                               label=f"crossover vs {m}: {c['checked']:,.0f} queries")  # fmt: skip
        ax.axvline(
            SEED["crossover_checked_queries"], color="black", ls="--", lw=1, label="seed: ~400 queries"
        )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("queries checked by the CPU (the W-th valid answer)")
        ax.set_ylabel("time per user request (µs)")
        ax.grid(True, which="both", alpha=0.3)
        ax2 = ax.twinx()
        rs = sorted((r for r in recs if r["cpu_checked"] > 0), key=lambda r: r["cpu_checked"])
        ax2.plot(
            [r["cpu_checked"] for r in rs], [r["invocations"] for r in rs], color="grey", lw=0.8, alpha=0.6
        )
        ax2.set_ylabel("accelerator invocations per request", color="grey")
        ax.legend(fontsize=6, loc="upper left", markerscale=3)
        ax.set_title(b["label"], fontsize=9)
    fig.suptitle("CPU vs accelerator per user request with early stop (seed 000/001, Fig. 10)", fontsize=10)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    return path
