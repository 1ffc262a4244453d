# Two commands set everything up on a fresh machine: `make run` and `make test`.
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell sha1sum requirements.txt | cut -c1-12)

.PHONY: install test lint run bench

$(STAMP): requirements.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.txt
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

install: $(STAMP)

lint: install
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

test: lint
	$(PY) -m pytest -q

# The app arrives with the dashboard issue; until then `make run` shows the CLI.
run: install
	$(PY) -m eagle3dash --help

bench: install
	$(PY) bench/bench_inspect.py
	$(PY) bench/bench_eval.py
