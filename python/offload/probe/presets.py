"""Platform presets (data/presets/platforms.toml, with sources) and the seed's two derived
metrics: the device-memory reuse ratio r and the computation-to-communication ratio CTC."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from offload.datafiles import data_path

PRESETS = data_path("presets", "platforms.toml")
GB = 1e9


def load(path: Path | None = None) -> dict[str, Any]:
    with open(path or PRESETS, "rb") as f:
        return tomllib.load(f)


def private_bandwidth(r: float, dma_bps: float, device_bps: float) -> float:
    """Effective host->accelerator bandwidth of a private-memory platform when every byte
    DMA'd in is read r times from device memory (seed 004, Sec. 4):
    1 / (1/(r·bw_dma) + 1/bw_dev)."""
    if r <= 0:
        return 0.0
    return 1.0 / (1.0 / (r * dma_bps) + 1.0 / device_bps)


def reuse_threshold(dma_bps: float, device_bps: float, shared_bps: float) -> float | None:
    """The r above which the private-memory platform beats a shared-memory one of bandwidth
    `shared_bps`: solve private_bandwidth(r) = shared_bps. None when it never does
    (device memory no faster than the shared platform)."""
    if device_bps <= shared_bps:
        return None
    return 1.0 / (dma_bps * (1.0 / shared_bps - 1.0 / device_bps))


# The DMA steps an iterative kernel's transfers can run at (seed 004, Fig. 5): it allocates its
# pinned buffers once, so the allocation step (1.6 GB/s) does not recur; its copies still go
# through the pageable→pinned staging (2.7 GB/s) unless the host writes into pinned memory, and
# none beats the vendor stack (5.2 GB/s). Chosen from the seed's description of the steps, before
# comparing any threshold with its 7.
ITERATIVE_DMA_STEPS = {
    "with_pageable_copy": "staged (pageable→pinned copy)",
    "vendor_stack": "vendor stack (pinned, no copy)",
}


def reuse_variants(
    steps: dict[str, float], device_gbps: float, shared_gbps: float, seed_r: float
) -> dict[str, Any]:
    """The reuse-ratio threshold from the seed's stated DMA rates of an iterative kernel, each
    beside ``seed_r`` with the difference, and the fitted variant: the DMA rate back-solved so
    that the threshold is ``seed_r`` (it agrees by construction). Rates in GB/s."""
    stated = []
    for step, what in ITERATIVE_DMA_STEPS.items():
        if steps.get(step):
            r = reuse_threshold(steps[step], device_gbps, shared_gbps)
            stated.append({
                "step": step, "what": what, "dma_gbps": steps[step], "r_threshold": r,
                "diff": None if r is None else r - seed_r, "rel_diff": None if r is None else r / seed_r - 1,
            })  # fmt: skip
    dma = 1.0 / (seed_r * (1.0 / shared_gbps - 1.0 / device_gbps))
    fitted = {
        "label": f"fitted: the DMA rate back-solved so that r_threshold is the seed's {seed_r:g}",
        "fitted": True, "dma_gbps": dma, "r_threshold": reuse_threshold(dma, device_gbps, shared_gbps),
    }  # fmt: skip
    return {"stated": stated, "fitted": fitted}


@dataclass(frozen=True)
class Ctc:
    """Computation-to-communication ratio of a kernel on a channel, for one batch."""

    batch_queries: int
    batch_bytes: float
    compute_s: float
    transfer_s: float

    @property
    def ratio(self) -> float:
        """Compute time / transfer time of the same input. Above 1 the
        kernel is computation-bound (moving data is not the bottleneck), below 1 it is
        communication-bound — the seed's reading of its C2C ratio."""
        return self.compute_s / self.transfer_s if self.transfer_s > 0 else float("inf")


def ctc(
    queries_per_s: float, bytes_per_query: float, batch_queries: int, latency_s: float, bandwidth_bps: float
) -> Ctc:
    """CTC of a kernel that answers `queries_per_s` on a channel T(n) = L + n/B, for batches of
    `batch_queries` queries of `bytes_per_query` bytes each."""
    n = batch_queries * bytes_per_query
    transfer = latency_s + (n / bandwidth_bps if bandwidth_bps and bandwidth_bps != float("inf") else 0.0)
    return Ctc(batch_queries, n, batch_queries / queries_per_s, transfer)
