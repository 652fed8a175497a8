"""What-if kernels from measurements, and what-ifs checked against measured runs.

`gpu_preset` turns a GPU machine's measurements into a `--preset` for `offload plan simulate`:
`offload probe`'s GPU channels (pinned copies as L + n/B, the launch) and
`offload rules bench --matcher gpu`'s device profile (the kernel's time by batch size and its
rate on a chunk). `check` then predicts every configuration of a sweep that was actually run
(the service with that kernel) from a calibration of the host side and the preset, and says
how far off each prediction is.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

from offload.plan.calibrate import predict, relative_error
from offload.plan.simulate import Costs

ANSWER_BYTES = 4
"""A device's answer per query (the rule index)."""


def _fit(channels: dict[str, Any], name: str) -> tuple[float, float]:
    fit = (channels.get(name) or {}).get("fit")
    if not fit or not fit.get("bandwidth_bps"):
        raise ValueError(f"the probe has no fitted {name!r} channel (run `offload probe` on the GPU machine)")
    return float(fit["latency_s"]), float(fit["bandwidth_bps"])


def gpu_preset(
    probe: dict[str, Any], bench: dict[str, Any], batch: int = 256
) -> tuple[dict[str, Any], dict[str, Any]]:
    """([about], [costs]) of a preset for the gpu matcher measured by `probe` and `bench`.

    Per kernel batch: the launch and wait (invoke), the pinned copies there and back (transfer:
    both latencies; the answers' bytes counted at the host-to-device rate), and the kernel as
    a floor plus a rate. The kernel's time is latency-bound for small batches (one thread's
    search is a chain of dependent loads) and rate-bound for large ones, so the floor is fitted
    where the service's batches are: the measured time at `batch` queries minus what the rate
    alone gives there.
    """
    gpu = probe.get("gpu") or {}
    if not gpu.get("present"):
        raise ValueError("the probe saw no GPU: run `offload probe` on the GPU machine")
    h2d_l, h2d_b = _fit(gpu.get("channels", {}), "gpu/h2d-pinned")
    d2h_l, d2h_b = _fit(gpu.get("channels", {}), "gpu/d2h-pinned")
    m = bench.get("matchers", {}).get("gpu") or {}
    prof = m.get("device_profile") or {}
    by_batch = {int(k): float(v) for k, v in (prof.get("kernel_s_by_batch") or {}).items()}
    if not by_batch or "pipeline_queries_per_s" not in prof:
        raise ValueError(
            "the bench has no gpu device profile (run `offload rules bench --matcher gpu` on a GPU)"
        )
    at = min(by_batch, key=lambda n: (abs(n - batch), n))
    per_query = 1.0 / float(
        m.get("kernel_queries_per_s") or prof["kernel_queries_per_s_by_block"][str(prof["block"])]
    )
    costs = {
        "kernel_on_host": False,
        "invoke_s": float(gpu["launch"]["launch_and_sync_s"]),
        "transfer_latency_s": h2d_l + d2h_l,
        "transfer_bps": h2d_b,
        "transfer_bytes_per_query": prof["bytes_per_query"] + ANSWER_BYTES * h2d_b / d2h_b,
        "kernel_query_s": per_query,
        "kernel_fixed_s": max(0.0, by_batch[at] - at * per_query),
    }
    device = gpu.get("device") or (m.get("structure", {}).get("device") or {}).get("name", "GPU")
    about = {
        "name": f"The gpu matcher on an {device} (measured)",
        "status": "measured",
        "source": f"offload probe ({probe.get('date', '?')}) and offload rules bench --matcher gpu "
        f"({bench.get('date', '?')}) on the GPU machine; made by `offload plan preset`",
        "notes": (
            f"Launch and wait {costs['invoke_s'] * 1e6:.1f} µs; pinned copies {h2d_b / 1e9:.1f} GB/s to the "
            f"device and {d2h_b / 1e9:.1f} GB/s back, {h2d_l * 1e6:.1f} + {d2h_l * 1e6:.1f} µs; "
            f"{prof['bytes_per_query']} B per query in, {ANSWER_BYTES} B out. Kernel "
            f"{1 / per_query / 1e9:.2f} B queries/s on a chunk; {by_batch[at] * 1e6:.1f} µs at {at} queries "
            f"(one thread's search is latency-bound), hence the floor. Host staging into pinned memory "
            f"is the executor's own work and is not part of this kernel side."
        ),
    }
    return about, costs


def to_toml(about: dict[str, Any], costs: dict[str, Any]) -> str:
    """The preset as TOML ([about] strings, [costs] numbers and one boolean)."""

    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int | float):
            return repr(float(v)) if isinstance(v, float) else str(v)
        return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'

    lines = ["[about]", *(f"{k} = {value(v)}" for k, v in about.items()), "", "[costs]"]
    lines += [f"{k} = {value(v)}" for k, v in costs.items()]
    return "\n".join(lines) + "\n"


def check(
    rows: Sequence[dict[str, Any]],
    costs: Costs,
    sizes: Sequence[int],
    cpus: int | None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Every measured row predicted with `costs` (none of them used to fit it): the table and the
    median absolute errors of throughput, p50 and p99."""
    keys = ("queries_per_s", "p50_us", "p99_us")
    table = []
    for i, r in enumerate(rows):
        if progress is not None:
            progress(f"[{i + 1}/{len(rows)}] predicting {r['label']}")
        pred = predict(r, costs, sizes, cpus)
        table.append({
            "config": r["label"], "measured": {k: r[k] for k in keys}, "predicted": pred,
            "error": {k: relative_error(pred[k], r[k]) for k in keys},
        })  # fmt: skip
    if not table:
        raise ValueError("the sweep has no rows to check")
    med = {k: statistics.median(abs(t["error"][k]) for t in table) for k in keys}
    return {
        "cpus": cpus,
        "costs": asdict(costs),
        "median_abs_error": {
            "queries_per_s": med["queries_per_s"],
            "p50": med["p50_us"],
            "p99": med["p99_us"],
        },
        "table": table,
    }
