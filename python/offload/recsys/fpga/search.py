"""The kernel-size search of §IV-C4: the fastest design within the FPGA's resources, rules one to
four, by Pareto fronts over each MLP chain."""

from __future__ import annotations

import bisect
import functools
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction

from offload.recsys.fpga.design import Design, InfeasibleError, _groups, _min_size, _split, evaluate
from offload.recsys.fpga.flash import FLASH, FlashModel, _b_ev, _flash_cycles
from offload.recsys.fpga.resources import COSTS, XCVU9P, CostModel, FpgaDevice, dram_layers, layer_cycles
from offload.recsys.fpga.shapes import Composition, LayerShape, MLPShape, last_layers, layer_shapes


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


def _layer_options(
    model: MLPShape,
    shapes: Sequence[LayerShape],
    dram: frozenset[str],
    *,
    ii: int,
    k_max: int,
    cost: CostModel,
) -> list[list[tuple[int, int]]]:
    """Each layer's kernels to choose from: rule two's fixed kernel for a DRAM layer, else every
    power-of-two kernel eq. 4 allows; raises :class:`InfeasibleError` where a layer has none."""
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
    return options


def search(
    model: MLPShape,
    *,
    ii: int = 8,
    k_max: int = 4,
    b_ev: float | Fraction | None = None,
    flash: FlashModel = FLASH,
    device: FpgaDevice = XCVU9P,
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
    options = _layer_options(model, shapes, dram, ii=ii, k_max=k_max, cost=cost)
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
    design = functools.partial(
        evaluate, model, ii=ii, b_ev=rate, flash=flash, device=device, cost=cost, composition=composition
    )
    n_batch = 1
    while n_batch <= max_batch:
        t_flash = _flash_cycles(model, n_batch, rate)
        limit = design(largest, n_batch=n_batch).cycles  # rule four's limit: the pace of the largest kernels
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
            return design(best[1], n_batch=n_batch, kind="optimized")
        n_batch *= 2
    raise InfeasibleError(f"{model.name}: no feasible kernels with N_batch <= {max_batch}")
