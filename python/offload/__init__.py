"""offload: run data services on accelerators and near-data devices, and know when that pays.

One package per part, top to bottom as ``.importlinter`` checks it (a part imports only the
parts below it):

* :mod:`offload.cli` — the ``offload`` command; :mod:`offload.demo` — ``make demo``;
* :mod:`offload.report` — ``offload report``: one HTML page from every part's results;
* :mod:`offload.metrics` — MBWU, headroom, availability, RPWU (priced with plan's catalog);
* :mod:`offload.plan` — deployment cost, the serving simulator, calibration, recommendations;
* :mod:`offload.flows` — the particle data flows on near-data nodes;
* :mod:`offload.serve` — the rule service's clients, injector and sweep (the daemon is Rust);
* :mod:`offload.recsys` — RM-SSD: embeddings on SSD, compute in the drive;
* :mod:`offload.dataservices` — near-data query nodes (Arrow Flight, Substrait);
* :mod:`offload.probe` — the channels between CPU and accelerator, measured;
* :mod:`offload.rules` — the business-rule engine (ERBIUM / MCT);
* shared below every part: :mod:`offload.clitools` (one-line errors, ``--json`` / ``--out``,
  progress), :mod:`offload.files` (whole-or-nothing writes), :mod:`offload.datafiles` (shipped
  data), :mod:`offload.zipf` (the one Zipf sampler) and :mod:`offload.host` (machine record,
  budgets, links, children, plotting).

The native core is ``offload._native`` (``crates/py``).
"""

__all__ = ["__version__"]


def __getattr__(name: str) -> str:
    """`offload.__version__`, loaded with the native core when first asked for: the `offload`
    command sets its Ctrl-C handler before the core's library is loaded."""
    if name == "__version__":
        from offload._native import __version__

        return __version__
    raise AttributeError(f"module 'offload' has no attribute {name!r}")
