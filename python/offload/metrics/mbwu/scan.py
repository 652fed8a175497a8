"""The Arrow scan workload (``pyarrow.dataset``, a filter over Parquet files): the data set,
written whole, and a step that scans pass after pass with the page cache evicted before each."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from offload.metrics.mbwu.kv import bytes_on_disk


def make_scan_data(root: Path, rows: int = 4_000_000, files: int = 8, seed: int = 7) -> dict[str, Any]:
    """Parquet files of (id int64, key int64, value float64, tag string) under ``root``: several
    files and row groups, so a scan has parallel work for several threads. Pages carry CRC32
    checksums, verified by every scan; the directory appears whole or not at all (a full disk
    is a `WriteError` naming the file, and leaves nothing behind)."""

    from offload.files import atomic_dir

    if rows < files or files < 1:
        raise ValueError(f"need at least one row per file, got {rows} rows in {files} files")
    with atomic_dir(root, overwrite=True) as tmp:
        _write_scan_files(tmp, rows, files, seed)
    return {"rows": rows, "files": files, "bytes_on_disk": bytes_on_disk(root)}


def _write_scan_files(root: Path, rows: int, files: int, seed: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from offload.files import atomic_write

    rng = np.random.default_rng(seed)
    per = rows // files
    tags = np.array([f"tag-{i:04d}" for i in range(256)], dtype=object)
    for f in range(files):
        n = per if f < files - 1 else rows - per * (files - 1)
        t = pa.table({
            "id": np.arange(f * per, f * per + n, dtype=np.int64),
            "key": rng.integers(0, 1 << 40, n),
            "value": rng.random(n),
            "tag": tags[rng.integers(0, len(tags), n)],
        })  # fmt: skip
        with atomic_write(root / f"part-{f:03d}.parquet", "wb") as out:
            pq.write_table(t, out, row_group_size=128 * 1024, write_page_checksum=True)


def _evict(root: Path) -> None:
    """Drops the files' pages from the page cache, so each pass reads the device."""
    for p in root.glob("*.parquet"):
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _culprit(root: Path) -> Path:
    """The first file under ``root`` that does not read whole (Arrow's scan error names none);
    ``root`` itself when each reads alone."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for p in sorted(root.glob("*.parquet")):
        try:
            pq.read_table(p, page_checksum_verification=True)
        except (pa.ArrowException, OSError):
            return p
    return root


def _scan_error(e: BaseException) -> str:
    """One line: the file named where Arrow names it, and a page checksum said as such."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    if "CRC checksum verification failed" in str(e) or "verify page integrity" in str(e):
        return f"a page's checksum does not match its bytes (damaged after it was written): {text}"
    return text


def run_scan_step(root: Path, threads: int, seconds: float = 3.0, cold: bool = True) -> list[float]:
    """Scans the data set with a filter (value < 0.01) at ``threads`` CPU and I/O threads, pass
    after pass for about ``seconds`` (at least 3 passes); returns each pass's rows/s."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    if not any(root.glob("*.parquet")):
        raise ValueError(f"no Parquet files under {root}; run make_scan_data first")
    old = pa.cpu_count(), pa.io_thread_count()
    pa.set_cpu_count(threads)
    pa.set_io_thread_count(threads)
    opts = ds.ParquetFragmentScanOptions(page_checksum_verification=True)  # a damaged page is an error
    try:
        data = ds.dataset(root, format=ds.ParquetFileFormat(default_fragment_scan_options=opts))
        total = data.count_rows()  # from the footers: the rows each pass reads
        out: list[float] = []
        end = time.monotonic() + seconds
        while time.monotonic() < end or len(out) < 3:
            if cold:
                _evict(root)
            t = time.perf_counter()
            data.to_table(columns=["id", "value"], filter=pc.field("value") < 0.01, use_threads=True)
            out.append(total / (time.perf_counter() - t))
        return out
    except (pa.ArrowException, OSError) as e:
        raise ValueError(f"the scan of {_culprit(root)} failed: {_scan_error(e)}") from None
    finally:
        pa.set_cpu_count(old[0])
        pa.set_io_thread_count(old[1])
