"""The inputs of `offload report`: what each option takes, and each file read and checked for
its kind before any section is drawn, so a wrong file is one line naming its option."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class ReportInputError(ValueError):
    """An input that is not what its option expects; the message names the option and the file."""


# What each option takes: (what it is, keys it must have, where they are: None = at the top, else
# in every entry of the list (or of the top-level list under that name)).
KINDS: dict[str, tuple[str, tuple[str, ...], str | None]] = {
    "bench": ("an `offload rules bench` result", ("matchers",), None),
    "probe": ("an `offload probe` profile", ("channels",), None),
    "sweep": ("an `offload serve sweep` result", ("rows",), None),
    "calibration": ("an `offload plan calibrate` result", ("median_abs_error", "table"), None),
    "recommend": ("an `offload plan recommend` result", ("best_under_p99", "plot"), None),
    "cost": ("an `offload plan cost` result", ("deployments",), None),
    "recsys": ("an `offload recsys bench` result", ("strategies",), None),
    "dataservices": ("an `offload node case-study` result", ("measured_s",), "cases"),
    "flows": ("an `offload flows partition` result", ("s_per_gb",), "runs"),
    "rpwu": ("an `offload metrics rpwu` result", ("summary", "classes"), None),
    "nodes": ("an `offload flows run` result", ("per_node",), "runs"),
    "mbwu": ("an `offload metrics mbwu` result", ("mbwu",), None),
    "headroom": ("an `offload metrics headroom` result", ("profiles",), None),
    "availability": ("an `offload metrics availability` result", ("cases",), None),
    "gpu": ("an `offload rules bench --matcher gpu` result", ("matchers",), None),
    "gpu_check": ("an `offload plan check` result", ("median_abs_error", "table"), None),
    "host_path": ("a benches/serve_hostpath.py result", ("runs", "request_size"), None),
}


def flag(option: str, path: Path) -> str:
    """How the user gave the input: ``--gpu-check FILE``."""
    return f"--{option.replace('_', '-')} {path}"


def load(path: Path | None, option: str) -> Any:
    """The input given to `--option`, checked for its kind: a ReportInputError naming the option
    and the file when it is not JSON or not what that option expects."""
    if path is None:
        return None
    what, keys, within = KINDS[option]
    named = flag(option, path)
    try:
        d = json.loads(Path(path).read_text())
    except json.JSONDecodeError as e:
        raise ReportInputError(f"{named}: not JSON ({e})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ReportInputError(f"{named}: cannot read ({getattr(e, 'strerror', None) or e})") from None
    if within is None:
        missing = next((k for k in keys if not isinstance(d, dict) or k not in d), None)
        if missing is not None:
            raise ReportInputError(f"{named}: not {what} (no {missing!r})")
        return d
    entries = d.get(within) if isinstance(d, dict) else d
    if not isinstance(entries, list) or not entries:
        raise ReportInputError(f"{named}: not {what} (no {within})")
    for entry in entries:
        missing = next((k for k in keys if not isinstance(entry, dict) or k not in entry), None)
        if missing is not None:
            raise ReportInputError(f"{named}: not {what} (no {missing!r} in its {within})")
    return d
