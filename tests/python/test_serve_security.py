"""The service's security from a user's side, against a real daemon on TCP loopback: key files
from `offload serve keys`, CURVE on the control and data sockets (no keys, a stranger's key or a
wrong server key get nothing; the admitted key gets everything), the issue's file-disclosure
case, reload by path only under the reload directories, reload with the files sent, and open
binds refused before anything listens. Every wait is bounded."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from offload import rules
from offload.serve import Client, CurveKeys, ServeError, daemon
from offload.serve.cli import control_request

EXAMPLE = Path(__file__).resolve().parents[2] / "data" / "examples" / "mct-mini"
QUERIES = {
    "CTN_TYPE": ["II", "DD"],
    "APT": ["ZRH", "CDG"],
    "IN_CRR": ["LX", "AF"],
    "OUT_CRR": ["LX", "AF"],
    "OUT_FLT_RG": ["1234", "7"],
    "VALIDITY": ["15MAR2026", "01JAN2026"],
}


def offload(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "offload.cli", *args], capture_output=True, text=True, timeout=60
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("keys")
    r = offload("serve", "keys", str(d), "--name", "server", "--name", "ops", "--name", "eve")
    assert r.returncode == 0, r.stderr
    return d


@pytest.fixture(scope="module")
def secured(keys: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A daemon with CURVE on both sockets, admitting `ops`, reloading only from its rules dir."""
    rules_dir = tmp_path_factory.mktemp("rules")
    for f in ("ruletype.toml", "rules.csv"):
        shutil.copy(EXAMPLE / f, rules_dir / f)
    data, control = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    proc = daemon.start(
        *daemon.rule_flags(rules_dir / "ruletype.toml", rules_dir / "rules.csv"),
        "-e", data, "-c", control,
        "--curve-secret-key", str(keys / "server.key_secret"),
        "--curve-client", str(keys / "ops.key"), "--curve-data-client", str(keys / "ops.key"),
        timeout_s=30,
    )  # fmt: skip
    yield {"data": data, "control": control, "rules_dir": str(rules_dir)}
    daemon.stop(proc)


def test_keys_are_zeromq_certificates_and_secrets_stay_private(keys: Path) -> None:
    import zmq.auth

    public, secret = zmq.auth.load_certificate(str(keys / "ops.key_secret"))  # pyzmq reads ours
    assert secret is not None and zmq.auth.load_certificate(str(keys / "ops.key"))[0] == public
    assert stat.S_IMODE(os.stat(keys / "ops.key_secret").st_mode) == 0o600
    again = offload("serve", "keys", str(keys), "--name", "ops")
    assert again.returncode == 2 and "--force" in again.stderr


def test_control_admits_only_the_listed_key(keys: Path, secured: dict[str, str]) -> None:
    ctl = secured["control"]
    ops = CurveKeys(keys / "server.key", keys / "ops.key_secret")
    with pytest.raises(TimeoutError, match="CURVE"):  # no keys: nothing, and a hint why
        control_request(ctl, "stats", 0.5)
    for cmd in ("stats", "set batch_max_queries 1", "reload\nruletype.toml\nrules.csv"):
        with pytest.raises(PermissionError, match="refused this client's key"):
            control_request(ctl, cmd, 5, CurveKeys(keys / "server.key", keys / "eve.key_secret"))
    with pytest.raises(TimeoutError, match="server-key"):
        control_request(ctl, "stats", 0.5, CurveKeys(keys / "eve.key", keys / "ops.key_secret"))
    st = control_request(ctl, "stats", 10, ops)
    assert st["version"] == 1 and st["auth"]["control"] == "curve" and st["auth"]["control_refused"] >= 3
    assert control_request(ctl, "set batch_max_queries 0", 10, ops)["ok"]
    # the same through the CLI, keys from the environment
    env = {**os.environ, "OFFLOAD_SERVER_KEY": str(keys / "server.key")}
    cmd = ["serve", "stats", "-c", ctl, "--client-key", str(keys / "ops.key_secret")]
    r = subprocess.run(
        [sys.executable, "-m", "offload.cli", *cmd], capture_output=True, text=True, timeout=60, env=env
    )
    assert r.returncode == 0 and '"control_ok"' in r.stdout, r.stderr


def test_reload_discloses_no_file_and_reads_only_its_directory(keys: Path, secured: dict[str, str]) -> None:
    ctl, ops = secured["control"], CurveKeys(keys / "server.key", keys / "ops.key_secret")
    rt = Path(secured["rules_dir"]) / "ruletype.toml"
    # The case: a valid rule type and /etc/passwd as the rules.
    answer = control_request(ctl, f"reload\n{rt}\n/etc/passwd", 30, ops)
    assert answer["ok"] is False and "root" not in answer["error"] and "reload directories" in answer["error"]
    (Path(secured["rules_dir"]) / "broken.csv").write_text("PRIVATE-HEADER\n")
    answer = control_request(ctl, "reload\nruletype.toml\nbroken.csv", 30, ops)
    assert "broken.csv:1:1: error[missing-column]" in answer["error"] and "PRIVATE" not in answer["error"]
    assert control_request(ctl, "reload\nruletype.toml\nrules.csv", 30, ops)["version"] == 2
    # files from elsewhere go in the request: `reload --send`
    r = offload(
        "serve", "reload", "-c", ctl, "--server-key", str(keys / "server.key"),
        "--client-key", str(keys / "ops.key_secret"),
        "--ruletype", str(EXAMPLE / "ruletype.toml"), "--rules", str(EXAMPLE / "rules.csv"), "--send",
    )  # fmt: skip
    assert r.returncode == 0 and '"version": 3' in r.stdout, r.stdout + r.stderr


def test_data_endpoint_with_curve_answers_only_admitted_clients(keys: Path, secured: dict[str, str]) -> None:
    rs = rules.load(EXAMPLE / "ruletype.toml", EXAMPLE / "rules.csv")
    expected = rules.compile(rs).match(QUERIES).rule
    with Client(secured["data"], criteria=rs.criterion_codes, timeout_s=0.4) as c, pytest.raises(ServeError):
        c.match(QUERIES)
    eve = CurveKeys(keys / "server.key", keys / "eve.key_secret")
    with Client(secured["data"], criteria=rs.criterion_codes, timeout_s=0.4, curve=eve) as c:
        with pytest.raises(ServeError):
            c.match(QUERIES)
    ops = CurveKeys(keys / "server.key", keys / "ops.key_secret")
    with Client(secured["data"], criteria=rs.criterion_codes, timeout_s=20, curve=ops) as c:
        r = c.match(QUERIES)
    assert r.ok and np.array_equal(r.rule, expected)
    st = control_request(secured["control"], "stats", 10, ops)
    assert st["auth"]["data"] == "curve" and st["auth"]["data_refused"] >= 1 and st["auth"]["data_ok"] >= 1


def test_sends_wait_no_longer_than_the_deadline() -> None:
    """A connection the daemon closes mid-handshake can leave a socket with nowhere to send until
    it reconnects; a send without a deadline then waits for ever (it did, once, in CI). Here the
    socket has no connection at all, for certain."""
    import time

    import zmq

    from offload.serve.control import _Handshake

    endpoint = f"tcp://127.0.0.1:{free_port()}"
    ctx = zmq.Context.instance()
    req = ctx.socket(zmq.REQ)
    req.setsockopt(zmq.IMMEDIATE, 1)  # no pipe before a connection: nothing can be sent
    req.setsockopt(zmq.LINGER, 0)
    monitor = req.get_monitor_socket(zmq.EVENT_DISCONNECTED)
    req.connect(endpoint)
    t0 = time.monotonic()
    h = _Handshake(req, monitor, endpoint, 0.3, curve=False)
    with pytest.raises(TimeoutError, match="no answer from"):
        h.wait(zmq.POLLOUT, h.deadline)
    with pytest.raises(TimeoutError, match=r"no connection to .* within 0\.2 s"):  # waiting to connect
        h.wait(zmq.POLLOUT, time.monotonic() + 0.2, 0.2)
    assert time.monotonic() - t0 < 5
    req.disable_monitor()
    monitor.close(linger=0)
    req.close(linger=0)

    with Client(endpoint, list(QUERIES), timeout_s=0.3) as c:
        c.disconnect(endpoint)  # the same state: a DEALER with no pipe
        t0 = time.monotonic()
        with pytest.raises(ServeError, match="could not send"):
            c.match(QUERIES)
        assert time.monotonic() - t0 < 5


def test_open_binds_are_refused_before_anything_listens() -> None:
    flags = ["serve", *daemon.rule_flags(EXAMPLE / "ruletype.toml", EXAMPLE / "rules.csv")]
    # the command: refuses to start, and says how to do it properly
    r = offload(*flags, "-e", "tcp://0.0.0.0:5591", "-c", "tcp://0.0.0.0:5592")
    assert r.returncode == 2 and "offload serve keys" in r.stderr and "--curve-secret-key" in r.stderr
    r = offload(*flags, "-e", "tcp://0.0.0.0:5591")
    assert r.returncode == 2 and "--allow-remote-data" in r.stderr
    r = offload(*flags, "--metrics", "0.0.0.0:9464")
    assert r.returncode == 2 and "--allow-remote-metrics" in r.stderr


def test_every_option_of_every_command_shows_its_default() -> None:
    """`--help` teaches: each option that is not required states its default (typer shows plain
    defaults itself; options whose default is None say it in their help, with the bracket
    escaped: rich markup would swallow a bare `[default: …]`)."""
    import typer.main
    from typer.testing import CliRunner

    from offload.cli import app

    shown = CliRunner().invoke(app, ["serve", "--help"], env={"COLUMNS": "200"}).output
    assert "[default: 2]" in shown and "[default: refused]" in shown, shown

    missing = []

    def walk(cmd: Any, path: str) -> None:
        for p in cmd.params:
            if p.param_type_name != "option" or p.required or p.hidden or p.name in ("help", "version"):
                continue
            flag_off = p.is_flag and not p.default
            shown = p.default is not None and p.show_default is not False and not flag_off
            if not (flag_off or shown or "\\[default:" in (p.help or "")):
                missing.append(f"{path} {p.opts[0]}")
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, f"{path} {name}")

    walk(typer.main.get_command(app), "offload")
    assert not missing, "options without a stated default: " + ", ".join(missing)


def test_start_sees_serving_among_lines_printed_together() -> None:
    """The daemon prints its CURVE lines and "serving" in one write: the wait must find the word
    in the same read (a buffered readline missed it and timed out in CI)."""
    lines = "control: CURVE\\ndata: CURVE\\nserving 9 rules\\n"
    child = f"import sys, time; sys.stderr.write('{lines}'); sys.stderr.flush(); time.sleep(30)"
    proc = subprocess.Popen([sys.executable, "-c", child], stderr=subprocess.PIPE, text=True)
    try:
        said = daemon.wait_for_word(proc, "serving", timeout_s=10)
        assert said.splitlines() == ["control: CURVE", "data: CURVE", "serving 9 rules"]
    finally:
        proc.kill()
        proc.communicate(timeout=10)
