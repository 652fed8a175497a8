"""`offload plan simulate`: one device shared by k executors (the emulated device's lanes), the
executors' batching policies, pre-encoded requests and inline mode."""

from __future__ import annotations

import pytest

from offload.plan.simulate import (
    Costs,
    Lanes,
    Load,
    Pipeline,
    device_batch,
    load_preset,
    request_time,
    simulate,
)

# A device whose kernel takes 10 ms per batch however many queries; the host costs nothing.
DEVICE = Costs(kernel_query_s=0.0, kernel_fixed_s=10e-3, kernel_on_host=False)
SATURATED = Load(queries_per_request=(1,), duration_s=1.0, warmup_s=0.05)


@pytest.mark.parametrize("k", [1, 2, 4])
def test_one_device_bounds_the_throughput_whatever_k(k: int) -> None:
    # 16 clients keep every executor busy; one request per batch; the kernel lane serves one
    # batch at a time, so k executors on one device give its 100 batches/s, no more.
    r = simulate(Pipeline(p=16, k=k), DEVICE, SATURATED)
    assert r.throughput_rps == pytest.approx(100, rel=0.02)
    assert r.utilisation["device kernel"] == pytest.approx(1.0, rel=0.05)  # booked: up to k - 1 ahead
    # k devices (one per executor) scale it, as the model did before the device was shared.
    own = simulate(Pipeline(p=16, k=k, devices=k), DEVICE, SATURATED)
    assert own.throughput_rps == pytest.approx(100 * k, rel=0.02)


def test_cpu_engines_scale_with_k_given_the_cores() -> None:
    cpu = Costs(kernel_query_s=10e-3)  # on host cores: 10 ms of a core per query
    one = simulate(Pipeline(p=16, k=1, cpus=4), cpu, SATURATED)
    two = simulate(Pipeline(p=16, k=2, cpus=4), cpu, SATURATED)
    assert one.throughput_rps == pytest.approx(100, rel=0.02)
    assert two.throughput_rps == pytest.approx(200, rel=0.02)


def test_the_lanes_overlap_copies_with_the_kernel() -> None:
    # H2D 1 ms, kernel 2 ms, D2H 1 ms (no launch): one batch out at a time takes 4 ms; with two
    # executors the next batch's copy overlaps this one's kernel: one batch per 2 ms.
    costs = Costs(transfer_latency_s=2e-3, kernel_fixed_s=2e-3, kernel_query_s=0.0, kernel_on_host=False)
    t = device_batch(costs, 1)
    assert (t.h2d_s, t.kernel_s, t.d2h_s) == pytest.approx((1e-3, 2e-3, 1e-3))
    lanes = Lanes()
    assert [lanes.book(0.0, t) for _ in range(3)] == pytest.approx([4e-3, 6e-3, 8e-3])
    one = simulate(Pipeline(p=8, k=1), costs, SATURATED)
    two = simulate(Pipeline(p=8, k=2), costs, SATURATED)
    assert one.throughput_rps == pytest.approx(250, rel=0.02)
    assert two.throughput_rps == pytest.approx(500, rel=0.02)


def test_a_batch_takes_the_emulated_devices_time() -> None:
    # docs/serve-protocol.md, "The emulated device": on the H200 profile 104 µs for 256 queries,
    # 140 µs for 16,384; the sum is request_time's device part.
    _, table = load_preset("gpu-h200")
    gpu = Costs(**table)
    assert device_batch(gpu, 256).total_s == pytest.approx(104e-6, abs=1e-6)
    assert device_batch(gpu, 16_384).total_s == pytest.approx(140e-6, abs=1e-6)
    host_free = Costs(**table, request_bytes_per_query=0.0, reply_bytes_per_query=0.0)
    assert device_batch(gpu, 256).total_s == pytest.approx(request_time(host_free, 256))


def test_self_filling_batches_grow_with_the_load() -> None:
    # 1 ms per batch on the device; with the self-filling policy an executor that frees takes what
    # is queued: a lone request goes alone at once, and under load the batches grow by themselves.
    costs = Costs(kernel_query_s=0.0, kernel_fixed_s=1e-3, kernel_on_host=False)
    pipe = Pipeline(k=1, batch_queries=4096, batch_timeout_s=0.0)
    sizes = []
    for rate in (100, 2000, 8000):
        r = simulate(pipe, costs, Load(mode="open", rate_rps=rate, duration_s=0.5, arrivals="fixed"))
        assert r.throughput_rps == pytest.approx(rate, rel=0.03)
        sizes.append(r.queries_per_batch)
    assert sizes[0] == pytest.approx(1.0)
    assert sizes[0] < sizes[1] < sizes[2]
    assert sizes[2] == pytest.approx(8, rel=0.15)  # 8 requests arrive per 1 ms batch
    # Per request (batch_queries 0) the same load saturates at 1,000 batches/s.
    per_request = simulate(Pipeline(k=1), costs, Load(mode="open", rate_rps=8000, duration_s=0.5))
    assert per_request.throughput_rps == pytest.approx(1000, rel=0.03)


def test_encoded_requests_skip_the_workers_and_inline_matches_on_the_broker() -> None:
    costs = Costs(
        worker_query_s=1e-3, broker_s=1e-5, kernel_query_s=0.0, kernel_fixed_s=1e-4, kernel_on_host=False
    )
    load = Load(queries_per_request=(1,), duration_s=0.5)
    raw = simulate(Pipeline(p=8, k=1), costs, load)
    encoded = simulate(Pipeline(p=8, k=1, encoded=True), costs, load)
    assert raw.throughput_rps == pytest.approx(1000, rel=0.02)  # the worker's 1 ms per request
    assert encoded.throughput_rps > 5 * raw.throughput_rps
    assert "worker" not in encoded.utilisation
    # Inline (k = 0): the broker matches what it read at once; batches form from the backlog.
    inline = simulate(Pipeline(p=8, k=0, encoded=True, batch_queries=64, batch_timeout_s=0.0), costs, load)
    assert inline.throughput_rps > 2 * encoded.throughput_rps
    assert inline.queries_per_batch > 2
    one_each = simulate(Pipeline(p=8, k=0, encoded=True), costs, load)  # batch_queries 0: one request each
    assert one_each.queries_per_batch == pytest.approx(1.0)
    assert one_each.throughput_rps < 1 / (1e-4 + 2e-5) * 1.02


def test_k_and_devices_are_checked() -> None:
    with pytest.raises(ValueError, match="k at least 0"):
        simulate(Pipeline(k=-1), DEVICE, SATURATED)
    with pytest.raises(ValueError, match="devices"):
        simulate(Pipeline(devices=0), DEVICE, SATURATED)
    with pytest.raises(ValueError, match="arrivals"):
        simulate(Pipeline(), DEVICE, Load(mode="open", rate_rps=10, arrivals="bursty"))
