"""A GPU codec for the particle flows' buffers, where a GPU is lent (issue: compression offload):
NVIDIA nvCOMP's LZ4, Zstd and Cascaded through its Python package (``pip install
nvidia-nvcomp-cu12``), over the Arrow buffers of a data set's columns, as a host would hand a
table's buffers to the GPU and take compressed bytes back.

Each algorithm is timed end to end per column (host buffer → device, encode, compressed bytes
→ host), then decoded back and checked byte for byte against the input. Without a GPU or
without the package, :func:`unavailable_reason` says which, and nothing else runs. The project's
usual machines have no GPU; this code follows nvCOMP's Python API documentation and has not
yet run on a device here (docs/flows.md says so, with the command that runs it).
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
        return "nvCOMP's Python package is not installed: pip install nvidia-nvcomp-cu12"
    return None


def column_buffers(table: pa.Table) -> dict[str, np.ndarray]:
    """Each column's data as one contiguous byte array (its Arrow value buffers)."""
    out = {}
    for name in table.column_names:
        col = table.column(name).combine_chunks()
        bufs = [b for b in col.buffers() if b is not None]
        out[name] = np.frombuffer(b"".join(memoryview(b) for b in bufs), dtype=np.uint8)
    return out


def measure(table: pa.Table, algorithms: tuple[str, ...] = ALGORITHMS, repeats: int = 3) -> dict[str, Any]:
    """Per algorithm: compress and decompress GB/s (medians of ``repeats``, transfers included)
    and the bytes out over in, over every column's buffers; raises where the GPU is missing."""
    why = unavailable_reason()
    if why is not None:
        raise RuntimeError(why)
    from nvidia import nvcomp  # type: ignore[import-not-found]

    bufs = column_buffers(table)
    total = sum(b.nbytes for b in bufs.values())
    out: dict[str, Any] = {"bytes_in": total, "algorithms": {}}
    for algo in algorithms:
        codec = nvcomp.Codec(algorithm=algo)
        enc_s, dec_s, size = [], [], 0
        for _ in range(repeats):
            t_enc = t_dec = 0.0
            size = 0
            for data in bufs.values():
                t0 = time.perf_counter()
                packed = np.asarray(codec.encode(nvcomp.as_array(data).cuda()).cpu())
                t1 = time.perf_counter()
                back = np.asarray(codec.decode(nvcomp.as_array(packed).cuda()).cpu()).view(np.uint8)
                t2 = time.perf_counter()
                if not np.array_equal(back[: data.nbytes], data):
                    raise RuntimeError(f"nvCOMP {algo} did not give the bytes back")
                t_enc, t_dec, size = t_enc + t1 - t0, t_dec + t2 - t1, size + packed.nbytes
            enc_s.append(t_enc)
            dec_s.append(t_dec)
        out["algorithms"][algo] = {
            "compress_gb_per_s": total / 1e9 / float(np.median(enc_s)),
            "decompress_gb_per_s": total / 1e9 / float(np.median(dec_s)),
            "out_over_in": size / total,
        }
    return out
