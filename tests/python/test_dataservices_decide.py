"""Time models and the decision: models fitted from samples predict what they saw, the decision
takes the faster way where the difference is clear, and a node with models answers `auto` queries
with its choice and why; `offload node train` against a real node writes a training file."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("datafusion")
pytest.importorskip("sklearn")

from offload.dataservices import particles as P
from offload.dataservices import timemodel as TM
from offload.dataservices.client import NodeClient
from offload.dataservices.node import Node, NodeConfig

TOKEN = "t"


def _synthetic() -> list[TM.QuerySample]:
    """A node 4x slower than the host at the engine (0.2 us a row on the host); streams cost
    5 ns a byte on the node, receiving 1 ns on the host."""
    out = []
    for rows in (1e4, 1e5, 1e6):
        for sel in (0.001, 0.01, 0.1, 0.5, 1.0):
            f = TM.QueryFeatures(rows, rows * 64, rows * sel, rows * sel * 64, 1, False, False, False)
            scan = TM.scan_features(f)
            engine = rows * 2e-7
            node = {"node_engine": 4 * engine, "node_stream_out": f.out_bytes * 5e-9 + 1e-4}
            node["node_offload"] = node["node_engine"] + node["node_stream_out"]
            ship = scan.out_bytes * 5e-9 + 1e-4
            host = {"host_engine": engine, "host_receive_out": f.out_bytes * 1e-9 + 1e-4}
            out += [
                TM.QuerySample("nic", f, node),
                TM.QuerySample("nic", scan, {"node_stream_in": ship, "node_pushback": ship}),
                TM.QuerySample("host", f, host),
                TM.QuerySample("host", scan, {"host_receive_in": scan.out_bytes * 1e-9 + 1e-4}),
            ]
    return out


def test_models_learn_the_stages_and_the_decision_follows_the_link(tmp_path: Path) -> None:
    m = TM.Models.fit(_synthetic())
    f = TM.QueryFeatures(1e6, 64e6, 1e4, 64e4, 1, False, False, False)
    assert m.predict("nic", "node_engine", f) == pytest.approx(0.8, rel=0.35)
    slow = TM.TransferLink(bytes_per_s=1e8, latency_s=1e-4)  # 800 Mbit/s: 64 MB take 0.64 s, the stream 0.32
    d = TM.decide(m, "nic", f, slow)
    assert d.way == "offload" and d.pushback["link beyond the node"] > 0.25 and "offload" in d.why
    everything = TM.QueryFeatures(1e6, 64e6, 1e6, 64e6, 1, False, False, False)
    # nothing to save on the link and the node's engine 4x slower: 0.8 s against 0.2 s
    assert TM.decide(m, "nic", everything, slow).way == "pushback"
    m.save(tmp_path / "m.json")
    again = TM.Models.load(tmp_path / "m.json")
    assert again.predict("nic", "node_engine", f) == pytest.approx(m.predict("nic", "node_engine", f))
    with pytest.raises(KeyError, match="train"):
        m.predict("dpu", "node_engine", f)
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ValueError, match="training file"):
        TM.Models.load(tmp_path / "bad.json")
    assert set(TM.held_out_error(_synthetic())) >= {"nic/node_engine", "host/host_engine"}


seconds = st.floats(0.0, 10.0)
nbytes = st.floats(0.0, 1e10)


@given(seconds, nbytes, seconds, nbytes, st.floats(0.0, 1.0), st.integers(0, 120))
def test_the_crossover_is_where_the_faster_way_changes_for_good(
    fixed_o: float, bytes_o: float, fixed_b: float, bytes_b: float, node_b: float, at: int
) -> None:
    """Against the winner at every rate of the grid: above the crossover one way wins
    throughout, just below it the other; with no crossover, one way wins everywhere. The
    pushback stream overlaps its link (max), as in the decision."""

    def both(rate: float) -> tuple[float, float]:
        return fixed_o + bytes_o / rate, fixed_b + max(node_b, bytes_b / rate)

    def winner(rate: float) -> str:
        o, b = both(rate)
        return "offload" if o <= b else "pushback"

    rate, above = TM.crossover(both)
    grid = [winner(float(r)) for r in TM.RATES]
    if rate is None:
        assert above is None and len(set(grid)) == 1
        return
    assert TM.RATES[0] <= rate <= TM.RATES[-1] and above == grid[-1]
    assert all(w == above for r, w in zip(TM.RATES, grid, strict=True) if r > rate * 1.001)
    assert winner(rate / 1.001) != above
    probe = float(TM.RATES[at])
    if probe > rate * 1.001:
        assert winner(probe) == above


def test_the_decision_names_its_crossover_and_heavy_functions_count() -> None:
    m = TM.Models.fit(_synthetic())
    f = TM.QueryFeatures(1e6, 64e6, 1e4, 64e4, 1, False, False, False)
    d = TM.decide(m, "nic", f, TM.TransferLink(bytes_per_s=1e8, latency_s=1e-4))
    assert d.way == "offload" and d.above == "pushback" and d.crossover_mbit is not None
    assert d.offload["link beyond the node"] == 0.0  # 640 KB: the link keeps up with the node
    assert "wins on links above" in d.why and d.as_dict()["crossover_mbit"] == d.crossover_mbit
    # just above the crossover the decision turns, just below it does not
    rate = d.crossover_mbit * 1e6 / 8
    assert TM.decide(m, "nic", f, TM.TransferLink(rate * 1.05, 1e-4)).way == "pushback"
    assert TM.decide(m, "nic", f, TM.TransferLink(rate / 1.05, 1e-4)).way == "offload"
    from offload.dataservices import plans

    schema = {"p": P.generate(10, seed=1).schema}
    plan = plans.to_substrait("select sqrt(x * x + y) as r, ln(abs(z) + 1) from p where sin(x) < 0.5", schema)
    got = TM.features(plan, 5, 80, {"p": (10, 240)})
    assert got.heavy == 3 and got.functions >= 2  # sqrt, ln, sin; abs, *, +, < are cheap
    cheap = plans.to_substrait("select x * 2 + y from p where x < 0.5 and y >= 0.1", schema)
    assert TM.features(cheap, 5, 40, {"p": (10, 160)}).heavy == 0


def test_links_from_the_node_report() -> None:
    assert TM.TransferLink.of(None).bytes_per_s is None
    link = TM.TransferLink.of({"rate_mbit": 800.0, "delay_ms": 0.0})
    assert link.bytes_per_s == 1e8 and link.seconds(1e8) == pytest.approx(1.0, rel=1e-3)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    n = Node(NodeConfig(TOKEN, name="n", system="nic"))
    n.add("particles", P.generate(20_000, seed=4))
    yield n
    n.shutdown()


def test_auto_queries_carry_the_node_decision(node: Node) -> None:
    with NodeClient(f"127.0.0.1:{node.port}", TOKEN) as c:
        t, timing = c.query("select * from particles where x < 0.01", "auto")
        assert timing.way == "offload" and "no time models" in timing.decision["why"]
        node.config.models = TM.Models.fit(_synthetic())
        node.config.budget = {"link": {"rate_mbit": 8.0, "delay_ms": 0.0}}  # a slow link
        t, timing = c.query("select * from particles where x < 0.01", "auto")
        assert timing.way == "offload" and timing.decision["decision"]["pushback_s"] > 1.0
        assert t.num_rows == timing.rows > 0
        ex = c.explain("select * from particles")
        assert set(ex["decision"]["offload"]) == {
            "request",
            "node (engine, stream)",
            "link beyond the node",
            "host receive",
        }
        assert ex["estimate"]["rows"] == pytest.approx(20_000)


def test_train_writes_samples_from_a_real_node(node: Node, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from offload.cli import app

    tf = tmp_path / "token"
    tf.write_text(TOKEN)
    out = tmp_path / "models.json"
    args = ["node", "train", "-o", str(out), "--node", f"127.0.0.1:{node.port}", "--token-file", str(tf),
            "--sizes", "3000,6000", "--queries", "4"]  # fmt: skip
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    samples = json.loads(out.read_text())["samples"]
    assert len(samples) == 2 * 4 * 4 and {s["system"] for s in samples} == {"nic", "host"}
    assert "held-out" in r.output
    r = CliRunner().invoke(app, [*args[:8], "--sizes", "2000", "--queries", "1", "--repeat", "1", "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["samples"] == 2 * 4 * 4 + 4, r.output
    with NodeClient(f"127.0.0.1:{node.port}", TOKEN) as c:
        assert not any(d["name"].startswith("train_") for d in c.status()["datasets"])


def test_case_study_reports_both_cases_beside_the_seed(node: Node, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from offload.cli import app

    tf = tmp_path / "token"
    tf.write_text(TOKEN)
    out = tmp_path / "cases.json"
    at = ["--node", f"127.0.0.1:{node.port}", "--token-file", str(tf)]
    r = CliRunner().invoke(app, ["node", "case-study", *at, "--repeat", "1", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "[55,036.7]" in r.output and "[offload]" in r.output  # the seed's figures, not eaten as markup
    res = {c["case"]: c for c in json.loads(out.read_text())}
    assert set(res) == {"I", "II"}
    assert res["I"]["actual_rows"] < res["II"]["actual_rows"]
    assert res["I"]["estimate_error"] < 0.25 and res["I"]["transfer_mib"]["pushback"] > 1.0
    assert res["II"]["seed"]["decision"] == "pushback"
