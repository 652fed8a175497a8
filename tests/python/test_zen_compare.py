"""Fast checks of benches/zen_compare.py: cell translation and one tiny end-to-end run."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

zen = pytest.importorskip("zen")

from offload.rules import synth as S  # noqa: E402

SCRIPT = Path(__file__).resolve().parents[2] / "benches" / "zen_compare.py"


@pytest.fixture(scope="module")
def zc() -> ModuleType:
    spec = importlib.util.spec_from_file_location("zen_compare", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["zen_compare"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_day_number(zc: ModuleType) -> None:
    assert zc.day_number("01JAN1970") == 0
    assert zc.day_number("02jan1970") == 1
    assert zc.day_number("1970-01-03") == 2
    assert zc.day_number("29FEB2024") == 19782


@pytest.mark.parametrize("value", ["AA", "São Paulo", 'a"b', "a'b", 'a\'b"c"', "x\\y", '"'])
def test_equality_cell_matches_only_its_value(zc: ModuleType, value: str) -> None:
    cell = zc.zen_cell("equ", value)
    assert zen.evaluate_unary_expression(cell, {"$": value})
    assert not zen.evaluate_unary_expression(cell, {"$": value + "z"})


def test_range_cells_are_inclusive(zc: ModuleType) -> None:
    cell = zc.zen_cell("int_range", "10..20")
    assert [zen.evaluate_unary_expression(cell, {"$": x}) for x in (9, 10, 20, 21)] == [
        False,
        True,
        True,
        False,
    ]
    cell = zc.zen_cell("date_range", "01JAN2019..31DEC2019")
    lo, hi = zc.day_number("01JAN2019"), zc.day_number("31DEC2019")
    assert [zen.evaluate_unary_expression(cell, {"$": x}) for x in (lo - 1, lo, hi, hi + 1)] == [
        False,
        True,
        True,
        False,
    ]
    assert zc.zen_cell("equ", "") == ""


def _args(tmp_path: Path, out: Path) -> list[str]:
    return [
        "--ruletype",
        str(tmp_path / "ruletype.xml"),
        "--rules",
        str(tmp_path / "rules.csv"),
        "--queries",
        str(tmp_path / "queries.csv"),
        "--zen-queries",
        "60",
        "--zen-slow-queries",
        "5",
        "--min-timed-queries",
        "2000",
        "--repeats",
        "3",
        "--out",
        str(out),
        "--quiet",
    ]


def test_end_to_end_tiny(zc: ModuleType, tmp_path: Path) -> None:
    S.synth(tmp_path, n_rules=300, n_requests=5, seed=1)
    out = tmp_path / "zen_compare.json"
    rc = zc.main(_args(tmp_path, out))
    assert rc == 0
    report = json.loads(out.read_text())
    assert report["mismatches"] == 0
    assert report["zen_queries_checked"] == min(60, report["queries"]) > 0
    assert report["fast_nfa_disagreements"] == 0
    for key in ("zen", "zen_internal", "fast", "fast_zen_sample", "nfa"):
        assert report["ns_per_query"][key] > 0
    assert report["ratios"]["fast_over_zen"] > 1


def test_wrong_row_order_is_caught(zc: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows in input order instead of by score: zen's first hit is not our winner -> exit 1."""
    S.synth(tmp_path, n_rules=300, n_requests=5, seed=1)
    monkeypatch.setattr(zc, "rule_order", lambda rs: list(range(len(rs))))
    out = tmp_path / "zen_compare.json"
    assert zc.main(_args(tmp_path, out)) == 1
    report = json.loads(out.read_text())
    assert report["mismatches"] > 0 and report["mismatch_examples"]
