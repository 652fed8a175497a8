"""Reproducible draws shared by the rule and trace generators: block-served uniforms and
picks from cumulative weights."""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import numpy as np


class Uniforms:
    """Scalar uniforms in [0, 1) served from numpy blocks.

    The rule loop needs tens of scalar draws per rule; a scalar ``rng.random()`` call costs
    about 1 µs, a list lookup ~0.1 µs, and block draws keep the stream reproducible.
    """

    __slots__ = ("_buf", "_i", "_rng")

    def __init__(self, rng: np.random.Generator) -> None:
        self._rng = rng
        self._buf: list[float] = []
        self._i = 0

    def __call__(self) -> float:
        i = self._i
        if i >= len(self._buf):
            self._buf = self._rng.random(1 << 16).tolist()
            i = 0
        self._i = i + 1
        return self._buf[i]


def pick(cdf: Sequence[float], u: float) -> int:
    """Index drawn from a cumulative weight list with uniform ``u``."""
    return min(bisect.bisect_right(cdf, u * cdf[-1]), len(cdf) - 1)


def cdf(weights: Sequence[float]) -> list[float]:
    """Cumulative weights, as :func:`pick` takes them."""
    return np.cumsum(np.asarray(weights, dtype=np.float64)).tolist()
