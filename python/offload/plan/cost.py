"""`offload plan cost`: how many servers or instances each deployment needs for a workload,
and what they cost, with the arithmetic shown (seeds 000/001, Sec. 5.2, Table 1).

The model is the seed's, made explicit:

1. the CPU-only fleet that carries the load: given (`cpu_servers`), or requests/s divided by
   what one CPU-only server sustains (`server_capacity_rps`, measured or given);
2. with the function offloaded, each host keeps only (1 − share) of its CPU work, so
   hosts = cpu_servers × (1 − share);
3. an instance type with fewer vCPUs than the reference server needs
   server_vcpus / instance_vcpus instances per host (f1.2xlarge: 48 / 8 = 6);
4. when the offloaded query rate is known, the accelerators must also keep up:
   units ≥ queries/s ÷ accelerator queries/s — whichever side needs more units binds;
5. a network-attached accelerator pool (`pool_item`) is sized by the query rate alone, apart
   from the hosts (the seed's proposed remedy);
6. purchases cost units × unit price once; cloud instances units × USD/h × hours per year.

All arithmetic is exact (fractions from the decimal figures as written), so 400 × (1 − 0.39)
is 244, not 243.99999999999997; unit counts are then rounded up (never under-provision) or, to
reproduce a publication that did so, to the nearest unit.

A scenario may carry **variants** (`[[variant]]`: another offload share, rounding, CPU fleet or
accelerator rate, each labelled, `fitted = true` when its figures were back-solved from the
result they are meant to reproduce) and the **published** figures of each deployment
(`published = {...}`), so that one command shows a publication's table computed from its stated
inputs, the fitted variant beside it, and every cell's difference from the published one.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from offload.datafiles import data_path
from offload.plan.tomlfile import (
    Document,
    InputError,
    check_keys,
    expect_bool,
    expect_str,
    expect_table,
    expect_tables,
    load,
)  # fmt: skip

HOURS_PER_YEAR = 8760
CATALOG = data_path("prices", "catalog.toml")


def exact(x: int | float | str | Fraction) -> Fraction:
    """The number as written: 0.39 is 39/100 (a float's shortest decimal form)."""
    if isinstance(x, float):
        return Fraction(repr(x))
    return Fraction(x)


def fmt(x: Fraction | int | float, digits: int = 4) -> str:
    """A number as a person writes it: exact integers with separators, else up to `digits`
    decimals without trailing zeros."""
    f = Fraction(x)
    if f.denominator == 1:
        return f"{f.numerator:,}"
    s = f"{float(f):,.{digits}f}".rstrip("0").rstrip(".")
    return s


# ---- the price catalog -------------------------------------------------------------------


@dataclass(frozen=True)
class Item:
    """Something to buy (`unit_usd`, once) or rent (`usd_per_hour`)."""

    id: str
    name: str
    kind: str  # "purchase" or "hourly"
    vcpus: int
    price: Fraction  # USD per unit (purchase) or per unit-hour (hourly)
    region: str
    plan: str
    date: str
    source: str
    accelerator: str | None = None
    # Optional, for the MBWU ratios (kWh/MBWU, m³/MBWU): power draw (W) and volume (m³), with
    # their own source and date, as specs and prices come from different places.
    watts: Fraction | None = None
    volume_m3: Fraction | None = None
    spec_source: str | None = None
    spec_date: str | None = None

    @property
    def hourly(self) -> bool:
        return self.kind == "hourly"

    def price_text(self) -> str:
        return f"{fmt(self.price)} USD/h" if self.hourly else f"{fmt(self.price)} USD"


ITEM_KEYS = {
    "id", "name", "kind", "vcpus", "accelerator", "unit_usd", "usd_per_hour",
    "region", "plan", "date", "source", "watts", "volume_m3", "spec_source", "spec_date",
}  # fmt: skip


def load_catalog(path: Path | str = CATALOG) -> dict[str, Item]:
    doc = load(path)
    check_keys(doc, (), doc.data, {"sources", "item"})
    sources: dict[str, str] = expect_table(doc, ("sources",), doc.data.get("sources", {}))
    for k, v in sources.items():
        expect_str(doc, ("sources", k), v)
    items: dict[str, Item] = {}
    for i, raw in enumerate(expect_tables(doc, ("item",), doc.data.get("item", []))):
        where: tuple[str | int, ...] = ("item", i)
        check_keys(doc, where, raw, ITEM_KEYS)
        for k in ("id", "name", "kind", "vcpus", "region", "plan", "date", "source"):
            if k not in raw:
                raise doc.error(where, f"item {i + 1} lacks {k!r}")
        for k in ("id", "name", "kind", "region", "plan", "source", "accelerator", "spec_source"):
            if k in raw:
                expect_str(doc, (*where, k), raw[k])
        kind = raw["kind"]
        if kind not in ("purchase", "hourly"):
            raise doc.error((*where, "kind"), f"kind must be 'purchase' or 'hourly', not {kind!r}")
        price_key = "unit_usd" if kind == "purchase" else "usd_per_hour"
        if price_key not in raw:
            raise doc.error(where, f"a {kind} item needs {price_key!r}")
        price = _positive(doc, (*where, price_key), raw[price_key])
        vcpus = raw["vcpus"]
        if not isinstance(vcpus, int) or isinstance(vcpus, bool) or vcpus <= 0:
            raise doc.error((*where, "vcpus"), f"vcpus must be a positive integer, not {vcpus!r}")
        if raw["id"] in items:
            raise doc.error((*where, "id"), f"duplicate item id {raw['id']!r}")
        src = sources.get(raw["source"], raw["source"])
        spec = raw.get("spec_source")
        if ("watts" in raw or "volume_m3" in raw) and spec is None:
            raise doc.error(where, "an item with watts or volume_m3 needs 'spec_source'")
        items[raw["id"]] = Item(
            raw["id"], raw["name"], kind, vcpus, price, raw["region"], raw["plan"], str(raw["date"]), src,
            raw.get("accelerator"), _optional(doc, (*where, "watts"), raw),
            _optional(doc, (*where, "volume_m3"), raw), None if spec is None else sources.get(spec, spec),
            None if "spec_date" not in raw else str(raw["spec_date"]),
        )  # fmt: skip
    return items


def item_of(item_id: str, catalog: Path | str | None = None) -> Item:
    """One item of the price catalog (the bundled one by default); a ValueError lists the known."""
    items = load_catalog(catalog or CATALOG)
    if item_id not in items:
        raise ValueError(f"no item {item_id!r} in the price catalog; known: {', '.join(items)}")
    return items[item_id]


def _optional(doc: Document, keys: tuple[str | int, ...], table: dict[str, Any]) -> Fraction | None:
    key = keys[-1]
    return _positive(doc, keys, table[key]) if isinstance(key, str) and key in table else None


def _positive(doc: Document, keys: tuple[str | int, ...], v: Any, allow_zero: bool = False) -> Fraction:
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise doc.error(keys, f"expected a number, not {v!r}")
    if not math.isfinite(v):  # TOML's nan and inf: no exact fraction, and no price or count
        raise doc.error(keys, f"expected a finite number, not {v!r}")
    f = exact(v)
    if f < 0 or (f == 0 and not allow_zero):
        raise doc.error(keys, f"expected a {'non-negative' if allow_zero else 'positive'} number, not {v!r}")
    return f


# ---- the scenario ----------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    cpu_servers: Fraction  # the CPU-only fleet that carries the load (exact, may be fractional)
    cpu_servers_text: str  # how it was obtained
    server_vcpus: int
    offload_share: Fraction
    query_rate: Fraction | None  # offloaded queries/s over the fleet, when known
    rounding: str  # "up" or "nearest"
    hours_per_year: int = HOURS_PER_YEAR
    amortization_years: Fraction | None = None


@dataclass(frozen=True)
class Published:
    """A deployment's figures as a publication prints them, to set ours beside. ``total_musd`` is
    kept as written (its decimals are the printed precision: 5.0 has one, 4 none)."""

    units: int | None = None
    total_musd: int | float | None = None
    relative: int | float | None = None  # × the group's original deployment
    queries_per_usd: float | None = None


@dataclass(frozen=True)
class Deployment:
    group: str
    name: str
    item: Item
    offload: bool = False
    pool_item: Item | None = None  # a network-attached accelerator pool, scaled apart
    pool_queries_per_s: Fraction | None = None
    published: Published | None = None


@dataclass(frozen=True)
class Variant:
    """Another set of workload figures for the same deployments (None: the scenario's)."""

    name: str
    fitted: bool
    about: str
    offload_share: Fraction | None = None
    rounding: str | None = None
    cpu_servers: Fraction | None = None
    accelerator_qps: Fraction | None = None
    accelerator_basis: str | None = None


@dataclass(frozen=True)
class Scenario:
    path: Path | None
    workload: Workload
    accelerator_qps: Fraction | None  # what one accelerator answers per second
    deployments: list[Deployment]
    name: str = "as given"  # the label of these figures beside the variants'
    about: str = ""
    fitted: bool = False  # the figures were back-solved from the result they reproduce
    accelerator_basis: str = ""  # where accelerator_qps comes from: stated, measured or assumed
    variants: tuple[Variant, ...] = ()
    published_source: str = ""


WORKLOAD_KEYS = {
    "cpu_servers", "requests_per_s", "server_capacity_rps", "queries_per_request", "server_vcpus",
    "offload_share", "rounding", "hours_per_year", "amortization_years",
}  # fmt: skip
DEPLOYMENT_KEYS = {"group", "name", "item", "offload", "pool_item", "pool_queries_per_s", "published"}
PUBLISHED_KEYS = {"units", "total_musd", "relative", "queries_per_usd"}
VARIANT_KEYS = {
    "name", "fitted", "about", "offload_share", "rounding", "cpu_servers", "accelerator_queries_per_s",
    "accelerator_basis",
}  # fmt: skip
TOP_KEYS = {"catalog", "name", "about", "published", "workload", "accelerator", "deployment", "variant"}


def mean_queries_per_request(doc: Document, v: Any) -> Fraction:
    """A number (the mean), or a distribution as [[queries, weight], ...]."""
    keys = ("workload", "queries_per_request")
    if isinstance(v, list):
        pairs = []
        for p in v:
            if not (isinstance(p, list) and len(p) == 2):
                raise doc.error(keys, f"expected [queries, weight] pairs, got {p!r}")
            pairs.append((_positive(doc, keys, p[0]), _positive(doc, keys, p[1], allow_zero=True)))
        total = sum((w for _, w in pairs), Fraction(0))
        if total == 0:
            raise doc.error(keys, "the weights sum to zero")
        return sum((q * w for q, w in pairs), Fraction(0)) / total
    return _positive(doc, keys, v)


def load_scenario(path: Path | str, catalog: Path | str | None = None) -> Scenario:
    doc = load(path)
    check_keys(doc, (), doc.data, TOP_KEYS)
    cat_path = Path(catalog) if catalog else None
    if cat_path is None and "catalog" in doc.data:
        cat_path = (doc.path.parent / expect_str(doc, ("catalog",), doc.data["catalog"])).resolve()
    items = load_catalog(cat_path or CATALOG)
    workload = _workload(doc)

    acc = expect_table(doc, ("accelerator",), doc.data.get("accelerator", {}))
    check_keys(doc, ("accelerator",), acc, {"queries_per_s", "basis"})
    acc_qps = _optional(doc, ("accelerator", "queries_per_s"), acc)
    acc_basis = expect_str(doc, ("accelerator", "basis"), acc.get("basis", ""))
    deployments = _deployments(doc, items, workload.query_rate)
    pub = expect_table(doc, ("published",), doc.data.get("published", {}))
    check_keys(doc, ("published",), pub, {"source"})
    return Scenario(
        doc.path, workload, acc_qps, deployments, _text(doc, "name", "as given"), _text(doc, "about"),
        accelerator_basis=acc_basis, variants=_variants(doc),
        published_source=_text(doc, "source", table=pub),
    )  # fmt: skip


def _workload(doc: Document) -> Workload:
    """The ``[workload]`` table, each figure checked."""
    if "workload" not in doc.data:
        raise doc.error(("workload",), "a scenario needs a [workload] table")
    w = expect_table(doc, ("workload",), doc.data["workload"])
    check_keys(doc, ("workload",), w, WORKLOAD_KEYS)
    rate = _optional(doc, ("workload", "requests_per_s"), w)
    if "cpu_servers" in w:
        servers = _positive(doc, ("workload", "cpu_servers"), w["cpu_servers"])
        how = f"{fmt(servers)} (given)"
    elif rate is not None and "server_capacity_rps" in w:
        cap = _positive(doc, ("workload", "server_capacity_rps"), w["server_capacity_rps"])
        servers = rate / cap
        how = f"{fmt(rate)} requests/s ÷ {fmt(cap)} requests/s per server = {fmt(servers)}"
    else:
        raise doc.error(("workload",), "give cpu_servers, or requests_per_s and server_capacity_rps")
    share = _positive(doc, ("workload", "offload_share"), w.get("offload_share", 0), allow_zero=True)
    if not 0 <= share < 1:
        raise doc.error(("workload", "offload_share"), f"must be in [0, 1), not {w['offload_share']!r}")
    vcpus = w.get("server_vcpus")
    if not isinstance(vcpus, int) or isinstance(vcpus, bool) or vcpus <= 0:
        raise doc.error(("workload", "server_vcpus"), f"must be a positive integer, not {vcpus!r}")
    rounding = w.get("rounding", "up")
    if rounding not in ("up", "nearest"):
        raise doc.error(("workload", "rounding"), f"rounding must be 'up' or 'nearest', not {rounding!r}")
    qpr = mean_queries_per_request(doc, w["queries_per_request"]) if "queries_per_request" in w else None
    query_rate = rate * qpr if rate is not None and qpr is not None else None
    hours = w.get("hours_per_year", HOURS_PER_YEAR)
    if not isinstance(hours, int) or isinstance(hours, bool) or hours <= 0:
        raise doc.error(("workload", "hours_per_year"), f"expected a positive integer, not {hours!r}")
    amort = _optional(doc, ("workload", "amortization_years"), w)
    return Workload(servers, how, vcpus, share, query_rate, rounding, hours, amort)


def _deployments(doc: Document, items: dict[str, Item], query_rate: Fraction | None) -> list[Deployment]:
    """The ``[[deployment]]`` tables, each item found in the catalog."""
    deployments = []
    for i, d in enumerate(expect_tables(doc, ("deployment",), doc.data.get("deployment", []))):
        where: tuple[str | int, ...] = ("deployment", i)
        check_keys(doc, where, d, DEPLOYMENT_KEYS)
        for k in ("name", "item"):
            if k not in d:
                raise doc.error(where, f"deployment {i + 1} lacks {k!r}")
        for k in ("group", "name", "item", "pool_item"):
            if k in d:
                expect_str(doc, (*where, k), d[k])
        if "offload" in d:
            expect_bool(doc, (*where, "offload"), d["offload"])
        item = _item(doc, items, (*where, "item"), d["item"])
        pool = _item(doc, items, (*where, "pool_item"), d["pool_item"]) if "pool_item" in d else None
        pool_qps = None
        if pool is not None:
            if "pool_queries_per_s" not in d:
                raise doc.error(where, "a pool_item needs pool_queries_per_s (what one pool unit answers)")
            if query_rate is None:
                raise doc.error((*where, "pool_item"), "sizing a pool needs the query rate: give "
                                "workload.requests_per_s and workload.queries_per_request")  # fmt: skip
            pool_qps = _positive(doc, (*where, "pool_queries_per_s"), d["pool_queries_per_s"])
        offload = bool(d.get("offload", False))
        published = _published(doc, (*where, "published"), d["published"]) if "published" in d else None
        deployments.append(
            Deployment(d.get("group", ""), d["name"], item, offload, pool, pool_qps, published)
        )
    if not deployments:
        raise doc.error((), "a scenario needs at least one [[deployment]]")
    return deployments


def _text(doc: Document, key: str, default: str = "", table: dict[str, Any] | None = None) -> str:
    """A top-level text (or one of ``table``, the ``[published]`` table's)."""
    where: tuple[str, ...] = (key,) if table is None else ("published", key)
    return expect_str(doc, where, (doc.data if table is None else table).get(key, default))


def _published(doc: Document, where: tuple[str | int, ...], raw: Any) -> Published:
    """A deployment's ``published = {units, total_musd, relative, queries_per_usd}``."""
    t = expect_table(doc, where, raw)
    check_keys(doc, where, t, PUBLISHED_KEYS)
    for k, v in t.items():
        _positive(doc, (*where, k), v)
    units = t.get("units")
    if units is not None and (not isinstance(units, int) or isinstance(units, bool)):
        raise doc.error((*where, "units"), f"units must be an integer, not {units!r}")
    qpu = t.get("queries_per_usd")
    return Published(units, t.get("total_musd"), t.get("relative"), None if qpu is None else float(qpu))


def _variants(doc: Document) -> tuple[Variant, ...]:
    """The ``[[variant]]`` tables: a name, whether fitted, what they are, and the figures they change."""
    out = []
    for i, v in enumerate(expect_tables(doc, ("variant",), doc.data.get("variant", []))):
        where: tuple[str | int, ...] = ("variant", i)
        check_keys(doc, where, v, VARIANT_KEYS)
        for k in ("name", "fitted", "about"):
            if k not in v:
                raise doc.error(where, f"variant {i + 1} lacks {k!r}")
        for k in ("name", "about", "rounding", "accelerator_basis"):
            if k in v:
                expect_str(doc, (*where, k), v[k])
        share = v.get("offload_share")
        if share is not None and not 0 <= _positive(doc, (*where, "offload_share"), share, True) < 1:
            raise doc.error((*where, "offload_share"), f"must be in [0, 1), not {share!r}")
        if v.get("rounding", "up") not in ("up", "nearest"):
            raise doc.error(
                (*where, "rounding"), f"rounding must be 'up' or 'nearest', not {v['rounding']!r}"
            )
        num = {
            k: _positive(doc, (*where, k), v[k])
            for k in ("cpu_servers", "accelerator_queries_per_s")
            if k in v
        }
        out.append(Variant(
            v["name"], expect_bool(doc, (*where, "fitted"), v["fitted"]), v["about"],
            None if share is None else exact(share), v.get("rounding"), num.get("cpu_servers"),
            num.get("accelerator_queries_per_s"), v.get("accelerator_basis"),
        ))  # fmt: skip
    return tuple(out)


def _item(doc: Document, items: dict[str, Item], keys: tuple[str | int, ...], name: Any) -> Item:
    if name not in items:
        raise doc.error(keys, f"no item {name!r} in the price catalog; known: {', '.join(items)}")
    return items[name]


# ---- the calculation ---------------------------------------------------------------------


def round_units(x: Fraction, rounding: str) -> int:
    if rounding == "nearest":
        return math.floor(x + Fraction(1, 2))  # halves up, unlike round()'s to-even
    return math.ceil(x)


@dataclass
class Line:
    """One deployment's result, with every step of its arithmetic."""

    group: str
    name: str
    item: Item
    units_exact: Fraction
    units: int
    total_usd: Fraction  # once (purchase) or per year (hourly)
    per_year: bool
    binding: str  # "cpu" or "accelerator": which side sized the units
    offloaded: bool = False
    pool_units: int = 0
    queries_per_usd: float | None = None  # one accelerator unit at full load
    steps: list[str] = field(default_factory=list)
    relative: Fraction | None = None  # total / the group's first deployment without offload
    published: Published | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "group": self.group, "deployment": self.name, "item": self.item.id, "element": self.item.name,
            "region": self.item.region, "plan": self.item.plan, "price_date": self.item.date,
            "price_usd": float(self.item.price), "price_unit": "hour" if self.item.hourly else "unit",
            "units_exact": float(self.units_exact), "units": self.units, "pool_units": self.pool_units,
            "binding": self.binding, "total_usd": float(self.total_usd), "per_year": self.per_year,
            "relative_to_original": None if self.relative is None else float(self.relative),
            "queries_per_usd": self.queries_per_usd, "arithmetic": self.steps,
            "published": None if self.published is None else against_published(self),
        }  # fmt: skip


def cost(s: Scenario) -> list[Line]:
    w = s.workload
    lines: list[Line] = []
    for d in s.deployments:
        steps = [f"CPU-only servers for the load: {w.cpu_servers_text}"]
        hosts = w.cpu_servers
        if d.offload or d.pool_item is not None:
            hosts = w.cpu_servers * (1 - w.offload_share)
            steps.append(f"hosts = {fmt(w.cpu_servers)} × (1 − {fmt(w.offload_share)}) = {fmt(hosts)}")
        units_exact = hosts
        if d.item.vcpus != w.server_vcpus:
            units_exact = hosts * w.server_vcpus / d.item.vcpus
            steps.append(
                f"{d.item.name} has {d.item.vcpus} vCPUs, a server {w.server_vcpus}: "
                f"{fmt(hosts)} × {w.server_vcpus} / {d.item.vcpus} = {fmt(units_exact)}"
            )
        units = round_units(units_exact, w.rounding)
        if units != units_exact:
            steps.append(f"rounded {'to the nearest unit' if w.rounding == 'nearest' else 'up'}: {units:,}")
        binding = "cpu"
        if d.offload and d.pool_item is None and s.accelerator_qps and w.query_rate is not None:
            need = math.ceil(w.query_rate / s.accelerator_qps)
            steps.append(
                f"accelerators for {fmt(w.query_rate)} queries/s at {fmt(s.accelerator_qps)} each: {need:,}"
            )
            if need > units:
                units, binding = need, "accelerator"
                steps.append(f"the accelerators bind: {units:,} units")
        total = units * d.item.price
        pool_units = 0
        if d.pool_item is not None and d.pool_queries_per_s is not None and w.query_rate is not None:
            pool_units = math.ceil(w.query_rate / d.pool_queries_per_s)
            steps.append(
                f"network-attached {d.pool_item.name}: ⌈{fmt(w.query_rate)} / {fmt(d.pool_queries_per_s)}⌉ "
                f"= {pool_units:,}, scaled apart from the hosts"
            )
            if d.pool_item.hourly != d.item.hourly:
                raise ValueError(f"{d.name}: hosts and pool must both be purchases or both hourly")
            total += pool_units * d.pool_item.price
        per_year = d.item.hourly
        if per_year:
            total *= w.hours_per_year
            pool = f" + {pool_units:,} × {d.pool_item.price_text()}" if d.pool_item else ""
            steps.append(
                f"cost = ({units:,} × {d.item.price_text()}{pool}) × {w.hours_per_year:,} h/year "
                f"= {fmt(total, 2)} USD/year"
            )
        else:
            pool = f" + {pool_units:,} × {d.pool_item.price_text()}" if d.pool_item else ""
            steps.append(f"cost = {units:,} × {d.item.price_text()}{pool} = {fmt(total, 2)} USD")
        qpu = None
        if d.offload and s.accelerator_qps:
            if d.item.hourly:
                qpu = float(s.accelerator_qps * 3600 / d.item.price)
                steps.append(
                    f"queries per USD, one accelerator at full load: {fmt(s.accelerator_qps)} q/s × 3,600 s "
                    f"/ {d.item.price_text()} = {qpu / 1e9:,.1f} billion"
                )
            elif w.amortization_years:
                secs = w.amortization_years * w.hours_per_year * 3600
                qpu = float(s.accelerator_qps * secs / d.item.price)
                steps.append(
                    f"queries per USD over {fmt(w.amortization_years)} years of one unit: "
                    f"{qpu / 1e9:,.1f} billion"
                )
        offloaded = d.offload or d.pool_item is not None
        lines.append(Line(d.group, d.name, d.item, units_exact, units, total, per_year, binding, offloaded))
        lines[-1].pool_units, lines[-1].queries_per_usd, lines[-1].steps = pool_units, qpu, steps
        lines[-1].published = d.published
    for ln in lines:  # relative to the group's original (its first deployment without offload)
        same = [b for b in lines if b.group == ln.group and b.per_year == ln.per_year]
        base = next((b for b in same if not b.offloaded), None)
        if base is not None and base is not ln and base.total_usd > 0:
            ln.relative = ln.total_usd / base.total_usd
    return lines


def with_overrides(
    s: Scenario,
    offload_share: float | None = None,
    cpu_servers: float | None = None,
    rounding: str | None = None,
) -> Scenario:
    """``s`` with the workload figures `offload plan cost` may override (None: the scenario's);
    a ValueError names the option of a bad one."""
    w = s.workload
    if offload_share is not None:
        if not 0 <= offload_share < 1:
            raise ValueError(f"--offload-share must be in [0, 1), not {offload_share}")
        w = dataclasses.replace(w, offload_share=exact(offload_share))
    if cpu_servers is not None:
        if cpu_servers <= 0:
            raise ValueError(f"--cpu-servers must be positive, not {cpu_servers}")
        cs = exact(cpu_servers)
        w = dataclasses.replace(w, cpu_servers=cs, cpu_servers_text=f"{fmt(cs)} (--cpu-servers)")
    if rounding is not None:
        if rounding not in ("up", "nearest"):
            raise ValueError(f"--rounding must be up or nearest, not {rounding!r}")
        w = dataclasses.replace(w, rounding=rounding)
    return dataclasses.replace(s, workload=w)


def apply(s: Scenario, v: Variant) -> Scenario:
    """``s`` with the figures ``v`` changes, named and labelled as ``v``."""
    w = s.workload
    changes: dict[str, Any] = {}
    if v.offload_share is not None:
        changes["offload_share"] = v.offload_share
    if v.rounding is not None:
        changes["rounding"] = v.rounding
    if v.cpu_servers is not None:
        changes |= {"cpu_servers": v.cpu_servers, "cpu_servers_text": f"{fmt(v.cpu_servers)} ({v.name})"}
    return dataclasses.replace(
        s, workload=dataclasses.replace(w, **changes), name=v.name, about=v.about, fitted=v.fitted,
        accelerator_qps=s.accelerator_qps if v.accelerator_qps is None else v.accelerator_qps,
        accelerator_basis=s.accelerator_basis if v.accelerator_basis is None else v.accelerator_basis,
        variants=(),
    )  # fmt: skip


def every_variant(s: Scenario) -> list[Scenario]:
    """The scenario as written, then each of its variants."""
    return [s, *(apply(s, v) for v in s.variants)]


def as_published(total_usd: Fraction, decimals: int) -> str:
    """Millions truncated (not rounded) to `decimals`, as the seed prints its totals."""
    scale = 10**decimals
    m = math.floor(total_usd * scale / 1_000_000) / scale
    return f"{m:.{decimals}f}"


def decimals_of(x: int | float) -> int:
    """The decimals a published figure was written with: 5.0 has one, 4 none."""
    return 0 if isinstance(x, int) else len(repr(x).partition(".")[2])


def against_published(ln: Line) -> dict[str, Any]:
    """One deployment's figures beside the published ones: each published figure, ours as the
    publication would print it, and the difference (``*_diff``: ours − published; ``*_rel_diff``:
    ours / published − 1). Totals are compared as printed by truncation (the seed's way), ratios by
    rounding to the published decimals."""
    p = ln.published
    out: dict[str, Any] = {}
    if p is None:
        return out
    if p.units is not None:
        out |= {"units": p.units, "units_diff": ln.units - p.units, "units_rel_diff": ln.units / p.units - 1}
    if p.total_musd is not None:
        ours = as_published(ln.total_usd, decimals_of(p.total_musd))
        usd = exact(p.total_musd) * 1_000_000
        out |= {
            "total_musd": p.total_musd, "total_usd": float(usd), "ours_printed": ours,
            "printed_matches": ours == f"{p.total_musd:.{decimals_of(p.total_musd)}f}",
            "total_rel_diff": float(ln.total_usd / usd) - 1,
        }  # fmt: skip
    if p.relative is not None and ln.relative is not None:
        d = decimals_of(p.relative)
        ours = f"{math.floor(ln.relative * 10**d + Fraction(1, 2)) / 10**d:.{d}f}"
        out |= {
            "relative": p.relative, "relative_ours_printed": ours,
            "relative_printed_matches": ours == f"{p.relative:.{d}f}",
            "relative_rel_diff": float(ln.relative / exact(p.relative)) - 1,
        }  # fmt: skip
    if p.queries_per_usd is not None and ln.queries_per_usd is not None:
        out |= {
            "queries_per_usd": p.queries_per_usd,
            "queries_per_usd_rel_diff": ln.queries_per_usd / p.queries_per_usd - 1,
        }
    return out


def report(s: Scenario, lines: list[Line]) -> dict[str, Any]:
    w = s.workload
    return {
        "scenario": str(s.path) if s.path else None,
        "variant": {"name": s.name, "fitted": s.fitted, "about": s.about},
        "published_source": s.published_source or None,
        "workload": {
            "cpu_servers": float(w.cpu_servers), "cpu_servers_from": w.cpu_servers_text,
            "server_vcpus": w.server_vcpus, "offload_share": float(w.offload_share),
            "offloaded_queries_per_s": None if w.query_rate is None else float(w.query_rate),
            "rounding": w.rounding, "hours_per_year": w.hours_per_year,
        },
        "accelerator_queries_per_s": None if s.accelerator_qps is None else float(s.accelerator_qps),
        "accelerator_basis": s.accelerator_basis or None,
        "deployments": [ln.to_json() for ln in lines],
    }  # fmt: skip


def report_all(s: Scenario) -> dict[str, Any]:
    """The scenario's result as :func:`report` gives it, with each variant's whole result under
    ``variants`` (the same fields, ``variant.fitted`` saying which were back-solved)."""
    first, *others = every_variant(s)
    return report(first, cost(first)) | {"variants": [report(v, cost(v)) for v in others]}


__all__ = [
    "CATALOG",
    "InputError",
    "Item",
    "Line",
    "Published",
    "Scenario",
    "Variant",
    "against_published",
    "apply",
    "as_published",
    "cost",
    "every_variant",
    "item_of",
    "load_catalog",
    "load_scenario",
    "report",
    "report_all",
    "with_overrides",
]  # fmt: skip
