"""The service under faults, with real daemon processes (issue 23): a second daemon on a used
IPC endpoint, a reload with another rule type, an injector against nothing and under SIGTERM,
a client whose columns are in another order. Every wait is bounded."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import mini_trace
from offload import rules
from offload.rules.bench import load_query_columns
from offload.rules.synth import synth
from offload.serve import Client, daemon

EXAMPLE = Path(__file__).resolve().parents[2] / "data" / "examples" / "mct-mini"
OFFLOAD = [sys.executable, "-m", "offload.cli"]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    d = tmp_path_factory.mktemp("faults-data")
    synth(d, n_rules=2_000, n_requests=40, seed=7)
    rs = rules.load(d / "ruletype.xml", d / "rules.csv")
    _, cols = load_query_columns(rs, d / "queries.csv", limit=2_000)
    return {"dir": d, "rs": rs, "cols": cols}


def flags(data: dict[str, object]) -> list[str]:
    d = data["dir"]
    assert isinstance(d, Path)
    return daemon.rule_flags(d / "ruletype.xml", d / "rules.csv")


_SOCK_DIRS: list[Path] = []


def sock_dir() -> Path:
    """A short directory for IPC socket files (their paths are limited to ~107 bytes), removed
    after the test."""
    d = Path(tempfile.mkdtemp(prefix="offload-faults-", dir="/tmp"))
    _SOCK_DIRS.append(d)
    return d


@pytest.fixture(autouse=True)
def _remove_sock_dirs() -> Iterator[None]:
    yield
    while _SOCK_DIRS:
        shutil.rmtree(_SOCK_DIRS.pop(), ignore_errors=True)


def stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    return err


def test_a_second_daemon_on_a_used_ipc_endpoint_is_refused(data: dict[str, object]) -> None:
    d = sock_dir()
    ep, c1, c2 = f"ipc://{d}/o.sock", f"ipc://{d}/c1.sock", f"ipc://{d}/c2.sock"
    first = daemon.start(*flags(data), "-e", ep, "-c", c1, timeout_s=30)
    try:
        second = subprocess.run(
            [*OFFLOAD, "serve", *flags(data), "-e", ep, "-c", c2], capture_output=True, text=True, timeout=30
        )
        assert second.returncode == 2, second.stderr
        assert f"{ep} is in use by another process" in second.stderr
        assert "serving" not in second.stderr and "Traceback" not in second.stderr
        assert not (d / "c2.sock").exists()  # nothing of the refused daemon is left bound
        # the first still owns and answers on its endpoint
        rs = data["rs"]
        assert isinstance(rs, rules.RuleSet)
        cols = data["cols"]
        assert isinstance(cols, list)
        with Client(ep, criteria=rs.criterion_codes, timeout_s=10) as c:
            assert c.match([col[:5] for col in cols]).ok
    finally:
        stop(first)
    assert not (d / "o.sock").exists() and not (d / "c1.sock").exists()  # it removed its own files
    # a socket file left by a killed daemon (nobody listens) is stale: the next one takes it
    killed = daemon.start(*flags(data), "-e", ep, timeout_s=30)
    killed.kill()
    killed.wait(10)
    assert (d / "o.sock").exists()
    again = daemon.start(*flags(data), "-e", ep, timeout_s=30)
    stop(again)
    assert again.returncode == 0


def test_a_daemon_removes_only_its_own_socket_files(data: dict[str, object]) -> None:
    """A file that replaced the daemon's socket while it ran is someone else's: left alone."""
    d = sock_dir()
    ep = f"ipc://{d}/o.sock"
    proc = daemon.start(*flags(data), "-e", ep, timeout_s=30)
    (d / "o.sock").unlink()
    (d / "o.sock").write_text("not the daemon's")
    stop(proc)
    assert (d / "o.sock").read_text() == "not the daemon's"


def test_serving_is_printed_only_after_every_bind(data: dict[str, object]) -> None:
    """The second endpoint's port is held by this test: its bind fails after the first's."""
    import socket

    d = sock_dir()
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        r = subprocess.run(
            [*OFFLOAD, "serve", *flags(data), "-e", f"ipc://{d}/ok.sock", "-e", f"tcp://127.0.0.1:{port}"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert r.returncode != 0 and "serving" not in r.stderr, r.stderr
    assert f"bind tcp://127.0.0.1:{port}" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (d / "ok.sock").exists()


def start_with_control(data: dict[str, object]) -> tuple[subprocess.Popen[str], str, str]:
    d = sock_dir()
    ep, ctl = f"ipc://{d}/o.sock", f"ipc://{d}/c.sock"
    return daemon.start(*flags(data), "-e", ep, "-c", ctl, timeout_s=30), ep, ctl


def test_a_reload_that_changes_the_criteria_is_refused(data: dict[str, object]) -> None:
    proc, ep, ctl = start_with_control(data)
    try:
        r = subprocess.run(
            [*OFFLOAD, "serve", "reload", "-c", ctl, "--ruletype", str(EXAMPLE / "ruletype.toml"),
             "--rules", str(EXAMPLE / "rules.csv"), "--send", "--timeout", "20"],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert r.returncode == 1, r.stdout + r.stderr
        answer = json.loads(r.stdout)
        assert answer["ok"] is False and answer["version"] == 1
        assert "criteria" in answer["error"] and "restart" in answer["error"], answer["error"]
        assert "22" in answer["error"] and "6" in answer["error"], answer["error"]
        rs = data["rs"]
        assert isinstance(rs, rules.RuleSet)
        cols = data["cols"]
        assert isinstance(cols, list)
        with Client(ep, criteria=rs.criterion_codes, timeout_s=10) as c:
            reply = c.match([col[:5] for col in cols])
            assert reply.ok and reply.version == 1, reply.message
    finally:
        stop(proc)


def inject_cmd(ep: str, ruletype: Path, rules_csv: Path, trace: Path, out: Path, *extra: str) -> list[str]:
    return [*OFFLOAD, "serve", "inject", "-e", ep, "--ruletype", str(ruletype), "--rules", str(rules_csv),
            "--trace", str(trace), "-p", "1", "--out", str(out), *extra]  # fmt: skip


def test_inject_fails_when_every_request_is_refused(data: dict[str, object], tmp_path: Path) -> None:
    proc, ep, _ = start_with_control(data)
    try:
        cmd = inject_cmd(ep, EXAMPLE / "ruletype.toml", EXAMPLE / "rules.csv", mini_trace(tmp_path),
                         tmp_path / "i.json", "--duration", "0.5")  # fmt: skip
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    finally:
        stop(proc)
    assert r.returncode == 1, r.stdout + r.stderr
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "BadRequest" in lines[0] and "failed" in lines[0], r.stderr


def test_inject_against_nothing_fails_within_its_connect_timeout(
    data: dict[str, object], tmp_path: Path
) -> None:
    d = data["dir"]
    assert isinstance(d, Path)
    ep = f"ipc://{sock_dir()}/nothing.sock"
    t0 = time.monotonic()
    r = subprocess.run(
        inject_cmd(ep, d / "ruletype.xml", d / "rules.csv", d, tmp_path / "i.json", "--connect-timeout", "1"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    took = time.monotonic() - t0
    assert r.returncode == 2, r.stdout + r.stderr
    assert took < 15, took
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and ep in lines[0] and "1" in lines[0], r.stderr
    assert not (tmp_path / "i.json").exists()


def test_sigterm_under_inject_stops_it_promptly_and_counts_the_unanswered(
    data: dict[str, object], tmp_path: Path
) -> None:
    d = data["dir"]
    assert isinstance(d, Path)
    from offload.serve.cli import control_request

    proc, ep, ctl = start_with_control(data)
    cmd = inject_cmd(ep, d / "ruletype.xml", d / "rules.csv", d, tmp_path / "i.json", "--duration", "60",
                     "--mode", "open", "--rate", "400", "--json")  # fmt: skip
    inj = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60  # the clients start (spawned processes) and send a while
        while control_request(ctl, "stats", 5)["ok"] < 100 and time.monotonic() < deadline:
            time.sleep(0.1)
        stop(proc)
        t_stop = time.monotonic()
        out, err = inj.communicate(timeout=30)
        took = time.monotonic() - t_stop
    finally:
        if inj.poll() is None:
            inj.kill()
    assert took < 10, took
    assert inj.returncode == 1, out + err
    result = json.loads(out)
    assert result["status"].get("Ok", 0) > 0
    stopped = sum(result["status"].get(s, 0) for s in ("ShuttingDown",)) + result["unanswered"]
    assert stopped > 0, result
    # the rate is over the time requests really ran (a few seconds), not the 60 s asked for
    assert result["elapsed_s"] < 10, result["elapsed_s"]
    assert abs(result["requests_per_s"] - result["status"]["Ok"] / result["elapsed_s"]) < 1e-6
    summary = [x for x in err.splitlines() if x.strip()]
    assert len(summary) == 1 and "shut" in summary[0].lower() and "unanswered" in summary[0], err


def test_a_daemon_killed_under_inject_ends_the_run_within_the_timeout(
    data: dict[str, object], tmp_path: Path
) -> None:
    from offload.serve.cli import control_request

    d = data["dir"]
    assert isinstance(d, Path)
    proc, ep, ctl = start_with_control(data)
    cmd = inject_cmd(ep, d / "ruletype.xml", d / "rules.csv", d, tmp_path / "i.json", "--duration", "60",
                     "--mode", "open", "--rate", "400", "--connect-timeout", "1", "--json")  # fmt: skip
    inj = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while control_request(ctl, "stats", 5)["ok"] < 100 and time.monotonic() < deadline:
            time.sleep(0.1)
        proc.kill()
        proc.wait(10)
        t_kill = time.monotonic()
        out, err = inj.communicate(timeout=30)
        took = time.monotonic() - t_kill
    finally:
        for p in (inj, proc):
            if p.poll() is None:
                p.kill()
    assert took < 6, took
    assert inj.returncode == 1, out + err
    result = json.loads(out)
    assert result["unanswered"] > 0 and "no reply within 1 s" in result["stopped"], result
    summary = [x for x in err.splitlines() if x.strip()]
    assert len(summary) == 1 and "unanswered" in summary[0] and "no reply" in summary[0], err


def test_columns_in_another_order_are_refused(data: dict[str, object]) -> None:
    proc, ep, _ = start_with_control(data)
    rs = data["rs"]
    assert isinstance(rs, rules.RuleSet)
    cols = data["cols"]
    assert isinstance(cols, list)
    names = list(rs.criterion_codes)
    swapped = [names[1], names[0], *names[2:]]
    q = [cols[1][:10], cols[0][:10], *(c[:10] for c in cols[2:])]
    try:
        with Client(ep, criteria=swapped, timeout_s=10) as c:
            r = c.match(q)
            assert r.status == "BadRequest", (r.status, r.message)
            assert "criteria" in r.message and f"{names[0]}, {names[1]}" in r.message, r.message
            # the same columns in the server's order are answered
            with Client(ep, criteria=names, timeout_s=10) as right:
                assert right.match([cols[0][:10], cols[1][:10], *(c[:10] for c in cols[2:])]).ok
            # a request of protocol version 1 (no fingerprint) is refused, saying so, not misread
            old = b"OFQ1" + (9).to_bytes(8, "little") + bytes(8 + 4) + (0).to_bytes(4, "little") + b"\x00"
            c.send_frame(old + len(names).to_bytes(2, "little") + bytes(4 * len(names)))
            r = c.receive(9)
            assert r.status == "Malformed" and "protocol version" in r.message, (r.status, r.message)
    finally:
        stop(proc)


def test_help_lists_every_matcher_and_the_one_vocabulary() -> None:
    from typer.testing import CliRunner

    from offload.cli import app

    runner = CliRunner()
    serve_help = " ".join(runner.invoke(app, ["serve", "--help"], terminal_width=200).output.split())
    for m in ("linear", "nfa", "fast", "gpu-host", "gpu"):
        assert m in serve_help
    for cmd in ("inject", "sweep"):
        h = " ".join(runner.invoke(app, ["serve", cmd, "--help"], terminal_width=200).output.split())
        assert "--json" in h and "--processes" in h and "-p" in h, h
        if cmd == "sweep":
            assert "--p " not in h  # the old spelling stays as a hidden alias
    for cmd in (["serve"], ["serve", "inject"], ["serve", "sweep"]):
        h = " ".join(runner.invoke(app, [*cmd, "--help"], terminal_width=200).output.split())
        if "batch-timeout-us" in h:
            assert "default: 200" in h or "200]" in h, h


def test_the_old_top_level_names_still_work_and_say_the_new_one(tmp_path: Path) -> None:
    """`offload inject` and `offload sweep` moved under `offload serve`; the old names stay,
    hidden, for one release, and say so on stderr."""
    from typer.testing import CliRunner

    from offload.cli import app

    top = " ".join(CliRunner().invoke(app, ["--help"], terminal_width=200).output.split())
    assert " inject " not in top and " sweep " not in top  # hidden
    given = ["--ruletype", str(tmp_path / "none.xml"), "--rules", "r.csv", "--trace", str(tmp_path)]
    for cmd, extra in (("inject", ["-e", "ipc:///none"]), ("sweep", [])):
        r = subprocess.run([*OFFLOAD, cmd, *given, *extra], capture_output=True, text=True, timeout=60)
        assert r.returncode == 2, r.stderr
        assert r.stderr.splitlines()[0] == (
            f"offload {cmd} is now offload serve {cmd} (the old name goes in the next release)"
        ), r.stderr
        assert "Traceback" not in r.stderr


def test_a_truncated_trace_is_refused_with_its_line(data: dict[str, object], tmp_path: Path) -> None:
    """A queries.csv cut mid-row (a full disk in an older version, a copy cut short) is named
    with its line before anything is sent, never replayed wrong or an IndexError."""
    d = data["dir"]
    assert isinstance(d, Path)
    trace = tmp_path / "trace"
    trace.mkdir()
    text = (d / "queries.csv").read_text()
    (trace / "queries.csv").write_text(text[: len(text) // 2])
    shutil.copy(d / "requests.csv", trace / "requests.csv")
    ep = f"ipc://{sock_dir()}/none.sock"
    r = subprocess.run(
        [*OFFLOAD, "serve", "inject", "-e", ep, *flags(data), "--trace", str(trace)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("error: ") and "queries.csv:" in r.stderr and "Traceback" not in r.stderr
