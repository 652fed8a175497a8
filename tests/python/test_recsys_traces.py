"""Tests for the seeded sparse-input trace generators (offload.recsys.traces)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from offload.recsys import traces as T

KINDS = ["hotset", "recssd", "zipf", "uniform"]


def _cfg(**kw: object) -> T.TraceConfig:
    base: dict[str, object] = {
        "rows": [1_000_000, 50_000, 7],
        "batch_size": 16,
        "lookups": 20,
        "dense_width": 4,
    }
    base.update(kw)
    return T.TraceConfig(**base)  # type: ignore[arg-type]


def _same(a: T.Batch, b: T.Batch) -> bool:
    return (
        np.array_equal(a.dense, b.dense)
        and all(np.array_equal(x, y) for x, y in zip(a.offsets, b.offsets, strict=True))
        and all(np.array_equal(x, y) for x, y in zip(a.indices, b.indices, strict=True))
    )


# ---------------------------------------------------------------------------------------------
# Determinism, independence, contract


@pytest.mark.parametrize("kind", KINDS)
def test_same_seed_same_trace(kind: str) -> None:
    a = T.generate_trace(_cfg(kind=kind, seed=7), 3)
    b = T.generate_trace(_cfg(kind=kind, seed=7), 3)
    assert all(_same(x, y) for x, y in zip(a, b, strict=True))
    c = T.generate_trace(_cfg(kind=kind, seed=8), 3)
    assert not np.array_equal(a.batches[0].indices[0], c.batches[0].indices[0])
    assert not np.array_equal(a.batches[0].dense, c.batches[0].dense)


def test_iteration_matches_batches() -> None:
    gen = T.TraceGenerator(_cfg(kind="recssd", seed=3))
    it = iter(T.TraceGenerator(_cfg(kind="recssd", seed=3)))
    for batch in gen.batches(3):
        assert _same(batch, next(it))


@pytest.mark.parametrize("kind", KINDS)
def test_tables_are_independent_streams(kind: str) -> None:
    one = T.generate_trace(T.TraceConfig(rows=[10**9], batch_size=32, lookups=10, kind=kind, seed=5), 2)
    more = T.generate_trace(
        T.TraceConfig(rows=[10**9, 123, 10**6], batch_size=32, lookups=10, kind=kind, seed=5, dense_width=3),
        2,
    )
    for a, b in zip(one, more, strict=True):  # table 0 ignores the other tables and the dense width
        assert np.array_equal(a.offsets[0], b.offsets[0])
        assert np.array_equal(a.indices[0], b.indices[0])
    # Two tables with identical parameters draw unrelated ids.
    twin = T.generate_trace(T.TraceConfig(rows=2**40, num_tables=2, batch_size=64, lookups=20, kind=kind), 2)
    s0, s1 = T.table_streams(twin)
    assert not np.array_equal(s0, s1)
    assert np.intersect1d(s0, s1).size < 0.05 * s0.size


@settings(max_examples=30, deadline=None)
@given(
    kind=st.sampled_from(KINDS),
    rows=st.lists(st.sampled_from([1, 2, 7, 100, 10_001, 60_000_000, 2**40]), min_size=1, max_size=3),
    batch=st.integers(1, 40),
    mean=st.sampled_from([0.0, 0.3, 1.0, 5.0]),
    seed=st.integers(0, 2**32),
)
def test_poisson_contract_with_empty_bags(
    kind: str, rows: list[int], batch: int, mean: float, seed: int
) -> None:
    cfg = T.TraceConfig(
        rows=rows, batch_size=batch, lookups=mean, lookups_dist="poisson", kind=kind, seed=seed, dense_width=2
    )
    for bt in T.generate_trace(cfg, 2):
        assert bt.dense.shape == (batch, 2) and bt.dense.dtype == np.float32
        assert bt.num_tables == len(rows)
        for t, (off, idx) in enumerate(zip(bt.offsets, bt.indices, strict=True)):
            assert off.dtype == np.int64 and idx.dtype == np.int64
            assert off.shape == (batch + 1,) and off[0] == 0 and off[-1] == idx.size
            assert (np.diff(off) >= 0).all()
            assert ((idx >= 0) & (idx < rows[t])).all()
        bt.validate(rows)
    if mean == 0.0:
        assert all(bt.indices[0].size == 0 for bt in T.generate_trace(cfg, 1))


def test_poisson_makes_some_empty_bags() -> None:
    bt = T.generate_trace(_cfg(lookups=1.0, lookups_dist="poisson", batch_size=200), 1).batches[0]
    lengths = bt.lengths(0)
    assert (lengths == 0).any() and (lengths > 1).any()
    assert bt.bag(0, 0).size == lengths[0]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("rows", [1, 7, 2**40])
def test_indices_in_range(kind: str, rows: int) -> None:
    cfg = T.TraceConfig(rows=[rows], batch_size=64, lookups=30, kind=kind, seed=11)
    idx = T.table_streams(T.generate_trace(cfg, 3))[0]
    assert idx.size == 3 * 64 * 30
    assert idx.min() >= 0 and idx.max() < rows
    if rows == 7:
        assert np.unique(idx).size == 7
    if rows == 2**40:
        assert idx.max() > 2**39  # ids spread over the whole table


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="num_tables"):
        T.TraceConfig(rows=10)
    with pytest.raises(ValueError, match="table 1"):
        T.TraceConfig(rows=[10, 0])
    with pytest.raises(ValueError, match="integer"):
        T.TraceConfig(rows=[10], lookups=2.5)
    with pytest.raises(ValueError, match="kind"):
        T.TraceConfig(rows=[10], kind="bogus")  # type: ignore[arg-type]
    cfg = T.TraceConfig(rows=5, num_tables=3)
    assert cfg.rows == (5, 5, 5) and cfg.num_tables == 3
    assert T.TraceConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg


# ---------------------------------------------------------------------------------------------
# Permutation


@pytest.mark.parametrize("n", [*range(1, 40), 64, 100, 255, 256, 257, 1000, 4096, 4097, 65_537])
def test_permutation_is_bijection(n: int) -> None:
    for seed in (0, 1):
        perm = T.RowPermutation(n, seed=seed, stream=n)
        x = np.arange(n)
        y = perm(x)
        assert np.array_equal(np.sort(y), x)
        assert np.array_equal(perm.inverse(y), x)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 3000), seed=st.integers(0, 2**63), stream=st.integers(0, 1000))
def test_permutation_bijection_property(n: int, seed: int, stream: int) -> None:
    y = T.RowPermutation(n, seed=seed, stream=stream)(np.arange(n))
    assert np.unique(y).size == n and y.min() == 0 and y.max() == n - 1


def test_permutation_huge_domain() -> None:
    n = 2**40
    perm = T.RowPermutation(n, seed=3)
    x = np.concatenate([np.arange(1000), n - 1 - np.arange(1000)])
    y = perm(x)
    assert y.min() >= 0 and y.max() < n and np.unique(y).size == x.size
    assert np.array_equal(perm.inverse(y), x)
    # Consecutive logical ids land far apart (no free page locality).
    assert np.median(np.abs(np.diff(y[:1000]))) > n / 100
    with pytest.raises(ValueError):
        perm([n])


def test_hot_set_is_spread_over_the_table() -> None:
    cfg = T.TraceConfig(rows=[60_000_000], batch_size=500, lookups=80, seed=2)
    idx = T.table_streams(T.generate_trace(cfg, 2))[0]
    ids, counts = np.unique(idx, return_counts=True)
    hot = ids[np.argsort(counts)[-2000:]]
    assert hot.min() < 6_000_000 and hot.max() > 54_000_000  # not rows 0..H-1


# ---------------------------------------------------------------------------------------------
# Calibration


def test_hotset_matches_rm_ssd_locality() -> None:
    cfg = T.TraceConfig(rows=[60_000_000, 2**40], batch_size=1250, lookups=80, seed=0)
    stats = T.locality_stats(T.table_streams(T.generate_trace(cfg, 2)), top=10_000, window=10_000)
    assert abs(stats["top_share"] - 0.592) < 0.03
    assert abs(stats["unique_share"] - 0.8474) < 0.03
    assert stats["distinct_share"] < 0.6


def test_recssd_k_sweep() -> None:
    targets = {0.0: 0.80, 0.3: 0.65, 1.0: 0.45, 2.0: 0.30}
    rates = []
    for k, target in targets.items():
        cfg = T.TraceConfig(rows=[60_000_000, 2**40], batch_size=256, lookups=80, kind="recssd", recssd_k=k)
        rate = T.lru_hit_rate(T.table_streams(T.generate_trace(cfg, 2)), 1000)
        assert abs(rate - target) < 0.07, (k, rate)
        assert abs(rate - (1 - cfg.recssd_new_prob)) < 0.02
        rates.append(rate)
    assert all(a > b for a, b in itertools.pairwise(rates))


def test_recssd_small_table_keeps_a_proper_stack() -> None:
    cfg = T.TraceConfig(rows=[3], batch_size=50, lookups=10, kind="recssd", recssd_k=2.0)
    idx = T.table_streams(T.generate_trace(cfg, 2))[0]
    assert set(np.unique(idx).tolist()) == {0, 1, 2}
    assert T.lru_hit_rate([idx], 3) > 0.99


@pytest.mark.parametrize(
    ("n", "alpha"), [(1000, 1.09), (1000, 1.0), (1000, 0.8), (50, 0.0), (2**40, 1.09), (2**40, 0.7)]
)
def test_zipf_top_ranks_match_pmf(n: int, alpha: float) -> None:
    samples = 200_000
    cfg = T.TraceConfig(
        rows=[n],
        batch_size=1000,
        lookups=samples // 1000,
        kind="zipf",
        zipf_alpha=alpha,
        permute=False,
        seed=4,
    )
    ranks = T.table_streams(T.generate_trace(cfg, 1))[0] + 1
    assert ranks.min() >= 1 and ranks.max() <= n
    top = np.arange(1, 11)
    emp = np.array([(ranks == r).mean() for r in top])
    pmf = T.zipf_pmf(n, alpha, top)
    tol = 5 * np.sqrt(pmf * (1 - pmf) / samples) + 1e-4
    assert (np.abs(emp - pmf) <= tol).all(), (emp, pmf)


def test_zipf_permuted_ids_map_back_to_ranks() -> None:
    cfg = T.TraceConfig(rows=[10**7], batch_size=500, lookups=100, kind="zipf", seed=9)
    idx = T.table_streams(T.generate_trace(cfg, 1))[0]
    ranks = T.RowPermutation(10**7, seed=9, stream=0).inverse(idx) + 1
    p1 = T.zipf_pmf(10**7, T.ZIPF_ALPHA, [1])[0]
    assert abs((ranks == 1).mean() - p1) < 5 * np.sqrt(p1 / idx.size)
    ids, counts = np.unique(idx, return_counts=True)
    assert ids[np.argmax(counts)] == T.RowPermutation(10**7, seed=9, stream=0)(0)


def test_zipf_pmf_normalised() -> None:
    for alpha in (0.5, 1.0, 1.09, 2.0):
        assert T.zipf_pmf(5000, alpha, np.arange(1, 5001)).sum() == pytest.approx(1.0, rel=1e-12)
        exact = np.sum(np.arange(1, 3_000_001, dtype=np.float64) ** -alpha)
        assert T.zipf_pmf(3_000_000, alpha, [1])[0] == pytest.approx(1 / exact, rel=1e-9)


# ---------------------------------------------------------------------------------------------
# Analysis helpers


def _naive_lru(seq: list[int], cap: int) -> int:
    cache: list[int] = []
    hits = 0
    for x in seq:
        if x in cache:
            hits += 1
            cache.remove(x)
        elif len(cache) == cap:
            cache.pop(0)
        cache.append(x)
    return hits


@settings(max_examples=50, deadline=None)
@given(seq=st.lists(st.integers(0, 12), max_size=200), cap=st.integers(1, 8))
def test_lru_matches_naive(seq: list[int], cap: int) -> None:
    arr = np.array(seq, dtype=np.int64)
    expected = _naive_lru(seq, cap) / len(seq) if seq else 0.0
    assert T.lru_hit_rate(arr, cap) == pytest.approx(expected)
    assert T.lru_hit_rates([arr, arr], cap) == pytest.approx([expected, expected])


def test_lru_tables_have_separate_caches() -> None:
    a = np.array([1, 2, 1, 2])
    assert T.lru_hit_rate([a, a], 2) == pytest.approx(0.5)
    assert T.lru_hit_rate([a, np.array([5, 5])], 1) == pytest.approx(1 / 6)


def test_locality_stats_definitions() -> None:
    idx = np.array([1, 1, 2, 3, 1, 2, 4, 5])
    s = T.locality_stats(idx, top=2, window=4)
    assert s["lookups"] == 8 and s["distinct"] == 5
    assert s["top_share"] == pytest.approx(5 / 8)  # ids 1 (x3) and 2 (x2)
    assert s["unique_share"] == pytest.approx((3 / 4 + 4 / 4) / 2)
    assert s["distinct_share"] == pytest.approx(5 / 8)


# ---------------------------------------------------------------------------------------------
# Files


def test_save_load_round_trip(tmp_path: Path) -> None:
    cfg = _cfg(kind="recssd", lookups=3.0, lookups_dist="poisson", seed=21)
    trace = T.generate_trace(cfg, 4)
    path = trace.save(tmp_path / "t.npz")
    back = T.load_trace(path)
    assert back.config == cfg and back.rows == cfg.rows and len(back) == 4
    assert all(_same(x, y) for x, y in zip(trace, back, strict=True))
    # Replaying from the config gives the same trace as the file.
    again = T.generate_trace(back.config, 4)  # type: ignore[arg-type]
    assert all(_same(x, y) for x, y in zip(again, back, strict=True))


def _rewrite(path: Path, **changes: np.ndarray) -> Path:
    with np.load(path) as npz:
        data = {k: npz[k] for k in npz.files}
    data.update(changes)
    out = path.with_name("bad.npz")
    np.savez(out, **data)  # type: ignore[arg-type]
    return out


def test_load_errors(tmp_path: Path) -> None:
    cfg = T.TraceConfig(rows=[100, 50], batch_size=8, lookups=4, dense_width=2, seed=1)
    path = T.generate_trace(cfg, 3).save(tmp_path / "t.npz")
    with np.load(path) as npz:
        off1, idx1, idx0 = npz["offsets_1"].copy(), npz["indices_1"].copy(), npz["indices_0"].copy()

    bad = off1.copy()
    bad[2, 5] = bad[2, 4] - 1
    with pytest.raises(ValueError, match=r"table 1: batch 2: offsets\[5\] = \d+ < offsets\[4\]"):
        T.load_trace(_rewrite(path, offsets_1=bad))

    bad = off1.copy()
    bad[1, 0] = 1
    with pytest.raises(ValueError, match=r"table 1: batch 1: offsets\[0\] = 1"):
        T.load_trace(_rewrite(path, offsets_1=bad))

    bad = idx1.copy()
    bad[40] = 50  # batch 1 (32 lookups per batch), position 8
    with pytest.raises(
        ValueError, match=r"table 1: batch 1: indices\[8\] \(file position 40\) = 50 not in \[0, 50\)"
    ):
        T.load_trace(_rewrite(path, indices_1=bad))

    bad = idx0.copy()
    bad[3] = -1
    with pytest.raises(ValueError, match=r"table 0: batch 0: indices\[3\]"):
        T.load_trace(_rewrite(path, indices_0=bad))

    with pytest.raises(ValueError, match="table 1: offsets promise 96 indices"):
        T.load_trace(_rewrite(path, indices_1=idx1[:-1]))
    with pytest.raises(ValueError, match="integer"):
        T.load_trace(_rewrite(path, indices_1=idx1.astype(np.float64)))
    with pytest.raises(ValueError, match=r"table 0: .*not in \[0, 10\)"):
        T.load_trace(path, rows=[10, 50])
    with pytest.raises(ValueError, match="row counts given"):
        T.load_trace(path, rows=[100])
    with pytest.raises(ValueError, match="not valid JSON"):
        T.load_trace(_rewrite(path, meta=np.array("{nope")))
    with pytest.raises(ValueError, match="dense has shape"):
        T.load_trace(_rewrite(path, dense=np.zeros((3, 8, 5), np.float32)))

    data_path = tmp_path / "missing.npz"
    with np.load(path) as npz:
        np.savez(data_path, **{k: npz[k] for k in npz.files if k != "indices_1"})
    with pytest.raises(ValueError, match="table 1: missing 'indices_1'"):
        T.load_trace(data_path)


def test_load_refuses_metadata_found_by_fuzzing(tmp_path: Path) -> None:
    """fuzz/python/trace_load.py found these escaping as TypeError, IndexError or OverflowError
    (BENCHMARKS.md, "Fuzzing"): each is a ValueError naming what is wrong."""
    cfg = T.TraceConfig(rows=[100], batch_size=2, lookups=1, dense_width=1, seed=1)
    path = T.generate_trace(cfg, 1).save(tmp_path / "t.npz")
    with np.load(path) as npz:
        meta = json.loads(str(npz["meta"][()]))

    def with_meta(**changes: object) -> np.ndarray:
        return np.array(json.dumps({**meta, **changes}))

    for config in (7, {"batch_size": 1}):
        with pytest.raises(ValueError, match="'config' is not a trace configuration"):
            T.load_trace(_rewrite(path, meta=with_meta(config=config)))
    with pytest.raises(ValueError, match="incomplete metadata"):
        T.load_trace(_rewrite(path, meta=with_meta(batch_size=float("inf"))))
    no_batches = {
        "meta": with_meta(num_batches=0),
        "dense": np.zeros((0, 2, 1), np.float32),
        "offsets_0": np.zeros((0, 3), np.int64),
        "indices_0": np.zeros(0, np.int64),
    }
    with pytest.raises(ValueError, match="num_batches is 0"):
        T.load_trace(_rewrite(path, **no_batches))


def test_save_rejects_bad_batches(tmp_path: Path) -> None:
    trace = T.generate_trace(T.TraceConfig(rows=[10], batch_size=4, lookups=2, dense_width=1), 1)
    trace.batches[0].indices[0][1] = 10
    with pytest.raises(ValueError, match=r"table 0: indices\[1\] = 10 not in \[0, 10\)"):
        trace.save(tmp_path / "x.npz")
