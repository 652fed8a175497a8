"""Where compression pays on a flow: the closed-form rate below which a codec wins, checked against
trying the rates; the engine what-if from the presets; the CLI on the committed benchmark."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from offload.flows import compression as C

ROOT = Path(__file__).resolve().parents[2]
PARTITION = ROOT / "benches" / "results" / "flows" / "partition.json"

pos = st.floats(0.01, 100.0)


@given(pos, st.floats(0.0, 100.0), pos, st.floats(0.01, 1.0), st.floats(1e6, 1e12))
def test_pays_below_is_where_the_codec_starts_to_lose(
    t0: float, extra: float, b0: float, share: float, rate: float
) -> None:
    """A codec adds node time (``extra``) and ships a ``share`` of the bytes: it is faster than
    shipping plain exactly on the links slower than pays_below (ties aside)."""
    plain = C.Way("d", "none", None, 1.0, t0, b0 * 1e9)
    way = C.Way("d", "zstd", None, 1.0, t0 + extra, b0 * 1e9 * share)
    below = C.pays_below(way, plain)
    diff = way.seconds_per_gb(rate) - plain.seconds_per_gb(rate)
    if abs(diff) > 1e-9 * plain.seconds_per_gb(rate) and abs(rate - below) > 1e-9 * rate:
        assert (diff < 0) == (rate < below)


def test_a_codec_that_costs_nothing_always_pays_and_one_that_saves_nothing_never() -> None:
    plain = C.Way("d", "none", None, 1.0, 10.0, 1e9)
    assert C.pays_below(C.Way("d", "lz4", "e", 8.6, 9.0, 0.5e9), plain) == float("inf")
    assert C.pays_below(C.Way("d", "lz4", None, 1.0, 12.0, 1e9), plain) == 0.0
    assert C.pays_below(C.Way("d", "lz4", None, 1.0, 20.0, 0.5e9), plain) == pytest.approx(8e9 / 20.0)


def _runs() -> list[dict]:
    def run(codec: str, total: float, compress: float, out: float) -> dict:
        return {"dataset": "ships", "profile": "bluefield2", "codec": codec, "total_s": total,
                "compress_s": compress, "bytes_in": 2e9, "bytes_out": out}  # fmt: skip

    return [run("none", 20.0, 0.0, 2e9), run("zstd", 44.0, 22.0, 1e9)]


def test_the_engine_divides_only_the_compress_step() -> None:
    ways = {w.label: w for w in C.ways(_runs(), "bluefield2", "bitar_bluefield2")}
    assert set(ways) == {"none", "zstd", "zstd, engine ×1.9", "zstd, engine ×8.6"}
    assert ways["none"].node_s_per_gb == 10.0
    assert ways["zstd"].node_s_per_gb == 10.0 + 11.0  # the plain run's work plus compressing
    assert ways["zstd, engine ×8.6"].node_s_per_gb == pytest.approx(10.0 + 11.0 / 8.6)
    t = C.table(list(ways.values()), [1e8, 1e11])
    assert t[0]["best"] == ["zstd, engine ×8.6", "none"]  # a slow link wants fewer bytes
    assert C.engines()["bitar_bluefield2"]["source_text"].startswith("Bitar")


def test_bad_results_are_refused_clearly() -> None:
    with pytest.raises(ValueError, match="unknown engine 'nope'"):
        C.ways(_runs(), "bluefield2", "nope")
    with pytest.raises(ValueError, match="no partition runs on 'core'"):
        C.ways(_runs(), "core")
    with pytest.raises(ValueError, match="needs a run without a codec"):
        C.ways(_runs()[1:], "bluefield2")


def test_the_cli_reads_the_benchmark(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from offload.cli import app

    args = ["flows", "compression", "--results", str(PARTITION), "--links", "100mbit,10gbit", "--json"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert [d["dataset"] for d in doc["datasets"]] == ["particles", "airplanes", "ships"]
    assert all(len(d["best"]) == 2 for d in doc["datasets"])
    missing = CliRunner().invoke(app, ["flows", "compression", "--results", str(tmp_path / "no.json")])
    assert missing.exit_code != 0 and "offload flows partition --json" in missing.output


def test_the_host_reading_back_is_a_third_stage() -> None:
    """Decompressing on the host overlaps with the node and the link: where it is the slowest
    stage, it sets the rate below which the codec pays."""
    runs = _runs() + [
        {"dataset": "ships", "profile": "core", "codec": c, "total_s": 1.0, "compress_s": 0.0,
         "bytes_in": 2e9, "bytes_out": 2e9, "decode_s": d} for c, d in (("none", 2.0), ("zstd", 60.0))
    ]  # fmt: skip
    ways = {w.label: w for w in C.ways(runs, "bluefield2", None, "core")}
    assert ways["zstd"].host_s_per_gb == 30.0 and ways["none"].host_s_per_gb == 1.0
    assert ways["zstd"].busy_s_per_gb == 30.0  # the host, slower than the node's 21
    assert C.pays_below(ways["zstd"], ways["none"]) == pytest.approx(
        1e9 * 8 / 30.0
    )  # bytes out per GB of input, plain
    assert ways["zstd"].seconds_per_gb(1e12) == 30.0
    without = {w.label: w for w in C.ways(runs, "bluefield2")}
    assert without["zstd"].host_s_per_gb == 0.0


def test_the_gpu_codec_says_why_it_cannot_run_or_gives_the_bytes_back() -> None:
    import pyarrow as pa

    from offload.flows import datasets as D
    from offload.flows import gpucodec as G

    table = D.dataset("ships").generate(2000, 0)
    bufs = G.column_buffers(table)
    assert set(bufs) == set(table.column_names)
    assert bufs["mmsi"].nbytes == 8 * 2000 and bufs["status"].nbytes == 2000
    assert G.column_buffers(pa.table({"x": pa.array([], pa.int64())}))["x"].nbytes == 0
    mixed = pa.table({"f": [1.5, 2.0], "i": pa.array([1, 2], pa.int16()), "n": [None, 2], "s": ["a", "b"]})
    types = G.integer_types(mixed)
    assert types == {"f": "<u8", "i": "<u2", "n": "|u1", "s": "|u1"}
    a = np.arange(10, dtype=np.uint8)
    assert G.first_difference(a.copy(), a) is None
    assert G.first_difference(a[:9], a) == "decoded 9 bytes for 10"
    b = a.copy()
    b[[3, 7]] = 0
    assert G.first_difference(b, a) == "2 bytes differ, the first at byte 3"
    why = G.unavailable_reason()
    if why is not None:
        assert "GPU" in why or "nvcomp" in why
        with pytest.raises(RuntimeError, match=why.split(" (")[0]):
            G.measure(table)
        pytest.skip(f"the GPU codec's run needs a GPU: {why}")
    r = G.measure(table, repeats=1)  # on a GPU: every algorithm decodes to the same bytes
    assert set(r["algorithms"]) == set(G.ALGORITHMS) and r["bytes_in"] == sum(b.nbytes for b in bufs.values())
