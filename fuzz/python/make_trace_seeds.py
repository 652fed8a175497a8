"""Writes the seed traces of the trace_load target (fuzz/corpus-seeds/trace_load/): small
traces from the generator, saved by save_trace. Run with the project's venv:
.venv/bin/python fuzz/python/make_trace_seeds.py
"""

from pathlib import Path

from offload.recsys.traces import EmbeddingTrace, TraceConfig, generate_trace, save_trace

OUT = Path(__file__).resolve().parent.parent / "corpus-seeds" / "trace_load"

if __name__ == "__main__":
    OUT.mkdir(parents=True, exist_ok=True)
    configs = {
        "hotset-2x2": TraceConfig(rows=(100, 50), batch_size=2, lookups=2, dense_width=3),
        "poisson-1": TraceConfig(
            rows=1000, num_tables=1, batch_size=3, lookups=1.5, lookups_dist="poisson", dense_width=1
        ),
        "recssd-3": TraceConfig(rows=(64, 64, 64), batch_size=1, lookups=3, dense_width=2, kind="recssd"),
    }
    for name, config in configs.items():
        save_trace(OUT / name, generate_trace(config, 2))
    nc = TraceConfig(rows=(10,), batch_size=2, lookups=1, dense_width=1)
    save_trace(
        OUT / "no-config", EmbeddingTrace(batches=generate_trace(nc, 1).batches, rows=(10,), config=None)
    )
    for p in sorted(OUT.iterdir()):
        print(p.name, p.stat().st_size)
