"""Bytes in a query are text in UTF-8, whatever the container (docs/rules.md, "Missing values"):
a Python ``bytes``, a NumPy ``S`` array, an Arrow binary column give the answers their text
gives, locally and through the service; bytes that are not UTF-8 are an error naming the query
and the criterion. Before, ``b"ZRH"`` was matched as the text ``"b'ZRH'"``."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from offload import rules
from offload.rules.bench import load_query_columns
from offload.serve import Client, daemon

EXAMPLE = Path(__file__).resolve().parents[2] / "data" / "examples" / "mct-mini"


@pytest.fixture(scope="module")
def example() -> tuple[rules.CompiledRules, list[list[str]]]:
    rs = rules.load(EXAMPLE / "ruletype.toml", EXAMPLE / "rules.csv")
    _, cols = load_query_columns(rs, EXAMPLE / "queries.csv")
    return rules.compile(rs, "fast"), [list(c) for c in cols]


AS_BYTES: dict[str, Callable[[list[str]], Any]] = {
    "bytes list": lambda col: [v.encode() for v in col],
    "bytearray list": lambda col: [bytearray(v.encode()) for v in col],
    "numpy S": lambda col: np.array([v.encode() for v in col], dtype="S"),
    "numpy object of bytes": lambda col: np.array([v.encode() for v in col], dtype=object),
    "arrow binary": lambda col: pa.array([v.encode() for v in col], type=pa.binary()),
    "arrow large_binary": lambda col: pa.chunked_array(
        [pa.array([v.encode() for v in col], pa.large_binary())]
    ),
    "arrow string_view": lambda col: pa.array(col, type=pa.string_view()),
}


@pytest.mark.parametrize("container", list(AS_BYTES))
def test_bytes_match_as_their_text(
    example: tuple[rules.CompiledRules, list[list[str]]], container: str
) -> None:
    engine, cols = example
    want = engine.match(cols)
    assert want.matched.any()
    for i in range(len(cols)):  # one criterion as bytes at a time, then all of them
        mixed = [AS_BYTES[container](c) if j == i else c for j, c in enumerate(cols)]
        assert np.array_equal(engine.match(mixed).rule, want.rule), (container, i)
    got = engine.match([AS_BYTES[container](c) for c in cols])
    assert np.array_equal(got.rule, want.rule) and np.array_equal(got.content, want.content)


def test_explain_takes_bytes(example: tuple[rules.CompiledRules, list[list[str]]]) -> None:
    engine, cols = example
    query = [c[0] for c in cols]
    assert engine.explain([v.encode() for v in query]) == engine.explain(query)


@pytest.mark.parametrize("container", ["bytes list", "numpy S", "arrow binary"])
def test_bytes_that_are_not_utf8_name_the_query_and_criterion(
    example: tuple[rules.CompiledRules, list[list[str]]], container: str
) -> None:
    engine, cols = example
    codes = engine.rules.criterion_codes
    bad = [list(c) for c in cols]
    raw = [v.encode() for v in bad[2]]
    raw[3] = b"\xffZRH"
    make = AS_BYTES[container]
    columns: list[Any] = [*bad[:2], make(bad[2]), *bad[3:]]
    if container == "numpy S":
        columns[2] = np.array(raw, dtype="S")
    elif container == "arrow binary":
        columns[2] = pa.array(raw, type=pa.binary())
    else:
        columns[2] = raw
    with pytest.raises(ValueError, match=rf"query 3 criterion {codes[2]}: bytes .* not UTF-8"):
        engine.match(columns)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=6),
                min_size=1, max_size=8))  # fmt: skip
def test_any_utf8_text_as_bytes_is_that_text(example: tuple[rules.CompiledRules, list[list[str]]],
                                             apt: list[str]) -> None:  # fmt: skip
    """Random texts (unknown values, empty, non-ASCII) in the equality criterion APT: bytes in
    every container answer as the text does."""
    engine, cols = example
    codes = list(engine.rules.criterion_codes)
    n = len(apt)
    base = [[c[0]] * n for c in cols]
    base[codes.index("APT")] = apt
    want = engine.match(base).rule
    for make in AS_BYTES.values():
        if make is AS_BYTES["numpy S"] and any("\x00" in a[-1:] for a in apt):
            continue  # NumPy's S type drops trailing NULs: not the same bytes
        got = engine.match([make(c) if i == codes.index("APT") else c for i, c in enumerate(base)])
        assert np.array_equal(got.rule, want)


@pytest.fixture
def served() -> Iterator[str]:
    d = Path(tempfile.mkdtemp(prefix="offload-bytes-", dir="/tmp"))
    ep = f"ipc://{d}/o.sock"
    proc = daemon.start(*daemon.rule_flags(EXAMPLE / "ruletype.toml", EXAMPLE / "rules.csv"), "-e", ep,
                        "--workers", "1", timeout_s=30)  # fmt: skip
    try:
        yield ep
    finally:
        daemon.stop(proc, timeout_s=20)
        shutil.rmtree(d, ignore_errors=True)


def test_bytes_through_the_service(example: tuple[rules.CompiledRules, list[list[str]]], served: str) -> None:
    engine, cols = example
    want = engine.match(cols)
    as_bytes = [AS_BYTES["numpy S"](c) for c in cols]
    with Client(served, criteria=engine.rules.criterion_codes) as raw, Client(served, encode="client") as enc:
        for client in (raw, enc):
            got = client.match(as_bytes)
            assert got.ok, got.message
            assert np.array_equal(got.rule, want.rule)
