"""Metrics that compare offloaded and not-offloaded systems fairly (seed 003, slides 8-16):

* :mod:`~offload.metrics.rpwu` — a relative-performance profile of a node budget against a
  reference, by stress-ng stressor classes (the seed's Raspberry-Pi-based Work Unit).
"""
