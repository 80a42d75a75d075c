# Two entry points: `make demo` (the whole job on the embedded local stack) and `make test`.
# Both create and reuse .venv from requirements.txt; the local stack's state lives in .state/.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed-$(shell cat requirements.txt requirements-kerberos.txt pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: engine venv demo lint test test-exhaustive test-full test-simulate test-stacks jars stack-start stack-stop stack-up stack-down clean dist

$(STAMP): requirements.txt requirements-kerberos.txt pyproject.toml
	@date +%s > .venv-build-started
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info[:2] >= (3, 11) else "error: Python 3.11+ is needed")'
	@command -v java >/dev/null || { echo "error: java not found: install a Java 17 runtime (apt-get install openjdk-17-jre-headless)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check -r requirements.txt
	$(VENV)/bin/pip install -q --disable-pip-version-check --no-deps -e .
	@if command -v krb5-config >/dev/null; then $(VENV)/bin/pip install -q --disable-pip-version-check -r requirements-kerberos.txt \
	  || echo "note: the kerberos module did not build: the Kerberos test will skip"; \
	else echo "note: krb5-config not found (Debian: libkrb5-dev): no Kerberos module, the Kerberos test will skip"; fi
	@rm -f $(VENV)/.installed-*; touch $@
	@echo "downloads and installs (pip, outside the test budget): $$(( $$(date +%s) - $$(cat .venv-build-started) )) s"; rm -f .venv-build-started

venv: $(STAMP)

# The merge engine's jar (plugins/hive_compaction/merge/engine, Maven) into plugins/hive_compaction/jobs/,
# where the wheel ships it; rebuilt only when a source changed (scripts/build_engine.py; the wheel's
# build, setup.py, runs the same).
engine: venv
	@source scripts/env.sh && python scripts/build_engine.py >/dev/null

demo: venv engine
	@source scripts/env.sh && python scripts/demo.py

# The linter, the formatter's check and the type checker, as tests/test_lint.py runs them in make test
# (pyproject.toml configures them; requirements.txt pins them).
lint: venv
	@source scripts/env.sh && python -m ruff check . && python -m ruff format --check . && python -m mypy

# The suite: two processes (pytest-xdist, TEST_WORKERS=1 for one), each test module on one of
# them, the longest first (tests/conftest.py). It prints its wall time, every real component's starts and the ten slowest tests, and
# fails past SUITE_BUDGET_MINUTES (40). The safety matrices run a seeded sample (the seed is
# printed; SUITE_MATRIX_SEED=<seed> replays it); test-exhaustive runs every case. The real stacks
# (tests/stacks: HDFS, YARN, Hive Metastores 3.1 and 4.0) need `make jars` (Maven Central, outside
# the budget, like pip); one variant of each, without the tests marked stacks_only (test-stacks).
TEST_WORKERS ?= 2
test: venv engine
	@$(MAKE) -s -k jars || echo "note: the real stacks' jars were not fetched from Maven Central: tests/stacks will skip"
	@source scripts/env.sh && python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder -m "not stacks_only" tests

# The JVM pieces of the real stacks (HDFS, YARN, Hive Metastores 3 and 4, S3A), from Maven Central: each
# scripts/maven/<stack>/pom.xml pins its artifacts, copied with their dependencies into
# .state/jars/<stack>/ (cached in ~/.m2; fetched again only when the pom changes).
POMS := $(wildcard scripts/maven/*/pom.xml)
JARS := $(patsubst scripts/maven/%/pom.xml,.state/jars/%/.fetched,$(POMS))
.state/jars/%/.fetched: scripts/maven/%/pom.xml
	@command -v mvn >/dev/null || { echo "error: mvn not found (Debian: apt-get install maven)"; exit 1; }
	@rm -rf $(@D) && mkdir -p $(@D)
	@mvn -q -B -f $< dependency:copy-dependencies -DoutputDirectory=$(abspath $(@D)) -Dmdep.includeScope=runtime \
	  || { echo "error: the jars of $< did not resolve (is Maven Central reachable?)"; exit 1; }
	@touch $@
# The tests' local S3 endpoint (moto's server, PyPI) in a virtualenv of its own: its pins clash with
# the suite's (requirements-s3.txt). Made with the jars, outside the budget.
S3_SERVER := .state/s3-server
$(S3_SERVER)/.installed: requirements-s3.txt
	@rm -rf $(S3_SERVER) && $(PYTHON) -m venv $(S3_SERVER)
	@$(S3_SERVER)/bin/pip install -q --disable-pip-version-check -r requirements-s3.txt \
	  || { echo "error: the S3 server of requirements-s3.txt did not install (is PyPI reachable?)"; exit 1; }
	@touch $@
# A Spark 3.5 spark-submit for the merge and rollback jobs (tests/test_spark35.py), in a virtualenv of
# its own (requirements-spark35.txt): the suite's venv has 4.2. On the job side's lowest Python, 3.8, where
# there is one (on PATH or pyenv's; docs/deploy.md: the matrix), else $(PYTHON). Made with the jars.
SPARK35 := .state/spark35
SPARK35_PYTHON ?= $(firstword $(shell for p in python3.8 $(wildcard $(HOME)/.pyenv/versions/3.8*/bin/python3.8); do \
  $$p -c '' 2>/dev/null && echo $$p; done) $(PYTHON))
$(SPARK35)/.installed: requirements-spark35.txt
	@rm -rf $(SPARK35) && $(SPARK35_PYTHON) -m venv $(SPARK35)
	@$(SPARK35)/bin/pip install -q --disable-pip-version-check -r requirements-spark35.txt \
	  || { echo "error: the Spark 3.5 of requirements-spark35.txt did not install (is PyPI reachable?)"; exit 1; }
	@touch $@
jars: $(JARS) $(S3_SERVER)/.installed $(SPARK35)/.installed

# The tests on the real stacks (tests/stacks/), every variant (make test draws one of each).
test-stacks: venv jars engine
	@source scripts/env.sh && SUITE_STACKS=all python -m pytest -q -p no:xdist tests/stacks

# Every test and every variant: the stacks' (test-stacks) and the parametrized tests' that make
# test samples one of a day (tests/matrix_sampling.py), the tests marked stacks_only too. No budget.
test-full: venv jars engine
	@source scripts/env.sh && SUITE_VARIANTS=all SUITE_STACKS=all SUITE_BUDGET_MINUTES=600 \
	  python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder tests

# The reliability sweeps in full (hours): every kill point and storage call (killed, then failing),
# every actor at every step, both commit modes. Their last figures: docs/safety.md. They run the
# built wheel, installed unmodified into .state/sweep-wheel/site (scripts/wheel_sweeps.py: its
# environment makes the script, its DAG runs and every spark-submit import that copy, not plugins/;
# --installed checks they did).
test-exhaustive: venv engine
	@source scripts/env.sh && set -e && \
	exports=$$(python scripts/wheel_sweeps.py) && eval "$$exports" && \
	python scripts/reliability.py --installed && \
	python scripts/reliability.py --installed --every-call 34 && \
	python scripts/reliability.py --installed --every-call 34 --storage-errors && \
	python scripts/reliability.py --installed --adversaries && \
	python scripts/reliability.py --installed --adversaries --every-call 34 --actors all && \
	python scripts/reliability.py --installed --adversaries --commit-mode location_switch && \
	python scripts/reliability.py --installed --adversaries --every-call 34 --actors all --commit-mode location_switch

# The schedule explorer at length (about an hour on 2 cores): 1,000,000 schedules of the real commit
# code against the in-memory file system and Metastore (scripts/explorer, docs/safety.md), in two
# processes of half a million each (seeds SIMULATE_SEED and SIMULATE_SEED+1; SIMULATE_SEED=<n> replays them).
SIMULATE_SEED ?= $(shell date +%s)
test-simulate: venv engine
	@mkdir -p .state && source scripts/env.sh && echo "schedule explorer: seeds $(SIMULATE_SEED) and $$(( $(SIMULATE_SEED) + 1 ))" && \
	python scripts/explorer/explore.py --schedules 500000 --seed $(SIMULATE_SEED) > .state/simulate-1.log 2>&1 & p1=$$!; \
	source scripts/env.sh && python scripts/explorer/explore.py --schedules 500000 --seed $$(( $(SIMULATE_SEED) + 1 )) \
	  > .state/simulate-2.log 2>&1; s2=$$?; wait $$p1; s1=$$?; cat .state/simulate-1.log .state/simulate-2.log; \
	rm -f .state/simulate-1.log .state/simulate-2.log; exit $$(( s1 | s2 ))

# The zip merge jobs ship with --py-files in cluster deploy mode (set py_files to it in the config).
dist: venv
	@source scripts/env.sh && python plugins/hive_compaction/package.py dist/hive_compaction.zip

stack-start: venv
	@source scripts/env.sh && python scripts/local_stack.py start

stack-stop: venv
	@source scripts/env.sh && python scripts/local_stack.py stop

# The services docker-compose.yaml declares, natively: PostgreSQL, the Metastore on it, Airflow's
# api-server, scheduler and dag-processor on it (needs Debian's postgresql and libpostgresql-jdbc-java).
stack-up: venv
	@source scripts/env.sh && python scripts/airflow_services.py up

stack-down: venv
	@source scripts/env.sh && python scripts/airflow_services.py down

clean: stack-stop stack-down
	rm -rf .state spark-warehouse
