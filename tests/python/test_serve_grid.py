"""The one grid of what a deployment chooses (offload.serve.grid, issue 44): its names, its
checks, and `offload serve sweep` driving a point to its knee over shared memory with
client-encoded requests, inline. Every wait is bounded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from offload.serve.grid import ENCODINGS, MATCHERS, TRANSPORTS, Deployment, Policy, parse_shape, product

ROOT = Path(__file__).resolve().parents[2]
MINI = ROOT / "data" / "examples" / "mct-mini"
SWEEP = [sys.executable, "-m", "offload.cli", "serve", "sweep", "--ruletype", str(MINI / "ruletype.toml"),
         "--rules", str(MINI / "rules.csv")]  # fmt: skip


def _trace(tmp_path: Path) -> Path:
    trace = tmp_path / "trace"
    trace.mkdir()
    (trace / "queries.csv").write_text((MINI / "queries.csv").read_text())
    (trace / "requests.csv").write_text("REQUEST_ID,FIRST_QUERY,N_QUERIES,WANTED\nR1,0,5,3\nR2,5,3,2\n")
    return trace


def test_labels_read_like_the_seed() -> None:
    assert Deployment().label() == "1p 1w 1k 1e per-req raw ipc fast"
    d = Deployment(4, 1, 0, 1, 4096, 0, "codes16", 256, "shm", "null")
    assert d.label() == "4p 1w inline fill4096 codes16 256q shm null"
    assert (
        Deployment(2, 2, 2, 3, 4096, 200, shards=2).label() == "2p 2w 2k 3e b4096/200us raw ipc 2 shards fast"
    )


def test_policies_parse_in_both_spellings() -> None:
    for text, policy in [("per-req", Policy()), ("per-request", Policy()), ("fill4096", Policy(4096)),
                         ("self-filling:64", Policy(64)), ("b4096/200us", Policy(4096, 200)),
                         ("size-or-timeout:8/5", Policy(8, 5))]:  # fmt: skip
        assert Policy.parse(text) == policy
        assert Policy.parse(policy.label()) == policy
    with pytest.raises(ValueError, match="per-req, fillN"):
        Policy.parse("sometimes")


def test_shapes_parse() -> None:
    assert parse_shape("inline") == (1, 0, 1)
    assert parse_shape("2w inline") == (2, 0, 1)
    assert parse_shape("2w1k3e") == (2, 1, 3) and parse_shape("2w 4k") == (2, 4, 1)
    with pytest.raises(ValueError, match="pipeline shape"):
        parse_shape("2 workers")


def test_rows_written_before_the_grid_read_as_its_defaults() -> None:
    old = {"p": 2, "w": 1, "k": 1, "e": 1, "batch_max_queries": 0, "batch_timeout_us": 200, "label": "x"}
    assert Deployment.of_row(old) == Deployment(2, 1, 1, 1, 0, 200)


def test_checks_name_the_value_and_its_range() -> None:
    with pytest.raises(ValueError, match="transport is one of ipc, tcp, shm, not 'udp'"):
        Deployment(transport="udp").check()
    with pytest.raises(ValueError, match="workers"):
        Deployment(w=0).check()
    with pytest.raises(ValueError, match=r"connections \(p\) 0"):
        Deployment(p=0).check()
    with pytest.raises(ValueError, match="inline batches"):
        Deployment(k=0, batch_max_queries=64, batch_timeout_us=100).check()
    Deployment(k=0, batch_max_queries=64, encoding="codes16", transport="shm", matcher="null").check()


def test_the_product_keeps_what_inline_ignores_once() -> None:
    points = product([1], [(1, 0, 1), (2, 0, 4), (1, 1, 1)], [Policy(64, 100)], ["codes16"])
    assert [d.label() for d in points] == [
        "1p 1w inline fill64 codes16 ipc fast",
        "1p 1w 1k 1e b64/100us codes16 ipc fast",
    ]
    raw = product([1], [(1, 0, 1), (2, 0, 1)], encodings=["raw"])
    assert [d.w for d in raw] == [1, 2]  # inline with raw requests: the workers match


deployments = st.builds(
    Deployment, st.integers(1, 8), st.integers(1, 4), st.integers(0, 4), st.integers(1, 4),
    st.sampled_from([0, 64, 4096]), st.sampled_from([0, 200]), st.sampled_from(ENCODINGS),
    st.sampled_from([0, 256]), st.sampled_from(TRANSPORTS), st.sampled_from(MATCHERS), st.integers(1, 3),
)  # fmt: skip


@given(st.lists(deployments, max_size=12))
def test_a_label_names_one_point_of_the_product(points: list[Deployment]) -> None:
    """Distinct points of a product have distinct labels (the label is the key in JSON and plots)."""
    labels: dict[str, Deployment] = {}
    for d in points:
        for q in product([d.p], [(d.w, d.k, d.e)], [d.policy], [d.encoding], [d.request_queries],
                         [d.transport], [d.matcher]):  # fmt: skip
            assert labels.setdefault(q.label(), q) == q


def test_sweep_drives_an_inline_shm_point_to_its_knee(tmp_path: Path) -> None:
    out = tmp_path / "knee.json"
    cmd = [*SWEEP, "--trace", str(_trace(tmp_path)), "-p", "2", "--w", "1", "--k", "0",
           "--policy", "fill4096", "--encoding", "codes16",
           "--request-size", "8", "--transport", "shm", "--matcher", "null", "--knee", "--knee-steps", "1",
           "--duration", "0.3", "--out", str(out), "--json"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)["rows"]
    assert row["label"] == "2p 1w inline fill4096 codes16 8q shm null knee"
    assert row["mode"] == "knee" and row["queries_per_s"] > 0 and row["p99_us"] <= 5000
    assert row["knee_rate_rps"] > 0 and row["generator_bound"]["bound"] in (True, False)
    per = row["host_path"]["ns_per_query"]
    assert per["host_path"] > 0 and per["shm"] > 0  # the shared-memory transport's thread did the work
    assert Deployment.of_row(row) == Deployment(2, 1, 0, 1, 4096, 0, "codes16", 8, "shm", "null")


def test_sweep_refuses_a_bad_policy_in_one_line(tmp_path: Path) -> None:
    cmd = [*SWEEP, "--trace", str(_trace(tmp_path)), "--policy", "per-req,often",
           "--out", str(tmp_path / "s.json")]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "'often'" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "s.json").exists()


def test_a_sweep_where_no_point_meets_the_sla_says_so_in_one_line(tmp_path: Path) -> None:
    cmd = [*SWEEP, "--trace", str(_trace(tmp_path)), "-p", "1", "--w", "1", "--k", "1", "--policy", "per-req",
           "--knee", "--knee-steps", "1", "--duration", "0.2", "--p99-us", "1",
           "--out", str(tmp_path / "s.json")]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert "no point met the SLA" in last and "p99 <= 1 µs" in last and "Traceback" not in done.stderr
    assert "requests/s, the lowest tried: p99" in last and "over 1 µs" in last  # what failed, and where
    assert not (tmp_path / "s.json").exists()
