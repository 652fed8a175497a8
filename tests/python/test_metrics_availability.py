"""Relative data availability (seed 003, HotEdge'20): copysets counted and enumerated by hand, the
Poisson loss probability on systems small enough to work out, the seed's published figures as far as
the model reproduces them, and the slides' insights where the model says they hold."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from offload.metrics import availability as A

# Layouts built the Copysets way: each permutation of the nodes cut into groups of R.
SIX = [{0, 1, 2}, {3, 4, 5}]  # N = 6, w = 2: one permutation
NINE = [{0, 1, 2}, {3, 4, 5}, {6, 7, 8}, {0, 3, 6}, {1, 4, 7}, {2, 5, 8}]  # N = 9, w = 4: rows, columns


def enumerated(nodes: int, layout: list[set[int]], failed: int) -> float:
    """The exact share of ``failed``-node sets that hold a whole copyset."""
    sets = list(itertools.combinations(range(nodes), failed))
    return sum(any(c <= set(s) for c in layout) for s in sets) / len(sets)


def test_copysets_are_counted_as_in_the_copysets_paper() -> None:
    assert A.copysets(6, scatter_width=2) == 2 == len(SIX)
    assert A.copysets(9) == 6 == len(NINE)
    # R does not divide N = 10: each node in w/(R-1) = 2 copysets makes 20/3 on average
    assert A.copysets(10) == pytest.approx(20 / 3)
    assert A.copysets(40) == pytest.approx(80 / 3)


@pytest.mark.parametrize(("nodes", "layout", "w"), [(6, SIX, 2), (9, NINE, 4)])
def test_loss_given_failures_is_exact_up_to_2r_minus_2_and_a_bound_beyond(
    nodes: int, layout: list[set[int]], w: int
) -> None:
    for k in range(nodes + 1):
        model = A.loss_given_failures(nodes, k, scatter_width=w)
        exact = enumerated(nodes, layout, k)
        if k <= 4 or k == nodes:  # 2R - 2 = 4: two copysets span 5 nodes
            assert model == pytest.approx(exact), k
        else:
            assert model >= exact - 1e-12, k
    # by hand: 2 of the 20 triples of six nodes are copysets; 6 of the 15 four-sets hold one
    assert A.loss_given_failures(6, 3, scatter_width=2) == pytest.approx(2 / 20)
    assert A.loss_given_failures(6, 4, scatter_width=2) == pytest.approx(6 / 15)
    assert A.loss_given_failures(6, 2, scatter_width=2) == 0.0


def test_loss_probability_of_three_nodes_is_three_or_more_poisson_failures() -> None:
    """N = 3, w = 2: one copyset, so data is lost exactly when K >= 3; with mean 1 that is
    1 - e^-1 (1 + 1 + 1/2)."""
    p = A.loss_probability(3, rate=1.0, window=1 / 3, scatter_width=2)
    assert p == pytest.approx(1 - math.exp(-1) * 2.5)


def test_loss_probability_sums_the_poisson_terms_by_hand() -> None:
    """N = 6, w = 2, mean 0.6: P(K=3)·0.1 + P(K=4)·0.4 + P(K=5)·1 + P(K>=6)."""
    mean = 0.6
    pois = [math.exp(-mean) * mean**k / math.factorial(k) for k in range(6)]
    want = pois[3] * 0.1 + pois[4] * 0.4 + pois[5] * 1.0 + (1 - sum(pois))
    assert A.loss_probability(6, rate=0.5, window=0.2, scatter_width=2) == pytest.approx(want, rel=1e-12)


def test_the_rare_failure_limit_by_hand() -> None:
    """At c = n the two systems fail equally often in all (10·(c + n·f) = 40·(1 + f) at c = n = 4),
    so the limit is the copyset share of triples: (20/3)/C(10,3) over (80/3)/C(40,3) = 9880/480."""
    assert A.relative_benefit(4, 4, 2.0) == pytest.approx(9880 / 480)
    assert A.relative_benefit(4, 4, 0.06) == pytest.approx(9880 / 480)
    # n = 12, c = 17, f = 2: rates 41 and 3 on 10 and 170 nodes
    want = (10 * 41 / (170 * 3)) ** 3 * (20 / 3) / math.comb(10, 3) / ((170 * 4 / 6) / math.comb(170, 3))
    assert A.relative_benefit(12, 17, 2.0) == pytest.approx(want)
    assert A.loss_coefficient(10, 12.0) == pytest.approx(120**3 / 6 * (20 / 3) / 120)


def test_the_seeds_ssd_figure_is_reproduced_and_the_hdd_figures_are_not() -> None:
    """20.7 (SSD, n = c = 4; c is not on that slide, c = 4 as on the HDD one): the limit is 20.58,
    0.6 % below. The tolerance is 1 %: the published figure has three digits, and the rest is a
    detail of the authors' computation that the slides do not show (a finite window lowers it).
    7.1 and 114.3 (HDD) are not reproduced (docs/metrics.md says why); pinned so a change of the
    model has to revisit the docs."""
    hdd, ssd, big = (A.relative_benefit(k.n, k.c, k.f) for k in A.SEED_CASES)
    assert ssd == pytest.approx(20.7, rel=0.01)
    assert hdd / 7.1 > 2.5  # 20.58: at c = n, f cancels in the limit
    assert big == pytest.approx(204.9, rel=1e-3)  # against 114.3
    assert A.relative_benefit(12, 17, 2.0, f_per="server") == pytest.approx(143.7, rel=1e-3)


def test_no_single_window_matches_the_seeds_three_figures() -> None:
    """The window that lowers HDD n = c = 4 to 7.1 (about 0.05) takes n = 12, c = 17 to about 2.6;
    the one near 114.3 there (0.0104) leaves n = c = 4 near 20."""
    at = {w: [A.relative_benefit(k.n, k.c, k.f, window=w) for k in A.SEED_CASES] for w in (0.0497, 0.0104)}
    assert at[0.0497][0] == pytest.approx(7.1, rel=0.01) and at[0.0497][2] < 3
    assert at[0.0104][2] == pytest.approx(114.3, rel=0.01) and at[0.0104][0] > 19


def test_insights_storage_aggregation() -> None:
    """Slide 55: the more devices per server, the larger the benefit (c, f fixed)."""
    for f in (A.HDD_F, A.SSD_F):
        for window in (None, 0.01):
            xs = [A.relative_benefit(n, 4, f, window=window) for n in range(1, 17)]
            assert all(a < b for a, b in itertools.pairwise(xs)), (f, window, xs)


def test_insights_compute_aggregation() -> None:
    """Slide 55: the more compute per server, the larger the benefit. The model agrees once
    c > n·f/2 (the server's rate c + n·f grows faster than the embedded system's node count),
    so always for SSDs at n <= 12, and for HDDs past c = n."""
    for n in (4, 12):
        ssd = [A.relative_benefit(n, c, A.SSD_F) for c in range(1, 25)]
        assert all(a < b for a, b in itertools.pairwise(ssd)), n
        hdd = [A.relative_benefit(n, c, A.HDD_F) for c in range(n, 25)]
        assert all(a < b for a, b in itertools.pairwise(hdd)), n
    assert A.relative_benefit(4, 1, A.HDD_F) > A.relative_benefit(4, 4, A.HDD_F)  # c < n·f/2: not so
    # f read per whole server instead: for HDDs the benefit falls with c from c = 2 on
    per_server = [A.relative_benefit(4, c, A.HDD_F, f_per="server") for c in range(2, 25)]
    assert all(a > b for a, b in itertools.pairwise(per_server))


def test_insights_device_failure_rate() -> None:
    """Slide 55: the lower the devices' failure rate, the larger the benefit. The model agrees in
    the limit where compute aggregation exceeds storage aggregation (c > n); at c = n only over a
    finite window, where the servers' losses saturate first."""
    fs = [2.0, 1.0, 0.5, 0.2, 0.06, 0.01]
    big = [A.relative_benefit(12, 17, f) for f in fs]
    assert all(a < b for a, b in itertools.pairwise(big))
    assert len({round(A.relative_benefit(4, 4, f), 9) for f in fs}) == 1
    windowed = [A.relative_benefit(4, 4, f, window=0.01) for f in fs]
    assert all(a < b for a, b in itertools.pairwise(windowed))


aggregation = st.integers(min_value=1, max_value=16)
ratio = st.floats(min_value=0.0, max_value=20.0, allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(n=aggregation, c=aggregation, f=ratio)
def test_a_short_window_approaches_the_rare_failure_limit(n: int, c: int, f: float) -> None:
    limit = A.relative_benefit(n, c, f)
    assert limit > 0
    assert A.relative_benefit(n, c, f, window=1e-6) == pytest.approx(limit, rel=1e-3)


@settings(max_examples=60, deadline=None)
@given(nodes=st.integers(min_value=5, max_value=60), rate=st.floats(0.1, 50), w1=st.floats(1e-4, 1.0))
def test_loss_probability_is_a_probability_and_grows_with_the_window(
    nodes: int, rate: float, w1: float
) -> None:
    p1 = A.loss_probability(nodes, rate, w1)
    p2 = A.loss_probability(nodes, rate, w1 * 2)
    assert 0.0 <= p1 <= p2 + 1e-12 and p2 <= 1.0


@settings(max_examples=60, deadline=None)
@given(nodes=st.integers(min_value=5, max_value=80), data=st.data())
def test_loss_given_failures_grows_from_zero_to_one(nodes: int, data: st.DataObject) -> None:
    ps = [A.loss_given_failures(nodes, k) for k in range(nodes + 1)]
    assert ps[:3] == [0.0, 0.0, 0.0] and ps[-1] == 1.0
    assert all(a <= b for a, b in itertools.pairwise(ps))
    k = data.draw(st.integers(3, 4))
    assert ps[k] == pytest.approx(min(1.0, A.copysets(nodes) * math.comb(k, 3) / math.comb(nodes, 3)))


@settings(max_examples=40, deadline=None)
@given(n=aggregation, f=ratio)
def test_at_c_equal_n_the_limit_does_not_depend_on_f(n: int, f: float) -> None:
    assert A.relative_benefit(n, n, f) == pytest.approx(A.relative_benefit(n, n, 1.0))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: A.copysets(10, scatter_width=3), "multiple of replicas - 1"),
        (lambda: A.copysets(10, replicas=1), "at least 2"),
        (lambda: A.copysets(4), "need at least 5"),
        (lambda: A.loss_given_failures(10, -1), "failed nodes must be >= 0"),
        (lambda: A.relative_benefit(0, 4, 2.0), "must be >= 1"),
        (lambda: A.relative_benefit(4, 0, 2.0), "must be >= 1"),
        (lambda: A.relative_benefit(4, 4, -1.0), "finite number >= 0"),
        (lambda: A.relative_benefit(4, 4, math.nan), "finite number >= 0"),
        (lambda: A.relative_benefit(4, 4, 2.0, window=0.0), "must be > 0"),
        (lambda: A.relative_benefit(4, 4, 2.0, servers=3), "need at least 5"),
        (lambda: A.relative_benefit(4, 4, 2.0, f_per="disk"), "f_per must be one of"),  # type: ignore[arg-type]
        (lambda: A.loss_probability(10, 0.0, 0.1), "node failure rate must be > 0"),
    ],
)
def test_bad_inputs_say_what_is_wrong(call: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()  # type: ignore[operator]


def test_the_command_prints_json_and_draws_the_plot(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from offload.metrics.cli import app  # the metrics group alone: `offload` imports the query engine

    png = tmp_path / "a.png"
    r = CliRunner().invoke(app, ["availability", "--json", "--plot", str(png)])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert [c["published"] for c in out["cases"]] == [7.1, 20.7, 114.3]
    assert out["cases"][1]["benefit_rare_limit"] == pytest.approx(20.583, rel=1e-4)
    assert png.stat().st_size > 10_000
    saved = tmp_path / "sub" / "a.json"  # --out, as every metrics and plan command writes it
    r = CliRunner().invoke(app, ["availability", "--json", "--out", str(saved)])
    assert r.exit_code == 0 and json.loads(saved.read_text()) == json.loads(r.output) == out
    r = CliRunner().invoke(app, ["availability", "--out", str(png / "x.json")])
    assert r.exit_code == 2 and "a.png" in r.output and not list(tmp_path.rglob("*.tmp"))
    r = CliRunner().invoke(app, ["availability", "--case", "12,17,2", "--exposure", "0.01"])
    assert r.exit_code == 0 and "119.9" in r.output, r.output
    r = CliRunner().invoke(app, ["availability", "--case", "12,17"])
    assert r.exit_code == 2 and "expected n,c,f" in r.output
    r = CliRunner().invoke(app, ["availability", "--servers", "3"])
    assert r.exit_code == 2 and "need at least 5" in r.output
