"""offload.host: the machine record, waiting for a child to say it is ready, cgroup v2 hosts."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from offload.host import cgroups
from offload.host.children import LineReader, wait_ready
from offload.host.machine import describe, machine


def _child(code: str, stream: str = "stdout") -> subprocess.Popen[str]:
    pipe = {stream: subprocess.PIPE}
    return subprocess.Popen([sys.executable, "-c", code], text=True, **pipe)  # type: ignore[call-overload]


def test_the_deadline_fires_on_a_child_that_never_says_ready() -> None:
    proc = _child("import sys, time; print('starting', flush=True); time.sleep(60)")
    t0 = time.monotonic()
    try:
        with pytest.raises(RuntimeError, match=r"sleeper did not start within 0.5 s; .*last: starting"):
            wait_ready(proc, "serving", 0.5, "sleeper")
        assert time.monotonic() - t0 < 1.5
        assert proc.wait(timeout=5) is not None  # killed at the deadline
    finally:
        proc.kill()
        proc.communicate(timeout=10)


def test_a_child_that_exits_early_is_reported_with_its_code_and_last_output() -> None:
    proc = _child("import sys; print('no such rules file', flush=True); sys.exit(3)")
    try:
        with pytest.raises(RuntimeError, match=r"exited with code 3 .*it printed last: no such rules file"):
            wait_ready(proc, "serving", 10, "node n0")
    finally:
        proc.kill()
        proc.communicate(timeout=10)


def test_lines_printed_together_are_seen_at_once() -> None:
    lines = "control: CURVE\\ndata: CURVE\\nserving 9 rules\\nafter\\n"
    code = f"import sys, time; sys.stderr.write('{lines}'); sys.stderr.flush(); time.sleep(30)"
    proc = _child(code, "stderr")
    t0 = time.monotonic()
    try:
        said = wait_ready(proc, "serving", 10, "daemon", stream="stderr")
        assert time.monotonic() - t0 < 5
        assert said.splitlines() == ["control: CURVE", "data: CURVE", "serving 9 rules", "after"]
    finally:
        proc.kill()
        proc.communicate(timeout=10)


def test_the_reader_answers_line_by_line_and_keeps_the_rest() -> None:
    proc = _child("import sys, time; print('a\\nb\\nc', flush=True); time.sleep(30)")
    try:
        r = LineReader(proc, proc.stdout, "child")
        assert r.until(lambda text: True, 5) == "a\n"
        assert r.until(lambda text: text.endswith("c\n"), 5) == "b\nc\n"
        assert r.rest() == ""
    finally:
        proc.kill()
        proc.communicate(timeout=10)


def test_one_machine_record(tmp_path: Path) -> None:
    m = machine()
    assert m["cores"] == m["cpus"] and m["cores"] >= 1 and m["memory_bytes"] >= 0
    assert {"cpu", "kernel", "system", "arch", "python", "virtual_machine"} <= set(m)
    assert "work_dir" not in m
    d = machine(tmp_path)
    assert d["work_dir"] == str(tmp_path) and d["disk_free_bytes"] >= 0 and d["file_system"]
    assert describe(m).startswith(f"{m['cores']} vCPU ")


def test_a_cgroup_v2_host_is_said_so(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpu memory\n")
    assert cgroups.unified(tmp_path)
    assert cgroups.unavailable_reason("memory", "memory.limit_in_bytes", root=tmp_path) == (
        "cgroup v2 host: not supported yet"
    )
    assert not cgroups.unified(tmp_path / "v1")


def test_this_host_says_why_when_it_is_cgroup_v2() -> None:
    if not cgroups.unified():
        pytest.skip("a cgroup v1 (or hybrid) host: the v2 reason does not apply")
    why = cgroups.unavailable_reason("memory", "memory.limit_in_bytes")
    assert why == "cgroup v2 host: not supported yet"
