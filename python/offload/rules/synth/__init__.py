"""Seeded synthetic Minimum-Connecting-Time (MCT) rule sets and Domain-Explorer query traces.

The real Amadeus MCT rule set used by the ERBIUM paper is not public, so benchmarks and tests
run on a synthetic stand-in calibrated to what is known about it (``shared/design/rules.md``):
22 criteria, ~21% INVALID rules, 2k-4k hub-heavy airports, per-criterion shares of specific
values, few distinct contents, and rules that come in *families* per airport rather than
being drawn independently per field (an independent generator compresses 5x worse than the
real data and would flatter or punish the engine unrealistically).

Everything is a pure function of ``(n_rules, seed)`` (and ``(rules, n_requests, seed,
max_queries)`` for traces): all randomness comes from :func:`numpy.random.default_rng`
seeded through a :class:`numpy.random.SeedSequence`, and string hashing (randomised per
process) is never used, so the written files are byte-identical across runs and machines.

Modules, in the order the data flows:

- ``criteria``: the 22 criteria and the real set's statistics the generator aims at.
- ``world``: real airports, carriers, flight numbers, hubs, equipment, terminals, times, dates.
- ``draws``: reproducible scalar uniforms and picks from cumulative weights.
- ``airports``: the connection airports of a rule set, their rule counts and profiles.
- ``ruleset``: :func:`~ruleset.generate_rules` and :class:`~ruleset.SynthRules`.
- ``trace``: :func:`~trace.generate_trace` and :class:`~trace.SynthTrace`.
- ``write``: the ERBIUM-format files (``ruletype.xml``, ``rules.csv``, ``queries.csv``,
  ``requests.csv``).
- this package: :func:`synth`, which generates both and writes the four files, and
  :func:`synth_dir`, the same into a directory that appears whole or not at all.

:class:`~ruleset.SynthRules` and :class:`~trace.SynthTrace` hold one numpy ``object`` array of
``str`` per column (``""`` = wildcard in rules); ``to_frame()`` turns either into a pandas
DataFrame. Each file is written whole or not at all (:mod:`offload.files`); ``offload rules
synth`` also builds the directory under a temporary sibling and renames it into place once
every file is complete.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from offload.files import WriteError, atomic_dir
from offload.rules.synth.ruleset import generate_rules
from offload.rules.synth.trace import generate_trace
from offload.rules.synth.write import write_ruleset, write_trace

__all__ = ["synth", "synth_dir"]


def synth(
    out_dir: Path,
    n_rules: int,
    n_requests: int,
    seed: int = 0,
    progress: Callable[[str, float], None] | None = None,
) -> dict[str, Any]:
    """Generate and write a rule set and a trace; return a summary.

    Writes ``ruletype.xml``, ``rules.csv``, ``queries.csv`` and ``requests.csv`` into
    ``out_dir``. ``progress(stage, fraction)`` is called at stage boundaries with stages
    ``"rules"``, ``"trace"``, ``"write"``. The summary holds the paths, counts, the share of
    specific values per criterion among valid rules, distinct airports and contents, and
    the wall time of each stage in seconds.
    """
    report = progress or (lambda _stage, _frac: None)
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    report("rules", 0.0)
    rules = generate_rules(n_rules, seed)
    timings["rules_s"] = time.perf_counter() - t0
    report("rules", 1.0)
    t1 = time.perf_counter()
    report("trace", 0.0)
    trace = generate_trace(rules, n_requests, seed)
    timings["trace_s"] = time.perf_counter() - t1
    report("trace", 1.0)
    t2 = time.perf_counter()
    report("write", 0.0)
    xml_path, rules_path = write_ruleset(Path(out_dir), rules)
    report("write", 0.5)
    q_path, r_path = write_trace(Path(out_dir), trace)
    timings["write_s"] = time.perf_counter() - t2
    timings["total_s"] = time.perf_counter() - t0
    report("write", 1.0)
    n_inv = int(rules.invalid.sum())
    return {
        "seed": int(seed),
        "paths": {
            "ruletype": str(xml_path),
            "rules": str(rules_path),
            "queries": str(q_path),
            "requests": str(r_path),
        },
        "n_rules": len(rules),
        "n_valid": len(rules) - n_inv,
        "n_invalid": n_inv,
        "n_duplicates": rules.n_duplicates,
        "n_airports": len(set(rules.columns["MCT_OFF"].tolist())),
        "n_distinct_contents": len(np.unique(rules.content)),
        "specific_shares": rules.specific_shares(valid_only=True),
        "n_requests": len(trace.n_queries),
        "n_queries": len(trace),
        "mean_queries_per_request": float(trace.n_queries.mean()) if len(trace.n_queries) else 0.0,
        "timings": timings,
    }


def synth_dir(
    out: Path,
    n_rules: int,
    n_requests: int,
    seed: int = 0,
    overwrite: bool = False,
    progress: Callable[[str, float], None] | None = None,
) -> dict[str, Any]:
    """:func:`synth` into the directory ``out``, which appears whole or not at all: it is built
    under a temporary sibling and renamed into place once every file is written. An existing
    non-empty ``out`` is a FileExistsError unless ``overwrite`` (then it is replaced only once
    the new one is complete). The summary's paths and a WriteError's message name ``out``."""
    tmp: Path | None = None
    try:
        with atomic_dir(out, overwrite=overwrite) as tmp:
            summary = synth(tmp, n_rules, n_requests, seed, progress)
    except WriteError as e:  # a full disk: name the file where it was meant to go
        if tmp is None:
            raise
        why = e.strerror or str(e)
        raise WriteError(e.errno, why.replace(str(tmp), str(out))) from None
    summary["paths"] = {k: str(Path(out) / Path(v).name) for k, v in summary["paths"].items()}
    return summary
