"""The planner's inputs as its commands name them: the stage costs to simulate (a calibration or a
``[costs]`` TOML, with a what-if kernel preset in place of the kernel) and the request sizes to
replay (a trace directory's requests.csv, or a list)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from offload.plan import calibrate as cal
from offload.plan import simulate as sim


@dataclass(frozen=True)
class StageCosts:
    """Stage costs ready to simulate, and what they came from."""

    costs: sim.Costs
    kernel: dict[str, Any] = field(default_factory=dict)
    """The what-if preset's ``[about]`` (name, status, sources); empty: this machine's CPU kernel."""
    validation: dict[str, float] | None = None
    """The calibration's median absolute error per figure; None: uncalibrated costs."""
    cpus: int | None = None
    """Cores of the machine the calibration measured; None without one."""


def stage_costs(
    calibration: Path | None = None, costs_toml: Path | None = None, preset: str | None = None
) -> StageCosts:
    """The costs of ``calibration`` (from `offload plan calibrate`; it wins over ``costs_toml``),
    else of ``costs_toml``, else the defaults; with ``preset`` (a bundled name or a TOML), its
    kernel replaces theirs. A bad file raises `InputError` (located), OSError, ValueError or
    TypeError."""
    calib = cal.load(calibration) if calibration is not None else None
    if calib is not None and "costs" not in calib:
        raise ValueError(
            "a calibration on knees holds costs per kind, not one pipeline's: `plan recommend` takes it"
        )
    if calib is not None:
        costs = sim.Costs(**calib["costs"])
    else:
        costs = sim.load_costs(str(costs_toml)) if costs_toml else sim.Costs()
    about: dict[str, Any] = {}
    if preset is not None:
        about, kernel = sim.load_preset(preset)
        costs = sim.with_preset(costs, kernel)
    if calib is None:
        return StageCosts(costs, about)
    return StageCosts(costs, about, calib["median_abs_error"], calib["cpus"])


def request_sizes(trace: Path | None, sizes: str = "1") -> tuple[int, ...]:
    """Queries per request to draw from: a trace directory's requests.csv when given, else the
    comma-separated ``sizes``. A ValueError names the file or the option."""
    if trace is not None:
        try:
            return tuple(cal.trace_sizes(trace))
        except (OSError, KeyError, ValueError) as ex:
            raise ValueError(f"{trace / 'requests.csv'}: {ex}") from None
    try:
        return tuple(int(x) for x in sizes.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"--sizes: expected comma-separated integers, got {sizes!r}") from None
