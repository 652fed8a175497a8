"""A kernel design (one kernel size per layer), its timing by eq. 1 and its resources
(:func:`evaluate`), and the rules it must keep (:func:`violations`)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from offload.recsys.fpga.flash import FLASH, FlashModel, _b_ev, _flash_cycles
from offload.recsys.fpga.resources import (
    COSTS,
    XCVU9P,
    CostModel,
    FpgaDevice,
    Resources,
    dram_layers,
    layer_cycles,
)
from offload.recsys.fpga.shapes import (
    CLOCK_HZ,
    FP32_BYTES,
    TABLE_V_COLUMNS,
    Composition,
    LayerShape,
    MLPShape,
    last_layers,
    layer_shapes,
)


@dataclass(frozen=True)
class LayerKernel:
    """One layer of a design: its shape, kernel, cycles and whether its weights stream from DRAM."""

    name: str
    rows: int
    cols: int
    kr: int
    kc: int
    cycles: int
    dram: bool = False

    @property
    def size(self) -> int:
        """``kr * kc``."""
        return self.kr * self.kc

    @property
    def label(self) -> str:
        """Table V notation: ``4×2``, or ``4`` for a one-column layer with ``kc = 1``."""
        return f"{self.kr}" if self.cols == 1 and self.kc == 1 else f"{self.kr}×{self.kc}"


@dataclass(frozen=True)
class Design:
    """A kernel configuration with its timing (cycles per batch of ``n_batch``) and resources.

    ``t_emb``/``t_bot``/``t_top``: ``T_emb'``, ``T_bot'``, ``T_top'`` of eq. 1 (for the naive design
    ``t_emb`` is the flash time and ``t_bot``/``t_top`` the sequential bottom and top MLP times);
    ``cycles``: cycles per batch the design sustains.
    """

    model: MLPShape
    kind: str
    layers: tuple[LayerKernel, ...]
    n_batch: int
    ii: int
    composition: str
    b_ev: Fraction
    t_flash: int
    t_emb: int
    t_bot: int
    t_top: int
    cycles: int
    resources: Resources
    target: str = XCVU9P.name
    clock_hz: int = CLOCK_HZ

    def kernel(self, name: str) -> LayerKernel:
        for layer in self.layers:
            if layer.name == name:
                return layer
        raise KeyError(name)

    @property
    def kernels(self) -> dict[str, tuple[int, int]]:
        return {layer.name: (layer.kr, layer.kc) for layer in self.layers}

    @property
    def kernel_sum(self) -> int:
        """Eq. 2's objective ``sum(kr * kc)``."""
        return sum(layer.size for layer in self.layers)

    @property
    def cycles_per_sample(self) -> float:
        return self.cycles / self.n_batch

    @property
    def throughput(self) -> float:
        """Samples per second at ``clock_hz``."""
        return self.n_batch * self.clock_hz / self.cycles

    def table_v_row(self) -> dict[str, str]:
        """Kernel labels in :data:`TABLE_V_COLUMNS` order, ``–`` where the model has no such layer."""
        names = {layer.name: layer.label for layer in self.layers}
        return {col: names.get(col, "–") for col in TABLE_V_COLUMNS}


class InfeasibleError(ValueError):
    """No kernel configuration meets the constraints."""


def _layer_resources(layer: LayerKernel, ii: int, cost: CostModel) -> Resources:
    units = max(1, math.ceil(layer.size / ii))
    res = cost.units(units)
    if layer.dram:
        bram = cost.brams(2 * layer.size * FP32_BYTES)
    else:
        banks = math.ceil(layer.size / (cost.bram_words_per_cycle * ii))
        bram = max(cost.brams(layer.rows * layer.cols * FP32_BYTES), float(banks))
    return res + Resources(bram=bram)


def _groups(n: int) -> list[tuple[int, ...]]:
    return [tuple(range(i, min(i + 2, n))) for i in range(0, n, 2)]


def _chain_time(times: Sequence[int], composition: str) -> int:
    pairs = [max(times[i] for i in g) for g in _groups(len(times))]
    if not pairs:
        return 0
    return max(pairs) if composition == "pipelined" else sum(pairs)


def _split(shapes: Sequence[LayerShape]) -> tuple[list[int], int, list[int]]:
    bot = [i for i, s in enumerate(shapes) if s.group == "bottom"]
    emb = next(i for i, s in enumerate(shapes) if s.group == "emb")
    top = [i for i, s in enumerate(shapes) if s.group == "top"]
    return bot, emb, top


def evaluate(
    model: MLPShape,
    kernels: Mapping[str, tuple[int, int]],
    *,
    n_batch: int = 1,
    ii: int = 8,
    b_ev: float | Fraction | None = None,
    flash: FlashModel = FLASH,
    device: FpgaDevice = XCVU9P,
    cost: CostModel = COSTS,
    composition: Composition = "sum",
    kind: str = "custom",
) -> Design:
    """Timing (eq. 1) and resources of the decomposed, composed design with the given kernels.

    ``device`` only decides which layers rule one sends to DRAM (flagged in
    :attr:`LayerKernel.dram`); check constraints with :func:`violations`.
    """
    if composition not in ("sum", "pipelined"):
        raise ValueError(f"unknown composition {composition!r}")
    if n_batch < 1 or ii < 1:
        raise ValueError("n_batch and ii must be positive")
    shapes = layer_shapes(model)
    dram = dram_layers(shapes, device, cost)
    missing = [s.name for s in shapes if s.name not in kernels]
    if missing:
        raise KeyError(f"no kernel for {', '.join(missing)}")
    layers = []
    for s in shapes:
        kr, kc = kernels[s.name]
        if kr < 1 or kc < 1:
            raise ValueError(f"{s.name}: kernel sides must be positive")
        layers.append(
            LayerKernel(
                s.name, s.rows, s.cols, kr, kc, layer_cycles(s.rows, s.cols, kr, kc, ii), s.name in dram
            )
        )
    bot, emb, top = _split(shapes)
    rate = _b_ev(model, b_ev, flash)
    t_flash = _flash_cycles(model, n_batch, rate)
    t_emb = max(t_flash, layers[emb].cycles)
    t_bot = _chain_time([layers[i].cycles for i in bot], composition)
    t_top = _chain_time([layers[i].cycles for i in top], composition)
    res = Resources()
    for layer in layers:
        res = res + _layer_resources(layer, ii, cost)
    return Design(
        model=model,
        kind=kind,
        layers=tuple(layers),
        n_batch=n_batch,
        ii=ii,
        composition=composition,
        b_ev=rate,
        t_flash=t_flash,
        t_emb=t_emb,
        t_bot=t_bot,
        t_top=t_top,
        cycles=max(t_emb, t_bot, t_top),
        resources=res,
        target=device.name,
        clock_hz=flash.clock_hz,
    )


def _min_size(shape: LayerShape, ii: int, last: bool) -> int:
    return 1 if last else min(ii, shape.weights)


def violations(design: Design, cost: CostModel = COSTS) -> list[str]:
    """The constraints (eq. 3, eq. 4, rule two, ``T_bot', T_top' <= T_emb'``) a decomposed design
    breaks; empty when it is feasible."""
    out: list[str] = []
    model = design.model
    shapes = layer_shapes(model)
    by_name = {layer.name: layer for layer in design.layers}
    last = last_layers(model)
    for s in shapes:
        k = by_name[s.name]
        if k.dram:
            if (k.kr, k.kc) != (cost.d_width, design.ii):
                out.append(f"rule two: {s.name} is in DRAM and needs {cost.d_width}x{design.ii}")
        elif k.size < _min_size(s, design.ii, s.name in last):
            out.append(f"eq. 4: {s.name} kr*kc={k.size} < {_min_size(s, design.ii, False)}")
    bot, emb, top = _split(shapes)
    chains = [bot, top]
    for chain in chains:
        for a, b in itertools.pairwise(chain):
            ka, kb = design.layers[a], design.layers[b]
            if not kb.dram and ka.kc < kb.kr:
                out.append(f"eq. 3: kc({ka.name})={ka.kc} < kr({kb.name})={kb.kr}")
    ke = design.layers[emb]
    if bot and design.layers[bot[-1]].kc != ke.kc:
        out.append(f"eq. 3: kc(L_e)={ke.kc} != kc(L_b)={design.layers[bot[-1]].kc}")
    if top and not design.layers[top[0]].dram and ke.kc < design.layers[top[0]].kr:
        out.append(f"eq. 3: kc(L_e)={ke.kc} < kr({design.layers[top[0]].name})={design.layers[top[0]].kr}")
    if design.t_bot > design.t_emb:
        out.append(f"T_bot'={design.t_bot} > T_emb'={design.t_emb}")
    if design.t_top > design.t_emb:
        out.append(f"T_top'={design.t_top} > T_emb'={design.t_emb}")
    return out
