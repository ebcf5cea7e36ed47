# coda-exp — `make help` lists the targets. Everything runs inside .venv, created on first use.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export HF_DATASETS_OFFLINE ?= 1
export HF_HUB_OFFLINE ?= 1
export WANDB_MODE ?= offline
export PYTHONHASHSEED ?= 0
export OMP_WAIT_POLICY ?= PASSIVE
RUN_ARGS ?=
# e.g. https://download.pytorch.org/whl/cpu (CPU-only torch) or .../whl/cu126: where torch==2.13.0 comes from
TORCH_INDEX ?=
SCALE ?= paper

.DEFAULT_GOAL := help
.PHONY: help setup run quickstart test test-full tables bench estimate fixtures lint clean \
	reproduce-table-2 reproduce-table-3 reproduce-table-4 reproduce-table-5 reproduce-table-6 reproduce-table-7 \
	reproduce-table-8 reproduce-table-9

help: ## list the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  \033[36m%-20s\033[0m %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(if $(TORCH_INDEX),$(PY) -m pip install --quiet torch==2.13.0 --index-url $(TORCH_INDEX))
	$(PY) -m pip install --quiet -e '.[dev,launchers]'
	touch $(STAMP)

setup: $(STAMP) ## create .venv and install the package with dev and launcher extras (torch==2.13.0; TORCH_INDEX=URL picks its build)

run: $(STAMP) ## the main job: Table 6 (MLU, Transformer vs CoDA-Transformer) at CPU scale, seed 1 (~15 min), then print it
	$(PY) train.py -m experiment=table_6 scale=cpu seed=1 $(RUN_ARGS)
	$(PY) scripts/make_tables.py --tables table_6 --print

quickstart: $(STAMP) ## a 1-minute smoke run: DecompAtt vs DecompAtt+CoDA on the WikiQA fixture, 3 seeds, Table 2
	$(PY) train.py -m experiment=quickstart $(RUN_ARGS)
	$(PY) scripts/make_tables.py --tables table_2 --print

test: $(STAMP) ## the fast test suite (what CI runs; a few minutes on 2 cores)
	$(PY) -m pytest -q

test-full: $(STAMP) ## every test, the slow ones included
	$(PY) -m pytest -q -m ''

tables: $(STAMP) ## regenerate results/tables/* (markdown, LaTeX, CSV) from results/runs/*.json
	$(PY) scripts/make_tables.py

bench: $(STAMP) ## CoDA vs softmax attention: forward+backward time and peak memory, printed as ratios
	$(PY) scripts/bench_attention.py --omp-policy both

estimate: $(STAMP) ## how long a run takes here: make estimate ARGS="task=mlu model=coda_transformer [scale=cpu]"
	$(PY) scripts/estimate_runtime.py $(ARGS)

reproduce-table-2: $(STAMP) ## CoDA Table 2 (TrecQA, WikiQA, UDC; D-ATT vs +CoDA, 3 seeds) at SCALE=paper|cpu|fixture
	$(PY) train.py -m experiment=table_2 scale=$(SCALE) $(RUN_ARGS)
	$(PY) scripts/make_tables.py --tables table_2 --print

reproduce-table-3: $(STAMP) ## CoDA Table 3 (SNLI, MNLI, SciTail, DNLI; D-ATT vs +CoDA, 3 seeds) at SCALE
	$(PY) train.py -m experiment=table_3 scale=$(SCALE) $(RUN_ARGS)
	$(PY) scripts/make_tables.py --tables table_3 --print

reproduce-table-8: $(STAMP) ## CoDA Table 8 (centering ablation, dev scores; NMT, WikiQA, SciTail, DNLI, 3 seeds) at SCALE
	$(PY) train.py -m experiment=table_8 scale=$(SCALE) $(RUN_ARGS)
	$(PY) train.py -m experiment=table_8_nmt scale=$(SCALE) $(RUN_ARGS)
	$(PY) scripts/make_tables.py --tables table_8 --print

reproduce-table-4: $(STAMP) ## CoDA Table 4 (IWSLT'15 En-Vi BLEU; Transformer vs CoDA, 3 seeds) at SCALE
	$(PY) train.py -m experiment=table_4 scale=$(SCALE) $(RUN_ARGS)
	$(PY) scripts/make_tables.py --tables table_4 --print

reproduce-table-5: $(STAMP) ## CoDA Table 5 (IMDb, SST-2; Transformer vs CoDA classifiers, 3 seeds) at SCALE
	$(PY) train.py -m experiment=table_5 scale=$(SCALE) $(RUN_ARGS)
	$(PY) scripts/make_tables.py --tables table_5 --print

reproduce-table-6: $(STAMP) ## CoDA Table 6 (MLU; Transformer vs CoDA, 3 seeds) at SCALE (paper: 100K steps)
	$(PY) train.py -m experiment=table_6 scale=$(SCALE) $(RUN_ARGS)
	$(PY) scripts/make_tables.py --tables table_6 --print

reproduce-table-7: $(STAMP) ## CoDA Table 7 (AlgoLisp; Transformer vs CoDA, 3 seeds) at SCALE
	$(PY) train.py -m experiment=table_7 scale=$(SCALE) $(RUN_ARGS)
	$(PY) scripts/make_tables.py --tables table_7 --print

reproduce-table-9: $(STAMP) ## CoDA Table 9 (IWSLT dev BLEU for all 8 E/N compositions, 3 seeds) at SCALE
	$(PY) train.py -m experiment=table_9 scale=$(SCALE) $(RUN_ARGS)
	$(PY) scripts/make_tables.py --tables table_9 --print

fixtures: $(STAMP) ## rewrite the tiny benchmark fixtures under tests/fixtures/
	$(PY) scripts/make_fixtures.py

lint: $(STAMP) ## ruff
	$(PY) -m ruff check coda_exp scripts tests train.py

clean: ## remove outputs, caches and the virtual environment (keeps results/)
	rm -rf outputs multirun cache .pytest_cache .ruff_cache $(VENV)
