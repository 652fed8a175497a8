"""`offload plan fleet`: from one simulated node to a priced fleet.

A node (p client processes on `cpus` cores, w/k/e, optionally a what-if kernel) is simulated
with calibrated stage costs; its throughput becomes the per-server capacity of `plan cost`'s
model, which sizes and prices the fleet for a workload — e.g. 400 nodes × 48 processes, the
seed's production scale, asked as "what does the load need, and what does it cost".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from offload.plan import cost
from offload.plan.simulate import Costs, Load, Pipeline, Result, simulate


@dataclass
class Fleet:
    node: Result
    requests_per_s: float  # the fleet's workload
    nodes: int  # nodes it needs
    line: cost.Line  # the priced deployment

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node.to_json(),
            "node_capacity_rps": self.node.throughput_rps,
            "workload_requests_per_s": self.requests_per_s,
            "nodes": self.nodes,
            "cost": self.line.to_json(),
        }


def size(
    pipe: Pipeline,
    costs: Costs,
    sizes: Sequence[int],
    item: cost.Item,
    requests_per_s: float,
    duration_s: float = 0.5,
) -> Fleet:
    """Simulates one node (closed loop: its capacity), then sizes and prices the fleet."""
    node = simulate(pipe, costs, Load(tuple(sizes), duration_s=duration_s, warmup_s=0.1))
    if node.throughput_rps <= 0:
        raise ValueError(f"the simulated node answered nothing in {duration_s} s: {pipe.label()}")
    capacity = cost.exact(node.throughput_rps)
    rate = cost.exact(requests_per_s)
    how = (
        f"{cost.fmt(rate, 0)} requests/s ÷ {cost.fmt(capacity, 0)} requests/s per node "
        f"(simulated {pipe.label()} on {pipe.cpus or 'unlimited'} cores) = {cost.fmt(rate / capacity, 3)}"
    )
    w = cost.Workload(rate / capacity, how, item.vcpus, Fraction(0), None, "up")
    scenario = cost.Scenario(None, w, None, [cost.Deployment("fleet", pipe.label(), item)])
    (line,) = cost.cost(scenario)
    return Fleet(node, requests_per_s, math.ceil(rate / capacity), line)
