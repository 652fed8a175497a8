"""`offload serve bench`'s generator after issue 40: Poisson arrivals and each way of pacing and
speaking to the daemon answered in full; `--cpus` for the generator and the daemon (checked, one
line and exit 2 when wrong; the daemon's threads run there); `--netns` runs the generator in a
namespace of its own over a veth pair (skipped where namespaces cannot be made); and the report
says in its first line when the generator was the bound. Real daemons, short runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from offload.cli import app
from offload.host import links
from offload.serve import bench, daemon

MINI = Path(__file__).resolve().parents[2] / "data" / "examples" / "mct-mini"
RULES = ["--ruletype", str(MINI / "ruletype.toml"), "--rules", str(MINI / "rules.csv")]
QUERIES = ["--queries", str(MINI / "queries.csv"), "--request-size", "16"]


def _json(r: object) -> dict:
    out = r.stdout  # type: ignore[attr-defined]
    return json.loads(out)


def test_every_way_of_sending_is_served(tmp_path: Path) -> None:
    ep = f"ipc://{tmp_path}/d.sock"
    proc = daemon.start(*RULES, "-e", ep, "--kernels", "0", "--workers", "1")
    try:
        for extra in (
            ["--arrivals", "poisson", "--seed", "3"],
            ["--pacing", "per-request", "--client-socket", "libzmq"],
            ["--wake-on-replies", "--max-tick-us", "50"],
        ):
            argv = ["serve", "bench", "-e", ep, *RULES, *QUERIES, "--encoded", "--rate", "300",
                    "--duration", "0.3", "--drain", "1", "--json", *extra]  # fmt: skip
            r = CliRunner().invoke(app, argv)
            assert r.exit_code == 0, (extra, r.output)
            res = _json(r)
            assert res["status"]["Ok"] == res["sent"] > 30 and res["unanswered"] == 0, (extra, res)
        assert res["pacing"] == {**res["pacing"], "mode": "ticks", "replies": "woken", "max_tick_us": 50.0}
    finally:
        daemon.stop(proc)


def test_cpus_that_are_not_there_are_one_line() -> None:
    first = min(os.sched_getaffinity(0))
    assert bench.parse_cpus(f"{first},{first}-{first}") == {first}
    for bad in ("x", "3-1", "9999"):
        r = CliRunner().invoke(
            app, ["serve", "bench", "-e", "ipc:///nonexistent", *RULES, *QUERIES, "--cpus", bad]
        )
        said = " ".join(r.output.replace("│", " ").split())
        assert r.exit_code == 2 and "--cpus" in said and "Traceback" not in r.output, (bad, r.output)
    r = subprocess.run([sys.executable, "-m", "offload.cli", "serve", *RULES, "--cpus", "9999"],
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 2 and "cpus" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_the_daemon_runs_on_its_cpus(tmp_path: Path) -> None:
    cpu = max(os.sched_getaffinity(0))
    proc = daemon.start(*RULES, "-e", f"ipc://{tmp_path}/d.sock", "--kernels", "1", "--cpus", str(cpu))
    try:
        tasks = list(Path(f"/proc/{proc.pid}/task").iterdir())
        assert len(tasks) > 2
        assert {os.sched_getaffinity(int(t.name)) == {cpu} for t in tasks} == {True}
    finally:
        daemon.stop(proc)


def _netns_works() -> str | None:
    why = links.unavailable_reason()
    if why:
        return why
    probe = f"offload-probe-{os.getpid()}"
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, timeout=10)
    if r.returncode != 0:
        return f"ip netns add: {r.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=10)
    return None


def test_the_generator_runs_as_a_remote_client_over_veth(tmp_path: Path) -> None:
    """The daemon in a namespace of its own on tcp://127.0.0.1; the generator in another one,
    reaching it over the veth pair, which is gone with its namespace when the command ends."""
    why = _netns_works()
    if why:
        pytest.skip(f"network namespaces: {why}")
    here, there = f"gtest-d{os.getpid()}", f"gtest-c{os.getpid()}"
    ns = links.ensure_namespace(here)
    enter = ["nsenter", f"--net=/run/netns/{ns}"]
    port = 21000 + os.getpid() % 20000
    ep = f"tcp://127.0.0.1:{port}"
    out = tmp_path / "r.json"
    try:
        serve = [*enter, sys.executable, "-m", "offload.cli", "serve", *RULES, "-e", ep, "--kernels", "0"]
        proc = subprocess.Popen(serve, stderr=subprocess.PIPE, text=True)
        try:
            daemon.wait_for_word(proc, "serving", 60)
            argv = [*enter, sys.executable, "-m", "offload.cli", "serve", "bench", "-e", ep, *RULES,
                    *QUERIES, "--encoded", "--rate", "300", "--duration", "0.3", "--netns", there,
                    "--out", str(out)]  # fmt: skip
            r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, r.stdout + r.stderr
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        res = json.loads(out.read_text())
        assert res["generator_netns"]["namespace"] == links.namespace_name(there), res["generator_netns"]
        assert res["status"]["Ok"] == res["sent"] > 30 and res["unanswered"] == 0
        time.sleep(0.2)
        assert not links.exists(there), "the generator's namespace outlived the command"
    finally:
        links.remove_namespace(here)
        if links.exists(there):
            links.remove_namespace(there)


def test_the_first_line_says_when_the_generator_was_the_bound() -> None:
    gen = {"process_cpu_s": 1.0, "cpu_us_per_request": 90.0, "cores": 2, "bound": True, "note": None,
           "why": "its sending threads were busy 97% of the run"}  # fmt: skip
    lat = {"p50": 1.0, "p90": 2.0, "p99": 3.0, "p999": 4.0, "max": 5.0}
    run = {"mode": "open", "target_rate_rps": 9e4, "send_rate_rps": 5e4, "requests_per_s": 5e4,
           "queries_per_s": 1e7, "unsent": 0, "unanswered": 0, "latency_us": lat,
           "generator": gen}  # fmt: skip
    lines = bench.report(run)
    assert lines[0].startswith("THE GENERATOR WAS THE BOUND") and "97%" in lines[0], lines
    knee = {"knee": None, "sla_p99_us": 5000.0, "stopped": "the generator was the bound at 9 requests/s: x"}
    lines = bench.report({**knee, "generator": bench.knee_bound(knee)})
    assert lines[0].startswith("THE GENERATOR WAS THE BOUND") and lines[1].startswith("knee"), lines
    assert not bench.report({**run, "generator": {**gen, "bound": False}})[0].startswith("THE")
