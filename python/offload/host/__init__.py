"""Shared host helpers at the bottom of the layering. Nothing here imports a part (rules, serve,
recsys, dataservices, flows, metrics, plan, ...); parts import it (`.importlinter` checks it).

* :mod:`~offload.host.machine` — the one record of the machine a figure was taken on;
* :mod:`~offload.host.children` — start a child and wait, with a deadline that fires, until it says
  it is ready (``wait_ready``, ``LineReader``);
* :mod:`~offload.host.cgroups` — child cgroups holding a CPU quota or a memory limit, on cgroup v1
  and v2, or the reason there are none;
* :mod:`~offload.host.budgets` — a node's resource budget (threads, CPU share, memory, link) as
  named profiles, applied with cgroups;
* :mod:`~offload.host.links` — a link's shape and shaping it for real: network namespaces and tc;
* :mod:`~offload.host.plots` — the one plotting setup (matplotlib on Agg, the house style).

See docs/host.md.
"""
