"""`offload report`: one self-contained HTML page with every section, rendered for real in
headless Chromium (Debian package `chromium`; `make test` installs it), which must decode every
embedded plot and show every table."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from offload import report
from offload.dataservices import cases as C
from offload.dataservices import particles as P
from offload.dataservices.client import NodeClient
from offload.dataservices.node import Node, NodeConfig
from offload.plan import cost, recommend
from offload.recsys import bench as rbench
from offload.recsys import engine as E
from offload.recsys import plots as rplots
from offload.recsys import traces as T
from offload.recsys.models import SPECS

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benches" / "results"
SWEEP = Path(__file__).parent / "data" / "sweep-2cpu"


def chromium() -> str | None:
    return next((c for c in ("chromium", "chromium-browser", "google-chrome") if shutil.which(c)), None)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("report")
    rows = json.loads((SWEEP / "sweep.json").read_text())["rows"]
    sweep = d / "sweep.json"
    sweep.write_text(json.dumps({"rows": rows, "pareto": [r["label"] for r in recommend.pareto(rows)]}))
    recommend.plot(rows, None, d / "sweep.png", "sweep")
    rec = recommend.recommend(recommend.tag(rows, "measured"), p99_us=3_500, target_qps=1e6)
    png = recommend.plot(rows, rec["best_under_p99"]["config"], d / "recommend.png", "recommend")
    (d / "recommend.json").write_text(json.dumps(rec | {"rows": rows, "plot": str(png)}))
    s = cost.load_scenario(ROOT / "data" / "plans" / "seed-table1.toml")
    (d / "cost.json").write_text(json.dumps(cost.report(s, cost.cost(s))))
    m = E.create(d / "rmc1", SPECS["rmc1"], [700] * 8)
    cfg = T.TraceConfig(rows=m.rows, batch_size=2, lookups=4, dense_width=128)
    strategies = ["dram", "ssd-s", "emb-vectorsum", "rm-ssd"]
    rb = rbench.run(m, T.generate_trace(cfg, 2), strategies, "flash", rbench.RunOptions(device="in-process"))
    (d / "recsys.json").write_text(json.dumps(rb))
    rplots.per_bench(rb, d)
    node = Node(NodeConfig("t"))
    try:
        node.add("particles", P.generate(30_000, seed=1))
        with NodeClient(f"127.0.0.1:{node.port}", "t") as c:
            (d / "cases.json").write_text(json.dumps([C.run_case(c, n, repeat=1) for n in C.CASES]))
    finally:
        node.shutdown()
    return {
        "bench": RESULTS / "rules-100k.json", "probe": RESULTS / "probe-full.json", "sweep": sweep,
        "calibration": RESULTS / "calibration-100k.json", "recommend": d / "recommend.json",
        "cost": d / "cost.json", "recsys": d / "recsys.json", "dataservices": d / "cases.json",
        "flows": RESULTS / "flows" / "partition.json", "rpwu": RESULTS / "metrics" / "rpwu.json",
        "nodes": RESULTS / "flows" / "nodes.json", "mbwu": RESULTS / "metrics" / "mbwu.json",
        "headroom": RESULTS / "metrics" / "headroom.json",
        "availability": RESULTS / "metrics" / "availability.json",
        "gpu": RESULTS / "gpu" / "rules-gpu-nogpu.json",
        "host_path": RESULTS / "serve-hostpath-100k.json",
    }  # fmt: skip


def test_report_has_every_section_table_and_plot(inputs: dict[str, Path], tmp_path: Path) -> None:
    page = report.build(tmp_path / "r.html", **inputs).read_text()
    titles = ["Rule engine", "Channels (probe)", "Service configurations (sweep)", "Simulator calibration"]
    more = ["Recommendation", "Deployment cost", "Recommendation inference on SSD (RM-SSD)"]
    flows = ["Particle data flows (partition by id)", "Node budgets' relative performance (RPWU)",
             "Particle pipeline over several nodes", "Media-based work units (MBWU)",
             "Network processing headroom", "Relative data availability",
             "The rule engine on a GPU", "The service's host path"]  # fmt: skip
    shown = [html.unescape(t) for t in re.findall(r"<h2 id=\"s\d+\">(.*?)</h2>", page)]
    for title in [*titles, *more, "Near-data queries (offload or push back)", *flows]:
        assert title in shown
    assert 'class="missing"' not in page  # every input was given and found
    # MBWU has two (this disk, the seed's case study); the seed index five (counts, one per seed)
    assert page.count("<table>") == 22
    assert "gpu: skipped (no GPU" in page and "gpu-host" in page  # a run without a device says so
    assert "ycsb-a" in page and "[64.0%]" in page and "94" in page and "20.58" in page  # the metrics
    assert "100 such nodes" in page and "held out" in page  # the pipeline model
    assert "ships" in page and "bluefield2" in page and "cpu-cache" in page  # flows and rpwu
    assert "[55,036.7]" in page and "Case II" in page  # the case studies beside the seed
    # Rules plot, 3 probe plots, sweep, calibration, recommendation, 3 recsys: embedded, none linked.
    assert page.count('src="data:image/png;base64,') >= 12 and 'src="file:' not in page  # + flows, rpwu
    assert "emb-vectorsum" in page and "31,826×" in page  # recsys table and the seed's Table IV
    assert "1,464" in page and "f1.2xlarge" in page  # the cost table
    assert "each predicted by a model fitted without it" in page


def test_missing_sections_say_how_to_make_them(tmp_path: Path) -> None:
    page = report.build(tmp_path / "r.html", cost=None).read_text()
    assert page.count('class="missing"') == 16 and "offload plan calibrate" in page
    assert "benches/serve_hostpath.py" in page
    assert "benches/gpu/run.sh" in page
    assert "flows_bench.py --parts nodes" in page
    assert "offload flows partition" in page and "offload metrics rpwu" in page
    assert "offload node case-study" in page
    assert "offload recsys bench" in page


def test_cli_writes_the_report(inputs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "cli.html"
    args = [f"--{k.replace('_', '-')}={v}" for k, v in inputs.items()]
    r = subprocess.run([sys.executable, "-m", "offload.cli", "report", "--out", str(out), *args],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert out.exists()
    cmd = [sys.executable, "-m", "offload.cli", "report", "--out", str(out), "--cost", "nope.json"]
    bad = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "nope.json: no such file" in bad.stderr


@pytest.mark.skipif(chromium() is None, reason="no chromium (`make test` installs it with apt-get)")
def test_headless_chromium_renders_every_plot_and_table(inputs: dict[str, Path], tmp_path: Path) -> None:
    out = report.build(tmp_path / "r.html", **inputs)
    browser = [str(chromium()), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
               "--virtual-time-budget=10000"]  # fmt: skip
    dom = subprocess.run([*browser, "--dump-dom", out.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    body = re.search(r"<body([^>]*)>", dom.stdout)
    assert body, dom.stdout[:500]
    attrs = dict(re.findall(r'data-([a-z-]+)="(\d+)"', body.group(1)))
    assert int(attrs["images"]) >= 16 and attrs["images-loaded"] == attrs["images"], attrs
    assert int(attrs["tables"]) == 22  # as above: MBWU two, the seed index five
    shot = tmp_path / "report.png"
    subprocess.run([*browser, "--window-size=1280,2400", f"--screenshot={shot}", out.as_uri()],
                   capture_output=True, timeout=120, check=True)  # fmt: skip
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 50_000  # a rendered page, not a blank one


def test_the_gpu_section_shows_where_the_device_time_goes(tmp_path: Path) -> None:
    """The H200 run: the kernel alone, the rate with transfers and the device profile."""
    run, check = RESULTS / "gpu" / "rules-gpu.json", RESULTS / "gpu" / "check-gpu-h200.json"
    page = report.build(tmp_path / "r.html", gpu=run, gpu_check=check).read_text()
    prof = json.loads(run.read_text())["matchers"]["gpu"]["device_profile"]
    assert "<h3>gpu: where the device's time goes</h3>" in page
    assert f"{prof['pipeline_queries_per_s']:,.0f} q/s" in page
    assert "block 1024" in page and "batch of 262,144" in page and "sorted by partition" in page
    assert "skipped" not in page.split(">The rule engine on a GPU</h2>")[1].split("<h2")[0]
    # the planner's what-if beside it, with its error
    mae = json.loads(check.read_text())["median_abs_error"]["queries_per_s"]
    assert "The planner&#x27;s prediction of it" in page or "The planner's prediction of it" in page
    assert f"throughput {mae:.1%}" in page and "16p 4w 2k 1e per-req" in page


@pytest.mark.parametrize(
    ("option", "given", "words"),
    [
        ("bench", RESULTS / "probe-full.json", "not an `offload rules bench` result (no 'matchers')"),
        ("probe", RESULTS / "rules-100k.json", "not an `offload probe` profile (no 'channels')"),
        ("cost", RESULTS / "calibration-100k.json", "not an `offload plan cost` result (no 'deployments')"),
        (
            "nodes",
            RESULTS / "flows" / "partition.json",
            "not an `offload flows run` result (no 'per_node' in its runs)",
        ),
        (
            "gpu-check",
            RESULTS / "rules-100k.json",
            "not an `offload plan check` result (no 'median_abs_error')",
        ),
    ],
)
def test_an_input_of_the_wrong_kind_is_named_by_its_option(
    tmp_path: Path, option: str, given: Path, words: str
) -> None:
    with pytest.raises(report.ReportInputError, match=re.escape(f"--{option} {given}: {words}")):
        report.build(tmp_path / "r.html", **{option.replace("-", "_"): given})
    cmd = [
        sys.executable,
        "-m",
        "offload.cli",
        "report",
        "--out",
        str(tmp_path / "r.html"),
        f"--{option}",
        str(given),
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip().splitlines() == [f"error: --{option} {given}: {words}"], r.stderr
    assert not (tmp_path / "r.html").exists()  # nothing written


def test_values_from_the_inputs_are_escaped(tmp_path: Path) -> None:
    """The templates autoescape: a value that looks like markup is shown, not run."""
    d = json.loads((RESULTS / "rules-100k.json").read_text())
    d["date"] = "<script>alert(1)</script>"
    d["matchers"] = {"<b>fast</b>": d["matchers"]["fast"]}
    given = tmp_path / "bench.json"
    given.write_text(json.dumps(d))
    page = report.build(tmp_path / "r.html", bench=given).read_text()
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<td>&lt;b&gt;fast&lt;/b&gt;</td>" in page


def test_an_input_that_is_not_json_is_named_by_its_option(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text("")
    with pytest.raises(report.ReportInputError, match=r"--sweep .*x.json: not JSON \(Expecting value"):
        report.build(tmp_path / "r.html", sweep=bad)


def test_availability_says_why_the_model_differs_from_the_seed(tmp_path: Path) -> None:
    page = report.build(
        tmp_path / "r.html", availability=RESULTS / "metrics" / "availability.json"
    ).read_text()
    part = page.split(">Relative data availability</h2>")[1]
    rows = re.findall(r"<tr>(.*?)</tr>", part)
    hdd, ssd = rows[1], rows[2]
    assert "20.58" in hdd and "7.1" in hdd and "not reproduced" in hdd and "f cancels" in hdd
    assert "20.58" in ssd and "20.7" in ssd and "reproduced (-0.6%)" in ssd
    assert "rare-failure limit" in part and "docs/metrics.md" in part


def _label_boxes(
    monkeypatch: pytest.MonkeyPatch, plot: object, rows: list, chosen: object, path: Path
) -> tuple:
    import matplotlib.pyplot as plt

    monkeypatch.setattr(plt, "close", lambda *_a: None)  # keep the figure to look at its labels
    plot(rows, path, "t", chosen)  # type: ignore[operator]
    fig = plt.gcf()
    ax = fig.axes[0]
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    names = {row["label"] for row in rows}
    texts = [t for t in ax.texts if t.get_text() in names]
    return [t.get_window_extent(r) for t in texts], [t.get_text() for t in texts], ax


def test_pareto_point_labels_stay_readable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from offload.serve import sweep as S

    rec = json.loads((RESULTS / "recommend-100k.json").read_text())
    chosen = rec["best_under_p99"]["config"]
    boxes, labels, ax = _label_boxes(monkeypatch, S.pareto_plot, rec["rows"], chosen, tmp_path / "p.png")
    assert chosen["label"] in labels and len(labels) >= len(rec["pareto"])
    for i, a in enumerate(boxes):
        assert ax.bbox.x0 <= a.x0 and a.x1 <= ax.bbox.x1, labels[i]  # not cut at the edge
        for j in range(i):
            assert not a.overlaps(boxes[j]), (labels[i], labels[j])


def test_the_rule_engine_chart_with_one_batch_size_has_no_log_batch_axis(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import matplotlib.pyplot as plt

    from offload.rules import bench

    monkeypatch.setattr(plt, "close", lambda *_a: None)
    d = json.loads((RESULTS / "rules-100k.json").read_text())
    for m in d["matchers"].values():
        m["runs"] = [r for r in m["runs"] if r["batch"] == 65536]
    bench.plot(d, tmp_path / "r.png")
    ax = plt.gcf().axes[0]
    assert ax.get_xscale() == "linear" and "batch of 65,536" in ax.get_xlabel()
    assert len(ax.patches) == sum(len(m["runs"]) for m in d["matchers"].values())  # a bar per run
