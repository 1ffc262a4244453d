# Two commands set everything up on a fresh machine: `make run` and `make test`.
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell sha1sum requirements.txt | cut -c1-12)
export EAGLE3DASH_HOME ?= $(CURDIR)/.eagle3dash
# Where the app listens: loopback (reach it through an SSH tunnel); a network address asks every
# browser session for EAGLE3DASH_TOKEN (eagle3dash/ui/access.py).
BIND ?= 127.0.0.1

.PHONY: install browser test lint typecheck run bench

$(STAMP): requirements.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.txt
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

install: $(STAMP)

# Debian's chromium for the browser tests (Playwright drives it; no browser download). Installing
# it needs root and apt; without them this says so and `make test` goes on: the browser tests skip.
CHROMIUM := /usr/bin/chromium
browser:
	@if [ -x $(CHROMIUM) ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
	else \
	  echo "browser: no $(CHROMIUM), and installing it needs root and apt: browser tests skip"; \
	fi

lint: install
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

# Not strict: the library's annotations are checked where they exist ([tool.mypy]).
typecheck: install
	$(PY) -m mypy

# Two pytest-xdist workers: much of the suite's time is waiting (the doubles' modelled costs, the
# app, the browser), so two overlap on two cores; a worker runs whole modules, and the modules of
# one heavy world together (tests/conftest.py). TEST_WORKERS=0 runs it in this one process.
TEST_WORKERS ?= 2
test: lint typecheck browser
	$(PY) -m pytest -q -n $(TEST_WORKERS)

# The app serves on :8501 (.streamlit/config.toml) at once, beside one worker that runs the
# queued diagnoses, two at a time (two jobs never measure one server at once); on first start `demo seed` queues the demo's three runs in the background and
# serves their endpoints until the worker has run them (the Runs page shows them arriving).
# JOBS=ray: the worker is a Ray driver on the cluster RAY_ADDRESS names (README, "On a Ray cluster").
run: install
	$(if $(JOBS),EAGLE3DASH_JOBS=$(JOBS)) $(PY) -m eagle3dash worker $(if $(filter ray,$(JOBS)),,--slots 2) & worker=$$!; \
	  $(PY) -m eagle3dash demo seed & seed=$$!; \
	  trap "kill $$seed $$worker 2>/dev/null" EXIT INT TERM; \
	  $(VENV)/bin/streamlit run serve.py --server.address $(BIND)

# Every CPU benchmark in bench/, each with its defaults (bench/gpu_check.sh is for a GPU machine).
BENCHES := $(sort $(wildcard bench/*.py))
bench: install
	@set -e; for script in $(BENCHES); do echo "== $$script"; $(PY) $$script; done
