"""Tests of the `offload rules ...` command line, run as a subprocess (as users run it).

`tests/python/data/mini/` holds a small native-format rule set with hand-checked answers
(`expected.csv`); a synthetic ERBIUM-format set checks that every matcher and thread count
writes identical answer files.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from offload import __version__, rules
from offload.rules.synth import synth

DATA = Path(__file__).parent / "data" / "mini"
MINI = ["--ruletype", str(DATA / "ruletype.toml"), "--rules", str(DATA / "rules.csv")]
MATCHERS = rules.MATCHERS  # linear, nfa, fast and gpu-host (the gpu kernel built for the CPU)


def offload(*args: str, check: bool = True, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200"}
    proc = subprocess.run(
        [sys.executable, "-m", "offload.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
    )
    if check:
        assert proc.returncode == 0, f"offload {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


def read_answers(path: Path) -> list[list[str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.reader(f))


# --------------------------------------------------------------------------------------------
# A tiny independent reference for the native fixture (used to check expected.csv itself)
# --------------------------------------------------------------------------------------------


def _date(s: str) -> tuple[int, int, int]:
    if "-" in s:
        y, m, d = s.split("-")
        return int(y), int(m), int(d)
    months = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
    return int(s[5:9]), months.index(s[2:5].upper()) + 1, int(s[:2])


def reference_answers(rt: list[tuple[str, str, int]], rules_csv: Path, queries_csv: Path) -> list[list[str]]:
    """(code, kind, weight) per criterion; returns [QUERY_ID, RULE_ID, CONTENT] rows."""

    def parse(kind: str, v: str) -> Any:
        return _date(v) if kind == "date_range" else int(v)

    def hit(kind: str, cell: str, v: str) -> bool:
        if cell in ("", "*"):
            return True
        if kind == "equ":
            return cell == v
        lo, _, hi = cell.partition("..") if ".." in cell else (cell, "", cell)
        x = parse(kind, v)
        return (not lo or parse(kind, lo) <= x) and (not hi or x <= parse(kind, hi))

    with rules_csv.open(newline="") as f:
        rule_rows = list(csv.DictReader(f))
    with queries_csv.open(newline="") as f:
        query_rows = list(csv.DictReader(f))
    out = []
    for q in query_rows:
        best: tuple[int, int] | None = None
        for i, r in enumerate(rule_rows):
            if all(hit(k, r[c], q[c]) for c, k, _ in rt):
                s = sum(w for c, _, w in rt if r[c] not in ("", "*"))
                if best is None or s > best[0]:
                    best = (s, i)
        if best is None:
            out.append([q["QUERY_ID"], "", ""])
        else:
            r = rule_rows[best[1]]
            out.append([q["QUERY_ID"], r["RULE_ID"], r["CONTENT"]])
    return out


MINI_TYPE = [
    ("CTN_TYPE", "equ", 0),
    ("BRD", "equ", 0),
    ("OUT_CRR", "equ", 4),
    ("FLT_RG", "int_range", 2),
    ("PRD", "date_range", 1),
    ("TER", "equ", 4),
]


def test_fixture_expected_answers_follow_the_contract() -> None:
    want = read_answers(DATA / "expected.csv")
    assert want[0] == ["QUERY_ID", "RULE_ID", "CONTENT"]
    assert want[1:] == reference_answers(MINI_TYPE, DATA / "rules.csv", DATA / "queries.csv")


# --------------------------------------------------------------------------------------------
# Basics
# --------------------------------------------------------------------------------------------


def test_version() -> None:
    p = offload("--version")
    assert p.stdout.strip() == f"offload {__version__}"


def test_console_script_version() -> None:
    exe = Path(sys.executable).with_name("offload")
    if not exe.exists():
        pytest.skip("no offload console script next to this interpreter")
    p = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == f"offload {__version__}"


def test_rules_help() -> None:
    p = offload("rules", "--help")
    for cmd in ("synth", "check", "compile", "eval", "bench", "explain"):
        assert re.search(rf"\b{cmd}\b", p.stdout), cmd
    p = offload("rules", "eval", "--help")
    for opt in ("--rules", "--ruletype", "--queries", "--out", "--matcher", "--threads"):
        assert opt in p.stdout, opt


# --------------------------------------------------------------------------------------------
# eval
# --------------------------------------------------------------------------------------------

EXPECTED_MINI = (DATA / "expected.csv").read_text(encoding="utf-8")


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("matcher", [*MATCHERS, None])
def test_eval_mini_exact_output(tmp_path: Path, matcher: str | None, threads: int) -> None:
    out = tmp_path / "answers.csv"
    args = ["rules", "eval", *MINI, "--queries", str(DATA / "queries.csv"), "--out", str(out)]
    if matcher is not None:
        args += ["--matcher", matcher]
    args += ["--threads", str(threads)]
    offload(*args)
    text = out.read_text(encoding="utf-8")
    # Byte-exact: header, one row per query in input order, empty RULE_ID and CONTENT where
    # nothing matched, RFC 4180 quoting of ids holding a comma or a quote.
    assert text == EXPECTED_MINI
    rows = read_answers(out)
    assert rows[0] == ["QUERY_ID", "RULE_ID", "CONTENT"]
    assert ["a,b", "", ""] in rows and ['q"x', "R,7", "90"] in rows
    assert '"a,b",,\n' in text and '"q""x","R,7",90\n' in text


def test_eval_json_stats(tmp_path: Path) -> None:
    out = tmp_path / "answers.csv"
    p = offload("rules", "eval", *MINI, "--queries", str(DATA / "queries.csv"), "--out", str(out), "--json")
    stats = json.loads(p.stdout)
    assert stats["rules"] == 9 and stats["queries"] == 13 and stats["matched"] == 11
    assert stats["matcher"] == "fast" and stats["threads"] == 1
    for k in ("load_s", "compile_s", "encode_s", "match_s"):
        assert stats[k] >= 0
    assert out.read_text(encoding="utf-8") == EXPECTED_MINI


def test_eval_empty_query_file(tmp_path: Path) -> None:
    q = tmp_path / "q.csv"
    q.write_text("QUERY_ID,CTN_TYPE,BRD,OUT_CRR,FLT_RG,PRD,TER\n")
    out = tmp_path / "answers.csv"
    offload("rules", "eval", *MINI, "--queries", str(q), "--out", str(out))
    assert out.read_text(encoding="utf-8") == "QUERY_ID,RULE_ID,CONTENT\n"


def test_eval_columns_in_any_order(tmp_path: Path) -> None:
    """Query columns are matched by criterion code, not by position."""
    with (DATA / "queries.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    order = ["QUERY_ID", "TER", "PRD", "FLT_RG", "OUT_CRR", "BRD", "CTN_TYPE"]
    q = tmp_path / "q.csv"
    with q.open("w", newline="") as f:
        w = csv.DictWriter(f, order, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    out = tmp_path / "answers.csv"
    offload("rules", "eval", *MINI, "--queries", str(q), "--out", str(out), "--matcher", "nfa")
    assert out.read_text(encoding="utf-8") == EXPECTED_MINI


@pytest.fixture(scope="module")
def synth_dir(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("cli_synth")
    s = synth(d, 800, 12, 3)
    return {k: Path(v) for k, v in s["paths"].items()}


def test_eval_synthetic_identical_for_every_matcher_and_thread_count(
    tmp_path: Path, synth_dir: dict[str, Path]
) -> None:
    outputs: dict[tuple[str, int], str] = {}
    for m in MATCHERS:
        for th in (1, 2):
            out = tmp_path / f"{m}-{th}.csv"
            offload(
                "rules",
                "eval",
                "--ruletype",
                str(synth_dir["ruletype"]),
                "--rules",
                str(synth_dir["rules"]),
                "--queries",
                str(synth_dir["queries"]),
                "--out",
                str(out),
                "--matcher",
                m,
                "--threads",
                str(th),
            )
            outputs[(m, th)] = out.read_text(encoding="utf-8")
    first = outputs[("fast", 1)]
    for key, text in outputs.items():
        assert text == first, key
    rows = read_answers(tmp_path / "fast-1.csv")
    with synth_dir["queries"].open(newline="") as f:
        qids = [r["QUERY_ID"] for r in csv.DictReader(f)]
    assert rows[0] == ["QUERY_ID", "RULE_ID", "CONTENT"]
    assert [r[0] for r in rows[1:]] == qids  # one row per query, in input order
    # the same answers as the Python API
    rs = rules.load(synth_dir["ruletype"], synth_dir["rules"])
    from offload.rules.bench import load_query_columns

    _, cols = load_query_columns(rs, synth_dir["queries"])
    res = rules.compile(rs, "fast").match(cols)
    ids = rs.ids
    want = [
        [qid, ids[i] if i >= 0 else "", str(c) if i >= 0 else ""]
        for qid, i, c in zip(qids, res.rule.tolist(), res.content.tolist(), strict=True)
    ]
    assert rows[1:] == want
    assert any(r[1] == "" for r in rows[1:]) or all(r[1] for r in rows[1:])


def _bad_rules(tmp_path: Path) -> Path:
    bad = tmp_path / "bad rules.csv"  # a space in the name, on purpose
    bad.write_text((DATA / "rules.csv").read_text().replace("R4,DD,CDG,AF,100..199", "R4,DD,CDG,AF,199..100"))
    return bad


def test_eval_bad_rule_file_reports_location(tmp_path: Path) -> None:
    bad = _bad_rules(tmp_path)
    out = tmp_path / "answers.csv"
    p = offload(
        "rules",
        "eval",
        "--ruletype",
        str(DATA / "ruletype.toml"),
        "--rules",
        str(bad),
        "--queries",
        str(DATA / "queries.csv"),
        "--out",
        str(out),
        check=False,
    )
    assert p.returncode != 0
    # R4 is on line 5; its FLT_RG field starts at character 14 of "R4,DD,CDG,AF,199..100".
    assert f"{bad}:5:14" in p.stderr, p.stderr
    assert "reversed-range" in p.stderr and "FLT_RG" in p.stderr
    assert not out.exists()


def test_eval_bad_query_value_reports_location(tmp_path: Path) -> None:
    q = tmp_path / "q.csv"
    q.write_text(
        "QUERY_ID,CTN_TYPE,BRD,OUT_CRR,FLT_RG,PRD,TER\nQ1,DD,CDG,AF,150,2026-03-01,1\nQ2,DD,CDG,AF,abc,2026-03-01,1\n"
    )
    p = offload("rules", "eval", *MINI, "--queries", str(q), "--out", str(tmp_path / "o.csv"), check=False)
    assert p.returncode != 0
    assert re.search(rf"{re.escape(str(q))}:3:\d+", p.stderr), p.stderr
    assert "FLT_RG" in p.stderr and "abc" in p.stderr


@pytest.mark.parametrize(
    ("header", "what"),
    [
        ("QUERY_ID,CTN_TYPE,BRD,OUT_CRR,FLT_RG,PRD", "TER"),  # a criterion is missing
        ("QUERY_ID,CTN_TYPE,BRD,OUT_CRR,FLT_RG,PRD,TER,TERM", "TERM"),  # an unknown column
    ],
)
def test_eval_bad_query_header(tmp_path: Path, header: str, what: str) -> None:
    q = tmp_path / "q.csv"
    q.write_text(header + "\n")
    p = offload("rules", "eval", *MINI, "--queries", str(q), "--out", str(tmp_path / "o.csv"), check=False)
    assert p.returncode != 0
    assert f"{q}:1:" in p.stderr and what in p.stderr


def test_eval_unknown_matcher(tmp_path: Path) -> None:
    p = offload(
        "rules",
        "eval",
        *MINI,
        "--queries",
        str(DATA / "queries.csv"),
        "--out",
        str(tmp_path / "o.csv"),
        "--matcher",
        "tree",
        check=False,
    )
    assert p.returncode != 0 and "tree" in p.stderr


# --------------------------------------------------------------------------------------------
# check, compile, explain, synth, bench
# --------------------------------------------------------------------------------------------


def test_check_json() -> None:
    info = json.loads(offload("rules", "check", *MINI, "--json").stdout)
    assert info["rule_type"] == "MINI" and info["rules"] == 9 and info["criteria"] == 6
    assert info["distinct_contents"] == 9
    stats = {c["code"]: c for c in info["criterion_stats"]}
    assert [c["code"] for c in info["criterion_stats"]] == [c for c, _, _ in MINI_TYPE]
    assert stats["CTN_TYPE"] == {
        "code": "CTN_TYPE",
        "kind": "equ",
        "mandatory": True,
        "weight": 0,
        "specific": 9,
        "specific_share": 1.0,
        "distinct": 3,
    }
    assert stats["OUT_CRR"]["specific"] == 4 and stats["OUT_CRR"]["distinct"] == 1
    assert stats["FLT_RG"]["kind"] == "int_range" and stats["FLT_RG"]["specific"] == 5
    assert stats["PRD"]["kind"] == "date_range" and stats["PRD"]["specific"] == 1
    assert stats["TER"]["weight"] == 4 and stats["TER"]["mandatory"] is False


def test_check_bad_file_exits_2_with_location(tmp_path: Path) -> None:
    bad = _bad_rules(tmp_path)
    p = offload("rules", "check", "--ruletype", str(DATA / "ruletype.toml"), "--rules", str(bad), check=False)
    assert p.returncode == 2
    assert f"{bad}:5:14" in p.stderr


def test_compile_json_all_matchers() -> None:
    report = json.loads(offload("rules", "compile", *MINI, "--json", "--matcher", "all").stdout)
    assert report["rules"] == 9 and report["load_s"] >= 0 and report["peak_rss_mb"] > 0
    assert set(report["matchers"]) == set(MATCHERS)
    for m in report["matchers"].values():
        assert m["compile_s"] >= 0 and m["memory_bytes"] > 0
        assert isinstance(m["structure"], dict)
    one = json.loads(offload("rules", "compile", *MINI, "--json", "--matcher", "nfa").stdout)
    assert set(one["matchers"]) == {"nfa"}
    p = offload("rules", "compile", *MINI, "--matcher", "tree", check=False)
    assert p.returncode == 2


def _check_explanation(ex: dict[str, Any], winner: str | None, runner_up: str | None, n: int) -> None:
    assert ex["matching_rules"] == n
    assert (ex["winner"] or {}).get("rule_id") == winner
    assert (ex["runner_up"] or {}).get("rule_id") == runner_up
    assert ex["matcher"]["rule"] == (ex["winner"] or {}).get("index", -1)


def test_explain_json_by_value() -> None:
    values = ["CTN_TYPE=DD", "BRD=CDG", "OUT_CRR=AF", "FLT_RG=150", "PRD=2026-03-01", "TER=1"]
    args = [a for v in values for a in ("--value", v)]
    ex = json.loads(offload("rules", "explain", *MINI, *args, "--json").stdout)
    # R1 (0), R2 (4), R3 (2), R4 (6), R5 (7), R8 (6) match; R5 wins, R4 beats R8 on input order.
    _check_explanation(ex, "R5", "R4", 6)
    w = ex["winner"]
    assert w["index"] == 4 and w["line"] == 6 and w["content"] == 70 and int(w["score"]) == 7
    assert [c for c, _ in w["specific"]] == ["CTN_TYPE", "BRD", "OUT_CRR", "FLT_RG", "PRD"]
    assert ex["matcher"]["name"] == "fast"
    # a query that matches nothing
    nothing = ["CTN_TYPE=DD", "BRD=XXX", "OUT_CRR=ZZ", "FLT_RG=1", "PRD=01JAN2026", "TER=9"]
    args = [a for v in nothing for a in ("--value", v)]
    ex = json.loads(offload("rules", "explain", *MINI, *args, "--json", "--matcher", "linear").stdout)
    _check_explanation(ex, None, None, 0)
    # every criterion needs a value: a forgotten one is an error, not a silent "unknown value"
    args = [a for v in nothing[:4] for a in ("--value", v)]
    p = offload("rules", "explain", *MINI, *args, "--json", check=False)
    assert p.returncode == 2 and "missing PRD, TER" in p.stderr


def test_explain_json_by_query_id() -> None:
    for qid, winner, runner_up, n, matcher in (
        ("Q04", "R2", "R6", 3, "nfa"),
        ('q"x', "R,7", None, 1, "fast"),
        ("a,b", None, None, 0, "linear"),
    ):
        p = offload(
            "rules",
            "explain",
            *MINI,
            "--queries",
            str(DATA / "queries.csv"),
            "--query-id",
            qid,
            "--matcher",
            matcher,
            "--json",
        )
        ex = json.loads(p.stdout)
        _check_explanation(ex, winner, runner_up, n)
        assert ex["matcher"]["name"] == matcher


def test_explain_errors() -> None:
    p = offload(
        "rules", "explain", *MINI, "--queries", str(DATA / "queries.csv"), "--query-id", "nope", check=False
    )
    assert p.returncode == 2 and "nope" in p.stderr
    p = offload("rules", "explain", *MINI, "--value", "COLOUR=red", check=False)
    assert p.returncode == 2 and "COLOUR" in p.stderr


def test_synth_small(tmp_path: Path) -> None:
    out = tmp_path / "syn"
    p = offload(
        "rules", "synth", "--out", str(out), "--rules", "300", "--requests", "5", "--seed", "1", "--json"
    )
    summary = json.loads(p.stdout)
    assert summary["n_rules"] == 300 and summary["n_requests"] == 5
    for name in ("ruletype.xml", "rules.csv", "queries.csv", "requests.csv"):
        assert (out / name).is_file(), name
    rs = rules.load(out / "ruletype.xml", out / "rules.csv")
    assert len(rs) == 300
    # the same seed gives the same bytes
    out2 = tmp_path / "syn2"
    offload(
        "rules", "synth", "--out", str(out2), "--rules", "300", "--requests", "5", "--seed", "1", "--json"
    )
    for name in ("ruletype.xml", "rules.csv", "queries.csv"):
        assert (out / name).read_bytes() == (out2 / name).read_bytes(), name


def test_bench_tiny(tmp_path: Path, synth_dir: dict[str, Path]) -> None:
    out = tmp_path / "bench.json"
    offload(
        "rules",
        "bench",
        "--ruletype",
        str(synth_dir["ruletype"]),
        "--rules",
        str(synth_dir["rules"]),
        "--queries",
        str(synth_dir["queries"]),
        "--out",
        str(out),
        "--limit",
        "500",
        "--batches",
        "64",
        "--repeats",
        "1",
        "--threads",
        "1",
        "--matchers",
        "fast,nfa",
    )
    result = json.loads(out.read_text())
    for key in ("version", "date", "machine", "rules", "queries", "repeats", "matchers", "fast_over_nfa"):
        assert key in result, key
    assert result["rules"] == 800 and result["queries"] == 500 and result["repeats"] == 1
    assert set(result["matchers"]) == {"fast", "nfa"}
    for m in result["matchers"].values():
        for key in (
            "compile_s",
            "memory_bytes",
            "structure",
            "encode_ns_per_query",
            "timed_queries",
            "runs",
            "queries_per_s_1t",
            "queries_per_s_1t_with_encode",
        ):
            assert key in m, key
        assert m["runs"] and all(r["batch"] == 64 and r["threads"] == 1 for r in m["runs"])
        for r in m["runs"]:
            assert len(r["seconds"]) == 1 and r["queries_per_s"] > 0


def _csv_row(fields: Sequence[str]) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(fields)
    return buf.getvalue()


def test_eval_quotes_ids_like_the_csv_module(tmp_path: Path) -> None:
    """Ids with commas, quotes, spaces and non-ASCII come back as Python's csv would write them."""
    ids = ["plain", "with,comma", 'with"quote', " spaced ", "ÄÖü", 'x,"y"']
    q = tmp_path / "q.csv"
    q.write_text(
        "QUERY_ID,CTN_TYPE,BRD,OUT_CRR,FLT_RG,PRD,TER\n"
        + "".join(_csv_row([i, "II", "LHR", "", "1", "2026-01-01", ""]) for i in ids),
        encoding="utf-8",
    )
    out = tmp_path / "o.csv"
    offload("rules", "eval", *MINI, "--queries", str(q), "--out", str(out))
    assert out.read_text(encoding="utf-8") == "QUERY_ID,RULE_ID,CONTENT\n" + "".join(
        _csv_row([i, "R,7", "90"]) for i in ids
    )
