"""The reproduction index (issue 27, docs/seeds.md): every row of data/seeds/index.toml loads,
names a real command and recorded JSON, and the committed markdown is what the registry and the
JSON generate today; bad rows are refused in one line naming the row."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from offload.cli import app
from offload.report import seeds as S

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = S.command_paths(typer.main.get_command(app))
GOOD = {
    "seed": "002",
    "item": "Fig. 10(b)",
    "claim": "linear in lookups",
    "command": "python benches/recsys_bench.py --models rmc1",
    "result": "benches/results/recsys/lookups.json",
    "our": "{0.sls_us_per_inference:.0f} µs at {0.lookups} lookups",
    "machine": "dev VM",
    "verdict": "reproduced",
    "why": "",
}


@pytest.fixture(scope="module")
def rows() -> list[S.Row]:
    return S.load(root=ROOT, commands=COMMANDS)


def test_the_registry_loads_with_every_seed_and_verdict(rows: list[S.Row]) -> None:
    assert {r.seed for r in rows} == set(S.SEEDS)
    assert {r.verdict for r in rows} <= set(S.VERDICTS)
    assert all("{" not in r.our for r in rows), "every pointer was filled"


def test_every_command_and_result_exists(rows: list[S.Row]) -> None:
    for r in rows:
        assert all((ROOT / p).is_file() for p in r.results), r
        for part in filter(None, (p.strip() for p in r.command.split("&&"))):
            assert S._command_problem(part.split(), ROOT, COMMANDS) is None, (r.item, part)
    assert ("probe",) in COMMANDS and ("rules", "bench") in COMMANDS  # a group that runs, and a leaf


def test_the_committed_markdown_is_what_the_registry_generates(rows: list[S.Row]) -> None:
    committed = (ROOT / "docs" / "seeds.md").read_text(encoding="utf-8")
    generated = S.markdown(rows, ROOT / "docs" / "seeds.md", ROOT, S.notes())
    assert generated == committed, (
        "docs/seeds.md is stale: run `offload report --seeds docs/seeds.md` from the repository root"
    )


def test_nothing_fitted_is_called_reproduced(rows: list[S.Row]) -> None:
    for r in rows:
        if S.FITTED.search(r.claim) or S.FITTED.search(r.why):
            assert r.verdict != "reproduced", r
    by_item = {(r.seed, r.item, r.claim[:20]): r.verdict for r in rows}
    known = [("000/001", "Table 1"), ("000/001", "§5.3"), ("002", "Fig. 4"), ("002", "Fig. 14"),
             ("004", "Insight 2, §5.2")]  # fmt: skip
    for seed, item in known:
        verdicts = {v for (s, i, _), v in by_item.items() if (s, i) == (seed, item)}
        # or shown from the seed's stated inputs, the fitted figure in a row of its own (issue 27, item 3)
        variant = {v for (s, i, _), v in by_item.items() if (s, i) == (seed, f"{item}, fitted variant")}
        assert verdicts == {"fitted"} or variant == {"fitted"}, item
    assert any(r.verdict == "fitted" and "60 billion" in r.claim for r in rows)


def _toml(tmp_path: Path, **changes: object) -> Path:
    row = {**GOOD, **changes}
    lines = ["[[item]]"]
    for k, v in row.items():
        if v is not None:
            lines.append(f"{k} = " + (repr(v).replace("'", '"') if isinstance(v, list) else f"'{v}'"))
    path = tmp_path / "index.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_a_good_row_resolves_its_pointers(tmp_path: Path) -> None:
    (row,) = S.load(_toml(tmp_path), ROOT, COMMANDS)
    assert row.our == "297 µs at 10 lookups"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"verdict": "reproduced-ish"}, "unknown verdict 'reproduced-ish'"),
        ({"seed": "005"}, "unknown seed '005'"),
        ({"why": None}, "missing why"),
        ({"colour": "red"}, "unknown colour"),
        ({"our": "{0.no_such_key:.1f}"}, "pointer '0.no_such_key': no 'no_such_key'"),
        ({"our": "{9.lookups}"}, "no '9'"),
        ({"our": "{0.run.strategy * 2}"}, "not a number"),
        ({"our": "{0.lookups"}, "unpaired brace"),
        ({"result": "benches/results/nothing.json"}, "result benches/results/nothing.json: no such file"),
        ({"command": "offload rules frobnicate --x 1"}, "no command `offload rules frobnicate`"),
        ({"command": "python benches/nothing.py"}, "no script 'benches/nothing.py'"),
        ({"command": "make no-such-target"}, "no make target no-such-target"),
        ({"command": "curl http://example.org"}, "command 'curl'"),
        ({"command": "", "verdict": "deviation", "why": "x"}, "needs the command"),
        ({"verdict": "deviation"}, "needs a why"),
        ({"why": "the rate was back-solved from the seed"}, "cannot be 'reproduced'"),
        ({"claim": "a share fitted to 40%"}, "cannot be 'reproduced'"),
    ],
)
def test_bad_rows_are_refused_in_one_line_naming_the_row(
    tmp_path: Path, changes: dict[str, object], message: str
) -> None:
    with pytest.raises(S.SeedIndexError) as e:
        S.load(_toml(tmp_path, **changes), ROOT, COMMANDS)
    text = str(e.value)
    assert "\n" not in text and "row 1" in text and message in text, text


def test_a_file_that_is_not_toml_or_has_no_rows(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[[item]\n", encoding="utf-8")
    with pytest.raises(S.SeedIndexError, match="not TOML"):
        S.load(bad, ROOT)
    bad.write_text("x = 1\n", encoding="utf-8")
    with pytest.raises(S.SeedIndexError, match=r"no \[\[item\]\] rows"):
        S.load(bad, ROOT)


def test_offload_report_seeds_writes_the_index_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    out = tmp_path / "seeds.md"
    result = CliRunner().invoke(app, ["report", "--seeds", str(out)])
    assert result.exit_code == 0, result.output
    text = out.read_text(encoding="utf-8")
    assert "## 004:" in text and "| all |" in text
    assert not (tmp_path / "report.html").exists() and not (ROOT / "report.html").exists()


def test_the_html_section_has_a_table_per_seed(rows: list[S.Row]) -> None:
    section = str(S.seeds_section(rows))
    assert section.count("<table") == 1 + len(S.SEEDS)
    assert "needs-hardware" in section and "&lt;" not in section.split("<table", 1)[0]


def test_notes_take_one_text_per_known_seed(tmp_path: Path) -> None:
    assert set(S.notes()) == set(S.SEEDS)
    bad = tmp_path / "index.toml"
    bad.write_text('[notes]\n"007" = "a seed we do not have"\n', encoding="utf-8")
    with pytest.raises(S.SeedIndexError, match="not 007"):
        S.notes(bad)


def test_a_broken_index_fails_the_command_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    broken = _toml(tmp_path, command="offload rules frobnicate")
    monkeypatch.setattr(S, "data_path", lambda *parts: broken)
    result = CliRunner().invoke(app, ["report", "--seeds", str(tmp_path / "seeds.md")])
    assert result.exit_code == 2, result.output
    assert "no command `offload rules frobnicate`" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "seeds.md").exists()
