"""The service's host path by configuration (offload.serve.hostpath, `offload report --host-path`):
the parts add up to the host path with the match taken out of the role that matched, and a short
run against a real daemon gives the knee, the daemon's CPU per query, the plot and the report
section."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from offload import report
from offload.serve import hostpath

ROOT = Path(__file__).resolve().parents[2]
MINI = ROOT / "data" / "examples" / "mct-mini"


@pytest.mark.parametrize(
    ("kernels", "layout", "matched"),
    [(1, "encoded16", "executor"), (0, "encoded16", "broker"), (0, "raw", "worker")],
)
def test_parts_take_the_match_out_of_the_role_that_matched(kernels: int, layout: str, matched: str) -> None:
    per = {"broker": 40.0, "worker": 40.0, "executor": 50.0, "zmq_io": 20.0, "match": 30.0}
    per |= {"daemon": 150.0, "host_path": 120.0}
    run = {"config": {"kernels": kernels, "layout": layout}, "daemon_cpu": {"ns_per_query": per}}
    parts = hostpath.parts(run)
    assert parts is not None and parts[matched] == per[matched] - 30.0
    assert sum(parts.values()) == pytest.approx(per["host_path"])
    assert hostpath.parts({"config": run["config"], "daemon_cpu": None}) is None


def test_a_short_run_gives_the_knee_the_host_path_the_plot_and_the_report(tmp_path: Path) -> None:
    setup = hostpath.Setup(
        str(MINI / "ruletype.toml"), str(MINI / "rules.csv"), MINI / "queries.csv",
        ROOT / "data" / "plans" / "whatif" / "gpu-h200.toml", request_size=64, duration_s=0.3, steps=1,
        sla_p99_us=1e6, start_rate=500,  # any run meets it: the mechanics are tested, not this machine
    )  # fmt: skip
    lines: list[str] = []
    config = hostpath.Config("null, inline", "after", "null", 0, 1024, 0, "encoded16")
    result = hostpath.run(setup, [config], log=lines.append)
    (run,) = result["runs"]
    assert run["matcher"] == "null" and run["knee"]["queries_per_s"] > 0, run
    cpu = run["daemon_cpu"]
    assert cpu["queries"] > 0 and cpu["ns_per_query"]["host_path"] > 0 and cpu["ns_per_query"]["match"] == 0
    assert len(lines) == 1 and lines[0].startswith("null, inline: knee") and "host path" in lines[0]
    out = tmp_path / "hostpath.json"
    out.write_text(json.dumps(result))
    hostpath.plot(result, out.with_suffix(".png"))
    assert out.with_suffix(".png").stat().st_size > 1000
    page = report.build(tmp_path / "r.html", host_path=out).read_text()
    assert "The service&#39;s host path" in page or "The service's host path" in page
    assert "null, inline" in page and "host path ns/query" in page and "profile alone" in page
    assert page.count('src="data:image/png;base64,') == 1


@pytest.mark.parametrize("transport", ["tcp", "shm"])
def test_a_configuration_runs_over_its_transport(transport: str) -> None:
    """The generator reaches the daemon over the configuration's transport, and the daemon counts
        its CPU on that transport's side (shm: its own part; tcp: ZeroMQ's I/O thread; the control
    socket's requests use that thread too, so shm's zmq_io need not be 0)."""
    setup = hostpath.Setup(
        str(MINI / "ruletype.toml"), str(MINI / "rules.csv"), MINI / "queries.csv",
        ROOT / "data" / "plans" / "whatif" / "gpu-h200.toml", request_size=64, duration_s=0.3, steps=1,
        sla_p99_us=1e6, start_rate=500,
    )  # fmt: skip
    config = hostpath.Config(
        f"null, inline, {transport}", "after", "null", 0, 1024, 0, "encoded16", transport
    )
    (run,) = hostpath.run(setup, [config])["runs"]
    per = run["daemon_cpu"]["ns_per_query"]
    assert run["knee"]["queries_per_s"] > 0 and run["config"]["transport"] == transport, run
    assert (per["shm"] > 0) == (transport == "shm"), per
    assert transport == "shm" or per["zmq_io"] > 0, per
    assert len(hostpath.TRANSPORT_CONFIGS) == 18 and {c.transport for c in hostpath.TRANSPORT_CONFIGS} == {
        "ipc", "tcp", "shm"
    }  # fmt: skip
