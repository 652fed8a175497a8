"""Settings shared by every test module.

Under CI (``CI`` set, as `.ci/run` is run) Hypothesis is derandomized: a fresh clone has no example
database, so each run would draw new examples, and some properties (the planner's simulations)
cost minutes on an unlucky draw. Derandomized, a run takes the same time every time and a
failure is reproducible. Developers' runs stay random, which is where new cases are found.
Everywhere, Hypothesis has no deadline: a property tests answers, and a shared 2-vCPU VM's timing
is noise (one example that takes 26 ms took 336 ms beside a build, and failed the deadline).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

settings.register_profile("shared-vm", deadline=None)
settings.register_profile("ci", parent=settings.get_profile("shared-vm"), derandomize=True, database=None)
settings.load_profile("ci" if os.environ.get("CI") else "shared-vm")


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 16 MiB tmpfs mounted for the test (root only), to fill on purpose: every writer of the
    product must leave no half-written file behind and say which file failed. Skipped, with the
    reason, where the machine does not let the test mount one."""
    mnt = tmp_path / "full"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mnt)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {r.stderr.decode().strip() or r.returncode}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def half_written(directory: Path) -> list[Path]:
    """Temporary files a writer left under ``directory`` (the names `offload.files` uses)."""
    return [p for p in directory.rglob("*") if p.name.endswith(".tmp") or ".tmp" in p.suffixes]


EXAMPLE = Path(__file__).resolve().parents[2] / "data" / "examples" / "mct-mini"


def mini_trace(tmp: Path) -> Path:
    """The shipped example's queries as a trace of one-query requests (a rule type of 6 criteria)."""
    t = tmp / "mini-trace"
    t.mkdir()
    queries = (EXAMPLE / "queries.csv").read_text()
    (t / "queries.csv").write_text(queries)
    n = len(queries.strip().splitlines()) - 1
    (t / "requests.csv").write_text(
        "REQUEST_ID,FIRST_QUERY,N_QUERIES,WANTED\n" + "".join(f"r{i},{i},1,1\n" for i in range(n))
    )
    return t
