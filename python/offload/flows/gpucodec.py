"""A GPU codec for the particle flows' buffers, where a GPU is lent (issue: compression offload):
NVIDIA nvCOMP's LZ4, Zstd and Cascaded through its Python package (``pip install
nvidia-nvcomp-cu12``, or ``-cu13``: the machine's CUDA), over the Arrow buffers of a data set's
columns, as a host would hand a table's buffers to the GPU and take compressed bytes back.

Each algorithm is timed end to end per column (host buffer → device, encode, compressed bytes
→ host), then decoded back and checked byte for byte against the input; and alone, on columns
already in device memory. Without a GPU or without the package, :func:`unavailable_reason` says
which, and nothing else runs. It ran on an H100 with nvCOMP 6.0 on 2026-11-26 (BENCHMARKS.md,
flows; `benches/gpu/run.sh codec`).
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

ALGORITHMS = ("LZ4", "Zstd", "Cascaded")


def unavailable_reason() -> str | None:
    """Why the GPU codec cannot run here, or None."""
    if not any(Path("/dev").glob("nvidia[0-9]*")):
        return "no NVIDIA GPU on this machine (no /dev/nvidia*)"
    if importlib.util.find_spec("nvidia.nvcomp") is None:
        return "nvCOMP's Python package is not installed: pip install nvidia-nvcomp-cu12 (or -cu13)"
    return None


def column_buffers(table: pa.Table) -> dict[str, np.ndarray]:
    """Each column's data as one contiguous byte array (its Arrow value buffers)."""
    out = {}
    for name in table.column_names:
        col = table.column(name).combine_chunks()
        bufs = [b for b in col.buffers() if b is not None]
        out[name] = np.frombuffer(b"".join(memoryview(b) for b in bufs), dtype=np.uint8)
    return out


def integer_types(table: pa.Table) -> dict[str, str]:
    """The integer type nvCOMP's Cascaded should read each column's bytes as (array-protocol
    string): its values' width where the column is one fixed-width buffer (no nulls), else
    bytes. Cascaded's run-length, delta and bit-packing stages work on integers of that width;
    read as bytes, a float or int64 column is not the sequence they were meant for. The type is
    always given: without it, nvCOMP 6.0's Cascaded dropped the last bytes of a buffer whose
    length is not a multiple of 4 (an H100, 2026-11-26: a string column lost 3 of 10,903,363)."""
    out = {}
    for name in table.column_names:
        t = table.schema.field(name).type
        width = t.bit_width // 8 if pa.types.is_primitive(t) and not pa.types.is_boolean(t) else 1
        fixed = table.column(name).null_count == 0 and width in (2, 4, 8)
        out[name] = f"<u{width}" if fixed else "|u1"
    return out


def first_difference(back: np.ndarray, data: np.ndarray) -> str | None:
    """Where decoded bytes differ from the input (length first), or None when equal."""
    if back.nbytes != data.nbytes:
        return f"decoded {back.nbytes:,} bytes for {data.nbytes:,}"
    diff = np.flatnonzero(back != data)
    return None if diff.size == 0 else f"{diff.size:,} bytes differ, the first at byte {int(diff[0]):,}"


def measure(table: pa.Table, algorithms: tuple[str, ...] = ALGORITHMS, repeats: int = 3) -> dict[str, Any]:
    """Per algorithm: compress and decompress GB/s (medians of ``repeats``, transfers included)
    and the bytes out over in, over every column's buffers; raises where the GPU is missing.
    An algorithm whose decoded bytes differ from a column's input is reported, not timed:
    ``{"failed": "<column>: <where>"}``."""
    why = unavailable_reason()
    if why is not None:
        raise RuntimeError(why)
    from nvidia import nvcomp  # type: ignore[import-not-found]

    bufs = column_buffers(table)
    types = integer_types(table)
    total = sum(b.nbytes for b in bufs.values())
    out: dict[str, Any] = {"bytes_in": total, "algorithms": {}}
    for algo in algorithms:
        codecs = _codecs(nvcomp, algo, types)
        got = _timed(nvcomp, codecs, bufs, total, repeats)
        if "failed" not in got:
            got |= _on_device(nvcomp, codecs, bufs, total, repeats)
        out["algorithms"][algo] = got
    return out


def _codecs(nvcomp: Any, algo: str, types: dict[str, str]) -> dict[str, Any]:
    """Each column's codec of ``algo``: one per data type (Cascaded reads the column's integer
    width, :func:`integer_types`; the others bytes)."""
    kinds = {name: types[name] if algo == "Cascaded" else "|u1" for name in types}
    made = {k: nvcomp.Codec(algorithm=algo, **({"data_type": k} if algo == "Cascaded" else {}))
            for k in set(kinds.values())}  # fmt: skip
    return {name: made[k] for name, k in kinds.items()}


def _gb_per_s(total: int, seconds: list[float]) -> float:
    return total / 1e9 / float(np.median(seconds))


def _on_device(
    nvcomp: Any, codecs: dict[str, Any], bufs: dict[str, np.ndarray], total: int, repeats: int
) -> dict[str, float]:
    """The codec alone: columns already in device memory, the device synchronized (CuPy's
    deviceSynchronize: nvCOMP runs on streams of its own) around each encode and decode. Empty
    without CuPy."""
    try:
        import cupy  # type: ignore[import-not-found]
    except ImportError:
        return {}
    sync = cupy.cuda.runtime.deviceSynchronize
    on_device = {name: nvcomp.as_array(data).cuda() for name, data in bufs.items()}
    enc_s, dec_s = [], []
    for _ in range(repeats):
        t_enc = t_dec = 0.0
        for name, data in on_device.items():
            sync()
            t0 = time.perf_counter()
            packed = codecs[name].encode(data)
            sync()
            t1 = time.perf_counter()
            codecs[name].decode(packed)
            sync()
            t_enc, t_dec = t_enc + t1 - t0, t_dec + time.perf_counter() - t1
        enc_s.append(t_enc)
        dec_s.append(t_dec)
    return {"on_device_compress_gb_per_s": _gb_per_s(total, enc_s),
            "on_device_decompress_gb_per_s": _gb_per_s(total, dec_s)}  # fmt: skip


def _timed(
    nvcomp: Any, codecs: dict[str, Any], bufs: dict[str, np.ndarray], total: int, repeats: int
) -> dict[str, Any]:
    """End to end: each column from host memory to the device, encoded, back, and decoded the
    same way; the first column whose bytes do not come back ends it (``failed``)."""
    enc_s, dec_s, size = [], [], 0
    for _ in range(repeats):
        t_enc = t_dec = 0.0
        size = 0
        for name, data in bufs.items():
            c = codecs[name]
            t0 = time.perf_counter()
            packed = np.asarray(c.encode(nvcomp.as_array(data).cuda()).cpu())
            t1 = time.perf_counter()
            back = np.asarray(c.decode(nvcomp.as_array(packed).cuda()).cpu()).view(np.uint8).reshape(-1)
            t2 = time.perf_counter()
            where = first_difference(back, data)
            if where is not None:
                return {"failed": f"{name}: {where}"}
            t_enc, t_dec, size = t_enc + t1 - t0, t_dec + t2 - t1, size + packed.nbytes
        enc_s.append(t_enc)
        dec_s.append(t_dec)
    return {"compress_gb_per_s": _gb_per_s(total, enc_s), "decompress_gb_per_s": _gb_per_s(total, dec_s),
            "out_over_in": size / total}  # fmt: skip
