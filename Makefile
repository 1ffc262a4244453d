# Two commands set everything up on a fresh machine: `make run` and `make test`.
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell sha1sum requirements.txt | cut -c1-12)
export EAGLE3DASH_HOME ?= $(CURDIR)/.eagle3dash
# Where the app listens: loopback (reach it through an SSH tunnel); a network address asks every
# browser session for EAGLE3DASH_TOKEN (eagle3dash/ui/access.py).
BIND ?= 127.0.0.1

.PHONY: install browser vllm trainers test lint typecheck run bench

$(STAMP): requirements.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.txt
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

install: $(STAMP)

# Debian's chromium for the browser tests (Playwright drives it; no browser download), and the
# fonts its pages and screenshots need: DejaVu for symbols (arrows, ±, ≥) and Noto Color Emoji
# for any emoji a user's text holds (the app draws none: tests/test_browser_pages.py fails on a
# glyph no installed font has). Installing them needs root and apt; without them this says so
# and `make test` goes on: the browser tests skip.
CHROMIUM := /usr/bin/chromium
BROWSER_PACKAGES := chromium fonts-dejavu-core fonts-noto-color-emoji
browser:
	@if [ -x $(CHROMIUM) ] && fc-list | grep -q NotoColorEmoji; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(BROWSER_PACKAGES); \
	else \
	  echo "browser: no $(CHROMIUM) or its fonts, and installing them needs root and apt: browser tests skip"; \
	fi

# The real-engine lane (tests/test_real_vllm.py): vLLM's CPU build in a venv of its own, since it
# pins its own transformers. The index's torchvision, torchaudio and torchcodec are CUDA builds that
# break `import vllm` here, so they go. Where it cannot be installed, this says so and `make test`
# goes on: the lane's tests skip, saying why (EAGLE3DASH_VLLM_VENV names another venv).
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed-$(shell sha1sum requirements-vllm.txt | cut -c1-12)

$(VLLM_STAMP): requirements-vllm.txt
	test -x $(VLLM_VENV)/bin/python || python3 -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --disable-pip-version-check -r requirements-vllm.txt
	$(VLLM_VENV)/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -c "import vllm"
	rm -f $(VLLM_VENV)/.installed-*
	touch $(VLLM_STAMP)

vllm:
	@$(MAKE) --no-print-directory $(VLLM_STAMP) || \
	  echo "vllm: $(VLLM_VENV) could not be installed (above): the real-vLLM tests skip"

# The trainers lane (tests/test_trainer_*.py): speculators 0.9.0, SpecForge 0.2.0 and NeMo
# AutoModel 0.7.0, each in a venv of its own (their pins disagree), each training tiny drafts for
# real on this CPU through a small shim (tests/trainerlane/). speculators declares torchvision
# and torchaudio, whose index builds break beside this torch, and trains without them. SpecForge's
# own requirements pin a CUDA torch and sglang: it goes in with --no-deps beside what it imports.
# Where one cannot be installed, this says so and `make test` goes on: its tests skip, saying why.
SPECULATORS_VENV := .venv-speculators
SPECULATORS_STAMP := $(SPECULATORS_VENV)/.installed-$(shell sha1sum requirements-speculators.txt | cut -c1-12)
SPECFORGE_VENV := .venv-specforge
SPECFORGE_STAMP := $(SPECFORGE_VENV)/.installed-$(shell sha1sum requirements-specforge.txt | cut -c1-12)
NEMO_VENV := .venv-nemo-automodel
NEMO_STAMP := $(NEMO_VENV)/.installed-$(shell sha1sum requirements-nemo-automodel.txt | cut -c1-12)

$(SPECULATORS_STAMP): requirements-speculators.txt
	test -x $(SPECULATORS_VENV)/bin/python || python3 -m venv $(SPECULATORS_VENV)
	$(SPECULATORS_VENV)/bin/python -m pip install -q --disable-pip-version-check -r requirements-speculators.txt
	$(SPECULATORS_VENV)/bin/python -m pip uninstall -q -y torchvision torchaudio
	$(SPECULATORS_VENV)/bin/python -c "import speculators.train"
	rm -f $(SPECULATORS_VENV)/.installed-*
	touch $(SPECULATORS_STAMP)

$(SPECFORGE_STAMP): requirements-specforge.txt
	test -x $(SPECFORGE_VENV)/bin/python || python3 -m venv $(SPECFORGE_VENV)
	$(SPECFORGE_VENV)/bin/python -m pip install -q --disable-pip-version-check -r requirements-specforge.txt
	$(SPECFORGE_VENV)/bin/python -m pip install -q --disable-pip-version-check --no-deps specforge==0.2.0
	$(SPECFORGE_VENV)/bin/python -c "import specforge"
	rm -f $(SPECFORGE_VENV)/.installed-*
	touch $(SPECFORGE_STAMP)

$(NEMO_STAMP): requirements-nemo-automodel.txt
	test -x $(NEMO_VENV)/bin/python || python3 -m venv $(NEMO_VENV)
	$(NEMO_VENV)/bin/python -m pip install -q --disable-pip-version-check -r requirements-nemo-automodel.txt
	$(NEMO_VENV)/bin/python -c "import nemo_automodel"
	rm -f $(NEMO_VENV)/.installed-*
	touch $(NEMO_STAMP)

trainers:
	@for stamp in $(SPECULATORS_STAMP) $(SPECFORGE_STAMP) $(NEMO_STAMP); do \
	  $(MAKE) --no-print-directory $$stamp || \
	    echo "trainers: $${stamp%%/*} could not be installed (above): its lane's tests skip"; \
	done

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
test: lint typecheck browser vllm trainers
	$(PY) -m pytest -q -n $(TEST_WORKERS)

# `eagle3dash app` (eagle3dash/dashboard/launch.py): the app on :8501 at once, beside one worker
# that runs the queued diagnoses, two at a time (two jobs never measure one server at once); on
# first start `demo seed` queues the demo's runs and serves their endpoints until the worker has
# run them (the Runs page shows them arriving). PORT=8600: another port. JOBS=ray: the worker is a
# Ray driver on the cluster RAY_ADDRESS names (docs/ray.md).
run: install
	$(PY) -m eagle3dash app --bind $(BIND)$(if $(PORT), --port $(PORT))$(if $(JOBS), --jobs $(JOBS))

# Every CPU benchmark in bench/, each with its defaults (bench/gpu_check.sh is for a GPU machine).
BENCHES := $(sort $(wildcard bench/*.py))
bench: install
	@set -e; for script in $(BENCHES); do echo "== $$script"; $(PY) $$script; done
