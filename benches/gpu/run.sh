#!/usr/bin/env bash
# The whole GPU section in one command, on a GPU machine (docs: BENCHMARKS.md, "GPU").
# Needs the bundle from benches/gpu/bundle.sh (carry build/gpu-bundle: wheels and the demo's
# rule set and trace). Writes JSON and plots to
# OUT (default $OUT, else build/gpu-results). Without a GPU every step says so and the script
# still ends, so it can be tried anywhere.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-build/gpu-results}
bundle=${BUNDLE:-build/gpu-bundle}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
# NVRTC from the toolkit; one from a pip wheel is found by offload itself (rules._preload_nvrtc).
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
if ! python3 -c 'import offload._native' 2>/dev/null; then
    python3 -m pip install --quiet --no-index --find-links "$bundle" typer rich matplotlib pytest hypothesis pyzmq
    python3 -m pip install --quiet --no-index --no-deps --find-links "$bundle" offload
fi
nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.max,pcie.link.width.max --format=csv \
    > "$out/nvidia-smi.csv" 2>&1 || echo "no nvidia-smi" > "$out/nvidia-smi.csv"
python3 -c 'import json; from offload import rules; print(json.dumps(rules.gpu_device()))' > "$out/device.json" 2>&1
cat "$out/device.json"
mkdir -p build && tar -C build -xzf "$bundle/demo.tar.gz" && demo=build/demo
rt=(--ruletype "$demo/ruletype.xml" --rules "$demo/rules.csv")
# 1. Exactness on the device: the Python GPU tests (the kernel against linear, chunks, lanes).
python3 -m pytest -q -p no:cacheprovider tests/python/test_rules_gpu.py 2>&1 | tee "$out/tests.txt"
# 2. The matcher: gpu beside fast, 1 thread, batches from launch-bound to streaming.
python3 -m offload.cli rules bench "${rt[@]}" --queries "$demo/queries.csv" --matcher gpu,fast \
    --threads 1 --batches 4096,65536,1048576,4194304 --repeats 5 --out "$out/rules-gpu.json" 2>&1 | tail -20
# 3. The service feeding the GPU: the same grid with gpu and with fast; gpu replies carry the
#    batch's H2D / kernel / D2H (device_stages_us in the JSON's by-size rows).
for m in gpu fast; do
    python3 -m offload.cli sweep "${rt[@]}" --trace "$demo" --matcher "$m" --p 4 --w 4 --k 1,2 --e 1 \
        --batch 0,65536 --duration 3 --out "$out/sweep-$m.json" 2>&1 | tail -12
done
# 4. The channels: pageable / pinned / allocation + copy, launch latency (CuPy, where present).
# (no plots: an installed wheel does not find the repo's data/presets, which the plots read)
python3 -m offload.cli probe --quick --no-uring --no-plots --out "$out/probe.json" 2>&1 | tail -20
ls -l "$out"
