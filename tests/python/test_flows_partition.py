"""Particle data flows: the partition service and the sift, on the seed's three kinds of data. Whatever
the partition count, the codec and the way producers cut their data, the sift reads back the data
sorted by (id, time) — a plain sort of the same rows — and the seed's two queries answer as they
would on the plain table."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from offload.flows import datasets as D
from offload.flows import partition as F


@pytest.fixture(scope="module")
def tables() -> dict[str, pa.Table]:
    return {name: D.dataset(name).generate(3000, 11) for name in D.DATASETS}


@settings(max_examples=20, deadline=None)
@given(
    st.sampled_from(sorted(D.DATASETS)),
    st.integers(2, 16),
    st.sampled_from(F.CODECS),
    st.lists(st.integers(0, 3000), max_size=4),
    st.integers(50, 5000),
)
def test_partition_then_sift_is_a_plain_sort(
    tables: dict[str, pa.Table], name: str, parts: int, codec: str | None, cuts: list[int], memtable: int
) -> None:
    data, table = D.dataset(name), tables[name]
    part = F.Partitioner(data, parts, rows_hint=table.num_rows, codec=codec)
    sift = F.Sift(data, parts, memtable_rows=memtable, fanout=3)
    edges = [0, *sorted(cuts), table.num_rows]
    for a, b in itertools.pairwise(edges):  # producers cut the data anywhere, empty pieces too
        for i, ipc in enumerate(part.run(F.pack(table.slice(a, b - a)))):
            sift.put(i, ipc)
    expected = table.sort_by([(k, "ascending") for k in data.key])
    assert sift.sorted().equals(expected)
    assert sift.scan(D.BOX[name]).equals(expected.filter(D.BOX[name]))
    assert D.speed_range(sift.sorted(), data) == D.speed_range(table, data)
    assert part.breakdown.rows == table.num_rows
    per_part = [t.sorted().column(data.id_column).to_numpy() for t in sift.trees]
    for lo, hi in itertools.pairwise(per_part):  # partition i holds smaller ids than i + 1
        assert not len(lo) or not len(hi) or lo.max() < hi.min()
    if name == "particles":  # ids 0 .. n - 1: the ranges share them out evenly
        assert min(len(ids) for ids in per_part) > 0.5 * table.num_rows / parts


def test_the_seeds_queries_on_particles(tables: dict[str, pa.Table]) -> None:
    t = tables["particles"]
    inside = t.filter(D.BOX["particles"])
    assert 0.08 < inside.num_rows / t.num_rows < 0.17  # an eighth of uniform positions
    v2 = t["vx"].to_numpy() ** 2 + t["vy"].to_numpy() ** 2 + t["vz"].to_numpy() ** 2
    lo, hi = D.speed_range(t, D.dataset("particles"))
    assert lo == pytest.approx(v2.min()) and hi == pytest.approx(v2.max())


def test_compression_depends_on_the_data(tables: dict[str, pa.Table]) -> None:
    """Random doubles barely compress; tracks with repeated ids, call signs and slow positions do."""
    ratio = {n: len(F.pack(t)) / len(F.pack(t, "zstd")) for n, t in tables.items()}
    assert ratio["particles"] < 1.6 < 2.2 < min(ratio["airplanes"], ratio["ships"])


def test_breakdown_counts_every_step() -> None:
    data = D.dataset("ships")
    t = data.generate(2000, 3)
    plain, packed = F.Partitioner(data, 4), F.Partitioner(data, 4, codec="zstd")
    a, b = plain.run(F.pack(t)), packed.run(F.pack(t))
    assert plain.breakdown.compress == 0 and plain.breakdown.total > 0
    assert sum(map(len, b)) < sum(map(len, a)) == plain.breakdown.bytes_out
    assert set(packed.breakdown.as_dict()) >= {"unpack_s", "split_s", "repack_s", "compress_s", "total_s"}


def test_bad_input_gets_a_clear_error() -> None:
    data = D.dataset("particles")
    with pytest.raises(ValueError, match="unknown data set 'planes'"):
        D.dataset("planes")
    with pytest.raises(ValueError, match="2-16"):
        F.Partitioner(data, 17, rows_hint=10)
    with pytest.raises(ValueError, match="codec"):
        F.Partitioner(data, 2, rows_hint=10, codec="gzip")
    p = F.Partitioner(data, 2, rows_hint=10)
    with pytest.raises(ValueError, match="not an Arrow IPC stream"):
        p.run(b"\x00garbage")
    with pytest.raises(ValueError, match="not particles data"):
        p.run(F.pack(D.dataset("ships").generate(10, 0)))
    with pytest.raises(ValueError, match="partition 2 of 2"):
        F.Sift(data, 2).put(2, F.pack(data.generate(10, 0)))
    assert p.breakdown.rows == 0  # nothing half-counted


def test_ids_outside_the_domain_go_to_the_edge_partitions() -> None:
    p = F.Partitioner(D.dataset("ships"), 4)
    big, small = np.iinfo(np.int64).max, np.iinfo(np.int64).min  # huge ids must not overflow
    ids = np.array([small, 0, 200_000_000, 499_999_999, 799_999_999, 10**12, big], dtype=np.int64)
    assert p.partition_of(ids).tolist() == [0, 0, 0, 1, 3, 3, 3]


def test_the_partition_service_runs_under_a_node_budget(tmp_path: Path) -> None:
    """A real child process under the profile's budget (a cgroup quota where the machine has
    one): the same data and answer sizes as in process, with the budget it ran under."""
    out = F.partition_under("bluefield2", "ships", 5000, 4, "zstd", tmp_path)
    here = F.Partitioner(D.dataset("ships"), 4, 5000, "zstd")
    table = pa.ipc.open_file(F.data_file("ships", 5000, tmp_path)).read_all()
    for b in table.to_batches(max_chunksize=1 << 16):
        here.run(F.pack(pa.Table.from_batches([b])))
    assert out["rows"] == 5000 and out["bytes_out"] == here.breakdown.bytes_out
    assert out["budget"]["profile"] == "bluefield2"
    assert out["budget"]["cpu"]["method"] in ("cgroup-v1-cpu", "cgroup-v2-cpu", "pinned")
    assert out["s_per_gb"] > 0


def test_a_node_that_partitions_and_sifts_reads_back_every_row(tmp_path: Path) -> None:
    out = F.partition_under("core", "airplanes", 6000, 4, None, tmp_path, sift=(256, 3), message_rows=500)
    assert out["rows_sorted"] == 6000 and out["write_amplification"] > 1.0  # compactions ran
    assert out["merge_s"] > 0 and out["sift_gb_per_s"] > 0
    table = pa.ipc.open_file(F.data_file("airplanes", 6000, tmp_path, message_rows=500)).read_all()
    mid, end = out["queries"]["midway"], out["queries"]["end"]
    assert 0 < mid["rows_stored"] < 6000 and end["rows_stored"] == 6000
    assert end["box_rows"] == table.filter(D.BOX["airplanes"]).num_rows
    assert (end["speed2_min"], end["speed2_max"]) == D.speed_range(table, D.dataset("airplanes"))


def test_the_cli_reports_each_step_as_json(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from offload.cli import app

    args = ["flows", "partition", "--datasets", "particles", "--rows", "3000", "--parts", "2", "--codecs",
            "none,lz4", "--profiles", "core", "--work", str(tmp_path), "--plot", str(tmp_path / "p.png"),
            "--json"]  # fmt: skip
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)  # progress goes to stderr
    assert [(x["dataset"], x["codec"]) for x in rows] == [("particles", "none"), ("particles", "lz4")]
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bad = CliRunner().invoke(app, [*args[:3], "planes", *args[4:]])
    assert bad.exit_code != 0 and "unknown data set planes" in bad.output


def test_the_sift_cli_reads_every_row_back(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from offload.cli import app

    args = ["flows", "sift", "--datasets", "ships", "--rows", "4000", "--parts", "2", "--profiles", "core",
            "--memtable", "100", "--work", str(tmp_path)]  # fmt: skip
    r = CliRunner().invoke(app, [*args, "--json"])
    assert r.exit_code == 0, r.output
    (run,) = json.loads(r.stdout)
    assert run["rows_sorted"] == 4000 and run["profile"] == "core"
    table = CliRunner().invoke(app, args)
    assert table.exit_code == 0 and "partition and sift: 2 partitions" in table.output
    bad = CliRunner().invoke(app, [*args, "--fanout", "1"])
    assert bad.exit_code == 2 and "--fanout" in bad.output and "greater than or equal to 2" in bad.output
