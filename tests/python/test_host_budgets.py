"""Node budgets for real: a node process under its profile's CPU quota and memory limit (cgroup v1)
and a shaped link in a network namespace of its own, checked from a client in that namespace.
Skipped, with the reason, where the machine has no cgroups, namespaces or tc."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from offload.host import budgets as B
from offload.host import links as L
from offload.host.children import wait_ready

pytest.importorskip("datafusion")


def test_links_parse_and_refuse_nonsense() -> None:
    assert B.Link.parse("1000mbit,0.5ms") == B.Link(1000.0, 0.5)
    assert B.Link.parse("10gbit") == B.Link(10_000.0, 0.0)
    assert B.Link.parse("none") == B.Link() and not B.Link().shaped
    for bad in ("fast", "10parsecs", "100mbit,soon"):
        with pytest.raises(ValueError, match="RATE"):
            B.Link.parse(bad)
    with pytest.raises(ValueError, match="> 0"):
        B.Link(0)
    with pytest.raises(ValueError, match="cpu per thread"):
        B.profile("bluefield2").with_(cpu_per_thread=1.5)
    with pytest.raises(ValueError, match=r"unknown profile 'dpu9'.*bluefield2"):
        B.profile("dpu9")
    assert B.profile("bluefield2").cpu_per_thread == 0.25  # the seed: hosts ~4x faster per thread


def _serve(tmp: Path, *args: str) -> tuple[subprocess.Popen[str], int, Path]:
    tf = tmp / "token"
    env = {**os.environ, "HOME": str(tmp)}
    cmd = [sys.executable, "-m", "offload.cli", "node", "serve", "--port", "0", "--token-file", str(tf)]
    out = subprocess.PIPE
    p = subprocess.Popen(
        [*cmd, "--max-seconds", "60", *args], stdout=out, stderr=subprocess.STDOUT, text=True, env=env
    )
    serving = "serving on grpc://127.0.0.1:"

    def ready(text: str) -> bool:  # the serving line, then the line that names the profile
        return serving in text and "profile" in text[text.index(serving) :]

    try:
        said = wait_ready(p, ready, 30, "node")
    except RuntimeError as e:
        raise AssertionError(str(e)) from None
    return p, int(said.split(serving)[1].split()[0]), tf


def _cli(tmp: Path, port: int, tf: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [
        sys.executable,
        "-m",
        "offload.cli",
        "node",
        *args,
        "--node",
        f"127.0.0.1:{port}",
        "--token-file",
        str(tf),
    ]
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=60, env={**os.environ, "HOME": str(tmp)}
    )


def test_a_bluefield2_node_runs_under_its_cpu_quota_and_memory_limit(tmp_path: Path) -> None:
    p, port, tf = _serve(tmp_path, "--profile", "bluefield2")
    try:
        st = json.loads(_cli(tmp_path, port, tf, "list", "--json").stdout)
        cpu, mem = st["budget"]["cpu"], st["budget"]["memory"]
        if cpu["method"].startswith("cgroup-v"):
            assert cpu["quota_us"] == 2_500 and cpu["period_us"] == 10_000
            assert Path(cpu["cgroup"], "cgroup.procs").read_text().split()[0] == str(p.pid)
        else:
            assert cpu["method"] == "pinned" and cpu["reason"]
        if mem["method"].startswith("cgroup-v"):
            limit = "memory.max" if mem["method"] == "cgroup-v2-memory" else "memory.limit_in_bytes"
            assert int(Path(mem["cgroup"], limit).read_text()) == 4 << 30
        else:
            assert mem["reason"]
    finally:
        p.terminate()
        p.wait(20)
    for c in (cpu, mem):
        if "cgroup" in c:
            assert not Path(c["cgroup"]).exists()  # released at exit


@pytest.mark.skipif(L.unavailable_reason() is not None, reason=str(L.unavailable_reason()))
def test_a_shaped_link_sets_the_transfer_time(tmp_path: Path) -> None:
    from offload.dataservices import particles as P

    P.write(P.generate(100_000, seed=2), tmp_path / "p.parquet")  # 6.1 MB in memory
    ns = f"test{os.getpid()}"
    p, port, tf = _serve(tmp_path, "--netns", ns, "--link", "40mbit", "--data-dir", str(tmp_path))
    try:
        assert _cli(tmp_path, port, tf, "load", "p", "--path", "p.parquet", "--netns", ns).returncode == 0
        r = _cli(tmp_path, port, tf, "query", "select * from p where x < 0.001", "--netns", ns, "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        runs = json.loads(r.stdout)["runs"]
        back, off = runs["pushback"], runs["offload"]
        wire_s = back["arrow_bytes"] * 8 / 40e6  # 6.4 MB at 40 Mbit/s: ~1.3 s
        assert back["fetch"] >= 0.8 * wire_s, back
        assert off["fetch"] < 0.3 * back["fetch"], off  # ~100 rows come back
        # The host's own loopback is not shaped: the node is not even reachable there.
        outside = _cli(tmp_path, port, tf, "list")
        assert outside.returncode != 0
    finally:
        p.terminate()
        p.wait(20)
        L.remove_namespace(ns)


def test_the_models_know_a_node_by_its_profile_and_compute() -> None:
    bf = B.profile("bluefield2")
    assert bf.system(bf) == "bluefield2"
    assert bf.with_(link=B.Link(100.0), memory_bytes=1 << 30).system(bf) == "bluefield2"
    assert bf.with_(threads=2).system(bf) == "bluefield2-2x0.25"
    assert B.profile("core").cpu_per_thread == 1.0
