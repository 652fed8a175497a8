"""The Python clients over the Rust client (``_native.ServeClient``, ``_native.ServeMultiplexed``):
through one daemon serving a ``shm://`` and an ``ipc://`` endpoint, ``Client`` and
``AsyncClient`` get the in-process matcher's answers over shared memory with raw and
client-encoded requests, a reply sent by hand is received by its id, and a daemon that stops
turns a wait into a ServeError (never a hang). Every wait is bounded."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from offload import rules
from offload.serve import AsyncClient, Client, ServeError, daemon

MINI = Path(__file__).resolve().parents[2] / "data" / "examples" / "mct-mini"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    tmp = tmp_path_factory.mktemp("native-client")
    shm, ipc = f"shm://{tmp}/s-{time.monotonic_ns()}.sock", f"ipc://{tmp}/d.sock"
    flags = [*daemon.rule_flags(MINI / "ruletype.toml", MINI / "rules.csv"), "-e", shm, "-e", ipc]
    proc = daemon.start(*flags, "--workers", "1", "--kernels", "1", timeout_s=30)
    try:
        yield shm, ipc
    finally:
        daemon.stop(proc, timeout_s=20)


@pytest.fixture(scope="module")
def example() -> tuple[rules.RuleSet, list[list[str]]]:
    from offload.rules.bench import load_query_columns

    rs = rules.load(MINI / "ruletype.toml", MINI / "rules.csv")
    _, cols = load_query_columns(rs, MINI / "queries.csv")
    return rs, cols


def test_client_over_shared_memory_answers_as_in_process(
    served: tuple[str, str], example: tuple[rules.RuleSet, list[list[str]]]
) -> None:
    shm, _ = served
    rs, cols = example
    expected = rules.compile(rs, "fast").match(cols).rule
    with Client(shm, criteria=rs.criterion_codes, timeout_s=20) as raw:
        reply = raw.match(cols)
        assert reply.ok and np.array_equal(reply.rule, expected)
        # A frame sent by hand, then another: each reply is taken by its id.
        (_, f1), (second, f2) = raw.request_frame(cols), raw.request_frame([c[:3] for c in cols])
        raw.send_frame(f1)
        raw.send_frame(f2)
        assert raw.receive(second).rule.shape == (3,)  # the first reply is skipped by its id
    with Client(shm, encode="client", timeout_s=20) as enc:
        reply = enc.match(cols)
        assert reply.ok and np.array_equal(reply.rule, expected) and enc.dictionary_fetches == 1


def test_async_client_over_shared_memory_many_in_flight(
    served: tuple[str, str], example: tuple[rules.RuleSet, list[list[str]]]
) -> None:
    shm, _ = served
    rs, cols = example
    local = rules.compile(rs, "fast")
    spans = [(i % 5, 1 + (i * 3) % 7) for i in range(16)]

    async def go(encode: str) -> list[object]:
        criteria = rs.criterion_codes if encode == "server" else None
        async with AsyncClient(shm, criteria=criteria, timeout_s=20, encode=encode) as c:
            return await asyncio.gather(*(c.match([col[lo : lo + n] for col in cols]) for lo, n in spans))

    for encode in ("server", "client"):
        for (lo, n), r in zip(spans, asyncio.run(go(encode)), strict=True):
            assert getattr(r, "ok", False), r
            want = local.match([col[lo : lo + n] for col in cols]).rule
            assert np.array_equal(r.rule, want)  # type: ignore[attr-defined]


def test_a_stopped_daemon_is_a_serve_error(
    tmp_path: Path, example: tuple[rules.RuleSet, list[list[str]]]
) -> None:
    rs, cols = example
    shm = f"shm://{tmp_path}/gone-{time.monotonic_ns()}.sock"
    flags = [*daemon.rule_flags(MINI / "ruletype.toml", MINI / "rules.csv"), "-e", shm]
    proc = daemon.start(*flags, "--workers", "1", timeout_s=30)
    with Client(shm, criteria=rs.criterion_codes, timeout_s=2) as c:
        assert c.match(cols).ok
        daemon.stop(proc, timeout_s=20)
        t0 = time.monotonic()
        with pytest.raises(ServeError):
            c.match(cols)
        assert time.monotonic() - t0 < 10
    with pytest.raises(ServeError):  # nobody serves there now
        Client(shm, criteria=rs.criterion_codes, timeout_s=0.5)
