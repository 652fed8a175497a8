"""The planner on the one grid `offload serve sweep` measures (issue 44): simulated rows named
as measured ones, each point's model built from its choices, the base row found among points
that differ only in encoding or transport."""

from __future__ import annotations

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
