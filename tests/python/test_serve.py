"""The daemon on loopback (IPC), driven by real ZeroMQ clients: answers equal the in-process
matcher, overload gets "busy" (and nothing accepted is lost), deadlines, malformed frames, a
client that vanishes mid-request, graceful shutdown. Every wait is bounded."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import zmq

from offload import rules
from offload.rules.bench import load_query_columns
from offload.rules.synth import synth
from offload.serve import Client, ServeError, daemon


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    d = tmp_path_factory.mktemp("serve-data")
    summary = synth(d, n_rules=3_000, n_requests=40, seed=5)
    rs = rules.load(d / "ruletype.xml", d / "rules.csv")
    _, cols = load_query_columns(rs, d / "queries.csv", limit=6_000)
    return {"dir": d, "rs": rs, "cols": cols, "summary": summary}


def start(data: dict[str, object], tmp: Path, *extra: str) -> tuple[subprocess.Popen[str], str]:
    d = data["dir"]
    assert isinstance(d, Path)
    endpoint = f"ipc://{tmp}/offload-{os.getpid()}-{time.monotonic_ns()}.sock"
    proc = daemon.start(
        *daemon.rule_flags(d / "ruletype.xml", d / "rules.csv"), "--endpoint", endpoint, *extra, timeout_s=30
    )
    return proc, endpoint


def stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    assert proc.returncode == 0, err
    return err


@pytest.fixture
def server(data: dict[str, object], tmp_path: Path) -> Iterator[str]:
    proc, endpoint = start(data, tmp_path, "--workers", "2", "--kernels", "2", "--engine-threads", "2")
    yield endpoint
    stop(proc)


def crit(data: dict[str, object]) -> list[str]:
    """The criterion codes the query columns follow (requests carry their fingerprint)."""
    rs = data["rs"]
    assert isinstance(rs, rules.RuleSet)
    return list(rs.criterion_codes)


def columns(data: dict[str, object], lo: int, hi: int) -> list[list[str]]:
    cols = data["cols"]
    assert isinstance(cols, list)
    return [c[lo:hi] for c in cols]


def test_answers_equal_the_in_process_matcher(data: dict[str, object], server: str) -> None:
    rs = data["rs"]
    assert isinstance(rs, rules.RuleSet)
    local = rules.compile(rs, "fast")
    rng = np.random.default_rng(1)
    with Client(server, criteria=crit(data), timeout_s=20) as c:
        lo = 0
        for size in [1, 0, 7, 64, 500, 1_500]:
            q = columns(data, lo, lo + size)
            expected = local.match(q)
            got = c.match(q)
            assert got.ok and got.version == 1, got.message
            assert np.array_equal(got.rule, expected.rule) and np.array_equal(got.content, expected.content)
            assert set(got.stages_ns) == {"queue", "encode", "kernel_queue", "match", "reply"}
            # pre-encoded queries give the same answers
            if size:
                enc = c.match(local.encode(q))
                assert enc.ok and np.array_equal(enc.rule, expected.rule)
            lo += size + int(rng.integers(0, 50))


def test_early_stop_evaluates_a_prefix(data: dict[str, object], server: str) -> None:
    q = columns(data, 0, 2_000)
    with Client(server, criteria=crit(data), timeout_s=20) as c:
        full = c.match(q)
        part = c.match(q, stop_after=10)
    assert part.ok and 10 <= int(part.matched.sum()) and len(part.rule) < len(full.rule)
    assert np.array_equal(part.rule, full.rule[: len(part.rule)])


def test_deadlines_and_malformed_frames(data: dict[str, object], server: str) -> None:
    q = columns(data, 0, 10)
    with Client(server, criteria=crit(data), timeout_s=20) as c:
        late = c.match(q, deadline_s=-0.001)
        assert late.status == "DeadlineExceeded" and len(late.rule) == 0
        for junk in [b"", b"OFQ2", b"hello", b"OFQ2" + bytes(40), b"OFQ1" + bytes(40), os.urandom(300)]:
            c.send_frame(junk)
            assert c.receive().status == "Malformed"
        assert c.match(q, deadline_s=5).ok  # still serving


def test_overload_gets_busy_and_loses_nothing(data: dict[str, object], tmp_path: Path) -> None:
    proc, endpoint = start(data, tmp_path, "--workers", "1", "--queue", "1", "--matcher", "linear")
    try:
        rs = data["rs"]
        assert isinstance(rs, rules.RuleSet)
        q = columns(data, 0, 300)
        expected = rules.compile(rs, "fast").match(q).rule
        with Client(endpoint, criteria=crit(data), timeout_s=60) as c:
            frames = [c.request_frame(q)[1] for _ in range(30)]
            for f in frames:  # 30 requests at once against a queue of one
                c.send_frame(f)
            replies = [c.receive() for _ in frames]  # every request is answered
        statuses = [r.status for r in replies]
        assert set(statuses) <= {"Ok", "Busy"} and statuses.count("Busy") > 0 and statuses.count("Ok") > 0
        assert sorted(r.request_id for r in replies) == sorted(range(1, 31))
        for r in replies:
            if r.ok:
                assert np.array_equal(r.rule, expected)
    finally:
        stop(proc)


def test_client_killed_mid_request(data: dict[str, object], server: str) -> None:
    d = data["dir"]
    code = (
        "import sys, zmq; from offload.serve import Client; from offload import rules\n"
        "from offload.rules.bench import load_query_columns\n"
        f"rs = rules.load({str(d / 'ruletype.xml')!r}, {str(d / 'rules.csv')!r})\n"
        f"_, cols = load_query_columns(rs, {str(d / 'queries.csv')!r}, limit=5000)\n"
        f"c = Client({server!r}, criteria=rs.criterion_codes)\n"
        "c.send_frame(c.request_frame(cols)[1]); sys.exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    with Client(server, criteria=crit(data), timeout_s=20) as c:
        assert c.match(columns(data, 0, 5)).ok


def test_graceful_shutdown_answers_what_it_accepted(data: dict[str, object], tmp_path: Path) -> None:
    proc, endpoint = start(data, tmp_path, "--workers", "1", "--queue", "16", "--matcher", "nfa")
    q = columns(data, 0, 2_000)
    with Client(endpoint, criteria=crit(data), timeout_s=30) as c:
        frames = [c.request_frame(q)[1] for _ in range(8)]
        for f in frames:
            c.send_frame(f)
        # The signal comes once the daemon is answering them (a fixed sleep raced the connection
        # on a loaded machine); requests that arrive after it are answered "shutting down".
        replies = [c.receive()]
        proc.send_signal(signal.SIGTERM)
        replies += [c.receive() for _ in frames[1:]]
    assert {r.status for r in replies} <= {"Ok", "ShuttingDown", "Busy"}
    assert any(r.ok for r in replies)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "stopped" in err


def test_zmq_is_the_real_library() -> None:
    assert zmq.zmq_version_info() >= (4, 0)


def test_reload_under_load_gives_no_wrong_or_mixed_answers(data: dict[str, object], tmp_path: Path) -> None:
    import threading

    from offload.serve.control import control_request

    d = data["dir"]
    assert isinstance(d, Path)
    new = tmp_path / "v2"
    synth(new, n_rules=3_000, n_requests=1, seed=99)  # a different rule set
    rs1, rs2 = data["rs"], rules.load(new / "ruletype.xml", new / "rules.csv")
    assert isinstance(rs1, rules.RuleSet)
    control = f"ipc://{tmp_path}/control.sock"
    proc, endpoint = start(data, tmp_path, "--workers", "2", "--control", control, "--reload-dir", str(new))
    try:
        q = columns(data, 0, 400)
        expected = {1: rules.compile(rs1).match(q).rule, 2: rules.compile(rs2).match(q).rule}
        assert not np.array_equal(expected[1], expected[2])
        seen: list[tuple[str, int, bool, float]] = []
        done = threading.Event()

        def load() -> None:
            with Client(endpoint, criteria=crit(data), timeout_s=30) as c:
                for _ in range(2_000):  # bounded; stops soon after the reload
                    r = c.match(q)
                    right = bool(np.array_equal(r.rule, expected.get(r.version)))
                    seen.append((r.status, r.version, right, r.round_trip_s))
                    if done.is_set() and r.version == 2 and len(seen) > 20:
                        break

        t = threading.Thread(target=load)
        t.start()
        time.sleep(0.3)
        answer = control_request(control, f"reload\n{new / 'ruletype.xml'}\n{new / 'rules.csv'}", 60)
        done.set()
        t.join(timeout=60)
        assert answer["ok"] and answer["version"] == 2, answer
        assert all(s == "Ok" for s, _, _, _ in seen)
        assert {v for _, v, _, _ in seen} == {1, 2}
        assert all(right for _, _, right, _ in seen), "an answer did not match the version that gave it"
        # versions never go back once the new one answered
        versions = [v for _, v, _, _ in seen]
        assert versions == sorted(versions)
        stats = control_request(control, "stats", 10)
        assert stats["version"] == 2 and stats["rules"] == len(rs2)
    finally:
        stop(proc)


def test_cross_request_batching_keeps_answers_apart(data: dict[str, object], tmp_path: Path) -> None:
    from offload.serve.control import control_request

    rs = data["rs"]
    assert isinstance(rs, rules.RuleSet)
    local = rules.compile(rs, "fast")
    control = f"ipc://{tmp_path}/control.sock"
    proc, endpoint = start(
        data, tmp_path, "--workers", "1", "--batch-max-queries", "4096", "--batch-timeout-us", "3000",
        "--control", control,
    )  # fmt: skip
    try:
        sizes = [1, 300, 0, 17, 1_000, 64, 5, 800]
        spans = list(zip(np.cumsum([0, *sizes[:-1]]), sizes, strict=True))
        for setting in (None, "0"):
            if setting is not None:
                assert control_request(control, f"set batch_max_queries {setting}", 10)["ok"]
            match_ns: list[int] = []
            with Client(endpoint, criteria=crit(data), timeout_s=30) as c:
                frames = {}
                for lo, n in spans:
                    rid, frame = c.request_frame(columns(data, int(lo), int(lo + n)))
                    frames[rid] = (int(lo), int(n))
                    c.send_frame(frame)
                for _ in spans:
                    r = c.receive()
                    lo, n = frames.pop(r.request_id)
                    assert r.ok and np.array_equal(r.rule, local.match(columns(data, lo, lo + n)).rule)
                    match_ns.append(r.stages_ns["match"])
            if setting is None:  # batched: requests matched in one call report the same match time
                assert len(set(match_ns)) < len(match_ns), match_ns
        stats = control_request(control, "stats", 10)
        assert stats["batch_max_queries"] == 0 and stats["ok"] == 2 * len(sizes)
    finally:
        stop(proc)


def test_metrics_endpoint_and_latency_stats(data: dict[str, object], tmp_path: Path) -> None:
    import socket
    import urllib.request

    from offload.serve.control import control_request

    with socket.socket() as s:  # a free loopback port
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    control = f"ipc://{tmp_path}/control.sock"
    proc, endpoint = start(data, tmp_path, "--metrics", f"127.0.0.1:{port}", "--control", control)
    try:
        with Client(endpoint, criteria=crit(data), timeout_s=20) as c:
            for _ in range(5):
                assert c.match(columns(data, 0, 100)).ok
            assert c.match(columns(data, 0, 1), deadline_s=-1).status == "DeadlineExceeded"
        page = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        assert 'offload_requests_total{outcome="ok"} 5' in page
        assert 'offload_requests_total{outcome="deadline_exceeded"} 1' in page
        assert "offload_queries_total 500" in page and "offload_ruleset_version 1" in page
        assert 'offload_stage_seconds_count{stage="match"} 5' in page
        assert "offload_server_seconds_bucket" in page
        assert 'offload_auth_total{socket="control",outcome="refused"} 0' in page
        lat = control_request(control, "stats", 10)["latency"]
        assert lat["server"]["count"] == 5 and 0 < lat["match"]["p50_ns"] <= lat["server"]["max_ns"]
    finally:
        stop(proc)


def test_injector_closed_and_open_loop(data: dict[str, object], tmp_path: Path) -> None:
    from offload.serve import inject

    rs = data["rs"]
    d = data["dir"]
    assert isinstance(rs, rules.RuleSet) and isinstance(d, Path)
    proc, endpoint = start(data, tmp_path, "--workers", "1")
    try:
        trace = inject.load_trace(d, rs.criterion_codes)
        closed = inject.run(endpoint, trace, processes=2, mode="closed", duration=1.0)
        assert closed["unanswered"] == 0 and set(closed["status"]) == {"Ok"} and closed["requests"] > 0
        assert closed["queries_per_s"] > 0 and closed["latency_us"]["p50"] <= closed["latency_us"]["max"]
        assert closed["stopped"] is None and closed["generator"]["process_cpu_s"] > 0
        # the server's stage times come back from the generator, per run and per request size
        medians = closed["stage_median_us"]
        assert all(medians.get(k, 0) > 0 for k in ("queue", "encode", "match", "reply")), medians
        rows = closed["by_size"]
        assert sum(r["requests"] for r in rows) == closed["status"]["Ok"], rows
        assert all(r["round_trip_us"] > 0 for r in rows), rows
        assert all(r["stages_us"]["match"] > 0 for r in rows if r["median_queries"] > 0), rows
        assert [r["size_up_to"] for r in rows] == sorted(r["size_up_to"] for r in rows)
        opened = inject.run(
            endpoint, trace, processes=1, mode="open", rate=200, duration=1.0, early_stop=True
        )
        assert opened["unanswered"] == 0 and 50 <= opened["requests"] <= 400, opened["requests"]
        enc = trace.fixed_size(1024).encoded(rules.compile(rs).encode(trace.columns))
        assert all(n <= 1024 for _, n, _ in enc.requests)
        pre = inject.run(endpoint, enc, processes=1, mode="closed", duration=0.5)
        assert set(pre["status"]) == {"Ok"} and pre["queries_per_s"] > 0
        js, png = inject.write(closed, tmp_path / "inject.json")
        assert js.exists() and png.stat().st_size > 1000
    finally:
        stop(proc)


def test_async_client_many_requests_in_flight(data: dict[str, object], server: str) -> None:
    import asyncio

    from offload.serve import AsyncClient

    rs = data["rs"]
    assert isinstance(rs, rules.RuleSet)
    local = rules.compile(rs, "fast")
    spans = [(i * 97, 1 + (i * 37) % 300) for i in range(20)]

    async def go() -> list[object]:
        async with AsyncClient(server, criteria=crit(data), timeout_s=30) as c:
            return await asyncio.gather(*(c.match(columns(data, lo, lo + n)) for lo, n in spans))

    replies = asyncio.run(go())
    for (lo, n), r in zip(spans, replies, strict=True):
        assert getattr(r, "ok", False)
        assert np.array_equal(r.rule, local.match(columns(data, lo, lo + n)).rule)  # type: ignore[attr-defined]


def test_sweep_measures_a_grid_and_finds_the_front(data: dict[str, object], tmp_path: Path) -> None:
    from offload.serve import grid, inject
    from offload.serve import sweep as sw

    rs = data["rs"]
    d = data["dir"]
    assert isinstance(rs, rules.RuleSet) and isinstance(d, Path)
    trace = inject.load_trace(d, rs.criterion_codes).fixed_size(512)
    configs = sw.grid(grid.product([1, 2], [(1, 1, 1)], [grid.Policy(), grid.Policy(2048, 300)]))
    configs += sw.grid(grid.product([1], [(1, 2, 1)]), rates=[300.0])  # open loop, two executors
    assert configs[-1].label() == "1p 1w 2k 1e per-req raw ipc fast @300/s"
    rows = sw.sweep(sw.Setup(str(d / "ruletype.xml"), str(d / "rules.csv"), trace, duration_s=0.5), configs)
    assert len(rows) == 5 and all(set(r["status"]) == {"Ok"} and r["queries_per_s"] > 0 for r in rows)
    assert rows[-1]["mode"] == "open" and 0.3 * 300 <= rows[-1]["requests_per_s"] <= 2 * 300
    summary = sw.write(rows, tmp_path / "sweep.json", p99_us=1e9, qps=0)
    front = sw.pareto(rows)
    assert front and all(r["label"] in summary["pareto"] for r in front)
    # nothing off the front beats a front point on both axes
    for r in rows:
        for f in front:
            assert not (r["queries_per_s"] > f["queries_per_s"] and r["p99_us"] < f["p99_us"])
    assert summary["best_under_p99"]["config"]["queries_per_s"] == max(r["queries_per_s"] for r in rows)
    assert (tmp_path / "sweep.png").stat().st_size > 1000 and (tmp_path / "sweep.csv").exists()


def test_pareto_and_recommendations_on_known_points() -> None:
    from offload.serve import sweep as sw

    rows = [
        {"label": "a", "queries_per_s": 1.0, "p99_us": 10.0},
        {"label": "b", "queries_per_s": 2.0, "p99_us": 20.0},
        {"label": "c", "queries_per_s": 1.5, "p99_us": 30.0},  # dominated by b
        {"label": "d", "queries_per_s": 3.0, "p99_us": 50.0},
    ]
    assert [r["label"] for r in sw.pareto(rows)] == ["a", "b", "d"]
    assert sw.best_under_p99(rows, 25)["label"] == "b"  # type: ignore[index]
    assert sw.lowest_latency_for(rows, 1.2)["label"] == "b"  # type: ignore[index]
    assert sw.best_under_p99(rows, 5) is None


def test_settings_file_with_flags_over_it(
    data: dict[str, object], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Key by key: flags > OFFLOAD_SERVE_* variables > the file > the defaults."""
    d = data["dir"]
    assert isinstance(d, Path)
    endpoint = f"ipc://{tmp_path}/cfg.sock"
    control = f"ipc://{tmp_path}/cfg-control.sock"
    cfg = tmp_path / "serve.toml"
    cfg.write_text(
        f'ruletype = "{d / "ruletype.xml"}"\nrules = "{d / "rules.csv"}"\nendpoints = ["{endpoint}"]\n'
        f'control = "{control}"\nworkers = 1\nkernels = 2\nbatch_max_queries = 100\n'
    )
    monkeypatch.setenv("OFFLOAD_SERVE_BATCH_MAX_QUERIES", "9")  # under the flag
    monkeypatch.setenv("OFFLOAD_SERVE_BATCH_TIMEOUT_US", "333")  # over the file's 250
    cfg.write_text(cfg.read_text() + "batch_timeout_us = 250\n")
    proc = daemon.start("--config", str(cfg), "--batch-max-queries", "7", timeout_s=30)
    try:
        from offload.serve.control import control_request

        st = control_request(control, "stats", 10)
        assert st["batch_max_queries"] == 7  # the flag wins over the variable and the file
        assert st["batch_timeout_us"] == 333  # the variable wins over the file
        with Client(endpoint, criteria=crit(data), timeout_s=20) as c:
            assert c.match(columns(data, 0, 50)).ok
    finally:
        stop(proc)
    # a wrong type is reported with file, line and column, and nothing starts
    cfg.write_text('workers = 1\nkernels = "two"\n')
    r = subprocess.run(
        [sys.executable, "-m", "offload.cli", "serve", "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 2 and str(cfg) in r.stderr and "line 2, column 11" in r.stderr, r.stderr


def test_client_reconnects_across_a_daemon_restart(data: dict[str, object], tmp_path: Path) -> None:
    rs = data["rs"]
    assert isinstance(rs, rules.RuleSet)
    q = columns(data, 0, 100)
    expected = rules.compile(rs, "fast").match(q).rule
    proc, endpoint = start(data, tmp_path, "--workers", "1")
    with Client(endpoint, criteria=crit(data), timeout_s=20) as c:
        assert np.array_equal(c.match(q).rule, expected)
        stop(proc)
        # the daemon is gone: a request in this gap times out instead of hanging
        c.timeout_s = 0.3
        with pytest.raises(ServeError):
            c.match(q)
        d = data["dir"]
        assert isinstance(d, Path)
        proc = daemon.start(
            *daemon.rule_flags(d / "ruletype.xml", d / "rules.csv"), "--endpoint", endpoint, timeout_s=30
        )
        try:
            c.timeout_s = 20
            r = c.match(q)  # the same socket, reconnected by ZeroMQ
            assert r.ok and np.array_equal(r.rule, expected)
        finally:
            stop(proc)
