"""RM-SSD's MLP Acceleration Engine: kernel-size search and an FPGA resource model (seed 002, §IV-C).

Pure Python: importing this module does not need ``offload._native``.

Layers
------
A model is an :class:`MLPShape`: bottom widths (the dense input width first, as in DLRM's
``--arch-mlp-bot``), top widths (the *outputs* of the top layers, as in DLRM's ``--arch-mlp-top``,
whose input width DLRM prepends itself), the embedding dimension, the number of tables and the
lookups per table. With ``cat`` feature interaction the first top layer L_0 reads
``(tables + 1) * dim`` values (``tables * dim`` without a bottom MLP). Table III's "256-64-1" for
RMC1 therefore means three top layers ``288x256, 256x64, 64x1``. This reading is the one that
reproduces Table III's "MLP size" column (weights plus biases, fp32: 0.385 / 1.22 / 12.23 MiB for
RMC1 / RMC2 / RMC3 against the paper's 0.39 / 1.23 / 12.23 MB); reading the first top number as
L_0's input width instead fails for all three (256, 128, 512 against concatenations of 288, 2112,
352 values).

Intra-layer decomposition (§IV-C2) splits L_0 into ``L_b`` (``R_b x C``: the bottom MLP's output
rows, ``R_b`` = last bottom width) and ``L_e`` (``R_e x C``: the pooled embedding rows,
``R_e = tables * dim``). The remaining top layers are ``L_t1, L_t2, ...``. Bottom layers are
``L_b0, L_b1, ...``. These are exactly Table V's columns ``L_b0 L_b1 L_b2 L_b L_e L_t1 L_t2``:

* RMC1: L_b0 128x64, L_b1 64x32, L_b 32x256, L_e 256x256, L_t1 256x64, L_t2 64x1
* RMC2: L_b0 256x128, L_b1 128x64, L_b 64x128, L_e 2048x128, L_t1 128x64, L_t2 64x1
* RMC3: L_b0 2560x1024, L_b1 1024x256, L_b2 256x32, L_b 32x512, L_e 320x512, L_t1 512x256,
  L_t2 256x1

``bot'`` (the extended bottom MLP of eq. 1b) is ``L_b0 .. L_b``; ``emb'`` is the flash lookups plus
``L_e``; ``top'`` (the shortened top MLP of eq. 1c) is ``L_t1 ..``.

Timing (eq. 1, cycles at 200 MHz)
---------------------------------
A layer with kernel ``kr x kc`` takes ``ceil(R/kr) * ceil(C/kc) * II`` cycles (the paper's
``R C / (kr kc) * II``; equal whenever the kernel divides the layer, as for every Table III layer).

* ``T_emb' = max(N_batch * M * N / b_EV, cycles(L_e))`` (1a), ``M`` tables, ``N`` lookups per table,
  ``b_EV`` vector reads per cycle of the flash array. Default ``b_EV = channels / C_EV`` with Table
  II's emulated SSD: 4 channels, ``C_EV = ceil((60 * EV_size / P_size + 140) * T_page_us)`` cycles,
  ``T_page`` = 20 us, ``P_size`` = 4096 B, ``EV_size = dim * 4`` B (2838 cycles for dim 32, which is
  Table II's ``0.293 * EV_size + 2800`` rounded up).
* ``T_bot'`` (1b) and ``T_top'`` (1c): layers are composed in adjacent pairs ``(0,1), (2,3), ...``;
  a pair costs the max of its two layers. ``composition="sum"`` (the default) adds the pairs as eq.
  1b/1c write it (the latency of one pass); ``composition="pipelined"`` takes the max over pairs
  instead (the steady-state rate when every pair works on a different sample, the reading under
  which §VI-C says RMC3's "throughput is constrained by the largest layer of MLP").
* As in eq. 1, MLP times are charged once per batch; only the flash term grows with ``N_batch``.
  That is the paper's model (exact for DRAM-streamed layers whose weight read is shared by the
  batch, optimistic for BRAM layers); :attr:`Design.throughput` is what that model implies.

Search (§IV-C4)
---------------
Kernel sides are powers of two up to ``2**k_max``. Constraints:

* Rule one: if the weights of all layers (in 36 Kb BRAMs) exceed ``B_max`` = the device's BRAM,
  layers go to off-chip DRAM, largest first, until the rest fits.
* Rule two: a DRAM layer's kernel is fixed at ``kr = D_width`` (64 B / 4 B = 16 floats) and
  ``kc = II`` (its time is then ``R C / D_width``). Eq. 3 is not applied to the link *into* a DRAM
  layer (rule two fixes that kernel regardless of its neighbour; assumption).
* Eq. 3: ``kc_i >= kr_{i+1}`` along ``bot'`` and ``top'``; ``kc_e = kc_b >= kr_t1``.
* Eq. 4: read as ``kr_i * kc_i >= min(II, R_i * C_i)`` for every layer but the last. The printed
  ``R_i C_i >= II`` is a condition on the layer, true for every Table III layer, and would leave
  1x1 kernels optimal for RMC1/2, while every non-final Table V kernel has ``kr kc = 8 = II``: the
  kernel-reuse pipeline of §IV-C1 needs at least ``II`` multiply-adds per kernel step.
* Eq. 2: minimise ``sum(kr * kc)`` over all layers (``L_e`` included) subject to
  ``T_bot' <= T_emb'`` and ``T_top' <= T_emb'``; the search is exact (dynamic programming over
  the layer pairs).
* Rule four's limit: "large kr, kc pair is picked first and reduced to approaching the limit". The
  limit is the pace of the largest kernels (``2**k_max`` square, rule two's kernel for DRAM layers)
  at this ``N_batch``: ``T* = max(T_emb', T_bot', T_top')`` of that design, and no design may take
  more than ``T*`` cycles per batch. Without it eq. 2 could shrink ``L_e`` until ``T_emb'`` — which
  includes ``L_e`` — is as slow as the smallest kernels everywhere: for the MLP-dominated NCF and
  Wide&Deep (one lookup per table) that is 23-46x slower than their flash reads, against the seed's
  "optimal throughput for both embedding-dominated and MLP-dominated models" (§IV-C4) and its
  Fig. 15, where RM-SSD beats even the all-DRAM host on them.
* Rule three: ``N_batch`` is the smallest of 1, 2, 4, ... for which a feasible design exists.
* Eq. 5 (balance) and rule four ("large kr, kc picked first") break ties among designs of equal
  ``sum(kr kc)``, in this order: smaller total pair imbalance ``|log2(t_i / t_{i+1})|``; then, layer
  by layer in dataflow order, a kernel not wider than the layer, ``kr`` as close as possible to the
  previous layer's ``kc`` (the largest ``kr`` eq. 3 allows), the squarest kernel, the larger ``kr``.

Against Table V this gives, with ``II = 8``: RMC1 and RMC2 reproduce every cell except ``L_t2``
(1 here, 4 in the paper: the last layer is exempt from eq. 4, so eq. 2's minimum puts ``kr = 1``
there; the paper's 4 equals ``kc_t1``, i.e. eq. 3 taken as an equality, which eq. 2 does not
require). RMC3 reproduces every cell except ``L_t2`` with ``composition="pipelined"``; with the
literal eq. 1b sum, one pass of ``bot'`` (``163840`` cycles for the DRAM-bound ``L_b0`` alone plus
at least ``512`` for ``(L_b2, L_b)`` at 16x16) exceeds the largest ``T_emb'`` at ``N_batch = 1``
(``163840``, with ``L_e`` at 4x2), rule three moves to ``N_batch = 2`` (``T_emb' = 283800``), and
there ``L_b1`` needs only ``kr kc = 8`` (``278528 <= 283800``), not the paper's 8x2 = 16.
See :data:`PAPER_TABLE_V` and :func:`table_v`.

Rule four's limit leaves Table III unchanged (there the largest kernels' pace is the flash's, or
for RMC3 with ``composition="pipelined"`` the DRAM-bound ``L_b0``, 163840 cycles at ``N_batch = 1``,
which ``L_e`` at 4x2 matches exactly) and makes NCF and Wide&Deep run at the pace of their flash
reads or of their largest layer at 16x16.

Resources
---------
Per layer, ``units = ceil(kr * kc / II)`` fp32 multiply + add pairs (§IV-C1: resource
``kr kc / II * (N_fmul + N_fadd)``). Default per-operator costs (:class:`CostModel`) are typical
Vivado HLS synthesis-report figures for single-precision operators with full DSP usage: fmul 3
DSP48, ~321 LUT, ~143 FF; fadd 2 DSP48, ~390 LUT, ~205 FF. These are assumptions (approximate,
they vary with tool version, family and latency), not measurements, and the model counts only the
MLP kernels and their weight memories, not the rest of the engine (control, activation buffers,
sigmoid, the Embedding Lookup Engine) that Table VI's figures include. BRAM per BRAM-resident layer:
``max(weights, bandwidth)`` 36 Kb blocks at 18 Kb granularity, with ``weights = R C * 4 B / 4.5 KiB``
and ``bandwidth = kr kc / (2 * II)`` (a kernel needs ``kr kc`` weights per ``II`` cycles; a BRAM36
gives two words per cycle); a DRAM layer keeps a double buffer of ``2 * kr * kc`` weights.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from offload import _native

__all__ = [
    "CLOCK_HZ",
    "DEVICES",
    "PAPER_TABLE_V",
    "PAPER_TABLE_VI",
    "TABLE_III",
    "TABLE_V_COLUMNS",
    "XC7A200T",
    "XCVU9P",
    "Comparison",
    "Composition",
    "CostModel",
    "Design",
    "Device",
    "FlashModel",
    "InfeasibleError",
    "LayerKernel",
    "LayerShape",
    "MLPShape",
    "OpCost",
    "Resources",
    "compare",
    "default_design",
    "dram_layers",
    "evaluate",
    "fits",
    "kernel_options",
    "last_layers",
    "layer_cycles",
    "layer_shapes",
    "naive_design",
    "naive_shapes",
    "search",
    "table_v",
    "table_vi",
    "violations",
]

CLOCK_HZ = 200_000_000
"""FPGA clock of the RM-SSD prototype (§V-A: 200 MHz, 5 ns)."""

FP32_BYTES = 4
Composition = Literal["sum", "pipelined"]


# --------------------------------------------------------------------------------------------- models


@dataclass(frozen=True)
class MLPShape:
    """The MLP and embedding shape of a DLRM-style model.

    ``bottom``: widths of the bottom MLP with the dense input width first (``(128, 64, 32)`` is two
    layers); ``(w,)`` means dense features of width ``w`` go straight to the interaction; ``()``
    means no dense features (NCF-like). ``top``: output widths of the top layers (``(256, 64, 1)``
    is three layers, the first reading the ``cat`` interaction). ``dim``: embedding dimension;
    ``tables``: number of embedding tables (``M``); ``lookups``: lookups per table (``N``).
    """

    name: str
    bottom: tuple[int, ...]
    top: tuple[int, ...]
    dim: int
    tables: int
    lookups: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "bottom", tuple(int(w) for w in self.bottom))
        object.__setattr__(self, "top", tuple(int(w) for w in self.top))
        if not self.top:
            raise ValueError("the top MLP needs at least one layer")
        if any(w < 1 for w in (*self.bottom, *self.top)):
            raise ValueError("layer widths must be positive")
        if self.dim < 1 or self.tables < 1 or self.lookups < 1:
            raise ValueError("dim, tables and lookups must be positive")

    @property
    def top_input(self) -> int:
        """Width of L_0's input with ``cat`` interaction."""
        return self.emb_rows + self.bottom_rows

    @property
    def bottom_rows(self) -> int:
        """``R_b``: rows of L_b (the bottom MLP's output width; 0 without dense features)."""
        return self.bottom[-1] if self.bottom else 0

    @property
    def emb_rows(self) -> int:
        """``R_e``: rows of L_e (all pooled embedding vectors)."""
        return self.tables * self.dim

    @property
    def ev_bytes(self) -> int:
        """Bytes of one fp32 embedding vector."""
        return self.dim * FP32_BYTES

    @property
    def parameters(self) -> int:
        """MLP weights plus biases."""
        widths_b = self.bottom
        widths_t = (self.top_input, *self.top)
        weights = sum(a * b for a, b in itertools.pairwise(widths_b))
        weights += sum(a * b for a, b in itertools.pairwise(widths_t))
        return weights + sum(widths_b[1:]) + sum(self.top)

    @property
    def mlp_bytes(self) -> int:
        """fp32 bytes of the MLP (Table III's "MLP size")."""
        return self.parameters * FP32_BYTES


TABLE_III: dict[str, MLPShape] = {
    "RMC1": MLPShape("RMC1", (128, 64, 32), (256, 64, 1), dim=32, tables=8, lookups=80),
    "RMC2": MLPShape("RMC2", (256, 128, 64), (128, 64, 1), dim=64, tables=32, lookups=120),
    "RMC3": MLPShape("RMC3", (2560, 1024, 256, 32), (512, 256, 1), dim=32, tables=10, lookups=20),
}
"""The DLRM models of the paper's Table III."""


@dataclass(frozen=True)
class LayerShape:
    """One FC layer: ``rows`` inputs (``R``), ``cols`` outputs (``C``)."""

    name: str
    rows: int
    cols: int
    group: Literal["bottom", "emb", "top"]

    @property
    def weights(self) -> int:
        return self.rows * self.cols


def layer_shapes(model: MLPShape) -> tuple[LayerShape, ...]:
    """The decomposed layers in dataflow order: ``L_b0 .. L_b``, ``L_e``, ``L_t1 ..``."""
    out: list[LayerShape] = []
    b = model.bottom
    out += [LayerShape(f"L_b{i}", b[i], b[i + 1], "bottom") for i in range(len(b) - 1)]
    c0 = model.top[0]
    if b:
        out.append(LayerShape("L_b", model.bottom_rows, c0, "bottom"))
    out.append(LayerShape("L_e", model.emb_rows, c0, "emb"))
    t = model.top
    out += [LayerShape(f"L_t{j}", t[j - 1], t[j], "top") for j in range(1, len(t))]
    return tuple(out)


def naive_shapes(model: MLPShape) -> tuple[LayerShape, ...]:
    """Layers without intra-layer decomposition: ``L_b0 ..``, ``L_0`` (the whole first top layer),
    ``L_t1 ..``."""
    out = [s for s in layer_shapes(model) if s.group == "bottom" and s.name != "L_b"]
    out.append(LayerShape("L_0", model.top_input, model.top[0], "top"))
    out += [s for s in layer_shapes(model) if s.group == "top"]
    return tuple(out)


def last_layers(model: MLPShape) -> frozenset[str]:
    """Layers with no successor (exempt from eq. 4): the last top layer, or L_b and L_e when the
    top MLP has a single layer."""
    if len(model.top) > 1:
        return frozenset({f"L_t{len(model.top) - 1}"})
    return frozenset({"L_b", "L_e"} if model.bottom else {"L_e"})


# ------------------------------------------------------------------------------------ devices, costs


@dataclass(frozen=True)
class Resources:
    """FPGA resources: LUTs, flip-flops, 36 Kb BRAMs (halves are 18 Kb blocks), DSP slices."""

    lut: int = 0
    ff: int = 0
    bram: float = 0.0
    dsp: int = 0

    def __add__(self, other: Resources) -> Resources:
        return Resources(
            self.lut + other.lut, self.ff + other.ff, self.bram + other.bram, self.dsp + other.dsp
        )

    def as_dict(self) -> dict[str, float]:
        return {"lut": self.lut, "ff": self.ff, "bram": self.bram, "dsp": self.dsp}


@dataclass(frozen=True)
class Device:
    """An FPGA's capacity (Table VI)."""

    name: str
    lut: int
    ff: int
    bram: int
    dsp: int

    @property
    def capacity(self) -> Resources:
        return Resources(self.lut, self.ff, float(self.bram), self.dsp)


XC7A200T = Device("XC7A200T", lut=215360, ff=269200, bram=365, dsp=740)
"""The low-end FPGA RM-SSD targets inside an enterprise SSD (Table VI)."""
XCVU9P = Device("XCVU9P", lut=1181768, ff=2363536, bram=2160, dsp=6840)
"""The AWS F1 FPGA the prototype runs on (Table VI); the default target of :func:`search`."""
DEVICES: dict[str, Device] = {d.name: d for d in (XC7A200T, XCVU9P)}


@dataclass(frozen=True)
class OpCost:
    """Cost of one fp32 operator instance."""

    dsp: int
    lut: int
    ff: int


@dataclass(frozen=True)
class CostModel:
    """Per-operator costs and memory parameters of the resource model.

    ``fmul``/``fadd``: typical Vivado HLS report figures for fp32 with full DSP usage (an
    assumption; see the module docstring). ``bram_bytes``: 36 Kb per BRAM36 (4.5 KiB; 4096 would
    count only the 32 data bits of each 36-bit word). ``bram_words_per_cycle``: fp32 words one
    BRAM36 delivers per cycle (two ports). ``dram_width_bytes``: ``D_width`` of §V (64 B).
    """

    fmul: OpCost = OpCost(dsp=3, lut=321, ff=143)
    fadd: OpCost = OpCost(dsp=2, lut=390, ff=205)
    bram_bytes: int = 4608
    bram_words_per_cycle: int = 2
    dram_width_bytes: int = 64

    @property
    def d_width(self) -> int:
        """``D_width`` in fp32 words per cycle (16)."""
        return self.dram_width_bytes // FP32_BYTES

    def brams(self, nbytes: int) -> float:
        """36 Kb BRAMs (18 Kb granularity) to hold ``nbytes``."""
        return math.ceil(2 * nbytes / self.bram_bytes) / 2 if nbytes > 0 else 0.0

    def units(self, count: int) -> Resources:
        """``count`` fmul + fadd pairs."""
        return Resources(
            lut=count * (self.fmul.lut + self.fadd.lut),
            ff=count * (self.fmul.ff + self.fadd.ff),
            dsp=count * (self.fmul.dsp + self.fadd.dsp),
        )


COSTS = CostModel()


class FlashModel:
    """The emulated SSD of Table II / §V-A, as ``crates/recsys/src/flash.rs`` has it (the one
    copy of the model): Table II's parameters, or those given by name (``channels``,
    ``t_page_us``, ``flush_fraction``, ...); gives the default ``b_EV``.

    A vector read takes ``T_EV = EV/P * T_trans + T_flush`` with ``T_flush = flush_fraction *
    T_page`` (0.7) and ``T_trans`` the rest: ``C_EV = ceil((60 EV/P + 140) * T_page_us)`` cycles
    at 200 MHz. Each channel serves one vector read at a time, so ``b_EV = channels / C_EV``
    vectors per cycle.
    """

    def __init__(self, **params: float) -> None:
        self._given = dict(params)
        self.params: dict[str, float] = dict(_native.recsys_flash_model(self._given or None))

    def __repr__(self) -> str:
        return f"FlashModel({', '.join(f'{k}={v!r}' for k, v in self._given.items())})"

    @property
    def channels(self) -> int:
        return int(self.params["channels"])

    @property
    def clock_hz(self) -> int:
        """The device's clock (the design's cycles are counted at it too)."""
        return round(self.params["clock_mhz"] * 1_000_000)

    def ev_read_cycles(self, ev_bytes: int) -> int:
        """``C_EV`` for a vector of ``ev_bytes``."""
        return int(_native.recsys_flash_vector_cycles(ev_bytes, self._given or None))

    def b_ev(self, ev_bytes: int) -> Fraction:
        """Vector reads per cycle of the whole flash array."""
        return Fraction(self.channels, self.ev_read_cycles(ev_bytes))


FLASH = FlashModel()


def _b_ev(model: MLPShape, b_ev: float | Fraction | None, flash: FlashModel) -> Fraction:
    if b_ev is None:
        return flash.b_ev(model.ev_bytes)
    value = Fraction(b_ev)
    if value <= 0:
        raise ValueError("b_ev must be positive")
    return value


def _flash_cycles(model: MLPShape, n_batch: int, b_ev: Fraction) -> int:
    """``N_batch * M * N / b_EV`` of eq. 1a, rounded up."""
    return math.ceil(Fraction(n_batch * model.tables * model.lookups) / b_ev)


def layer_cycles(rows: int, cols: int, kr: int, kc: int, ii: int) -> int:
    """Cycles of one FC layer on a ``kr x kc`` kernel: ``ceil(R/kr) * ceil(C/kc) * II``."""
    return -(-rows // kr) * -(-cols // kc) * ii


def dram_layers(
    shapes: Sequence[LayerShape], device: Device = XCVU9P, cost: CostModel = COSTS
) -> frozenset[str]:
    """Rule one: the layers whose weights go to off-chip DRAM, largest first, until the BRAM-held
    rest fits ``B_max`` (the device's BRAM)."""
    sizes = {s.name: cost.brams(s.weights * FP32_BYTES) for s in shapes}
    total = sum(sizes.values())
    chosen: set[str] = set()
    for s in sorted(shapes, key=lambda s: (-s.weights, s.name)):
        if total <= device.bram:
            break
        chosen.add(s.name)
        total -= sizes[s.name]
    return frozenset(chosen)


# ------------------------------------------------------------------------------------------ designs


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
    device: Device = XCVU9P,
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


# ------------------------------------------------------------------------------------------- search


def kernel_options(
    shape: LayerShape, *, ii: int = 8, k_max: int = 4, last: bool = False
) -> list[tuple[int, int]]:
    """Power-of-two kernels ``(kr, kc)`` up to ``2**k_max`` a BRAM layer may use (eq. 4 applied)."""
    sides = [1 << k for k in range(k_max + 1)]
    need = _min_size(shape, ii, last)
    return [(kr, kc) for kr in sides for kc in sides if kr * kc >= need]


def _log2(x: int) -> int:
    return x.bit_length() - 1


def _next_pow2(x: int) -> int:
    return 1 << (x - 1).bit_length()


def _layer_key(shape: LayerShape, kr: int, kc: int, prev_kc: int | None) -> tuple[int, int, int, int]:
    over = int(kr > _next_pow2(shape.rows)) + int(kc > _next_pow2(shape.cols))
    gap = _log2(prev_kc) - _log2(kr) if prev_kc is not None else 0
    return (over, gap, abs(_log2(kr) - _log2(kc)), -kr)


_Objective = tuple[int, float, tuple[tuple[int, int, int, int], ...]]
"""(sum of kr*kc, pair imbalance, per-layer tie-break keys): compared lexicographically."""


@dataclass(frozen=True)
class _Partial:
    time: int
    obj: _Objective
    kernels: tuple[tuple[int, int], ...]


def _staircase(parts: Iterable[_Partial]) -> list[_Partial]:
    """Keep the partials not dominated in (time, lexicographic objective)."""
    out: list[_Partial] = []
    for p in sorted(parts, key=lambda p: (p.time, p.obj)):
        if not out or p.obj < out[-1].obj:
            out.append(p)
    return out


def _chain_front(
    shapes: Sequence[LayerShape],
    options: Sequence[Sequence[tuple[int, int]]],
    fixed: Sequence[bool],
    incoming: int | None,
    ii: int,
    composition: str,
) -> dict[int | None, list[_Partial]]:
    """Exact DP over a chain of layers taken in composed pairs; fronts keyed by the last ``kc``."""
    states: dict[int | None, list[_Partial]] = {incoming: [_Partial(0, (0, 0.0, ()), ())]}
    for group in _groups(len(shapes)):
        new: dict[int | None, list[_Partial]] = {}
        for prev_kc, parts in states.items():
            for combo in _group_combos(group, options, fixed, prev_kc):
                times = [
                    layer_cycles(shapes[i].rows, shapes[i].cols, kr, kc, ii)
                    for i, (kr, kc) in zip(group, combo, strict=True)
                ]
                t_pair = max(times)
                sigma = sum(kr * kc for kr, kc in combo)
                imb = round(abs(math.log2(times[0] / times[1])), 9) if len(times) == 2 else 0.0
                prevs = [prev_kc, *(kc for _, kc in combo[:-1])]
                key = tuple(
                    _layer_key(shapes[i], kr, kc, pk)
                    for i, (kr, kc), pk in zip(group, combo, prevs, strict=True)
                )
                bucket = new.setdefault(combo[-1][1], [])
                for p in parts:
                    t = max(p.time, t_pair) if composition == "pipelined" else p.time + t_pair
                    obj = (p.obj[0] + sigma, round(p.obj[1] + imb, 9), p.obj[2] + key)
                    bucket.append(_Partial(t, obj, p.kernels + tuple(combo)))
        states = {k: _staircase(v) for k, v in new.items()}
    return states


def _group_combos(
    group: Sequence[int],
    options: Sequence[Sequence[tuple[int, int]]],
    fixed: Sequence[bool],
    prev_kc: int | None,
) -> Iterator[tuple[tuple[int, int], ...]]:
    first = group[0]
    for a in options[first]:
        if prev_kc is not None and not fixed[first] and a[0] > prev_kc:
            continue
        if len(group) == 1:
            yield (a,)
            continue
        second = group[1]
        for b in options[second]:
            if fixed[second] or b[0] <= a[1]:
                yield (a, b)


def _best_within(front: list[_Partial], budget: int) -> _Partial | None:
    i = bisect.bisect_right([p.time for p in front], budget)
    return front[i - 1] if i else None


def search(
    model: MLPShape,
    *,
    ii: int = 8,
    k_max: int = 4,
    b_ev: float | Fraction | None = None,
    flash: FlashModel = FLASH,
    device: Device = XCVU9P,
    cost: CostModel = COSTS,
    composition: Composition = "sum",
    max_batch: int = 1 << 20,
) -> Design:
    """The kernel search of §IV-C4 (rules one to four, eqs. 2-5, rule four's limit on the pace);
    see the module docstring.

    ``b_ev``: flash vector reads per cycle (default from ``flash`` and ``model.dim``); ``device``:
    the FPGA whose BRAM is ``B_max`` for rule one (XCVU9P, the paper's prototype, by default).
    Raises :class:`InfeasibleError` if no ``N_batch <= max_batch`` admits a feasible design.
    """
    if composition not in ("sum", "pipelined"):
        raise ValueError(f"unknown composition {composition!r}")
    if ii < 1 or k_max < 0:
        raise ValueError("ii must be positive and k_max non-negative")
    shapes = layer_shapes(model)
    dram = dram_layers(shapes, device, cost)
    last = last_layers(model)
    options: list[list[tuple[int, int]]] = []
    for s in shapes:
        if s.name in dram:
            options.append([(cost.d_width, ii)])
        else:
            options.append(kernel_options(s, ii=ii, k_max=k_max, last=s.name in last))
    empty_opts = [s.name for s, opts in zip(shapes, options, strict=True) if not opts]
    if empty_opts:
        raise InfeasibleError(
            f"{model.name}: no kernel up to 2**{k_max} meets eq. 4 for {', '.join(empty_opts)}"
        )
    fixed = [s.name in dram for s in shapes]
    bot, emb, top = _split(shapes)

    def sub(idx: list[int]) -> tuple[list[LayerShape], list[list[tuple[int, int]]], list[bool]]:
        return [shapes[i] for i in idx], [options[i] for i in idx], [fixed[i] for i in idx]

    bot_front = _chain_front(*sub(bot), None, ii, composition) if bot else {}
    top_fronts: dict[int, list[_Partial]] = {}
    for kc_e in sorted({kc for _, kc in options[emb]}):
        states = _chain_front(*sub(top), kc_e, ii, composition)
        top_fronts[kc_e] = _staircase(p for parts in states.values() for p in parts)
    empty = [_Partial(0, (0, 0.0, ()), ())]
    rate = _b_ev(model, b_ev, flash)
    s_e = shapes[emb]
    largest = {s.name: max(opts, key=lambda k: k[0] * k[1]) for s, opts in zip(shapes, options, strict=True)}
    n_batch = 1
    while n_batch <= max_batch:
        t_flash = _flash_cycles(model, n_batch, rate)
        limit = evaluate(
            model,
            largest,
            n_batch=n_batch,
            ii=ii,
            b_ev=rate,
            flash=flash,
            device=device,
            cost=cost,
            composition=composition,
        ).cycles  # rule four's limit: the pace of the largest kernels
        best: tuple[_Objective, dict[str, tuple[int, int]]] | None = None
        for kr_e, kc_e in options[emb]:
            t_emb = max(t_flash, layer_cycles(s_e.rows, s_e.cols, kr_e, kc_e, ii))
            if t_emb > limit:
                continue
            pb = _best_within(bot_front.get(kc_e, []), t_emb) if bot else empty[0]
            pt = _best_within(top_fronts[kc_e], t_emb)
            if pb is None or pt is None:
                continue
            key_e = _layer_key(s_e, kr_e, kc_e, None)
            obj = (
                pb.obj[0] + kr_e * kc_e + pt.obj[0],
                round(pb.obj[1] + pt.obj[1], 9),
                (*pb.obj[2], key_e, *pt.obj[2]),
            )
            if best is None or obj < best[0]:
                chosen = dict(zip([shapes[i].name for i in bot], pb.kernels, strict=True))
                chosen[s_e.name] = (kr_e, kc_e)
                chosen.update(zip([shapes[i].name for i in top], pt.kernels, strict=True))
                best = (obj, chosen)
        if best is not None:
            return evaluate(
                model,
                best[1],
                n_batch=n_batch,
                ii=ii,
                b_ev=rate,
                flash=flash,
                device=device,
                cost=cost,
                composition=composition,
                kind="optimized",
            )
        n_batch *= 2
    raise InfeasibleError(f"{model.name}: no feasible kernels with N_batch <= {max_batch}")


# -------------------------------------------------------------------------------- default and naive


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
    device: Device = XCVU9P,
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
    device: Device = XCVU9P,
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


# ------------------------------------------------------------------------------------------ fitting


def fits(design: Design | Resources, device: Device) -> tuple[str, ...]:
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
    devices: Sequence[Device] = (XC7A200T, XCVU9P),
    ii: int = 8,
    b_ev: float | Fraction | None = None,
    device: Device = XCVU9P,
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


# ------------------------------------------------------------------------------------- paper tables

TABLE_V_COLUMNS: tuple[str, ...] = ("L_b0", "L_b1", "L_b2", "L_b", "L_e", "L_t1", "L_t2")

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
"""Table VI of the seed: resources of the MLP Acceleration Engine (devices: :data:`DEVICES`)."""


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
