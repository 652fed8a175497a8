"""The planner on the one grid `offload serve sweep` measures (issue 44): simulated rows named
as measured ones, each point's model built from its choices, the base row found among points
that differ only in encoding or transport."""

from __future__ import annotations

import json
from html import escape as html_escape
from pathlib import Path

import pytest

from offload.plan import calibrate as cal
from offload.plan import recommend as rec
from offload.plan.simulate import Costs, pipeline_for
from offload.serve.grid import Deployment, Policy, product


def test_a_point_s_model_follows_its_choices() -> None:
    d = Deployment(4, 2, 0, 1, 4096, 0, "codes16", 256, "shm", "null")
    pipe = pipeline_for(d, 2)
    assert (pipe.p, pipe.w, pipe.k, pipe.batch_queries, pipe.batch_timeout_s) == (4, 2, 0, 4096, 0.0)
    assert pipe.encoded and pipe.cpus == 2 and pipe.queue_capacity == 1024
    sized = pipeline_for(Deployment(batch_max_queries=64, batch_timeout_us=200), None)
    assert not sized.encoded and sized.batch_timeout_s == pytest.approx(200e-6)


def test_simulated_rows_carry_the_grid_s_names_and_sizes() -> None:
    costs = Costs(worker_query_s=50e-9, kernel_query_s=100e-9, broker_s=2e-6)
    points = product([1, 2], [(1, 0, 1), (1, 1, 1)], [Policy(), Policy(4096)], ["codes16"], [64])
    rows = rec.simulated_rows(costs, [5, 9], points, cpus=2, duration_s=0.05)
    assert [r["label"] for r in rows] == [d.label() for d in points]
    assert all(Deployment.of_row(r) == d for r, d in zip(rows, points, strict=True))
    # a point with a request size replays requests of that size, not the trace's
    assert all(abs(r["queries_per_s"] / r["requests_per_s"] - 64) < 1e-6 for r in rows)


def test_the_base_row_is_raw_over_ipc_whatever_else_was_swept() -> None:
    encoded = {**Deployment(encoding="codes16").fields(), "mode": "closed"}
    tcp = {**Deployment(transport="tcp").fields(), "mode": "closed"}
    raw = {**Deployment(batch_timeout_us=200).fields(), "mode": "closed"}
    assert [cal._is_base(r) for r in (encoded, tcp, raw)] == [False, False, True]
    assert not cal._is_base({**raw, "mode": "knee"})


def _row(label: str, source: str, qps: float, p99: float, error: float | None = None) -> dict:
    err = {"queries_per_s": error, "p99": 0.2} if error is not None else None
    return {"label": label, "source": source, "queries_per_s": qps, "p50_us": p99 / 2, "p99_us": p99,
            "validation_error": err}  # fmt: skip


def test_the_answer_sets_the_measured_figure_beside_the_simulated(tmp_path: Path) -> None:
    rows = [_row("a knee", "measured", 6.9e6, 4100), _row("a knee", "simulated", 7.2e6, 3900, 0.06),
            _row("b knee", "simulated", 5e6, 2000, 0.06), _row("c knee", "measured", 9e6, 9000)]  # fmt: skip
    result = rec.recommend(rows, p99_us=5000)
    a = result["answer"]
    assert a["config"] == "a knee" and a["p99_bound_us"] == 5000
    assert a["measured"]["queries_per_s"] == 6.9e6 and a["simulated"]["queries_per_s"] == 7.2e6
    line = rec.answer_line(a)
    assert line == ("Deploy a for p99 ≤ 5 ms at its knee: measured 6.90 M queries/s at p99 4.1 ms; "
                    "simulated 7.20 M at p99 3.9 ms, validation error ±6%.")  # fmt: skip
    assert rec.answer_line(rec.recommend(rows, p99_us=100)["answer"]).startswith("No configuration")
    # the report opens with it
    from offload import report

    path = tmp_path / "rec.json"
    path.write_text(json.dumps(result | {"rows": rows, "plot": str(tmp_path / "none.png")}))
    html = report.build(tmp_path / "r.html", recommend=path).read_text()
    assert html.index(html_escape(line)) < html.index("<h2")
