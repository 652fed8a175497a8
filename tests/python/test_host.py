"""offload.host: the machine record, waiting for a child to say it is ready, cgroup v2 hosts."""

from __future__ import annotations

import json
import os
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


def _fake_v2(root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A v2 hierarchy in files: the root delegates cpu and memory, the process sits in a leaf
    of a scope that delegates nothing (as under systemd)."""
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (root / "cgroup.subtree_control").write_text("cpu memory pids\n")
    leaf = root / "user.slice" / "session-1.scope"
    leaf.mkdir(parents=True)
    (leaf / "cgroup.subtree_control").write_text("\n")
    monkeypatch.setattr(cgroups, "_self_cgroup_lines", lambda: ["0::/user.slice/session-1.scope"])
    return leaf


def test_cgroup_v2_children_go_under_the_nearest_delegating_ancestor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    leaf = _fake_v2(tmp_path, monkeypatch)
    assert cgroups.unified(tmp_path) and cgroups.version(tmp_path) == 2
    assert not cgroups.unified(tmp_path / "v1")
    assert cgroups.own("memory", tmp_path) == leaf
    assert cgroups.parent_for("memory", tmp_path) == tmp_path
    assert cgroups.unavailable_reason("memory", "memory.limit_in_bytes", root=tmp_path) is None
    assert "no ancestor delegates it" in str(cgroups.unavailable_reason("io", "io.max", root=tmp_path))

    cpu = {"cpu.cfs_period_us": "10000", "cpu.cfs_quota_us": "2500"}
    child = cgroups.make_child("cpu", "offload-node-t", cpu, root=tmp_path)
    assert child == tmp_path / "offload-node-t"
    assert (child / "cpu.max").read_text() == "2500 10000"
    assert not (child / "cpu.cfs_quota_us").exists()
    same = cgroups.make_child("memory", "offload-node-t", {"memory.limit_in_bytes": "4096"}, root=tmp_path)
    assert same == child and (child / "memory.max").read_text() == "4096"
    (child / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 0\n")
    (child / "memory.peak").write_text("8192\n")
    assert cgroups.memory_peak_and_failures(child) == (8192, 3)
    (child / "memory.events").unlink()
    (child / "memory.peak").unlink()
    (child / "cpu.max").unlink()
    (child / "memory.max").unlink()

    cgroups.leave_child("cpu", child, root=tmp_path)  # back into the leaf it came from
    assert (leaf / "cgroup.procs").read_text() == str(os.getpid())
    (child / "cgroup.procs").unlink()
    child.rmdir()
    (leaf / "cgroup.procs").write_text("elsewhere")
    cgroups.leave_child("memory", child, root=tmp_path)  # one child for both: left already
    assert (leaf / "cgroup.procs").read_text() == "elsewhere"


def test_a_v1_host_says_which_controller_is_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cgroups, "_self_cgroup_lines", lambda: ["4:memory:/a", "3:cpu,cpuacct:/a"])
    assert cgroups.version(tmp_path) == 1
    assert cgroups.own("memory", tmp_path) == tmp_path / "memory" / "a"
    assert cgroups.own("cpu", tmp_path) == tmp_path / "cpu,cpuacct" / "a"
    why = cgroups.unavailable_reason("memory", "memory.limit_in_bytes", root=tmp_path)
    assert why == f"no cgroup v1 memory controller under {tmp_path}"


@pytest.mark.skipif(not cgroups.unified(), reason="this machine has cgroup v1 (or hybrid) only")
@pytest.mark.skipif(os.geteuid() != 0, reason="making cgroups needs root")
def test_a_budget_holds_a_child_process_on_this_cgroup_v2_host(tmp_path: Path) -> None:
    """A real v2 child: a child process applies the core profile's quota and memory limit."""
    code = (
        "import json; from offload.host import budgets as B\n"
        "from pathlib import Path\n"
        "a = B.apply(B.profile('core'), 'v2test')\n"
        "for c, f in (('cpu', 'cpu.max'), ('memory', 'memory.max')):\n"
        "    if 'cgroup' in a[c]: a[c]['file'] = Path(a[c]['cgroup'], f).read_text().strip()\n"
        "print(json.dumps(a)); B.release(a)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    applied = json.loads(out.stdout)
    for controller in ("cpu", "memory"):
        info = applied[controller]
        if info["method"] == "none":  # this host's v2 tree delegates no such controller to us
            assert info["reason"]
            continue
        assert info["method"] == f"cgroup-v2-{controller}", info
        want = f"{info['quota_us']} {info['period_us']}" if controller == "cpu" else str(4 << 30)
        assert info["file"] == want
    assert out.returncode == 0
