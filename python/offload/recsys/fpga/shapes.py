"""The shapes the kernel search works on: a model's MLPs (:class:`MLPShape`, Table III), its
layers after the intra-layer decomposition, and the FPGA clock."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Literal

CLOCK_HZ = 200_000_000
"""FPGA clock of the RM-SSD prototype (§V-A: 200 MHz, 5 ns)."""

FP32_BYTES = 4
Composition = Literal["sum", "pipelined"]


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


TABLE_V_COLUMNS: tuple[str, ...] = ("L_b0", "L_b1", "L_b2", "L_b", "L_e", "L_t1", "L_t2")
