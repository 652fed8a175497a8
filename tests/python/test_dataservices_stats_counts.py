"""Equality on skewed columns (issue 26): the count sketch prices heavy, medium and light keys
within 2x and absent keys near 0, appended in parts, in bounded memory; and through the
estimator."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

pytest.importorskip("datafusion")
pytest.importorskip("datasketches")

from offload.dataservices import estimate as E
from offload.dataservices import plans
from offload.dataservices import stats as S

ROWS = 50_000


def _skewed(rows: int, seed: int = 5) -> pa.Table:
    rng = np.random.default_rng(seed)
    words = np.array([f"w{i:05d}" for i in range(20_000)])
    return pa.table({
        "k": np.minimum(rng.zipf(1.3, rows), 10_000).astype(np.int64),
        "s": words[np.minimum(rng.zipf(1.2, rows), 20_000) - 1],
    })  # fmt: skip


@pytest.fixture(scope="module")
def table() -> pa.Table:
    return _skewed(ROWS)


def _worst(
    stats: S.TableStats, t: pa.Table, col: str, least: int = 5, first_absent: int = 10_001
) -> tuple[float, float]:
    """(worst ratio either way over keys with >= ``least`` rows, most rows given an absent key)."""
    vc = pc.value_counts(t.column(col)).to_pylist()
    values = [x["values"] for x in vc]
    true = np.array([x["counts"] for x in vc], dtype=float)
    est = stats.columns[col].counts(values)
    assert est is not None
    keep = true >= least
    ratio = np.maximum(est[keep] / true[keep], true[keep] / np.maximum(est[keep], 1e-9))
    absent = [first_absent + i for i in range(2000)] if col == "k" else [f"x{i}" for i in range(2000)]
    return float(ratio.max()), float(stats.columns[col].counts(absent).max())


@pytest.mark.parametrize("col", ["k", "s"])
def test_every_key_within_2x_and_absent_keys_near_0_across_appends(table: pa.Table, col: str) -> None:
    s = S.TableStats.of(table.slice(0, 10_000), sample_rows=4096)
    s.append(table.slice(10_000, 15_000))
    s.append(table.slice(25_000))
    worst, absent = _worst(s, table, col)
    assert worst <= 2.0 and absent <= 2.0, (col, worst, absent)
    cs = s.columns[col].count
    assert cs is not None and cs.nbytes <= 4 << 20 and len(cs.heavy) <= S.HEAVY_KEYS, cs.nbytes


def test_a_dense_sketch_still_prices_the_tail(table: pa.Table, monkeypatch: pytest.MonkeyPatch) -> None:
    """At most 4,096 cells for ~3,000 tail keys: count-mean-min, within 2x from 20 rows on."""
    monkeypatch.setattr(S, "COUNT_MAX_WIDTH", 4096)
    s = S.TableStats.of(table, sample_rows=4096)
    cs = s.columns["k"].count
    assert cs is not None and cs.width == 4096 and not cs.sparse
    worst, absent = _worst(s, table, "k", least=20)
    assert worst <= 2.0 and absent <= 5.0, (worst, absent)


def test_a_sketch_grows_with_the_rows_appended() -> None:
    """The width follows the rows (twice them, a power of two) as parts are appended: a wider
    sketch starts, the narrower ones keep the first parts' counts (no ghosts from copying)."""
    rng = np.random.default_rng(1)
    parts = [pa.table({"k": rng.integers(0, 20_000, n)}) for n in (2000, 8000, 40_000)]
    s = S.TableStats.of(parts[0])
    widths = [s.columns["k"].count.width]
    for p in parts[1:]:
        s.append(p)
        widths.append(s.columns["k"].count.width)
    assert widths == [4096, 32768, 131072]
    assert s.columns["k"].count.nbytes <= 4 << 20
    whole = pa.concat_tables(parts)
    worst, absent = _worst(s, whole, "k", least=5, first_absent=20_000)
    assert worst <= 2.0 and absent <= 2.0, (worst, absent)


def test_equality_through_the_estimator(table: pa.Table) -> None:
    """Heavy, medium and light keys and absent ones, as plans: within 2x (the light Zipf key
    that was 3.75x off is among them)."""
    stats = {"sk": S.TableStats.of(table, sample_rows=4096)}
    vc = sorted(pc.value_counts(table.column("k")).to_pylist(), key=lambda x: -x["counts"])
    keys = [vc[0]["values"], vc[30]["values"], next(x["values"] for x in vc if x["counts"] <= 19)]
    sqls = [f"select * from sk where k = {k}" for k in keys]
    sqls += ["select * from sk where k = 123456", "select * from sk where s = 'w00007'",
             "select * from sk where s = 'nowhere'",
             "select * from sk where k in (1, 2, 300, 4000, 99999)"]  # fmt: skip
    for sql in sqls:
        plan = plans.to_substrait(sql, {"sk": table.schema})
        est = E.estimate(plan, stats).rows
        true = plans.execute(plan, {"sk": table}).num_rows
        assert (est <= 2 * true and est >= true / 2) if true >= 5 else est <= 2, (sql, est, true)
