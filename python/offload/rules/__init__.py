"""The business-rule engine: load rule sets, compile them, match query columns.

>>> from offload import rules
>>> rs = rules.load("ruletype.xml", "rules.csv")          # ERBIUM or native (.toml) format
>>> engine = rules.compile(rs, matcher="fast")
>>> result = engine.match({"CTN_TYPE": ["DD"], ...})       # dict / pandas / pyarrow columns
>>> result.rule, result.content, result.matched

Matching runs in Rust with the GIL released; Python only converts columns.

Modules:

- this package: RuleSet, CompiledRules, MatchResult (load, compile, encode, match, explain).
- ``bench``: throughput per matcher, thread count and batch size; its JSON and plot.
- ``summary``: what ``rules check`` and ``rules compile`` report (criterion statistics, builds).
- ``explain``: one query's values from a file or CODE=VALUE pairs, and its explanation.
- ``synth``: seeded synthetic MCT rule sets and query traces (a package; see its docstring).
- ``cli``: the ``offload rules`` commands (options; the logic is in the modules above).
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import Any

import numpy as np

from offload import _native

RuleError = _native.RuleError
NO_MATCH = _native.NO_MATCH
# Matchers every machine builds; `gpu-host` is the gpu matcher's kernel compiled for the CPU.
MATCHERS = ("linear", "nfa", "fast", "gpu-host")
# Matchers that need a device: compiling one without it raises RuntimeError with the reason.
DEVICE_MATCHERS = ("gpu",)
NFA_ORDERS = ("given", "asc", "desc", "h2")


def is_matcher(name: str) -> bool:
    """A name of MATCHERS or DEVICE_MATCHERS, or `nfa:<order>` with a level order of NFA_ORDERS."""
    return name in MATCHERS or name in DEVICE_MATCHERS or (name.startswith("nfa:") and name[4:] in NFA_ORDERS)


@functools.cache
def _preload_nvrtc() -> None:
    """Makes a pip-installed NVRTC (nvidia-cuda-nvrtc-cu12) usable. The native code loads NVRTC by
    name from the system's library path, which does not hold the wheel's folder; a library already
    loaded is found by its name, so loading the wheel's copy first is enough."""
    try:
        import nvidia.cuda_nvrtc  # type: ignore[import-not-found]
    except ImportError:
        return
    for folder in nvidia.cuda_nvrtc.__path__:
        for lib in sorted(Path(folder, "lib").glob("libnvrtc.so.*")):
            ctypes.CDLL(str(lib), mode=ctypes.RTLD_GLOBAL)
            return


def gpu_device() -> dict[str, Any]:
    """The CUDA device the `gpu` matcher runs on; RuntimeError saying what is missing if none."""
    _preload_nvrtc()
    return dict(_native.gpu_device())


def gpu_kernel_ptx(arch: str = "compute_90") -> str:
    """The gpu matcher's kernel compiled by NVRTC to PTX for `arch`: needs NVRTC, not a device.
    RuntimeError with the reason (no NVRTC) or NVRTC's log."""
    _preload_nvrtc()
    return str(_native.gpu_kernel_ptx(arch))


__all__ = [
    "DEVICE_MATCHERS",
    "MATCHERS",
    "NFA_ORDERS",
    "NO_MATCH",
    "CompiledRules",
    "MatchResult",
    "RuleError",
    "RuleSet",
    "compile",
    "gpu_device",
    "gpu_kernel_ptx",
    "is_matcher",
    "load",
]


class RuleSet:
    """A validated rule set (rule type + rules), in input order."""

    def __init__(self, native: Any) -> None:
        self._native = native

    @classmethod
    def load(cls, rule_type: str | PathLike[str], rules: str | PathLike[str]) -> RuleSet:
        """Load ERBIUM (``.xml`` rule type + CSV) or native (``.toml`` + CSV) files.

        Raises :class:`RuleError` with ``kind``, ``file``, ``line``, ``column`` and ``expected``.
        """
        return cls(_native.RuleSet.load(str(rule_type), str(rules)))

    def __len__(self) -> int:
        return len(self._native)

    def __repr__(self) -> str:
        return f"RuleSet({self.code!r}, {len(self)} rules, {len(self.criteria)} criteria)"

    @property
    def code(self) -> str:
        return str(self._native.code)

    @property
    def criteria(self) -> list[tuple[str, str, bool, int]]:
        """(code, kind, mandatory, weight) per criterion, in column order."""
        return list(self._native.criteria)

    @property
    def criterion_codes(self) -> list[str]:
        return [c[0] for c in self.criteria]

    @property
    def ids(self) -> list[str]:
        return list(self._native.ids)

    @property
    def contents(self) -> np.ndarray:
        return np.asarray(self._native.contents)

    def scores(self) -> list[int]:
        return list(self._native.scores())

    def rule_cells(self, index: int) -> list[str]:
        """The rule's cells as text in native syntax ("" = wildcard)."""
        return list(self._native.rule_cells(index))

    def criterion_stats(self) -> list[tuple[str, int, int]]:
        """(code, rules specific on it, distinct values) per criterion."""
        return list(self._native.criterion_stats())


def load(rule_type: str | PathLike[str], rules: str | PathLike[str]) -> RuleSet:
    """Load a rule set; see :meth:`RuleSet.load`."""
    return RuleSet.load(rule_type, rules)


@dataclass(frozen=True)
class MatchResult:
    """Answers for a batch: ``rule`` is the winning rule's index (-1 = no match), ``content``
    its content (0 where nothing matched: check ``matched``)."""

    rule: np.ndarray
    content: np.ndarray
    matched: np.ndarray

    def __len__(self) -> int:
        return len(self.rule)

    def to_arrow(self, rule_ids: Sequence[str] | None = None) -> Any:
        """A pyarrow Table with nulls where nothing matched."""
        import pyarrow as pa

        mask = ~self.matched
        cols = {
            "rule": pa.array(self.rule, mask=mask),
            "content": pa.array(self.content, mask=mask),
        }
        if rule_ids is not None:
            ids = [rule_ids[i] if i >= 0 else None for i in self.rule.tolist()]
            cols["rule_id"] = pa.array(ids, type=pa.string())
        return pa.table(cols)


Column = list[str] | np.ndarray | tuple[str, np.ndarray, np.ndarray]


def _what(v: Any) -> str | None:
    """How a missing query value is named in errors; None if ``v`` is a value.
    Missing: None, a float NaN (Python, NumPy), pandas NA and NaT, NumPy NaT."""
    if v is None:
        return "None"
    if isinstance(v, (float, np.floating)):
        return "nan" if v != v else None
    if isinstance(v, np.datetime64):
        return "NaT" if np.isnat(v) else None
    kind = type(v).__name__
    if kind in ("NAType", "NaTType"):  # pandas.NA, pandas.NaT (without importing pandas)
        return "<NA>" if kind == "NAType" else "NaT"
    return None


def missing_value(name: str, index: int, what: str, count: int) -> ValueError:
    """The one error for a missing query value (docs/rules.md, "Missing values")."""
    more = f"{count} queries lack" if count > 1 else "1 query lacks"
    return ValueError(
        f"query {index} criterion {name}: missing value ({what}); {more} a value for {name}; "
        "every query needs a value for every criterion (a value no rule names matches only wildcards)"
    )


# What str() makes of a missing value: a column whose texts include none of these has none.
_MISSING_TEXTS = frozenset({"None", "nan", "<NA>", "NaT"})


def _check_list(values: Sequence[Any], name: str) -> None:
    """Raises `missing_value` for the first missing value of a Python sequence."""
    first: tuple[int, str] | None = None
    count = 0
    for i, v in enumerate(values):
        if not isinstance(v, str) and (what := _what(v)) is not None:
            count += 1
            first = first or (i, what)
    if first is not None:
        raise missing_value(name, first[0], first[1], count)


def _check_arrow(arr: Any, name: str) -> None:
    """Raises `missing_value` for the first null of an Arrow Array / ChunkedArray."""
    if arr.null_count:
        import pyarrow.compute as pc

        first = pc.index(arr.is_null(), True).as_py()
        raise missing_value(name, first, "null", arr.null_count)


def _packed(arr: Any, name: str) -> tuple[str, np.ndarray, np.ndarray]:
    """An Arrow string array as ("packed", data bytes, int64 offsets): Arrow's large_string
    layout, which the native encoder reads in place (no per-value Python objects)."""
    import pyarrow as pa

    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    _check_arrow(arr, name)
    if not pa.types.is_large_string(arr.type):
        arr = arr.cast(pa.large_string())
    _, offsets_buf, data_buf = arr.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int64)[arr.offset : arr.offset + len(arr) + 1]
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    return ("packed", data, offsets)


def _whole(values: np.ndarray) -> bool:
    """True if every float is a whole number that fits an int64."""
    finite = np.isfinite(values).all()
    return bool(finite and (np.abs(values) < 2.0**63).all() and (values == np.floor(values)).all())


def _text(v: Any, name: str = "", index: int = 0) -> str:
    """A query value as the text the encoder parses; a whole float is written as an integer,
    bytes are decoded as UTF-8 (not written as ``"b'ZRH'"``; see `bytes_value`)."""
    if isinstance(v, (float, np.floating)) and v == v and abs(v) < 2.0**63 and float(v).is_integer():
        return str(int(v))
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes_value(bytes(v), name, index)
    return str(v)


def bytes_value(raw: bytes, name: str, index: int) -> str:
    """The one policy for bytes in a query, whatever the container (a Python ``bytes``, a NumPy
    ``S`` array, an Arrow binary column): UTF-8 (so ASCII) bytes are that text; any other bytes
    are an error naming the query and the criterion (docs/rules.md, "Missing values")."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(
            f"query {index} criterion {name}: bytes {raw[:16]!r} are not UTF-8 text (byte {e.start}); "
            "give the value as text, or bytes in UTF-8"
        ) from None


def _decoded(arr: Any, name: str) -> Any:
    """An Arrow binary (or string view) column as large_string; bytes that are not UTF-8 raise
    `bytes_value`'s error for the first such value."""
    import pyarrow as pa

    try:
        return arr.cast(pa.large_string())
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        for i, v in enumerate(arr.to_pylist()):
            if isinstance(v, bytes):
                bytes_value(v, name, i)
        raise


def _binary_or_view(kind: Any) -> bool:
    """Arrow types whose values are decoded to text: binary of every layout, and string_view."""
    import pyarrow as pa

    tests = ("is_binary", "is_large_binary", "is_fixed_size_binary", "is_binary_view", "is_string_view")
    return any(getattr(pa.types, t, lambda _: False)(kind) for t in tests)


def _to_column(values: Any, name: str) -> Column:
    """Turn one query column into what the native encoder takes: an int64 array (integers,
    or day numbers for dates), Arrow-style packed strings, or a list of str. A missing value
    (None, NaN, NA, NaT, an Arrow null) is an error naming the query and the criterion, whatever
    the container (docs/rules.md, "Missing values")."""
    if hasattr(values, "to_numpy") and hasattr(values, "type"):  # pyarrow Array/ChunkedArray
        import pyarrow as pa

        _check_arrow(values, name)
        if pa.types.is_integer(values.type) or pa.types.is_date(values.type):
            values = values.to_numpy(zero_copy_only=False)
        elif pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
            return _packed(values, name)
        elif _binary_or_view(values.type):
            return _packed(_decoded(values, name), name)
        else:
            values = values.to_pylist()
    elif hasattr(values, "to_pylist"):
        values = values.to_pylist()
    elif hasattr(values, "to_numpy"):  # pandas Series
        values = values.to_numpy()
    if isinstance(values, np.ndarray):
        if np.issubdtype(values.dtype, np.datetime64):
            nat = np.isnat(values)
            if nat.any():
                raise missing_value(name, int(np.argmax(nat)), "NaT", int(nat.sum()))
            return np.ascontiguousarray(values.astype("datetime64[D]").astype(np.int64))
        if np.issubdtype(values.dtype, np.integer):
            return np.ascontiguousarray(values.astype(np.int64))
        if np.issubdtype(values.dtype, np.floating):
            nan = np.isnan(values)
            if nan.any():
                raise missing_value(name, int(np.argmax(nan)), "nan", int(nan.sum()))
            if _whole(values):  # 150.0 is the number 150 (pandas makes ints float), not "150.0"
                return np.ascontiguousarray(values.astype(np.int64))
        if values.dtype.kind == "S":  # NumPy bytes: decoded by Arrow, as a binary column is
            import pyarrow as pa

            return _packed(_decoded(pa.array(values, type=pa.binary()), name), name)
        if values.dtype.kind in "OU":
            import pyarrow as pa

            try:  # strings only: let Arrow pack them (C++), far cheaper than one object each
                packed = pa.array(values, type=pa.large_string())
            except (pa.ArrowInvalid, pa.ArrowTypeError):
                pass
            else:
                if not packed.null_count:
                    return _packed(packed, name)
        values = values.tolist()
    if len(values) and isinstance(values[0], bytes):  # bytes: decoded by Arrow (C++), not one by one
        import pyarrow as pa

        try:
            raw = pa.array(values, type=pa.binary())
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            pass  # not all bytes: each value as it is, below
        else:
            if not raw.null_count:
                return _packed(_decoded(raw, name), name)
    out = [v if isinstance(v, str) else _text(v, name, i) for i, v in enumerate(values)]
    if not _MISSING_TEXTS.isdisjoint(out):  # a C loop; the slow check only where one may hide
        _check_list(values, name)
    return out


class CompiledRules:
    """A rule set compiled for one matcher (see MATCHERS and DEVICE_MATCHERS).

    RuntimeError if the matcher cannot run here (``gpu`` without a device), with the reason.
    """

    def __init__(self, rules: RuleSet, matcher: str = "fast") -> None:
        if not is_matcher(matcher):
            raise ValueError(
                f"unknown matcher {matcher!r}; expected one of {', '.join(MATCHERS + DEVICE_MATCHERS)} "
                f"or nfa:<{'|'.join(NFA_ORDERS)}>"
            )
        if matcher in DEVICE_MATCHERS:
            _preload_nvrtc()
        self.rules = rules
        self._native = _native.CompiledRules(rules._native, matcher)
        self._contents = rules.contents

    @property
    def matcher(self) -> str:
        return str(self._native.matcher)

    @property
    def compile_seconds(self) -> float:
        return float(self._native.compile_seconds)

    def memory_bytes(self) -> int:
        return int(self._native.memory_bytes())

    def stats(self) -> dict[str, Any]:
        return dict(self._native.stats())

    def _columns(self, queries: Any) -> list[Column]:
        codes = self.rules.criterion_codes
        if isinstance(queries, Mapping) or hasattr(queries, "column_names") or hasattr(queries, "columns"):
            names = set(queries.column_names if hasattr(queries, "column_names") else list(queries.keys()))
            missing = [c for c in codes if c not in names]
            if missing:
                raise ValueError(f"queries lack columns for criteria {', '.join(missing)}")
            return [_to_column(queries[c], c) for c in codes]
        cols = list(queries)
        if len(cols) != len(codes):
            raise ValueError(f"expected {len(codes)} query columns (one per criterion), got {len(cols)}")
        return [_to_column(col, c) for c, col in zip(codes, cols, strict=True)]

    def encode(self, queries: Any) -> np.ndarray:
        """Encode raw query columns (mapping / DataFrame / Table keyed by criterion code, or a
        list of columns in criterion order) into an (n, width) uint32 array, reusable for many
        matches."""
        return np.asarray(self._native.encode(self._columns(queries)))

    def dictionary(self) -> bytes:
        """The encoder's dictionary (``offload_rules::EncoderDictionary``, bytes): what a client
        needs to encode queries as :meth:`encode` does without the rules
        (``_native.DictionaryEncoder``; ``offload serve`` sends it to clients that ask)."""
        return bytes(self._native.dictionary())

    def match(self, queries: Any, threads: int = 1) -> MatchResult:
        """Match raw query columns, or an already encoded uint32 array from :meth:`encode`."""
        if not isinstance(threads, int) or threads < 1:
            raise ValueError(f"threads must be an integer of 1 or more, got {threads!r}")
        if isinstance(queries, np.ndarray) and queries.dtype == np.uint32 and queries.ndim == 2:
            codes = queries
        else:
            codes = self.encode(queries)
        raw = np.asarray(self._native.match_encoded(np.ascontiguousarray(codes), threads))
        matched = raw != NO_MATCH
        rule = np.where(matched, raw.astype(np.int64), -1)
        content = np.where(
            matched, self._contents[np.where(matched, raw, 0)] if len(self._contents) else 0, 0
        )
        return MatchResult(rule=rule, content=content.astype(np.int64), matched=matched)

    def explain(self, values: Mapping[str, str] | Sequence[str]) -> dict[str, Any]:
        """Winner, score, matched criteria and runner-up for one query of raw values."""
        codes = self.rules.criterion_codes
        if isinstance(values, Mapping):
            # Like match(): other keys (a QUERY_ID, say) are ignored, every criterion is needed.
            missing = [c for c in codes if c not in values]
            if missing:
                raise ValueError(f"explain needs a value for every criterion; missing {', '.join(missing)}")
            raw = [values[c] for c in codes]
        else:
            raw = list(values)
            if len(raw) != len(codes):
                raise ValueError(f"explain needs {len(codes)} values ({', '.join(codes)}), got {len(raw)}")
        for c, v in zip(codes, raw, strict=True):
            if not isinstance(v, str) and (what := _what(v)) is not None:
                raise ValueError(
                    f"criterion {c}: missing value ({what}); explain needs a value for every criterion"
                )
        vals = [v if isinstance(v, str) else _text(v, c) for c, v in zip(codes, raw, strict=True)]
        return dict(self._native.explain(vals))


def compile(rules: RuleSet, matcher: str = "fast") -> CompiledRules:
    """Compile a rule set for a matcher."""
    return CompiledRules(rules, matcher)
