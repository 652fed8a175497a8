"""Table files (Parquet, Arrow IPC) as the nodes and their clients write and read them: whole or
not at all, and checked on the way back in.

Parquet is written with a CRC32 per page (``write_page_checksum``) through
:func:`offload.files.atomic_write`, and read with every page's checksum verified, so a file
whose bytes changed after it was written is refused, naming the file, instead of loading as
wrong numbers (64 flipped bytes in a page of ``x`` in [0, 1) once summed to -5.1e252). Files
written without page checksums (by other tools, or by this one before) carry nothing to verify:
they load as their pages decode, and only damage the decoder itself trips on is caught.
DataFusion never opens these files: the nodes read them here and hand it the tables.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from offload.files import atomic_write

FORMATS = {".parquet": "parquet", ".arrow": "ipc", ".feather": "ipc"}


class DamagedFile(ValueError):
    """A table file that cannot be read whole; the message names the file and says why, and
    carries none of its contents."""


def write_parquet(table: pa.Table, path: str | Path, **options: object) -> Path:
    """Writes ``table`` as Parquet with page checksums, atomically (``offload.files``)."""
    path = Path(path)
    with atomic_write(path, "wb") as f:
        pq.write_table(table, f, write_page_checksum=True, **options)  # type: ignore[arg-type]
    return path


def parquet_format() -> pads.ParquetFileFormat:
    """The dataset format that verifies every page's checksum where the file has one."""
    opts = pads.ParquetFragmentScanOptions(page_checksum_verification=True)
    return pads.ParquetFileFormat(default_fragment_scan_options=opts)


def format_of(path: str | Path) -> str | None:
    """``parquet`` or ``ipc`` by the file's suffix; None for anything else."""
    return FORMATS.get(Path(path).suffix.lower())


def read(path: str | Path, name: str | None = None) -> pa.Table:
    """The table in a Parquet or Arrow IPC file, pages verified; `DamagedFile` naming it (as
    ``name`` where given: what a peer may be told) when it cannot be read whole."""
    path = Path(path)
    shown = name or str(path)
    fmt = format_of(path)
    if fmt is None:
        raise DamagedFile(f"{shown}: give a .parquet, .arrow or .feather file")
    try:
        return pads.dataset(path, format=parquet_format() if fmt == "parquet" else "ipc").to_table()
    except (pa.ArrowException, OSError) as e:
        raise DamagedFile(f"{shown}: {_why(e, fmt)}") from None


def _why(e: BaseException, fmt: str) -> str:
    text = str(e)
    if "CRC checksum verification failed" in text or "verify page integrity" in text:
        return "damaged: a page's checksum does not match its bytes (the file changed after it was written)"
    if isinstance(e, FileNotFoundError):
        return "no such file"
    if isinstance(e, PermissionError):
        return "permission denied"
    return f"not a readable {fmt} file (damaged or truncated)"
