"""Recommendation inference with embeddings on SSD (seed 002, RM-SSD).

Models (DLRM RMC1-3, NCF, Wide&Deep), embedding traces, the FPGA kernel-size search, and the
strategies that read embedding tables from memory, the page cache, O_DIRECT io_uring or an
in-storage device emulator (the per-lookup work lives in crates/recsys).

Modules, a line each:

- `models`: model specs (Table III, NCF, WnD), their safetensors weights, a numpy reference forward.
- `engine`: model directories (weights + table files) and the engine that runs one strategy.
- `device`: the device emulator process and the memory cgroup it joins (``python -m``).
- `memlimit`: the DRAM budget of ssd-s / ssd-m in disk mode (a child memory cgroup).
- `traces`: seeded embedding traces (config, permutation, batches, synthesis, trace, locality;
  Zipf from `offload.zipf`).
- `fpga`: the MLP engine's kernel-size search and resource model (shapes, resources, flash,
  design, search, paper).
- `bench`: every strategy over one trace side by side, the locality sweep.
- `plots`: the seed's figures from bench JSON (Figs. 2, 3, 10, 12-15).
- `cli`: `offload recsys ...` (options only).
"""
