"""How the product writes files: whole or not at all. Every file goes to a temporary name in its
own directory, is flushed to disk, then renamed over the target, so a full disk, a kill or a
crash leaves the old file (or none), never a half-written one that later opens as something
else. A write that fails says which file, in one line (`WriteError`, which the CLI turns into
`error: ...` and exit 2).

A directory of outputs (a model, a synthetic rule set) is built the same way: under a temporary
sibling directory, renamed into place when complete (`atomic_dir`). It holds a list of the files
the product made (`MADE`), so that `--force` replaces only a directory of the product's own making
and never deletes a file a person put there.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

MADE = ".offload-made"
"""The list, in a directory output, of every file the product made there (JSON)."""


class WriteError(OSError):
    """A file the product writes could not be written whole; the message names it."""

    def __str__(self) -> str:  # the one line, without OSError's "[Errno 28] " prefix
        return str(self.strerror)


def describe(path: str | os.PathLike[str], e: OSError) -> str:
    """One line for a failed write of ``path``."""
    if e.errno == errno.ENOSPC:
        why = "no space left on the device"
    elif e.errno == errno.EDQUOT:
        why = "disk quota exceeded"
    else:
        why = e.strerror or str(e)
    return f"cannot write {path}: {why}; nothing was left half-written"


def _fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):  # some file systems refuse fsync on a directory
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def _as_write_error(target: Path) -> Iterator[None]:
    """An OSError inside becomes a `WriteError` naming ``target`` (one that already is, stays)."""
    try:
        yield
    except WriteError:
        raise
    except OSError as e:
        raise WriteError(e.errno, describe(target, e)) from None


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike[str], mode: str = "w", **open_kw: Any) -> Iterator[IO[Any]]:
    """``with atomic_write(p) as f: f.write(...)``: the content appears at ``p`` whole when the
    block ends without an exception; otherwise ``p`` is untouched and the temporary is removed.
    Errors while writing raise `WriteError` naming ``p``."""
    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    with _as_write_error(target):
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    ok = False
    try:
        with _as_write_error(target), os.fdopen(fd, mode, **open_kw) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
            os.chmod(tmp, 0o644 & ~_umask())
            os.replace(tmp, target)
            ok = True
    finally:
        if not ok:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    _fsync_dir(directory)
    _note_made(target)


def write_text(path: str | os.PathLike[str], text: str) -> None:
    with atomic_write(path, "w", encoding="utf-8") as f:
        f.write(text)


def write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    with atomic_write(path, "wb") as f:
        f.write(data)


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike[str], *, overwrite: bool = False) -> Iterator[Path]:
    """``with atomic_dir(out) as d:`` write every file of a directory output under ``d`` (a
    temporary sibling); when the block ends without an exception it is renamed to ``out``.
    An existing ``out`` is refused (`FileExistsError`, naming it) unless ``overwrite``; then it
    is replaced only once the new one is complete. On any failure the temporary is removed."""
    target = Path(path).absolute()
    if Path.cwd().resolve().is_relative_to(target.resolve()):  # "." or a directory above it
        raise FileExistsError(
            errno.EEXIST,
            f"{path}: the current directory (or one above it) cannot be replaced whole; "
            "give a directory of its own, e.g. ./out",
        )
    if target.exists() and not target.is_dir():
        raise FileExistsError(errno.EEXIST, f"{target} exists and is not a directory")
    if target.exists() and any(target.iterdir()):
        if not overwrite:
            raise FileExistsError(
                errno.EEXIST, f"{target} already exists and is not empty (choose another --out, or --force)"
            )
        refuse_foreign(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    with _as_write_error(target):
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    ok = False
    try:
        with _as_write_error(target):
            yield tmp
            _list_made(tmp)
            os.chmod(tmp, 0o755 & ~_umask())
            if target.exists():
                old = target.with_name(f".{target.name}.old-{os.getpid()}")
                os.replace(target, old)
                os.replace(tmp, target)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(tmp, target)
            ok = True
    finally:
        if not ok:
            shutil.rmtree(tmp, ignore_errors=True)
    _fsync_dir(target.parent)


def _made_files(directory: Path) -> list[str]:
    """Every file and directory under ``directory``, as relative POSIX paths, sorted."""
    return sorted(p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.name != MADE)


def _list_made(directory: Path) -> None:
    import json

    write_text(
        directory / MADE, json.dumps({"made_by": "offload", "files": _made_files(directory)}, indent=1)
    )


def _note_made(path: Path) -> None:
    """A file the product wrote into one of its directory outputs (a trace beside a model, say)
    is the product's too: added to the nearest `MADE` list above it, so --force may replace it."""
    import json

    if path.name == MADE:
        return
    for directory in list(path.absolute().parents)[:8]:
        made = directory / MADE
        if made.is_file():
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                doc = json.loads(made.read_text())
                name = path.absolute().relative_to(directory).as_posix()
                parents = [p.as_posix() for p in Path(name).parents if p != Path(".")]
                if not {name, *parents} <= set(doc["files"]):
                    doc["files"] = sorted({*doc["files"], name, *parents})
                    write_text(made, json.dumps(doc, indent=1))
            return


def refuse_foreign(target: Path) -> None:
    """`FileExistsError` naming a file under ``target`` that the product did not make (none in
    its `MADE` list, or no list at all): `--force` replaces only what the product made."""
    import json

    try:
        made = set(json.loads((target / MADE).read_text())["files"])
    except (OSError, ValueError, KeyError, TypeError):
        made = set()
    foreign = [p for p in _made_files(target) if p not in made]
    foreign.sort(key=lambda p: (target / p).is_dir())  # a file named first, not its directory
    if foreign:
        how = "it holds" if made else f"it was not made by offload (no {MADE}); it holds"
        raise FileExistsError(
            errno.EEXIST,
            f"{target}: --force replaces only what offload made, and {how} {foreign[0]}"
            f"{f' (and {len(foreign) - 1} more)' if len(foreign) > 1 else ''}; choose another --out, "
            "or move those files away",
        )


def an_input(out: str | os.PathLike[str], inputs: dict[str, str | os.PathLike[str]]) -> str | None:
    """The name (its option) of the input that ``out`` is (the same file: same device and inode,
    through any link or spelling), or None: an output written over its own input replaces
    what it reads with what it writes."""
    try:
        made = os.stat(out)
    except OSError:
        return None  # not there yet: it is no input
    for name, path in inputs.items():
        with contextlib.suppress(OSError):
            st = os.stat(path)
            if (st.st_dev, st.st_ino) == (made.st_dev, made.st_ino):
                return name
    return None


def save_figure(fig: Any, path: str | os.PathLike[str], **savefig_kw: Any) -> None:
    """``fig.savefig(path)``, whole or not at all (the format from the suffix, PNG by default),
    its directory made; the figure is closed afterwards, saved or not, so that no caller leaks
    one (pyplot keeps every open figure alive)."""
    import matplotlib.pyplot as plt  # loaded already: the caller drew ``fig`` with it

    fmt = Path(path).suffix.lstrip(".").lower() or "png"
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with atomic_write(path, "wb") as f:
            fig.savefig(f, format=savefig_kw.pop("format", fmt), **savefig_kw)
    finally:
        plt.close(fig)
