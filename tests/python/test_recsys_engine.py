"""offload.recsys.engine: every strategy in both modes against a plain numpy DLRM that reads the
table files itself (the documented layout), on random models and traces — empty bags, repeats,
last rows, tables that are not a whole number of pages — and the errors a user can meet."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from offload.cli import app
from offload.recsys import engine as E
from offload.recsys import traces as T
from offload.recsys.models import SPECS, ModelSpec

HEADER = 4096


def table_array(path: Path) -> np.ndarray:
    raw = path.read_bytes()
    dim = int.from_bytes(raw[12:16], "little")
    rows = int.from_bytes(raw[16:24], "little")
    stride = int.from_bytes(raw[24:28], "little")
    body = np.frombuffer(raw, dtype=np.uint8, offset=HEADER, count=rows * stride).reshape(rows, stride)
    return body[:, : dim * 4].copy().view("<f4")


def reference(d: E.ModelDir, dense: np.ndarray, offsets: list, indices: list) -> np.ndarray:
    model = d.model()
    tabs = [table_array(p) for p in d.table_paths]
    x = dense.astype(np.float64)
    for wt, b in model.layers("bot"):
        x = np.maximum(x @ wt.T.astype(np.float64) + b, 0.0)
    parts = [x]
    for t, (o, ix) in enumerate(zip(offsets, indices, strict=True)):
        pooled = np.zeros((dense.shape[0], d.spec.dim))
        for s in range(dense.shape[0]):
            for r in ix[o[s] : o[s + 1]]:
                pooled[s] += tabs[t][r]
        parts.append(pooled)
    z = np.concatenate(parts, axis=1)
    top = model.layers("top")
    for i, (wt, b) in enumerate(top):
        z = z @ wt.T.astype(np.float64) + b
        if i + 1 < len(top):
            z = np.maximum(z, 0.0)
    return (1.0 / (1.0 + np.exp(-z[:, 0]))).astype(np.float32)


def small_spec(tables: int, dim: int, dense: int) -> ModelSpec:
    base = SPECS["rmc1"]
    return ModelSpec(
        name="tiny",
        kind="dlrm",
        dense_width=dense,
        bottom=[8, dim],
        top=[6, 1],
        dim=dim,
        tables=tables,
        lookups=base.lookups,
    )


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> E.ModelDir:
    # 1,000 rows × 128 B: the last page of each table is partly used.
    return E.create(tmp_path_factory.mktemp("tiny"), small_spec(3, 32, 5), [1000, 37, 1], seed=3)


def awkward_batch(rows: list[int], batch: int, rng: np.random.Generator) -> tuple[list, list]:
    offsets, indices = [], []
    for n in rows:
        lens = rng.integers(0, 7, size=batch)
        lens[1 % batch] = 0  # an empty bag
        ix = rng.integers(0, n, size=int(lens.sum()))
        if ix.size >= 2:
            ix[0] = n - 1  # the last row
            ix[1] = ix[0]  # repeated
        offsets.append(np.concatenate([[0], np.cumsum(lens)]).astype(np.int64))
        indices.append(ix.astype(np.int64))
    return offsets, indices


@pytest.mark.parametrize("mode", E.MODES)
@pytest.mark.parametrize("strategy", E.STRATEGIES)
def test_every_strategy_matches_the_reference(tiny: E.ModelDir, strategy: str, mode: str) -> None:
    rng = np.random.default_rng(11)
    dense = rng.standard_normal((6, 5)).astype(np.float32)
    offs, idx = awkward_batch(tiny.rows, 6, rng)
    want = reference(tiny, dense, offs, idx)
    eng = E.Engine(tiny, strategy, mode, host_cache_vectors=4, device_mlp_cycles=(100, 50, 200))
    for _ in range(2):
        got, info = eng.infer(dense, offs, idx)
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6)
        assert info["io"]["lookups"] == sum(len(i) for i in idx)
        assert info["latency_s"] > 0


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    tables=st.integers(1, 3),
    dim=st.sampled_from([4, 16, 48]),
    rows=st.lists(st.integers(1, 400), min_size=3, max_size=3),
    batch=st.integers(1, 5),
    seed=st.integers(0, 10_000),
)
def test_random_models_and_traces(
    tmp_path: Path, tables: int, dim: int, rows: list[int], batch: int, seed: int
) -> None:
    d = E.create(tmp_path / f"m{seed}-{tables}-{dim}", small_spec(tables, dim, 4), rows[:tables], seed=seed)
    tr = T.generate_trace(
        T.TraceConfig(
            rows=rows[:tables], batch_size=batch, lookups=3, lookups_dist="poisson", dense_width=4, seed=seed
        ),
        1,
    )
    b = tr.batches[0]
    want = reference(d, b.dense, b.offsets, b.indices)
    for strategy in ("ssd-s", "emb-vectorsum", "recssd", "rm-ssd"):
        got, _ = E.Engine(d, strategy, "flash").infer(b.dense, b.offsets, b.indices)
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6)


def test_bad_inputs_name_table_and_position(tiny: E.ModelDir) -> None:
    eng = E.Engine(tiny, "dram")
    dense = np.zeros((2, 5), np.float32)
    ok = [np.array([0, 1, 2]), np.array([0, 0, 1]), np.array([0, 0, 0])]
    good = [np.array([0, 999]), np.array([36]), np.array([], np.int64)]
    with pytest.raises(
        E.RecsysError, match=r"table 1: indices\[0\]: row 37 out of range for a table of 37 rows"
    ):
        eng.infer(dense, ok, [good[0], np.array([37]), good[2]])
    with pytest.raises(E.RecsysError, match=r"table 0: offsets\[2\]: 1 after 2"):
        eng.infer(dense, [np.array([0, 2, 1]), ok[1], ok[2]], good)
    with pytest.raises(E.RecsysError, match="inputs for 2 tables, the model has 3"):
        eng.infer(dense, ok[:2], good[:2])
    with pytest.raises(E.RecsysError, match="dense input has 8 values"):
        eng.infer(np.zeros((2, 4), np.float32), ok, good)


def test_damaged_tables_are_refused(tiny: E.ModelDir, tmp_path: Path) -> None:
    import shutil

    d = tmp_path / "copy"
    shutil.copytree(tiny.path, d)
    t0 = d / "tables" / "t000.emb"
    with t0.open("r+b") as f:
        f.truncate(t0.stat().st_size - 4096)
    with pytest.raises(E.RecsysError, match="truncated"):
        E.Engine(E.ModelDir.open(d), "dram")
    t0.write_bytes(b"root:x:0:0:root:/root:/bin/bash\n")
    with pytest.raises(E.RecsysError, match="not a usable embedding table"):
        E.Engine(E.ModelDir.open(d), "dram")


def test_cli_create_synth_infer(tmp_path: Path) -> None:
    r = CliRunner()
    m = tmp_path / "m"
    res = r.invoke(app, ["recsys", "create", "--out", str(m), "--model", "rmc1", "--size", "2M"])
    assert res.exit_code == 0, res.output
    tr = tmp_path / "t.npz"
    res = r.invoke(
        app, ["recsys", "synth", "-m", str(m), "-o", str(tr), "--batches", "2", "--batch-size", "4"]
    )
    assert res.exit_code == 0, res.output
    outs = {}
    for s in ("dram", "emb-vectorsum", "rm-ssd"):
        res = r.invoke(
            app, ["recsys", "infer", "-m", str(m), "-t", str(tr), "-s", s, "--mode", "flash", "--json"]
        )
        assert res.exit_code == 0, res.output
        outs[s] = json.loads(res.stdout)  # progress goes to stderr
    assert outs["dram"]["samples"] == 8
    assert outs["dram"]["mean_prediction"] == pytest.approx(outs["rm-ssd"]["mean_prediction"], rel=1e-5)
    # Vector reads fetch only what is looked up (each distinct row once per batch).
    assert 0 < outs["emb-vectorsum"]["read_amplification"] <= 1.0
    res = r.invoke(app, ["recsys", "infer", "-m", str(m), "-t", str(tr), "-s", "nope"])
    assert res.exit_code == 2 and "unknown strategy 'nope'" in res.output
