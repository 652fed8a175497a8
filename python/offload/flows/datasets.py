"""The particle flows' data sets (seed 003, slides 20 and 25), generated with the shapes of the
seed's three (scientific particles, airplanes, ships), in producer order, and the seed's two
queries on them. (id, time) is unique in each; consumers want them in that order.

* ``particles``: the case studies' particles (:mod:`offload.dataservices.particles`), one dump
  per time step, each sorted by position (x) as a simulation rank writes them;
* ``airplanes``: ADS-B-like state vectors (24-bit ICAO address, time, position, barometric
  altitude, ground speed, track, vertical rate, callsign). Each aircraft flies a straight track
  at cruise speed and reports once a second; a receiver's feed comes sorted by time;
* ``ships``: AIS-like position reports (9-digit MMSI, time, position, speed and course over
  ground, heading, navigational status). Ships move slowly, many are moored, and report every
  2-10 seconds under way and every 3 minutes at anchor.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from offload.dataservices import particles as P


@dataclass(frozen=True)
class DataSet:
    """A generated data set: its id column and the ids' domain (partitioning splits it into
    equal ranges), its time column, and the generator (rows, seed) -> table in producer order."""

    name: str
    schema: pa.Schema
    id_column: str
    id_range: Callable[[int], tuple[int, int]]
    time_column: str
    generate: Callable[[int, int], pa.Table]

    @property
    def key(self) -> tuple[str, str]:
        """The consumers' order: by id, then time."""
        return (self.id_column, self.time_column)


def _particle_dumps(rows: int) -> tuple[int, int]:
    """(time steps, particles per step) of a ``rows``-row particle flow: up to 16 dumps."""
    steps = max(1, min(16, rows // 1000))
    return steps, -(-rows // steps)


def _particles(rows: int, seed: int) -> pa.Table:
    """``rows`` particle rows: dumps of up to 16 steps of the same particles (ids 0 .. n - 1),
    each dump sorted by x."""
    steps, per = _particle_dumps(rows)
    dumps = []
    for s in range(steps):
        n = min(per, rows - s * per)
        t = P.generate(n, seed=seed * 1000 + s, steps=1).set_column(7, "t", pa.array(np.full(n, float(s))))
        dumps.append(t.take(pc.sort_indices(t, [("x", "ascending")])))
    return pa.concat_tables(dumps).combine_chunks() if dumps else P.SCHEMA.empty_table()


AIRPLANES = pa.schema([
    ("icao24", pa.int64()), ("time", pa.float64()), ("lat", pa.float64()), ("lon", pa.float64()),
    ("baroaltitude", pa.float32()), ("velocity", pa.float32()), ("heading", pa.float32()),
    ("vertrate", pa.float32()), ("callsign", pa.string()),
])  # fmt: skip


def _tracks(rows: int, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For ``counts`` reports per object (summing to ``rows``): each row's object and its report
    number along the object's track (0, 1, ...)."""
    who = np.repeat(np.arange(len(counts)), counts)
    first = np.repeat(np.cumsum(counts) - counts, counts)
    return who, np.arange(rows) - first


def _split(rows: int, weights: np.ndarray) -> np.ndarray:
    """``rows`` reports shared out in proportion to ``weights`` (counts summing to ``rows``)."""
    counts = np.floor(rows * weights / weights.sum()).astype(np.int64)
    counts[: rows - counts.sum()] += 1
    return counts


def _airplanes(rows: int, seed: int) -> pa.Table:
    """ADS-B-like state vectors: ~``rows`` / 600 aircraft, each reporting once a second (ten
    minutes each), sorted by time and latitude (a receiver's feed). (icao24, time) is unique."""
    rng = np.random.default_rng(seed)
    planes = max(1, rows // 600)
    icao = rng.choice(1 << 24, planes, replace=False).astype(np.int64)
    who, k = _tracks(rows, _split(rows, np.ones(planes)))
    start = rng.integers(0, 600, planes).astype(np.float64)
    t = start[who] + k
    speed = rng.normal(230, 20, planes).clip(60, 300)  # m/s
    track = rng.uniform(0, 360, planes)
    lat0, lon0 = rng.uniform(35, 60, planes), rng.uniform(-10, 30, planes)
    dist = speed[who] * k / 111_000  # degrees along the track
    rad = np.radians(track[who])
    climbing = rng.random(planes) < 0.2
    vrate = np.where(climbing, rng.normal(8, 3, planes), 0.0)
    alt = np.where(climbing, 3000.0, rng.choice([9144.0, 10058.0, 10972.0, 11887.0], planes))
    airline = rng.choice(["DLH", "AFR", "BAW", "KLM", "RYR", "EZY", "SWR", "IBE"], planes)
    callsign = np.char.add(airline, rng.integers(100, 9999, planes).astype(str))
    out = pa.table({
        "icao24": icao[who], "time": t, "lat": lat0[who] + dist * np.cos(rad),
        "lon": lon0[who] + dist * np.sin(rad), "baroaltitude": (alt[who] + vrate[who] * k).astype(np.float32),
        "velocity": speed[who].astype(np.float32), "heading": track[who].astype(np.float32),
        "vertrate": vrate[who].astype(np.float32), "callsign": callsign[who],
    }, schema=AIRPLANES)  # fmt: skip
    return out.take(pc.sort_indices(out, [("time", "ascending"), ("lat", "ascending")]))


SHIPS = pa.schema([
    ("mmsi", pa.int64()), ("time", pa.float64()), ("lat", pa.float64()), ("lon", pa.float64()),
    ("sog", pa.float32()), ("cog", pa.float32()), ("heading", pa.int16()), ("status", pa.int8()),
])  # fmt: skip


def _ships(rows: int, seed: int) -> pa.Table:
    """AIS-like position reports: ships under way (status 0) report every 2-10 s at 3-25 knots,
    anchored or moored ones (status 1, 5) every 3 minutes without moving; sorted by time and
    latitude (a coastal station's feed). (mmsi, time) is unique."""
    rng = np.random.default_rng(seed)
    ships = max(1, rows // 200)
    # an int population: numpy samples it without building (and shuffling) 600M candidates
    mmsi = 200_000_000 + rng.choice(600_000_000, ships, replace=False).astype(np.int64)
    status = rng.choice(np.array([0, 1, 5], dtype=np.int8), ships, p=[0.6, 0.15, 0.25])
    period = np.where(status == 0, rng.choice([2.0, 6.0, 10.0], ships), 180.0)
    who, k = _tracks(rows, _split(rows, 1 / period))
    t = rng.integers(0, 180, ships)[who] + k * period[who]
    sog = np.where(status == 0, rng.uniform(3, 25, ships), 0.0)
    cog = rng.uniform(0, 360, ships)
    lat0, lon0 = rng.uniform(50, 60, ships), rng.uniform(0, 12, ships)
    dist = sog[who] * 0.514 * k * period[who] / 111_000
    rad = np.radians(cog[who])
    out = pa.table({
        "mmsi": mmsi[who], "time": t.astype(np.float64), "lat": np.round(lat0[who] + dist * np.cos(rad), 5),
        "lon": np.round(lon0[who] + dist * np.sin(rad), 5), "sog": np.round(sog[who], 1).astype(np.float32),
        "cog": np.round(cog[who], 1).astype(np.float32), "heading": np.round(cog[who]).astype(np.int16),
        "status": status[who],
    }, schema=SHIPS)  # fmt: skip
    return out.take(pc.sort_indices(out, [("time", "ascending"), ("lat", "ascending")]))


DATASETS: dict[str, DataSet] = {
    "particles": DataSet("particles", P.SCHEMA, "id", lambda n: (0, _particle_dumps(n)[1]), "t", _particles),
    "airplanes": DataSet("airplanes", AIRPLANES, "icao24", lambda rows: (0, 1 << 24), "time", _airplanes),
    "ships": DataSet("ships", SHIPS, "mmsi", lambda rows: (200_000_000, 800_000_000), "time", _ships),
}


def dataset(name: str) -> DataSet:
    if name not in DATASETS:
        raise ValueError(f"unknown data set {name!r}; one of {', '.join(DATASETS)}")
    return DATASETS[name]


BOX = {
    "particles": (pc.field("x") < 0.5) & (pc.field("y") < 0.5) & (pc.field("z") < 0.5),
    "airplanes": (pc.field("lat") < 47.5) & (pc.field("lon") < 10.0) & (pc.field("baroaltitude") < 10000),
    "ships": (pc.field("lat") < 55.0) & (pc.field("lon") < 6.0) & (pc.field("sog") < 12.5),
}
"""The seed's filtering query: rows in an eighth of the data's bounding box (half of each of three
dimensions)."""


def speed_range(table: pa.Table, data: DataSet) -> tuple[float | None, float | None]:
    """The seed's aggregation query: the smallest and largest squared speed (particles: vx² + vy² +
    vz²; airplanes and ships: their reported speed squared)."""
    if data.name == "particles":
        v2 = pc.add(pc.add(pc.multiply(table["vx"], table["vx"]), pc.multiply(table["vy"], table["vy"])),
                    pc.multiply(table["vz"], table["vz"]))  # fmt: skip
    else:
        speed = table["velocity" if data.name == "airplanes" else "sog"]
        v2 = pc.multiply(speed, speed)
    mm = pc.min_max(v2)
    return mm["min"].as_py(), mm["max"].as_py()
