"""Settings shared by every test module.

Under CI (``CI`` set, as `.ci/run` is run) Hypothesis is derandomized: a fresh clone has no example
database, so each run would draw new examples, and some properties (the planner's simulations)
cost minutes on an unlucky draw. Derandomized, a run takes the same time every time and a
failure is reproducible. Developers' runs stay random, which is where new cases are found.
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    settings.load_profile("ci")
