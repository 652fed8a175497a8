"""Fig. 9's inter-layer composition, run in software: each FC layer of a chain on its own
``kr x kc`` kernel, stepping through its weight blocks in a scan order, one block every ``II``
cycles, on real fp32 values; a block of the next layer starts only when the outputs it reads are
final. The cycles come from running that schedule, not from eq. 1b/1c, and are put beside them.

Scan orders (§IV-C3). A layer of ``R`` inputs and ``C`` outputs has ``ceil(R/kr) * ceil(C/kc)``
blocks:

* ``row``: for each stripe of ``kr`` inputs, every block of ``kc`` outputs ("stream along the
  column dimension with kc first, then repeat along the row dimension"): it consumes its inputs
  stripe by stripe, and every output is final only in the last stripe.
* ``column``: for each block of ``kc`` outputs, every stripe of inputs: each output block is
  final as soon as its column is done, one after another.

Fig. 9(a), ``same``: every layer scans by rows, so ``L_{i+1}`` waits for the last stripe of
``L_i``: one sample's latency is about the sum of the layers' times. Fig. 9(b), ``alternating``:
the first layer of each pair scans by columns and the second by rows, so the second consumes each
output block as it is finished (eq. 3, ``kc_i >= kr_{i+1}``, makes each block cover whole input
stripes): a pair takes about the slower of its two layers, the pairs one after another (eq. 1b/1c).

Assumptions: a block step takes ``II`` cycles whatever the kernel (the seed's ``R C / (kr kc) II``;
the adder tree's and the operators' pipeline latency are left out, as eq. 1 leaves them out);
outputs wait in buffers with room for a whole layer (no back-pressure); each layer has its own
kernel; a stream of samples enters as fast as the first layer takes them. The values the blocks
compute are checked against ``x @ W`` (ReLU between layers) on the same weights, so the schedule
covers every layer; that a block waits for the outputs it reads is how it is run, not checked.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from offload.recsys.fpga.design import Design, _groups
from offload.recsys.fpga.shapes import TABLE_III, MLPShape

Scan = Literal["row", "column"]
Pattern = Literal["same", "alternating"]
PATTERNS: tuple[Pattern, ...] = ("same", "alternating")
MAX_STEPS = 2_000_000
"""Block steps one run may take (all layers, all samples): the bound on its loops."""


@dataclass(frozen=True)
class ChainLayer:
    """One layer of a chain: its name, ``rows x cols`` and kernel."""

    name: str
    rows: int
    cols: int
    kr: int
    kc: int

    @property
    def steps(self) -> int:
        return math.ceil(self.rows / self.kr) * math.ceil(self.cols / self.kc)


def scans(n: int, pattern: Pattern) -> list[Scan]:
    """The scan of each of ``n`` layers: all ``row`` (Fig. 9a), or ``column``, ``row``, ...
    alternating from the first layer of each pair (Fig. 9b)."""
    if pattern == "same":
        return ["row"] * n
    if pattern == "alternating":
        return ["column" if i % 2 == 0 else "row" for i in range(n)]
    raise ValueError(f"unknown pattern {pattern!r}; one of {', '.join(PATTERNS)}")


def _order(layer: ChainLayer, scan: Scan) -> list[tuple[int, int]]:
    """(input stripe, output block) of every step, in the scan's order."""
    nr, nc = math.ceil(layer.rows / layer.kr), math.ceil(layer.cols / layer.kc)
    if scan == "row":
        return [(r, c) for r in range(nr) for c in range(nc)]
    return [(r, c) for c in range(nc) for r in range(nr)]


def _reads(prev: ChainLayer | None, layer: ChainLayer) -> list[list[int]]:
    """For each input stripe of ``layer``, the output blocks of ``prev`` it reads."""
    nr = math.ceil(layer.rows / layer.kr)
    if prev is None:
        return [[] for _ in range(nr)]
    out = []
    for r in range(nr):
        lo, hi = r * layer.kr, min(layer.rows, (r + 1) * layer.kr) - 1
        out.append(list(range(lo // prev.kc, hi // prev.kc + 1)))
    return out


def run(
    layers: Sequence[ChainLayer],
    pattern: Pattern,
    *,
    samples: int = 1,
    ii: int = 8,
    weights: Sequence[np.ndarray] | None = None,
    inputs: np.ndarray | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Runs the chain's schedule over ``samples`` samples: each layer's block steps in its scan
    order, each step starting when its kernel is free and the outputs it reads are final.

    Returns the cycle at which each layer finished each sample (``finish``), one sample's latency
    (the first sample's last output), the steady interval between samples (from the last two
    samples' finishes) and the largest difference of the outputs from ``x @ W`` with ReLU between
    layers (weights and inputs random unless given). Raises ValueError past :data:`MAX_STEPS`.
    """
    if ii < 1 or samples < 1 or not layers:
        raise ValueError("ii, samples and the chain must be positive / non-empty")
    total = sum(layer.steps for layer in layers) * samples
    if total > MAX_STEPS:
        raise ValueError(f"{total:,} block steps is more than {MAX_STEPS:,}; use fewer samples")
    for a, b in itertools.pairwise(layers):
        if a.cols != b.rows:
            raise ValueError(f"{a.name} gives {a.cols} outputs but {b.name} reads {b.rows}")
    rng = np.random.default_rng(seed)
    ws = (
        list(weights)
        if weights is not None
        else [
            rng.standard_normal((x.rows, x.cols), dtype=np.float32) / np.float32(math.sqrt(x.rows))
            for x in layers
        ]
    )
    x0 = inputs if inputs is not None else rng.standard_normal((samples, layers[0].rows), dtype=np.float32)
    order = scans(len(layers), pattern)
    # final[s][c]: cycle at which output block c of the previous layer was final for sample s
    final_prev: list[np.ndarray] | None = None
    values = x0
    finish = []
    for j, (layer, scan, w) in enumerate(zip(layers, order, ws, strict=True)):
        steps = _order(layer, scan)
        reads = _reads(layers[j - 1] if j else None, layer)
        nc = math.ceil(layer.cols / layer.kc)
        nr = math.ceil(layer.rows / layer.kr)
        free = 0
        final = [np.zeros(nc, dtype=np.int64) for _ in range(samples)]
        out = np.zeros((samples, layer.cols), dtype=np.float32)
        for s in range(samples):
            done = np.zeros(nc, dtype=np.int64)
            for r, c in steps:
                ready = max((int(final_prev[s][b]) for b in reads[r]), default=0) if final_prev else 0
                free = max(free, ready) + ii
                r0, r1 = r * layer.kr, min(layer.rows, (r + 1) * layer.kr)
                c0, c1 = c * layer.kc, min(layer.cols, (c + 1) * layer.kc)
                out[s, c0:c1] += values[s, r0:r1] @ w[r0:r1, c0:c1]
                done[c] += 1
                if done[c] == nr:
                    final[s][c] = free
        finish.append([int(f.max()) for f in final])
        values = np.maximum(out, 0) if j < len(layers) - 1 else out
        final_prev = final
    want = x0
    for j, w in enumerate(ws):
        want = want @ w
        if j < len(ws) - 1:
            want = np.maximum(want, 0)
    last = finish[-1]
    return {
        "pattern": pattern,
        "scans": order,
        "samples": samples,
        "finish": {layer.name: f for layer, f in zip(layers, finish, strict=True)},
        "latency_cycles": last[0],
        "interval_cycles": last[-1] - last[-2] if samples > 1 else None,
        "max_abs_diff": float(np.max(np.abs(values - want))),
    }


def formulas(layers: Sequence[ChainLayer], ii: int = 8) -> dict[str, int]:
    """The eq. 1b/1c figures for the chain: the sum of the layers' times (Fig. 9a's latency), the
    sum over composed pairs of the slower layer (Fig. 9b, eq. 1b/1c as printed), and the slowest
    layer (the interval of a stream when every layer has its own kernel)."""
    times = [layer.steps * ii for layer in layers]
    pairs = [max(times[i] for i in g) for g in _groups(len(times))]
    return {"sum_of_layers": sum(times), "sum_of_pair_max": sum(pairs), "slowest_layer": max(times)}


def chains(design: Design) -> dict[str, list[ChainLayer]]:
    """The design's ``bot'`` (L_b0 .. L_b) and ``top'`` (L_t1 ..) chains, as eq. 1b/1c pair them."""
    out: dict[str, list[ChainLayer]] = {"bottom": [], "top": []}
    for layer in design.layers:
        group = "bottom" if layer.name.startswith("L_b") else "top" if layer.name.startswith("L_t") else None
        if group:
            out[group].append(ChainLayer(layer.name, layer.rows, layer.cols, layer.kr, layer.kc))
    return {k: v for k, v in out.items() if v}


def compare_patterns(design: Design, *, samples: int = 3, seed: int = 0) -> dict[str, Any]:
    """Both patterns on each chain of ``design``: run cycles beside eq. 1's, per chain."""
    out: dict[str, Any] = {}
    for name, chain in chains(design).items():
        f = formulas(chain, design.ii)
        runs = {p: run(chain, p, samples=samples, ii=design.ii, seed=seed) for p in PATTERNS}
        out[name] = {
            "layers": [
                {
                    "name": x.name,
                    "rows": x.rows,
                    "cols": x.cols,
                    "kernel": f"{x.kr}×{x.kc}",
                    "cycles": x.steps * design.ii,
                }
                for x in chain
            ],
            "formulas": f,
            "runs": runs,
            "latency_same_over_alternating": runs["same"]["latency_cycles"]
            / runs["alternating"]["latency_cycles"],
        }
    return out


def report(models: dict[str, MLPShape] | None = None, *, samples: int = 3, ii: int = 8) -> dict[str, Any]:
    """Fig. 9 on each Table III model's searched design (Table V's kernels): one sample's latency
    and a stream's interval under the same scan pattern and the alternating one, against eq. 1."""
    from offload.recsys.fpga.search import search

    models = TABLE_III if models is None else models
    res = {}
    for name, m in models.items():
        d = search(m, ii=ii)
        res[name] = {"n_batch": d.n_batch, "chains": compare_patterns(d, samples=samples)}
    return {
        "kind": "offload.recsys.composition",
        "source": "the block schedule run in software (python/offload/recsys/fpga/compose.py), "
        "cycles counted; not an FPGA",
        "ii": ii,
        "samples": samples,
        "models": res,
    }
