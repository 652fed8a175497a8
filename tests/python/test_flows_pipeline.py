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
from offload.flows import pipeline as fm


def synthetic(nodes: int, a: float, b: float, share: float = 0.25, gb: float = 0.25, msgs: int = 61) -> dict:
    """A run as `offload flows run --json` writes it, made from the model's own costs."""
    per_node = {}
    for i in range(nodes):
        batches = round(msgs / nodes * (nodes - 1))
        per_node[str(i)] = {
            "node": i,
            "breakdown": {"bytes_in": gb * 1e9 / nodes},
            "batches": {"sent": batches, "received": batches},
            "cpu_s": a * gb / nodes + b * 2 * batches,
        }
    wall = max(n["cpu_s"] for n in per_node.values()) / share + 0.2
    return {"nodes": nodes, "rows": msgs * 16_384, "message_rows": 16_384, "bytes_in": gb * 1e9,
            "wall_s": wall, "gb_per_s": gb / wall, "per_node": per_node, "profile": "bluefield2",
            "driver_cpu_s": 0.1, "cores": 64}  # fmt: skip


@settings(max_examples=30, deadline=None)
@given(st.floats(1.0, 50.0), st.floats(0.0, 2e-3))
def test_the_fit_recovers_known_costs_and_predicts_held_out_counts(a: float, b: float) -> None:
    runs = [synthetic(n, a, b) for n in (1, 2, 4, 8)]
    m = fm.fit(runs, 0.25, 64, [1, 2])
    assert m.a == pytest.approx(a, rel=1e-3) and m.b == pytest.approx(b, rel=1e-2, abs=1e-6)
    assert m.o == pytest.approx(0.2, abs=1e-6)
    for check in fm.validate(m, runs, 64):
        assert abs(check["error"]) < 0.02, check


def test_predictions_and_their_bounds() -> None:
    m = fm.FlowModel(a=10.0, b=5e-4, o=0.0, producer=1.0, share=0.25, fit_on=[1, 2])
    one, many = m.predict(1, 4.1, 4000), m.predict(100, 4.1, 4000)
    assert one["bound"] == "node_cpu" and one["wall_s"] == pytest.approx(10 * 4.1 / 0.25)
    assert many["gb_per_s"] > one["gb_per_s"]
    # the per-batch cost does not shrink with nodes: bigger messages scale further
    assert m.predict(100, 4.1, 400)["gb_per_s"] > many["gb_per_s"]
    assert m.predict(8, 4.1, 4000, cores=2.0)["bound"] == "machine_cpu"
    assert m.predict(2, 4.1, 4000, link_gbit=0.001)["bound"] == "link"
    with pytest.raises(ValueError, match=">= 1 node"):
        m.predict(0, 1.0, 10)


def test_fitting_needs_two_node_counts_with_traffic() -> None:
    with pytest.raises(ValueError, match="two node counts"):
        fm.fit([synthetic(1, 10, 0), synthetic(1, 10, 0)], 0.25, 64)
    with pytest.raises(ValueError, match="no run on"):
        fm.fit([synthetic(1, 10, 0)], 0.25, 64, [3])


def test_the_model_cli_prints_validation_and_predictions(tmp_path: Path) -> None:
    path = tmp_path / "nodes.json"
    path.write_text(json.dumps([synthetic(n, 12.0, 5e-4) for n in (1, 2, 4)]))
    res = CliRunner().invoke(app, ["flows", "model", "--runs", str(path), "--predict", "16,100", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert [p["nodes"] for p in out["predictions"]] == [16, 100]
    assert out["max_abs_error_held_out"] < 0.02
    res = CliRunner().invoke(app, ["flows", "model", "--runs", str(path)])
    assert res.exit_code == 0 and "validation" in res.output and "100 nodes" in res.output
    path.write_text("[]")
    res = CliRunner().invoke(app, ["flows", "model", "--runs", str(path)])
    assert res.exit_code != 0 and "nodes.json" in res.output


def test_plan_flows_is_kept_hidden_and_names_its_new_name(tmp_path: Path) -> None:
    path = tmp_path / "nodes.json"
    path.write_text(json.dumps([synthetic(n, 12.0, 5e-4) for n in (1, 2, 4)]))
    res = CliRunner().invoke(app, ["plan", "flows", "--runs", str(path), "--json"])
    assert res.exit_code == 0 and "offload flows model" in res.stderr
    assert [p["nodes"] for p in json.loads(res.stdout)["predictions"]] == [100]
    assert "flows" not in CliRunner().invoke(app, ["plan", "--help"]).stdout.split("Commands")[-1]


def test_the_default_fit_is_the_smallest_and_the_middle_count() -> None:
    assert fm.default_fit_on([8, 1, 4, 2, 1]) == [1, 4]
    assert fm.default_fit_on([1, 2, 4]) == [1, 2] and fm.default_fit_on([2, 1]) == [1, 2]
    runs = [synthetic(n, 12.0, 5e-4) for n in (1, 2, 4, 8)]
    checks = fm.validate_by_count(fm.fit(runs, 0.25, 64), runs + runs, 64)
    assert [(c["nodes"], c["fitted_on"], c["repeats"]) for c in checks] == [
        (1, True, 2), (2, False, 2), (4, True, 2), (8, False, 2)
    ]  # fmt: skip
    assert all(abs(c["error"]) < 0.02 for c in checks)
