"""Table files (Parquet, Arrow IPC) as the nodes and their clients write and read them: whole or
not at all, and checked on the way back in.

Parquet is written with a CRC32 per page (``write_page_checksum``) through
:func:`offload.files.atomic_write`, and read with every page's checksum verified, so a file
whose bytes changed after it was written is refused, naming the file, instead of loading as
wrong numbers (64 flipped bytes in a page of ``x`` in [0, 1) once summed to -5.1e252). Files
written without page checksums (by other tools, or by this one before) carry nothing to verify:
they load as their pages decode, and only damage the decoder itself trips on is caught.
DataFusion never opens these files: the nodes read them here and hand it the tables.
:func:`integrity` says which kind a file is (the page headers hold a CRC or not), so a node says
"not verifiable: no page checksums" of the second kind, refuses it where asked to, and
:func:`rewrite_checksummed` rewrites one with them.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from offload.files import atomic_write

FORMATS = {".parquet": "parquet", ".arrow": "ipc", ".feather": "ipc"}
"""What a node reads, by suffix."""
WRITTEN = {".parquet": "Parquet", ".arrow": "Arrow IPC", ".feather": "Arrow IPC", ".csv": "CSV"}
"""What :func:`write` writes, by suffix (CSV too: a query's result is read elsewhere)."""


RESULT_KEY = b"offload.result"
"""The schema metadata key `offload node query --save` marks its Parquet and Arrow files with
(what ran, where): a file holding it is one the tool wrote, which ``--force`` may replace."""


class DamagedFile(ValueError):
    """A table file that cannot be read whole; the message names the file and says why, and
    carries none of its contents."""


def write_parquet(table: pa.Table, path: str | Path, **options: object) -> Path:
    """Writes ``table`` as Parquet with page checksums, atomically (``offload.files``)."""
    path = Path(path)
    with atomic_write(path, "wb") as f:
        pq.write_table(table, f, write_page_checksum=True, **options)  # type: ignore[arg-type]
    return path


def write(table: pa.Table, path: str | Path, mark: str | None = None) -> Path:
    """Writes ``table`` whole in the format its suffix names (:data:`WRITTEN`), atomically:
    ValueError for a suffix it does not know or a table the format cannot hold (CSV and nested
    columns), OSError for the disk; either way nothing was left half-written. ``mark``: put in
    the schema's metadata under :data:`RESULT_KEY` (Parquet and Arrow; CSV has no place for it)."""
    import pyarrow.csv as pacsv

    path = Path(path)
    kind = WRITTEN.get(path.suffix.lower())
    if kind is None:
        raise ValueError(f"{path}: give a file ending in {', '.join(WRITTEN)}")
    if mark is not None and kind != "CSV":
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), RESULT_KEY: mark.encode()})
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "Parquet":
        return write_parquet(table, path)
    try:
        with atomic_write(path, "wb") as f:
            if kind == "CSV":
                pacsv.write_csv(table, f)
            else:
                with pa.ipc.new_file(f, table.schema) as w:
                    w.write_table(table)
    except pa.ArrowException as e:  # CSV has no form for nested columns
        from offload.dataservices.plans import first_line

        raise ValueError(f"cannot write {path} as {kind}: {first_line(e)}; nothing was written") from None
    return path


def marked(path: str | Path) -> bool:
    """Whether ``path`` is a Parquet or Arrow file whose schema holds :data:`RESULT_KEY` (one that
    `query --save` wrote); anything else, a CSV file or one that cannot be read, is not."""
    path = Path(path)
    kind = WRITTEN.get(path.suffix.lower())
    try:
        if kind == "Parquet":
            schema = pq.read_schema(path)
        elif kind == "Arrow IPC":
            with pa.memory_map(str(path)) as f:
                schema = pa.ipc.open_file(f).schema
        else:
            return False
    except (pa.ArrowException, OSError, ValueError):
        return False
    return RESULT_KEY in (schema.metadata or {})


VERIFIED = "verified: page checksums"
NOT_VERIFIABLE = "not verifiable: no page checksums"
NOT_VERIFIABLE_IPC = "not verifiable: Arrow IPC has no checksums"
INTEGRITY_KEY = b"offload.integrity"
"""The schema metadata key an upload carries its file's :func:`integrity` under (the node takes
it off the table and keeps it with the data set)."""


def integrity(path: str | Path) -> str:
    """What reading ``path`` can check: :data:`VERIFIED` where every column chunk's first page
    carries a CRC (a changed byte is then refused), else :data:`NOT_VERIFIABLE` (pyarrow's
    default, and most writers': changed values load silently), or for Arrow IPC
    :data:`NOT_VERIFIABLE_IPC`. DamagedFile where the file cannot be read as Parquet."""
    path = Path(path)
    if format_of(path) != "parquet":
        return NOT_VERIFIABLE_IPC
    try:
        meta = pq.ParquetFile(path).metadata
        with open(path, "rb") as f:
            for rg in range(meta.num_row_groups):
                for c in range(meta.num_columns):
                    col = meta.row_group(rg).column(c)
                    offset = col.dictionary_page_offset if col.has_dictionary_page else col.data_page_offset
                    f.seek(offset or col.data_page_offset)
                    if not _has_crc(f.read(64)):
                        return NOT_VERIFIABLE
    except (pa.ArrowException, OSError) as e:
        raise DamagedFile(f"{path}: {_why(e, 'parquet')}") from None
    return VERIFIED


def _has_crc(header: bytes) -> bool:
    """Whether a Parquet page header (Thrift compact protocol) holds its ``crc`` (field 4): the
    fields come in order, 1-3 (type, sizes) are i32 varints."""
    pos, fid = 0, 0
    while pos < len(header):
        b = header[pos]
        pos += 1
        if b == 0:  # the struct's end: no crc
            return False
        delta, kind = b >> 4, b & 0x0F
        if delta == 0:
            return False  # a long-form field id: not one of the first four
        fid += delta
        if fid == 4:
            return kind == 5
        if fid > 4 or kind != 5:
            return False
        while pos < len(header) and header[pos] & 0x80:  # skip the varint
            pos += 1
        pos += 1
    return False


def rewrite_checksummed(path: str | Path) -> Path:
    """Rewrites the Parquet file ``path`` in place with page checksums, whole or not at all: the
    values as they read now (damage already in them stays: rewrite a file known good).
    ValueError for an Arrow IPC file (write it as Parquet instead), DamagedFile where it cannot
    be read."""
    path = Path(path)
    if format_of(path) != "parquet":
        raise ValueError(f"{path}: only a Parquet file is rewritten with page checksums; write it as Parquet")
    table = read(path)
    return write_parquet(table.replace_schema_metadata(table.schema.metadata), path)


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


def plain_layouts(table: pa.Table) -> pa.Table:
    """``table`` with its view layouts made plain: ``string_view`` and ``binary_view`` (what
    arrow-rs writers such as tpchgen-cli and Polars produce) as ``string`` and ``binary``
    (``large_*`` where a column's bytes need 64-bit offsets), ``list_view`` as ``list``, at any
    depth. The same values; a node then loads, samples, estimates and plans every column in
    one layout of each kind (pyarrow's ``take`` has no kernel for views, which the sample needs)."""
    if not any(_has_view(f.type) for f in table.schema):
        return table
    columns = [_plain_column(table.column(i)) for i in range(table.num_columns)]
    fields = [f.with_type(c.type) for f, c in zip(table.schema, columns, strict=True)]
    return pa.Table.from_arrays(columns, schema=pa.schema(fields, metadata=table.schema.metadata))


def _has_view(t: pa.DataType) -> bool:
    if pa.types.is_string_view(t) or pa.types.is_binary_view(t) or _is_list_view(t):
        return True
    if pa.types.is_dictionary(t):
        return _has_view(t.value_type)
    return any(_has_view(t.field(i).type) for i in range(t.num_fields))


def _is_list_view(t: pa.DataType) -> bool:
    return pa.types.is_list_view(t) or pa.types.is_large_list_view(t)


def _plain_type(t: pa.DataType, large: bool) -> pa.DataType:
    """``t`` with every view layout plain (:func:`plain_layouts`)."""
    if pa.types.is_string_view(t):
        return pa.large_string() if large else pa.string()
    if pa.types.is_binary_view(t):
        return pa.large_binary() if large else pa.binary()
    if pa.types.is_dictionary(t):
        return pa.dictionary(t.index_type, _plain_type(t.value_type, large), t.ordered)
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_plain_type(f.type, large)) for f in t])
    if pa.types.is_map(t):
        key, item = t.key_field, t.item_field
        key, item = key.with_type(_plain_type(key.type, large)), item.with_type(_plain_type(item.type, large))
        return pa.map_(key, item)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or _is_list_view(t):
        value = t.value_field.with_type(_plain_type(t.value_type, large))
        large_offsets = pa.types.is_large_list(t) or pa.types.is_large_list_view(t)
        return pa.large_list(value) if large_offsets else pa.list_(value)
    if pa.types.is_fixed_size_list(t):
        return pa.list_(t.value_field.with_type(_plain_type(t.value_type, large)), t.list_size)
    return t


def _plain_column(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """One column made plain: list views rebuilt as lists first (pyarrow 26 casts a list view
    to an invalid list), then cast; 64-bit offsets where 32-bit ones overflow."""
    column = pa.chunked_array([_lists_of_views(c) for c in column.chunks], _lists_type(column.type))
    try:
        return column.cast(_plain_type(column.type, large=False))
    except (pa.ArrowInvalid, OverflowError):
        return column.cast(_plain_type(column.type, large=True))


def _lists_type(t: pa.DataType) -> pa.DataType:
    if _is_list_view(t):
        return (pa.large_list if pa.types.is_large_list_view(t) else pa.list_)(t.value_field)
    return t


def _lists_of_views(a: pa.Array) -> pa.Array:
    """A top-level list view as a list of the same values (its items keep their type)."""
    if not _is_list_view(a.type):
        return a
    import numpy as np
    import pyarrow.compute as pc

    lengths = pc.list_value_length(a).fill_null(0).to_numpy(zero_copy_only=False)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    make = pa.LargeListArray if pa.types.is_large_list_view(a.type) else pa.ListArray
    kind = pa.int64() if pa.types.is_large_list_view(a.type) else pa.int32()
    return make.from_arrays(pa.array(offsets, kind), pc.list_flatten(a), mask=a.is_null())


def _why(e: BaseException, fmt: str) -> str:
    text = str(e)
    if "CRC checksum verification failed" in text or "verify page integrity" in text:
        return "damaged: a page's checksum does not match its bytes (the file changed after it was written)"
    if isinstance(e, FileNotFoundError):
        return "no such file"
    if isinstance(e, PermissionError):
        return "permission denied"
    return f"not a readable {fmt} file (damaged or truncated)"
