"""Plots of a probe profile: effective bandwidth by payload per channel (the seed's Figure 4),
the stepwise loss from the best copy to what a request over IPC gets (its Figure 5, with the
seed's Alpha Data steps beside ours), and io_uring IOPS/latency by queue depth."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from offload.files import save_figure
from offload.host.plots import pyplot
from offload.probe import presets


def bandwidth(profile: dict[str, Any], path: Path) -> Path:
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.8), sharey=True)
    groups = {"memory": axes[0], "ipc": axes[1], "zmq": axes[2]}
    for name, ch in profile["channels"].items():
        ax = groups.get(name.split("/")[0])
        if ax is None:
            continue
        xs = [p["bytes"] for p in ch["points"]]
        ax.plot(xs, [p["bandwidth_bps"] / 1e9 for p in ch["points"]], "o-", ms=3, label=name.split("/")[1])
    for title, ax in zip(("memory", "IPC (round trip)", "ZeroMQ"), axes, strict=True):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("payload (bytes)")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    axes[0].set_ylabel("effective bandwidth (GB/s)")
    fig.suptitle(
        f"offload probe ({profile['mode']}): effective bandwidth by payload — {profile['environment']['cpu']}"
    )
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    return path


def loss_steps(profile: dict[str, Any]) -> list[tuple[str, float]]:
    """From the best copy this machine makes to what a small request over IPC gets (GB/s)."""
    ch = profile["channels"]

    def last(name: str) -> float | None:
        pts = ch.get(name, {}).get("points")
        return pts[-1]["bandwidth_bps"] / 1e9 if pts else None

    def at(name: str, n: int) -> float | None:
        p = next((p for p in ch.get(name, {}).get("points", []) if p["bytes"] == n), None)
        return p["bandwidth_bps"] / 1e9 if p else None

    steps = [
        ("memcpy, prefaulted", last("memory/copy-prefaulted")),
        ("+ allocation and first touch", last("memory/copy-fresh")),
        ("ZeroMQ ipc stream, large messages", last("zmq/ipc-stream")),
        ("ZeroMQ ipc round trip, large", last("zmq/ipc-round-trip")),
        ("ZeroMQ ipc round trip, 4 KiB", at("zmq/ipc-round-trip", 4096)),
    ]
    return [(k, v) for k, v in steps if v is not None]


def loss(profile: dict[str, Any], path: Path) -> Path:
    plt = pyplot()
    ad = presets.load()["platforms"]["alpha_data"]["dma_breakdown_gbps"]
    seed = [("advertised", ad["advertised"]), ("after TLP headers", ad["theoretical_after_tlp"]),
            ("vendor stack", ad["vendor_stack"]), ("+ pageable->pinned copy", ad["with_pageable_copy"]),
            ("+ buffer allocation", ad["with_allocation"])]  # fmt: skip
    ours = loss_steps(profile)
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.6))
    for ax, steps, title in ((axes[0], seed, "seed 004: Alpha Data PCIe DMA (published)"),
                             (axes[1], ours, "this machine: host copy -> request over IPC")):  # fmt: skip
        names, vals = [s[0] for s in steps], [s[1] for s in steps]
        bars = ax.bar(range(len(vals)), vals, color=["C0"] + ["C3"] * (len(vals) - 1))
        for b, v in zip(bars, vals, strict=True):
            ax.annotate(f"{v:.2f}", (b.get_x() + b.get_width() / 2, v), ha="center", va="bottom", fontsize=8)
        ax.set_xticks(range(len(vals)), names, rotation=20, ha="right", fontsize=8)
        ax.set_ylabel("GB/s")
        ax.set_title(title, fontsize=10)
    fig.suptitle("From advertised to effective, step by step (the seed's Figure 5)")
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    return path


def uring(profile: dict[str, Any], path: Path) -> Path | None:
    rr = profile.get("io_uring", {}).get("random_reads")
    if not rr:
        return None
    plt = pyplot()
    pts = rr["points"]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    qd = [p["queue_depth"] for p in pts]
    ax.plot(qd, [p["iops"] / 1e3 for p in pts], "o-", label="IOPS (k)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("queue depth")
    ax.set_ylabel("thousand IOPS (4 KiB, O_DIRECT)")
    ax2 = ax.twinx()
    ax2.plot(qd, [p["p50_s"] * 1e6 for p in pts], "s--", color="C1", label="p50 latency")
    ax2.plot(qd, [p["p99_s"] * 1e6 for p in pts], "^:", color="C3", label="p99 latency")
    ax2.set_ylabel("latency (µs)")
    # one legend inside the axes, where the curves start low (a figure legend covered a tick label)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax2.legend(h1 + h2, l1 + l2, loc="upper left", fontsize=8)
    ax.set_title("io_uring random reads by queue depth")
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    return path


def all_plots(profile: dict[str, Any], out: Path) -> list[Path]:
    """Writes every plot next to `out` (a .json path): -bandwidth.png, -loss.png, -uring.png."""
    stem = out.with_suffix("")
    paths = [bandwidth(profile, Path(f"{stem}-bandwidth.png")), loss(profile, Path(f"{stem}-loss.png"))]
    u = uring(profile, Path(f"{stem}-uring.png"))
    return paths + ([u] if u else [])
