"""Metrics that compare offloaded and not-offloaded systems fairly (seed 003, slides 8-16, 45-74).

* :mod:`~offload.metrics.mbwu` — media-based work units of this disk and $/, kWh/, m³/MBWU (a package).
* :mod:`~offload.metrics.mbwu.detect` — the steady window, the plateau and the thread sweep.
* :mod:`~offload.metrics.mbwu.keys` — YCSB's zipfian keys (from :mod:`offload.zipf`).
* :mod:`~offload.metrics.mbwu.kv` — RocksDB: sharded layout, precondition, worker processes.
* :mod:`~offload.metrics.mbwu.scan` — the Arrow scan: its Parquet data set and its passes.
* :mod:`~offload.metrics.mbwu.procedure` — ``Plan`` and ``measure``, on the host and a node budget.
* :mod:`~offload.metrics.mbwu.figure` — the sweep's figure.
* :mod:`~offload.metrics.mbwu.costs` — $/MBWU, kWh/MBWU, m³/MBWU and the seed's case study.
* :mod:`~offload.metrics.headroom` — network processing headroom: a sender's CPU left at line rate.
* :mod:`~offload.metrics.availability` — relative data availability of embedded storage vs servers.
* :mod:`~offload.metrics.rpwu` — node budgets against a reference, stress-ng stressor by stressor.
* :mod:`~offload.metrics.tables` — what each command prints without ``--json``.
* :mod:`~offload.metrics.cli` — ``offload metrics ...``: options, and calls into the modules above.
"""
