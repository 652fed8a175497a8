"""`offload plan simulate`: a discrete-event model of the serving pipeline, on SimPy.

The model follows the daemon (docs/serve-protocol.md), stage by stage:

    client ──channel──▶ broker ─▶ request queue ─▶ w workers ─▶ kernel queue ─▶ k executors × e engines
       ▲                  │  │     (bounded: busy)  decode+encode  (bounded)  ▲  batch, invoke,
       │                  │  └─ pre-encoded requests ─────────────────────────┘  transfer + match
       └──────channel─────┘◀──────────────────────────────────────────── reply ◀──┘

- **Arrivals**: a closed loop of p clients (each sends its next request when the last is
  answered, like `offload serve inject --mode closed`) or arrivals at a rate (open loop): Poisson,
  or evenly spaced (`Load.arrivals = "fixed"`, the schedule of `offload serve bench`). Request sizes
  (queries per request) are drawn from a list — a trace's, or a distribution.
- **Channel** client ↔ daemon: T(n) = L + n/B per direction (a probe profile's ZeroMQ fit).
- **Broker**: one thread, a cost per message in and out.
- **Workers**: w; a cost per request plus per query (decode and encode a raw request). A
  pre-encoded request (`Pipeline.encoded`) skips them: the broker puts it in the kernel queue.
- **Batching**, in the executors as the daemon's: an executor that frees takes the first request
  queued, then more: per request (`batch_queries` 0), self-filling (`batch_timeout_s` 0: what
  is queued at that instant, up to `batch_queries` queries, never waiting; batches grow with the
  load), or size-or-timeout (waits until `batch_queries` queries or `batch_timeout_s` after the
  first request reached the broker).
- **Kernel executors**: k; on host engines (`kernel_on_host`) a batch costs invoke + transfer
  (L + n/B) + the match of n queries spread over e engines; then building and sending the
  replies. k = 0 is the daemon's inline mode: the broker matches pre-encoded requests itself, in
  batches of what was readable at once (raw ones: the worker that encoded them).
- **The device** (`kernel_on_host = False`): ONE device (or `devices`, the executors taking them
  in turn) shared by the k executors, modelled by the emulated device's own functions
  (crates/serve/src/emulated.rs, `DeviceCosts::batch` and `Lanes`, called through
  `offload._native`): the launch (invoke) takes no lane, then the batch
  goes through three one-at-a-time lanes in the order the batches were handed over: H2D (half
  the transfer latency + the query bytes), kernel (⌈n/e⌉ queries + the floor), D2H (half the
  latency + 4 B per query). So k executors overlap only what one device overlaps (the next
  batch's copy with this one's kernel), and the kernel lane bounds the throughput however
  large k is.
- **CPUs**: with `cpus` set, every stage that computes on the host (client, broker, worker,
  CPU engines) shares that many cores with the others running at the same time (processor
  sharing, like a time-slicing scheduler) — on a small machine the stages compete for cores,
  which pure queueing would miss. An accelerator's engines (`kernel_on_host
  = False`) do not take host cores.

Outputs: throughput (requests and queries per second), latency percentiles, the share of
requests refused as busy, per-stage utilisation. Deterministic for a given seed.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import simpy

from offload import _native
from offload.datafiles import data_path
from offload.serve.grid import Deployment


@dataclass(frozen=True)
class Costs:
    """Per-stage service times, in seconds (bytes/s for bandwidths; None = unbounded)."""

    channel_latency_s: float = 0.0  # L of the client↔daemon channel, per direction
    channel_bps: float | None = None  # B of that channel
    request_bytes_per_query: float = 32.0  # on the wire, client → daemon
    reply_bytes_per_query: float = 12.0  # daemon → client
    client_request_s: float = 0.0  # client CPU per request (build, send, receive, decode)
    client_query_s: float = 0.0  # client CPU per query
    broker_s: float = 0.0  # broker CPU per message (counted once in, once out)
    worker_request_s: float = 0.0  # worker CPU per request
    worker_query_s: float = 0.0  # worker CPU per query (decode + encode)
    invoke_s: float = 0.0  # per kernel batch: driver call, synchronisation (on a host core if the kernel is)
    kernel_fixed_s: float = 0.0  # per kernel batch: the kernel's floor however few queries (an accelerator's)
    transfer_latency_s: float = 0.0  # host → accelerator L per batch
    transfer_bps: float | None = None  # host → accelerator B
    transfer_bytes_per_query: float = 32.0
    kernel_query_s: float = 1e-7  # match time per query on one engine
    kernel_on_host: bool = True  # engines are host threads (take cores) or an accelerator's
    queue_wakeup_s: float = 0.0  # an idle worker's wake-up when a request arrives (thread hand-off)
    kernel_wakeup_s: float = 0.0  # an idle executor's wake-up when a batch arrives
    background_request_s: float = 0.0  # host CPU per request beside the critical path (I/O threads, …)
    stall_probability: float = 0.0  # a request is held up by a stall (preemption, steal, …) …
    stall_s: float = 0.0  # … of this long
    reply_request_s: float = 0.0  # executor CPU per request after the match (build, send the reply)
    reply_query_s: float = 0.0  # executor CPU per query after the match


@dataclass(frozen=True)
class Pipeline:
    p: int = 1  # client processes (closed loop)
    w: int = 1  # workers
    k: int = 1  # kernel executors
    e: int = 1  # engines per executor
    batch_queries: int = 0  # 0: per request; else batch across requests up to this many queries
    batch_timeout_s: float = 200e-6  # the daemon's default (crates/serve: batch_timeout_us = 200)
    queue_capacity: int = 64  # request queue bound (the daemon's `queue`); beyond it: busy
    # Host cores the stages share (None: no contention; a fraction: what other processes leave).
    cpus: float | None = None
    encoded: bool = False  # requests come pre-encoded: the broker hands them to the executors
    devices: int = 1  # devices the k executors share (executor i uses device i mod devices)

    def __post_init__(self) -> None:
        """Numbers out of their domain are refused here, where a pipeline is made (a model of
        absurd numbers gives confident figures, or never ends)."""
        if min(self.p, self.w, self.e, self.devices) < 1 or self.k < 0:
            raise ValueError(f"p, w, e and devices must be at least 1, k at least 0 (inline): {self.label()}")
        if self.batch_queries < 0 or not 0 <= self.batch_timeout_s < math.inf:
            raise ValueError("batch_queries and batch_timeout_s must be finite and ≥ 0")
        if self.cpus is not None and not 0 < self.cpus < math.inf:
            raise ValueError(f"cpus must be a finite number above 0 (or none), not {self.cpus}")

    def label(self) -> str:
        b = ""
        if self.batch_queries:
            fill = "self-filling" if self.batch_timeout_s == 0 else f"{self.batch_timeout_s * 1e3:g}ms"
            b = f" batch {self.batch_queries}/{fill}"
        more = (" encoded" if self.encoded else "") + (
            f" {self.devices} devices" if self.devices != 1 else ""
        )
        return f"{self.p}p {self.w}w {self.k}k {self.e}e{b}{more}"


def pipeline_for(d: Deployment, cpus: float | None, queue_capacity: int = 1024) -> Pipeline:
    """The model of a point of the one grid (`offload.serve.grid`, what `offload serve sweep`
    measures): its shape, batching policy and whether its requests come encoded. The queue is
    the sweep's daemon's (1024 requests)."""
    return Pipeline(
        p=d.p, w=d.w, k=d.k, e=d.e, batch_queries=d.batch_max_queries,
        batch_timeout_s=d.batch_timeout_us * 1e-6, queue_capacity=queue_capacity, cpus=cpus,
        encoded=d.encoding != "raw",
    )  # fmt: skip


def request_sizes(d: Deployment, sizes: Sequence[int]) -> tuple[int, ...]:
    """The request sizes a point replays: its own where it fixes one, else the trace's."""
    return (d.request_queries,) if d.request_queries else tuple(sizes)


# 40-100 µs of wall time per simulated request on this 2-vCPU VM (more with many engines or
# shared cores): the default bound stops a model whose stages are so fast that a simulated second
# would hold millions of requests within 20-50 s, with an error saying what to change. The
# configurations people ask about (up to ~100,000 requests/s for 1 s) stay well under it.
MAX_REQUESTS = 500_000


@dataclass(frozen=True)
class Load:
    queries_per_request: Sequence[int] = (1,)  # sizes to draw from (uniformly)
    mode: str = "closed"  # closed (p clients) or open (arrivals at rate_rps)
    rate_rps: float = 0.0  # open loop: requests per second
    duration_s: float = 1.0  # simulated time measured
    warmup_s: float = 0.1  # simulated time before measuring
    seed: int = 1
    max_requests: int = MAX_REQUESTS  # a bound on the work: beyond it, SimulationLimit
    arrivals: str = "poisson"  # open loop: poisson, or fixed (evenly spaced, as `offload serve bench`)

    def __post_init__(self) -> None:
        """As `Pipeline`'s: refused where a load is made."""
        sizes = self.queries_per_request
        if not sizes or min(sizes) < 0 or max(sizes) < 1:
            raise ValueError("queries_per_request needs sizes ≥ 0 queries, at least one of them > 0")
        if self.mode not in ("closed", "open") or (self.mode == "open" and not 0 < self.rate_rps < math.inf):
            raise ValueError("mode must be closed, or open with a positive, finite rate_rps")
        if self.arrivals not in ("poisson", "fixed"):
            raise ValueError(f"arrivals are poisson or fixed, not {self.arrivals!r}")
        if not 0 < self.duration_s < math.inf or not 0 <= self.warmup_s < math.inf:
            raise ValueError(f"the simulated duration must be positive and finite, not {self.duration_s:g} s")
        if self.max_requests < 1:
            raise ValueError(f"max_requests must be at least 1, not {self.max_requests}")


class SimulationLimit(ValueError):
    """The simulation started more requests than `Load.max_requests` allows."""


def min_samples(q: float) -> int:
    """Completed requests a percentile needs to be more than the largest one seen: p50 2,
    p90 10, p99 100."""
    return math.ceil(100 / (100 - q) - 1e-9) if q < 100 else 1


@dataclass
class Result:
    pipeline: Pipeline
    requests: int
    queries: int
    busy: int
    duration_s: float
    latencies_s: np.ndarray = field(repr=False)
    utilisation: dict[str, float]
    batches: int = 0  # matcher calls (kernel batches) started in the measured window
    batch_queries: int = 0  # the queries in them

    @property
    def queries_per_batch(self) -> float:
        return self.batch_queries / self.batches if self.batches else math.nan

    @property
    def throughput_rps(self) -> float:
        return self.requests / self.duration_s

    @property
    def throughput_qps(self) -> float:
        return self.queries / self.duration_s

    def percentile(self, q: float) -> float:
        return float(np.percentile(self.latencies_s, q)) if len(self.latencies_s) else math.nan

    def enough(self, q: float) -> bool:
        """Whether enough requests completed for the percentile q to mean anything."""
        return len(self.latencies_s) >= min_samples(q)

    def warnings(self) -> list[str]:
        """What makes parts of this result meaningless (too few requests for a percentile)."""
        n = len(self.latencies_s)
        short = [q for q in (50, 90, 99) if not self.enough(q)]
        if not short:
            return []
        need = ", ".join(f"p{q} {min_samples(q)}" for q in short)
        return [f"only {n:,} requests completed in {self.duration_s:g} simulated s: too few for "
                f"{', '.join(f'p{q}' for q in short)} (needs {need}); give a longer --duration"]  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        """The result; a percentile with too few requests behind it is null (see "warnings")."""
        return {
            "config": self.pipeline.label(), "pipeline": asdict(self.pipeline),
            "requests": self.requests, "queries": self.queries, "busy": self.busy,
            "duration_s": self.duration_s, "throughput_rps": self.throughput_rps,
            "throughput_qps": self.throughput_qps,
            "latency_s": {f"p{q}": self.percentile(q) if self.enough(q) else None for q in (50, 90, 99)}
            | {"mean": float(self.latencies_s.mean()) if len(self.latencies_s) else None},
            "utilisation": self.utilisation, "warnings": self.warnings(),
            "batches": self.batches,
            "queries_per_batch": self.queries_per_batch if self.batches else None,
        }  # fmt: skip


class _SharedCores:
    """Processor sharing, as a time-slicing scheduler gives it: the n stages computing at once
    share `cores`, each progressing at min(1, cores / n) of a core. (A stage that held a core
    for its whole burst would let one lone worker run at full speed however many threads compete,
    which is not how an overloaded 2-core machine behaves.)"""

    def __init__(self, env: simpy.Environment, cores: float) -> None:
        self.env, self.cores = env, cores
        self.jobs: dict[int, list[Any]] = {}  # id → [remaining work (s), completion event]
        self.last = 0.0
        self.changed = env.event()
        env.process(self._serve())

    def work(self, seconds: float) -> simpy.Event:
        self._advance()
        done = self.env.event()
        self.jobs[id(done)] = [seconds, done]
        if not self.changed.triggered:
            self.changed.succeed()
        return done

    def _rate(self) -> float:
        return min(1.0, self.cores / len(self.jobs)) if self.jobs else 1.0

    def _advance(self) -> None:
        dt, self.last = self.env.now - self.last, self.env.now
        if dt > 0:
            rate = self._rate()
            for job in self.jobs.values():
                job[0] -= dt * rate

    def _serve(self):  # type: ignore[no-untyped-def]
        while True:
            self.changed = self.env.event()
            if not self.jobs:
                yield self.changed
                continue
            soonest = min(job[0] for job in self.jobs.values()) / self._rate()
            yield self.env.timeout(max(soonest, 0.0)) | self.changed
            self._advance()
            for key, job in list(self.jobs.items()):
                if job[0] <= 1e-12:
                    del self.jobs[key]
                    job[1].succeed()


class _Busy:
    """The host's cores (or no contention) and the busy time per stage."""

    def __init__(self, env: simpy.Environment, cpus: float | None) -> None:
        self.env = env
        self.cores = _SharedCores(env, cpus) if cpus else None
        self.busy: dict[str, float] = {}

    def run(self, stage: str, seconds: float, on_host: bool = True):  # type: ignore[no-untyped-def]
        if seconds <= 0:
            return
        if self.cores is not None and on_host:
            yield self.cores.work(seconds)
        else:
            yield self.env.timeout(seconds)
        key = stage if on_host or self.cores is None else f"device {stage}"
        self.busy[key] = self.busy.get(key, 0.0) + seconds


WHATIF = data_path("plans", "whatif")


def presets() -> list[str]:
    """Names of the bundled what-if kernel presets."""
    return sorted(p.stem for p in WHATIF.glob("*.toml"))


def load_costs(path: str) -> Costs:
    """Stage costs from a TOML file's [costs] table (keys: the fields of Costs), located errors."""
    return Costs(**_costs_table(path)[1])


def load_preset(name_or_path: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A what-if preset: ([about], the [costs] keys it sets). A bundled name or a file."""
    path = Path(name_or_path)
    if not path.exists():
        path = WHATIF / f"{name_or_path}.toml"
        if not path.exists():
            raise ValueError(f"no preset {name_or_path!r}; bundled: {', '.join(presets())}")
    return _costs_table(str(path))


def with_preset(costs: Costs, preset: dict[str, Any]) -> Costs:
    return replace(costs, **preset)


def _costs_table(path: str) -> tuple[dict[str, Any], dict[str, Any]]:
    from offload.plan.tomlfile import check_keys, expect_str, expect_table, load

    doc = load(path)
    check_keys(doc, (), doc.data, {"costs", "about"})
    about = expect_table(doc, ("about",), doc.data.get("about", {}))
    for key, v in about.items():
        expect_str(doc, ("about", key), v)
    table = expect_table(doc, ("costs",), doc.data.get("costs", {}))
    check_keys(doc, ("costs",), table, set(Costs.__dataclass_fields__))
    for key, v in table.items():
        want_bool = key == "kernel_on_host"
        number = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
        if want_bool != isinstance(v, bool) or (not want_bool and not number):
            raise doc.error(
                ("costs", key), f"expected {'true or false' if want_bool else 'a number ≥ 0'}, not {v!r}"
            )
    return about, table


def request_time(costs: Costs, n: int) -> float:
    """A lone request of n queries through every stage, nothing queued, the kernel on one engine
    (a lower bound for e = 1). Its launch, transfer and kernel are `device_batch`'s sum, whether
    the kernel runs on the host or on a device."""
    channel = _transfer(costs.channel_latency_s, costs.channel_bps, n * costs.request_bytes_per_query)
    channel += _transfer(costs.channel_latency_s, costs.channel_bps, n * costs.reply_bytes_per_query)
    return (
        costs.client_request_s + n * costs.client_query_s + channel + 2 * costs.broker_s
        + costs.queue_wakeup_s + costs.worker_request_s + n * costs.worker_query_s + costs.kernel_wakeup_s
        + device_batch(costs, n).total_s  # invoke + transfer (L + bytes/B) + kernel, one engine
        + costs.reply_request_s + n * costs.reply_query_s
    )  # fmt: skip


def _transfer(latency: float, bps: float | None, nbytes: float) -> float:
    return latency + (nbytes / bps if bps else 0.0)


@dataclass(frozen=True)
class DeviceBatch:
    """One batch's time on a device, by lane (the emulated device's `BatchTime`)."""

    invoke_s: float  # the launch: takes no lane
    h2d_s: float
    kernel_s: float
    d2h_s: float

    @property
    def total_s(self) -> float:
        return self.invoke_s + self.h2d_s + self.kernel_s + self.d2h_s


def device_batch(costs: Costs, n: int, e: int = 1) -> DeviceBatch:
    """A batch of n queries on the device, its kernel over e engines: the device-time formula,
    whose one home is the emulated device's `DeviceCosts::batch` (crates/serve/src/emulated.rs,
    documented there and in docs/serve-protocol.md), called through the bindings."""
    return DeviceBatch(
        *_native.device_batch_time(
            n, max(e, 1), invoke_s=costs.invoke_s, transfer_latency_s=costs.transfer_latency_s,
            transfer_bps=costs.transfer_bps, transfer_bytes_per_query=costs.transfer_bytes_per_query,
            kernel_query_s=costs.kernel_query_s, kernel_fixed_s=costs.kernel_fixed_s,
        )
    )  # fmt: skip


class Lanes:
    """A device's three one-at-a-time lanes (copy in, compute, copy out): the emulated device's
    `Lanes` (crates/serve/src/emulated.rs), through the bindings."""

    def __init__(self) -> None:
        self._lanes = _native.DeviceLanes()

    def book(self, sent_s: float, t: DeviceBatch) -> float:
        """Books a batch handed over at `sent_s`; returns when it is done (its D2H ends)."""
        return float(self._lanes.book(sent_s, t.invoke_s, t.h2d_s, t.kernel_s, t.d2h_s))


def simulate(pipe: Pipeline, costs: Costs, load: Load) -> Result:
    """Runs the pipeline under ``load`` for its warm-up and duration (deterministic per seed)."""
    _check(costs, load)
    model = _Model(pipe, costs, load)
    done = model.run()
    end = model.end
    lat = np.array([d[0] for d in done])
    util = {stage: t / (end * (pipe.cpus or 1)) for stage, t in sorted(model.cpu.busy.items())}
    util |= {f"device {lane}": t / (end * pipe.devices) for lane, t in model.lane_busy.items() if t > 0}
    queries = sum(d[1] for d in done)
    return Result(pipe, len(done), queries, model.busy, load.duration_s, lat, util, *model.batches)


def _check(costs: Costs, load: Load) -> None:
    """What only the pair of costs and load can tell (each number was checked where it was made)."""
    if request_time(costs, max(load.queries_per_request)) <= 0:
        raise ValueError(
            "every stage cost is zero: a request takes no time, so any throughput would be "
            "meaningless; give stage costs (--costs, --calibration or --preset)"
        )


@dataclass
class _Request:
    """A request inside the daemon: its queries, the event its reply fires, when the broker took
    it (the size-or-timeout timer starts there) and when it was put in its current queue."""

    n: int
    answered: simpy.Event
    received: float
    queued: float


class _Model:
    """One simulation: the daemon's stages as SimPy processes over shared queues. Clients (or
    open-loop arrivals) send requests through the broker into the bounded request queue (raw) or
    the kernel queue (pre-encoded); workers decode and encode raw ones into the kernel queue;
    executors batch, run the kernel (on host cores, or on the shared device's lanes) and answer.
    With k = 0 the broker matches pre-encoded requests itself (inline)."""

    def __init__(self, pipe: Pipeline, costs: Costs, load: Load) -> None:
        self.pipe, self.costs, self.load = pipe, costs, load
        self.env = env = simpy.Environment()
        self.rng = random.Random(load.seed)
        self.cpu = _Busy(env, pipe.cpus)
        self.broker = simpy.Resource(env, capacity=1)
        self.requests: simpy.Store = simpy.Store(env, capacity=pipe.queue_capacity)
        # As in the daemon: the kernel queue holds `queue` requests; workers block when it is
        # full, so the request queue fills and the broker answers busy.
        self.kernel_queue: simpy.Store = simpy.Store(env, capacity=pipe.queue_capacity)
        self.front: simpy.Store = simpy.Store(env)  # inline mode: what the ROUTER holds unread
        self.inline = pipe.k == 0 and pipe.encoded
        self.devices = [Lanes() for _ in range(pipe.devices)]
        self.lane_busy = {"h2d": 0.0, "kernel": 0.0, "d2h": 0.0}
        self.start = load.warmup_s
        self.end = self.start + load.duration_s
        self.done: list[tuple[float, int]] = []  # (latency, queries) of requests answered in the window
        self.busy = 0
        self.started = 0
        self.batches = [0, 0]  # batches started in the window, and their queries

    def run(self) -> list[tuple[float, int]]:
        env, pipe = self.env, self.pipe
        if not pipe.encoded:
            for _ in range(pipe.w):
                env.process(self.worker())
        for i in range(pipe.k):
            env.process(self.executor(i % pipe.devices))
        if self.inline:
            env.process(self.inline_broker())
        if self.load.mode == "closed":
            for _ in range(pipe.p):
                env.process(self.closed_client())
        else:
            env.process(self.open_arrivals())
        env.run(until=self.end)
        return self.done

    def broker_pass(self):  # type: ignore[no-untyped-def]
        with self.broker.request() as b:
            yield b
            yield from self.cpu.run("broker", self.costs.broker_s)

    def channel(self, nbytes: float) -> float:
        return _transfer(self.costs.channel_latency_s, self.costs.channel_bps, nbytes)

    def one_request(self, n: int):  # type: ignore[no-untyped-def]
        env, costs, load, end = self.env, self.costs, self.load, self.end
        t0 = env.now
        self.started += 1
        if self.started > load.max_requests:
            raise SimulationLimit(
                f"the simulation stopped after {load.max_requests:,} requests (its limit, max_requests) at "
                f"{env.now:.3g} of {end:g} simulated s: the stages are so fast that it would run for long"
            )
        yield from self.cpu.run("client", costs.client_request_s + n * costs.client_query_s)
        yield env.timeout(self.channel(n * costs.request_bytes_per_query))
        if costs.background_request_s > 0:  # takes cores, delays this request only through them
            env.process(self.cpu.run("background", costs.background_request_s))
        answered = env.event()
        if self.inline:  # the broker reads it with what else is readable, matches and answers
            yield self.front.put(_Request(n, answered, env.now, env.now))
            ok = yield answered
        else:
            yield from self.broker_pass()
            queue = self.kernel_queue if self.pipe.encoded else self.requests
            if len(queue.items) >= self.pipe.queue_capacity:
                answered.succeed(False)  # busy: the broker answers at once
            else:
                yield queue.put(_Request(n, answered, env.now, env.now))
            ok = yield answered
            yield from self.broker_pass()
        yield env.timeout(self.channel(n * costs.reply_bytes_per_query))
        if costs.stall_probability and self.rng.random() < costs.stall_probability:
            yield env.timeout(costs.stall_s)
        if self.start <= env.now < end:
            if ok:
                self.done.append((env.now - t0, n))
            else:
                self.busy += 1

    def worker(self):  # type: ignore[no-untyped-def]
        """As the daemon's workers: take a raw request, decode and encode it, hand it to the
        kernel queue (waiting while it is full); in inline mode (k = 0) match it here."""
        env, costs, requests = self.env, self.costs, self.requests
        while True:
            req = yield requests.get()
            if env.now == req.queued:  # the worker was idle, blocked on the queue: it must wake up
                yield env.timeout(costs.queue_wakeup_s)
            yield from self.cpu.run("worker", costs.worker_request_s + req.n * costs.worker_query_s)
            if self.pipe.k == 0:
                yield from self.run_batch([req], 0)
            else:
                req.queued = env.now
                yield self.kernel_queue.put(req)

    def executor(self, device: int):  # type: ignore[no-untyped-def]
        """As the daemon's kernel executors: take the first request queued, gather more by the
        batching policy, match them as one batch, answer each."""
        env, costs = self.env, self.costs
        while True:
            first = yield self.kernel_queue.get()
            if env.now == first.queued:  # the executor was idle: it must wake up
                yield env.timeout(costs.kernel_wakeup_s)
            group = [first]
            yield from self.gather(group)
            yield from self.run_batch(group, device)

    def gather(self, group: list[_Request]):  # type: ignore[no-untyped-def]
        """The daemon's `gather`: self-filling (timeout 0) takes what is queued now, up to
        `batch_queries`; size-or-timeout waits until then from the first request's arrival."""
        env, pipe, queue = self.env, self.pipe, self.kernel_queue
        total = group[0].n
        until = group[0].received + pipe.batch_timeout_s
        while pipe.batch_queries > 0 and total < pipe.batch_queries:
            if pipe.batch_timeout_s == 0:
                if not queue.items:
                    break
                got = yield queue.get()  # there is one: taken at this instant
            else:
                if env.now >= until:
                    break
                get = queue.get()
                fired = yield get | env.timeout(until - env.now)
                if get not in fired:
                    get.cancel()
                    yield env.timeout(self.costs.kernel_wakeup_s)  # the timed wait must wake it up too
                    break
                got = fired[get]
            group.append(got)
            total += got.n

    def inline_broker(self):  # type: ignore[no-untyped-def]
        """Inline mode (k = 0, pre-encoded): the broker takes every request readable at once,
        admits each, and matches them itself in batches of up to `batch_queries` queries (0: one
        request each), sending each reply out (a broker pass each) before reading again."""
        pipe, costs = self.pipe, self.costs
        while True:
            first = yield self.front.get()
            with self.broker.request() as b:
                yield b
                read = [first]
                while self.front.items:
                    read.append((yield self.front.get()))
                yield from self.cpu.run("broker", len(read) * costs.broker_s)
                while read:
                    take, total = 0, 0
                    while take < len(read) and (
                        take == 0 or (pipe.batch_queries > 0 and total < pipe.batch_queries)
                    ):
                        total += read[take].n
                        take += 1
                    yield from self.run_batch(read[:take], 0, replies_out=True)
                    read = read[take:]

    def run_batch(self, group: list[_Request], device: int, replies_out: bool = False):  # type: ignore[no-untyped-def]
        """Matches a batch (host engines, or the shared device's lanes), builds and sends the
        replies (with `replies_out`, through the ROUTER: a broker pass each), answers each."""
        env, costs, pipe, cpu = self.env, self.costs, self.pipe, self.cpu
        n = sum(r.n for r in group)
        if self.start <= env.now < self.end:
            self.batches[0] += 1
            self.batches[1] += n
        if costs.kernel_on_host:
            yield from cpu.run("invoke", costs.invoke_s)
            xfer = _transfer(costs.transfer_latency_s, costs.transfer_bps, n * costs.transfer_bytes_per_query)
            if xfer > 0:
                yield env.timeout(xfer)
            # n queries over e engines: the slowest engine gets ⌈n/e⌉.
            shares = [n // pipe.e + (1 if i < n % pipe.e else 0) for i in range(pipe.e)]
            engines = [env.process(cpu.run("kernel", s * costs.kernel_query_s)) for s in shares if s]
            yield simpy.AllOf(env, engines)
            if costs.kernel_fixed_s > 0:
                yield env.timeout(costs.kernel_fixed_s)
        else:
            t = device_batch(costs, n, pipe.e)
            due = self.devices[device].book(env.now, t)
            for lane, s in (("h2d", t.h2d_s), ("kernel", t.kernel_s), ("d2h", t.d2h_s)):
                self.lane_busy[lane] += s
            if due > env.now:
                yield env.timeout(due - env.now)
        out = len(group) * (costs.reply_request_s + (costs.broker_s if replies_out else 0.0))
        yield from cpu.run("reply", out + n * costs.reply_query_s)
        for r in group:
            r.answered.succeed(True)

    def closed_client(self):  # type: ignore[no-untyped-def]
        while True:
            yield from self.one_request(self.rng.choice(self.load.queries_per_request))

    def open_arrivals(self):  # type: ignore[no-untyped-def]
        load = self.load
        while True:
            gap = 1 / load.rate_rps if load.arrivals == "fixed" else self.rng.expovariate(load.rate_rps)
            yield self.env.timeout(gap)
            self.env.process(self.one_request(self.rng.choice(load.queries_per_request)))
