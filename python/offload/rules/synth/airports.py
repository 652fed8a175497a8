"""The connection airports of a synthetic rule set: which ones (real hubs first, ~40 kept out of
every rule), how many rules each holds (Zipf with a floor), and each one's profile (connection
types, carriers, terminals, sister airport, base connecting times)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from offload.rules.synth.draws import Uniforms, cdf, pick
from offload.rules.synth.world import HUBS, TERMINAL_STYLES, TIMES, World


@dataclass
class Airport:
    """Generator-side profile of one connection airport of the rule set."""

    world: int  # index into World.codes
    n_rules: int
    ctn_types: list[int]
    carriers: list[str]
    carrier_cdf: list[float]
    carrier_terminal: list[int]
    terminals: list[str]
    sister: int  # world index of another airport of the same city, or -1
    base_time: list[int]  # per ctn type: index into TIMES[ctn]


def default_n_airports(n_rules: int) -> int:
    # The real set has 136k rules at 2k-4k airports (~35-60 rules per airport); small sets
    # keep ~33 rules per airport so that families still exist.
    return max(1, min(3600, round(n_rules / 33), n_rules))


def setup_airports(
    n_rules: int, n_airports: int, rng: np.random.Generator, w: World
) -> tuple[list[Airport], tuple[int, ...], np.ndarray]:
    """Choose the connection airports, their rule counts (Zipf) and their profiles.

    Returns the profiles (in rank order), the world airports reserved out of every rule, and
    the Zipf rank weights (reused for hub-biased draws of previous/next airports).
    """
    hub_carrier, chosen, reserved = _choose(n_airports, rng, w)
    zipf, counts = _rule_counts(n_rules, len(chosen), rng)
    u = Uniforms(rng)
    profiles = _Profiles.of(w, reserved, hub_carrier)
    airports = [
        profiles.draw(rank, widx, n_a, rng, u)
        for rank, (widx, n_a) in enumerate(zip(chosen, counts.tolist(), strict=True))
    ]
    return airports, reserved, zipf


def _choose(
    n_airports: int, rng: np.random.Generator, w: World
) -> tuple[dict[int, str], list[int], tuple[int, ...]]:
    """The hub carriers, the chosen airports in rank order, and the reserved airports."""
    hubs = [(w.index[c], crr) for c, crr in HUBS if c in w.index]
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
    return dict(hubs), chosen, reserved


def _rule_counts(n_rules: int, n_chosen: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Zipf-like allocation over ranks with a floor, so that a few dozen hubs hold a large
    share while every airport still has its defaults. Returns (rank weights, counts)."""
    ranks = np.arange(1, n_chosen + 1, dtype=np.float64)
    zipf = (ranks + 2.0) ** -0.95
    floor = min(2, n_rules // n_chosen)
    counts = np.full(n_chosen, floor, dtype=np.int64)
    rest = n_rules - int(counts.sum())
    counts += rng.multinomial(rest, zipf / zipf.sum())
    return zipf, counts


@dataclass(frozen=True)
class _Profiles:
    """The world-wide tables every airport's profile is drawn from."""

    w: World
    hub_carrier: dict[int, str]
    country_n: dict[str, int]  # airports per country
    city_members: dict[tuple[str, str], list[int]]  # (country, city) -> non-reserved airports
    carrier_country: np.ndarray
    carrier_area: np.ndarray

    @classmethod
    def of(cls, w: World, reserved: tuple[int, ...], hub_carrier: dict[int, str]) -> _Profiles:
        reserved_set = set(reserved)
        city_members: dict[tuple[str, str], list[int]] = {}
        for i, (ci, cc) in enumerate(zip(w.city, w.country, strict=True)):
            if i not in reserved_set:
                city_members.setdefault((cc, ci), []).append(i)
        carrier_area = np.array(
            [w.area[w.country_members[c][0]] if c in w.country_members else "" for c in w.carrier_country],
            dtype=object,
        )
        return cls(
            w=w,
            hub_carrier=hub_carrier,
            country_n={c: len(m) for c, m in w.country_members.items()},
            city_members=city_members,
            carrier_country=np.array(w.carrier_country, dtype=object),
            carrier_area=carrier_area,
        )

    def draw(self, rank: int, widx: int, n_a: int, rng: np.random.Generator, u: Uniforms) -> Airport:
        """The profile of airport ``widx`` of rank ``rank`` holding ``n_a`` rules."""
        w = self.w
        ctry = w.country[widx]
        if self.country_n[ctry] < 2:
            ctn_types = [3]  # no domestic connections in a one-airport country
        elif n_a >= 4 or rank < 100:
            ctn_types = [0, 1, 2, 3]
        else:
            ctn_types = sorted(rng.permutation(4)[: max(1, int(n_a))].tolist())
        carriers = self._carriers(widx, n_a, rng)
        cw = [0.45] + [0.55 / (j + 1) ** 1.1 for j in range(1, len(carriers))]
        n_ter = 1 if n_a < 20 else 2 if n_a < 100 else 3 if n_a < 500 else 4 + int(u() * 3)
        style = TERMINAL_STYLES[pick((0.45, 0.75, 0.92, 1.0), u())]
        terminals = list(style[:n_ter])
        sisters = [s for s in self.city_members.get((ctry, w.city[widx]), []) if s != widx]
        sister = sisters[int(u() * len(sisters))] if sisters and n_a >= 20 else -1
        base_time = [min(len(TIMES[c]) - 1, 1 + int(u() * 3) + (1 if n_a > 500 else 0)) for c in range(4)]
        return Airport(
            world=widx,
            n_rules=int(n_a),
            ctn_types=ctn_types,
            carriers=carriers,
            carrier_cdf=cdf(cw),
            carrier_terminal=[int(u() * n_ter) for _ in carriers],
            terminals=terminals,
            sister=sister,
            base_time=base_time,
        )

    def _carriers(self, widx: int, n_a: int, rng: np.random.Generator) -> list[str]:
        """The hub carrier (or a home carrier) dominates; others are home-country carriers
        first, then same-area ones, then the rest of the world."""
        w = self.w
        k = int(np.clip(2 + 0.5 * math.sqrt(n_a), 2, 45))
        weights = np.where(
            self.carrier_country == w.country[widx],
            30.0,
            np.where(self.carrier_area == w.area[widx], 4.0, 1.0),
        )
        n_car = len(w.carriers)
        picks = rng.choice(n_car, size=min(k, n_car), replace=False, p=weights / weights.sum())
        carriers = [w.carriers[j] for j in picks.tolist()]
        dominant = self.hub_carrier.get(widx)
        if dominant is not None:
            carriers = [dominant, *[c for c in carriers if c != dominant][: k - 1]]
        return carriers
