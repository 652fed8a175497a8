"""Where compression pays on a particle flow (seed 003, slides 20 and 24), from measured partition
runs (:func:`offload.flows.partition.partition_under`) and a compression engine's published
speed-up (``data/presets/platforms.toml``, ``[engines]``).

A node partitions its input and ships the partitions over its link to a host that reads them.
The three overlap message by message, so a gigabyte of input takes max(node seconds, link
seconds, host seconds). A codec adds node seconds (the compress step) and host seconds
(decompressing), and takes link seconds away (fewer bytes out). It pays on links slower than

    rate* = bytes out without a codec / max(node seconds, host seconds) with it

(per gigabyte of input). Below that rate the link is the bottleneck and shrinking what it carries
wins. Above it, the compressing node is the bottleneck. Where the codec costs the node nothing
extra (a hardware engine fast enough), it pays at every rate. A hardware engine divides the
compress step by its speed-up; the rest of the node's work stays.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from offload.probe import presets


@dataclass(frozen=True)
class Way:
    """One way to ship a data set from a node: a codec, in software or on an engine."""

    dataset: str
    codec: str
    engine: str | None
    speedup: float
    node_s_per_gb: float
    bytes_out_per_gb: float
    host_s_per_gb: float = 0.0
    """The host reading the partitions back (decompressing): 0 where no host run says."""

    @property
    def label(self) -> str:
        return self.codec if self.engine is None else f"{self.codec}, engine ×{self.speedup:g}"

    @property
    def busy_s_per_gb(self) -> float:
        """The slower of the two ends: the node making the partitions, the host reading them."""
        return max(self.node_s_per_gb, self.host_s_per_gb)

    def seconds_per_gb(self, rate_bps: float) -> float:
        """Seconds per GB of input over a link of ``rate_bps`` bits/s: node, link and host overlap."""
        return max(self.busy_s_per_gb, self.bytes_out_per_gb * 8 / rate_bps)


def engines() -> dict[str, dict[str, Any]]:
    """The compression engines of the presets file, each with its source's text."""
    p = presets.load()
    sources = p["sources"]
    return {k: v | {"source_text": sources.get(v["source"], v["source"])} for k, v in p["engines"].items()}


def ways(
    runs: Sequence[dict[str, Any]], profile: str, engine: str | None = None, host: str | None = None
) -> list[Way]:
    """Every way each data set's partition runs on ``profile`` offer: each codec in software, and
    on ``engine`` at its lowest and highest published speed-up. A way's node time is the run
    without a codec plus the codec's compress step (divided by the speed-up): the other steps are
    the same work with a codec or without, and taking them from one run keeps their run-to-run
    noise out of the comparison. Given ``host``, the runs on that budget say what reading the
    partitions back costs the host (their ``decode_s``), codec by codec."""
    speedups: list[float] = []
    if engine is not None:
        known = engines()
        if engine not in known:
            raise ValueError(f"unknown engine {engine!r}; one of {', '.join(known)}")
        speedups = sorted({min(known[engine]["speedups"]), max(known[engine]["speedups"])})
    mine = [r for r in runs if r["profile"] == profile]
    plain = {r["dataset"]: r for r in mine if r["codec"] == "none"}
    reading = {}
    for r in runs:
        if host is not None and r["profile"] == host and "decode_s" in r and r["bytes_in"]:
            reading[(r["dataset"], r["codec"])] = r["decode_s"] / (r["bytes_in"] / 1e9)
    out = []
    for r in mine:
        gb = r["bytes_in"] / 1e9
        if gb <= 0 or r["dataset"] not in plain:
            raise ValueError(f"{r['dataset']} on {profile}: needs a run without a codec, of some bytes")
        base = plain[r["dataset"]]["total_s"] / gb  # the work besides compressing, as measured without it
        common = dict(dataset=r["dataset"], codec=r["codec"], bytes_out_per_gb=r["bytes_out"] / gb,
                      host_s_per_gb=reading.get((r["dataset"], r["codec"]), 0.0))  # fmt: skip
        for k in [1.0] + (speedups if r["codec"] != "none" else []):
            node = base + r["compress_s"] / gb / k
            out.append(Way(engine=None if k == 1.0 else engine, speedup=k, node_s_per_gb=node, **common))
    if not out:
        raise ValueError(f"no partition runs on {profile!r} in these results")
    return out


def pays_below(way: Way, plain: Way) -> float:
    """The link rate (bits/s) below which ``way`` is faster than shipping uncompressed (``plain``):
    inf where it is never slower, 0 where it never wins. A codec never makes the node faster
    (:func:`ways` adds its compress step to the plain run), so it can only win on slow links."""
    if way.bytes_out_per_gb >= plain.bytes_out_per_gb:
        return 0.0
    if way.busy_s_per_gb <= plain.busy_s_per_gb:
        return math.inf
    return plain.bytes_out_per_gb * 8 / way.busy_s_per_gb


def table(all_ways: Sequence[Way], rates_bps: Sequence[float]) -> list[dict[str, Any]]:
    """Per data set: every way's seconds per GB at each rate, the rate below which it pays, and the
    best way at each rate (of equally fast ones, the one that busies the node least)."""
    out = []
    for name in dict.fromkeys(w.dataset for w in all_ways):
        mine = [w for w in all_ways if w.dataset == name]
        plain = next((w for w in mine if w.codec == "none" and w.engine is None), None)
        if plain is None:
            raise ValueError(f"{name}: the results have no run without a codec to compare with")
        rows = [{"way": w.label, "codec": w.codec, "engine": w.engine, "speedup": w.speedup,
                 "node_s_per_gb": w.node_s_per_gb, "host_s_per_gb": w.host_s_per_gb,
                 "out_over_in": w.bytes_out_per_gb / 1e9,
                 "pays_below_mbit": pays_below(w, plain) / 1e6 if w is not plain else None,
                 "s_per_gb": [w.seconds_per_gb(r) for r in rates_bps]} for w in mine]  # fmt: skip
        # on a tie (the link the bottleneck of several), the way that leaves the node most idle
        best = [min(mine, key=lambda w, r=r: (w.seconds_per_gb(r), w.busy_s_per_gb)).label for r in rates_bps]
        out.append({"dataset": name, "ways": rows, "best": best})
    return out
