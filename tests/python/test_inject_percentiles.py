"""`offload serve inject` reports latency percentiles with the simulator's definition
(np.percentile, linear between the two nearest ranks), so calibration compares like with like."""

from __future__ import annotations

import numpy as np
import pytest

from offload.serve.inject import latency_us


def test_percentiles_are_the_simulators_linear_ones() -> None:
    lat_s = [4e-6, 1e-6, 3e-6, 2e-6]  # unsorted, as the clients report them
    got = latency_us(lat_s)
    assert got["p50"] == pytest.approx(2.5)  # nearest rank would say 3
    assert got["p90"] == pytest.approx(float(np.percentile([1, 2, 3, 4], 90)))
    assert got["p99"] == pytest.approx(3.97)
    assert got["max"] == pytest.approx(4.0)


def test_no_latencies_is_none_not_zero() -> None:
    """No answered request has no latency: 0 µs would read as a fast service (issue 39)."""
    assert latency_us([]) == {"p50": None, "p90": None, "p99": None, "max": None}
