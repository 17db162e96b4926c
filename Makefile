# Two commands: `make demo` (set up + train the default model) and `make test` (set up + all tests).
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_WORKERS ?= 2
## The order the tests run in (pytest-randomly): derived from the commit, so CI and a rerun of one commit
## see one order and every commit another; 'make test TEST_SEED=N' replays the order a run printed.
TEST_SEED ?= $(shell h=$$(git rev-parse --short=7 HEAD 2>/dev/null) && echo $$((0x$$h)) || echo 1)
RANDOM_ORDER = -p randomly -p no:cacheprovider --randomly-seed=$(TEST_SEED)

.PHONY: setup demo test test-fast test-stress lint bench gpu-all gpu-zoo gpu-check qlora-check gpu-wheels notebooks docs docs-serve docs-screenshots docs-figures

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,vlm,data,docs]'
	touch $@

## Train the default model (CBM, robot images, true concepts) and print the results table.
demo: setup
	$(VENV)/bin/cbm-train

## ruff, and the house's import contracts (pyproject.toml [tool.importlinter]: the floors, the two wings,
## a torch-free ground floor).
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports --no-cache

## Everything CI runs: lint, the default (fast) suite, the slow tests, then the notebooks. The slow tests
## write the smoke experiments into CBM_SMOKE_EXPERIMENTS and the notebooks show those (a rerun skips
## every finished cell); a notebook alone runs its smoke preset itself (each cell may take 20 minutes).
test: lint
	@echo "tests in random order, seed $(TEST_SEED): 'make test TEST_SEED=$(TEST_SEED)' replays it"
	$(PY) -m pytest -n $(PYTEST_WORKERS) -q $(RANDOM_ORDER)
	export CBM_SMOKE_EXPERIMENTS=$$(mktemp -d) && \
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist worksteal -q -m slow $(RANDOM_ORDER) && \
	CBM_NOTEBOOK_OUT=$$CBM_SMOKE_EXPERIMENTS $(PY) -m pytest -n $(PYTEST_WORKERS) -q -o addopts="" $(RANDOM_ORDER) --nbmake --nbmake-timeout=1200 notebooks

## The fast suite under load: both cores busy with CPU hogs, with 1 and then 3 workers, in a random
## order (TEST_SEED). Not in CI (about 20 minutes on 2 cores); run it after changing tests that wait.
test-stress: setup
	PY=$(PY) TEST_SEED=$(TEST_SEED) bash tests/stress.sh

## The docs site (mkdocs.yml, docs/): built into site/ with --strict, so any warning (a broken link or
## anchor, a docstring mkdocstrings cannot read, a defect docs/page_checks.py finds) fails. The
## configuration reference is regenerated first.
docs: setup
	$(PY) docs/gen_config_reference.py
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

## Read the site: serve it on loopback only (http://127.0.0.1:$(DOCS_PORT)/), rebuilt on every save. Opened
## from disk (site/index.html) its links show folder listings and search is off.
DOCS_PORT ?= 8000
docs-serve: setup
	$(PY) docs/gen_config_reference.py
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve --strict --dev-addr 127.0.0.1:$(DOCS_PORT)

## Optional, not in CI: build the site, serve it on 127.0.0.1 and take headless Chromium screenshots
## (Debian's `chromium` package) of the index, the Benchmarks page, five guides, the references and a
## search into docs-screenshots/ (SHOT_SIZE=400,900: a phone's width).
SHOT_SIZE ?= 1400,1000
docs-screenshots: docs
	$(PY) docs/screenshots.py --out docs-screenshots --size $(SHOT_SIZE)

## Redraw the docs' figures (docs/img/*.png) from the generators, short training runs and the project's plotting
## code: docs/figures.py (about 7 minutes on 2 busy cores; ARGS=--smoke: tiny sizes, ~25 s, into ARGS=--out DIR).
docs-figures: setup
	$(PY) docs/figures.py $(ARGS)

## Rewrite the notebooks from notebooks/make_notebooks.py.
notebooks: setup
	$(PY) notebooks/make_notebooks.py

test-fast: setup
	$(PY) -m pytest -n $(PYTEST_WORKERS) -q $(RANDOM_ORDER)

bench: setup
	for f in benchmarks/bench_*.py; do echo "== $$f"; $(PY) $$f || exit 1; done

## Everything that needs a GPU in one call of at most 6 minutes (benchmarks/gpu_all.sh; ARGS=--quick: ~3 minutes,
## ARGS=--dry-run: any machine, every command line checked). Carry and run it: docs/guides/gpus.md.
gpu-all:
	bash benchmarks/gpu_all.sh $(ARGS)

## The small zoo gpu-all repairs in 4-bit, trained here on the CPU (no GPU needed; ~9 MB): carry sweeps/gpu_zoo/models.
gpu-zoo: setup
	PY=$(PY) bash benchmarks/gpu_zoo.sh

## The GPU path on one CUDA GPU (tests, every architecture over seeds, intervene, automate): a few minutes.
gpu-check:
	bash benchmarks/gpu_check.sh

## The QLoRA path on one CUDA GPU: fine-tuning tests, cbm-finetune finetune=qlora, benchmarks/qlora_gpu.py.
qlora-check:
	bash benchmarks/qlora_gpu_check.sh

## Wheels a GPU machine without a package index needs (benchmarks/deps_check.py WHEELS: hydra-core, omegaconf,
## antlr4, highspy, bitsandbytes; ~47 MB): carry .whl/ there. The GPU checks list what is missing in their first second.
gpu-wheels: setup
	$(PY) -m pip wheel -q --no-deps -w .whl hydra-core==1.3.8 omegaconf==2.3.1 antlr4-python3-runtime==4.9.3
	$(PY) -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux_2_24_x86_64 --platform manylinux_2_28_x86_64 -d .whl \
	  highspy==$$($(PY) -c "import importlib.metadata as m; print(m.version('highspy'))") bitsandbytes==0.50.2
	$(PY) benchmarks/deps_check.py --wheels .whl
