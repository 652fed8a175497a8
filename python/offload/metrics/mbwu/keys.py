"""YCSB's keys: zipfian ranks scattered over the key space, and the key bytes."""

from __future__ import annotations

import numpy as np

from offload.zipf import ZipfSampler

ZIPF_THETA = 0.99  # YCSB's zipfian constant


def zipf_keys(n_keys: int, theta: float = ZIPF_THETA) -> ZipfSampler:
    """YCSB's zipfian ranks 1..n under Zipf(theta), from the project's one sampler."""
    if n_keys < 1:
        raise ValueError(f"the key space needs at least one key, got {n_keys}")
    return ZipfSampler(n_keys, theta)


def zipf_ids(rng: np.random.Generator, ranks: ZipfSampler, perm: np.ndarray, size: int) -> np.ndarray:
    """``size`` key ids: zipfian ranks scattered over the key space by a fixed permutation (YCSB's
    scrambled zipfian hashes the rank; either way the hot keys are not neighbours, so they do not
    all fall in one shard or one block)."""
    return perm[ranks.sample(rng, size) - 1]


def key(i: int) -> bytes:
    return b"user%012d" % i
