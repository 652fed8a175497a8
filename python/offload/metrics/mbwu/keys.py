"""YCSB's keys: zipfian ranks scattered over the key space, and the key bytes."""

from __future__ import annotations

import numpy as np

ZIPF_THETA = 0.99  # YCSB's zipfian constant


def zipf_cdf(n_keys: int, theta: float = ZIPF_THETA) -> np.ndarray:
    """Cumulative probabilities of ranks 1..n under Zipf(theta), as YCSB's generator draws them."""
    if n_keys < 1:
        raise ValueError(f"the key space needs at least one key, got {n_keys}")
    w = 1.0 / np.arange(1, n_keys + 1, dtype=np.float64) ** theta
    cdf = np.cumsum(w)
    return cdf / cdf[-1]


def zipf_ids(rng: np.random.Generator, cdf: np.ndarray, perm: np.ndarray, size: int) -> np.ndarray:
    """``size`` key ids: zipfian ranks scattered over the key space by a fixed permutation (YCSB's
    scrambled zipfian hashes the rank; either way the hot keys are not neighbours, so they do not
    all fall in one shard or one block)."""
    ranks = np.searchsorted(cdf, rng.random(size), side="right")
    return perm[np.minimum(ranks, len(perm) - 1)]


def key(i: int) -> bytes:
    return b"user%012d" % i
