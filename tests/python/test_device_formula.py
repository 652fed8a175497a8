"""The device-time formula has one home, the emulated device's `DeviceCosts::batch` in Rust; the
planner (offload.plan.simulate) calls it through `offload._native`. Checked here against figures
worked out by hand from the H200 profile, and on random costs against the formula written out
in this test (docs/serve-protocol.md, "The emulated device")."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from offload import _native
from offload.plan.simulate import Costs, Lanes, device_batch, load_preset, request_time

US = 1e-6


def h200() -> Costs:
    _, table = load_preset("gpu-h200")
    return Costs(**table)


@pytest.mark.parametrize(
    ("n", "e", "h2d_us", "kernel_us", "d2h_us"),
    [
        # data/plans/whatif/gpu-h200.toml: latency 26.2625 µs (13.1313 each way), 51.8558 GB/s,
        # 99.9180 B per query (95.9180 in, 4 out), 0.31792 ns per query, floor 63.4386 µs.
        # 256: H2D 13.1313 + 256 × 95.918 B / 51.8558 GB/s (0.4735) = 13.6048; kernel
        # 63.4386 + 256 × 0.31792 ns (0.0814) = 63.5200; D2H 13.1313 + 1,024 B (0.0197) = 13.1510.
        (256, 1, 13.6048, 63.5200, 13.1510),
        # 16,384: H2D 13.1313 + 30.3056; kernel 63.4386 + 5.2088; D2H 13.1313 + 1.2638.
        (16_384, 1, 43.4369, 68.6474, 14.3951),
        # Over 4 engines the slowest takes 4,096 queries: 63.4386 + 1.3022; the copies unchanged.
        (16_384, 4, 43.4369, 64.7408, 14.3951),
        # 1,000 over 3: ⌈333.3⌉ = 334 queries, 63.4386 + 0.1062.
        (1_000, 3, 14.9810, 63.5448, 13.2084),
    ],
)
def test_the_h200_profile_gives_the_hand_computed_times(
    n: int, e: int, h2d_us: float, kernel_us: float, d2h_us: float
) -> None:
    t = device_batch(h200(), n, e)
    assert t.invoke_s == pytest.approx(13.5623 * US, abs=1e-4 * US)
    assert t.h2d_s == pytest.approx(h2d_us * US, abs=1e-4 * US)
    assert t.kernel_s == pytest.approx(kernel_us * US, abs=1e-4 * US)
    assert t.d2h_s == pytest.approx(d2h_us * US, abs=1e-4 * US)


def test_the_sum_is_request_times_device_part_and_the_documented_figures() -> None:
    gpu = h200()
    assert device_batch(gpu, 256).total_s == pytest.approx(103.8381 * US, abs=1e-4 * US)  # "104 µs"
    assert device_batch(gpu, 16_384).total_s == pytest.approx(140.0417 * US, abs=1e-4 * US)  # "140 µs"
    host_free = Costs(**{**gpu.__dict__, "request_bytes_per_query": 0.0, "reply_bytes_per_query": 0.0})
    assert request_time(host_free, 256) == pytest.approx(device_batch(gpu, 256).total_s)


costs_st = st.builds(
    Costs,
    invoke_s=st.floats(0, 1e-3),
    transfer_latency_s=st.floats(0, 1e-3),
    transfer_bps=st.one_of(st.none(), st.just(0.0), st.floats(1e6, 1e12)),
    transfer_bytes_per_query=st.floats(0, 1e4),
    kernel_query_s=st.floats(0, 1e-6),
    kernel_fixed_s=st.floats(0, 1e-3),
    kernel_on_host=st.just(False),
)


@settings(max_examples=300, deadline=None)
@given(costs=costs_st, n=st.integers(0, 1 << 20), e=st.integers(0, 64))
def test_random_costs_follow_the_written_formula(costs: Costs, n: int, e: int) -> None:
    bps = costs.transfer_bps or math.inf  # None or 0: no bytes term
    out = min(4.0, costs.transfer_bytes_per_query)
    half = costs.transfer_latency_s / 2
    t = device_batch(costs, n, e)
    assert t.invoke_s == costs.invoke_s
    assert t.h2d_s == pytest.approx(
        half + n * (costs.transfer_bytes_per_query - out) / bps, rel=1e-12, abs=1e-18
    )
    assert t.kernel_s == pytest.approx(
        math.ceil(n / max(e, 1)) * costs.kernel_query_s + costs.kernel_fixed_s, rel=1e-12, abs=1e-18
    )
    assert t.d2h_s == pytest.approx(half + n * out / bps, rel=1e-12, abs=1e-18)


def test_the_lanes_are_the_emulated_devices() -> None:
    # Launch 1, H2D 2, kernel 3, D2H 1 (ms): alone 7; a second handed over at once waits for the
    # copy-in lane (3..5), then the kernel lane (6..9), then copies out (9..10).
    lanes = Lanes()
    t = device_batch(Costs(invoke_s=1e-3, transfer_latency_s=2e-3, transfer_bytes_per_query=0.0,
                           kernel_query_s=0.0, kernel_fixed_s=3e-3), 1)  # fmt: skip
    assert (t.h2d_s, t.d2h_s) == pytest.approx((1e-3, 1e-3))  # half the latency each way
    t = type(t)(1e-3, 2e-3, 3e-3, 1e-3)
    assert [lanes.book(0.0, t) for _ in range(2)] == pytest.approx([7e-3, 10e-3])
    assert lanes.book(1.0, t) == pytest.approx(1.007)  # an idle device starts on its own time
    assert _native.DeviceLanes().book(0.0, 1e-3, 2e-3, 3e-3, 1e-3) == pytest.approx(7e-3)
