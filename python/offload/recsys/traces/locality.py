"""What a trace looks like to a cache: per-table streams, locality statistics and LRU hit rates."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from offload.recsys.traces.batches import Batch
from offload.recsys.traces.trace import EmbeddingTrace

# Analysis


def table_streams(batches: Sequence[Batch] | EmbeddingTrace) -> list[np.ndarray]:
    """Per table, the concatenation of its indices over ``batches`` (the table's access stream)."""
    bl = list(batches)
    if not bl:
        return []
    return [np.concatenate([bt.indices[t] for bt in bl]) for t in range(bl[0].num_tables)]


def _stream_stats(idx: np.ndarray, top: int, window: int) -> dict[str, float]:
    n = int(idx.size)
    if n == 0:
        return {"lookups": 0.0, "distinct": 0.0, "unique_share": 0.0, "distinct_share": 0.0, "top_share": 0.0}
    _, counts = np.unique(idx, return_counts=True)
    k = min(top, counts.size)
    top_count = int(np.partition(counts, counts.size - k)[counts.size - k :].sum())
    w = min(window, n)
    nwin = n // w
    shares = [np.unique(idx[i * w : (i + 1) * w]).size / w for i in range(nwin)]
    return {
        "lookups": float(n),
        "distinct": float(counts.size),
        "unique_share": float(np.mean(shares)),
        "distinct_share": counts.size / n,
        "top_share": top_count / n,
    }


def locality_stats(
    indices: np.ndarray | Sequence[np.ndarray], top: int = 10_000, window: int = 10_000
) -> dict[str, float]:
    """Locality of one table's access stream (or the mean over several tables' streams).

    Definitions (those under which RM-SSD's 84.74% / 59.2% hold together; module docs):

    * ``unique_share``: distinct ids / lookups inside each window of ``window`` consecutive
      lookups, averaged over the complete windows (one window = the whole stream if shorter);
    * ``top_share``: share of all lookups of the stream that go to its ``top`` most frequent
      ids (meaningful for streams much longer than ``top``; RM-SSD's "top 10000 indices");
    * ``distinct_share``: distinct ids / lookups over the whole stream;
    * ``lookups``, ``distinct``: counts (summed, not averaged, over tables).

    Args:
        indices: a 1-D array (one table's stream) or a sequence of them (one per table; the
            shares are averaged over tables weighted by their lookups).
        top: ``k`` of the top-k share.
        window: window length of ``unique_share``.
    """
    if top < 1 or window < 1:
        raise ValueError("top and window must be >= 1")
    if isinstance(indices, np.ndarray) and indices.ndim == 1:
        return _stream_stats(indices, top, window)
    per = [_stream_stats(np.asarray(s).ravel(), top, window) for s in indices]
    total = sum(p["lookups"] for p in per)
    out = {"lookups": total, "distinct": sum(p["distinct"] for p in per)}
    for key in ("unique_share", "distinct_share", "top_share"):
        out[key] = sum(p[key] * p["lookups"] for p in per) / total if total else 0.0
    return out


def lru_hit_rates(indices_per_table: Sequence[np.ndarray] | np.ndarray, capacity: int) -> list[float]:
    """Per-table hit rate of an exact LRU cache of ``capacity`` ids per table, started cold.

    ``indices_per_table`` is one access stream per table (see :func:`table_streams`), or one
    1-D array for a single table.  An empty stream has hit rate 0.
    """
    if capacity < 0:
        raise ValueError(f"capacity must be >= 0, got {capacity}")
    streams = (
        [indices_per_table]
        if isinstance(indices_per_table, np.ndarray) and indices_per_table.ndim == 1
        else list(indices_per_table)
    )
    rates: list[float] = []
    for stream in streams:
        seq = np.asarray(stream).ravel().tolist()
        if not seq or capacity == 0:
            rates.append(0.0)
            continue
        cache: OrderedDict[int, None] = OrderedDict()
        hits = 0
        move = cache.move_to_end
        for x in seq:
            if x in cache:
                move(x)
                hits += 1
            else:
                cache[x] = None
                if len(cache) > capacity:
                    cache.popitem(last=False)
        rates.append(hits / len(seq))
    return rates


def lru_hit_rate(indices_per_table: Sequence[np.ndarray] | np.ndarray, capacity: int) -> float:
    """Overall hit rate (hits / lookups over all tables) of a per-table LRU of ``capacity`` ids.

    Each table has its own cache (RecSSD's host cache); see :func:`lru_hit_rates`.
    """
    streams = (
        [indices_per_table]
        if isinstance(indices_per_table, np.ndarray) and indices_per_table.ndim == 1
        else list(indices_per_table)
    )
    sizes = [int(np.asarray(s).size) for s in streams]
    total = sum(sizes)
    if total == 0:
        return 0.0
    rates = lru_hit_rates(streams, capacity)
    return sum(r * n for r, n in zip(rates, sizes, strict=True)) / total
