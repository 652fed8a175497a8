"""A batch of lookups in EmbeddingBag form, and its validation with errors that name the table,
batch and position."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Batch:
    """One batch: dense features and per-table ``EmbeddingBag`` offsets/indices.

    Attributes:
        dense: ``(B, dense_width)`` float32.
        offsets: per table, int64 of length ``B + 1`` (``offsets[0] == 0``, non-decreasing,
            ``offsets[-1] == len(indices)``).
        indices: per table, int64 row ids.
    """

    dense: np.ndarray
    offsets: list[np.ndarray] = field(default_factory=list)
    indices: list[np.ndarray] = field(default_factory=list)

    @property
    def batch_size(self) -> int:
        return int(self.dense.shape[0])

    @property
    def num_tables(self) -> int:
        return len(self.offsets)

    def lengths(self, table: int) -> np.ndarray:
        """Bag sizes of ``table`` (int64, length ``B``)."""
        return np.diff(self.offsets[table])

    def bag(self, table: int, sample: int) -> np.ndarray:
        """Row ids of bag ``sample`` of ``table``."""
        off = self.offsets[table]
        return self.indices[table][off[sample] : off[sample + 1]]

    def validate(self, rows: Sequence[int]) -> None:
        """Raise ``ValueError`` if the batch breaks the contract (see :func:`validate_batch`)."""
        validate_batch(self, rows)


def _first_bad(mask: np.ndarray) -> int:
    return int(np.argmax(mask))


def _check_offsets(off: np.ndarray, n_indices: int | None, where: str) -> None:
    if off.ndim != 1 or off.size < 1:
        raise ValueError(f"{where}: offsets must be 1-D with length B + 1, got shape {off.shape}")
    if off[0] != 0:
        raise ValueError(f"{where}: offsets[0] = {int(off[0])}, must be 0")
    d = np.diff(off)
    if d.size and (d < 0).any():
        i = _first_bad(d < 0) + 1
        raise ValueError(
            f"{where}: offsets[{i}] = {int(off[i])} < offsets[{i - 1}] = {int(off[i - 1])} "
            "(offsets must be non-decreasing)"
        )
    if n_indices is not None and int(off[-1]) != n_indices:
        raise ValueError(f"{where}: offsets[-1] = {int(off[-1])} but there are {n_indices} indices")


def _check_indices(idx: np.ndarray, rows: int, where: str, base: int = 0) -> None:
    bad = (idx < 0) | (idx >= rows)
    if bad.any():
        j = _first_bad(bad)
        raise ValueError(f"{where}: indices[{j + base}] = {int(idx[j])} not in [0, {rows})")


def check_finite_dense(dense: np.ndarray, where: str = "") -> None:
    """A ``ValueError`` naming the sample and feature of the first NaN or ±inf in ``dense``
    (B, dense_width): the MLPs would turn it into a finite, confident prediction."""
    bad = ~np.isfinite(dense)
    if bad.any():
        sample, feature = (int(x) for x in np.argwhere(bad)[0])
        raise ValueError(
            f"{where}dense features: sample {sample}, feature {feature} is {dense[sample, feature]}; "
            "dense features must be finite numbers"
        )


def validate_batch(batch: Batch, rows: Sequence[int]) -> None:
    """Check the offsets/indices contract of ``batch`` against ``rows`` (one count per table),
    and that its dense features are finite.

    Raises ``ValueError`` naming the table and the position of the first bad value (the sample
    and feature of a NaN or infinite dense feature).
    """
    if batch.dense.ndim != 2:
        raise ValueError(f"dense must be 2-D (B, dense_width), got shape {batch.dense.shape}")
    check_finite_dense(batch.dense)
    b = batch.dense.shape[0]
    if len(batch.offsets) != len(rows) or len(batch.indices) != len(rows):
        raise ValueError(
            f"expected {len(rows)} tables, got {len(batch.offsets)} offsets and {len(batch.indices)} indices"
        )
    for t, (off, idx) in enumerate(zip(batch.offsets, batch.indices, strict=True)):
        where = f"table {t}"
        if off.shape != (b + 1,):
            raise ValueError(f"{where}: offsets has shape {off.shape}, expected ({b + 1},)")
        _check_offsets(off, len(idx), where)
        _check_indices(idx, int(rows[t]), where)
