"""`offload report`: one static HTML page that gathers what the other commands wrote, with their
plots. Images are embedded (data URIs), so the single file opens from disk anywhere and can be
mailed around. Every section is optional: what was not given says so instead of disappearing.

Where each section comes from (option: command that writes it → module that draws it):

- Rule engine (``--bench``): ``offload rules bench`` → ``rules``
- The rule engine on a GPU (``--gpu``, ``--gpu-check``): ``benches/gpu/run.sh`` → ``rules``;
  ``offload plan check`` → ``plan``
- Channels (``--probe``): ``offload probe`` → ``probe``
- Service configurations (``--sweep``): ``offload serve sweep`` → ``serve``
- The service's host path (``--host-path``): ``benches/serve_hostpath.py`` or ``make demo`` →
  ``serve``
- Simulator calibration, Recommendation, Deployment cost (``--calibration``, ``--recommend``,
  ``--cost``): ``offload plan calibrate | recommend | cost`` → ``plan``
- RM-SSD (``--recsys``): ``offload recsys bench`` → ``recsys``
- Near-data queries (``--dataservices``): ``offload node case-study`` → ``dataservices``
- Particle data flows, pipeline over several nodes (``--flows``, ``--nodes``): ``offload flows
  partition | run`` → ``flows``
- RPWU, MBWU, headroom, availability (``--rpwu``, ``--mbwu``, ``--headroom``,
  ``--availability``): ``offload metrics ...`` → ``metrics``

The other modules: ``inputs`` reads each file and checks it is what its option takes;
``markup`` renders the Jinja2 templates of ``templates/`` (the page, its CSS and script, the
table/plot/note macros) with autoescaping.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from offload import __version__
from offload.files import write_text
from offload.report.dataservices import dataservices_section
from offload.report.flows import flows_section, nodes_section
from offload.report.inputs import KINDS, ReportInputError, flag, load
from offload.report.markup import Markup, meta, page
from offload.report.metrics import availability_section, headroom_section, mbwu_section, rpwu_section
from offload.report.plan import calibration_section, check_section, cost_section, recommend_section
from offload.report.probe import probe_section
from offload.report.recsys import recsys_section
from offload.report.rules import gpu_section, rules_section
from offload.report.seeds import SeedIndexError, seeds_section
from offload.report.seeds import load as load_seeds
from offload.report.serve import host_path_section, sweep_section

__all__ = ["ReportInputError", "build"]


def build(
    out: Path,
    bench: Path | None = None,
    probe: Path | None = None,
    sweep: Path | None = None,
    calibration: Path | None = None,
    recommend: Path | None = None,
    cost: Path | None = None,
    recsys: Path | None = None,
    dataservices: Path | None = None,
    flows: Path | None = None,
    rpwu: Path | None = None,
    nodes: Path | None = None,
    mbwu: Path | None = None,
    headroom: Path | None = None,
    availability: Path | None = None,
    gpu: Path | None = None,
    gpu_check: Path | None = None,
    host_path: Path | None = None,
) -> Path:
    """Writes the report to ``out`` from the files given; every input is read and checked for
    its kind before anything is drawn (ReportInputError naming the option and the file)."""
    given = {"bench": bench, "probe": probe, "sweep": sweep, "calibration": calibration,
             "recommend": recommend, "cost": cost, "recsys": recsys, "dataservices": dataservices,
             "flows": flows, "rpwu": rpwu, "nodes": nodes, "mbwu": mbwu, "headroom": headroom,
             "availability": availability, "gpu": gpu, "gpu_check": gpu_check,
             "host_path": host_path}  # fmt: skip
    data = {option: load(path, option) for option, path in given.items()}  # all checked first
    now = datetime.now(UTC).isoformat(timespec="seconds")
    html = page(__version__, now, _sections(data, given), _answer(data["recommend"]))
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text(out, html)
    return out


def _answer(rec: dict[str, Any] | None) -> str:
    """The page's first line: what to deploy on the machine measured (issue 44)."""
    if rec is None:
        return "What to deploy: not asked (give --recommend, from `offload plan recommend`)."
    from offload.plan.recommend import answer, answer_line

    got = rec.get("answer")
    if got is None and "rows" in rec:  # written before the answer was kept: derived again
        got = answer(rec["rows"], rec)
    return answer_line(got)


def _sections(d: dict[str, Any], given: dict[str, Path | None]) -> list[tuple[str, Markup]]:
    """Every section in page order: (title, body)."""

    def part(options: tuple[str, ...], render: Callable[[], Markup]) -> Markup:
        return _part(given, options, render)

    g = given
    return [
        ("Rule engine", part(("bench",), lambda: rules_section(d["bench"], g["bench"]))),
        (
            "The rule engine on a GPU",
            part(
                ("gpu", "gpu_check"), lambda: gpu_section(d["gpu"], g["gpu"]) + check_section(d["gpu_check"])
            ),
        ),
        ("Channels (probe)", part(("probe",), lambda: probe_section(d["probe"], g["probe"]))),
        ("Service configurations (sweep)", part(("sweep",), lambda: sweep_section(d["sweep"], g["sweep"]))),
        (
            "The service's host path",
            part(("host_path",), lambda: host_path_section(d["host_path"], g["host_path"])),
        ),
        ("Simulator calibration", part(("calibration",), lambda: calibration_section(d["calibration"]))),
        ("Recommendation", part(("recommend",), lambda: recommend_section(d["recommend"]))),
        ("Deployment cost", part(("cost",), lambda: cost_section(d["cost"]))),
        (
            "Recommendation inference on SSD (RM-SSD)",
            part(("recsys",), lambda: recsys_section(d["recsys"], g["recsys"])),
        ),
        (
            "Near-data queries (offload or push back)",
            part(("dataservices",), lambda: dataservices_section(d["dataservices"])),
        ),
        (
            "Particle data flows (partition by id)",
            part(("flows",), lambda: flows_section(d["flows"], g["flows"])),
        ),
        (
            "Particle pipeline over several nodes",
            part(("nodes",), lambda: nodes_section(d["nodes"], g["nodes"])),
        ),
        (
            "Node budgets' relative performance (RPWU)",
            part(("rpwu",), lambda: rpwu_section(d["rpwu"], g["rpwu"])),
        ),
        ("Media-based work units (MBWU)", part(("mbwu",), lambda: mbwu_section(d["mbwu"], g["mbwu"]))),
        (
            "Network processing headroom",
            part(("headroom",), lambda: headroom_section(d["headroom"], g["headroom"])),
        ),
        (
            "Relative data availability",
            part(("availability",), lambda: availability_section(d["availability"], g["availability"])),
        ),
        ("The seeds, item by item (reproduction index)", _seeds()),
    ]


def _seeds() -> Markup:
    """The reproduction index, read from the repository's recorded JSON (this directory must be
    its root); elsewhere a line says where it lives instead."""
    try:
        return seeds_section(load_seeds())
    except SeedIndexError as e:
        return meta(f"the index reads benches/results/ from the repository's root ({e}); see docs/seeds.md")


def _part(given: dict[str, Path | None], options: tuple[str, ...], render: Callable[[], Markup]) -> Markup:
    """A section; an input that passed its kind check but lacks what the section reads is
    named by its option, not shown as a KeyError."""
    try:
        return render()
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, ZeroDivisionError) as e:
        shown = [(o, p) for o in options if (p := given[o]) is not None]
        flags = ", ".join(flag(o, p) for o, p in shown) or "an input"
        what = " or ".join(KINDS[o][0] for o, _ in shown) or "what it expects"
        raise ReportInputError(f"{flags}: not {what} as this version reads it ({e!r})") from None
