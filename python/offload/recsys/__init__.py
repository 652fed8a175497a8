"""Recommendation inference with embeddings on SSD (seed 002, RM-SSD).

Models (DLRM RMC1-3, NCF, Wide&Deep), traces, the FPGA kernel-size search, and the strategies
that read embedding tables from memory, the page cache, O_DIRECT io_uring or an in-storage
device emulator (the per-lookup work lives in crates/recsys).
"""
