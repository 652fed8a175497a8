"""The planner: what to deploy and what it costs (`offload plan ...`).

- `cost`: servers or instances per deployment and their cost, arithmetic shown (Table 1 of
  seeds 000/001 reproduced from its inputs).
"""
