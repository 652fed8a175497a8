"""Online adaptation: every query a node serves, either way, becomes samples; a refit moves the
predictions toward what was measured, the same for the same samples and seed; the sample store
and the refits' CPU are bounded; the prediction error per stage shows in `status` and in the
Prometheus text of `metrics`; the learner's thread ends with the node."""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest

pytest.importorskip("datafusion")
pytest.importorskip("sklearn")

from offload.dataservices import particles as P
from offload.dataservices import timemodel as TM
from offload.dataservices.client import NodeClient
from offload.dataservices.node import Node, NodeConfig

TOKEN = "t"
SQL = "select id, x, vx from particles where x < {a}"


SLOW = 2e-5
"""Seconds a row at the slow node's stages: ~200x the node under test, so that the tests hold
on a loaded machine too (a query timed 10x slower than usual is still far below)."""


def _slow_node() -> list[TM.QuerySample]:
    """Samples of a node ~200x slower than the one under test will be, at every stage."""
    out = []
    for rows in (1e3, 1e4, 1e5):
        for sel in (0.01, 0.3, 1.0):
            f = TM.QueryFeatures(rows, rows * 24, rows * sel, rows * sel * 24, 1, False, False, False)
            scan = TM.scan_features(f)
            t = SLOW * rows
            node = {"node_offload": t, "node_engine": 0.8 * t, "node_stream_out": 0.2 * t}
            out += [
                TM.QuerySample("nic", f, node),
                TM.QuerySample("nic", scan, {"node_pushback": t, "node_stream_in": t}),
                TM.QuerySample("host", f, {"host_engine": 0.2 * t, "host_receive_out": 0.2 * t}),
                TM.QuerySample("host", scan, {"host_receive_in": 0.2 * t}),
            ]
    return out


@pytest.fixture
def node() -> Iterator[Node]:
    n = Node(NodeConfig(TOKEN, name="n", system="nic", adapt_every=10**6, seed=3))  # refits on demand
    n.add("particles", P.generate(20_000, seed=4))
    yield n
    n.shutdown()


def _run(c: NodeClient, n: int, ways: tuple[str, ...] = ("offload", "pushback")) -> None:
    for i in range(n):
        for way in ways:
            c.query(SQL.format(a=round(0.05 + 0.9 * i / max(n - 1, 1), 3)), way)


def _settled(node: Node, queries: int) -> dict:
    """The adaptation's status once the learner has taken ``queries`` in (a bounded wait)."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        st = node.status()["adaptation"]
        if st["queries"] >= queries:
            return st
        time.sleep(0.02)
    raise AssertionError(f"the learner took {node.status()['adaptation']['queries']} of {queries} queries")


def test_queries_become_samples_and_a_refit_moves_predictions_toward_the_measured(node: Node) -> None:
    node.config.models = TM.Models.fit(_slow_node())
    with NodeClient(f"127.0.0.1:{node.port}", TOKEN) as c:
        _run(c, 10)
        st = _settled(node, 20)
        # the node's stages and the host's (its client's observe), by system and vector: two
        # samples an offload, four a pushback (node: scan, request; host: engine, receive)
        assert st["samples"] == 10 * (2 + 4) and st["training_samples"] == len(_slow_node())
        assert st["error_count"]["node_offload"] == 10 and st["error_count"]["host_receive_in"] == 10
        assert "node_offload" in st["drifted"]  # ~200x: far beyond the threshold
        plan = c.plan(SQL.format(a=0.5))
        f = TM.QueryFeatures(**c.explain(plan)["features"])
        _, timing = c.query(plan, "offload")
        before = node.config.models.predict("nic", "node_offload", f)
        assert c.action("refit", b"")["refits"] == 1  # the action is refit_now, over Flight
        refitted = node.config.models
        after = refitted.predict("nic", "node_offload", f)
        measured = timing.node
        assert abs(math.log(after / measured)) < abs(math.log(before / measured)) - 1.0
        assert c.explain(plan)["decision_cpu_s"] > 0
        # the errors are the new models' from the refit on: the drift is gone
        _run(c, 10)
        now = _settled(node, 20 + 1 + 20)
        assert now["error_count"]["node_offload"] == 10 and "node_offload" not in now["drifted"]
        assert now["error"]["node_offload"] < st["error"]["node_offload"] / 5


def test_a_stream_the_link_held_back_is_not_learned_as_the_node_s_own(node: Node) -> None:
    """On a shaped link whose sending takes most of a stream's time, neither the node's stream
    stages nor the host's receiving are learned (the models add the link beyond the stream, and
    the host's fetch beyond the node's stream is then the link draining it); the request is."""
    node.config.models = TM.Models.fit(_slow_node())
    node.config.budget = {"link": {"rate_mbit": 8.0, "delay_ms": 0.0}}  # ~1 s for these results
    with NodeClient(f"127.0.0.1:{node.port}", TOKEN) as c:
        _run(c, 3)
        st = _settled(node, 6)
        assert st["link_held"] == 6
        assert not {"node_offload", "node_pushback", "host_receive_out", "host_receive_in"} & set(
            st["error_count"]
        )
        assert st["error_count"]["host_engine"] == 3  # the host's own work still learned
        node.config.budget = {"link": {"rate_mbit": 1e6, "delay_ms": 0.0}}  # the link never holds them
        _run(c, 3)
        st = _settled(node, 12)
        assert st["link_held"] == 6 and st["error_count"]["node_offload"] == 3
        assert st["error_count"]["host_receive_out"] == st["error_count"]["host_receive_in"] == 3


def test_a_node_without_models_learns_from_scratch_in_the_background() -> None:
    """No training file: auto falls back until the node has seen both ways; its learner then
    refits on its own (every 30 samples: five queries each way) and the decision is made."""
    n = Node(NodeConfig(TOKEN, name="s", system="nic", adapt_every=30, adapt_cpu_share=1.0))
    n.add("particles", P.generate(20_000, seed=4))
    try:
        with NodeClient(f"127.0.0.1:{n.port}", TOKEN) as c:
            assert "fallback" in c.explain(SQL.format(a=0.5))
            _run(c, 5)
            deadline = time.monotonic() + 10
            while n.status()["adaptation"]["refits"] < 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            ex = c.explain(SQL.format(a=0.5))
            assert "fallback" not in ex and ex["way"] in ("offload", "pushback")
            assert ex["decision"]["offload_s"] > 0 and ex["decision"]["pushback_s"] > 0
    finally:
        n.shutdown()


def test_refits_are_deterministic_bounded_and_held_to_their_cpu_share() -> None:
    rng = np.random.default_rng(0)

    def fed(keep: int, share: float) -> TM.Adaptation:
        a = TM.Adaptation(_slow_node()[:12], "nic", keep=keep, every=10, cpu_share=share, seed=7)
        for rows in rng.choice([1e3, 1e4, 1e5], size=30):
            f = TM.QueryFeatures(rows, rows * 24, rows / 2, rows * 12, 1, False, False, False)
            a.observe(None, f, f, {"node_offload": 1e-7 * rows, "host_receive_out": 2e-8 * rows})
        return a

    rng = np.random.default_rng(0)
    one = fed(40, 1.0)
    rng = np.random.default_rng(0)
    two = fed(40, 1.0)
    f = TM.QueryFeatures(5e4, 12e5, 2e4, 5e5, 1, False, False, False)
    a, b = one.refit(), two.refit()
    assert a.predict("nic", "node_offload", f) == b.predict("nic", "node_offload", f)
    assert one.status()["samples"] == 40  # 60 samples came, the 40 latest kept
    assert one.status()["refit_cpu_s"] > 0
    stingy = fed(100, 1e-6)  # a refit may use a millionth of the time: the next waits
    assert stingy.due(time.monotonic())
    stingy.refit()
    f1 = TM.QueryFeatures(1e3, 24e3, 500, 12e3, 1, False, False, False)
    for _ in range(10):
        stingy.observe(None, f1, f1, {"node_offload": 1e-4})
    assert not stingy.due(time.monotonic()) and stingy.status()["refits_skipped"] == 1


def test_metrics_text_parses_and_the_learner_ends_with_the_node() -> None:
    n = Node(NodeConfig(TOKEN, name="m", system="nic", adapt_every=10**6))
    n.add("particles", P.generate(5_000, seed=2))
    n.config.models = TM.Models.fit(_slow_node())
    try:
        with NodeClient(f"127.0.0.1:{n.port}", TOKEN) as c:
            _run(c, 2, ("offload", "pushback", "auto"))
            _settled(n, 6)
            text = c.action("metrics", b"")
    finally:
        n.shutdown()
    line = re.compile(r'^(offload_node_[a-z_]+)(\{(?:[a-z]+="[^"]*",?)*\})? (-?[0-9.e+-]+|nan|inf)$')
    values = {}
    for row in text.splitlines():
        if row.startswith("#") or not row:
            continue
        m = line.match(row)
        assert m, row
        values[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    assert 2 * (2 + 4) + 2 * 2 <= values['offload_node_online_samples{node="m"}'] <= 2 * (2 + 4) + 2 * 4
    assert values['offload_node_decisions_total{node="m"}'] == 2
    assert values['offload_node_prediction_error{node="m",stage="node_offload"}'] > 1.0
    assert not any(t.name == "m-learner" for t in threading.enumerate())


def test_a_query_its_client_does_not_observe_is_learned_from_the_node_side(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(NodeClient, "_observe", lambda *_: None)  # a client that does not learn
    node.learner.PENDING_S = 0.05
    with NodeClient(f"127.0.0.1:{node.port}", TOKEN) as c:
        _run(c, 1)
    st = _settled(node, 2)
    # the node's sides only: offload one sample (its stages), pushback one (the scan's)
    assert st["samples"] == 2 and st["pending"] == 0 and "host_engine" not in st["error_count"]


def test_the_learner_skips_queries_beyond_its_cpu_share(node: Node) -> None:
    node.config.adapt_cpu_share = 1e-9  # a learner with no CPU to spend, and no burst
    node.learner.BURST_S = 0.0
    node.learner.PENDING_S = 0.05
    with NodeClient(f"127.0.0.1:{node.port}", TOKEN) as c:
        _run(c, 3)
    deadline = time.monotonic() + 5
    while node.status()["adaptation"]["skipped"] < 5 and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.1)
    st = node.status()["adaptation"]
    # the first query spends from an empty account; every later one finds it overdrawn
    assert st["queries"] == 1 and st["skipped"] == 5 and st["sample_cpu_s"] > 0


def _fast_online(a: TM.Adaptation, n: int) -> TM.QueryFeatures:
    """``n`` queries of one shape that ran 200x faster than the slow node's samples say."""
    f = TM.QueryFeatures(1e4, 24e4, 3e3, 72e3, 1, False, False, False)
    for _ in range(n):
        a.observe(None, f, f, {"node_offload": 1e-7 * 1e4, "host_receive_out": 1e-8 * 1e4})
    return f


def test_online_samples_weigh_enough_to_move_a_large_training_set() -> None:
    base = _slow_node() * 20  # 720 training samples against 12 online ones
    a = TM.Adaptation(base, "nic", every=10, seed=1)
    assert a.weights(720, 12) == [1.0] * 720 + [10.0] * 12  # 60x would be asked: capped
    assert a.weights(10, 40) == [1.0] * 10 + [1.0] * 40  # never below the training file's
    f = _fast_online(a, 12)
    measured = 1e-7 * 1e4
    unweighted = TM.Models.fit([*base, *a.learned()], seed=1).predict("nic", "node_offload", f)
    weighted = a.refit().predict("nic", "node_offload", f)
    assert abs(math.log(weighted / measured)) < abs(math.log(unweighted / measured)) / 2


def test_online_samples_weigh_more_only_where_the_models_are_biased() -> None:
    """Models that are right but whose node is noisy (each time 1/3x to 3x the prediction, the
    median on it) are not pulled: online samples weigh 1; models 3x too slow are pulled fully.
    The bias is the way's whole time (its stages added), not a stage's."""
    models = TM.Models.fit(_slow_node(), seed=3)
    f = TM.QueryFeatures(1e4, 24e4, 3e3, 72e3, 1, False, False, False)
    p = {t: models.predict(s, t, f) for s, t in (("nic", "node_offload"), ("host", "host_receive_out"))}

    def fed(scales: list[float], skew: float = 1.0) -> TM.Adaptation:
        a = TM.Adaptation(_slow_node(), "nic", seed=3)
        for k in scales:  # host_receive_out ``skew`` times more off than the node's stream
            node, host = k * p["node_offload"], k * skew * p["host_receive_out"]
            a.observe(models, f, f, {"node_offload": node, "host_receive_out": host})
        return a

    noisy = fed([3.0 ** ((k % 7 - 3) / 3) for k in range(21)])  # log-symmetric around the prediction
    assert noisy.pull() == 0.0 and noisy.status()["error"]["node_offload"] > 0.25  # noisy, not biased
    assert noisy.weights(720, 12, noisy.pull())[-1] == 1.0
    slow = fed([3.0] * 10)
    assert slow.pull() == 1.0 and slow.status()["bias"]["offload"] == pytest.approx(3.0)
    assert slow.weights(720, 12, slow.pull())[-1] == 10.0
    half = fed([math.sqrt(2.5)] * 10)  # 1.58x: halfway from 1.25x to 2x in logs
    assert half.pull() == pytest.approx(0.5)
    share = p["host_receive_out"] / (p["node_offload"] + p["host_receive_out"])
    small = fed([1.0] * 10, skew=3.0)  # a small stage 3x off moves the way's time by its share
    assert small.status()["bias"]["offload"] == pytest.approx(1 + 2 * share)
    assert TM.Adaptation(_slow_node(), "nic").pull() == 1.0  # nothing against models yet: full
    slow.refit()
    assert slow.status()["last_pull"] == 1.0 and slow.status()["bias"] == {}  # the new models' from here


def test_a_high_error_is_refitted_before_it_drifts_and_an_idle_node_refits_unpaced() -> None:
    models = TM.Models.fit(_slow_node(), seed=2)
    a = TM.Adaptation(_slow_node(), "nic", every=10, cpu_share=1e-6, seed=2)
    f = TM.QueryFeatures(1e4, 24e4, 3e3, 72e3, 1, False, False, False)
    p = {t: models.predict(s, t, f) for s, t in (("nic", "node_offload"), ("host", "host_receive_out"))}
    for _ in range(12):  # measured 1.5x the prediction: off by 33%, not drifted (50%), worth a refit
        a.observe(models, f, f, {t: 1.5 * v for t, v in p.items()})
    st = a.status()
    assert st["drifted"] == [] and 0.25 < st["error"]["node_offload"] < 0.5
    assert a.due(time.monotonic(), models)

    def no_pause(_: float) -> bool:
        raise AssertionError("an idle node's refit paused")

    a.refit(no_pause, quiet=lambda _: True)  # the node idle throughout: nothing charged
    st = a.status()
    assert st["refit_cpu_s"] > 0 and st["refit_busy_cpu_s"] == 0
    pauses: list[float] = []
    _fast_online(a, 10)
    assert a.due(time.monotonic())  # not held back by the free refit (lacking: no models given)
    a.refit(lambda s: pauses.append(s) or True, quiet=lambda _: False)  # busy: paced, charged
    assert pauses and min(pauses) > 0 and a.status()["refit_busy_cpu_s"] > 0
    _fast_online(a, 10)
    assert not a.due(time.monotonic())  # a millionth of the time: the next refit waits


def test_what_a_node_learned_survives_a_restart(tmp_path) -> None:  # type: ignore[no-untyped-def]
    kept = tmp_path / "learned.json"
    cfg = NodeConfig(TOKEN, name="r", system="nic", adapt_every=10**6, seed=3, learn_file=kept)
    n = Node(cfg)
    n.add("particles", P.generate(5_000, seed=4))
    try:
        with NodeClient(f"127.0.0.1:{n.port}", TOKEN) as c:
            _run(c, 3)
            _settled(n, 6)
            c.action("refit", b"")
        learned = n.status()["adaptation"]["samples"]
    finally:
        n.shutdown()
    assert learned > 0 and len(TM.Models.read_samples(kept)) == learned
    again = Node(NodeConfig(TOKEN, name="r2", system="nic", adapt_every=10**6, seed=3, learn_file=kept))
    try:  # no query yet: the loaded samples are refitted on by themselves
        deadline = time.monotonic() + 20
        while again.status()["adaptation"]["refits"] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        st = again.status()["adaptation"]
        assert st["samples"] == learned and st["refits"] == 1 and again.config.models is not None
    finally:
        again.shutdown()


def test_a_query_that_ran_beside_a_refit_is_not_learned_from(node: Node) -> None:
    """Its times hold the learner's work (the interpreter's lock, the CPU quota), not the
    node's: the learner counts it disturbed and makes no samples of it."""
    learner = node.learner
    meta = {"way": "offload", "engine_s": 0.01, "node_s": 0.02, "rows": 1, "bytes": 8}
    host = ("offload", 1, {"host_receive_out": 0.001})
    learner._handle(("query", "calm", None, None, None, 2))
    learner._handle(("node", "calm", None, meta, 2, 2))
    learner._handle(("host", "calm", *host))
    for key, began, ended in (("during", 3, 3), ("across", 2, 4)):  # odd: fitting; changed: a step ran
        learner._handle(("query", key, None, None, None, began))
        learner._handle(("node", key, None, meta, began, ended))
        learner._handle(("host", key, *host))
    assert learner.disturbed == 2 and learner.failed == 1  # the calm one is made samples (it has no plan)
    marks: list[bool] = []  # a refit marks each step of fitting (8 models here, 300 trees each)
    TM.Adaptation(_slow_node(), "nic").refit(fitting=marks.append)
    assert marks[0] and not marks[-1] and marks.count(True) >= 8 * (300 // TM.TREES_STEP)
