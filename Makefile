# Developer entry points: install everything, run the tests, start/stop the demo, run the benchmarks.
#
#   make setup          .venv + `pip install -e '.[dev,bench]'` + the Debian packages the tests need (idempotent)
#   make test           setup, then the whole pytest suite (PYTEST_ARGS="-k kcat" to narrow it)
#   make pipeline-up    start the demo (ZooKeeper + a 3-broker cluster under ./var/) and prove it works
#   make pipeline-down  stop it (SIGTERM by pid files, brokers first, then ZooKeeper)
#   make bench          our broker beside RabbitMQ, ActiveMQ, NATS JetStream -> bench/results/<date>/
#                       (BENCH_ARGS="--ten-million" for the paper's counts; bench-scripts runs the older scripts)
#   make clean          stop the demo and remove generated files (keeps .venv; `make distclean` drops it)

SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# Written after a successful install; newer than pyproject.toml means nothing to do.
SETUP_STAMP := $(VENV)/.setup-stamp
# Debian packages needed by the tests and the demo (zookeeper brings the JRE Spark runs on; prometheus brings
# prometheus and promtool, for the rules' unit tests and the live tests; chromium for the dashboard's browser
# tests), and the benchmark's peers.
DEBIAN_PACKAGES ?= kcat zookeeper prometheus chromium rabbitmq-server activemq nats-server
BENCH_ARGS ?=
PYTEST_ARGS ?=
# Each entry is one benchmark command line (script and arguments); `make bench-scripts` runs them in order.
BENCH_COMMANDS := \
	"-m bench.kcat_bench" \
	"-m bench.broker_produce_bench" \
	"-m bench.producer_bench --messages 300000 --kafka-python-messages 30000" \
	"-m bench.consumer_bench" \
	"-m bench.broker_memory" \
	"-m bench.protocol_bench" \
	"-m bench.codec_bench" \
	"-m bench.registry_bench" \
	"-m bench.workload_bench" \
	"-m bench.emulator_bench" \
	"-m bench.sketch_bench" \
	"-m bench.etl_bench" \
	"-m bench.audit_bench"

.PHONY: setup debian-packages test pipeline-up pipeline-down bench bench-scripts clean distclean

setup: $(SETUP_STAMP) debian-packages

$(SETUP_STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --disable-pip-version-check -e '.[dev,bench]'
	@touch $@

debian-packages:
	@bash infra/install-debian-packages.sh $(DEBIAN_PACKAGES)

test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

pipeline-up: setup
	$(PY) infra/demo.py up

pipeline-down:
	@if [ -x $(PY) ]; then $(PY) infra/demo.py down; else $(PYTHON) infra/demo.py down; fi

bench: setup
	$(PY) -m bench.run $(BENCH_ARGS)

bench-scripts: setup
	@set -e; for command in $(BENCH_COMMANDS); do echo "== $$command"; $(PY) $$command; done

clean: pipeline-down
	rm -rf var build dist .pytest_cache *.egg-info bench/results/tmp
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
