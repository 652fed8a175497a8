"""The report's HTML: one Jinja2 environment over the templates shipped in this package
(``templates/``: the page, its CSS and script, and the macros of ``parts.html.j2``), with
autoescaping on, so every value a section shows is escaped unless it is already markup.

Sections build their bodies from the pieces here (tables, embedded plots, notes, lists) and
from :func:`html` for a sentence with inline markup; each returns :class:`Markup`.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined, Template
from markupsafe import Markup

__all__ = [
    "Markup",
    "details",
    "html",
    "img",
    "img_beside",
    "items",
    "meta",
    "missing",
    "page",
    "si",
    "table",
]


@cache
def _env() -> Environment:
    return Environment(
        loader=PackageLoader("offload.report", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


@cache
def _parts() -> Any:
    return _env().get_template("parts.html.j2").module


def page(version: str, written: str, sections: Sequence[tuple[str, Markup]], answer: str = "") -> str:
    """The whole page: title, its one answer (what to deploy), table of contents, each (title,
    body) section."""
    template: Template = _env().get_template("report.html.j2")
    return template.render(
        version=version,
        written=written,
        answer=answer,
        sections=[{"title": title, "body": body} for title, body in sections],
    )


def html(template: str, *args: Any) -> Markup:
    """``template`` (trusted markup) with ``{}`` fields filled by ``args``, each escaped."""
    return Markup(template).format(*args)


def table(headers: Sequence[Any], rows: Iterable[Sequence[Any]], numeric_from: int = 1) -> Markup:
    """A table; cells from column ``numeric_from`` on are right-aligned numbers."""
    return Markup(_parts().table(list(headers), [list(r) for r in rows], numeric_from))


def img(path: Path | None = None, png: bytes | None = None, alt: str = "") -> Markup:
    """A plot embedded as a data URI (from ``png`` bytes or the file ``path``), or a note that
    the file is not there."""
    data = png if png is not None else (path.read_bytes() if path is not None and path.exists() else None)
    if data is None:
        return Markup(_parts().plot_not_found(str(path)))
    return Markup(_parts().img(base64.b64encode(data).decode(), alt))


def img_beside(path: Path | None, suffix: str, alt: str) -> Markup:
    """The plot written beside an input (its name with ``suffix``), embedded; nothing when the
    input was not given or has no plot."""
    png = path.with_suffix(suffix) if path else None
    return img(png, alt=alt) if png is not None and png.exists() else Markup("")


def missing(what: str, how: str) -> Markup:
    """A section whose input was not given, saying how to produce it."""
    return Markup(_parts().missing(what, how))


def meta(text: str | Markup) -> Markup:
    """A grey line about where figures come from."""
    return Markup(_parts().meta(text))


def items(entries: Iterable[tuple[str, str | Markup]]) -> Markup:
    """A bulleted list of (css class or "", text)."""
    return Markup(_parts().items(list(entries)))


def details(summary: str, text: str) -> Markup:
    """Preformatted ``text`` folded under ``summary``."""
    return Markup(_parts().details(summary, text))


def si(x: float | None, unit: str = "") -> str:
    """A number with an SI prefix (G, M, k): 1.25 GB/s; None is "unbounded"."""
    if x is None:
        return "unbounded"
    for scale, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.2f} {prefix}{unit}"
    return f"{x:.3g} {unit}"
