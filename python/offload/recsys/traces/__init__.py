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
    ``D = 49``, ``b`` ≈ 0.14).  Every reuse lies
    within 49 distinct ids, so a per-table LRU of ≥ 49 entries (RecSSD's host cache: 1,000) hits
    exactly the reuses: ``hit(K) = (1 - b) / (1 + c·K)``, independent of the bag size.  RM-SSD
    reports 80/65/45/30% for K = 0/0.3/1/2; ``b = RECSSD_BASE_NEW = 0.2`` and
    ``c = RECSSD_K_SCALE = 5/6`` give 80/64/43.6/30%: these two are *fitted* to RM-SSD's figure.
    RecSSD's own constants (:func:`recssd_own_constants`: ``b = 1 - exp(-λ)`` = 0.139, ``c = 1``,
    ``λ`` = 0.1497, ``D`` = 49) give 86/66/43/29%; :data:`LOCALITY_CONSTANTS` has both sets.
    (Its generator also truncates K's addition to whole units of the histogram; with that, over
    20,000 draws of its 1,000 samples, the expected hit rates are 86.0/70.3/44.7/29.4%.)
    Generation is a Python loop (~0.2 µs per lookup, 0.6 s for an RMC2 batch of 1024); replay
    saved traces in benchmarks.

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

from offload.recsys.traces.batches import Batch, validate_batch
from offload.recsys.traces.config import (
    HOTSET_PROB,
    HOTSET_ROWS,
    HOTSET_SKEW,
    KINDS,
    LOCALITY_CONSTANTS,
    LOCALITY_CONSTANTS_WHY,
    LOOKUPS_DISTS,
    RECSSD_BASE_NEW,
    RECSSD_DECAY,
    RECSSD_K_SCALE,
    RECSSD_MAX_DISTANCE,
    ZIPF_ALPHA,
    LookupsDist,
    TraceConfig,
    TraceKind,
    recssd_own_constants,
)
from offload.recsys.traces.locality import locality_stats, lru_hit_rate, lru_hit_rates, table_streams
from offload.recsys.traces.permutation import RowPermutation
from offload.recsys.traces.synthesis import TraceGenerator, generate_trace, more_lookups
from offload.recsys.traces.trace import TRACE_FORMAT, TRACE_VERSION, EmbeddingTrace, load_trace, save_trace
from offload.zipf import zipf_pmf

__all__ = [
    "HOTSET_PROB",
    "HOTSET_ROWS",
    "HOTSET_SKEW",
    "KINDS",
    "LOCALITY_CONSTANTS",
    "LOCALITY_CONSTANTS_WHY",
    "LOOKUPS_DISTS",
    "RECSSD_BASE_NEW",
    "RECSSD_DECAY",
    "RECSSD_K_SCALE",
    "RECSSD_MAX_DISTANCE",
    "TRACE_FORMAT",
    "TRACE_VERSION",
    "ZIPF_ALPHA",
    "Batch",
    "EmbeddingTrace",
    "LookupsDist",
    "RowPermutation",
    "TraceConfig",
    "TraceGenerator",
    "TraceKind",
    "generate_trace",
    "load_trace",
    "locality_stats",
    "lru_hit_rate",
    "lru_hit_rates",
    "more_lookups",
    "recssd_own_constants",
    "save_trace",
    "table_streams",
    "validate_batch",
    "zipf_pmf",
]
