# Two commands on a fresh machine: `make demo` and `make test`.
# Both create or update .venv first (seconds when nothing changed).

VENV := .venv
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
PYTEST_ARGS ?=
# make demo DEMO_ARGS=--keep-running: leave the stack and Airflow up, print the onceflow page URL.
DEMO_ARGS ?=

.PHONY: venv reader-env demo test test-unit test-slow test-all test-chaos chaos chaos-report services-up services-down clean

venv:
	@tools/bootstrap.sh

# The tests' second Iceberg reader: PySpark 4.1 in a venv of its own, made once (a minute), then found.
reader-env: venv
	$(VENV)/bin/python -m onceflow_devkit.services.pyspark_env

demo: venv
	$(VENV)/bin/onceflow demo $(DEMO_ARGS)

# The default suite: everything but runs marked slow (docs/measurements/make-test.log: its time on 2 cores).
# TEST_WORKERS pytest processes share the test files, a whole file each (its module fixtures stay in one
# process), longest first (tests/conftest.py); each process starts the services its tests ask for.
# TEST_WORKERS=0 runs everything in this process. --durations: the slowest tests (docs/testing.md).
TEST_WORKERS ?= 2
test: venv reader-env
	$(VENV)/bin/python -m pytest -m "not slow" -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder \
		--durations=12 $(PYTEST_ARGS)

# Pure logic only: seconds, no service started.
test-unit: venv
	$(VENV)/bin/python -m pytest tests/unit $(PYTEST_ARGS)

# The tests `make test` leaves out, each phase of a second or more timed (docs/measurements/make-test-slow.log).
test-slow: venv reader-env
	$(VENV)/bin/python -m pytest -m slow --durations=0 --durations-min=1 $(PYTEST_ARGS)

# Everything: make test and make test-slow in one run.
test-all: venv reader-env
	$(VENV)/bin/python -m pytest $(PYTEST_ARGS)

# The chaos tests alone: the bounded run (also in `make test`) and the slow ones.
test-chaos: venv
	$(VENV)/bin/python -m pytest -m chaos $(PYTEST_ARGS)

# The long chaos run whose figures docs/chaos.md reports: faulted batches through
# Airflow over both brokers and both warehouses, then the audit (hours).
CHAOS_BATCHES ?= 220
CHAOS_SEED ?= 2026
CHAOS_SPARK ?= connect
chaos: venv
	$(VENV)/bin/onceflow chaos --batches $(CHAOS_BATCHES) --seed $(CHAOS_SEED) --broker all --warehouse all \
		--spark $(CHAOS_SPARK) --json \
		> docs/chaos-runs/$$(date +%F)-seed$(CHAOS_SEED).json
	$(MAKE) chaos-report

# docs/chaos.md's chaos figures, made again from the saved runs (and what is short of the bar).
chaos-report: venv
	$(VENV)/bin/onceflow chaos-report --update docs/chaos.md docs/chaos-runs/*.json

services-up: venv
	$(VENV)/bin/onceflow services up

services-down: venv
	$(VENV)/bin/onceflow services down

clean:
	-$(VENV)/bin/onceflow services down
	rm -rf .onceflow .pytest_cache .hypothesis
