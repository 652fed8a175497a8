"""The planner: what to deploy and what it costs (`offload plan ...`).

- `cost`: servers or instances per deployment and their cost, arithmetic shown (Table 1 of
  seeds 000/001 reproduced from its inputs).
- `simulate`: a discrete-event model of the serving pipeline (SimPy), stage by stage as the daemon.
- `calibrate`: the simulator's stage costs from measured runs, and its predictions checked.
- `recommend`: a configuration from measured and/or simulated sweeps (throughput under an SLA,
  lowest p99 for a target).
- `fleet`: from one simulated node to a sized and priced fleet.
- `measured`: what-if kernels from a GPU machine's measurements, checked against measured runs.
- `flows`: a model of the particle pipeline over nodes, calibrated on `offload flows run`.
- `tomlfile`: the planner's TOML inputs, with errors at `file:line:column`.
- `cli`: `offload plan ...`.
"""
