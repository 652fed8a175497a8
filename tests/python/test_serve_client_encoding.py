"""Client-side encoding (docs/serve-protocol.md, "Client-side encoding"): the encoder rebuilt
from a dictionary gives the rule set's own codes; against a daemon, ``Client(encode="client")``
and ``AsyncClient(encode="client")`` fetch the dictionary once, send 16-bit codes and get the
answers raw requests get; after a hot reload that changes the dictionary the old version's
codes are refused (never answered wrong) and the client fetches the new one by itself."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from offload import _native, rules
from offload.rules.bench import load_query_columns
from offload.serve import AsyncClient, Client, ServeError, daemon
from offload.serve.cli import control_request

EXAMPLE = Path(__file__).resolve().parents[2] / "data" / "examples" / "mct-mini"
Example = tuple[rules.RuleSet, list[list[str]]]


@pytest.fixture(scope="module")
def example() -> Example:
    rs = rules.load(EXAMPLE / "ruletype.toml", EXAMPLE / "rules.csv")
    _, cols = load_query_columns(rs, EXAMPLE / "queries.csv")
    return rs, [list(c) * 4 for c in cols]


@pytest.fixture
def served() -> Iterator[tuple[str, str]]:
    """A daemon on the example with a control socket: (data endpoint, control endpoint)."""
    d = Path(tempfile.mkdtemp(prefix="offload-enc-", dir="/tmp"))
    ep, ctl = f"ipc://{d}/o.sock", f"ipc://{d}/c.sock"
    flags = daemon.rule_flags(EXAMPLE / "ruletype.toml", EXAMPLE / "rules.csv")
    proc = daemon.start(*flags, "-e", ep, "-c", ctl, "--workers", "1", timeout_s=30)
    try:
        yield ep, ctl
    finally:
        daemon.stop(proc, timeout_s=20)
        shutil.rmtree(d, ignore_errors=True)


def test_the_dictionary_encoder_gives_the_rule_sets_codes(example: Example) -> None:
    rs, cols = example
    compiled = rules.compile(rs, "fast")
    enc = _native.DictionaryEncoder(compiled.dictionary())
    assert list(enc.criteria) == list(rs.criterion_codes)
    assert (enc.width, enc.code_bits) == (8, 16)
    want = compiled.encode(cols)
    got = enc.encode(cols)
    assert got.dtype == np.uint32 and np.array_equal(got, want)
    narrow = enc.encode(cols, 16)
    assert narrow.dtype == np.uint16 and np.array_equal(narrow.astype(np.uint32), want)
    bad = [list(c) for c in cols]
    bad[-1][0] = "31FEB2026"
    with pytest.raises(ValueError, match="31FEB2026"):
        enc.encode(bad)
    with pytest.raises(ValueError, match="encoder dictionary"):
        _native.DictionaryEncoder(b"OFED\x01\x00")
    with pytest.raises(ValueError, match="16 or 32"):
        enc.encode(cols, 8)


def test_client_encoded_answers_equal_raw_ones(example: Example, served: tuple[str, str]) -> None:
    rs, cols = example
    ep, _ = served
    with Client(ep, criteria=rs.criterion_codes) as raw, Client(ep, encode="client") as enc:
        want = raw.match(cols)
        assert want.ok, want.message
        got = enc.match(cols)
        assert got.ok, got.message
        assert np.array_equal(got.rule, want.rule) and np.array_equal(got.content, want.content)
        assert enc.criteria == list(rs.criterion_codes)
        assert enc.dictionary is not None and (enc.dictionary.version, enc.dictionary.code_bits) == (1, 16)
        # Keyed columns and early stop, as raw; 32-bit codes on request.
        keyed = dict(zip(rs.criterion_codes, cols, strict=True))
        assert np.array_equal(enc.match(keyed, stop_after=2).rule, raw.match(cols, stop_after=2).rule)
        enc.code_bits = 32
        assert np.array_equal(enc.match(cols).rule, want.rule)
        assert enc.dictionary_fetches == 1
        with pytest.raises(ValueError, match="not a date"):
            enc.match([*cols[:-1], ["bad"] * len(cols[0])])


def test_after_a_reload_old_codes_are_refused_and_the_client_refetches(
    example: Example, served: tuple[str, str]
) -> None:
    rs, cols = example
    ep, ctl = served
    with Client(ep, encode="client") as enc:
        before = enc.match(cols)
        assert before.ok and before.version == 1
        _, old_frame = enc.request_frame(cols)  # version 1's codes
        # A rule on a new airport first: every APT code moves.
        header, body = (EXAMPLE / "rules.csv").read_text().split("\n", 1)
        new_rules = f"{header}\ncdg-ii,II,CDG,*,*,*,*,70\n{body}".encode()
        rt = (EXAMPLE / "ruletype.toml").read_bytes()
        answer = control_request(ctl, [b"reload-inline\nnew.toml\nrules.csv", rt, new_rules], 30)
        assert answer["ok"] and answer["version"] == 2, answer
        enc.send_frame(old_frame)
        refused = enc.receive()
        assert (refused.status, refused.version) == ("BadRequest", 2)
        assert "version 1" in refused.message
        after = enc.match(cols)
        assert after.ok and after.version == 2 and enc.dictionary_fetches == 2
        with Client(ep, criteria=rs.criterion_codes) as raw:
            assert np.array_equal(after.rule, raw.match(cols).rule)
        assert not np.array_equal(after.rule, before.rule)


def test_the_async_client_encodes_too(example: Example, served: tuple[str, str]) -> None:
    rs, cols = example
    ep, _ = served

    async def go() -> list[np.ndarray]:
        async with AsyncClient(ep, encode="client", timeout_s=10) as c:
            replies = await asyncio.gather(*(c.match([col[: 4 + i] for col in cols]) for i in range(8)))
            assert c.dictionary_fetches == 1
            assert all(r.ok for r in replies), [r.message for r in replies]
            return [r.rule for r in replies]

    got = asyncio.run(go())
    with Client(ep, criteria=rs.criterion_codes) as raw:
        for i, rule in enumerate(got):
            assert np.array_equal(rule, raw.match([col[: 4 + i] for col in cols]).rule)


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="encode is one of"):
        Client("ipc:///nonexistent", encode="both")
    with pytest.raises(ValueError, match="code_bits"):
        Client("ipc:///nonexistent", encode="client", code_bits=8)
    c = Client("ipc:///tmp/offload-enc-nobody.sock", encode="client", timeout_s=0.2)
    with pytest.raises(ServeError, match="no reply"):
        c.match([["II"]])
    c.close()


def test_bench_frames_come_from_the_servers_dictionary(example: Example, served: tuple[str, str]) -> None:
    from offload.serve import bench

    rs, cols = example
    ep, _ = served
    short = bench.Load("closed", connections=1, duration_s=0.3, drain_s=1.0)
    for bits, layout in ((16, 2), (32, 1)):
        frames, encoding = bench.encoded_frames(ep, cols, list(rs.criterion_codes), 5, bits)
        assert encoding == {"encoding_version": 1, "code_bits": bits}
        assert all(f[:4] == b"OFQ2" and f[28] == layout for f in frames)
        result = bench.run(ep, frames, short)
        assert result["status"] == {"Ok": result["sent"]} and result["unanswered"] == 0, result
    with pytest.raises(ValueError, match="no encoding dictionary"):
        bench.encoded_frames("ipc:///tmp/offload-enc-nobody.sock", cols, [], 5, 16, timeout_s=0.2)
