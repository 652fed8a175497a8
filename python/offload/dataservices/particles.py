"""Particle tables like the seed's HPC case studies (seed 003, slides 69-74): one row per particle
with an id, a position, a velocity and a time step.

The seed queries 6,177,731 particles with filters on x, y and z, and both of its case
selectivities are those of independent uniform [0, 1) positions: Case I
(``x >= 0.7 and y < 0.3 and z <= 0.1``) keeps 0.3 * 0.3 * 0.1 = 0.9%, Case II
(``x >= 0.5 and y < 0.55 and z <= 0.67``) 18.4%. Positions are therefore uniform by default;
velocities are Maxwellian (normal per component) and ``t`` is the simulation step of the dump.

The ``correlation`` knob makes y follow x (``y = rho * x + (1 - rho) * u`` for a fresh uniform u)
so that estimators that assume independent columns go wrong, the known failure the seed's
design note warns about.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

SEED_ROWS = 6_177_731
"""Particles in the seed's case studies."""

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("x", pa.float64()),
        ("y", pa.float64()),
        ("z", pa.float64()),
        ("vx", pa.float64()),
        ("vy", pa.float64()),
        ("vz", pa.float64()),
        ("t", pa.float64()),
    ]
)


def generate(
    rows: int = SEED_ROWS,
    *,
    seed: int = 0,
    correlation: float = 0.0,
    steps: int = 16,
    first_id: int = 0,
) -> pa.Table:
    """A particle table of ``rows`` rows. ``correlation`` in [0, 1] ties y to x (0: independent);
    ``steps`` distinct time steps; ids are ``first_id ..`` in a shuffled order, as a simulation
    rank emits particles sorted by position, not by id."""
    if rows < 0:
        raise ValueError(f"rows must be >= 0, got {rows}")
    if not 0.0 <= correlation <= 1.0:
        raise ValueError(f"correlation must be in [0, 1], got {correlation}")
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    rng = np.random.default_rng(seed)
    x = rng.random(rows)
    y = rng.random(rows)
    if correlation:
        y = correlation * x + (1.0 - correlation) * y
    z = rng.random(rows)
    v = rng.normal(0.0, 1.0, size=(3, rows))
    t = rng.integers(0, steps, rows).astype(np.float64) / steps
    ids = rng.permutation(rows).astype(np.int64) + first_id
    cols = [ids, x, y, z, v[0], v[1], v[2], t]
    return pa.Table.from_arrays([pa.array(c) for c in cols], schema=SCHEMA)


def write(table: pa.Table, path: str | Path, row_group_rows: int = 1 << 20) -> Path:
    """Writes ``table`` as Parquet (zstd, page checksums) at ``path``, whole or not at all
    (:func:`.tablefiles.write_parquet`; a full disk is a `WriteError` naming the file)."""
    from offload.dataservices.tablefiles import write_parquet

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_parquet(table, path, compression="zstd", row_group_size=row_group_rows)
