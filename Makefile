# Two commands do everything on a fresh clone: `make test` and `make demo`.
# torch is pinned through a constraints file exported as PIP_CONSTRAINT, so no
# dependency (source builds included) can swap it for a multi-GB CUDA build.
PYTHON        ?= python3
TORCH_VERSION ?= 2.13.0
EXTRAS        ?= test,funasr,gfpgan,bench
VENV          := .venv
PY            := $(VENV)/bin/python
PIP           := $(PY) -m pip
STAMP         := $(VENV)/.installed-$(TORCH_VERSION)

export PIP_CONSTRAINT := $(CURDIR)/$(VENV)/constraints.txt

.PHONY: setup test demo bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	echo "torch==$(TORCH_VERSION)" > $(VENV)/constraints.txt
	$(PIP) install --upgrade pip setuptools wheel
	$(PIP) install "torch==$(TORCH_VERSION)"
	$(PIP) install -e ".[$(EXTRAS)]"
	touch $@

test: setup
	$(PY) -m pytest -q

demo: setup
	$(PY) examples/funasr_transcribe.py --device emulated --compare-cpu --hotword "天气 公园"

# BENCH_ARGS: e.g. --quick, --only funasr_bench, --markdown (see benchmarks/run.py -h)
bench: setup
	$(PY) benchmarks/run.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
