"""Tests for the synthetic MCT rule / trace generator (offload.rules.synth)."""

from __future__ import annotations

import csv
import datetime as dt
import re
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from offload.rules.synth import synth, synth_dir
from offload.rules.synth.criteria import CRITERIA, CRITERION_CODES, CTN_TYPES, INVALID_SHARE, TARGET_SHARES
from offload.rules.synth.ruleset import SynthRules, generate_rules
from offload.rules.synth.trace import SynthTrace, generate_trace
from offload.rules.synth.world import EQUIPMENT, HUBS, MONTHS, UNKNOWN_CARRIERS, load_world
from offload.rules.synth.write import ruletype_xml, write_ruleset, write_trace

N_BIG = 100_000
RULE_HEADER = [
    "RULE_ID",
    "WEIGHT",
    "STATUS",
    "VICEVERSA",
    "TAGS",
    "CRITERIA",
    *CRITERION_CODES,
    "CONTENT",
    "Hour",
    "INVALID",
    "Minutes",
]
MONTHS = {m: i + 1 for i, m in enumerate(MONTHS)}
DATE_RE = re.compile(r"^(\d{2})([A-Z]{3})(\d{4})$")
INT_RANGE_RE = re.compile(r"^(\d{4})/(\d{4})$")


def parse_date(text: str) -> dt.date:
    m = DATE_RE.match(text)
    assert m, text
    return dt.date(int(m[3]), MONTHS[m[2]], int(m[1]))


def parse_date_range(text: str) -> tuple[dt.date, dt.date]:
    lo, hi = text.split("-")
    return parse_date(lo), parse_date(hi)


def parse_int_range(text: str) -> tuple[int, int]:
    m = INT_RANGE_RE.match(text)
    assert m, text
    return int(m[1]), int(m[2])


# --------------------------------------------------------------------------------------------
# File validators (shared by the fixed-size tests and the hypothesis test)
# --------------------------------------------------------------------------------------------


def check_ruletype(path: Path) -> None:
    root = ET.parse(path).getroot()
    assert root.tag == "ruleTypeDefinition"
    assert root.findtext("code") == "MCT"
    defs = root.findall("criterionDefinition")
    assert [d.findtext("code") for d in defs] == list(CRITERION_CODES)
    for seq, (d, spec) in enumerate(zip(defs, CRITERIA, strict=True)):
        assert d.findtext("sequenceNumber") == str(seq)
        assert d.findtext("isMandatory") == ("true" if spec.mandatory else "false")
        assert d.findtext("weight") == str(spec.weight)
        fid = int(d.findtext("criterionTypeReference/id") or "-1")
        n_gui = len(d.findall("guiProperties"))
        if spec.kind == "equ":
            assert fid in (60, 67, 273, 316, 408) and n_gui == 1
        elif spec.kind == "date_range":
            assert fid == 212 and n_gui == 2
        else:
            assert fid == 412 and n_gui == 2


def check_rules_csv(path: Path) -> list[dict[str, str]]:
    """Validate rules.csv against the ERBIUM conventions; return its rows."""
    raw_lines = path.read_text(encoding="utf-8").splitlines()
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        header = next(reader)
        rows = list(reader)
    assert header == RULE_HEADER
    assert raw_lines[0] == ",".join(RULE_HEADER)
    assert len(rows) == len(raw_lines) - 1
    weights = {s.code: s.weight for s in CRITERIA}
    ids: set[str] = set()
    keys: set[tuple[str, ...]] = set()
    n_dup = 0
    out = []
    for raw, row in zip(raw_lines[1:], rows, strict=True):
        assert len(row) == len(RULE_HEADER)
        # Quoting: every non-empty value quoted, wildcards are truly empty cells.
        cells = raw.split(",")
        assert len(cells) == len(RULE_HEADER)
        for cell in cells:
            assert cell == "" or (len(cell) >= 3 and cell[0] == '"' and cell[-1] == '"'), raw
        rec = dict(zip(RULE_HEADER, row, strict=True))
        assert rec["RULE_ID"] and rec["RULE_ID"] not in ids
        ids.add(rec["RULE_ID"])
        for col in ("STATUS", "VICEVERSA", "TAGS", "CRITERIA", "CONTENT"):
            assert rec[col] == ""
        for spec in CRITERIA:
            v = rec[spec.code]
            if spec.mandatory:
                assert v != ""
            if v and spec.kind == "date_range":
                lo, hi = parse_date_range(v)
                assert lo <= hi
            if v and spec.kind == "int_range":
                lo, hi = parse_int_range(v)
                assert 1 <= lo <= hi <= 9999
        assert rec["CTN_TYPE"] in CTN_TYPES
        # Flight ranges and numbers only ever come with the carrier of their leg.
        for side in ("IN", "OUT"):
            if rec[f"{side}_FLT_RG"] or rec[f"{side}_FLT_NB"]:
                assert rec[f"{side}_CRR"]
            if rec[f"{side}_FLT_NB"]:
                assert 1 <= int(rec[f"{side}_FLT_NB"]) <= 9999
        assert int(rec["WEIGHT"]) == sum(weights[c] for c in CRITERION_CODES if rec[c])
        assert rec["INVALID"] in ("TRUE", "FALSE")
        hour, minutes = int(rec["Hour"]), int(rec["Minutes"])
        assert 0 <= minutes < 60 and hour >= 0
        key = tuple(rec[c] for c in CRITERION_CODES)
        n_dup += key in keys
        keys.add(key)
        out.append(rec)
    assert n_dup <= 5
    return out


def check_trace_files(queries: Path, requests: Path) -> tuple[list[list[str]], list[list[str]]]:
    with queries.open(newline="", encoding="utf-8") as fh:
        q_rows = list(csv.reader(fh))
    with requests.open(newline="", encoding="utf-8") as fh:
        r_rows = list(csv.reader(fh))
    assert q_rows[0] == ["QUERY_ID", *CRITERION_CODES]
    assert r_rows[0] == ["REQUEST_ID", "FIRST_QUERY", "N_QUERIES", "WANTED"]
    q_rows, r_rows = q_rows[1:], r_rows[1:]
    col = {c: i + 1 for i, c in enumerate(CRITERION_CODES)}
    assert len({r[0] for r in q_rows}) == len(q_rows)
    for r in q_rows:
        assert len(r) == 23 and all(r), r
        assert r[col["CTN_TYPE"]] in CTN_TYPES
        parse_date(r[col["MCT_PRD"]])
        assert r[col["IN_FLT_NB"]] == r[col["IN_FLT_RG"]]
        assert r[col["OUT_FLT_NB"]] == r[col["OUT_FLT_RG"]]
        for c in ("IN_FLT_NB", "OUT_FLT_NB"):
            assert r[col[c]].isdigit() and not r[col[c]].startswith("0")
            assert 1 <= int(r[col[c]]) <= 9999
        # CTN_TYPE agrees with the countries of previous / connection / next airports.
        ctry = load_world().country
        idx = load_world().index
        off = ctry[idx[r[col["MCT_OFF"]]]]
        brd = ctry[idx[r[col["MCT_BRD"]]]]
        assert r[col["PRV_CTRY"]] == ctry[idx[r[col["PRV_APT"]]]]
        assert r[col["NXT_CTRY"]] == ctry[idx[r[col["NXT_APT"]]]]
        expect = ("D" if r[col["PRV_CTRY"]] == off else "I") + ("D" if r[col["NXT_CTRY"]] == brd else "I")
        assert r[col["CTN_TYPE"]] == expect
    nxt = 0
    assert len({r[0] for r in r_rows}) == len(r_rows)
    for r in r_rows:
        first, n, wanted = int(r[1]), int(r[2]), int(r[3])
        assert first == nxt  # contiguous, in order
        assert 0 <= n <= 6000 and wanted > 0
        nxt += n
    assert nxt == len(q_rows)
    return q_rows, r_rows


# --------------------------------------------------------------------------------------------
# A brute-force reference matcher (small samples only), to check what queries hit
# --------------------------------------------------------------------------------------------


class BruteMatcher:
    """Exact ERBIUM semantics by brute force over the rules of the query's MCT_OFF."""

    def __init__(self, rules: SynthRules) -> None:
        self.rules = rules
        self.by_airport: dict[str, np.ndarray] = {}
        off = rules.columns["MCT_OFF"]
        order = np.argsort(off, kind="stable")
        uniq, starts = np.unique(off[order], return_index=True)
        bounds = [*starts.tolist(), len(order)]
        for k, a in enumerate(uniq.tolist()):
            self.by_airport[a] = np.sort(order[bounds[k] : bounds[k + 1]])
        n = len(rules)
        self.prd = np.full((n, 2), -1, dtype=np.int64)
        for i, v in enumerate(rules.columns["MCT_PRD"].tolist()):
            if v:
                lo, hi = parse_date_range(v)
                self.prd[i] = (lo.toordinal(), hi.toordinal())

    def match(self, q: dict[str, str]) -> int:
        cand = self.by_airport.get(q["MCT_OFF"])
        if cand is None:
            return -1
        ok = np.ones(len(cand), dtype=bool)
        for spec in CRITERIA:
            if spec.kind == "equ":
                col = self.rules.columns[spec.code][cand]
                ok &= (col == "") | (col == q[spec.code])
            elif spec.kind == "int_range":
                rg = self.rules.in_rg if spec.code == "IN_FLT_RG" else self.rules.out_rg
                v = int(q[spec.code])
                ok &= (rg[cand, 0] < 0) | ((rg[cand, 0] <= v) & (v <= rg[cand, 1]))
            else:
                d = parse_date(q[spec.code]).toordinal()
                p = self.prd[cand]
                ok &= (p[:, 0] < 0) | ((p[:, 0] <= d) & (d <= p[:, 1]))
        hits = cand[ok]
        if not len(hits):
            return -1
        scores = self.rules.score[hits]
        return int(hits[np.argmax(scores)])  # argmax: first of the best = input order


# --------------------------------------------------------------------------------------------
# Fixtures
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def big() -> SynthRules:
    return generate_rules(N_BIG, seed=7)


@pytest.fixture(scope="module")
def big_trace(big: SynthRules) -> SynthTrace:
    return generate_trace(big, 300, seed=7)


@pytest.fixture(scope="module")
def small_files() -> Iterator[tuple[Path, dict[str, object]]]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "a"
        summary = synth(out, 5_000, 60, seed=3)
        yield out, summary


# --------------------------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------------------------


def test_criteria_table() -> None:
    assert len(CRITERIA) == 22
    assert [c.code for c in CRITERIA if c.mandatory] == ["CTN_TYPE", "MCT_BRD", "MCT_OFF"]
    assert {c.code: c.kind for c in CRITERIA if c.kind != "equ"} == {
        "MCT_PRD": "date_range",
        "IN_FLT_RG": "int_range",
        "OUT_FLT_RG": "int_range",
    }
    nonzero = [c.weight for c in CRITERIA if c.weight]
    # Distinct powers of two (2^10 is unused in the MCT rule type), outbound above inbound.
    assert len(set(nonzero)) == 19 and all(w & (w - 1) == 0 for w in nonzero)
    weight = {c.code: c.weight for c in CRITERIA}
    assert weight["OUT_FLT_NB"] == 1 << 19 and weight["IN_FLT_NB"] == 1 << 9
    assert weight["MCT_PRD"] == 1 and weight["PRV_APT"] == 1 << 6


def test_reproducible_bytes(tmp_path: Path) -> None:
    files = ("ruletype.xml", "rules.csv", "queries.csv", "requests.csv")
    synth(tmp_path / "a", 3_000, 40, seed=11)
    synth(tmp_path / "b", 3_000, 40, seed=11)
    synth(tmp_path / "c", 3_000, 40, seed=12)
    for f in files:
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f
    for f in ("rules.csv", "queries.csv", "requests.csv"):
        assert (tmp_path / "a" / f).read_bytes() != (tmp_path / "c" / f).read_bytes(), f


def test_synth_dir_appears_whole_and_names_its_files(tmp_path: Path) -> None:
    out = tmp_path / "set"
    summary = synth_dir(out, 300, 3, seed=5)
    assert sorted(p.name for p in out.iterdir()) == [
        ".offload-made",  # the list of what it made: --force replaces only those
        "queries.csv",
        "requests.csv",
        "rules.csv",
        "ruletype.xml",
    ]
    assert summary["paths"]["rules"] == str(out / "rules.csv")  # not the temporary it was built in
    assert [p.name for p in tmp_path.iterdir()] == ["set"]  # no temporary left beside it
    with pytest.raises(FileExistsError):
        synth_dir(out, 300, 3, seed=6)
    synth_dir(out, 300, 3, seed=6, overwrite=True)
    assert "seed 6" in (out / "ruletype.xml").read_text()


def test_files_well_formed(small_files: tuple[Path, dict[str, object]]) -> None:
    out, summary = small_files
    check_ruletype(out / "ruletype.xml")
    rows = check_rules_csv(out / "rules.csv")
    assert len(rows) == 5_000 == summary["n_rules"]
    q_rows, r_rows = check_trace_files(out / "queries.csv", out / "requests.csv")
    assert len(q_rows) == summary["n_queries"] and len(r_rows) == summary["n_requests"] == 60
    # Wildcards are common, mandatory criteria never are.
    assert sum(1 for r in rows if r["IN_TER"] == "") > 1_000


def test_summary(small_files: tuple[Path, dict[str, object]]) -> None:
    _, summary = small_files
    assert summary["n_valid"] + summary["n_invalid"] == 5_000  # type: ignore[operator]
    timings = summary["timings"]
    assert isinstance(timings, dict) and timings["total_s"] > 0
    shares = summary["specific_shares"]
    assert isinstance(shares, dict) and set(shares) == set(CRITERION_CODES)


def test_ruletype_mentions_seed() -> None:
    assert "seed 5)" in ruletype_xml(5)
    assert ruletype_xml(5).count("<criterionDefinition>") == 22


def test_specific_shares(big: SynthRules) -> None:
    shares = big.specific_shares(valid_only=True)
    for code, target in TARGET_SHARES.items():
        got = shares[code]
        if target >= 0.05:
            assert abs(got - target) <= 0.03, (code, got, target)
        elif target >= 0.005:
            assert abs(got - target) <= 0.25 * target, (code, got, target)
        else:  # NXT/PRV_STATE: a handful
            assert got < 0.002, (code, got)
    for code in ("NXT_STATE", "PRV_STATE"):
        assert 0 < np.count_nonzero(big.columns[code] != "") < 100
    for code in ("CTN_TYPE", "MCT_BRD", "MCT_OFF"):
        assert shares[code] == 1.0


def test_hub_heavy_airports(big: SynthRules) -> None:
    off = big.columns["MCT_OFF"]
    _, counts = np.unique(off, return_counts=True)
    assert 2_000 <= len(counts) <= 4_000
    top = np.sort(counts)[::-1][: max(1, len(counts) // 100)]
    assert top.sum() / len(big) >= 0.20
    # Real hubs head the list.
    busiest = set(np.unique(off, return_counts=True)[0][np.argsort(-counts)[:20]].tolist())
    assert len(busiest & {h for h, _ in HUBS}) >= 15
    # Mostly MCT_BRD == MCT_OFF, with a few multi-airport-city connections.
    same = np.mean(big.columns["MCT_BRD"] == off)
    assert 0.97 <= same < 1.0


def test_contents_and_invalid(big: SynthRules) -> None:
    assert len(np.unique(big.content)) < 60
    assert abs(big.invalid.mean() - INVALID_SHARE) < 0.01
    assert np.all(big.content[big.invalid] == 999)
    valid = big.minutes[~big.invalid]
    assert valid.min() >= 15 and valid.max() <= 240
    # International connections take longer than domestic ones on average.
    dd = valid[big.ctn[~big.invalid] == 0].mean()
    ii = valid[big.ctn[~big.invalid] == 3].mean()
    assert ii > dd


def test_no_duplicates_and_families(big: SynthRules) -> None:
    assert big.n_duplicates <= 5
    keys = set(zip(*(big.columns[c].tolist() for c in CRITERION_CODES), strict=True))
    assert len(big) - len(keys) <= 5
    assert len(set(big.rule_id.tolist())) == len(big)
    # Families: far fewer distinct (airport, ctn, in carrier, out carrier) groups than rules.
    fam = set(
        zip(*(big.columns[c].tolist() for c in ("MCT_OFF", "CTN_TYPE", "IN_CRR", "OUT_CRR")), strict=True)
    )
    assert len(fam) < 0.6 * len(big)
    # Every airport has at least one default (all optional criteria wildcards).
    optional = [c.code for c in CRITERIA if not c.mandatory]
    is_default = np.all(np.stack([big.columns[c] == "" for c in optional]), axis=0)
    assert set(big.columns["MCT_OFF"][is_default].tolist()) == set(big.columns["MCT_OFF"].tolist())


def test_real_codes(big: SynthRules) -> None:
    w = load_world()
    carriers = set(w.carriers)
    for code in ("IN_CRR", "OUT_CRR"):
        used = set(big.columns[code].tolist()) - {""}
        assert used <= carriers and len(used) > 50
    for code in ("MCT_OFF", "MCT_BRD", "PRV_APT", "NXT_APT"):
        assert set(big.columns[code].tolist()) - {""} <= set(w.codes)
    for code in ("IN_EQP", "OUT_EQP"):
        assert set(big.columns[code].tolist()) - {""} <= set(EQUIPMENT)
    for code in ("PRV_AREA", "NXT_AREA"):
        assert set(big.columns[code].tolist()) - {""} <= {"1", "2", "3"}
    assert w.area[w.index["JFK"]] == "1" and w.area[w.index["FRA"]] == "2"
    assert w.area[w.index["DXB"]] == "2" and w.area[w.index["SYD"]] == "3"
    assert w.area[w.index["HNL"]] == "1"


def test_rules_consistent_with_ctn(big: SynthRules) -> None:
    w = load_world()
    dom_in = np.isin(big.columns["CTN_TYPE"], ["DD", "DI"])
    for apt_col, ctry_col, dom in (("PRV_APT", "PRV_CTRY", dom_in), ("NXT_APT", "NXT_CTRY", None)):
        if dom is None:
            dom = np.isin(big.columns["CTN_TYPE"], ["DD", "ID"])
        home = np.array([w.country[w.index[a]] for a in big.columns["MCT_OFF"].tolist()], dtype=object)
        apt = big.columns[apt_col]
        sel = np.flatnonzero(apt != "")
        apt_ctry = np.array([w.country[w.index[a]] for a in apt[sel].tolist()], dtype=object)
        assert np.all((apt_ctry == home[sel]) == dom[sel])
        ctry = big.columns[ctry_col]
        sel = np.flatnonzero(ctry != "")
        assert np.all((ctry[sel] == home[sel]) == dom[sel])


def test_trace_structure(big_trace: SynthTrace) -> None:
    t = big_trace
    assert len(t.n_queries) == 300
    assert t.first_query[0] == 0
    assert np.all(t.first_query[1:] == t.first_query[:-1] + t.n_queries[:-1])
    assert t.n_queries.sum() == len(t)
    assert t.n_queries.min() == 0 and t.n_queries.max() <= 6000
    assert 100 <= t.n_queries.mean() <= 600  # "a few hundred"
    assert np.all((t.wanted >= 50) & (t.wanted <= 200))
    for code in CRITERION_CODES:
        assert np.all(t.columns[code] != ""), code
    assert np.all(t.columns["IN_FLT_NB"] == t.columns["IN_FLT_RG"])
    assert np.all(t.columns["OUT_FLT_NB"] == t.columns["OUT_FLT_RG"])
    # One request = one (origin, destination, date): the date is constant within it.
    for r in range(0, 300, 7):
        a, n = int(t.first_query[r]), int(t.n_queries[r])
        if n:
            assert len(set(t.columns["MCT_PRD"][a : a + n].tolist())) == 1
    # A few codes never seen in any rule.
    assert np.any(np.isin(t.columns["IN_CRR"], list(UNKNOWN_CARRIERS)))


def test_trace_max_queries(big: SynthRules) -> None:
    t = generate_trace(big, 200, seed=1, max_queries=5_000)
    assert len(t) == 5_000 == t.n_queries.sum()
    full = generate_trace(big, 200, seed=1)
    k = len(t.n_queries)
    assert np.array_equal(t.n_queries[:-1], full.n_queries[: k - 1])
    assert t.n_queries[-1] <= full.n_queries[k - 1]


def test_trace_hits_specific_rules(big: SynthRules, big_trace: SynthTrace) -> None:
    """Most queries are answered by carrier-level rules; a few percent match nothing."""
    matcher = BruteMatcher(big)
    rng = np.random.default_rng(0)
    sample = rng.choice(len(big_trace), size=2_000, replace=False)
    winners = []
    for i in sample.tolist():
        q = {c: big_trace.columns[c][i] for c in CRITERION_CODES}
        winners.append(matcher.match(q))
    win = np.array(winners)
    no_match = np.mean(win < 0)
    assert 0.01 <= no_match <= 0.07, no_match
    hit = win[win >= 0]
    carrier_level = (big.columns["IN_CRR"][hit] != "") | (big.columns["OUT_CRR"][hit] != "")
    assert carrier_level.mean() >= 0.5, carrier_level.mean()
    optional = [c.code for c in CRITERIA if not c.mandatory]
    default = np.all(np.stack([big.columns[c][hit] == "" for c in optional]), axis=0)
    assert 0.02 <= default.mean() <= 0.5, default.mean()


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n_rules=st.integers(1, 2_000), seed=st.integers(0, 2**32 - 1))
@example(n_rules=1, seed=0)
@example(n_rules=7, seed=3)
@example(n_rules=2_000, seed=2**32 - 1)
def test_well_formed_any_size(n_rules: int, seed: int) -> None:
    rules = generate_rules(n_rules, seed)
    assert len(rules) == n_rules
    trace = generate_trace(rules, 5, seed, max_queries=400)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        check_ruletype(write_ruleset(out, rules)[0])
        assert len(check_rules_csv(out / "rules.csv")) == n_rules
        check_trace_files(*write_trace(out, trace))
