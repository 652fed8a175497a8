"""The generators: one seeded stream per table (hotset, RecSSD's K, Zipf, uniform) and the
batches they make."""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

from offload.recsys.traces.batches import Batch
from offload.recsys.traces.config import TraceConfig
from offload.recsys.traces.permutation import _NS_DENSE, _NS_TABLE, RowPermutation
from offload.recsys.traces.trace import EmbeddingTrace
from offload.zipf import ZipfSampler

# Generation


class _TableStream:
    """The sparse stream of one table: bag sizes and row ids, with persistent state."""

    def __init__(self, cfg: TraceConfig, table: int) -> None:
        self.cfg = cfg
        self.table = table
        self.rows = cfg.table_rows[table]
        self.rng = np.random.default_rng(np.random.SeedSequence(cfg.seed, spawn_key=(_NS_TABLE, table)))
        self.perm = RowPermutation(self.rows, cfg.seed, table) if cfg.permute else None
        self.hot = min(cfg.hot_rows, self.rows)
        self.zipf = ZipfSampler(self.rows, cfg.zipf_alpha) if cfg.kind == "zipf" else None
        # "recssd" state: LRU stack (most recent last) and the fresh-id counter.
        self.stack: list[int] = []
        self.fresh_start = int(self.rng.integers(0, self.rows)) if cfg.kind == "recssd" else 0
        self.fresh_used = 0  # total fresh ids handed out (not reduced mod rows)

    def _map(self, logical: np.ndarray) -> np.ndarray:
        return self.perm(logical) if self.perm is not None else logical.astype(np.int64)

    def lengths(self, batch_size: int) -> np.ndarray:
        if self.cfg.lookups_dist == "poisson":
            return self.rng.poisson(float(self.cfg.lookups), batch_size).astype(np.int64)
        return np.full(batch_size, int(self.cfg.lookups), dtype=np.int64)

    def draw(self, n: int) -> np.ndarray:
        kind = self.cfg.kind
        if n == 0:
            return np.empty(0, dtype=np.int64)
        if kind == "uniform":
            return self.rng.integers(0, self.rows, n, dtype=np.int64)
        if kind == "hotset":
            return self._map(self._hotset(n))
        if kind == "zipf":
            assert self.zipf is not None
            return self._map(self.zipf.sample(self.rng, n) - 1)
        return self._recssd(n)

    def _hotset(self, n: int) -> np.ndarray:
        cfg = self.cfg
        hot = self.rng.random(n) < cfg.hot_prob
        nh = int(hot.sum())
        out = np.empty(n, dtype=np.int64)
        u = self.rng.random(nh)
        s = cfg.hot_skew
        # Inverse CDF of f(x) = (1 + s) - 2 s x on [0, 1): F(x) = (1 + s) x - s x^2.
        x = u if s == 0 else 2.0 * u / ((1.0 + s) + np.sqrt((1.0 + s) ** 2 - 4.0 * s * u))
        out[hot] = np.minimum((x * self.hot).astype(np.int64), self.hot - 1)
        out[~hot] = self.rng.integers(0, self.rows, n - nh, dtype=np.int64)
        return out

    def _recssd(self, n: int) -> np.ndarray:
        cfg = self.cfg
        dmax = cfg.recssd_max_distance
        rho = math.exp(-cfg.recssd_decay)
        u = self.rng.random(n)
        v = self.rng.random(n)
        # Reuse depth d in 1..D with P(d) ∝ rho^d (truncated geometric, inverse CDF).
        if rho >= 1.0:
            d = np.floor(v * dmax).astype(np.int64) + 1
        else:
            tail = 1.0 - rho**dmax
            d = np.ceil(np.log1p(-v * tail) / math.log(rho)).astype(np.int64)
        d = np.clip(d, 1, dmax)
        d[u < cfg.recssd_new_prob] = 0
        base = (self.fresh_start + self.fresh_used) % self.rows
        fresh = self._map((base + np.arange(n, dtype=np.int64)) % self.rows).tolist()
        # A fresh id can already be on the stack only once the counter has wrapped around.
        wraps = self.fresh_used + n > self.rows
        stack = self.stack
        out: list[int] = []
        append = out.append
        used = 0
        for di in d.tolist():
            if di == 0 or di > len(stack):
                r = fresh[used]
                used += 1
                if wraps and r in stack:
                    stack.remove(r)
            else:
                r = stack.pop(-di)
            stack.append(r)
            append(r)
            if len(stack) > 2 * dmax:
                del stack[:-dmax]
        self.fresh_used += used
        return np.asarray(out, dtype=np.int64)


class TraceGenerator:
    """Yields batches of a trace; the sequence is a pure function of the :class:`TraceConfig`.

    Use :meth:`next_batch` / iteration (infinite), :meth:`batches` or :meth:`trace`.  The
    ``"recssd"`` kind keeps per-table LRU-stack state across batches, so batches must be drawn in
    order (they are, by construction).
    """

    def __init__(self, config: TraceConfig) -> None:
        self.config = config
        self._dense_rng = np.random.default_rng(np.random.SeedSequence(config.seed, spawn_key=(_NS_DENSE,)))
        self._tables = [_TableStream(config, t) for t in range(config.tables)]

    def next_batch(self) -> Batch:
        """Generate the next batch."""
        cfg = self.config
        b = cfg.batch_size
        dense = self._dense_rng.random((b, cfg.dense_width), dtype=np.float32)
        offsets: list[np.ndarray] = []
        indices: list[np.ndarray] = []
        for stream in self._tables:
            lengths = stream.lengths(b)
            off = np.zeros(b + 1, dtype=np.int64)
            np.cumsum(lengths, out=off[1:])
            offsets.append(off)
            indices.append(stream.draw(int(off[-1])))
        return Batch(dense=dense, offsets=offsets, indices=indices)

    def __iter__(self) -> Iterator[Batch]:
        while True:
            yield self.next_batch()

    def batches(self, n: int) -> list[Batch]:
        """The next ``n`` batches."""
        return [self.next_batch() for _ in range(n)]

    def trace(self, n: int) -> EmbeddingTrace:
        """The next ``n`` batches as a :class:`EmbeddingTrace` (ready to save)."""
        return EmbeddingTrace(batches=self.batches(n), rows=self.config.table_rows, config=self.config)


def more_lookups(config: TraceConfig, table: int, n: int, stream: int = 1) -> np.ndarray:
    """`n` further row ids of `table` from the trace's distribution (the same hot set, Zipf ranks
    and row permutation) but independent draws: warm-up traffic that does not replay the trace."""
    s = _TableStream(config, table)
    s.rng = np.random.default_rng(np.random.SeedSequence(config.seed, spawn_key=(_NS_TABLE, table, stream)))
    return s.draw(n)


def generate_trace(config: TraceConfig, num_batches: int) -> EmbeddingTrace:
    """The first ``num_batches`` batches of the trace of ``config``."""
    return TraceGenerator(config).trace(num_batches)
