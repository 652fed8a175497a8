"""Network processing headroom (seed 003, slides 15-17): how much of a sender thread's CPU is left
for offloaded work while the link stays saturated.

The seed's method, followed step by step:

1. the minimum number of sender threads that saturates the link at a packet and burst size;
2. with those threads, a delay between bursts;
3. the largest delay that does not impede throughput is the processing headroom, given as a
   share of the burst period (a BlueField-2 keeps 78.5% with the kernel's IP stack, 87.5% with
   DPDK; at half bandwidth utilisation, 21%).

Here the link is this machine's loopback in a private network namespace, shaped by an htb class
(:mod:`offload.host.links`) to a rate this small machine can fill. Senders are UDP: the
seed's generators (pktgen, DPDK) send UDP, and a datagram is a packet of exactly the size asked
for, with no congestion control or coalescing between the sender's bursts and the wire (TCP
would merge and pace them). A blocking UDP socket also gives the back-pressure a NIC's TX ring
gives: its send buffer, sized to a few bursts (the ring), is held by the packets queued in the
qdisc, so a sender that outruns the link blocks instead of dropping. A ring of several bursts, as
a NIC's ring of thousands of descriptors is to bursts of tens, leaves the sender's CPU, not the
queue, as what bounds the delay. A small stdlib sender rather than iperf3: the method needs CPU
work of a chosen length between bursts, which iperf3 cannot insert.

Each sender is a process (Python threads share one interpreter lock, so a second thread would
not add CPU, as a C sender's would) held to a node budget's per-thread CPU share
(:mod:`offload.host.budgets`). The delay is CPU work, not a sleep: the headroom is the CPU
left for offloaded functions, and under a quota a sleep would cost none of it. The headroom is
the delay's CPU time over the CPU the thread may use in one burst period (its share times the
period's wall time, the period measured with that delay from the receiver's throughput).

This machine is shared: an unbudgeted ("host") sender gets only what other work leaves it, so
each sender reports the CPU it used, and a probe that lost throughput while its senders used
well under their share is measured again (:data:`STARVED`).

The search itself (:func:`search`) takes any measuring function, so that it is tested on
synthetic throughput curves; :func:`measure_profiles` runs it on the real link.
"""

from __future__ import annotations

import json
import math
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from offload.files import save_figure
from offload.host.children import LineReader
from offload.host.machine import describe
from offload.host.plots import pyplot

SEED = {"bluefield2-kernel": 0.785, "bluefield2-dpdk": 0.875, "bluefield2-half-bandwidth": 0.21}
"""The seed's headroom figures (share of the burst period left)."""


@dataclass(frozen=True)
class Sample:
    """One point: receiver throughput (bit/s), a sender's burst period (wall s) and the share of
    a core a sender used (NaN where not measured; it shows what contention left it)."""

    throughput_bps: float
    cycle_s: float
    cpu_share: float = math.nan


STARVED = 0.9
"""A sender that used less than this share of its CPU budget was starved by other work."""

Measure = Callable[[int, float], Sample]
"""(sender threads, delay between bursts in CPU seconds) -> the median sample."""


@dataclass(frozen=True)
class Point:
    threads: int
    delay_s: float
    throughput_bps: float
    cycle_s: float
    keeps: bool
    cpu_share: float = math.nan


@dataclass
class Search:
    """What :func:`search` found. ``headroom`` is the largest kept delay over the CPU a thread may
    use in one burst period; ``capped`` says the first bound (a whole period) kept throughput."""

    min_threads: int
    saturated_bps: float
    max_delay_s: float
    period_s: float
    headroom: float
    capped: bool
    by_threads: list[Point] = field(default_factory=list)
    by_delay: list[Point] = field(default_factory=list)


def _check_search_args(max_threads: int, tolerance: float, iterations: int, share: float) -> None:
    if max_threads < 1:
        raise ValueError(f"max threads must be >= 1, got {max_threads}")
    if not 0 < tolerance < 0.5:
        raise ValueError(f"tolerance must be in (0, 0.5), got {tolerance}")
    if iterations < 1:
        raise ValueError(f"bisection iterations must be >= 1, got {iterations}")
    if not 0 < share <= 1:
        raise ValueError(f"cpu share per thread must be in (0, 1], got {share}")


def min_threads(measure: Measure, max_threads: int, tolerance: float) -> tuple[int, float, list[Point]]:
    """Step 1: throughput with no delay at 1, 2, ... threads, stopping at the first count that adds
    less than ``tolerance`` (the link, or the CPU, is full: more threads would only contend).
    Returns the fewest threads within ``tolerance`` of the best, the best, and the points."""
    points: list[Point] = []
    best = 0.0
    for n in range(1, max_threads + 1):
        s = measure(n, 0.0)
        points.append(Point(n, 0.0, s.throughput_bps, s.cycle_s, True, s.cpu_share))
        added = s.throughput_bps > best * (1 + tolerance)
        best = max(best, s.throughput_bps)
        if not added:
            break
    if best <= 0:
        raise RuntimeError("no throughput at any thread count: nothing reached the receiver")
    n_min = next(p.threads for p in points if p.throughput_bps >= (1 - tolerance) * best)
    return n_min, best, points


def max_delay(
    keeps: Callable[[float], tuple[bool, Sample]], hi: float, iterations: int
) -> tuple[float, Sample | None, bool, list[tuple[float, Sample, bool]]]:
    """Step 2: the largest delay in [0, hi] that ``keeps`` throughput, by bisection; 0 is taken to
    keep (it is how saturation was measured). Returns the delay, its sample (None for 0),
    whether ``hi`` itself kept (then the answer is only a lower bound), and every probe."""
    probes: list[tuple[float, Sample, bool]] = []
    ok, s = keeps(hi)
    probes.append((hi, s, ok))
    if ok:
        return hi, s, True, probes
    lo, lo_sample = 0.0, None
    for _ in range(iterations):
        mid = (lo + hi) / 2
        ok, s = keeps(mid)
        probes.append((mid, s, ok))
        if ok:
            lo, lo_sample = mid, s
        else:
            hi = mid
    return lo, lo_sample, False, probes


def search(
    measure: Measure,
    max_threads: int = 4,
    tolerance: float = 0.05,
    iterations: int = 8,
    share: float = 1.0,
    retries: int = 2,
) -> Search:
    """The seed's method on ``measure``. ``share`` is the CPU share a sender thread may use (1: a
    whole core). The delay's upper bound is twice that share of the saturated burst period: such
    a delay at least doubles the period, so it halves the throughput, and fails any tolerance
    below a half. (One period is not enough: a throughput lost to a delay just past the period's
    CPU can be inside the tolerance.) The headroom is the kept delay over the CPU the thread has
    in the period measured with it, so stretching the period within the tolerance cannot make
    it exceed 1. A probe that fails while its senders were starved of CPU is measured again, up
    to ``retries`` times."""
    _check_search_args(max_threads, tolerance, iterations, share)
    if retries < 0:
        raise ValueError(f"retries must be >= 0, got {retries}")
    n, best, by_threads = min_threads(measure, max_threads, tolerance)
    period0 = next(p.cycle_s for p in by_threads if p.threads == n)
    if not period0 > 0:
        raise RuntimeError(f"no burst period measured at {n} threads")

    def keeps(d: float) -> tuple[bool, Sample]:
        for _ in range(1 + retries):
            s = measure(n, d)
            ok = s.throughput_bps >= (1 - tolerance) * best
            # A sender that lost throughput while it used well under its CPU share was starved by
            # other work on the machine, not by its delay (which would keep it at its share).
            if ok or not s.cpu_share < STARVED * share:
                break
        return ok, s

    d, at, capped, probes = max_delay(keeps, 2 * share * period0, iterations)
    period = at.cycle_s if at is not None else period0
    headroom = min(1.0, d / (share * period)) if d > 0 else 0.0
    by_delay = [Point(n, x, s.throughput_bps, s.cycle_s, ok, s.cpu_share) for x, s, ok in probes]
    return Search(n, best, d, period, headroom, capped, by_threads, by_delay)


# --- the real link: a receiver and sender processes inside a private namespace --------------------


@dataclass(frozen=True)
class Config:
    """One run's settings (the CLI's defaults)."""

    rate_mbit: float = 200.0
    packet_bytes: int = 8192
    burst: int = 32
    max_threads: int = 4
    tolerance: float = 0.05
    iterations: int = 8
    repeats: int = 5
    seconds: float = 0.4
    warmup_s: float = 0.15
    port: int = 5201
    ring_bursts: int = 4
    retries: int = 2
    netns: str = "headroom"

    def __post_init__(self) -> None:
        if not 0 < self.rate_mbit <= 10_000:
            raise ValueError(f"link rate must be in (0, 10000] Mbit/s, got {self.rate_mbit}")
        if not 64 <= self.packet_bytes <= 65_000:
            raise ValueError(f"packet size must be 64-65000 bytes (one datagram), got {self.packet_bytes}")
        if not 1 <= self.burst <= 4096:
            raise ValueError(f"burst must be 1-4096 packets, got {self.burst}")
        if not 1 <= self.max_threads <= 16:
            raise ValueError(f"max threads must be 1-16, got {self.max_threads}")
        if self.repeats < 1:
            raise ValueError(f"repeats must be >= 1, got {self.repeats}")
        if not 0.05 <= self.seconds <= 10:
            raise ValueError(f"seconds per trial must be 0.05-10, got {self.seconds}")
        if not 1024 <= self.port < 65536:
            raise ValueError(f"port must be 1024-65535, got {self.port}")
        if not 0 <= self.retries <= 10:
            raise ValueError(f"retries must be 0-10, got {self.retries}")
        if not 1 <= self.ring_bursts <= 64:
            raise ValueError(f"ring must hold 1-64 bursts, got {self.ring_bursts}")
        _check_search_args(self.max_threads, self.tolerance, self.iterations, 1.0)


def unavailable_reason() -> str | None:
    """Why the real run cannot happen here (namespaces, tc), or None."""
    from offload.host import links as L

    return L.unavailable_reason()


def machine() -> str:
    """The machine, in words, for the record (figures mean little without it)."""
    return describe()


class _Child:
    """A helper process inside the namespace, spoken to by JSON lines on stdin/stdout."""

    def __init__(self, ns: str, role: str, args: dict[str, Any]) -> None:
        cmd = ["nsenter", f"--net=/run/netns/{ns}", sys.executable, "-m", "offload.metrics.headroom",
               role, json.dumps(args)]  # fmt: skip
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, bufsize=1)  # fmt: skip
        self.role = role
        self.lines = LineReader(self.proc, self.proc.stdout, role)  # raw reads: a deadline that fires

    def send(self, msg: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(msg) + "\n")
        self.proc.stdin.flush()

    def reply(self, timeout_s: float) -> dict[str, Any]:
        """The next line, or RuntimeError with the child's stderr where it died or stalled."""
        try:
            line = self.lines.until(lambda text: True, timeout_s)
        except RuntimeError:
            self.stop()
            err = self.proc.stderr.read() if self.proc.stderr else ""
            msg = f"{self.role} did not answer in {timeout_s:g} s: {err.strip()[-400:]}"
            raise RuntimeError(msg) from None
        return json.loads(line)

    def stop(self) -> None:
        """Closes stdin (the child's cue to leave its cgroup and exit), then kills it if it stays."""
        try:
            if self.proc.stdin and not self.proc.stdin.closed:
                self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=3)


class Bench:
    """A receiver and up to ``max_threads`` senders held to ``profile``; :meth:`measure` is the
    search's measuring function. Use as a context manager: the processes end on exit."""

    def __init__(self, cfg: Config, ns: str, profile: str) -> None:
        self.cfg, self.ns, self.profile = cfg, ns, profile
        self.receiver: _Child | None = None
        self.senders: list[_Child] = []
        self.budgets: list[dict[str, Any]] = []

    def __enter__(self) -> Bench:
        try:
            self.receiver = _Child(self.ns, "receiver", {"port": self.cfg.port})
            self.receiver.reply(15)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for c in [*self.senders, *([self.receiver] if self.receiver else [])]:
            c.stop()
        self.senders, self.receiver = [], None

    def _grow(self, n: int) -> None:
        """Starts senders until there are ``n`` (each applies the budget to itself)."""
        args = {"port": self.cfg.port, "profile": self.profile, "packet_bytes": self.cfg.packet_bytes,
                "burst": self.cfg.burst, "ring_bursts": self.cfg.ring_bursts}  # fmt: skip
        grew = len(self.senders) < n
        while len(self.senders) < n:
            c = _Child(self.ns, "sender", args)
            self.senders.append(c)
            self.budgets.append(c.reply(15)["budget"])
        if grew:  # a new sender's first run is slow (page faults, cold caches): not measured
            self._run(n, 0.0)

    def trial(self, n: int, delay_s: float) -> Sample:
        """One run of ``n`` senders for warm-up + ``seconds``; the receiver counts the window
        after the warm-up (the send buffers fill and the rate settles in it)."""
        self._grow(n)
        return self._run(n, delay_s)

    def _run(self, n: int, delay_s: float) -> Sample:
        assert self.receiver is not None
        start = time.monotonic() + 0.05  # time for the commands to arrive
        a = start + self.cfg.warmup_s
        b = a + self.cfg.seconds
        self.receiver.send({"from": a, "to": b})
        for c in self.senders[:n]:
            c.send({"delay_s": delay_s, "start": start, "from": a, "end": b})
        wait = b - time.monotonic() + 10
        got = self.receiver.reply(wait)
        runs = [c.reply(wait) for c in self.senders[:n]]
        bps = got["bytes"] * 8 / (b - a)
        # A sender's burst period, from what arrived: each of the n senders delivered one burst
        # per period (nothing is dropped: the ring blocks). The senders' own clocks would see
        # the ring's wake-ups, several bursts at a time, instead.
        period = n * self.cfg.burst * self.cfg.packet_bytes * 8 / bps if bps > 0 else math.inf
        return Sample(bps, period, statistics.mean(r["cpu_share"] for r in runs))

    def measure(self, n: int, delay_s: float) -> Sample:
        """The median of ``repeats`` trials (throughput, period and CPU each)."""
        runs = [self.trial(n, delay_s) for _ in range(self.cfg.repeats)]
        fields = ("throughput_bps", "cycle_s", "cpu_share")
        return Sample(*(statistics.median(getattr(s, f) for s in runs) for f in fields))


def measure_profiles(
    profiles: list[str], cfg: Config, progress: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """The search on a link shaped to ``cfg.rate_mbit`` in a namespace made for it, once per node
    budget; the namespace (if made here), the class and the processes go at the end."""
    from offload.host import budgets as B
    from offload.host import links as L

    for p in profiles:
        B.profile(p)  # unknown names fail before anything is set up
    why = L.unavailable_reason()
    if why:
        raise RuntimeError(why)
    ns = L.namespace_name(cfg.netns)
    made = not Path(f"/run/netns/{ns}").exists()
    out: dict[str, Any] = {"machine": machine(), "load_average": {"before": os.getloadavg()},
                           "config": asdict(cfg), "seed": SEED, "profiles": {}}  # fmt: skip
    try:
        L.ensure_namespace(ns)
        out["link"] = L.shape(ns, cfg.port, B.Link(cfg.rate_mbit))
        for p in profiles:
            share = B.profile(p).cpu_per_thread or 1.0
            with Bench(cfg, ns, p) as bench:

                def measure(n: int, d: float, p: str = p, bench: Bench = bench) -> Sample:
                    if progress:
                        progress(f"{p}: {n} thread(s), delay {d * 1e3:.3f} ms")
                    return bench.measure(n, d)

                r = search(measure, cfg.max_threads, cfg.tolerance, cfg.iterations, share, cfg.retries)
                out["profiles"][p] = _record(r, cfg, share, bench.budgets[:1])
    finally:
        L.unshape(ns, cfg.port)
        if made:
            L.remove_namespace(ns)
    out["load_average"]["after"] = os.getloadavg()  # others' work on this machine moves "host"
    return out


def _record(r: Search, cfg: Config, share: float, budgets: list[dict[str, Any]]) -> dict[str, Any]:
    def pt(p: Point) -> dict[str, Any]:
        share_of_period = p.delay_s / (share * p.cycle_s) if p.cycle_s > 0 else 0.0
        return {"threads": p.threads, "delay_s": p.delay_s, "mbit_s": p.throughput_bps / 1e6,
                "period_s": p.cycle_s, "delay_share": share_of_period, "keeps": p.keeps,
                "cpu_used": None if math.isnan(p.cpu_share) else p.cpu_share}  # fmt: skip

    kept = [p for p in r.by_delay if p.keeps]
    sat = next(p for p in r.by_threads if p.threads == r.min_threads)
    return {
        "cpu_share_per_thread": share,
        "budget": budgets[0] if budgets else None,
        "min_threads": r.min_threads,
        "saturated_mbit_s": r.saturated_bps / 1e6,
        "link_utilisation": r.saturated_bps / (cfg.rate_mbit * 1e6),
        "max_delay_s": r.max_delay_s,
        "burst_period_s": r.period_s,
        "headroom": r.headroom,
        "capped": r.capped,
        # A cross-check that needs no search: the CPU a sender used at saturation, no delay.
        "headroom_from_cpu": None if math.isnan(sat.cpu_share) else max(0.0, 1 - sat.cpu_share / share),
        "sender_cpu_at_max_delay": next(
            (pt(p)["cpu_used"] for p in kept if p.delay_s == r.max_delay_s), None
        ),
        "by_threads": [pt(p) for p in r.by_threads],
        "by_delay": [pt(p) for p in r.by_delay],
    }


# --- the helper processes (run inside the namespace) ---------------------------------------------


def plot(r: dict[str, Any], path: Path) -> None:
    """Left: the search (throughput against the delay offered, as a share of the CPU a sender has
    in a saturated burst period); right: the headroom found beside the seed's."""
    plt = pyplot()

    c = r["config"]
    fig, (ax, bars) = plt.subplots(1, 2, figsize=(11, 4.5), gridspec_kw={"width_ratios": [2.2, 1]})
    for k, (name, p) in enumerate(r["profiles"].items()):
        color = f"C{k}"
        sat = p["by_threads"][p["min_threads"] - 1]
        cpu = p["cpu_share_per_thread"] * sat["period_s"]  # a sender's CPU in a saturated period
        pts = sorted((x["delay_s"] / cpu * 100, x["mbit_s"], x["keeps"]) for x in [sat, *p["by_delay"]])
        ax.plot([x for x, _, _ in pts], [y for _, y, _ in pts], "-", color=color, lw=0.8, alpha=0.6)
        for fill, label in ((True, f"{name}, {p['min_threads']} thread(s): kept"), (False, "lost")):
            xs = [(x, y) for x, y, keeps in pts if keeps == fill]
            if xs:
                ax.plot(*zip(*xs, strict=True), "o", color=color, mfc=color if fill else "white",
                        label=label if fill else f"{name}: lost")  # fmt: skip
        ax.axvline(p["max_delay_s"] / cpu * 100, color=color, ls="--", lw=1)
        ax.axhline(p["saturated_mbit_s"] * (1 - c["tolerance"]), color=color, ls=":", lw=0.8)
    ax.set_xlabel("delay between bursts (CPU work), % of a sender's CPU in a saturated burst period")
    ax.set_ylabel("receiver throughput, Mbit/s (median)")
    ax.set_ylim(0, None)
    ax.set_title(f"search: {c['rate_mbit']:g} Mbit/s link, {c['packet_bytes']} B x {c['burst']} per burst")
    ax.legend(fontsize=7, loc="lower left")
    names = [*r["profiles"], *(f"seed {s}" for s in r["seed"])]
    values = [p["headroom"] * 100 for p in r["profiles"].values()] + [v * 100 for v in r["seed"].values()]
    colors = [f"C{k}" for k in range(len(r["profiles"]))] + ["grey"] * len(r["seed"])
    bars.barh(names, values, color=colors)
    for y, v in enumerate(values):
        bars.annotate(f"{v:.1f}%", (v, y), xytext=(3, 0), textcoords="offset points", va="center", fontsize=8)
    bars.invert_yaxis()
    bars.set_xlim(0, 115)
    bars.set_xlabel("headroom, % of a sender's CPU")
    bars.set_title(f"headroom ({r['machine'].split(',')[0]})")
    fig.tight_layout()
    save_figure(fig, path)


def _lines(stream: IO[str]) -> Any:
    for line in stream:
        if line.strip():
            yield json.loads(line)


def _receiver(args: dict[str, Any]) -> None:
    """Counts the payload bytes that arrive inside each window it is sent; answers the count."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)  # never the bottleneck
    sock.bind(("127.0.0.1", args["port"]))
    buf = bytearray(65536)
    print(json.dumps({"ready": True}), flush=True)
    for cmd in _lines(sys.stdin):
        total = 0
        sock.settimeout(0.05)
        while time.monotonic() < cmd["to"]:
            try:
                n = sock.recv_into(buf)
            except TimeoutError:
                continue
            if time.monotonic() >= cmd["from"]:
                total += n
        print(json.dumps({"bytes": total}), flush=True)


def _spin(cpu_s: float) -> None:
    """``cpu_s`` of this thread's CPU time: the offloaded work between bursts. Counted in CPU time
    so that a quota's throttling stretches it, as it would a slower core's work."""
    end = time.thread_time() + cpu_s
    while time.thread_time() < end:
        pass


def _sender(args: dict[str, Any]) -> None:
    """Holds itself to the budget, then on each command sends bursts with the delay between
    them from ``start`` to ``end`` and answers the share of a core it used from ``from`` on."""
    from offload.host import budgets as B

    applied = B.apply(B.profile(args["profile"]).with_(threads=1), "headroom")
    try:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        # The send buffer is the TX ring: the kernel doubles the size asked for, and each queued
        # packet holds its payload and its buffer's overhead, so about ``ring_bursts`` bursts.
        ring = args["ring_bursts"] * args["burst"] * args["packet_bytes"]
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, ring)
        sock.connect(("127.0.0.1", args["port"]))
        payload, burst = bytes(args["packet_bytes"]), args["burst"]
        print(json.dumps({"budget": applied}), flush=True)
        for cmd in _lines(sys.stdin):
            while time.monotonic() < cmd["start"]:
                time.sleep(0.001)
            t0 = cpu0 = 0.0
            while (now := time.monotonic()) < cmd["end"]:
                if now >= cmd["from"] and not t0:  # the receiver's window: the ring is full by now
                    t0, cpu0 = now, time.thread_time()
                for _ in range(burst):
                    try:
                        sock.send(payload)
                    except (ConnectionRefusedError, BlockingIOError):
                        pass  # a lost datagram, as on a wire; the receiver's count shows it
                _spin(cmd["delay_s"])
            used = (time.thread_time() - cpu0) / (time.monotonic() - t0) if t0 else math.nan
            print(json.dumps({"cpu_share": used}), flush=True)
    finally:
        B.release(applied)


if __name__ == "__main__":
    {"receiver": _receiver, "sender": _sender}[sys.argv[1]](json.loads(sys.argv[2]))
