#!/usr/bin/env bash
# Runs one fuzz target (cargo-fuzz: libFuzzer, AddressSanitizer; a Python target: Atheris)
# until it has done RUNS executions or SECONDS seconds have passed, whichever comes first, in
# one process.
#   fuzz/run.sh TARGET SECONDS [RUNS]
# New inputs go to fuzz/corpus/TARGET (kept between runs, not committed); the committed seeds
# in fuzz/corpus-seeds/TARGET are read, never written. A crash, a panic, a leak, a timeout
# (> 10 s on one input) or running out of memory (> 2 GiB) stops the run with exit status
# non-zero and leaves the input in fuzz/artifacts/TARGET/. The last lines of the log say how
# many executions ran, at what rate, and the coverage reached.
set -euo pipefail
cd "$(dirname "$0")"
target=$1 seconds=$2 runs=${3:--1}
mkdir -p "corpus/$target" "artifacts/$target" logs
log="logs/$target.log"
status=0
flags=(-max_total_time="$seconds" -runs="$runs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
    -artifact_prefix="artifacts/$target/")
if [ -f "python/$target.py" ]; then
    # A Python target (Atheris): the project's venv, with the package built (make develop).
    ../.venv/bin/python "python/$target.py" "corpus/$target" "corpus-seeds/$target" "${flags[@]}" >"$log" 2>&1 \
        || status=$?
else
    cargo +nightly fuzz run "$target" "corpus/$target" "corpus-seeds/$target" -- "${flags[@]}" >"$log" 2>&1 \
        || status=$?
fi
grep -E '^#[0-9]+' "$log" | tail -1 || true
grep -E '^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)' "$log" || true
if [ "$status" -ne 0 ]; then
    echo "fuzz target $target FAILED (exit $status); the log: fuzz/$log" >&2
    tail -n 60 "$log" >&2
    ls -l "artifacts/$target" >&2 || true
fi
exit "$status"
