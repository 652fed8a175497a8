"""Metrics that compare offloaded and not-offloaded systems fairly (seed 003, slides 8-16, 45-74):

* :mod:`~offload.metrics.mbwu` — the media-based work unit of a workload on this machine's disk
  (RocksDB with YCSB A and C, an Arrow scan) and $/, kWh/, m³/MBWU from the price catalog;
* :mod:`~offload.metrics.headroom` — network processing headroom: the CPU a sender has left while
  a shaped link stays full;
* :mod:`~offload.metrics.availability` — relative data availability of embedded storage nodes
  against servers (copysets, Poisson failures);
* :mod:`~offload.metrics.rpwu` — a relative-performance profile of a node budget against a
  reference, by stress-ng stressor classes (the seed's Raspberry-Pi-based Work Unit).
"""
