"""The data files offload ships: the price catalog, the platform presets, the what-if plans, the
seed's scenario and the small examples.

People find them in the repository's top-level ``data/``. The wheel carries them inside the
package, as ``offload/data/`` (pyproject.toml's maturin ``include``); in the checkout
``python/offload/data`` is a link to ``data/``, so the same path resolves in both places.
:func:`data_path` is the one way the code names such a file.

>>> from offload.datafiles import data_path
>>> data_path("prices", "catalog.toml").name
'catalog.toml'
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["data_path", "named"]

_HERE = Path(__file__).resolve().parent
# Installed: offload/data inside site-packages. Checkout: python/offload/data (a link to data/),
# and data/ itself where the link did not survive (a checkout without symlinks).
_ROOTS = (_HERE / "data", _HERE.parents[1] / "data")


def data_path(*parts: str) -> Path:
    """The shipped file or directory ``data/<parts...>``, installed or in the checkout.

    Never raises: when neither place has it, the installed location is returned, so that
    the error of whatever opens it names where the file should have been."""
    candidates = [root.joinpath(*parts) for root in _ROOTS]
    return next((p for p in candidates if p.exists()), candidates[0])


def named(given: Path, kind: str) -> Path:
    """A file a person named on the command line: ``given`` itself where it exists; else the
    shipped file of that name, so that the names that work in the checkout work from an
    installed wheel too: ``data/plans/seed-table1.toml`` (the checkout's path), or a bare
    ``seed-table1`` / ``seed-table1.toml`` under ``data/<kind>``. Unfound, ``given``."""
    if given.exists():
        return given
    parts = given.parts
    if len(parts) > 1 and parts[0] == "data":
        candidate = data_path(*parts[1:])
    elif len(parts) == 1:
        candidate = data_path(kind, given.name if given.suffix else f"{given.name}.toml")
    else:
        return given
    return candidate if candidate.exists() else given
