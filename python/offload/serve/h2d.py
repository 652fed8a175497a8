"""Host-to-device throughput by query batch, from a recorded GPU probe: the seed's Figure 9
(`benches/serve_h2d_curve.py`; BENCHMARKS.md "Fig. 9").

The seed plots the XRT DMA's host-to-device rate against the queries in one batch (64 B a query;
65,536 queries = 4 MiB "barely reaches half of the maximum speed"). No GPU here: this reads the
pinned host-to-device copies `offload probe` measured on the GPU machine
(``benches/results/gpu/probe-gpu.json``, channel ``gpu/h2d-pinned``: cudaMemcpy of 64 B to
16 MiB) and restates each payload as a batch of queries, at the seed's 64 B a query and at the
bytes our gpu matcher copies per query (16-bit codes of the 100k set's 24 columns: 48 B). It is
the copy alone, not through the service's staging path (that was not recorded by batch)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from offload.files import save_figure

SEED = {
    "bytes_per_query": 64,
    "queries": 65536,
    "share_of_link": 0.5,
    "link": "PCIe Gen3 x16 (AWS F1 / Alveo U250), 15.75 GB/s",
    "text": "not even packing 65,536 queries (4 MiB) in one batch barely reaches half of the maximum speed",
}
# PCIe per lane and direction after encoding, GB/s: Gen3 0.985, Gen4 1.969, Gen5 3.938.
LANE_GBPS = {3: 0.985, 4: 1.969, 5: 3.938}
CHANNEL = "gpu/h2d-pinned"


def link_bps(nvidia_smi: str) -> tuple[float, str] | None:
    """The link's rate from the probe's `nvidia-smi` line ("NAME, GEN, WIDTH"), and its name."""
    try:
        _, gen, width = (x.strip() for x in nvidia_smi.rsplit(",", 2))
        g, w = int(gen), int(width)
    except ValueError:
        return None
    if g not in LANE_GBPS:
        return None
    return LANE_GBPS[g] * w * 1e9, f"PCIe Gen{g} x{w} ({LANE_GBPS[g] * w:.1f} GB/s)"


def curve(probe: dict[str, Any], bytes_per_query: tuple[int, ...] = (64, 48)) -> dict[str, Any]:
    """The H2D points of `probe` by query batch, each as a share of the link and of the fastest
    point; at the seed's 65,536 queries, the share reached."""
    gpu = probe.get("gpu") or {}
    channel = (gpu.get("channels") or {}).get(CHANNEL)
    if not channel:
        raise ValueError(f"the probe has no {CHANNEL} channel (was it run on a GPU machine?)")
    link = link_bps(str(gpu.get("nvidia_smi", "")))
    peak = max(p["bandwidth_bps"] for p in channel["points"])
    points = []
    for p in sorted(channel["points"], key=lambda p: p["bytes"]):
        bw = p["bandwidth_bps"]
        row = {
            "bytes": p["bytes"],
            "bandwidth_bps": bw,
            "share_of_peak": bw / peak,
            "queries": {str(b): p["bytes"] / b for b in bytes_per_query},
        }
        if link:
            row["share_of_link"] = bw / link[0]
        points.append(row)
    at_seed = next((p for p in points if p["bytes"] == SEED["queries"] * SEED["bytes_per_query"]), None)
    return {
        "benchmark": "serve-h2d-by-batch",
        "figure": "seed 000/001, Fig. 9",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "source": {
            "date": probe.get("date"),
            "device": gpu.get("device"),
            "nvidia_smi": gpu.get("nvidia_smi"),
            "channel": CHANNEL,
            "note": gpu.get("note"),
        },
        "link_bps": link[0] if link else None,
        "link": link[1] if link else None,
        "peak_bps": peak,
        "fit": channel.get("fit"),
        "bytes_per_query": list(bytes_per_query),
        "points": points,
        "at_seed_batch": at_seed,
        "seed": SEED,
    }


def plot(result: dict[str, Any], path: Path) -> Path:
    """H2D GB/s against queries per batch (64 B a query, the seed's), the link and half of it."""
    from offload.host.plots import pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for i, b in enumerate(result["bytes_per_query"]):
        pts = [p for p in result["points"] if p["queries"][str(b)] >= 1]
        ax.plot([p["queries"][str(b)] for p in pts], [p["bandwidth_bps"] / 1e9 for p in pts], "o-", ms=3,
                color=f"C{i}", label=f"{result['source']['device']}, pinned H2D, {b} B a query")  # fmt: skip
    if result["link_bps"]:
        ax.axhline(result["link_bps"] / 1e9, color="black", lw=1, label=result["link"])
        ax.axhline(result["link_bps"] / 2e9, color="black", lw=1, ls=":", label="half of the link")
    ax.axvline(SEED["queries"], color="red", ls="--", lw=1, label="seed: 65,536 queries (4 MiB) ≈ half")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("queries per batch")
    ax.set_ylabel("host → device (GB/s)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title(
        "Host-to-device throughput by batch (seed 000/001, Fig. 9), from the recorded probe", fontsize=9
    )
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
    return path
