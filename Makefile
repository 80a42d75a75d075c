# Two entry points: `make demo` (the whole job on the embedded local stack) and `make test`.
# Both create and reuse .venv from requirements.txt; the local stack's state lives in .state/.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed-$(shell cat requirements.txt requirements-kerberos.txt pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: venv demo test stack-start stack-stop stack-up stack-down clean dist

$(STAMP): requirements.txt requirements-kerberos.txt pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info[:2] >= (3, 10) else "error: Python 3.10+ is needed")'
	@command -v java >/dev/null || { echo "error: java not found: install a Java 17 runtime (apt-get install openjdk-17-jre-headless)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check -r requirements.txt
	$(VENV)/bin/pip install -q --disable-pip-version-check --no-deps -e .
	@if command -v krb5-config >/dev/null; then $(VENV)/bin/pip install -q --disable-pip-version-check -r requirements-kerberos.txt \
	  || echo "note: the kerberos module did not build: the Kerberos test will skip"; \
	else echo "note: krb5-config not found (Debian: libkrb5-dev): no Kerberos module, the Kerberos test will skip"; fi
	@rm -f $(VENV)/.installed-*; touch $@

venv: $(STAMP)

demo: venv
	@source scripts/env.sh && python scripts/demo.py

test: venv
	@source scripts/env.sh && python -m pytest -q --durations=40 tests

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
