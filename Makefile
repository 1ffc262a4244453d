# Two commands set everything up on a fresh machine: `make run` and `make test`.
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell sha1sum requirements.txt | cut -c1-12)
export EAGLE3DASH_HOME ?= $(CURDIR)/.eagle3dash

.PHONY: install browser test lint run bench

$(STAMP): requirements.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.txt
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

install: $(STAMP)

# Debian's chromium for the browser tests (Playwright drives it; no browser download).
browser:
	command -v chromium >/dev/null || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium)

lint: install
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

test: lint browser
	$(PY) -m pytest -q

# The demo's runs are made on first start (about a minute); then one worker runs the queued
# diagnoses and the app serves on :8501 (.streamlit/config.toml).
run: install
	$(PY) -m eagle3dash demo seed
	$(PY) -m eagle3dash worker & worker=$$!; trap "kill $$worker" EXIT INT TERM; \
	  $(VENV)/bin/streamlit run app.py

bench: install
	$(PY) bench/bench_inspect.py
	$(PY) bench/bench_eval.py
