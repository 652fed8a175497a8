"""Coverage-guided fuzzing (Atheris, libFuzzer) of the trace reader,
offload.recsys.traces.load_trace.

An input is turned into a trace file in /dev/shm (the reader takes a path) one of two ways,
chosen by the input: as is (the raw bytes of a file), or, since a mutated .npz almost never
gets past zipfile's CRCs, as a valid .npz whose metadata and arrays (keys, shapes, dtypes,
values) the rest of the input chooses. What is checked: the reader raises nothing but
ValueError (its documented contract, which names the file and what is wrong); a trace that
loads is saved and loaded again unchanged.
Run: fuzz/run.sh trace_load SECONDS [RUNS] (docs/fuzzing.md).
"""

import io
import json
import os
import sys
import tempfile
import traceback

import atheris

with atheris.instrument_imports(include=["offload"]):
    from offload.recsys import traces

import numpy as np

_DIR = tempfile.mkdtemp(prefix="offload-fuzz-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
_IN = os.path.join(_DIR, "in.npz")
_OUT = os.path.join(_DIR, "out.npz")


# Findings already reported, to go on past them in one session: "Type@function" signatures
# (see signature), comma-separated, in OFFLOAD_FUZZ_KNOWN. Empty by default: any is a failure.
_KNOWN = {k for k in os.environ.get("OFFLOAD_FUZZ_KNOWN", "").split(",") if k}


def signature(exc: BaseException) -> str:
    """The exception's type and the innermost function of the project where it came from."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/offload/" in f.filename]
    return f"{type(exc).__name__}@{frames[-1].name if frames else '?'}"


def same(a: traces.EmbeddingTrace, b: traces.EmbeddingTrace) -> bool:
    if a.rows != b.rows or len(a.batches) != len(b.batches):
        return False
    for x, y in zip(a.batches, b.batches, strict=True):
        if not np.array_equal(x.dense, y.dense, equal_nan=True):
            return False
        arrays = [*zip(x.offsets, y.offsets, strict=True), *zip(x.indices, y.indices, strict=True)]
        if not all(np.array_equal(p, q) for p, q in arrays):
            return False
    return True


def _number(fdp: atheris.FuzzedDataProvider) -> object:
    """Mostly a small count; sometimes a negative, huge, float, text or null one."""
    pick = fdp.ConsumeIntInRange(0, 15)
    if pick < 11:
        return fdp.ConsumeIntInRange(0, 4)
    return [-1, 2**63, 1.5, "2", None][pick - 11]


def _array(fdp: atheris.FuzzedDataProvider, shape: tuple[int, ...]) -> np.ndarray:
    dtype = [np.int64, np.int64, np.int64, np.float32, np.int32, np.uint64, np.float64][
        fdp.ConsumeIntInRange(0, 6)
    ]
    if fdp.ConsumeIntInRange(0, 7) == 0:  # another shape than the metadata says
        shape = tuple(fdp.ConsumeIntInRange(0, 4) for _ in range(fdp.ConsumeIntInRange(0, 3)))
    n = int(np.prod(shape)) if shape else 1
    values = fdp.ConsumeIntListInRange(n, -2, 6) if n <= 4096 else [0] * n
    return np.array(values, dtype=np.float64).astype(dtype).reshape(shape)


def npz_of(fdp: atheris.FuzzedDataProvider) -> bytes:
    """A valid .npz holding the metadata and arrays of a trace, each part fuzzed."""
    meta: dict[str, object] = {
        "format": traces.TRACE_FORMAT if fdp.ConsumeBool() else fdp.ConsumeUnicodeNoSurrogates(8),
        "version": traces.TRACE_VERSION if fdp.ConsumeBool() else _number(fdp),
    }
    for key in ("num_batches", "batch_size", "dense_width", "num_tables"):
        meta[key] = _number(fdp)
    meta["rows"] = [_number(fdp) for _ in range(fdp.ConsumeIntInRange(0, 3))]
    meta["config"] = [None, {}, {"rows": [10], "batch_size": 1}, {"rows": 3}, 7][fdp.ConsumeIntInRange(0, 4)]
    for key in list(meta):
        if fdp.ConsumeIntInRange(0, 15) == 0:
            del meta[key]
    ints = [
        v if isinstance(v, int) and 0 <= v <= 4 else 1
        for v in (meta.get(k) for k in ("num_batches", "batch_size", "dense_width", "num_tables"))
    ]
    nb, b, w, nt = ints
    arrays: dict[str, np.ndarray] = {}
    if fdp.ConsumeIntInRange(0, 15):
        text = json.dumps(meta) if fdp.ConsumeIntInRange(0, 15) else fdp.ConsumeUnicodeNoSurrogates(16)
        arrays["meta"] = np.array(text)
    if fdp.ConsumeIntInRange(0, 15):
        arrays["dense"] = _array(fdp, (nb, b, w))
    for t in range(nt + (fdp.ConsumeIntInRange(0, 7) == 0)):
        arrays[f"offsets_{t}"] = (
            np.cumsum(np.abs(_array(fdp, (nb, b + 1))), axis=-1)
            if fdp.ConsumeBool()
            else _array(fdp, (nb, b + 1))
        )
        arrays[f"indices_{t}"] = _array(fdp, (fdp.ConsumeIntInRange(0, 3 * max(nb * b, 1)),))
    buf = io.BytesIO()
    np.savez(buf, **arrays)  # type: ignore[arg-type]
    return buf.getvalue()


def one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    raw = fdp.ConsumeIntInRange(0, 3) == 0
    try:
        body = fdp.ConsumeBytes(len(data)) if raw else npz_of(fdp)
    except (ValueError, OverflowError):
        return  # the harness could not build this one
    with open(_IN, "wb") as fh:
        fh.write(body)
    try:
        trace = traces.load_trace(_IN)
    except ValueError:
        return
    except Exception as exc:
        if signature(exc) in _KNOWN:
            return
        print(f"finding: {signature(exc)}", file=sys.stderr)
        raise
    traces.save_trace(_OUT, trace)
    assert same(traces.load_trace(_OUT), trace), "a loaded trace saved and loaded again differs"


if __name__ == "__main__":
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()
