"""`offload serve inject` reports the Rust generator's latency percentiles (HdrHistogram), and
none, not 0 µs, when no request was answered."""

from __future__ import annotations

from offload.serve.inject import latency_us


def test_the_generators_percentiles_are_kept_in_us() -> None:
    quantiles = {"count": 4, "p50": 2.0, "p90": 4.0, "p99": 4.0, "p999": 4.0, "max": 4.0, "mean": 2.5}
    assert latency_us(quantiles) == {"p50": 2.0, "p90": 4.0, "p99": 4.0, "max": 4.0}


def test_no_latencies_is_none_not_zero() -> None:
    """No answered request has no latency: 0 µs would read as a fast service (issue 39)."""
    quantiles = {"count": 0, "p50": 0.0, "p90": 0.0, "p99": 0.0, "p999": 0.0, "max": 0.0, "mean": 0.0}
    assert latency_us(quantiles) == {"p50": None, "p90": None, "p99": None, "max": None}
