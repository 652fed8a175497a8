"""The paper's designs and tables: the default and naive designs, whether a design fits a part,
the comparison of designs, and Tables V and VI (ours beside the seed's)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from offload.recsys.fpga.design import Design, LayerKernel, evaluate
from offload.recsys.fpga.flash import FLASH, FlashModel, _b_ev, _flash_cycles
from offload.recsys.fpga.resources import (
    COSTS,
    XC7A200T,
    XCVU9P,
    CostModel,
    FpgaDevice,
    Resources,
    dram_layers,
    layer_cycles,
)
from offload.recsys.fpga.search import _next_pow2, search
from offload.recsys.fpga.shapes import (
    FP32_BYTES,
    TABLE_III,
    Composition,
    MLPShape,
    layer_shapes,
    naive_shapes,
)


def _smallest_batch(make: Callable[[int], Design], max_batch: int) -> Design:
    n = 1
    while n <= max_batch:
        d = make(n)
        if d.t_bot <= d.t_emb and d.t_top <= d.t_emb:
            return d
        n *= 2
    return make(1)


def default_design(
    model: MLPShape,
    *,
    kernel: tuple[int, int] | None = None,
    ii: int = 8,
    b_ev: float | Fraction | None = None,
    flash: FlashModel = FLASH,
    device: FpgaDevice = XCVU9P,
    cost: CostModel = COSTS,
    composition: Composition = "sum",
    max_batch: int = 1024,
) -> Design:
    """The paper's default kernels (§VI-D, "MLP" in Table VI).

    Every layer gets ``kernel`` (default 16x16, or 8x8 when rule one sends a layer to DRAM, as for
    RMC3) except DRAM layers, which get rule two's ``D_width x II`` (RMC3's 16x8 first bottom
    layer). Columns are clipped to the layer (the 64x1 last layer of RMC1 gets 16x1: a kernel
    column with no output column is not instantiated; assumption). ``N_batch`` follows rule three.
    """
    shapes = layer_shapes(model)
    dram = dram_layers(shapes, device, cost)
    if kernel is None:
        kernel = (8, 8) if dram else (16, 16)
    kernels = {
        s.name: (cost.d_width, ii) if s.name in dram else (kernel[0], min(kernel[1], _next_pow2(s.cols)))
        for s in shapes
    }

    def make(n: int) -> Design:
        return evaluate(
            model,
            kernels,
            n_batch=n,
            ii=ii,
            b_ev=b_ev,
            flash=flash,
            device=device,
            cost=cost,
            composition=composition,
            kind="default",
        )

    return _smallest_batch(make, max_batch)


def naive_design(
    model: MLPShape,
    *,
    kernel: tuple[int, int] = (16, 16),
    ii: int = 1,
    b_ev: float | Fraction | None = None,
    flash: FlashModel = FLASH,
    device: FpgaDevice = XCVU9P,
    cost: CostModel = COSTS,
) -> Design:
    """The "MLP-naïve" baseline of Table VI: a conventional layer-by-layer GEMM unit ([36], Centaur).

    Assumptions: one shared ``kernel`` processes every layer in turn; no intra-layer decomposition
    (L_0 is one ``(R_b + R_e) x C`` layer that waits for the concatenation); no inter-layer
    composition; batch 1; no pipelining across samples: a sample takes
    ``max(flash, bottom MLP) + L_0 + top MLP`` cycles (bottom MLP and lookups overlap, being on
    different engines). The unit is a 16x16 array with ``II = 1`` (one fmul + fadd per cell, i.e.
    without §IV-C1's II-reuse). Layers rule one puts in DRAM take ``max(compute, R C / D_width)``.
    Its weights share one banked memory: BRAM is ``max(weights, kr kc / (2 II))`` plus DRAM buffers.
    """
    shapes = naive_shapes(model)
    dram = dram_layers(shapes, device, cost)
    kr, kc = kernel
    layers = []
    for s in shapes:
        cyc = layer_cycles(s.rows, s.cols, kr, kc, ii)
        if s.name in dram:
            cyc = max(cyc, math.ceil(s.weights / cost.d_width))
        layers.append(LayerKernel(s.name, s.rows, s.cols, kr, kc, cyc, s.name in dram))
    t_bot = sum(layer.cycles for s, layer in zip(shapes, layers, strict=True) if s.group == "bottom")
    t_top = sum(layer.cycles for s, layer in zip(shapes, layers, strict=True) if s.group == "top")
    rate = _b_ev(model, b_ev, flash)
    t_flash = _flash_cycles(model, 1, rate)
    res = cost.units(max(1, math.ceil(kr * kc / ii)))
    stored = sum(cost.brams(layer.rows * layer.cols * FP32_BYTES) for layer in layers if not layer.dram)
    buffers = sum(cost.brams(2 * kr * kc * FP32_BYTES) for layer in layers if layer.dram)
    banks = math.ceil(kr * kc / (cost.bram_words_per_cycle * ii))
    res = res + Resources(bram=max(stored, float(banks)) + buffers)
    return Design(
        model=model,
        kind="naive",
        layers=tuple(layers),
        n_batch=1,
        ii=ii,
        composition="sequential",
        b_ev=rate,
        t_flash=t_flash,
        t_emb=t_flash,
        t_bot=t_bot,
        t_top=t_top,
        cycles=max(t_flash, t_bot) + t_top,
        resources=res,
        target=device.name,
        clock_hz=flash.clock_hz,
    )


def fits(design: Design | Resources, device: FpgaDevice) -> tuple[str, ...]:
    """The resources (``lut``, ``ff``, ``bram``, ``dsp``) that overflow ``device``; empty if it fits."""
    used = design.resources if isinstance(design, Design) else design
    cap = device.capacity
    return tuple(k for k, v in used.as_dict().items() if v > cap.as_dict()[k])


@dataclass(frozen=True)
class Comparison:
    """One row of a Table VI-style comparison."""

    unit: str
    design: Design
    overflows: dict[str, tuple[str, ...]]

    @property
    def resources(self) -> Resources:
        return self.design.resources

    @property
    def cycles_per_sample(self) -> float:
        return self.design.cycles_per_sample

    @property
    def throughput(self) -> float:
        return self.design.throughput

    def fits(self, device: str) -> bool:
        return not self.overflows[device]


def compare(
    model: MLPShape,
    *,
    devices: Sequence[FpgaDevice] = (XC7A200T, XCVU9P),
    ii: int = 8,
    b_ev: float | Fraction | None = None,
    device: FpgaDevice = XCVU9P,
    composition: Composition = "sum",
    cost: CostModel = COSTS,
) -> list[Comparison]:
    """Naive, default and optimized designs of ``model`` (Table VI's MLP-naïve, MLP, MLP-op) with
    their resources, which of ``devices`` each overflows, and cycles per sample."""
    designs = {
        "MLP-naïve": naive_design(model, b_ev=b_ev, device=device, cost=cost),
        "MLP": default_design(model, ii=ii, b_ev=b_ev, device=device, cost=cost, composition=composition),
        "MLP-op": search(model, ii=ii, b_ev=b_ev, device=device, cost=cost, composition=composition),
    }
    return [Comparison(unit, d, {dev.name: fits(d, dev) for dev in devices}) for unit, d in designs.items()]


_RMC12_V = {"L_b0": "4×2", "L_b1": "2×4", "L_b2": "–", "L_b": "4×2", "L_e": "4×2", "L_t1": "2×4", "L_t2": "4"}
PAPER_TABLE_V: dict[str, dict[str, str]] = {
    "RMC1": dict(_RMC12_V),
    "RMC2": dict(_RMC12_V),
    "RMC3": {
        "L_b0": "16×8",
        "L_b1": "8×2",
        "L_b2": "2×4",
        "L_b": "4×2",
        "L_e": "4×2",
        "L_t1": "2×4",
        "L_t2": "4",
    },
}
"""Table V of the seed: kernel size of each layer (``–``: no such layer; one number: ``kc = 1``)."""

PAPER_TABLE_VI: dict[str, dict[str, Resources]] = {
    "RMC1,2": {
        "MLP-naïve": Resources(lut=154541, ff=59032, bram=237, dsp=612),
        "MLP": Resources(lut=159338, ff=60672, bram=194, dsp=604),
        "MLP-op": Resources(lut=19064, ff=8294, bram=85, dsp=41),
    },
    "RMC3": {
        "MLP-naïve": Resources(lut=219671, ff=82676, bram=246.5, dsp=612),
        "MLP": Resources(lut=284120, ff=96598, bram=320, dsp=928),
        "MLP-op": Resources(lut=131720, ff=49277, bram=221.5, dsp=366),
    },
}
"""Table VI of the seed: resources of the MLP Acceleration Engine (devices: :data:`FPGA_DEVICES`)."""


def table_v(models: Mapping[str, MLPShape] | None = None, **kwargs: object) -> dict[str, dict[str, str]]:
    """Our optimized kernels in :data:`TABLE_V_COLUMNS` order, like :data:`PAPER_TABLE_V`.

    ``kwargs`` go to :func:`search` (e.g. ``composition="pipelined"``, ``ii``, ``b_ev``).
    """
    models = TABLE_III if models is None else models
    return {name: search(m, **kwargs).table_v_row() for name, m in models.items()}  # type: ignore[arg-type]


def table_vi(models: Mapping[str, MLPShape] | None = None, **kwargs: object) -> dict[str, dict[str, Design]]:
    """Naive / default / optimized designs per model, keyed like :data:`PAPER_TABLE_VI`'s units.

    ``kwargs`` go to :func:`compare`.
    """
    models = TABLE_III if models is None else models
    return {name: {row.unit: row.design for row in compare(m, **kwargs)} for name, m in models.items()}  # type: ignore[arg-type]


def design_summary(d: Design) -> dict[str, Any]:
    """A searched kernel design: batch, kernels, the stage cycles of eq. 1 and what sets the pace."""
    stages = {"flash": d.t_flash, "L_e": d.kernel("L_e").cycles, "bottom'": d.t_bot, "top'": d.t_top}
    return {
        "n_batch": d.n_batch,
        "kernels": d.kernels,
        "cycles": {
            "flash": d.t_flash,
            "L_e": d.kernel("L_e").cycles,
            "emb": d.t_emb,
            "bottom": d.t_bot,
            "top": d.t_top,
            "batch": d.cycles,
        },
        "samples_per_s": d.throughput,
        "bound_by": max(stages, key=lambda k: stages[k]),
    }


def search_report(
    ours: dict[str, dict[str, str]], designs: Mapping[str, Sequence[Comparison]], fig15: Mapping[str, Design]
) -> dict[str, Any]:
    """`offload recsys kernels --json`: the Fig. 15 models' designs, Table V (ours and the
    paper's) and Table VI (each unit's resources, overflows and pace)."""
    return {
        "fig15_models": {n: design_summary(d) for n, d in fig15.items()},
        "table_v": {"ours": ours, "paper": PAPER_TABLE_V},
        "table_vi": {
            name: [
                {
                    "unit": c.unit,
                    "resources": c.resources.__dict__,
                    "overflows": c.overflows,
                    "cycles_per_sample": c.cycles_per_sample,
                    "throughput": c.design.throughput,
                }
                for c in rows
            ]
            for name, rows in designs.items()
        },
    }
