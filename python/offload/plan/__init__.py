"""The planner: what to deploy and what it costs (`offload plan ...`).

- `cost`: the price catalog, and servers or instances per deployment with their cost, arithmetic shown.
- `simulate`: a discrete-event model of the serving pipeline (SimPy), stage by stage as the daemon.
- `calibrate`: the simulator's stage costs from measured runs, and its predictions checked.
- `inputs`: stage costs (calibration, TOML, what-if preset) and request sizes, as commands name them.
- `recommend`: a configuration from measured and/or simulated sweeps (SLA or throughput target).
- `fleet`: from one simulated node to a sized and priced fleet.
- `measured`: what-if kernels from a GPU machine's measurements, checked against measured runs.
- `tomlfile`: the planner's TOML inputs, with errors at `file:line:column`.
- `tables`: what each command prints without `--json`.
- `cli`: `offload plan ...`: options, progress, and calls into the modules above.
"""
