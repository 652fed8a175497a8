"""The planner calibrated on knees (offload.plan.knees, issue 44): per-role costs read from a
knee row, mapped onto the model's stages, and a calibration that recovers what made its rows
(knees made by the model at a known share of its capacity)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from offload.plan import knees
from offload.plan.simulate import Costs
from offload.serve.grid import Deployment, Policy

ROLES = {"broker": 40.0, "worker": 0.0, "executor": 0.0, "zmq_io": 30.0, "shm": 0.0, "match": 25.0}


def _knee_row(d: Deployment, per: dict[str, float], qps: float, p50: float, p99: float) -> dict:
    host = sum(per.values())
    return {**d.fields(), "mode": "knee", "label": f"{d.label()} knee", "queries_per_s": qps,
            "requests_per_s": qps / d.request_queries, "p50_us": p50, "p99_us": p99, "sla_p99_us": 5000.0,
            "host_path": {"ns_per_query": {**per, "host_path": host}},
            "generator_to_host_path": {"generator_ns_per_query": 20.0}}  # fmt: skip


def test_the_match_comes_out_of_the_role_that_matched() -> None:
    inline = Deployment(k=0, encoding="codes16", request_queries=256)
    role = knees.RoleCosts.of_row(_knee_row(inline, {**ROLES, "broker": 65.0}, 1e6, 100, 200))
    assert role == knees.RoleCosts(broker=40.0, worker=0.0, executor=0.0, io=30.0, match=25.0, generator=20.0)
    executors = Deployment(k=1, encoding="raw", request_queries=256)
    role = knees.RoleCosts.of_row(_knee_row(executors, {**ROLES, "broker": 5.0, "executor": 35.0}, 1e6, 1, 2))
    assert role is not None and (role.executor, role.match, role.broker) == (10.0, 25.0, 5.0)
    assert knees.RoleCosts.of_row({**_knee_row(executors, ROLES, 1e6, 1, 2), "mode": "closed"}) is None


def test_the_shm_thread_is_the_broker_of_shared_memory_clients() -> None:
    """Over shm the daemon's shm thread admits requests (inline, it matches them): its CPU is the
    broker's, not I/O beside the critical path."""
    inline = Deployment(k=0, encoding="codes16", request_queries=256, transport="shm")
    per = {**ROLES, "broker": 1.0, "zmq_io": 0.0, "shm": 64.0}
    role = knees.RoleCosts.of_row(_knee_row(inline, per, 1e6, 100, 200))
    assert role is not None and (role.broker, role.io, role.match) == (40.0, 0.0, 25.0)


def test_role_costs_become_the_stages_that_spend_them() -> None:
    d = Deployment(k=1, encoding="raw", request_queries=100)
    role = knees.RoleCosts(broker=40.0, worker=60.0, executor=10.0, io=30.0, match=25.0, generator=20.0)
    c = knees.stage_costs(d, role, 100, Costs(channel_latency_s=5e-6))
    assert c.broker_s == pytest.approx(2e-6)  # 40 ns × 100 queries, over its two passes
    assert (c.worker_query_s, c.reply_query_s, c.kernel_query_s) == pytest.approx((60e-9, 10e-9, 25e-9))
    assert c.background_request_s == pytest.approx(3e-6) and c.client_query_s == pytest.approx(20e-9)
    assert c.channel_latency_s == 5e-6  # the rest is the base's


def test_the_model_s_capacity_is_under_the_cores_bound() -> None:
    """Two cores and 100 ns of CPU per query in all: at most 20 M queries/s, and processor
    sharing among the stages that compute at once keeps it above half of that."""
    d = Deployment(4, 1, 0, 1, 4096, 0, "codes16", 256, "shm", "null")
    role = knees.RoleCosts(broker=50.0, worker=0.0, executor=0.0, io=30.0, match=0.0, generator=20.0)
    cap = knees.capacity(d, knees.stage_costs(d, role, 256, Costs()), [256], 2) * 256
    assert 10e6 <= cap <= 20e6 * 1.01


def test_a_calibration_recovers_the_share_its_knees_were_made_at() -> None:
    """Knees made by the model itself at 0.7 of its capacity, with a 2 ms stall: the fit finds
    0.7 and every held-out knee within a few per cent."""
    rows = []
    for p, size in [(2, 256), (4, 256), (4, 1024)]:
        d = Deployment(p, 1, 0, 1, 4096, 0, "codes16", size, "ipc", "null")
        role = knees.RoleCosts(broker=40.0, worker=0.0, executor=0.0, io=30.0, match=0.0, generator=20.0)
        got = knees.predict(d, knees.stage_costs(d, role, size, Costs()), [size], 2, 0.7, 2e-3)
        per = {**ROLES, "match": 0.0}
        rows.append(_knee_row(d, per, got["queries_per_s"], got["p50_us"], got["p99_us"]))
    result = knees.calibrate(rows, [256], Costs(), 2)
    assert result["knee_utilisation"] == pytest.approx(0.7, rel=0.03)
    assert result["stall_s"] == pytest.approx(2e-3, rel=0.1)
    assert len(result["table"]) == 3 and result["knees"] == {"null ipc codes16 inline": 3}
    assert result["median_abs_error"]["queries_per_s"] < 0.05
    assert not math.isnan(result["median_abs_error"]["p99"])


def test_a_knee_beyond_the_model_s_capacity_is_read_where_the_model_holds() -> None:
    """A fitted share above 1 predicts no more than the capacity, and its latency is read at
    HOLDS of it: a queue that grows for the whole run would make the p99 the run's length."""
    d = Deployment(2, 1, 0, 1, 4096, 0, "codes16", 256, "ipc", "null")
    role = knees.RoleCosts(broker=40.0, worker=0.0, executor=0.0, io=30.0, match=0.0, generator=20.0)
    costs = knees.stage_costs(d, role, 256, Costs())
    over, held = (knees.predict(d, costs, [256], 2, u, 0.0) for u in (1.3, knees.HOLDS))
    assert over["queries_per_s"] == pytest.approx(over["capacity_rps"] * 256)
    assert over["p99_us"] == pytest.approx(held["p99_us"])


def test_a_what_if_device_is_planned_beside_the_kinds_measured_and_never_the_answer() -> None:
    """`plan recommend --preset` with a calibration on knees: every executors kind's points again
    with the device as the matcher, its host roles paid and the match replaced by the preset's
    kernel (off the host); marked what_if, no validation error, kept out of the answer."""
    from offload.plan import recommend
    from offload.plan.simulate import load_preset

    calib = _fast_ipc_calibration()
    pts = knees.points(calib, [2], [(1, 0, 1), (1, 1, 4)], [Policy(4096)], [256], ["erbium-fpga"])
    assert sorted(d.label() for d in pts) == [
        "2p 1w 1k 4e fill4096 codes16 256q ipc erbium-fpga", "2p 1w 1k 4e fill4096 codes16 256q ipc fast",
        "2p 1w inline fill4096 codes16 256q ipc fast",
    ]  # fmt: skip
    fpga = next(d for d in pts if d.matcher == "erbium-fpga")
    assert knees.host_kind(fpga, calib) == "fast ipc codes16 executors"
    got = recommend.knee_rows(calib, [256], pts, devices={"erbium-fpga": load_preset("erbium-fpga")[1]})
    device = next(r for r in got if r["what_if"])
    assert device["validation_error"] is None and device["matcher"] == "erbium-fpga"
    assert all(r["validation_error"] is not None for r in got if not r["what_if"])
    best_device = {**device, "queries_per_s": 1e9, "p99_us": 1.0}  # however fast, not deployable here
    result = recommend.recommend([r for r in got if not r["what_if"]] + [best_device], 5000)
    assert result["answer"] and "erbium-fpga" not in result["answer"]["config"]
    assert result["what_if"]["config"]["matcher"] == "erbium-fpga"
    with pytest.raises(ValueError, match="no tcp codes16 knee"):
        knees.host_kind(Deployment(transport="tcp", encoding="codes16", matcher="erbium-fpga"), calib)


def _fast_ipc_calibration() -> dict:
    """A calibration on eight knees of two kinds (encoded over ipc, inline and one executor)."""
    rows = []
    for p in (2, 4):
        for k in (0, 1):
            d = Deployment(p, 1, k, 1, 4096, 0, "codes16", 256, "ipc", "fast")
            per = {**ROLES, "executor": 35.0 if k else 0.0, "broker": 5.0 if k else 65.0}
            rows.append(_knee_row(d, per, 4e6 + p * 1e5, 900, 2000 + p * 100))
    return knees.calibrate(rows, [256], Costs(), 2)


def test_plan_recommend_with_a_what_if_device_on_knees(tmp_path: Path) -> None:
    """The command: the answer is of this machine, the device's best is shown beside it."""
    (tmp_path / "cal.json").write_text(json.dumps(_fast_ipc_calibration()))
    (tmp_path / "requests.csv").write_text("N_QUERIES\n256\n")
    args = ["--calibration", str(tmp_path / "cal.json"), "--trace", str(tmp_path), "--preset", "erbium-fpga",
            "-p", "2", "--w", "1", "--k", "0,1", "--policy", "fill4096", "--request-size", "256",
            "--p99-us", "5000", "--out", str(tmp_path / "rec.json")]  # fmt: skip
    cmd = [sys.executable, "-m", "offload.cli", "plan", "recommend", *args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "a what-if device, not on this machine" in r.stdout and "erbium-fpga" in r.stdout
    got = json.loads((tmp_path / "rec.json").read_text())
    assert "erbium-fpga" not in got["answer"]["config"]
    assert got["what_if"]["config"]["matcher"] == "erbium-fpga"
    assert sum(1 for row in got["rows"] if row["what_if"]) == 1
