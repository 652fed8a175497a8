"""An embedding trace (batches + row counts + the config that made them) and its file: one
``.npz`` with a JSON ``meta``; writing, and reading with full validation."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from offload.recsys.traces.batches import (
    Batch,
    _check_offsets,
    _first_bad,
    check_finite_dense,
    validate_batch,
)
from offload.recsys.traces.config import TraceConfig

TRACE_FORMAT = "offload.recsys.trace"
TRACE_VERSION = 1


@dataclass
class EmbeddingTrace:
    """A list of batches plus the row counts (and, when generated, the config) behind them."""

    batches: list[Batch]
    rows: tuple[int, ...]
    config: TraceConfig | None = None

    def save(self, path: str | Path) -> Path:
        """Write to one ``.npz`` (see :func:`save_trace`)."""
        return save_trace(path, self)

    @classmethod
    def load(cls, path: str | Path, rows: Sequence[int] | None = None) -> EmbeddingTrace:
        """Read and validate a ``.npz`` (see :func:`load_trace`)."""
        return load_trace(path, rows)

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[Batch]:
        return iter(self.batches)


def save_trace(path: str | Path, trace: EmbeddingTrace) -> Path:
    """Write ``trace`` to one ``.npz`` (uncompressed; see the module docs for the layout).

    All batches must have the same batch size, dense width and number of tables.
    """
    path = Path(path)
    if not trace.batches:
        raise ValueError("cannot save an empty trace")
    first = trace.batches[0]
    b, w = first.dense.shape
    nt = len(trace.rows)
    for i, batch in enumerate(trace.batches):
        if batch.dense.shape != (b, w):
            raise ValueError(f"batch {i}: dense shape {batch.dense.shape} differs from {(b, w)}")
        validate_batch(batch, trace.rows)
    meta = {
        "format": TRACE_FORMAT,
        "version": TRACE_VERSION,
        "num_batches": len(trace.batches),
        "batch_size": int(b),
        "dense_width": int(w),
        "num_tables": nt,
        "rows": [int(r) for r in trace.rows],
        "config": trace.config.to_dict() if trace.config is not None else None,
    }
    arrays: dict[str, np.ndarray] = {
        "meta": np.array(json.dumps(meta, sort_keys=True)),
        "dense": np.stack([bt.dense.astype(np.float32, copy=False) for bt in trace.batches]),
    }
    for t in range(nt):
        arrays[f"offsets_{t}"] = np.stack(
            [bt.offsets[t].astype(np.int64, copy=False) for bt in trace.batches]
        )
        arrays[f"indices_{t}"] = np.concatenate(
            [bt.indices[t].astype(np.int64, copy=False) for bt in trace.batches]
        )
    from offload.files import atomic_write

    with atomic_write(path, "wb") as fh:  # temp + fsync + rename: whole or not at all
        np.savez(fh, **arrays)  # type: ignore[arg-type]
    return path


def _int_array(arr: np.ndarray, name: str) -> np.ndarray:
    if not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{name}: expected an integer array, got dtype {arr.dtype}")
    return arr.astype(np.int64, copy=False)


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    """Every array of an .npz, or a ValueError naming the file and what is wrong with it (an
    empty, truncated or foreign file; numpy's own errors do not say which file)."""
    import zipfile

    if not path.exists():
        raise FileNotFoundError(f"{path}: no such trace file")
    if path.stat().st_size == 0:
        raise ValueError(
            f"{path}: the trace file is empty (0 bytes); make it again with `offload recsys synth`"
        )
    bad = (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zipfile.LargeZipFile)
    again = "make it again with `offload recsys synth`"
    try:
        npz = np.load(path, allow_pickle=False)
    except bad as e:
        raise ValueError(f"{path}: not a readable trace (.npz): {e or type(e).__name__}; {again}") from None
    if not isinstance(npz, np.lib.npyio.NpzFile):
        raise ValueError(f"{path}: one array (.npy), not a trace (.npz); {again}")
    try:
        with npz:
            return {k: npz[k] for k in npz.files}
    except bad as e:
        raise ValueError(f"{path}: a damaged trace (.npz): {e or type(e).__name__}; {again}") from None


def load_trace(path: str | Path, rows: Sequence[int] | None = None) -> EmbeddingTrace:
    """Read a trace written by :func:`save_trace` and validate it.

    Args:
        path: the ``.npz`` file.
        rows: row counts to validate the indices against (default: those in the metadata; if
            given, their number must match the file's tables).

    Raises:
        ValueError: bad metadata, missing arrays, wrong shapes or dtypes, offsets that do not
            start at 0, decrease or do not end at the number of indices, or an index outside
            ``[0, rows_t)`` — naming the table, the batch and the position of the first bad value;
            a NaN or infinite dense feature, naming the batch, sample and feature.
    """
    data = _read_npz(Path(path))
    (nb, b, w, nt), check_rows, config = _read_meta(path, data, rows)
    if "dense" not in data:
        raise ValueError(f"{path}: missing 'dense'")
    dense = data["dense"]
    if dense.shape != (nb, b, w):
        raise ValueError(f"{path}: dense has shape {dense.shape}, expected {(nb, b, w)}")
    if dense.dtype != np.float32:
        raise ValueError(f"{path}: dense has dtype {dense.dtype}, expected float32")
    finite = np.isfinite(dense)
    if not finite.all():  # NaN or inf: refused, naming the batch, sample and feature
        i = int(np.argmin(finite.reshape(nb, -1).all(axis=1)))
        check_finite_dense(dense[i], f"{path}: batch {i}: ")
    tables = [_read_table(path, data, t, (nb, b), check_rows[t]) for t in range(nt)]
    offsets = [off for off, _ in tables]
    indices = [idx for _, idx in tables]
    batches: list[Batch] = []
    starts = [np.concatenate([[0], np.cumsum(off[:, -1])]) for off in offsets]
    for i in range(nb):
        batches.append(
            Batch(
                dense=dense[i],
                offsets=[offsets[t][i].copy() for t in range(nt)],
                indices=[indices[t][starts[t][i] : starts[t][i + 1]] for t in range(nt)],
            )
        )
    return EmbeddingTrace(batches=batches, rows=tuple(check_rows), config=config)


def _read_meta(
    path: str | Path, data: dict[str, np.ndarray], rows: Sequence[int] | None
) -> tuple[tuple[int, int, int, int], list[int], TraceConfig | None]:
    """The metadata of a trace file: (batches, batch size, dense width, tables), the row counts
    to check indices against, and the config it was generated from (None if not generated)."""
    if "meta" not in data:
        raise ValueError(f"{path}: no 'meta' entry (not a trace file)")
    try:
        meta = json.loads(str(data["meta"][()]))
    except (json.JSONDecodeError, TypeError) as exc:
        raise ValueError(f"{path}: metadata is not valid JSON: {exc}") from exc
    if not isinstance(meta, dict) or meta.get("format") != TRACE_FORMAT:
        raise ValueError(f"{path}: metadata format is not {TRACE_FORMAT!r}")
    if meta.get("version") != TRACE_VERSION:
        raise ValueError(f"{path}: unsupported trace version {meta.get('version')!r}")
    try:
        nb, b, w, nt = (int(meta[k]) for k in ("num_batches", "batch_size", "dense_width", "num_tables"))
        meta_rows = [int(r) for r in meta["rows"]]
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise ValueError(f"{path}: incomplete metadata: {exc}") from exc
    if nb < 1:
        raise ValueError(f"{path}: num_batches is {nb}; a trace holds at least one batch")
    if len(meta_rows) != nt:
        raise ValueError(f"{path}: metadata names {nt} tables but {len(meta_rows)} row counts")
    if rows is not None:
        if len(rows) != nt:
            raise ValueError(f"{path}: {len(rows)} row counts given for {nt} tables")
        check_rows = [int(r) for r in rows]
    else:
        check_rows = meta_rows
    try:
        config = TraceConfig.from_dict(meta["config"]) if meta.get("config") is not None else None
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{path}: metadata 'config' is not a trace configuration: {exc}") from None
    return (nb, b, w, nt), check_rows, config


def _read_table(
    path: str | Path, data: dict[str, np.ndarray], t: int, shape: tuple[int, int], rows: int
) -> tuple[np.ndarray, np.ndarray]:
    """Table ``t``'s offsets (batches x (batch size + 1)) and indices, validated."""
    nb, b = shape
    for key in (f"offsets_{t}", f"indices_{t}"):
        if key not in data:
            raise ValueError(f"{path}: table {t}: missing '{key}'")
    off = _int_array(data[f"offsets_{t}"], f"table {t}: offsets")
    idx = _int_array(data[f"indices_{t}"], f"table {t}: indices")
    if off.shape != (nb, b + 1):
        raise ValueError(f"table {t}: offsets has shape {off.shape}, expected {(nb, b + 1)}")
    if idx.ndim != 1:
        raise ValueError(f"table {t}: indices must be 1-D, got shape {idx.shape}")
    for i in range(nb):
        _check_offsets(off[i], None, f"table {t}: batch {i}")
    ends = np.cumsum(off[:, -1])
    if int(ends[-1]) != idx.size:
        raise ValueError(
            f"table {t}: offsets promise {int(ends[-1])} indices over {nb} batches, file has {idx.size}"
        )
    bad = (idx < 0) | (idx >= rows)
    if bad.any():
        j = _first_bad(bad)
        i = int(np.searchsorted(ends, j, side="right"))
        pos = j - (int(ends[i - 1]) if i else 0)
        raise ValueError(
            f"table {t}: batch {i}: indices[{pos}] (file position {j}) = {int(idx[j])} not in [0, {rows})"
        )
    return off, idx
