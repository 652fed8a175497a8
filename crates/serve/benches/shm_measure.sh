#!/usr/bin/env bash
# Issue 40 item 2's measurements, rerunnable on a quiet machine: the transports alone (rings vs
# iceoryx2), then the knee of the null and fast matchers (inline, 256-query pre-encoded requests,
# p99 <= 5 ms) over shm://, ipc:// and tcp://, RUNS times each, with the daemon's host path at
# each knee. One JSON line per result on stdout; the daemons' stderr in $OUT/.
#
#   crates/serve/benches/shm_measure.sh [RULETYPE RULES QUERIES]   (default: build/s100k/*)
# Environment: RUNS (3), SECONDS_PER_STEP (2), STEPS (5), OUT (build/bench/shm), SKIP_ICEORYX2=1.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
cd "$ROOT"
RT=${1:-build/s100k/ruletype.xml}
RULES=${2:-build/s100k/rules.csv}
QUERIES=${3:-build/s100k/queries.csv}
RUNS=${RUNS:-3}
SECS=${SECONDS_PER_STEP:-2}
STEPS=${STEPS:-5}
OUT=${OUT:-build/bench/shm}
mkdir -p "$OUT"
cargo build --release -q -p offload-serve --bin offload-serve --example shm_knee --example shm_transports
BIN=target/release/offload-serve
target/release/examples/shm_transports 2
if [ -z "${SKIP_ICEORYX2:-}" ]; then
  cargo run --release -q --manifest-path crates/serve/benches/shm_iceoryx2/Cargo.toml -- 2 2>/dev/null | tail -1
fi
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
for run in $(seq "$RUNS"); do
  for matcher in null fast; do
    for transport in shm ipc tcp; do
      case $transport in
        shm) EP="shm://$DIR/d.sock" ;;
        ipc) EP="ipc://$DIR/d.ipc" ;;
        tcp) EP="tcp://127.0.0.1:$((5700 + run))" ;;
      esac
      CTL="ipc://$DIR/ctl.ipc"
      "$BIN" --ruletype "$RT" --rules "$RULES" --matcher "$matcher" --kernels 0 --workers 1 \
        -e "$EP" -c "$CTL" 2>"$OUT/daemon-$matcher-$transport-$run.log" &
      PID=$!
      for _ in $(seq 100); do grep -q '^serving' "$OUT/daemon-$matcher-$transport-$run.log" && break; sleep 0.1; done
      echo -n "{\"run\": $run, \"matcher\": \"$matcher\", \"transport\": \"$transport\", \"result\": "
      target/release/examples/shm_knee "$EP" "$CTL" "$RT" "$RULES" "$QUERIES" 256 5000 "$STEPS" "$SECS" || echo -n null
      echo "}"
      kill "$PID"; wait "$PID" || true
    done
  done
done
