"""The particle pipeline model: fitted on synthetic runs made from known costs it recovers them,
predicts the held-out node counts, and refuses what it cannot fit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from offload.cli import app
from offload.plan import flows as fm


def synthetic(
    nodes: int, a: float, b: float, share: float = 0.25, gb: float = 0.25, rows: int = 1_000_000
) -> dict:
    """A run as `offload flows run --json` writes it, made from the model's own costs: each node
    partitions gb/N and sends an even share of it to every peer."""
    per_node = {}
    mine = rows // nodes  # rows each node partitions, and sifts
    share_out = mine // nodes  # rows it sends to each peer
    for i in range(nodes):
        delivered = {str(k): share_out for k in range(nodes) if k != i}
        received = {str(k): share_out for k in range(nodes)}
        moved = 2 * share_out * (nodes - 1) * gb / rows
        per_node[str(i)] = {
            "node": i,
            "breakdown": {"bytes_in": gb * 1e9 / nodes},
            "delivered_rows": delivered,
            "received_rows": received,
            "cpu_s": a * gb / nodes + b * moved,
        }
    wall = max(n["cpu_s"] for n in per_node.values()) / share + 0.2
    return {"nodes": nodes, "rows": rows, "bytes_in": gb * 1e9, "wall_s": wall, "gb_per_s": gb / wall,
            "per_node": per_node, "profile": "bluefield2", "driver_cpu_s": 0.1, "cores": 64,
            "share": share}  # fmt: skip


@settings(max_examples=30, deadline=None)
@given(st.floats(1.0, 50.0), st.floats(0.0, 20.0))
def test_the_fit_recovers_known_costs_and_predicts_held_out_counts(a: float, b: float) -> None:
    runs = [synthetic(n, a, b) for n in (1, 2, 4, 8)]
    m = fm.fit(runs, 0.25, 64, [1, 2])
    assert m.a == pytest.approx(a, rel=1e-3) and m.b == pytest.approx(b, rel=1e-2, abs=1e-3)
    assert m.o == pytest.approx(0.2, abs=1e-6)
    for check in fm.validate(m, runs, 64):
        assert abs(check["error"]) < 0.02, check


def test_predictions_and_their_bounds() -> None:
    m = fm.FlowModel(a=10.0, b=5.0, o=0.0, producer=1.0, share=0.25, fit_on=[1, 2])
    one, many = m.predict(1, 4.1), m.predict(100, 4.1)
    assert one["bound"] == "node_cpu" and one["wall_s"] == pytest.approx(10 * 4.1 / 0.25)
    assert many["gb_per_s"] > one["gb_per_s"]
    # moving data costs: 100 nodes scale less than 100x one node
    assert many["gb_per_s"] == pytest.approx(100 / (10 + 5 * 2 * 0.99) * 0.25, rel=1e-9)
    assert m.predict(8, 4.1, cores=2.0)["bound"] == "machine_cpu"
    assert m.predict(2, 4.1, link_gbit=0.001)["bound"] == "link"
    with pytest.raises(ValueError, match=">= 1 node"):
        m.predict(0, 1.0)


def test_fitting_needs_two_node_counts_with_traffic() -> None:
    with pytest.raises(ValueError, match="two node counts"):
        fm.fit([synthetic(1, 10, 0), synthetic(1, 10, 0)], 0.25, 64)
    with pytest.raises(ValueError, match="no run on"):
        fm.fit([synthetic(1, 10, 0)], 0.25, 64, [3])


def test_the_planner_cli_prints_validation_and_predictions(tmp_path: Path) -> None:
    path = tmp_path / "nodes.json"
    path.write_text(json.dumps([synthetic(n, 12.0, 5.0) for n in (1, 2, 4)]))
    res = CliRunner().invoke(app, ["plan", "flows", "--runs", str(path), "--predict", "16,100", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert [p["nodes"] for p in out["predictions"]] == [16, 100]
    assert out["max_abs_error_held_out"] < 0.02
    res = CliRunner().invoke(app, ["plan", "flows", "--runs", str(path)])
    assert res.exit_code == 0 and "validation" in res.output and "100 nodes" in res.output
    path.write_text("[]")
    res = CliRunner().invoke(app, ["plan", "flows", "--runs", str(path)])
    assert res.exit_code != 0 and "nodes.json" in res.output
