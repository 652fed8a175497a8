"""Network processing headroom (seed 003): the search on synthetic throughput curves, whose answer
is known, bad inputs, and one short real run on a shaped loopback in a private namespace."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from offload.metrics import headroom as H

PERIOD = 0.01  # a sender's burst period at saturation, s


def curve(
    n_sat: int = 1, knee: float = 0.5, share: float = 1.0, noise: float = 0.0, seed: int = 0
) -> tuple[H.Measure, list[tuple[int, float]]]:
    """A link that ``n_sat`` threads fill (1000 bit/s) and that keeps its throughput while the
    delay is at most ``knee`` of the CPU a thread has in one period; beyond it the throughput
    halves (a cliff, so the answer is exact to the bisection's resolution). Returns the measuring
    function and the log of its calls."""
    rng = random.Random(seed)
    calls: list[tuple[int, float]] = []

    def measure(n: int, d: float) -> H.Sample:
        calls.append((n, d))
        full = 1000.0 * min(n, n_sat) / n_sat
        thr = full if d <= knee * share * PERIOD else full / 2
        return H.Sample(thr * (1 + rng.uniform(-noise, noise)), PERIOD)

    return measure, calls


@settings(max_examples=60, deadline=None)
@given(
    knee=st.floats(0.01, 0.99),
    n_sat=st.integers(1, 4),
    share=st.sampled_from([1.0, 0.5, 0.25]),
    iterations=st.integers(3, 12),
)
def test_bisection_finds_the_knee_from_below(knee: float, n_sat: int, share: float, iterations: int) -> None:
    measure, calls = curve(n_sat, knee, share)
    r = H.search(measure, max_threads=4, tolerance=0.05, iterations=iterations, share=share)
    assert r.min_threads == n_sat
    assert r.saturated_bps == pytest.approx(1000.0)
    assert not r.capped
    # Never above the knee; below it by at most the bisection's resolution (of two periods).
    assert knee - 2 * 2.0**-iterations - 1e-9 <= r.headroom <= knee + 1e-9
    assert all(n == n_sat for n, d in calls if d > 0)
    assert len(r.by_delay) == iterations + 1  # the upper bound, then one probe per iteration


@settings(max_examples=40, deadline=None)
@given(knee=st.floats(0.05, 0.95), seed=st.integers(0, 10_000))
def test_noise_inside_the_tolerance_does_not_move_the_answer(knee: float, seed: int) -> None:
    measure, _ = curve(2, knee, noise=0.015, seed=seed)
    r = H.search(measure, max_threads=4, tolerance=0.05, iterations=8)
    assert r.min_threads == 2
    assert knee - 2 * 2.0**-8 - 1e-9 <= r.headroom <= knee + 1e-9


def test_a_probe_failed_by_starvation_is_measured_again() -> None:
    """Other work on the machine can take a sender's CPU: a failure while the sender used well
    under its share is re-measured (bounded), one while it used its share is believed."""
    measure, _ = curve(1, knee=0.6)
    starved: list[float] = []

    def flaky(n: int, d: float) -> H.Sample:
        s = measure(n, d)
        if 0 < d < 0.6 * PERIOD and len(starved) < 2:  # the first two probes below the knee
            starved.append(d)
            return H.Sample(s.throughput_bps / 2, s.cycle_s * 2, cpu_share=0.4)
        return H.Sample(s.throughput_bps, s.cycle_s, cpu_share=1.0)

    r = H.search(flaky, iterations=8, retries=2)
    assert len(starved) == 2
    assert 0.6 - 2 * 2.0**-8 <= r.headroom <= 0.6

    always: list[float] = []

    def starving(n: int, d: float) -> H.Sample:
        if d > 0:
            always.append(d)
        return H.Sample(1000.0 if d == 0 else 100.0, PERIOD, cpu_share=0.1)

    r = H.search(starving, iterations=3, retries=2)
    assert r.headroom == 0.0
    assert len(always) == (1 + 3) * (1 + 2)  # the bound and 3 bisection probes, 3 tries each: bounded


def test_a_flat_curve_keeps_the_upper_bound_and_says_so() -> None:
    measure, _ = curve(1, knee=10.0)
    r = H.search(measure, iterations=5)
    assert r.capped and r.headroom == 1.0 and r.max_delay_s == pytest.approx(2 * PERIOD)
    assert len(r.by_delay) == 1  # no bisection once the bound itself keeps


def test_where_no_delay_keeps_throughput_the_headroom_is_zero() -> None:
    measure, _ = curve(1, knee=0.0)
    r = H.search(measure, iterations=6)
    assert r.headroom == 0.0 and r.max_delay_s == 0.0 and not r.capped
    assert r.period_s == PERIOD and not any(p.keeps for p in r.by_delay)


def test_one_thread_that_saturates_stops_the_thread_sweep_at_two() -> None:
    measure, calls = curve(1, knee=0.5)
    r = H.search(measure, max_threads=8, iterations=3)
    assert r.min_threads == 1
    assert [n for n, d in calls if d == 0] == [1, 2]  # a second thread added nothing: stop
    assert [p.threads for p in r.by_threads] == [1, 2]


def test_the_fewest_threads_within_tolerance_of_the_best_are_taken() -> None:
    def measure(n: int, d: float) -> H.Sample:
        return H.Sample({1: 500.0, 2: 970.0, 3: 1000.0, 4: 1001.0}[n] if d == 0 else 1000.0, PERIOD)

    n, best, points = H.min_threads(measure, 4, 0.05)
    assert (n, best) == (2, 1000.0)  # the third thread's 1000 is the best, and 970 is within 5%
    assert [p.threads for p in points] == [1, 2, 3]  # the third added < 5%: stop


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_threads": 0}, "max threads must be >= 1"),
        ({"tolerance": 0.0}, r"tolerance must be in \(0, 0.5\)"),
        ({"tolerance": 0.5}, r"tolerance must be in \(0, 0.5\)"),
        ({"iterations": 0}, "iterations must be >= 1"),
        ({"share": 0.0}, r"cpu share per thread must be in \(0, 1\]"),
        ({"share": 1.5}, r"cpu share per thread must be in \(0, 1\]"),
        ({"retries": -1}, "retries must be >= 0"),
    ],
)
def test_bad_search_arguments_are_refused(kwargs: dict, match: str) -> None:
    measure, calls = curve()
    with pytest.raises(ValueError, match=match):
        H.search(measure, **kwargs)
    assert not calls  # refused before anything is measured


def test_nothing_reaching_the_receiver_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="nothing reached the receiver"):
        H.search(lambda n, d: H.Sample(0.0, PERIOD))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"rate_mbit": 0}, "link rate"),
        ({"packet_bytes": 70_000}, "one datagram"),
        ({"burst": 0}, "burst must be"),
        ({"max_threads": 17}, "max threads"),
        ({"repeats": 0}, "repeats"),
        ({"seconds": 0.01}, "seconds per trial"),
        ({"port": 80}, "port must be"),
        ({"tolerance": 2}, "tolerance"),
    ],
)
def test_bad_configs_are_refused(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        H.Config(**kwargs)


def test_unknown_profiles_are_refused_before_any_setup() -> None:
    with pytest.raises(ValueError, match="unknown profile 'nope'"):
        H.measure_profiles(["nope"], H.Config())


def _cli(*args: str) -> Any:
    from typer.testing import CliRunner

    from offload.cli import app

    return CliRunner().invoke(app, ["metrics", "headroom", *args])


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["--tolerance", "0.7"], "less than or equal to 0.5"),  # the option's range
        (["--tolerance", "0.5"], "tolerance must be in (0, 0.5)"),  # the model's own, open bound
        (["--profiles", "bluefield3"], "unknown profile bluefield3"),
        (["--packet-bytes", "10"], "greater than or equal to 64"),
    ],
)
def test_the_cli_refuses_bad_options_with_a_located_error(args: list[str], match: str) -> None:
    r = _cli(*args)
    assert r.exit_code == 2 and match in " ".join(r.output.replace("│", " ").split()), r.output


@pytest.mark.skipif(H.unavailable_reason() is not None, reason=str(H.unavailable_reason()))
def test_a_real_shaped_link_is_saturated_and_leaves_headroom(tmp_path: Path) -> None:
    """A few seconds through the CLI: one repeat, short trials, three bisection steps, host and
    bluefield2, on a 100 Mbit/s link in a namespace made and removed for it."""
    plot = tmp_path / "headroom.png"
    r = _cli("--profiles", "host,bluefield2", "--link", "100mbit", "--repeats", "1", "--seconds", "0.2",
             "--iterations", "3", "--max-threads", "2", "--port", "5299", "--netns", "headroom-test",
             "--plot", str(plot), "--json")  # fmt: skip
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)  # progress lines go to stderr
    assert not Path("/run/netns/offload-headroom-test").exists()  # made here, removed here
    assert plot.stat().st_size > 10_000
    for name, p in out["profiles"].items():
        assert 0.8 < p["link_utilisation"] < 1.05, (name, p)  # 100 Mbit/s is easy to fill
        assert 1 <= p["min_threads"] <= 2
        assert 0.0 <= p["headroom"] <= 1.0
        assert p["burst_period_s"] > 0
    if out["profiles"]["bluefield2"]["budget"]["cpu"]["method"].startswith("cgroup-v"):
        assert out["profiles"]["bluefield2"]["cpu_share_per_thread"] == 0.25
        assert (out["profiles"]["bluefield2"]["sender_cpu_at_max_delay"] or 0) < 0.3  # the quota holds
