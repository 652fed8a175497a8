"""RowPermutation: a keyed bijection of ``[0, rows)`` that scatters logical ids (hot ranks,
Zipf ranks, fresh ids) over the table, and the seed namespaces of the trace's streams."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# SeedSequence spawn-key namespaces: independent streams per purpose and per table.
_NS_DENSE = 0
_NS_TABLE = 1
_NS_PERM = 2
_MAX_ROWS = 1 << 62

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)


def _mix64(z: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser on a uint64 array (wrapping arithmetic)."""
    z = (z + _GOLDEN) * _M1  # arrays wrap silently in numpy
    z = (z ^ (z >> _S30)) * _M2
    z = z ^ (z >> _S27)
    return z ^ (z >> _S31)


class RowPermutation:
    """Keyed bijection of ``[0, rows)`` with O(1) memory (Feistel network + cycle walking).

    The domain is rounded up to ``4**half`` (``2·half`` ≥ bit length of ``rows - 1``, so the
    padded domain is < 4·rows); a balanced Feistel network with ``rounds`` SplitMix64 round
    functions permutes it, and values that land outside ``[0, rows)`` are re-encrypted until they
    land inside ("cycle walking", expected < 4 steps), which restricts the permutation to
    ``[0, rows)`` and keeps it a bijection.  Works for any ``1 <= rows <= 2**62``.

    Args:
        rows: size of the domain.
        seed: non-negative seed; ``(seed, stream)`` selects the key.
        stream: independent key per table (the table number).
        rounds: Feistel rounds (4 makes a pseudo-random permutation).
    """

    def __init__(self, rows: int, seed: int = 0, stream: int = 0, rounds: int = 4) -> None:
        rows = int(rows)
        if not 1 <= rows <= _MAX_ROWS:
            raise ValueError(f"rows must be in [1, 2**62], got {rows}")
        if rounds < 1:
            raise ValueError(f"rounds must be >= 1, got {rounds}")
        self.rows = rows
        bits = max(1, (rows - 1).bit_length())
        self._half = (bits + 1) // 2
        self._shift = np.uint64(self._half)
        self._mask = np.uint64((1 << self._half) - 1)
        ss = np.random.SeedSequence(int(seed), spawn_key=(_NS_PERM, int(stream)))
        self._keys = [np.uint64(k) for k in ss.generate_state(rounds, dtype=np.uint64)]

    def _forward(self, x: np.ndarray) -> np.ndarray:
        left, right = x >> self._shift, x & self._mask
        for key in self._keys:
            left, right = right, left ^ (_mix64(right ^ key) & self._mask)
        return (left << self._shift) | right

    def _backward(self, y: np.ndarray) -> np.ndarray:
        left, right = y >> self._shift, y & self._mask
        for key in reversed(self._keys):
            left, right = right ^ (_mix64(left ^ key) & self._mask), left
        return (left << self._shift) | right

    def _walk(self, x: np.ndarray | Sequence[int] | int, forward: bool) -> np.ndarray:
        arr = np.asarray(x, dtype=np.int64)
        if arr.size and (arr.min() < 0 or arr.max() >= self.rows):
            raise ValueError(f"ids must lie in [0, {self.rows})")
        if self.rows == 1:
            return np.zeros(arr.shape, dtype=np.int64)
        step = self._forward if forward else self._backward
        out = step(arr.astype(np.uint64).ravel())
        limit = np.uint64(self.rows)
        todo = np.flatnonzero(out >= limit)
        while todo.size:
            nxt = step(out[todo])
            out[todo] = nxt
            todo = todo[nxt >= limit]
        return out.astype(np.int64).reshape(arr.shape)

    def __call__(self, x: np.ndarray | Sequence[int] | int) -> np.ndarray:
        """Permute logical ids ``x`` (int array in ``[0, rows)``) to row ids (int64)."""
        return self._walk(x, forward=True)

    def inverse(self, y: np.ndarray | Sequence[int] | int) -> np.ndarray:
        """Map row ids back to logical ids: ``inverse(perm(x)) == x``."""
        return self._walk(y, forward=False)
