"""A model directory (MLP weights + embedding table files) and the engine that runs one strategy
over it. The per-lookup work is `offload._native.RecsysEngine` (crates/recsys).

Layout of a model directory::

    DIR/model.safetensors     MLP weights with DLRM's tensor names, the spec in the metadata
    DIR/tables/t000.emb ...   one table file per embedding table (crates/recsys/src/table.rs)
    DIR/manifest.json         spec name, rows per table, seed, bytes, the SHA-256 of the weights
                              file and what each table's header says (both checked on open)

The weights are checked as the tables are: a damaged `model.safetensors` (a flipped byte turns a
weight into 1e38 and every prediction into 1.0) is refused on open, naming the file. A manifest
made before weights had a checksum opens, and says "weights not verifiable" (the tables, the
bulk of a model, are still checked); recreating the model adds the checksum.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from offload import _native
from offload.files import WriteError, atomic_dir, describe, write_text
from offload.recsys.models import Model, ModelSpec

STRATEGIES: tuple[str, ...] = tuple(_native.RECSYS_STRATEGIES)
MODES = ("disk", "flash")
DEVICES = ("in-process", "process")
MEMORY_KEYS = ("memory_limit_bytes", "memory_cgroup", "memory_reason")
RecsysError = _native.RecsysError

STRATEGY_HELP = {
    "dram": "all tables in memory (the ideal)",
    "ssd-s": "file reads through the page cache, DRAM held to 1/4 of the tables",
    "ssd-m": "the same with 1/2",
    "emb-mmio": "page-granular O_DIRECT reads into user space, sums on the host",
    "emb-pagesum": "page reads, sums in the device",
    "emb-vectorsum": "vector-granular reads, sums in the device",
    "recssd": "host LRU cache of hot vectors + in-device page-granular sums of the misses",
    "rm-ssd": "everything in the device: lookups, sums, bottom and top MLPs",
}


WEIGHTS_FILE = "model.safetensors"
NOT_VERIFIABLE = "not verifiable"


@dataclass(frozen=True)
class ModelDir:
    """A model directory on disk. `weights_sha256` is the manifest's checksum of the weights
    (None for a model made before weights had one: "not verifiable"); `weights_problem` says why
    the weights file does not match it, where `open(check_weights=False)` let that through."""

    path: Path
    spec: ModelSpec
    rows: list[int]
    seed: int
    weights_sha256: str | None = None
    weights_problem: str | None = None

    @property
    def table_paths(self) -> list[Path]:
        return [self.path / "tables" / f"t{t:03d}.emb" for t in range(self.spec.tables)]

    @property
    def table_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.table_paths)

    @property
    def weights_status(self) -> str:
        """ "verified", "damaged" or "not verifiable" (no checksum in the manifest)."""
        if self.weights_sha256 is None:
            return NOT_VERIFIABLE
        return "damaged" if self.weights_problem else "verified"

    def model(self) -> Model:
        """The weights, checked against the manifest's checksum as they are read (a ValueError
        naming the file if they do not match)."""
        problem = weights_problem(self.path, self.weights_sha256)
        if problem:
            raise ValueError(problem)
        return Model.load(self.path / WEIGHTS_FILE)

    @staticmethod
    def open(path: Path | str, *, check_weights: bool = True) -> ModelDir:
        """Opens a model directory and checks that its parts belong together: the manifest, the
        weights against its checksum, the model's spec, and every table's header (version, rows,
        dim, dtype, the fingerprint of its row checksums) against the manifest. Every
        disagreement is a ValueError naming the file. `check_weights=False` (`recsys info`, which
        reports it) records damaged weights in `weights_problem` instead of refusing them."""
        path = Path(path)
        man = path / "manifest.json"
        if not man.exists():
            raise FileNotFoundError(f"{man}: no manifest: make one with `offload recsys create --out {path}`")
        m = read_manifest(man)
        problem = weights_problem(path, m.get("weights_sha256"))
        if problem and check_weights:
            raise ValueError(problem)
        try:
            model = Model.load(path / WEIGHTS_FILE)
        except ValueError:  # a damaged header: the checksum's words say more
            if problem:
                raise ValueError(problem) from None
            raise
        if m["spec"] != model.spec.name or len(m["tables"]) != model.spec.tables:
            raise ValueError(
                f"{man}: describes {m['spec']!r} with {len(m['tables'])} tables, but "
                f"{path / WEIGHTS_FILE} is {model.spec.name!r} with {model.spec.tables}"
            )
        rows = [int(t["rows"]) for t in m["tables"]]
        d = ModelDir(path, model.spec, rows, int(m["seed"]), m.get("weights_sha256"), problem)
        for want, p in zip(m["tables"], d.table_paths, strict=True):
            check_table(p, want | {"dim": model.spec.dim})
        return d


def weights_sha256(path: Path) -> str:
    """The SHA-256 of a weights file, hex (12 MiB for RMC3's MLPs: ~10 ms)."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def weights_problem(model_dir: Path, want: str | None) -> str | None:
    """Why the weights file of `model_dir` does not match the manifest's checksum `want`, in one
    line naming the file and what to do; None when it matches or there is no checksum."""
    if want is None:
        return None
    path = model_dir / WEIGHTS_FILE
    if not path.exists():
        return f"{path}: no such weights file; put it back or recreate the model"
    got = weights_sha256(path)
    if got == want:
        return None
    return (
        f"{path}: the weights do not match their checksum in manifest.json (sha256 {got[:16]}…, "
        f"expected {want[:16]}…): the file is damaged or was replaced; restore it, or recreate the "
        f"model (offload recsys create --out {model_dir} --force, with the --model, --rows and --seed "
        "of manifest.json)"
    )


MANIFEST_VERSION = 2
# What the manifest records of each table and compares with its header on open.
TABLE_KEYS = ("version", "rows", "dim", "dtype", "row_bytes", "sums_crc32c")


def read_manifest(man: Path) -> dict[str, Any]:
    """The manifest, or a ValueError saying which file and what is wrong with it."""
    redo = f"recreate the model: offload recsys create --out {man.parent} --force"
    try:
        m = json.loads(man.read_text())
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{man}: cannot read the manifest: {e}") from None
    except json.JSONDecodeError as e:
        what = "empty" if not man.stat().st_size else f"not valid JSON ({e})"
        raise ValueError(f"{man}: the manifest is {what}; {redo}") from None
    if not isinstance(m, dict):
        raise ValueError(f"{man}: the manifest is not a JSON object; {redo}")
    if m.get("manifest_version") != MANIFEST_VERSION or not isinstance(m.get("tables"), list):
        raise ValueError(f"{man}: a manifest of an older format (tables without row checksums); {redo}")
    try:
        str(m["spec"]), int(m["seed"])
        for t in m["tables"]:
            for k in TABLE_KEYS:
                t[k]
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{man}: the manifest lacks {e}; {redo}") from None
    sha = m.get("weights_sha256")  # absent in manifests made before weights had a checksum
    if sha is not None and not (isinstance(sha, str) and re.fullmatch(r"[0-9a-f]{64}", sha)):
        raise ValueError(f"{man}: weights_sha256 is not a SHA-256 (64 hex digits); {redo}")
    return m


def check_table(path: Path, want: dict[str, Any]) -> dict[str, Any]:
    """A table's header against what the manifest says of it; a ValueError naming the table and
    every mismatch (a table of another model, a damaged or old file)."""
    if not path.exists():
        raise FileNotFoundError(f"{path}: table file missing")
    h = _native.recsys_table_header(str(path))
    bad = [f"{k} {h[k]} (the manifest says {want[k]})" for k in TABLE_KEYS if k in want and h[k] != want[k]]
    if bad:
        raise ValueError(
            f"{path}: does not belong to this model: its header has "
            + ", ".join(bad)
            + "; put back the model's own table or recreate the model"
        )
    return dict(h)


def min_table_bytes(spec: ModelSpec) -> int:
    """The smallest --size: one row in every table."""
    return spec.tables * spec.dim * 4


def rows_for_bytes(spec: ModelSpec, total_bytes: int) -> list[int]:
    """Rows per table so that the tables hold about `total_bytes` in all (equal tables); a
    ValueError, saying the minimum, where that is less than one row per table."""
    row = spec.dim * 4
    if total_bytes < min_table_bytes(spec):
        raise ValueError(
            f"size {total_bytes} B is too small for {spec.name}: {spec.tables} tables of {row} B rows "
            f"need at least {min_table_bytes(spec)} B (one row per table)"
        )
    per_table = total_bytes // (spec.tables * row)
    return [int(per_table)] * spec.tables


def create(
    out: Path | str,
    spec: ModelSpec,
    rows: list[int],
    seed: int = 0,
    progress: Callable[[int], None] | None = None,
    *,
    overwrite: bool = True,
) -> ModelDir:
    """Writes a random model (DLRM's init) and its tables (`RM_create_table`) into `out`, whole or
    not at all: everything is written under a temporary sibling directory (every file fsynced)
    and renamed into place when complete (`offload.files.atomic_dir`). `overwrite=False` refuses
    an existing non-empty `out` (FileExistsError; the CLI's default without --force); with it, an
    old model is replaced only once the new one is complete. `progress(rows_written_total)` is
    called as the tables fill. A failed write is a WriteError naming the file."""
    out = Path(out)
    if len(rows) != spec.tables:
        raise ValueError(f"{len(rows)} row counts for {spec.tables} tables")
    if any(int(n) < 1 for n in rows):
        raise ValueError(f"every table needs at least one row, got {list(rows)}")
    with atomic_dir(out, overwrite=overwrite) as tmp:
        try:
            _write_model(tmp, spec, rows, seed, progress)
        except (RecsysError, OSError) as e:  # name the file where it would be, not the temporary
            raise _located(e, tmp, out) from None
    return ModelDir.open(out)


def _located(e: Exception, tmp: Path, out: Path) -> WriteError:
    msg = str(e).replace(str(tmp), str(out))
    if isinstance(e, WriteError):
        return WriteError(e.errno, msg)
    if isinstance(e, OSError):
        return WriteError(e.errno, describe(str(e.filename or out).replace(str(tmp), str(out)), e))
    # A table writer's error (Rust): "PATH: OP: MESSAGE (os error N)".
    found = re.search(r"\(os error (\d+)\)", msg)
    code = int(found.group(1)) if found else errno.EIO
    return WriteError(code, describe(msg.split(": ", 1)[0], OSError(code, os.strerror(code))))


def _write_model(
    out: Path, spec: ModelSpec, rows: list[int], seed: int, progress: Callable[[int], None] | None
) -> None:
    (out / "tables").mkdir(parents=True, exist_ok=True)
    model = Model.random(spec, rows=[1] * spec.tables, seed=seed, with_tables=False)
    model.save(out / WEIGHTS_FILE)
    done = 0
    d = ModelDir(out, spec, list(rows), seed)
    tables = []
    for t, (n, p) in enumerate(zip(rows, d.table_paths, strict=True)):
        base = done

        def tick(k: int, base: int = base) -> None:
            if progress:
                progress(base + k)

        _native.recsys_create_table(str(p), int(n), spec.dim, seed * 1_000_003 + t, tick)
        h = _native.recsys_table_header(str(p))
        tables.append({"file": f"tables/{p.name}"} | {k: h[k] for k in TABLE_KEYS})
        done += n
    manifest = {
        "manifest_version": MANIFEST_VERSION,
        "spec": spec.name,
        "rows": list(rows),
        "seed": seed,
        "table_bytes": d.table_bytes,
        "weights_sha256": weights_sha256(out / WEIGHTS_FILE),
        "tables": tables,
    }
    write_text(out / "manifest.json", json.dumps(manifest, indent=2))


def kernel_shape(spec: ModelSpec) -> Any:
    """`spec` as the kernel search sees it (a `kernels.MLPShape`): dense features that skip a
    bottom MLP (Wide&Deep's 512) still feed the decomposed top layer 0 as its L_b."""
    from offload.recsys import fpga as K

    bottom = (spec.dense_width, *spec.bottom) if spec.dense_width else ()
    return K.MLPShape(spec.name, bottom, tuple(spec.top), spec.dim, spec.tables, spec.lookups)


def kernel_design_cycles(spec: ModelSpec, composition: str = "sum") -> tuple[int, int, int]:
    """Bottom′, L_e and top′ cycles per sample of the searched kernel design (eq. 1), the device
    MLP's time in `flash` mode; (0, 0, 0) — measured on the host instead — where no design is
    feasible."""
    from offload.recsys import fpga as K

    shape = kernel_shape(spec)
    try:
        d = K.search(shape, composition=composition)  # type: ignore[arg-type]
    except (K.InfeasibleError, ValueError):
        return (0, 0, 0)
    per_sample = (d.t_bot, d.kernel("L_e").cycles, d.t_top)
    return tuple(round(c / d.n_batch) for c in per_sample)  # type: ignore[return-value]


class Engine:
    """One strategy in one timing mode over a model directory. In `flash` mode rm-ssd's device
    MLP takes the kernel search's cycles unless `device_mlp_cycles` says otherwise.

    `device="process"` runs the device side of emb-pagesum, emb-vectorsum, recssd and rm-ssd in
    its own process (``python -m offload.recsys.device``) behind a shared-memory channel, pinned
    to `device_cpu` (default: the last CPU) and, where cgroup v1 allows, held to
    `device_memory_bytes` (the device joins a memory cgroup made by `offload.host.cgroups`);
    see `device_info`. Answers and I/O counters are the same as in process.
    Close the engine (or use it as a context manager) to stop the device process."""

    def __init__(
        self,
        model_dir: ModelDir,
        strategy: str,
        mode: str = "disk",
        *,
        flash: dict[str, Any] | None = None,
        queue_depth: int = 64,
        host_cache_vectors: int = 8192,
        device_mlp_cycles: tuple[int, int, int] = (0, 0, 0),
        device: str = "in-process",
        device_cpu: int | None = None,
        device_memory_bytes: int | None = None,
        device_timeout_s: float = 60.0,
    ) -> None:
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {strategy!r}; one of {', '.join(STRATEGIES)}")
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; one of {', '.join(MODES)}")
        if device not in DEVICES:
            raise ValueError(f"unknown device {device!r}; one of {', '.join(DEVICES)}")
        model = model_dir.model()
        self.spec = model.spec
        if strategy == "rm-ssd" and mode == "flash" and device_mlp_cycles == (0, 0, 0):
            device_mlp_cycles = kernel_design_cycles(self.spec)
        self.strategy = strategy
        self.mode = mode
        self.device = device
        from offload.recsys import device as D

        cgroup, self._memory = None, dict.fromkeys(MEMORY_KEYS)
        if device == "process":
            cgroup, self._memory = D.budget_cgroup(device_memory_bytes)
        command = D.command(cgroup, device_memory_bytes) if device == "process" else None
        try:
            self._native = _native.RecsysEngine(
                strategy,
                mode,
                [str(p) for p in model_dir.table_paths],
                self.spec.dense_width,
                [(np.ascontiguousarray(w), np.ascontiguousarray(b)) for w, b in model.layers("bot")],
                [(np.ascontiguousarray(w), np.ascontiguousarray(b)) for w, b in model.layers("top")],
                self.spec.dim,
                queue_depth=queue_depth,
                host_cache_vectors=host_cache_vectors,
                flash=flash,
                device_mlp=device_mlp_cycles,
                device_command=command,
                device_cpu=device_cpu,
                device_timeout_s=device_timeout_s,
            )
        except BaseException:
            if cgroup is not None:
                D.release(cgroup)
            raise
        # Closing (or collecting) the engine stops the device, then removes its memory cgroup.
        self._close = weakref.finalize(self, _close_device, self._native, cgroup)

    def infer(
        self, dense: np.ndarray, offsets: list[np.ndarray], indices: list[np.ndarray]
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Predictions (B,) and {stages, io, latency_s, interval_s} for one batch. Inputs as
        PyTorch's EmbeddingBag takes them: per table, offsets (B + 1) and indices."""
        return self._native.infer(*self._batch(dense, offsets, indices))

    def _batch(
        self, dense: np.ndarray, offsets: list[np.ndarray], indices: list[np.ndarray]
    ) -> tuple[np.ndarray, list[np.ndarray], list[np.ndarray]]:
        dense = np.ascontiguousarray(dense, dtype=np.float32)
        if dense.ndim != 2:
            raise ValueError(f"dense must be (batch, {self.spec.dense_width}), got shape {dense.shape}")
        offs = [np.ascontiguousarray(o, dtype=np.int64) for o in offsets]
        idx = [np.ascontiguousarray(i, dtype=np.int64) for i in indices]
        return dense, offs, idx

    def send_inputs(self, dense: np.ndarray, offsets: list[np.ndarray], indices: list[np.ndarray]) -> None:
        """`RM_send_inputs` (rm-ssd): the device starts on this batch while the host goes on.
        Send the next batch before reading this one's outputs to overlap them (at most two in
        flight with `device="process"`); `read_outputs` returns them in order."""
        dense, offs, idx = self._batch(dense, offsets, indices)
        self._native.send_inputs(dense, offs, idx)

    def read_outputs(self) -> tuple[np.ndarray, dict[str, Any]]:
        """`RM_read_outputs`: predictions and info of the oldest batch sent, as `infer` gives."""
        return self._native.read_outputs()

    def warm_page_cache(self, table: int, rows: np.ndarray) -> tuple[int, int]:
        """Flash mode, ssd-s / ssd-m: the pages of these lookups enter the modelled page cache as
        reads would put them there, unread and untimed (steady state before measuring). Returns
        (pages held, capacity); (0, 0) for strategies and modes without that cache."""
        return tuple(self._native.warm_page_cache(int(table), np.ascontiguousarray(rows, dtype=np.int64)))  # type: ignore[return-value]

    @property
    def extents_source(self) -> list[str]:
        return list(self._native.extents_source)

    @property
    def device_info(self) -> dict[str, Any]:
        """Where the device side runs: `at`, `pid`, `cpu` (or `cpu_reason`), `memory_limit_bytes`
        and `memory_cgroup` (or `memory_reason`), the channel and its area size."""
        info = dict(self._native.device_info)
        spawned = info["at"] == "process"
        return info | (self._memory if spawned else dict.fromkeys(MEMORY_KEYS))

    @property
    def channel_bytes(self) -> dict[str, int]:
        """Payload bytes batches moved through the device channel: to_device, from_device."""
        return dict(self._native.channel_bytes)

    def close(self) -> None:
        """Stops the device process, if any (idempotent)."""
        self._close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _close_device(native: Any, cgroup: Path | None) -> None:
    native.close()
    if cgroup is not None:
        from offload.recsys import device as D

        D.release(cgroup)
