"""Arrow string columns reach the native encoder in place (Arrow's large_string layout): the
answers must equal those for plain lists of str, whatever the slicing, chunking or text."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from offload import rules

MINI = Path(__file__).resolve().parents[2] / "data" / "examples" / "mct-mini"


@pytest.fixture(scope="module")
def engine() -> rules.CompiledRules:
    return rules.compile(rules.load(MINI / "ruletype.toml", MINI / "rules.csv"), "fast")


def queries(n: int) -> dict[str, list[str]]:
    rng = np.random.default_rng(7)
    pick = lambda xs: [str(x) for x in rng.choice(xs, n)]  # noqa: E731
    return {
        "CTN_TYPE": pick(["II", "DD", "DI", "ÜÜ"]),
        "APT": pick(["ZRH", "FRA", "CDG", "Zürich"]),
        "IN_CRR": pick(["LX", "LH", "UA", ""]),
        "OUT_CRR": pick(["LX", "LH", "AF"]),
        "OUT_FLT_RG": pick(["1", "40", "99", "100", "1234"]),
        "VALIDITY": pick(["15MAR2026", "2026-12-01", "28FEB2027", "01MAR2027"]),
    }


def test_arrow_columns_answer_like_lists(engine: rules.CompiledRules) -> None:
    q = queries(500)
    expected = engine.match(q)
    table = pa.table(q)
    for variant in (
        table,
        pa.table({k: pa.array(v, type=pa.large_string()) for k, v in q.items()}),
        pa.table({k: pa.chunked_array([v[:123], v[123:]]) for k, v in q.items()}),
    ):
        got = engine.match(variant)
        assert np.array_equal(got.rule, expected.rule)
    # a slice has a non-zero offset into the shared buffers
    sliced = table.slice(100, 250)
    got = engine.match(sliced)
    assert np.array_equal(got.rule, expected.rule[100:350])
    assert np.array_equal(engine.match({k: np.array(v[100:350]) for k, v in q.items()}).rule, got.rule)


def test_null_query_values_are_refused(engine: rules.CompiledRules) -> None:
    q: dict[str, list[str | None]] = {k: list(v) for k, v in queries(5).items()}
    q["APT"][2] = None
    with pytest.raises(ValueError, match=r"query 2 criterion APT: missing value \(null\)"):
        engine.match(pa.table(q))


def test_nfa_level_orders_answer_alike() -> None:
    rs = rules.load(MINI / "ruletype.toml", MINI / "rules.csv")
    q = queries(300)
    expected = rules.compile(rs, "linear").match(q).rule
    for order in rules.NFA_ORDERS:
        eng = rules.compile(rs, f"nfa:{order}")
        assert eng.stats()["order"] == order
        assert np.array_equal(eng.match(q).rule, expected)
    with pytest.raises(ValueError, match="unknown matcher"):
        rules.compile(rs, "nfa:sideways")
