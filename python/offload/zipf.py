"""The one Zipf sampler of the project (bounded Zipf on ranks 1..n, ``P(k) ∝ k^-alpha``), by
rejection-inversion (Hörmann and Derflinger, ACM TOMACS 6(3), 1996), vectorised, and the Zipf
pmf. recsys' calibrated traces and the MBWU's YCSB keys draw from it.

Why our own and not a library's: numpy's ``Generator.zipf`` is unbounded and needs alpha > 1
(YCSB's theta is 0.99); ``scipy.stats.zipfian`` draws through a generic inverse CDF that is
orders of magnitude slower at the tens of millions of rows an embedding table has. This sampler
costs O(1) memory and about two uniforms per draw for any n and any alpha >= 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

# Zipf: rejection-inversion (W. Hörmann, G. Derflinger, "Rejection-inversion to generate variates
# from monotone discrete distributions", ACM TOMACS 6(3), 1996), vectorised.


def _helper1(x: np.ndarray) -> np.ndarray:
    """``log1p(x) / x`` with its limit 1 at 0."""
    small = np.abs(x) < 1e-8
    safe = np.where(small, 1.0, x)
    with np.errstate(divide="ignore", invalid="ignore"):
        val = np.log1p(safe) / safe
    return np.where(small, 1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x)), val)


def _helper2(x: np.ndarray) -> np.ndarray:
    """``expm1(x) / x`` with its limit 1 at 0."""
    small = np.abs(x) < 1e-8
    safe = np.where(small, 1.0, x)
    val = np.expm1(safe) / safe
    return np.where(small, 1.0 + x * 0.5 * (1.0 + x / 3.0 * (1.0 + 0.25 * x)), val)


class ZipfSampler:
    """Bounded Zipf on ranks ``1..n`` with ``P(k) ∝ k^-alpha`` (``alpha >= 0``)."""

    def __init__(self, n: int, alpha: float) -> None:
        self.n = int(n)
        self.alpha = float(alpha)
        self._hx1 = float(self._hint(np.array([1.5]))[0]) - 1.0
        self._hn = float(self._hint(np.array([self.n + 0.5]))[0])
        two = np.array([2.0])
        self._s = 2.0 - float(self._hinv(self._hint(np.array([2.5])) - self._h(two))[0])

    def _h(self, x: np.ndarray) -> np.ndarray:
        return np.exp(-self.alpha * np.log(x))

    def _hint(self, x: np.ndarray) -> np.ndarray:
        lx = np.log(x)
        return _helper2((1.0 - self.alpha) * lx) * lx

    def _hinv(self, y: np.ndarray) -> np.ndarray:
        t = np.maximum(y * (1.0 - self.alpha), -1.0)
        return np.exp(_helper1(t) * y)

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        out = np.empty(size, dtype=np.int64)
        if self.n == 1:
            out[:] = 1
            return out
        todo = np.arange(size)
        while todo.size:
            u = self._hn + rng.random(todo.size) * (self._hx1 - self._hn)
            with np.errstate(over="ignore", invalid="ignore"):
                x = self._hinv(u)
            k = np.clip(np.floor(x + 0.5), 1.0, float(self.n))
            ok = (k - x <= self._s) | (u >= self._hint(k + 0.5) - self._h(k))
            out[todo[ok]] = k[ok].astype(np.int64)
            todo = todo[~ok]
        return out


def zipf_pmf(n: int, alpha: float, ranks: np.ndarray | Sequence[int]) -> np.ndarray:
    """Exact probabilities of ``ranks`` (1-based) under bounded Zipf(``n``, ``alpha``).

    The normaliser ``Σ_{k<=n} k^-alpha`` is summed exactly up to 10^6 terms and completed with the
    Euler-Maclaurin formula beyond (relative error < 1e-12 for huge ``n``).
    """
    r = np.asarray(ranks, dtype=np.float64)
    m = min(int(n), 1_000_000)
    total = float(np.sum(np.arange(1, m + 1, dtype=np.float64) ** -alpha))
    if n > m:
        a, b = float(m), float(n)
        if abs(alpha - 1.0) < 1e-12:
            integral = math.log(b / a)
        else:
            integral = (b ** (1.0 - alpha) - a ** (1.0 - alpha)) / (1.0 - alpha)
        # Σ_{k=m+1}^{n} f(k) = ∫_m^n f + (f(n) - f(m))/2 + (f'(n) - f'(m))/12 - ...
        fa, fb = a**-alpha, b**-alpha
        da, db = -alpha * a ** (-alpha - 1.0), -alpha * b ** (-alpha - 1.0)
        total += integral + (fb - fa) / 2.0 + (db - da) / 12.0
    return np.where((r >= 1) & (r <= n), r**-alpha / total, 0.0)
