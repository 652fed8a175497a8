"""What an FPGA design costs: resources, the FPGA parts (XC7A200T, XCVU9P), the operator cost
model, a layer's cycles, and rule one (which layers' weights go to DRAM)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from offload.recsys.fpga.shapes import FP32_BYTES, LayerShape


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
class FpgaDevice:
    """An FPGA's capacity (Table VI)."""

    name: str
    lut: int
    ff: int
    bram: int
    dsp: int

    @property
    def capacity(self) -> Resources:
        return Resources(self.lut, self.ff, float(self.bram), self.dsp)


XC7A200T = FpgaDevice("XC7A200T", lut=215360, ff=269200, bram=365, dsp=740)
"""The low-end FPGA RM-SSD targets inside an enterprise SSD (Table VI)."""
XCVU9P = FpgaDevice("XCVU9P", lut=1181768, ff=2363536, bram=2160, dsp=6840)
"""The AWS F1 FPGA the prototype runs on (Table VI); the default target of :func:`search`."""
FPGA_DEVICES: dict[str, FpgaDevice] = {d.name: d for d in (XC7A200T, XCVU9P)}


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


def layer_cycles(rows: int, cols: int, kr: int, kc: int, ii: int) -> int:
    """Cycles of one FC layer on a ``kr x kc`` kernel: ``ceil(R/kr) * ceil(C/kc) * II``."""
    return -(-rows // kr) * -(-cols // kc) * ii


def dram_layers(
    shapes: Sequence[LayerShape], device: FpgaDevice = XCVU9P, cost: CostModel = COSTS
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
