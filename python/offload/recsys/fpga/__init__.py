"""RM-SSD's MLP Acceleration Engine: kernel-size search and an FPGA resource model (seed 002, §IV-C).

The flash side (``b_EV``) is the Rust model's (``crates/recsys/src/flash.rs``, through
``offload._native``); the rest is pure Python.

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
:mod:`~offload.recsys.fpga.resource_table` puts these beside the seed's Table VI (`offload recsys
resources`).

Composition, run
----------------
:mod:`~offload.recsys.fpga.compose` runs Fig. 9's two scan patterns as a block schedule on real
values and counts its cycles, beside eq. 1b/1c's sum and pair max (`offload recsys composition`).
"""

from offload.recsys.fpga.design import Design, InfeasibleError, LayerKernel, evaluate, violations
from offload.recsys.fpga.flash import FLASH, FlashModel
from offload.recsys.fpga.paper import (
    PAPER_TABLE_V,
    PAPER_TABLE_VI,
    Comparison,
    compare,
    default_design,
    design_summary,
    fits,
    naive_design,
    search_report,
    table_v,
    table_vi,
)
from offload.recsys.fpga.resources import (
    COSTS,
    FPGA_DEVICES,
    XC7A200T,
    XCVU9P,
    CostModel,
    FpgaDevice,
    OpCost,
    Resources,
    dram_layers,
    layer_cycles,
)
from offload.recsys.fpga.search import kernel_options, search
from offload.recsys.fpga.shapes import (
    CLOCK_HZ,
    TABLE_III,
    TABLE_V_COLUMNS,
    Composition,
    LayerShape,
    MLPShape,
    last_layers,
    layer_shapes,
    naive_shapes,
)

__all__ = [
    "CLOCK_HZ",
    "COSTS",
    "FLASH",
    "FPGA_DEVICES",
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
    "FlashModel",
    "FpgaDevice",
    "InfeasibleError",
    "LayerKernel",
    "LayerShape",
    "MLPShape",
    "OpCost",
    "Resources",
    "compare",
    "default_design",
    "design_summary",
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
    "search_report",
    "table_v",
    "table_vi",
    "violations",
]
