"""The service's sections: `offload serve sweep` (each configuration's throughput and latency,
the Pareto front, and the plot written beside the sweep), and the host path
(`benches/serve_hostpath.py` or `make demo`: each configuration's knee, the daemon's CPU per query
by thread role there, the ceiling it implies beside the device's rate, and the plot)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from offload.report.markup import Markup, img_beside, meta, missing, table


def sweep_section(sweep: dict[str, Any] | None, path: Path | None) -> Markup:
    if sweep is None:
        return missing("service sweep", "offload serve sweep ... --out sweep.json")
    front = set(sweep.get("pareto", []))
    rows = [
        (
            r["label"],
            f"{r['queries_per_s']:,.0f}",
            f"{r['p50_us']:,.0f}",
            f"{r['p99_us']:,.0f}",
            "yes" if r["label"] in front else "",
        )
        for r in sorted(sweep["rows"], key=lambda r: -r["queries_per_s"])
    ]
    out = table(("configuration", "queries/s", "p50 µs", "p99 µs", "Pareto"), rows)
    return out + img_beside(path, ".png", "sweep Pareto")


def device_rate(profile: str, batch: int = 65536) -> float | None:
    """What the profiled device delivers alone with batches of `batch` queries in flight back to
    back: batch ÷ its slowest lane (the emulated device's model, offload.plan.simulate)."""
    from offload.plan.simulate import device_batch, load_costs

    try:
        b = device_batch(load_costs(profile), batch)
    except (OSError, ValueError):
        return None
    return batch / max(b.h2d_s, b.kernel_s, b.d2h_s)


def host_path_section(d: dict[str, Any] | None, path: Path | None) -> Markup:
    if d is None:
        return missing("host path", "python benches/serve_hostpath.py ... --out hostpath.json (or make demo)")
    from offload.serve.hostpath import parts

    rows = []
    for r in d["runs"]:
        knee, cpu = r.get("knee") or {}, r.get("daemon_cpu") or {}
        per, split = cpu.get("ns_per_query", {}), parts(r) or {}
        ceiling = cpu.get("host_path_ceiling_qps")
        rows.append((
            r["label"], f"{knee.get('queries_per_s', 0) / 1e6:,.2f} M", f"{knee.get('p99_us', 0):,.0f}",
            f"{per.get('host_path', 0):,.0f}",
            *(f"{split.get(k, 0):,.0f}" for k in ("broker", "worker", "executor", "zmq_io")),
            f"{ceiling / 1e6:,.1f} M" if ceiling else "",
        ))  # fmt: skip
    headers = ("configuration", "knee queries/s", "p99 µs", "host path ns/query", "broker", "worker",
               "executor", "zmq_io", "ceiling queries/s")  # fmt: skip
    m = d.get("machine", {})
    rate = device_rate(d["device_profile"]) if d.get("device_profile") else None
    device = f"; the emulated device's profile alone: {rate / 1e6:,.0f} M queries/s" if rate else ""
    where = f"{d.get('date', '')}, {m.get('cpus', '?')} CPUs ({m.get('cpu', '')})"
    sla = f"{d.get('sla_p99_us', 0):,.0f} µs"
    note = meta(
        f"{where}, {d.get('request_size')} queries per request; knee = most queries/s with p99 ≤ {sla} from "
        "due time; host path = the daemon's CPU per query less matching, at the knee's rate; ceiling = "
        f"CPUs ÷ host path{device}"
    )
    return note + table(headers, rows) + img_beside(path, ".png", "host path by configuration")
