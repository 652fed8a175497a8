"""Missing query values in the Python API: one rule for every input type.

A query value that is missing (None, a float NaN, pandas NA / NaT, NumPy NaT, an Arrow null)
is an error naming the query (0-based position) and the criterion, raised as ValueError: it
never turns into the text "None" / "nan" (which a rule may name) nor into an unknown value
(which wildcard rules match). docs/rules.md, "Missing values".
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from offload import rules

EXAMPLE = Path(__file__).resolve().parents[2] / "data" / "examples" / "mct-mini"
CODES = ("A", "N", "D")
RULETYPE = """code = "MISSING"
description = "missing-value tests"
[[criterion]]
code = "A"
kind = "equ"
mandatory = false
weight = 4
[[criterion]]
code = "N"
kind = "int_range"
mandatory = false
weight = 2
[[criterion]]
code = "D"
kind = "date_range"
mandatory = false
weight = 1
"""
# Rules whose values are the texts a missing value used to become, and a catch-all.
RULES = """RULE_ID,A,N,D,CONTENT
none,None,,,1
nan,nan,,,2
na,<NA>,,,3
nat,NaT,,,4
any,,,,9
"""


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> rules.CompiledRules:
    d: Path = tmp_path_factory.mktemp("missing")
    (d / "ruletype.toml").write_text(RULETYPE)
    (d / "rules.csv").write_text(RULES)
    return rules.compile(rules.load(d / "ruletype.toml", d / "rules.csv"), "fast")


def valid(n: int) -> dict[str, list[Any]]:
    return {
        "A": [f"x{i}" for i in range(n)],
        "N": list(range(100, 100 + n)),
        "D": [dt.date(2026, 1, 1) + dt.timedelta(days=i) for i in range(n)],
    }


# How a column can be given: name -> (criteria it suits, builder from a list with markers).
def _obj(v: list[Any]) -> np.ndarray:
    a = np.empty(len(v), dtype=object)
    a[:] = v
    return a


def _text(x: Any) -> Any:
    """A value as text; a missing-value marker as it is."""
    return x if x is None or isinstance(x, (float, np.floating)) else str(x)


def _np_date(v: list[Any]) -> np.ndarray:
    return np.array([np.datetime64("NaT", "D") if x is MISSING_DATE else np.datetime64(x, "D") for x in v])


def _pd_date(v: list[Any]) -> pd.Series:
    return pd.Series(pd.to_datetime([None if x is MISSING_DATE else x for x in v]))


MISSING_DATE = object()  # placeholder: the date containers spell a missing date their own way

CONTAINERS: dict[str, tuple[str, Any]] = {
    "list": ("AND", lambda v: [_text(x) for x in v]),
    "numpy_object": ("AND", lambda v: _obj([_text(x) for x in v])),
    "numpy_float": ("N", lambda v: np.array([np.nan if x is None else float(x) for x in v])),
    "numpy_datetime": ("D", _np_date),
    "pandas_object": ("A", lambda v: pd.Series(_obj([x if x is None else str(x) for x in v]), dtype=object)),
    "pandas_string": ("A", lambda v: pd.Series([None if x is None else str(x) for x in v], dtype="string")),
    "pandas_str": ("A", lambda v: pd.Series([None if x is None else str(x) for x in v])),
    "pandas_category": (
        "A",
        lambda v: pd.Series([None if x is None else str(x) for x in v], dtype="category"),
    ),
    "pandas_Int64": ("N", lambda v: pd.Series([pd.NA if x is None else x for x in v], dtype="Int64")),
    "pandas_datetime": ("D", _pd_date),
    "pandas_na_object": ("A", lambda v: pd.Series(_obj([pd.NA if x is None else str(x) for x in v]))),
    "pandas_nat_object": ("A", lambda v: pd.Series(_obj([pd.NaT if x is None else str(x) for x in v]))),
    "arrow_string": ("A", lambda v: pa.array([None if x is None else str(x) for x in v], pa.string())),
    "arrow_large_string": (
        "A",
        lambda v: pa.array([None if x is None else str(x) for x in v], pa.large_string()),
    ),
    "arrow_int": ("N", lambda v: pa.array([None if x is None else x for x in v], pa.int32())),
    "arrow_float": (
        "N",
        lambda v: pa.array([float("nan") if x is None else float(x) for x in v], pa.float64()),
    ),
    "arrow_date": ("D", lambda v: pa.array([None if x is MISSING_DATE else x for x in v], pa.date32())),
    "arrow_chunked": (
        "A",
        lambda v: pa.chunked_array(
            [pa.array([None if x is None else str(x) for x in part], pa.string()) for part in (v[:1], v[1:])]
        ),
    ),
}
# The markers a plain list / object array can hold.
LIST_MARKERS = [None, float("nan"), np.float64("nan"), np.float32("nan")]


@st.composite
def batches(draw: st.DrawFn) -> tuple[Any, int, str]:
    """A batch with missing values in one column; returns (batch, first missing row, column)."""
    container = draw(st.sampled_from(sorted(CONTAINERS)))
    suits, build = CONTAINERS[container]
    col = draw(st.sampled_from(sorted(suits)))
    n = draw(st.integers(1, 40))
    rows = draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=n))
    cols: dict[str, Any] = valid(n)
    values = list(cols[col])
    if col == "N":
        values = [int(x) for x in values]
    for r in rows:
        if col == "D" and container in ("numpy_datetime", "pandas_datetime", "arrow_date"):
            values[r] = MISSING_DATE
        elif container in ("list", "numpy_object"):
            values[r] = draw(st.sampled_from(LIST_MARKERS))
        else:
            values[r] = None
    cols[col] = build(values)
    for other in CODES:
        if other != col:
            cols[other] = [str(x) for x in cols[other]]
    whole = draw(st.sampled_from(["dict", "list_of_columns", "pandas", "arrow_table"]))
    if whole == "pandas" and container.startswith(("pandas", "numpy", "list")):
        batch: Any = pd.DataFrame({c: cols[c] for c in CODES})
    elif whole == "arrow_table" and container.startswith("arrow"):
        batch = pa.table({c: cols[c] if c == col else pa.array(cols[c]) for c in CODES})
    elif whole == "list_of_columns":
        batch = [cols[c] for c in CODES]
    else:
        batch = cols
    return batch, min(rows), col


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=batches())
def test_missing_value_is_an_error_naming_query_and_criterion(
    engine: rules.CompiledRules, case: tuple[Any, int, str]
) -> None:
    batch, row, col = case
    for call in (engine.encode, engine.match):
        with pytest.raises(ValueError, match=rf"^query {row} criterion {col}: missing value \(") as e:
            call(batch)
        assert not isinstance(e.value, rules.RuleError)
        assert "\n" not in str(e.value)


def test_missing_values_never_match_rules_naming_their_text(engine: rules.CompiledRules) -> None:
    """The bug: None matched rule "none", NaN rule "nan", pandas NA the catch-all."""
    base = {"N": ["1"], "D": ["2026-01-01"]}
    for v in (None, float("nan"), pd.NA, pd.NaT, np.datetime64("NaT")):
        with pytest.raises(ValueError, match="query 0 criterion A: missing value"):
            engine.match({**base, "A": [v]})
    with pytest.raises(ValueError, match=r"query 0 criterion A: missing value \(null\)"):
        engine.match(pa.table({"A": pa.array([None], pa.string()), "N": ["1"], "D": ["2026-01-01"]}))


def test_the_texts_are_values(engine: rules.CompiledRules) -> None:
    """The strings "None" and "nan" are ordinary values: a rule naming them matches them."""
    res = engine.match({"A": ["None", "nan", "<NA>", "NaT", ""], "N": ["1"] * 5, "D": ["2026-01-01"] * 5})
    assert res.content.tolist() == [1, 2, 3, 4, 9]


def test_count_of_missing_values_in_the_message(engine: rules.CompiledRules) -> None:
    with pytest.raises(ValueError) as e:
        engine.match({"A": ["a", None, "b", None, None], "N": ["1"] * 5, "D": ["2026-01-01"] * 5})
    assert re.match(
        r"query 1 criterion A: missing value \(None\); 3 queries lack a value for A", str(e.value)
    )


def test_explain_refuses_missing_values(engine: rules.CompiledRules) -> None:
    for values in ({"A": None, "N": "1", "D": "2026-01-01"}, ["x", float("nan"), "2026-01-01"]):
        with pytest.raises(ValueError, match=r"criterion (A|N): missing value"):
            engine.explain(values)  # type: ignore[arg-type]


def test_whole_floats_are_integers_in_every_container() -> None:
    """150.0 from a float column (pandas makes an int column float) is the integer 150, not the
    text "150.0" (an error on a range criterion, silently no match on an equality one)."""
    rs = rules.load(EXAMPLE / "ruletype.toml", EXAMPLE / "rules.csv")
    eng = rules.compile(rs)
    q = {"CTN_TYPE": "II", "APT": "ZRH", "IN_CRR": "LX", "OUT_CRR": "LX", "VALIDITY": "15MAR2026"}
    want = eng.match([[q[c]] if c in q else [1234] for c in rs.criterion_codes]).rule
    for flt in ([1234.0], np.array([1234.0]), pd.Series([1234.0]), np.array([1234.0], dtype=np.float32)):
        cols = [[q[c]] if c in q else flt for c in rs.criterion_codes]
        assert list(eng.match(cols).rule) == list(want)
