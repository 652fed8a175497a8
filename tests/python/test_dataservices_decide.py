"""Time models and the decision: models fitted from samples predict what they saw, the decision
takes the faster way where the difference is clear, and a node with models answers `auto` queries
with its choice and why; `offload node train` against a real node writes a training file."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

pytest.importorskip("datafusion")
pytest.importorskip("sklearn")

from offload.dataservices import particles as P
from offload.dataservices import plans
from offload.dataservices import timemodel as TM
from offload.dataservices.client import NodeClient, host_times
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


def test_a_stage_is_priced_per_row_beyond_the_largest_query_trained_on() -> None:
    """Trees alone stop at the largest time they saw (0.8 s at a million rows); the unit costs
    fitted first carry a query a hundred times larger to its time, and ``why`` says where the
    node extrapolates."""
    m = TM.Models.fit(_synthetic())
    big = TM.QueryFeatures(1e8, 64e8, 1e6, 64e6, 1, False, False, False)
    assert m.predict("nic", "node_engine", big) == pytest.approx(80.0, rel=0.35)
    assert m.predict("host", "host_engine", big) == pytest.approx(20.0, rel=0.35)
    assert any(
        b.startswith("in_rows 100,000,000, trained up to 1,000,000")
        for b in TM.beyond_training(m, "nic", big)
    )
    assert TM.beyond_training(m, "nic", TM.QueryFeatures(1e5, 64e5, 1e3, 64e3, 1, False, False, False)) == []


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(8, 60))
def test_unit_costs_price_work_that_is_linear_exactly(seed: int, n: int) -> None:
    """Seconds that are a non-negative combination of the work quantities (some costs 0, some
    quantities never used, sizes over six decades) give back their unit costs."""
    rng = np.random.default_rng(seed)
    k = len(TM.PRICED)
    work = np.where(rng.random((n, k)) < 0.3, 0.0, 10 ** rng.uniform(0, 6, (n, k)))
    work[:, 0] = 1.0
    cost = np.where(rng.random(k) < 0.4, 0.0, 10 ** rng.uniform(-9, -3, k))
    cost[0] = 1e-4  # a fixed cost: every stage has one
    seconds = work @ cost
    got = TM.unit_costs(work, seconds)
    np.testing.assert_allclose(work @ got, seconds, rtol=1e-6)


seconds = st.one_of(st.just(0.0), st.floats(1e-9, 10.0))
"""A stage's seconds: none, or from a nanosecond on. A time below that beside one of seconds is
under its last bit (2.2e-16 + 2.0 == 2.0): the two ways tie there or not by how each side's
arithmetic rounds (bytes / rate against bytes x 1 / rate), which no decision can mean."""
nbytes = st.floats(0.0, 1e10)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 4), st.integers(1, 5), st.booleans())
def test_the_forest_predicts_what_scikit_learn_predicts(
    seed: int, models: int, depth: int, ties: bool
) -> None:
    """The native forest (every regressor in one call) against each regressor's own predict, on
    random fits and random rows: ties on thresholds (rows drawn from the training values),
    values far out of range; two vectors a row, as a decision reads them."""
    from sklearn.ensemble import GradientBoostingRegressor

    rng = np.random.default_rng(seed)
    nf = 5
    x = rng.integers(0, 4, (40, nf)).astype(float) if ties else rng.normal(0, 1e3, (40, nf))
    fitted = []
    for j in range(models):
        rate, trees = float(rng.uniform(0.01, 0.5)), int(rng.integers(1, 30))
        gbm = GradientBoostingRegressor(n_estimators=trees, max_depth=depth, learning_rate=rate)
        fitted.append((gbm.fit(x, rng.normal(0, 1, 40) + x[:, j % nf]), j % 2, np.zeros(len(TM.PRICED))))
    forest = TM.Forest(fitted)
    rows = x[rng.integers(0, 40, 2)] if ties else rng.normal(0, 1e4, (2, nf))
    want = [gbm.predict(rows[w : w + 1])[0] for gbm, w, _ in fitted]
    log_seconds = forest.base + forest._raw(rows)  # what predict() takes the exponential of
    np.testing.assert_allclose(log_seconds, want, rtol=1e-9, atol=1e-9)


def _searched_crossover(both: Callable[[float], tuple[float, float]]) -> tuple[float | None, str | None]:
    """The reference the decision's solved crossover is checked against: the fastest rate of
    TM.RATES where the faster way changes, found on the grid and bisected, and the way that
    wins above it; (None, None) where one way wins over all of RATES."""

    def offload_wins(rate: float) -> bool:
        o, b = both(rate)
        return o <= b

    wins = [offload_wins(float(r)) for r in TM.RATES]
    changes = [i for i in range(len(wins) - 1) if wins[i] != wins[i + 1]]
    if not changes:
        return None, None
    lo, hi = float(TM.RATES[changes[-1]]), float(TM.RATES[changes[-1] + 1])
    for _ in range(24):  # bisection in log space: to a part in 10^8
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if offload_wins(mid) != wins[-1] else (lo, mid)
    return math.sqrt(lo * hi), "offload" if wins[-1] else "pushback"


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

    rate, above = _searched_crossover(both)
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


@settings(max_examples=300)
@given(seconds, seconds, nbytes, seconds, seconds, nbytes, st.sampled_from([0.0, 50e-6, 0.01, 0.3]))
@example(1.811515927659874e-13, 0.0, 204800000.0, 0.0, 0.0, 204800000.0, 0.0)  # crossing at the slowest rate
@example(0.0, 5.918254290670365, 9118931754.064306, 0.0, 0.0, 9118931754.064306, 0.0)  # tied below a break
def test_the_decisions_crossover_solved_is_the_one_searched(
    fixed_o: float, node_o: float, bytes_o: float, fixed_b: float, node_b: float, bytes_b: float, lat: float
) -> None:
    """The decision's crossover, solved on its piecewise-linear times, against the winner at
    every rate of a fine grid (4,001 rates) and against the grid-and-bisection search: the same
    way above it, that way everywhere faster, the other just below; none where one way wins
    throughout."""
    off, back = (fixed_o, node_o, bytes_o), (fixed_b, node_b, bytes_b)

    def both(rate: float) -> tuple[float, float]:
        return tuple(f + max(s, lat + n / rate) for f, s, n in (off, back))  # type: ignore[return-value]

    def winner(rate: float) -> str:
        o, b = both(rate)
        return "offload" if o <= b else "pushback"

    rate, above = TM.link_crossover(off, back, lat)
    fine = [float(r) for r in np.geomspace(TM.RATES[0], TM.RATES[-1], 4001)]
    assert winner(fine[-1]) == (above or winner(fine[-1]))
    if rate is None:
        assert above is None and len({winner(r) for r in fine}) == 1
        assert _searched_crossover(both) == (None, None)
        return
    assert TM.RATES[0] * 0.999999 <= rate <= TM.RATES[-1] * 1.000001  # either end, within rounding
    assert all(winner(r) == above for r in fine if r > rate * 1.0001)
    assert winner(rate / 1.0001) != above
    searched, searched_above = _searched_crossover(both)
    ways = [winner(r) for r in fine]
    if sum(a != b for a, b in itertools.pairwise(ways)) == 1:  # else the grid may miss the fastest
        assert searched_above == above and searched == pytest.approx(rate, rel=1e-4)


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


def test_the_same_sql_is_planned_to_the_same_bytes_and_reuses_its_decision(node: Node) -> None:
    """DataFusion declares a plan's functions in a hash map's order (the same join with a LIKE
    planned 12 times gave 11 byte strings): plans.to_substrait gives one, which runs as the
    producer's did, and the node's decision made for it is reused when the SQL is asked again."""
    schemas = {
        "o": pa.schema(
            [("id", pa.int64()), ("odate", pa.string()), ("amount", pa.float64()), ("cust", pa.int64())]
        ),
        "c": pa.schema([("cid", pa.int64()), ("name", pa.string()), ("region", pa.string())]),
    }
    for sql in (
        "select c.region, sum(o.amount) from o join c on o.cust = c.cid where c.name like '%a%' and "
        "o.amount > 3 or o.id in (1, 2, 3) group by c.region",
        "select * from o where cast(odate as date) between date '2016-01-01' and date '2016-12-31'",
        "select region, count(*), avg(cid) from c where region <> 'x' and cid % 7 = 1 group by region",
    ):
        assert len({plans.to_substrait(sql, schemas) for _ in range(8)}) == 1, sql
    sql = "select id, x from particles where x < 0.3 and y between 0.2 and 0.4 or vx > 0.9 and z <> 0.5"
    with NodeClient(f"127.0.0.1:{node.port}", TOKEN) as c:
        decided = [c.explain(sql) for _ in range(4)]
        offloaded = c.query(sql, "offload")[0]
    assert "reused" not in decided[0] and all(d["reused"] for d in decided[1:])
    local = plans.execute(plans.to_substrait(sql, {"particles": node.dataset("particles").schema}),
                          {"particles": node.dataset("particles").table}, 1)  # fmt: skip
    assert plans.same_answer(offloaded, local)


def test_a_condition_not_priced_is_said_in_why_and_decided_for_the_worse_case(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A condition neither the sketches nor the sample can price gets a default selectivity;
    the decision says so in ``why``, lists the steps in ``uncertain``, predicts both ways with
    the result at its bound too, and takes the way whose worse case is faster."""
    node.config.models = TM.Models.fit(_synthetic())
    node.config.budget = {"link": {"rate_mbit": 1000.0, "delay_ms": 0.0}}
    sql = "select id, x from particles where sqrt(x) > 0.95"
    with NodeClient(f"127.0.0.1:{node.port}", TOKEN) as c:
        priced = c.explain(sql)
        assert "uncertain" not in priced and "worst_case" not in priced["decision"]

        def broken(*_: object, **__: object) -> None:
            raise plans.PlanError("injected: the sample cannot run it")

        monkeypatch.setattr(plans, "count_rows_in", broken)
        node.append("particles", P.generate(10, seed=6))  # what the sample measured is made again
        got = c.explain(sql)
    assert len(got["uncertain"]) == 1 and "injected" in got["uncertain"][0]
    assert got["why"].startswith("1 condition(s) not priced (a default selectivity): ")
    as_estimated, worst = got["decision"], got["decision"]["worst_case"]
    assert worst["offload_s"] > as_estimated["offload_s"]  # the whole table through sqrt(x) > 0.95
    offload = max(as_estimated["offload_s"], worst["offload_s"])
    pushback = max(as_estimated["pushback_s"], worst["pushback_s"])
    assert got["way"] == ("offload" if offload <= pushback else "pushback")


def test_a_plan_asked_again_reuses_its_decision_until_data_models_or_link_change(node: Node) -> None:
    """The same plan over the same data sets, models and link is decided once; an append, new
    models and another link each decide it again, and say so."""
    node.config.models = TM.Models.fit(_synthetic())
    node.config.budget = {"link": {"rate_mbit": 1000.0, "delay_ms": 0.0}}
    sql = "select * from particles where x < 0.3"
    with NodeClient(f"127.0.0.1:{node.port}", TOKEN) as c:
        first = c.explain(sql)
        again = c.explain(sql)
        assert "reused" not in first and again["reused"] is True
        assert {k: again[k] for k in ("way", "why", "estimate", "features", "decision")} == {
            k: first[k] for k in ("way", "why", "estimate", "features", "decision")
        }
        assert "reused" not in c.explain("select * from particles where x < 0.31")  # another plan
        node.append("particles", P.generate(1000, seed=5))
        grown = c.explain(sql)
        assert "reused" not in grown and grown["estimate"]["rows"] > first["estimate"]["rows"]
        node.config.models = TM.Models.fit(_synthetic())  # refitted: another set of models
        assert "reused" not in c.explain(sql) and c.explain(sql)["reused"]
        node.config.budget = {"link": {"rate_mbit": 8.0, "delay_ms": 0.0}}
        slow = c.explain(sql)
        assert "reused" not in slow and slow["decision"]["pushback_s"] > first["decision"]["pushback_s"]
    counters = node.status()["counters"]
    assert counters["decisions"] == 7 and counters["decisions_reused"] == 2
    assert 'offload_node_decisions_reused_total{node="n"} 2' in node.metrics()


@given(st.sampled_from(["offload", "pushback"]), st.floats(1e-4, 10.0), st.floats(1e-4, 10.0))
def test_a_refit_changes_a_kept_way_only_where_the_other_is_clearly_faster(
    before: str, offload_s: float, pushback_s: float
) -> None:
    """After a refit a plan keeps its way unless the new models find it more than the switch
    margin slower than the other; a decision without models (a fallback) or an uncertain
    estimate is taken as it comes."""
    from offload.dataservices import node as N

    old = {"way": before, "why": "old", "decision": {"offload_s": 1.0, "pushback_s": 1.0}}
    way = "offload" if offload_s <= pushback_s else "pushback"
    new = {"way": way, "why": "new", "decision": {"offload_s": offload_s, "pushback_s": pushback_s}}
    got = N._settled(old, new)
    slower, faster = new["decision"][f"{before}_s"], new["decision"][f"{way}_s"]
    if way != before and slower <= (1 + N.SWITCH_MARGIN) * faster:
        assert got["way"] == before and got["kept"] and got["why"].startswith(f"kept {before}: ")
    else:
        assert got == new
    assert N._settled({"way": before, "why": "fell back"}, new) == new
    assert N._settled(old, new | {"uncertain": ["x"]}) == new | {"uncertain": ["x"]}


def test_auto_queries_carry_the_node_decision(node: Node) -> None:
    with NodeClient(f"127.0.0.1:{node.port}", TOKEN) as c:
        t, timing = c.query("select * from particles where x < 0.01", "auto")
        assert timing.way == "offload" and "no time models" in timing.decision["why"]
        node.config.models = TM.Models.fit(_synthetic())
        node.config.budget = {"link": {"rate_mbit": 8.0, "delay_ms": 0.0}}  # a slow link
        t, timing = c.query("select * from particles where x < 0.01", "auto")
        assert timing.way == "offload" and timing.decision["decision"]["pushback_s"] > 1.0
        assert t.num_rows == timing.rows > 0
        # the request the node learns holds no decision (training asks with the way given)
        decided = timing.decision["decision_wall_s"]
        assert 0 < decided < timing.info
        assert host_times(timing)["node_request"] == pytest.approx(timing.info - decided)
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
            "--sizes", "3000,6000", "--queries", "4", "--suite", "particles"]  # fmt: skip
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    samples = json.loads(out.read_text())["samples"]
    assert len(samples) == 2 * 4 * 4 and {s["system"] for s in samples} == {"nic", "host"}
    assert "held-out" in r.output
    r = CliRunner().invoke(
        app,
        [*args[:8], "--sizes", "2000", "--queries", "1", "--repeat", "1", "--json", "--suite", "particles"],
    )
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


def test_auto_falls_back_and_says_why_when_the_estimator_or_a_model_fails(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fault injection: the estimator raises, a model lacks its stages; and a real shape the
    estimator may not know (UNION ALL). Each time auto answers as offload does and says it
    fell back, by which rule."""
    from offload.dataservices import node as N
    from offload.dataservices import plans
    from offload.dataservices.estimate import estimate

    sql = "select id, x from particles where x < 0.05"
    union = f"{sql} union all select id, y from particles where y < 0.05"
    with NodeClient(f"127.0.0.1:{node.port}", TOKEN) as c:
        want = {q: c.query(q, "offload")[0] for q in (sql, union)}

        def broken(*_: object) -> None:
            raise plans.PlanError("injected: cannot estimate")

        with monkeypatch.context() as m:
            m.setattr(N, "native_estimate", broken)
            t, timing = c.query(sql, "auto")
            ex = timing.decision
            assert plans.same_answer(t, want[sql]) and "injected" in ex["why"]
            assert ex["fallback"]["basis"] == "a bound of the result from the plan"
            # the bound: every row of two columns (id, x) against the same two read: a tie, offload
            assert ex["way"] == "offload" and ex["estimate"] is None
        t, timing = c.query(union, "auto")
        assert plans.same_answer(t, want[union])
        try:
            estimate(c.plan(union), {"particles": node.dataset("particles").stats})
            estimated = True
        except plans.PlanError:
            estimated = False
        assert ("the estimate failed" in timing.decision["why"]) != estimated
        if not estimated:  # a union of two reads bounds at twice the rows read: pushback
            assert timing.way == "pushback" and timing.decision["fallback"]["offload_bytes"] > 0
        # a node's models, but none of the host: the decision cannot be made, and says so
        node.config.models = TM.Models.fit([s for s in _synthetic() if s.system == "nic"])
        t, timing = c.query(sql, "auto")
        assert plans.same_answer(t, want[sql]) and "cannot answer" in timing.decision["why"]
        assert timing.decision["fallback"]["basis"] == "the estimated result" and timing.way == "offload"
        counters = c.status()["counters"]
        assert counters["fallbacks"] >= 2 and counters["decisions"] >= 3 and counters["decision_cpu_s"] > 0


def _strings(
    rows: float, fixed: float, width: float, strings: int, sel: float
) -> tuple[TM.QueryFeatures, dict[str, float], dict[str, float]]:
    """A query reading ``rows`` rows of ``fixed`` fixed-width bytes and ``strings`` string
    columns of ``width`` bytes, keeping ``sel`` of them, with a LIKE on a string column if it
    has one: its features, its node stages and its host stages. The node pays 20 ns a string
    byte it serializes and 500 ns a row of LIKE, the host 5 and 20; numbers cost 1 ns a byte."""
    s_in = rows * width * strings
    f = TM.QueryFeatures(
        rows, rows * fixed + s_in, rows * sel, (rows * fixed + s_in) * sel, 1, False, False, False,
        string_rows=rows if s_in else 0.0, in_string_bytes=s_in, out_string_bytes=s_in * sel,
    )  # fmt: skip

    def ship(f: TM.QueryFeatures, per_string: float) -> float:
        return (f.out_bytes - f.out_string_bytes) * 1e-9 + f.out_string_bytes * per_string + 1e-4

    scan = TM.scan_features(f)
    node = {"node_offload": rows * 1e-7 + f.string_rows * 5e-7 + ship(f, 20e-9),
            "node_pushback": ship(scan, 20e-9)}  # fmt: skip
    host = {"host_engine": rows * 2e-8 + f.string_rows * 2e-8, "host_receive_out": ship(f, 5e-9),
            "host_receive_in": ship(scan, 5e-9)}  # fmt: skip
    return f, node, host


def test_a_model_trained_on_one_schema_decides_on_another() -> None:
    """Trained on tables of one string column (of several widths, beside several fixed-width
    ones), the models decide on a schema never seen (three string columns, another width), on
    queries built to sit clearly on one side (25% apart or more): a LIKE keeping few rows
    offloads; one keeping every row, on a fast link, pushes back (the node's LIKE costs 25x
    the host's a row). Each way's time is predicted within 2x: without the string features
    (rows, bytes and widths alone) the pushback of every row comes out 4x short."""
    samples = []
    for rows, fixed, width, sel in itertools.product(
        (1e4, 3e4, 1e5, 3e5, 1e6), (16.0, 64.0, 128.0), (0.0, 8.0, 24.0, 64.0), (0.001, 0.05, 0.3, 1.0)
    ):
        f, node, host = _strings(rows, fixed, width, 1, sel)
        scan = TM.scan_features(f)
        out = {k: host[k] for k in ("host_engine", "host_receive_out")}
        samples += [
            TM.QuerySample("nic", f, {"node_offload": node["node_offload"]}),
            TM.QuerySample("nic", scan, {"node_pushback": node["node_pushback"]}),
            TM.QuerySample("host", f, out),
            TM.QuerySample("host", scan, {"host_receive_in": host["host_receive_in"]}),
        ]
    m = TM.Models.fit(samples, seed=1)
    fast = TM.TransferLink(bytes_per_s=1.25e9, latency_s=1e-4)  # 10 Gbit/s
    for sel, want in ((0.002, "offload"), (1.0, "pushback")):
        f, node, host = _strings(2e5, 16.0, 20.0, 3, sel)  # three string columns of 20 bytes: 60 a row
        truth_o = node["node_offload"] + host["host_receive_out"]
        truth_b = node["node_pushback"] + host["host_receive_in"] + host["host_engine"]
        assert max(truth_o, truth_b) > 1.25 * min(truth_o, truth_b)  # clearly on one side
        assert (truth_o <= truth_b) == (want == "offload")  # the side it says
        d = TM.decide(m, "nic", f, fast)
        assert d.way == want
        assert 0.5 < d.offload_s / truth_o < 2.0 and 0.5 < d.pushback_s / truth_b < 2.0


def test_features_count_string_bytes_and_string_functions_from_the_schema() -> None:
    import pyarrow as pa

    from offload.dataservices import plans

    schema = pa.schema([("id", pa.int64()), ("name", pa.string()), ("v", pa.float64())])
    plan = plans.to_substrait("select id, upper(name) as u from s where name like 'a%'", {"s": schema})
    f = TM.features(plan, 10.0, 300.0, {"s": (1000, 1000 * (8 + 24))}, schemas={"s": schema})
    assert f.in_string_bytes == pytest.approx(1000 * 24)  # all but id's 8 bytes a row
    assert f.string_rows >= 1000 and f.out_string_bytes == pytest.approx(300.0 * 24 / 32)
    assert TM.features(plan, 10.0, 300.0, {"s": (1000, 32000)}).in_string_bytes == 0.0  # no schemas
    old = {k: v for k, v in f.__dict__.items() if k not in ("string_rows", "in_string_bytes", "join_rows")}
    assert len(TM.QueryFeatures(**old).vector()) == len(TM.FEATURES)  # older training files load
