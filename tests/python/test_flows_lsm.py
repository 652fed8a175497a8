"""The sift's LSM tree against a plain reference: whatever arrives, in any batches, with any
memtable size and fanout, the tree reads as the newest row of each key sorted by the key — while
data keeps arriving, and across flushes and compactions."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from offload.flows.lsm import Lsm

SCHEMA = pa.schema([("id", pa.int64()), ("t", pa.float64()), ("v", pa.float64())])

rows = st.tuples(st.integers(-3, 40), st.sampled_from([0.0, 0.5, 1.0, -2.5]), st.floats(-1e300, 1e300))
batches = st.lists(st.lists(rows, max_size=30), max_size=12)


def _table(rs: list[tuple[int, float, float]]) -> pa.Table:
    cols = {name: [r[i] for r in rs] for i, name in enumerate(SCHEMA.names)}
    return pa.table(cols, schema=SCHEMA)


def _reference(arrived: list[tuple[int, float, float]]) -> pa.Table:
    newest: dict[tuple[int, float], float] = {}
    for i, t, v in arrived:
        newest[(i, t)] = v  # a later write of the same key replaces the earlier one
    return _table([(i, t, newest[(i, t)]) for i, t in sorted(newest)])


@settings(max_examples=60, deadline=None)
@given(batches, st.integers(1, 25), st.integers(2, 4))
def test_the_tree_reads_as_the_newest_row_of_each_key_in_key_order(
    bs: list[list[tuple[int, float, float]]], memtable_rows: int, fanout: int
) -> None:
    tree = Lsm(SCHEMA, memtable_rows=memtable_rows, fanout=fanout)
    arrived: list[tuple[int, float, float]] = []
    for b in bs:
        tree.put(_table(b))
        arrived += b
        ref = _reference(arrived)
        assert tree.sorted().equals(ref)  # queryable while data arrives
        if arrived:
            some = arrived[len(arrived) // 2][0]
            assert tree.get({"id": some}).equals(ref.filter(pc.field("id") == some))
            one = (pc.field("id") == some) & (pc.field("t") == 0.5)
            assert tree.get({"id": some, "t": 0.5}).equals(ref.filter(one))
        box = (pc.field("v") < 0) & (pc.field("t") >= 0)
        assert tree.scan(box).equals(ref.filter(box))
    tree.flush()
    assert tree.sorted().equals(_reference(arrived))
    assert tree.stats.rows_in == len(arrived)


def test_compaction_merges_a_full_level_into_one_run_on_the_next() -> None:
    tree = Lsm(SCHEMA, memtable_rows=10, fanout=3)
    for start in range(0, 90, 10):  # nine flushes of ten new keys each
        tree.put(_table([(i, 0.0, float(i)) for i in range(start, start + 10)]))
    # 9 flushes: three level-0 compactions into 30-row runs, and those three into one of 90
    assert tree.levels() == [[], [], [90]]
    assert tree.stats.flushes == 9 and tree.stats.compactions == 4
    assert tree.stats.write_amplification == pytest.approx((90 + 90 + 90) / 90)
    assert tree.sorted().column("id").to_pylist() == list(range(90))


def test_a_key_written_again_reads_as_its_last_write_across_runs() -> None:
    tree = Lsm(SCHEMA, memtable_rows=2, fanout=2)
    tree.put(_table([(1, 0.0, 1.0), (2, 0.0, 2.0)]))  # a run
    tree.put(_table([(1, 0.0, 10.0)]))  # in the memtable
    assert tree.get({"id": 1}).column("v").to_pylist() == [10.0]
    tree.put(_table([(3, 0.0, 3.0)]))  # flush: two runs, compacted
    assert tree.sorted().column("v").to_pylist() == [10.0, 2.0, 3.0]
    assert tree.stats.duplicates_dropped == 1


def test_bad_input_is_refused_and_nothing_accepted_is_lost() -> None:
    with pytest.raises(ValueError, match="sort key"):
        Lsm(SCHEMA, key=("id", "nope"))
    with pytest.raises(ValueError, match="fanout"):
        Lsm(SCHEMA, fanout=1)
    tree = Lsm(SCHEMA, memtable_rows=4)
    tree.put(_table([(1, 0.0, 1.0)]))
    with pytest.raises(ValueError, match="do not fit"):
        tree.put(pa.table({"id": [2], "x": [0.0]}))
    with pytest.raises(ValueError, match="prefix of the key"):
        tree.get({"t": 0.0})
    assert tree.sorted().equals(_table([(1, 0.0, 1.0)]))
    assert Lsm(SCHEMA).sorted().num_rows == 0 and Lsm(SCHEMA).get({"id": 1}).num_rows == 0
