"""`offload rules ...` as a new user meets it: a bad argument is one line and exit 2 (never a
traceback), every file it writes is whole or absent (a full disk included), `rules bench` reports
as JSON and shows progress, and `--threads` means one thing (a thread count; a sweep says so).
All run through the real CLI, as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import half_written
from offload import rules

DATA = Path(__file__).parent / "data" / "mini"
MINI = ["--ruletype", str(DATA / "ruletype.toml"), "--rules", str(DATA / "rules.csv")]
QUERIES = ["--queries", str(DATA / "queries.csv")]
TINY_BENCH = ["--repeats", "1", "--batches", "4", "--limit", "50"]


def offload(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "offload.cli", *args],
        capture_output=True,
        text=True,
        # progress lines only past 60 s: a busy machine's make them in the middle of an error's test
        env={
            **os.environ,
            "NO_COLOR": "1",
            "COLUMNS": "200",
            "OFFLOAD_PROGRESS_AFTER_S": "60",
            **(env or {}),
        },
        timeout=120,
    )


def one_line_error(p: subprocess.CompletedProcess[str], *words: str) -> str:
    """The command failed with exit 2 and one line `error: ...` holding every word."""
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: "), p.stderr
    assert "Traceback" not in p.stderr + p.stdout and "internal error" not in p.stderr, p.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


# --------------------------------------------------------------------------------------------
# Bad arguments
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("threads", ["-1", "0"])
def test_eval_bad_thread_count(tmp_path: Path, threads: str) -> None:
    p = offload("rules", "eval", *MINI, *QUERIES, "--out", str(tmp_path / "o.csv"), "--threads", threads)
    one_line_error(p, "--threads", threads)
    assert not (tmp_path / "o.csv").exists()


@pytest.mark.parametrize("flag", ["--threads", "--thread-counts"])
@pytest.mark.parametrize("value", ["-1", "1,0", "two"])
def test_bench_bad_thread_counts(tmp_path: Path, flag: str, value: str) -> None:
    out = tmp_path / "b.json"
    p = offload("rules", "bench", *MINI, *QUERIES, *TINY_BENCH, "--out", str(out), flag, value)
    one_line_error(p, "--thread-counts", value)
    assert not out.exists()


@pytest.mark.parametrize("value", ["0", "4,-2", "x"])
def test_bench_bad_batches(tmp_path: Path, value: str) -> None:
    p = offload("rules", "bench", *MINI, *QUERIES, "--batches", value, "--out", str(tmp_path / "b.json"))
    one_line_error(p, "--batches", value)


def test_bench_unknown_matcher_names_the_known_ones(tmp_path: Path) -> None:
    out = tmp_path / "b.json"
    p = offload("rules", "bench", *MINI, *QUERIES, *TINY_BENCH, "--out", str(out), "--matcher", "fast,foo")
    line = one_line_error(p, "foo")
    for known in (*rules.MATCHERS, *rules.DEVICE_MATCHERS, "nfa:<"):
        assert known in line, known
    assert not out.exists()


@pytest.mark.parametrize(("flag", "value"), [("--rules", "0"), ("--rules", "-5"), ("--requests", "-1")])
def test_synth_bad_counts_leave_nothing(tmp_path: Path, flag: str, value: str) -> None:
    out = tmp_path / "syn"
    p = offload("rules", "synth", "--out", str(out), "--rules", "50", "--requests", "2", flag, value)
    one_line_error(p, flag, value)
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_synth_out_is_a_file(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("mine")
    p = offload("rules", "synth", "--out", str(f), "--rules", "50", "--requests", "2")
    one_line_error(p, str(f), "not a directory")
    assert f.read_text() == "mine" and sorted(tmp_path.iterdir()) == [f]


def test_synth_refuses_a_non_empty_out_unless_forced(tmp_path: Path) -> None:
    out = tmp_path / "syn"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    p = offload("rules", "synth", "--out", str(out), "--rules", "50", "--requests", "2")
    one_line_error(p, str(out), "--force")
    assert [x.name for x in out.iterdir()] == ["notes.txt"]
    # --force replaces only what offload made: a person's file is never deleted (issue 39)
    p = offload("rules", "synth", "--out", str(out), "--rules", "50", "--requests", "2", "--force")
    one_line_error(p, "notes.txt", "only what offload made")
    assert [x.name for x in out.iterdir()] == ["notes.txt"]
    (out / "notes.txt").unlink()
    p = offload("rules", "synth", "--out", str(out), "--rules", "50", "--requests", "2", "--force", "--json")
    assert p.returncode == 0, p.stderr
    p = offload("rules", "synth", "--out", str(out), "--rules", "50", "--requests", "2", "--force", "--json")
    assert p.returncode == 0, p.stderr  # its own set is replaced
    names = sorted(x.name for x in out.iterdir())
    assert names == [".offload-made", "queries.csv", "requests.csv", "rules.csv", "ruletype.xml"]
    summary = json.loads(p.stdout)
    assert summary["paths"]["rules"] == str(out / "rules.csv")  # the final place, not a temporary
    assert sorted(x.name for x in tmp_path.iterdir()) == ["syn"]
    # an empty directory is fine without --force
    empty = tmp_path / "empty"
    empty.mkdir()
    assert offload("rules", "synth", "--out", str(empty), "--rules", "50", "--requests", "2").returncode == 0
    assert (empty / "rules.csv").is_file()


# --------------------------------------------------------------------------------------------
# A full disk: nothing half-written, one line naming the file
# --------------------------------------------------------------------------------------------


def fill(mnt: Path, leave: int) -> None:
    """Fills the tmpfs but for about `leave` bytes."""
    st = os.statvfs(mnt)
    free = st.f_bavail * st.f_frsize
    with (mnt / "filler").open("wb") as f:
        f.write(b"\0" * max(free - leave, 0))


def left_behind(mnt: Path) -> list[str]:
    return sorted(str(p.relative_to(mnt)) for p in mnt.rglob("*") if p.name != "filler")


def test_synth_on_a_full_disk(small_tmpfs: Path) -> None:
    fill(small_tmpfs, 200_000)
    out = small_tmpfs / "syn"
    p = offload("rules", "synth", "--out", str(out), "--rules", "3000", "--requests", "40")
    one_line_error(p, "no space left", "syn")
    assert left_behind(small_tmpfs) == [] and half_written(small_tmpfs) == []


def test_eval_on_a_full_disk(tmp_path: Path, small_tmpfs: Path) -> None:
    body = (DATA / "queries.csv").read_text().splitlines()
    q = tmp_path / "q.csv"
    row = body[1].split(",", 1)[1]
    q.write_text("\n".join([body[0], *[f"X{i},{row}" for i in range(3000)]]) + "\n")
    fill(small_tmpfs, 8_000)
    out = small_tmpfs / "answers.csv"
    p = offload("rules", "eval", *MINI, "--queries", str(q), "--out", str(out))
    one_line_error(p, str(out), "no space left")
    assert left_behind(small_tmpfs) == [] and half_written(small_tmpfs) == []


def test_bench_on_a_full_disk(small_tmpfs: Path) -> None:
    fill(small_tmpfs, 0)
    out = small_tmpfs / "bench.json"
    p = offload("rules", "bench", *MINI, *QUERIES, *TINY_BENCH, "--matchers", "fast", "--out", str(out))
    one_line_error(p, str(out), "no space left")
    assert left_behind(small_tmpfs) == [] and half_written(small_tmpfs) == []


def test_truncated_queries_give_a_located_error(tmp_path: Path) -> None:
    """A queries.csv cut short (as a full disk used to leave it) is refused with file:line."""
    from offload.rules.synth import synth

    d = tmp_path / "syn"
    synth(d, 300, 5, 1)
    text = (d / "queries.csv").read_text()
    for cut in (len(text) // 2, len(text) - 3):
        bad = tmp_path / f"q{cut}.csv"
        bad.write_text(text[:cut])
        rt = ["--ruletype", str(d / "ruletype.xml"), "--rules", str(d / "rules.csv")]
        p = offload("rules", "eval", *rt, "--queries", str(bad), "--out", str(tmp_path / "o.csv"))
        line = one_line_error(p, f"{bad}:")
        assert "IndexError" not in line
        rs = rules.load(d / "ruletype.xml", d / "rules.csv")
        from offload.rules.bench import load_query_columns

        with pytest.raises(rules.RuleError) as e:
            load_query_columns(rs, bad)
        assert e.value.line is not None and e.value.line > 1


# --------------------------------------------------------------------------------------------
# bench: --json, progress, --thread-counts
# --------------------------------------------------------------------------------------------


def test_bench_json_on_stdout_and_file_with_progress_on_stderr(tmp_path: Path) -> None:
    out = tmp_path / "b.json"
    args = ["rules", "bench", *MINI, *QUERIES, *TINY_BENCH, "--matchers", "fast", "--out", str(out)]
    # as on a terminal: rich draws its progress (on stderr only)
    tty = {"FORCE_COLOR": "1", "TTY_COMPATIBLE": "1", "NO_COLOR": ""}
    p = offload(*args, "--json", "--thread-counts", "1,2", env=tty)
    assert p.returncode == 0, p.stderr
    result = json.loads(p.stdout)  # progress never goes to stdout
    assert result == json.loads(out.read_text())
    assert {r["threads"] for r in result["matchers"]["fast"]["runs"]} == {1, 2}
    assert "loading" in p.stderr and "writing" in p.stderr
    # the old spelling stays as a hidden alias
    p = offload(*args, "--json", "--threads", "2")
    assert p.returncode == 0, p.stderr
    assert {r["threads"] for r in json.loads(p.stdout)["matchers"]["fast"]["runs"]} == {2}


def test_threads_options_say_what_they_are() -> None:
    bench = offload("rules", "bench", "--help").stdout
    assert "--thread-counts" in bench and "--threads " not in bench and "--json" in bench
    ev = offload("rules", "eval", "--help").stdout
    assert "--threads" in ev and "--thread-counts" not in ev


# --------------------------------------------------------------------------------------------
# An output that is an input, a criterion given twice (issue 39)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["--queries", "--rules", "--ruletype"])
def test_eval_refuses_an_out_that_is_one_of_its_inputs(tmp_path: Path, which: str) -> None:
    import shutil

    for name in ("ruletype.toml", "rules.csv", "queries.csv"):
        shutil.copy(DATA / name, tmp_path / name)
    files = {"--ruletype": "ruletype.toml", "--rules": "rules.csv", "--queries": "queries.csv"}
    (tmp_path / "link").symlink_to(tmp_path / files[which])  # the same file by another name
    before = (tmp_path / files[which]).read_bytes()
    args = [a for k, v in files.items() for a in (k, str(tmp_path / v))]
    p = offload("rules", "eval", *args, "--out", str(tmp_path / "link"))
    one_line_error(p, "--out", f"is the {which} file")
    assert (tmp_path / files[which]).read_bytes() == before


def test_explain_refuses_a_criterion_given_twice_or_without_a_value() -> None:
    values = ["CTN_TYPE=DD", "BRD=CDG", "OUT_CRR=AF", "FLT_RG=150", "PRD=2026-03-01", "TER=1"]
    ok = offload("rules", "explain", *MINI, *(a for v in values for a in ("-v", v)))
    assert ok.returncode == 0, ok.stderr
    twice = offload("rules", "explain", *MINI, *(a for v in [*values, "BRD=ORY"] for a in ("-v", v)))
    one_line_error(twice, "BRD given twice", "'CDG'", "'ORY'")
    bare = offload("rules", "explain", *MINI, *(a for v in [*values, "TER"] for a in ("-v", v)))
    one_line_error(bare, "'TER'", "CODE=VALUE")
