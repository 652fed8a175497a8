#!/usr/bin/env bash
# Builds, on a development machine, what the GPU section needs on a GPU machine that has no
# Rust toolchain and no package registry (../shared/design/gpu.md): the abi3 wheel of offload
# and the wheels of the few dependencies the GPU run imports, for the GPU machine's Python.
# Usage: benches/gpu/bundle.sh [DIR] [PYTHON_VERSION]   (defaults: build/gpu-bundle, 3.12)
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=${1:-build/gpu-bundle}
py=${2:-3.12}
rm -rf "$dir"
mkdir -p "$dir"
# The extension: abi3, so one wheel serves any CPython >= 3.11.
.venv/bin/maturin build --release --quiet --out "$dir"
# What `offload rules bench`, the probe and the GPU tests import, beyond numpy (which the GPU
# machines have). offload itself is installed with --no-deps: the data-service stack
# (datafusion, pyarrow, ...) is not needed there.
.venv/bin/pip download --quiet --dest "$dir" --only-binary=:all: --python-version "$py" \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
    typer rich matplotlib pytest
du -sh "$dir"
