"""Every input of the service bounded, every file it writes whole (issue 39): settings out of
their range refused wherever they come from, a changed batching setting applied to the batch
already waiting, a frame over the size bound dropped, control commands that give up
connecting, reloads checked against the file's digest or row count, key pairs written whole on
a full disk, numeric options of `offload serve ...` checked at the edge, Ctrl-C under inject.
Real daemons and real `python -m offload.cli` processes; every wait is bounded."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq

from conftest import half_written, mini_trace
from offload.serve import Client, daemon
from offload.serve.control import control_request

EXAMPLE = Path(__file__).resolve().parents[2] / "data" / "examples" / "mct-mini"
OFFLOAD = [sys.executable, "-m", "offload.cli"]
CRITERIA = ["CTN_TYPE", "APT", "IN_CRR", "OUT_CRR", "OUT_FLT_RG", "VALIDITY"]
QUERY = [["II"], ["ZRH"], ["LX"], ["LX"], ["1234"], ["15MAR2026"]]


@pytest.fixture
def sock() -> Iterator[Path]:
    """A short directory for IPC socket files (their paths are limited to ~107 bytes)."""
    d = Path(tempfile.mkdtemp(prefix="offload-bounds-", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def rules_dir(tmp_path: Path) -> Path:
    """A copy of the example rule set, so that a reload may read (and the test write) there."""
    d = tmp_path / "rules"
    d.mkdir()
    for f in ("ruletype.toml", "rules.csv"):
        shutil.copy(EXAMPLE / f, d / f)
    return d


def run(
    *args: str, timeout: float = 60, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*OFFLOAD, *args], capture_output=True, text=True, timeout=timeout, env=env)


def one_error_line(r: subprocess.CompletedProcess[str], code: int = 2) -> str:
    """The one `error:` line of a refused command (and its exit code checked)."""
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), r.stderr
    assert "Traceback" not in r.stderr
    return lines[0]


def start(rules: Path, sock: Path, *extra: str) -> tuple[subprocess.Popen[str], str, str]:
    ep, ctl = f"ipc://{sock}/o.sock", f"ipc://{sock}/c.sock"
    proc = daemon.start(*daemon.rule_flags(rules / "ruletype.toml", rules / "rules.csv"), "-e", ep, "-c", ctl,
                        *extra, timeout_s=30)  # fmt: skip
    return proc, ep, ctl


# -- item 11: every setting bounded, in one place; a change applies to the waiting batch


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--batch-timeout-us", "18446744073709551615"], "batch"),
        (["--batch-max-queries", "4000000000"], "batch"),
        (["--kernels", "100000"], "kernels"),
        (["--workers", "100000"], "workers"),
        (["-e", "garbage"], "not a ZeroMQ endpoint"),
    ],
)
def test_a_setting_out_of_its_range_is_refused_at_start(rules_dir: Path, flags: list[str], says: str) -> None:
    r = run(
        "serve", *daemon.rule_flags(rules_dir / "ruletype.toml", rules_dir / "rules.csv"), *flags, timeout=30
    )
    line = one_error_line(r)
    assert says in line and "serving" not in r.stderr, line
    assert "without authentication" not in line and "inproc" not in line, line


def test_the_file_and_the_variables_are_bounded_as_the_flags(rules_dir: Path) -> None:
    cfg = rules_dir / "serve.toml"
    cfg.write_text("ruletype = 'ruletype.toml'\nrules = 'rules.csv'\nbatch_timeout_us = 3600000000\n")
    line = one_error_line(run("serve", "--config", str(cfg), timeout=30))
    assert "batch_timeout_us" in line and str(cfg) in line and "1000000" in line, line
    env = {**os.environ, "OFFLOAD_SERVE_BATCH_MAX_QUERIES": "4000000000"}
    line = one_error_line(
        run(
            "serve",
            *daemon.rule_flags(rules_dir / "ruletype.toml", rules_dir / "rules.csv"),
            env=env,
            timeout=30,
        )
    )
    assert "4000000000" in line and "batch-max-queries" in line, line


def test_set_refuses_what_would_stall_and_a_change_applies_to_the_waiting_batch(
    rules_dir: Path, sock: Path
) -> None:
    proc, ep, ctl = start(rules_dir, sock, "--batch-max-queries", "1000", "--batch-timeout-us", "1000000")
    try:
        for key, value in (("batch_max_queries", 4_000_000_000), ("batch_timeout_us", 3_600_000_000)):
            answer = control_request(ctl, f"set {key} {value}", 5)
            assert answer["ok"] is False and key in answer["error"] and "range" in answer["error"], answer
        line = one_error_line(run("serve", "set", "-c", ctl, "batch_timeout_us", "3600000000"))
        assert "batch_timeout_us 3600000000 is out of range: 0..=1000000" in line, line
        assert control_request(ctl, "stats", 5)["batch_timeout_us"] == 1_000_000  # unchanged
        with Client(ep, criteria=CRITERIA, timeout_s=5) as c:
            assert c.match(QUERY).ok  # warm: the connection is made
            rid, frame = c.request_frame(QUERY)
            t0 = time.perf_counter()
            c.send_frame(frame)  # one query: its batch waits up to 1 s for 999 more
            time.sleep(0.1)
            assert control_request(ctl, "set batch_timeout_us 0", 5)["ok"] is True
            reply = c.receive(rid, t0)
            took = time.perf_counter() - t0
        assert reply.ok and took < 0.6, took  # released by the change, not by the old second
    finally:
        daemon.stop(proc)


# -- item 16: the data socket's frames are bounded


def test_a_frame_over_the_request_bound_is_dropped_and_the_daemon_serves_on(
    rules_dir: Path, sock: Path
) -> None:
    proc, ep, ctl = start(rules_dir, sock, "--max-request-bytes", "1048576")
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    try:
        s.connect(ep)
        s.send(b"OFQ2" + bytes(2 << 20))  # 2 MiB of nothing: never read into a request
        assert not s.poll(1000), "a frame over the bound was answered"
        with Client(ep, criteria=CRITERIA, timeout_s=5) as c:
            assert c.match(QUERY).ok
        assert control_request(ctl, "stats", 5)["malformed"] == 0
    finally:
        s.close()
        ctx.term()
        daemon.stop(proc)


# -- item 15: one connect timeout for every control command


def test_reload_against_nothing_gives_up_within_the_connect_timeout(rules_dir: Path, sock: Path) -> None:
    t0 = time.monotonic()
    rt, rules, ctl = (
        str(rules_dir / "ruletype.toml"),
        str(rules_dir / "rules.csv"),
        f"ipc://{sock}/nothing.sock",
    )
    r = run("serve", "reload", "-c", ctl, "--ruletype", rt, "--rules", rules, timeout=60)
    took = time.monotonic() - t0
    line = one_error_line(r)
    assert took < 12, took
    assert "nothing.sock" in line and "5" in line and "--connect-timeout" in line, line
    from typer.testing import CliRunner

    from offload.cli import app

    for cmd in ("reload", "stats", "set"):
        h = " ".join(CliRunner().invoke(app, ["serve", cmd, "--help"], terminal_width=200).output.split())
        assert "--connect-timeout" in h and "5.0" in h, h


# -- item 6: a reload checked against the rules file's digest or row count


def test_a_partly_written_rules_file_is_refused_by_its_digest_or_rows(rules_dir: Path, sock: Path) -> None:
    full = (rules_dir / "rules.csv").read_text()
    new = rules_dir / "new.csv"
    new.write_text(full[:-3] + "\n")  # the last value cut short, as by a writer still writing
    digest = hashlib.sha256(full.encode()).hexdigest()
    rows = len(full.strip().splitlines()) - 1
    proc, _, ctl = start(rules_dir, sock)
    base = ["serve", "reload", "-c", ctl, "--ruletype", str(rules_dir / "ruletype.toml"), "--rules", str(new)]
    try:
        for send in ([], ["--send"]):  # read by the daemon, or sent by the command
            r = run(*base, *send, "--sha256", digest)
            assert r.returncode == 1, r.stdout + r.stderr
            answer = json.loads(r.stdout)
            assert answer["ok"] is False and answer["version"] == 1 and "sha256" in answer["error"], answer
        answer = control_request(ctl, f"reload\n{rules_dir / 'ruletype.toml'}\n{new}\nrows {rows + 1}", 20)
        assert answer["ok"] is False and f"{rows + 1}" in answer["error"] and answer["version"] == 1, answer
        new.write_text(full)
        answer = control_request(
            ctl, f"reload\n{rules_dir / 'ruletype.toml'}\n{new}\nsha256 {digest}\nrows {rows}", 20
        )
        assert answer["ok"] is True and answer["version"] == 2, answer
        line = one_error_line(run(*base, "--sha256", "abc"))
        assert "--sha256" in line and "64" in line, line
    finally:
        daemon.stop(proc)


# -- item 9: key pairs whole or not at all


def test_keys_on_a_full_disk_leave_no_half_pair_and_a_leftover_does_not_block(small_tmpfs: Path) -> None:
    keys = small_tmpfs / "keys"
    keys.mkdir()
    filler = small_tmpfs / "filler"
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(bytes(1 << 16))
                f.flush()
        except OSError:
            pass
    line = one_error_line(run("serve", "keys", str(keys), "--name", "server"))
    assert str(keys) in line, line
    assert sorted(p.name for p in keys.iterdir()) == [] and not half_written(keys)
    filler.unlink()
    (keys / "server.key_secret").write_text("")  # a leftover of an older version on a full disk
    r = run("serve", "keys", str(keys), "--name", "server")
    assert r.returncode == 0, r.stderr
    text = (keys / "server.key_secret").read_text()
    assert "secret-key" in text and "public-key" in (keys / "server.key").read_text()
    line = one_error_line(run("serve", "keys", str(keys), "--name", "server"))
    assert "already exists" in line and "--force" in line, line
    assert (keys / "server.key_secret").read_text() == text


# -- items 5, 13, 18, 19: numeric and named options of inject checked at the edge


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["-p", "0"], "--processes"),
        (["--mode", "open", "--rate", "0"], "--rate"),
        (["--mode", "open", "--rate", "-5"], "--rate"),
        (["--duration", "0"], "--duration"),
        (["--duration", "-1"], "--duration"),
        (["--request-size", "-1"], "--request-size"),
        (["--mode", "bogus"], "--mode"),
    ],
)
def test_inject_refuses_numbers_and_names_outside_their_domain(
    extra: list[str], says: str, sock: Path
) -> None:
    r = run("serve", "inject", "-e", f"ipc://{sock}/none.sock", "--ruletype", str(EXAMPLE / "ruletype.toml"),
            "--rules", str(EXAMPLE / "rules.csv"), "--trace", str(sock), *extra, timeout=30)  # fmt: skip
    assert r.returncode == 2, r.stdout + r.stderr
    assert says in r.stderr and "Traceback" not in r.stderr and "ValueError" not in r.stderr, r.stderr


def test_an_inject_where_every_request_failed_reports_no_percentiles(
    rules_dir: Path, sock: Path, tmp_path: Path
) -> None:
    """The trace's columns follow another rule type (a synthetic one's would): every request is
    refused, and the latency is none, not 0 µs."""
    trace = mini_trace(tmp_path)
    (trace / "queries.csv").write_text((trace / "queries.csv").read_text().replace("CTN_TYPE", "CTN_KIND"))
    other = tmp_path / "other.toml"
    other.write_text((rules_dir / "ruletype.toml").read_text().replace("CTN_TYPE", "CTN_KIND"))
    rules = tmp_path / "other.csv"
    rules.write_text((rules_dir / "rules.csv").read_text().replace("CTN_TYPE", "CTN_KIND"))
    proc, ep, _ = start(rules_dir, sock)
    try:
        r = run("serve", "inject", "-e", ep, "--ruletype", str(other), "--rules", str(rules),
                "--trace", str(trace), "-p", "1", "--duration", "0.3", "--out", str(tmp_path / "i.json"),
                "--json")  # fmt: skip
    finally:
        daemon.stop(proc)
    assert r.returncode == 1, r.stdout + r.stderr
    result = json.loads(r.stdout)
    assert result["status"].get("Ok", 0) == 0 and result["status"]["BadRequest"] > 0, result["status"]
    assert result["latency_us"] == {"p50": None, "p90": None, "p99": None, "max": None}
    assert result["processes"] == 1


def test_a_sweep_refuses_settings_the_daemon_would_not_take(tmp_path: Path) -> None:
    """Checked against the daemon's own table of ranges before any daemon starts."""
    rt, rules = str(EXAMPLE / "ruletype.toml"), str(EXAMPLE / "rules.csv")
    given = ["serve", "sweep", "--ruletype", rt, "--rules", rules, "--trace", str(mini_trace(tmp_path)),
             "--out", str(tmp_path / "s.json")]  # fmt: skip
    line = one_error_line(run(*given, "--batch", "0,4000000000"))
    assert "batch_max_queries 4000000000" in line and "1048576" in line, line
    line = one_error_line(run(*given, "--w", "0"))
    assert "workers 0" in line, line
    assert not (tmp_path / "s.json").exists()


# -- item 17: Ctrl-C under inject -p 2: one line, exit 130


def _as_a_terminal_starts_it() -> None:
    """SIGINT as a shell's foreground job has it: handled and unblocked. The test's own process
    may ignore it (a background job of a non-interactive shell does: `make test &`), and a
    command keeps an ignored SIGINT ignored, as `nohup` asks."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


@pytest.mark.parametrize("when", ["sending", "starting"])
def test_ctrl_c_under_inject_is_one_line_and_130(
    rules_dir: Path, sock: Path, tmp_path: Path, when: str
) -> None:
    """Whenever it comes: while the generator sends, or while the command starts (imports, the
    trace read, frames built, connections made: a Ctrl-C then was once lost, and the injector
    ran its whole duration)."""
    proc, ep, ctl = start(rules_dir, sock)
    cmd = [*OFFLOAD, "serve", "inject", "-e", ep, "--ruletype", str(rules_dir / "ruletype.toml"),
           "--rules", str(rules_dir / "rules.csv"), "--trace", str(mini_trace(tmp_path)), "-p", "2",
           "--duration", "30", "--out", str(tmp_path / "i.json")]  # fmt: skip
    said = (tmp_path / "stderr").open(
        "w+"
    )  # a file, not a pipe: what the command itself says and when it ends
    inj = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=said, text=True, start_new_session=True,
                           preexec_fn=_as_a_terminal_starts_it)  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        if when == "sending":
            while control_request(ctl, "stats", 5)["ok"] < 200 and time.monotonic() < deadline:
                time.sleep(0.05)
        else:
            time.sleep(0.3)  # somewhere in its start, whichever part
        os.killpg(inj.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole process group
        try:
            inj.wait(timeout=20)
        except subprocess.TimeoutExpired:
            group = subprocess.run(["ps", "-s", str(inj.pid), "-o", "pid,stat,wchan:20,args"],
                                   capture_output=True, text=True).stdout  # fmt: skip
            raise AssertionError(f"still running 20 s after Ctrl-C:\n{group}") from None
    finally:
        with contextlib.suppress(ProcessLookupError):  # whatever is left of its session
            os.killpg(inj.pid, signal.SIGKILL)
        daemon.stop(proc)
    said.seek(0)
    err = said.read()
    said.close()
    assert inj.returncode == 130, err
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert not (tmp_path / "i.json").exists()
