"""Seeded, reproducible sparse-input traces for recommendation inference (embedding lookups).

A trace is a sequence of :class:`Batch` objects, each holding the dense features of ``B`` samples
and, per embedding table ``t``, the sparse lookups of the batch in PyTorch ``EmbeddingBag``
style: ``offsets[t]`` (int64, length ``B + 1``, ``offsets[0] == 0``, non-decreasing,
``offsets[-1] == len(indices[t])``) and ``indices[t]`` (int64 row ids in ``[0, rows_t)``); bag
``i`` of table ``t`` is ``indices[t][offsets[t][i]:offsets[t][i + 1]]``.  Bags are **not**
deduplicated: a bag may name the same row twice (sum pooling then counts it twice), as real
Criteo/DLRM inputs do.  Empty bags occur with ``lookups_dist="poisson"``.

Everything is a pure function of :class:`TraceConfig`: randomness comes from
:class:`numpy.random.SeedSequence` children keyed by ``(seed, namespace, table)``, so the same
seed gives the identical trace on any machine, and each table's stream depends only on the seed,
its table number and its own parameters (adding tables, or changing another table's row count,
leaves it unchanged).  No array of size ``rows`` is ever allocated: tables of 60 million or
2**40 rows cost the same as tables of 1,000.

Row-id permutation
------------------
Every generator first draws *logical* ids (hot-set ranks, Zipf ranks, RecSSD's fresh-id counter)
and maps them through :class:`RowPermutation`, a keyed bijection of ``[0, rows)`` (a 4-round
Feistel network on the smallest even-bit power-of-two domain covering ``rows``, with cycle
walking back into range; O(1) memory, any ``rows < 2**63``).  Hot rows are thus scattered over
the whole table, and consecutive logical ids land on unrelated pages, so page-granular readers
get no free spatial locality (RM-SSD §III-B2: "little spatial locality").

Distributions (``TraceConfig.kind``)
------------------------------------
``"hotset"`` (default; RM-SSD's Fig. 4 statistics)
    Per lookup, with probability ``hot_prob`` (``h``) draw from a hot set of ``hot_rows`` (``H``
    = 10,000) rows, else uniformly over all rows.  Inside the hot set the draw is *mildly
    skewed*: a hot rank ``x·H`` with ``x`` from the linear density ``f(x) = (1 + s) - 2·s·x`` on
    ``[0, 1)`` (``s`` = ``hot_skew``; the hottest hot row is ``(1+s)/(1-s)`` ≈ 2.8× as likely as
    the coolest one).  Calibration, for tables much larger than the 10k window (``rows`` ≫ 10^5):

    * *top-10,000 share* — the share of accesses that land in the 10,000 most frequent ids of
      the long-run distribution, i.e. of a long stream (≥ 10^5 lookups).  Those ids are the hot
      set, so the share is ``h + (1 - h)·H/rows`` ≈ ``h``; RM-SSD's 59.2% gives
      ``h = HOTSET_PROB = 0.592``.  (Measured inside one 10,000-lookup window the figure is
      meaningless: such a window holds fewer than 10,000 distinct ids, so its own top 10,000
      cover 100% of it.)
    * *unique accesses* — distinct ids / lookups inside a window of ``W`` = 10,000 consecutive
      lookups of one table (averaged over windows).  The hot draws contribute
      ``Σ_i 1 - exp(-h·W·p_i)`` distinct ids and the cold ones ≈ ``(1 - h)·W``.  With a uniform
      hot set and ``h = 0.592`` this is 85.5%; the linear skew ``s = HOTSET_SKEW = 0.477`` makes
      it 84.74% as RM-SSD reports, with the same ``h``.  These two definitions are the only
      simple ones under which both published figures hold together (the distinct share of the
      whole long stream tends to ``1 - h`` ≈ 41%, and the share of ids seen once is ≈ 73%).

``"recssd"`` (RecSSD's stack-distance generator, RM-SSD Fig. 14)
    Per table, an LRU stack of recently used ids.  Each lookup draws a stack distance: with
    probability ``p_new(K) = (b + c·K) / (1 + c·K)`` a *new* id (the next value of a per-table
    counter, which starts at a random offset, mapped through the permutation: never seen before
    until the table wraps), otherwise the id at stack depth ``d`` ∈ {1..D} (``d = 1`` repeats
    the previous lookup) with ``P(d) ∝ exp(-λ·d)``, truncated at ``D``; the id moves to the top
    of the stack.  This is RecSSD's construction (``models/input/gen_dist.py`` with DLRM's
    ``trace_generate_lru``: a 50-bin histogram of Exp(1), bin 0 meaning "new reference", and the
    knob ``K`` adding ``K`` times the total mass to bin 0, i.e. ``c = 1``, ``λ`` ≈ 0.15,
    ``D = 49``, ``b`` ≈ 0.12-0.14; that gives 88/46/31% for K = 0/1/2).  Every reuse lies
    within 49 distinct ids, so a per-table LRU of ≥ 49 entries (RecSSD's host cache: 1,000) hits
    exactly the reuses: ``hit(K) = (1 - b) / (1 + c·K)``, independent of the bag size.  RM-SSD
    reports 80/65/45/30% for K = 0/0.3/1/2; ``b = RECSSD_BASE_NEW = 0.2`` and
    ``c = RECSSD_K_SCALE = 5/6`` give 80/64/43.6/30%.  Set ``recssd_base_new=0.12`` and
    ``recssd_k_scale=1`` for RecSSD's own numbers.  Generation is a Python loop (~0.2 µs per
    lookup, 0.6 s for an RMC2 batch of 1024); replay saved traces in benchmarks.

``"zipf"``
    Zipf over permuted row ids: logical rank ``k`` ∈ [1, rows] with ``P(k) ∝ k^-α`` (``α`` =
    ``zipf_alpha``, default 1.09 as in FBGEMM's inference benchmarks), sampled by Hörmann and
    Derflinger's rejection-inversion for bounded Zipf (exact for every ``α ≥ 0``, including
    ``α ≤ 1``, O(1) memory for any ``rows``); row id ``perm(k - 1)``.

``"uniform"``
    Uniform over ``[0, rows)`` (the permutation of a uniform draw is uniform, so none is applied).

Files
-----
:func:`save_trace` writes one ``.npz``: ``dense`` (float32, ``(n_batches, B, dense_width)``),
``offsets_<t>`` (int64, ``(n_batches, B + 1)``, each row one batch), ``indices_<t>`` (int64,
all batches concatenated) and ``meta`` (a JSON string: format, version, shapes, row counts and
the :class:`TraceConfig`).  :func:`load_trace` validates everything and raises ``ValueError``
naming the table, batch and position of the first bad value.
"""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

import numpy as np

__all__ = [
    "HOTSET_PROB",
    "HOTSET_ROWS",
    "HOTSET_SKEW",
    "KINDS",
    "RECSSD_BASE_NEW",
    "RECSSD_DECAY",
    "RECSSD_K_SCALE",
    "RECSSD_MAX_DISTANCE",
    "TRACE_FORMAT",
    "TRACE_VERSION",
    "ZIPF_ALPHA",
    "Batch",
    "RowPermutation",
    "Trace",
    "TraceConfig",
    "TraceGenerator",
    "generate_trace",
    "load_trace",
    "locality_stats",
    "lru_hit_rate",
    "lru_hit_rates",
    "save_trace",
    "table_streams",
    "validate_batch",
    "zipf_pmf",
]

TraceKind = Literal["hotset", "recssd", "zipf", "uniform"]
LookupsDist = Literal["fixed", "poisson"]
KINDS: tuple[str, ...] = ("hotset", "recssd", "zipf", "uniform")
LOOKUPS_DISTS: tuple[str, ...] = ("fixed", "poisson")

#: Hot-set size of the ``"hotset"`` kind (RM-SSD: "top 10000 indices").
HOTSET_ROWS = 10_000
#: Probability that a ``"hotset"`` lookup goes to the hot set (= top-10,000 share, RM-SSD 59.2%).
HOTSET_PROB = 0.592
#: Linear skew inside the hot set; makes the 10k-window distinct share 84.74% with ``HOTSET_PROB``.
HOTSET_SKEW = 0.477
#: ``"recssd"``: probability of a new (never seen) id at K = 0.
RECSSD_BASE_NEW = 0.2
#: ``"recssd"``: scale of the knob K; ``p_new = (b + c·K) / (1 + c·K)``.
RECSSD_K_SCALE = 5.0 / 6.0
#: ``"recssd"``: deepest reuse stack distance (RecSSD: 49 of 50 histogram bins).
RECSSD_MAX_DISTANCE = 49
#: ``"recssd"``: decay λ of the reuse stack-distance pmf ``∝ exp(-λ·d)`` (RecSSD: bin width of Exp(1)).
RECSSD_DECAY = 0.15
#: Default Zipf exponent (FBGEMM's inference input generator).
ZIPF_ALPHA = 1.09

TRACE_FORMAT = "offload.recsys.trace"
TRACE_VERSION = 1

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


# ----------------------------------------------------------------------------------------------
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


class _ZipfSampler:
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


# ----------------------------------------------------------------------------------------------
# Configuration, batches, traces


@dataclass(frozen=True)
class TraceConfig:
    """Parameters of a trace; the generator's output is a pure function of them.

    ``rows`` may be one int (then ``num_tables`` is required) or one int per table; after
    construction ``rows`` is always a tuple of ints and ``num_tables`` an int.

    Attributes:
        rows: rows per table (each in ``[1, 2**62]``; never allocated).
        num_tables: number of tables (defaults to ``len(rows)``).
        batch_size: samples (bags per table) per batch.
        lookups: lookups per bag: the exact count (``lookups_dist="fixed"``, an integer) or the
            mean (``"poisson"``: bag sizes Poisson(``lookups``), so some bags are empty).
        lookups_dist: ``"fixed"`` or ``"poisson"``.
        dense_width: dense features per sample (float32 uniform in ``[0, 1)``, as DLRM's
            random data).  RMC1 = 128, RMC2 = 256, RMC3 = 2560.
        seed: non-negative seed.
        kind: ``"hotset"``, ``"recssd"``, ``"zipf"`` or ``"uniform"`` (see the module docs).
        hot_rows, hot_prob, hot_skew: ``"hotset"`` parameters (H, h, s).
        recssd_k: RecSSD's locality knob K (0 = most local; RM-SSD default trace 0.3).
        recssd_base_new, recssd_k_scale, recssd_max_distance, recssd_decay: ``"recssd"``
            parameters (b, c, D, λ).
        zipf_alpha: ``"zipf"`` exponent (≥ 0).
        permute: map logical ids through :class:`RowPermutation` (keep True outside tests).
    """

    rows: Sequence[int] | int
    num_tables: int | None = None
    batch_size: int = 128
    lookups: float = 80
    lookups_dist: LookupsDist = "fixed"
    dense_width: int = 128
    seed: int = 0
    kind: TraceKind = "hotset"
    hot_rows: int = HOTSET_ROWS
    hot_prob: float = HOTSET_PROB
    hot_skew: float = HOTSET_SKEW
    recssd_k: float = 0.3
    recssd_base_new: float = RECSSD_BASE_NEW
    recssd_k_scale: float = RECSSD_K_SCALE
    recssd_max_distance: int = RECSSD_MAX_DISTANCE
    recssd_decay: float = RECSSD_DECAY
    zipf_alpha: float = ZIPF_ALPHA
    permute: bool = True

    def __post_init__(self) -> None:
        rows_in = self.rows
        if isinstance(rows_in, (int, np.integer)):
            if self.num_tables is None:
                raise ValueError("num_tables is required when rows is a single int")
            rows = (int(rows_in),) * int(self.num_tables)
        else:
            rows = tuple(int(r) for r in rows_in)
            if self.num_tables is not None and int(self.num_tables) != len(rows):
                raise ValueError(f"num_tables={self.num_tables} but {len(rows)} row counts given")
        if not rows:
            raise ValueError("at least one table is required")
        for t, r in enumerate(rows):
            if not 1 <= r <= _MAX_ROWS:
                raise ValueError(f"table {t}: rows must be in [1, 2**62], got {r}")
        object.__setattr__(self, "rows", rows)
        object.__setattr__(self, "num_tables", len(rows))
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if self.lookups_dist not in LOOKUPS_DISTS:
            raise ValueError(f"lookups_dist must be one of {LOOKUPS_DISTS}, got {self.lookups_dist!r}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.dense_width < 0:
            raise ValueError(f"dense_width must be >= 0, got {self.dense_width}")
        if self.seed < 0:
            raise ValueError(f"seed must be >= 0, got {self.seed}")
        if not (self.lookups >= 0 and math.isfinite(self.lookups)):
            raise ValueError(f"lookups must be a finite number >= 0, got {self.lookups}")
        if self.lookups_dist == "fixed" and float(self.lookups) != int(self.lookups):
            raise ValueError(f"fixed lookups must be an integer, got {self.lookups}")
        if self.hot_rows < 1:
            raise ValueError(f"hot_rows must be >= 1, got {self.hot_rows}")
        if not 0.0 <= self.hot_prob <= 1.0:
            raise ValueError(f"hot_prob must be in [0, 1], got {self.hot_prob}")
        if not 0.0 <= self.hot_skew < 1.0:
            raise ValueError(f"hot_skew must be in [0, 1), got {self.hot_skew}")
        if self.recssd_k < 0:
            raise ValueError(f"recssd_k must be >= 0, got {self.recssd_k}")
        if not 0.0 <= self.recssd_base_new <= 1.0:
            raise ValueError(f"recssd_base_new must be in [0, 1], got {self.recssd_base_new}")
        if self.recssd_k_scale < 0:
            raise ValueError(f"recssd_k_scale must be >= 0, got {self.recssd_k_scale}")
        if self.recssd_max_distance < 1:
            raise ValueError(f"recssd_max_distance must be >= 1, got {self.recssd_max_distance}")
        if self.recssd_decay < 0:
            raise ValueError(f"recssd_decay must be >= 0, got {self.recssd_decay}")
        if self.zipf_alpha < 0:
            raise ValueError(f"zipf_alpha must be >= 0, got {self.zipf_alpha}")

    @property
    def table_rows(self) -> tuple[int, ...]:
        """Rows per table (a tuple of ints)."""
        return tuple(self.rows)  # type: ignore[arg-type]

    @property
    def tables(self) -> int:
        """Number of tables."""
        return len(self.table_rows)

    @property
    def recssd_new_prob(self) -> float:
        """Probability that a ``"recssd"`` lookup is a new id: ``(b + c·K) / (1 + c·K)``."""
        ck = self.recssd_k_scale * self.recssd_k
        return (self.recssd_base_new + ck) / (1.0 + ck)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (``rows`` as a list)."""
        d = asdict(self)
        d["rows"] = list(self.table_rows)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TraceConfig:
        """Inverse of :meth:`to_dict`; unknown keys raise ``ValueError``."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"unknown TraceConfig fields: {unknown}")
        return cls(**d)


@dataclass
class Batch:
    """One batch: dense features and per-table ``EmbeddingBag`` offsets/indices.

    Attributes:
        dense: ``(B, dense_width)`` float32.
        offsets: per table, int64 of length ``B + 1`` (``offsets[0] == 0``, non-decreasing,
            ``offsets[-1] == len(indices)``).
        indices: per table, int64 row ids.
    """

    dense: np.ndarray
    offsets: list[np.ndarray] = field(default_factory=list)
    indices: list[np.ndarray] = field(default_factory=list)

    @property
    def batch_size(self) -> int:
        return int(self.dense.shape[0])

    @property
    def num_tables(self) -> int:
        return len(self.offsets)

    def lengths(self, table: int) -> np.ndarray:
        """Bag sizes of ``table`` (int64, length ``B``)."""
        return np.diff(self.offsets[table])

    def bag(self, table: int, sample: int) -> np.ndarray:
        """Row ids of bag ``sample`` of ``table``."""
        off = self.offsets[table]
        return self.indices[table][off[sample] : off[sample + 1]]

    def validate(self, rows: Sequence[int]) -> None:
        """Raise ``ValueError`` if the batch breaks the contract (see :func:`validate_batch`)."""
        validate_batch(self, rows)


@dataclass
class Trace:
    """A list of batches plus the row counts (and, when generated, the config) behind them."""

    batches: list[Batch]
    rows: tuple[int, ...]
    config: TraceConfig | None = None

    def save(self, path: str | Path) -> Path:
        """Write to one ``.npz`` (see :func:`save_trace`)."""
        return save_trace(path, self)

    @classmethod
    def load(cls, path: str | Path, rows: Sequence[int] | None = None) -> Trace:
        """Read and validate a ``.npz`` (see :func:`load_trace`)."""
        return load_trace(path, rows)

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[Batch]:
        return iter(self.batches)


def _first_bad(mask: np.ndarray) -> int:
    return int(np.argmax(mask))


def _check_offsets(off: np.ndarray, n_indices: int | None, where: str) -> None:
    if off.ndim != 1 or off.size < 1:
        raise ValueError(f"{where}: offsets must be 1-D with length B + 1, got shape {off.shape}")
    if off[0] != 0:
        raise ValueError(f"{where}: offsets[0] = {int(off[0])}, must be 0")
    d = np.diff(off)
    if d.size and (d < 0).any():
        i = _first_bad(d < 0) + 1
        raise ValueError(
            f"{where}: offsets[{i}] = {int(off[i])} < offsets[{i - 1}] = {int(off[i - 1])} "
            "(offsets must be non-decreasing)"
        )
    if n_indices is not None and int(off[-1]) != n_indices:
        raise ValueError(f"{where}: offsets[-1] = {int(off[-1])} but there are {n_indices} indices")


def _check_indices(idx: np.ndarray, rows: int, where: str, base: int = 0) -> None:
    bad = (idx < 0) | (idx >= rows)
    if bad.any():
        j = _first_bad(bad)
        raise ValueError(f"{where}: indices[{j + base}] = {int(idx[j])} not in [0, {rows})")


def validate_batch(batch: Batch, rows: Sequence[int]) -> None:
    """Check the offsets/indices contract of ``batch`` against ``rows`` (one count per table).

    Raises ``ValueError`` naming the table and the position of the first bad value.
    """
    if batch.dense.ndim != 2:
        raise ValueError(f"dense must be 2-D (B, dense_width), got shape {batch.dense.shape}")
    b = batch.dense.shape[0]
    if len(batch.offsets) != len(rows) or len(batch.indices) != len(rows):
        raise ValueError(
            f"expected {len(rows)} tables, got {len(batch.offsets)} offsets and {len(batch.indices)} indices"
        )
    for t, (off, idx) in enumerate(zip(batch.offsets, batch.indices, strict=True)):
        where = f"table {t}"
        if off.shape != (b + 1,):
            raise ValueError(f"{where}: offsets has shape {off.shape}, expected ({b + 1},)")
        _check_offsets(off, len(idx), where)
        _check_indices(idx, int(rows[t]), where)


# ----------------------------------------------------------------------------------------------
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
        self.zipf = _ZipfSampler(self.rows, cfg.zipf_alpha) if cfg.kind == "zipf" else None
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

    def trace(self, n: int) -> Trace:
        """The next ``n`` batches as a :class:`Trace` (ready to save)."""
        return Trace(batches=self.batches(n), rows=self.config.table_rows, config=self.config)


def more_lookups(config: TraceConfig, table: int, n: int, stream: int = 1) -> np.ndarray:
    """`n` further row ids of `table` from the trace's distribution (the same hot set, Zipf ranks
    and row permutation) but independent draws: warm-up traffic that does not replay the trace."""
    s = _TableStream(config, table)
    s.rng = np.random.default_rng(np.random.SeedSequence(config.seed, spawn_key=(_NS_TABLE, table, stream)))
    return s.draw(n)


def generate_trace(config: TraceConfig, num_batches: int) -> Trace:
    """The first ``num_batches`` batches of the trace of ``config``."""
    return TraceGenerator(config).trace(num_batches)


# ----------------------------------------------------------------------------------------------
# Files


def save_trace(path: str | Path, trace: Trace) -> Path:
    """Write ``trace`` to one ``.npz`` (uncompressed; see the module docs for the layout).

    All batches must have the same batch size, dense width and number of tables.
    """
    path = Path(path)
    if not trace.batches:
        raise ValueError("cannot save an empty trace")
    first = trace.batches[0]
    b, w = first.dense.shape
    nt = len(trace.rows)
    for i, batch in enumerate(trace.batches):
        if batch.dense.shape != (b, w):
            raise ValueError(f"batch {i}: dense shape {batch.dense.shape} differs from {(b, w)}")
        validate_batch(batch, trace.rows)
    meta = {
        "format": TRACE_FORMAT,
        "version": TRACE_VERSION,
        "num_batches": len(trace.batches),
        "batch_size": int(b),
        "dense_width": int(w),
        "num_tables": nt,
        "rows": [int(r) for r in trace.rows],
        "config": trace.config.to_dict() if trace.config is not None else None,
    }
    arrays: dict[str, np.ndarray] = {
        "meta": np.array(json.dumps(meta, sort_keys=True)),
        "dense": np.stack([bt.dense.astype(np.float32, copy=False) for bt in trace.batches]),
    }
    for t in range(nt):
        arrays[f"offsets_{t}"] = np.stack(
            [bt.offsets[t].astype(np.int64, copy=False) for bt in trace.batches]
        )
        arrays[f"indices_{t}"] = np.concatenate(
            [bt.indices[t].astype(np.int64, copy=False) for bt in trace.batches]
        )
    from offload.files import atomic_write

    with atomic_write(path, "wb") as fh:  # temp + fsync + rename: whole or not at all
        np.savez(fh, **arrays)  # type: ignore[arg-type]
    return path


def _int_array(arr: np.ndarray, name: str) -> np.ndarray:
    if not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{name}: expected an integer array, got dtype {arr.dtype}")
    return arr.astype(np.int64, copy=False)


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    """Every array of an .npz, or a ValueError naming the file and what is wrong with it (an
    empty, truncated or foreign file; numpy's own errors do not say which file)."""
    import zipfile

    if not path.exists():
        raise FileNotFoundError(f"{path}: no such trace file")
    if path.stat().st_size == 0:
        raise ValueError(
            f"{path}: the trace file is empty (0 bytes); make it again with `offload recsys synth`"
        )
    bad = (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zipfile.LargeZipFile)
    again = "make it again with `offload recsys synth`"
    try:
        npz = np.load(path, allow_pickle=False)
    except bad as e:
        raise ValueError(f"{path}: not a readable trace (.npz): {e or type(e).__name__}; {again}") from None
    if not isinstance(npz, np.lib.npyio.NpzFile):
        raise ValueError(f"{path}: one array (.npy), not a trace (.npz); {again}")
    try:
        with npz:
            return {k: npz[k] for k in npz.files}
    except bad as e:
        raise ValueError(f"{path}: a damaged trace (.npz): {e or type(e).__name__}; {again}") from None


def load_trace(path: str | Path, rows: Sequence[int] | None = None) -> Trace:
    """Read a trace written by :func:`save_trace` and validate it.

    Args:
        path: the ``.npz`` file.
        rows: row counts to validate the indices against (default: those in the metadata; if
            given, their number must match the file's tables).

    Raises:
        ValueError: bad metadata, missing arrays, wrong shapes or dtypes, offsets that do not
            start at 0, decrease or do not end at the number of indices, or an index outside
            ``[0, rows_t)`` — naming the table, the batch and the position of the first bad value.
    """
    data = _read_npz(Path(path))
    if "meta" not in data:
        raise ValueError(f"{path}: no 'meta' entry (not a trace file)")
    try:
        meta = json.loads(str(data["meta"][()]))
    except (json.JSONDecodeError, TypeError) as exc:
        raise ValueError(f"{path}: metadata is not valid JSON: {exc}") from exc
    if not isinstance(meta, dict) or meta.get("format") != TRACE_FORMAT:
        raise ValueError(f"{path}: metadata format is not {TRACE_FORMAT!r}")
    if meta.get("version") != TRACE_VERSION:
        raise ValueError(f"{path}: unsupported trace version {meta.get('version')!r}")
    try:
        nb, b, w, nt = (int(meta[k]) for k in ("num_batches", "batch_size", "dense_width", "num_tables"))
        meta_rows = [int(r) for r in meta["rows"]]
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise ValueError(f"{path}: incomplete metadata: {exc}") from exc
    if nb < 1:
        raise ValueError(f"{path}: num_batches is {nb}; a trace holds at least one batch")
    if len(meta_rows) != nt:
        raise ValueError(f"{path}: metadata names {nt} tables but {len(meta_rows)} row counts")
    if rows is not None:
        if len(rows) != nt:
            raise ValueError(f"{path}: {len(rows)} row counts given for {nt} tables")
        check_rows = [int(r) for r in rows]
    else:
        check_rows = meta_rows
    try:
        config = TraceConfig.from_dict(meta["config"]) if meta.get("config") is not None else None
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{path}: metadata 'config' is not a trace configuration: {exc}") from None

    if "dense" not in data:
        raise ValueError(f"{path}: missing 'dense'")
    dense = data["dense"]
    if dense.shape != (nb, b, w):
        raise ValueError(f"{path}: dense has shape {dense.shape}, expected {(nb, b, w)}")
    if dense.dtype != np.float32:
        raise ValueError(f"{path}: dense has dtype {dense.dtype}, expected float32")
    offsets: list[np.ndarray] = []
    indices: list[np.ndarray] = []
    for t in range(nt):
        for key in (f"offsets_{t}", f"indices_{t}"):
            if key not in data:
                raise ValueError(f"{path}: table {t}: missing '{key}'")
        off = _int_array(data[f"offsets_{t}"], f"table {t}: offsets")
        idx = _int_array(data[f"indices_{t}"], f"table {t}: indices")
        if off.shape != (nb, b + 1):
            raise ValueError(f"table {t}: offsets has shape {off.shape}, expected {(nb, b + 1)}")
        if idx.ndim != 1:
            raise ValueError(f"table {t}: indices must be 1-D, got shape {idx.shape}")
        for i in range(nb):
            _check_offsets(off[i], None, f"table {t}: batch {i}")
        ends = np.cumsum(off[:, -1])
        if int(ends[-1]) != idx.size:
            raise ValueError(
                f"table {t}: offsets promise {int(ends[-1])} indices over {nb} batches, file has {idx.size}"
            )
        bad = (idx < 0) | (idx >= check_rows[t])
        if bad.any():
            j = _first_bad(bad)
            i = int(np.searchsorted(ends, j, side="right"))
            pos = j - (int(ends[i - 1]) if i else 0)
            raise ValueError(
                f"table {t}: batch {i}: indices[{pos}] (file position {j}) = {int(idx[j])} "
                f"not in [0, {check_rows[t]})"
            )
        offsets.append(off)
        indices.append(idx)
    batches: list[Batch] = []
    starts = [np.concatenate([[0], np.cumsum(off[:, -1])]) for off in offsets]
    for i in range(nb):
        batches.append(
            Batch(
                dense=dense[i],
                offsets=[offsets[t][i].copy() for t in range(nt)],
                indices=[indices[t][starts[t][i] : starts[t][i + 1]] for t in range(nt)],
            )
        )
    return Trace(batches=batches, rows=tuple(check_rows), config=config)


# ----------------------------------------------------------------------------------------------
# Analysis


def table_streams(batches: Sequence[Batch] | Trace) -> list[np.ndarray]:
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
