"""The metrics' files and words: the scan's Parquet whole and verified, a progress line on stderr
while the MBWU runs, and one name per concept in the options."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from conftest import half_written
from offload.cli import app
from offload.files import WriteError
from offload.metrics import mbwu as M

run = CliRunner().invoke


def test_a_full_disk_leaves_no_half_written_scan_data(small_tmpfs: Path) -> None:
    with pytest.raises(WriteError, match="no space left") as e:
        M.make_scan_data(small_tmpfs / "scan", rows=1_500_000, files=3)
    assert str(small_tmpfs) in str(e.value)
    assert not (small_tmpfs / "scan").exists() and not half_written(small_tmpfs)


def test_a_damaged_scan_file_is_refused(tmp_path: Path) -> None:
    M.make_scan_data(tmp_path / "scan", rows=20_000, files=2)
    path = tmp_path / "scan" / "part-001.parquet"
    col = pq.ParquetFile(path).metadata.row_group(0).column(2)  # value: random doubles
    b = bytearray(path.read_bytes())
    span = np.arange(col.dictionary_page_offset + 512, col.data_page_offset - 64)
    for i in np.random.default_rng(0).choice(span, 64, False):
        b[i] ^= 0xFF
    path.write_bytes(bytes(b))
    with pytest.raises(ValueError, match=r"part-001\.parquet.*checksum"):
        M.run_scan_step(tmp_path / "scan", 1, seconds=0.1, cold=False)


def test_mbwu_says_what_it_does_on_stderr_and_json_stays_clean(tmp_path: Path) -> None:
    args = ["metrics", "mbwu", "--workloads", "arrow-scan", "--scan-rows", "20000", "--threads", "1",
            "--seconds", "0.5", "--bucket", "0.25", "--dir", str(tmp_path / "w"), "--json"]  # fmt: skip
    r = run(app, args)
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["workloads"]["arrow-scan"]["mbwu"] > 0
    assert "write the Parquet data set" in r.stderr and "arrow-scan" in r.stderr, r.stderr


def test_one_name_per_concept() -> None:
    """A link rate is `--link RATE` (100mbit, 1gbit); a window of samples and an exposure window
    of failures have different names. The old spellings still work, hidden."""
    helps = {c: run(app, ["metrics", c, "--help"], env={"COLUMNS": "200"}).output
             for c in ("headroom", "availability", "mbwu")}  # fmt: skip
    assert "--link" in helps["headroom"] and "--rate-mbit" not in helps["headroom"]
    assert "--exposure" in helps["availability"] and "--window" not in helps["availability"]
    assert "--steady-samples" in helps["mbwu"] and "--window" not in helps["mbwu"]
    new = run(app, ["metrics", "availability", "--exposure", "0.01", "--json"])
    old = run(app, ["metrics", "availability", "--window", "0.01", "--json"])
    assert new.exit_code == 0 and json.loads(new.output) == json.loads(old.output)


def test_a_full_disk_during_the_precondition_is_one_error(small_tmpfs: Path) -> None:
    root = small_tmpfs / "kv"
    with pytest.raises(WriteError, match="no space left") as e:
        M.precondition(M.KvLayout(root, 20_000, 1), overwrite=0)
    assert str(root) in str(e.value) and not root.exists()
