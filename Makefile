# Developer entry points: install everything, run the tests, start/stop the demo, run the benchmarks.
#
#   make setup          .venv + `pip install -e '.[dev,bench]'` + the Debian packages the tests need (idempotent)
#   make test           setup, the layer contracts (lint-imports), then the whole pytest suite on 2 workers
#                       (PYTEST_ARGS="-k kcat" to narrow it, PYTEST_WORKERS=0 for one process)
#   make pipeline-up    the whole pipeline under supervisord (infra/topology.yml; TOPOLOGY=file for another), data in var/
#   make pipeline-down  stop every process, the emulators first and ZooKeeper last; the data stays
#   make pipeline-clean pipeline-down, then remove the data (var/)
#   make bench          our broker beside RabbitMQ, ActiveMQ, NATS JetStream -> bench/results/<date>/
#                       (BENCH_ARGS="--ten-million" for the paper's counts; bench-scripts runs the older scripts)
#   make bench-compare BASE=<commit>  the core benchmarks (broker produce/fetch, client produce/consume, mirror,
#                       ETL, audit) alternately on BASE and the working tree: medians, ratios, spreads
#                       (COMPARE_ARGS="--pairs 5 --only broker-produce"; JSON in bench/results/)
#   make docs           regenerate docs/operations.md from the settings tables, programs and metrics
#   make clean          pipeline-clean and remove generated files (keeps .venv; `make distclean` drops it)

SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# Written after a successful install; newer than pyproject.toml means nothing to do.
SETUP_STAMP := $(VENV)/.setup-stamp
# Debian packages needed by the tests and the demo (zookeeper brings the JRE Spark runs on; prometheus brings
# prometheus and promtool, for the rules' promtool tests and the live tests; chromium for the dashboard's browser
# tests), and the benchmark's peers.
DEBIAN_PACKAGES ?= kcat zookeeper prometheus chromium rabbitmq-server activemq nats-server
BENCH_ARGS ?=
COMPARE_ARGS ?=
PYTEST_ARGS ?=
# pytest-xdist workers for `make test` (0: one process). Most tests wait on processes, sessions and timeouts, so two
# workers on two cores nearly halve the wall time; each test module runs whole on one worker (--dist loadfile), so
# a module's shared fixtures (a cluster, an ETL environment, a SparkSession) start once, and the modules go out in
# the collection's order (tests/conftest.py puts the slow ones first), not xdist's largest-count-first.
PYTEST_WORKERS ?= 2
# The deployment's topology file (make pipeline-up TOPOLOGY=my-topology.yml)
TOPOLOGY ?= infra/topology.yml
# Each entry is one benchmark command line (script and arguments); `make bench-scripts` runs them in order.
BENCH_COMMANDS := \
	"-m bench.kcat_bench" \
	"-m bench.broker_produce_bench" \
	"-m bench.producer_bench --messages 300000 --kafka-python-messages 30000" \
	"-m bench.consumer_bench" \
	"-m bench.broker_memory" \
	"-m bench.protocol_bench" \
	"-m bench.authorizer_bench" \
	"-m bench.codec_bench" \
	"-m bench.registry_bench" \
	"-m bench.workload_bench" \
	"-m bench.emulator_bench" \
	"-m bench.sketch_bench" \
	"-m bench.etl_bench" \
	"-m bench.audit_bench" \
	"-m bench.deployment_bench --minutes 12" \
	"-m bench.replication_bench" \
	"-m bench.group_bench" \
	"-m bench.log_cleaner_throughput" \
	"-m bench.cleaner_bench"

.PHONY: setup debian-packages test docs pipeline-up pipeline-down pipeline-clean bench bench-scripts bench-compare clean distclean

setup: $(SETUP_STAMP) debian-packages

$(SETUP_STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --disable-pip-version-check -e '.[dev,bench]'
	@touch $@

debian-packages:
	@bash infra/install-debian-packages.sh $(DEBIAN_PACKAGES)

test: setup
	$(VENV)/bin/lint-imports
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

docs: setup
	$(PY) -m infra.docs

pipeline-up: setup
	$(PY) -m infra.deployment up --topology $(TOPOLOGY)

# Without a virtualenv nothing can be running (the deployment runs from it).
pipeline-down:
	@if [ -x $(PY) ]; then $(PY) -m infra.deployment down --topology $(TOPOLOGY); else echo "nothing running (no $(VENV))"; fi

pipeline-clean:
	@if [ -x $(PY) ]; then $(PY) -m infra.deployment clean --topology $(TOPOLOGY); else rm -rf var; fi

bench: setup
	$(PY) -m bench.run $(BENCH_ARGS)

bench-scripts: setup
	@set -e; for command in $(BENCH_COMMANDS); do echo "== $$command"; $(PY) $$command; done

bench-compare: setup
	@test -n "$(BASE)" || { echo "make bench-compare: say BASE=<commit>" >&2; exit 2; }
	$(PY) -m bench.compare --base $(BASE) $(COMPARE_ARGS)

clean: pipeline-clean
	rm -rf build dist .pytest_cache *.egg-info bench/results/tmp
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
