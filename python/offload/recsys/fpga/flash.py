"""The flash side of eq. 1a: ``b_EV`` from the seed's Table II flash model, which is
``crates/recsys/src/flash.rs`` reached through ``offload._native`` (the one copy of the model)."""

from __future__ import annotations

import math
from fractions import Fraction

from offload import _native
from offload.recsys.fpga.shapes import MLPShape


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
