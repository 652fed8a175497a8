"""The configuration of a synthetic trace: its distribution, its calibration constants and the
row counts, batch size and lookups it draws for."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

import numpy as np

from offload.recsys.traces.permutation import _MAX_ROWS

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


def recssd_own_constants(draws: int = 1000, bins: int = 50) -> dict[str, float]:
    """The ``"recssd"`` constants RecSSD's own generator sets (RecSSD-RecInfra
    ``models/input/gen_dist.py`` feeding DLRM's ``trace_generate_lru``): a histogram of ``bins``
    bins over the range of ``draws`` Exp(1) draws, bin 0 meaning a new id and bin ``d`` stack
    distance ``d``; the knob K adds K times the histogram's mass to bin 0.

    So ``λ`` is the bin width, ``E[max - min] / bins = (H_draws - 1/draws) / bins`` (0.1497),
    ``b`` the first bin's mass ``1 - exp(-λ)`` (0.139), ``D = bins - 1`` (49) and ``c = 1``.
    (The generator truncates K's addition to whole histogram units, ``int(K / λ) λ``, lowering
    ``c·K`` by up to one bin width; left out here, as the constants the code means.)"""
    span = sum(1.0 / k for k in range(1, draws + 1)) - 1.0 / draws
    lam = span / bins
    return {
        "recssd_base_new": 1.0 - math.exp(-lam),
        "recssd_k_scale": 1.0,
        "recssd_decay": lam,
        "recssd_max_distance": bins - 1,
    }


#: The two sets of ``"recssd"`` constants Fig. 14 is run with: ``fitted`` (b and c chosen so the
#: LRU hit rates land on RM-SSD's 80 / 65 / 45 / 30%, the defaults) and ``recssd`` (RecSSD's own).
LOCALITY_CONSTANTS: dict[str, dict[str, float]] = {
    "fitted": {
        "recssd_base_new": RECSSD_BASE_NEW,
        "recssd_k_scale": RECSSD_K_SCALE,
        "recssd_decay": RECSSD_DECAY,
        "recssd_max_distance": RECSSD_MAX_DISTANCE,
    },
    "recssd": recssd_own_constants(),
}
LOCALITY_CONSTANTS_WHY = {
    "fitted": "b and c set so that the trace's LRU hit rates land on RM-SSD's Fig. 14 (80 / 65 / 45 / 30%): "
    "agrees by construction",
    "recssd": "RecSSD's own generator (gen_dist.py: 50 bins over 1,000 Exp(1) draws, K adding K times the "
    "mass to bin 0): nothing taken from RM-SSD's figure",
}


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
