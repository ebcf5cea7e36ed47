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
# bytecode caches written: where the environment sets PYTHONDONTWRITEBYTECODE, every process of a test run compiled
# the package again and pytest rewrote every test file again (collection 17.5 s against 10.5 on the 2-core machine)
unexport PYTHONDONTWRITEBYTECODE
# make mlu-gate-ablation: where it writes runs, tables and figures, and its scale (the CPU recipe, not SCALE's paper);
# ABLATION_SCALE=fixture (a smoke run) writes under the git-ignored outputs/fixture_results/, as scale=fixture does
ABLATION_SCALE ?= cpu
ABLATION_DIR ?= $(call results_of,$(ABLATION_SCALE))/mlu_gate_ablation
ABLATION_ARGS ?=
# overrides added to the training commands of the run targets, e.g. RUN_ARGS=resume=auto (a sweep run again goes on
# where it stopped: finished jobs skipped, stopped ones resumed) or RUN_ARGS=trainer=gpu
RUN_ARGS ?=
# make mlu-studies-gpu: the time budgets in seconds of its two studies (runs that cannot end within it are stopped, least wanted first),
# whether to start NVIDIA's MPS daemon (1: the side-by-side processes share the GPU instead of time-slicing it), and
# where the CoDA recipe probes go
GPU_BUDGET_S ?= 510
GPU_PROBE_BUDGET_S ?= 240
MPS ?= 1
PROBES_DIR ?= $(ROOT_DIR)results/mlu_coda_recipe_probes
# make reproduce-table-6-gpu: its wall-clock budget in seconds (runs that cannot finish within it are stopped, least
# wanted first; a later call resumes them), where its records go, where its runs' folders are, more script arguments
# (e.g. TABLE6_ARGS="--no-mps --seeds 1" or train.py overrides after "--")
TABLE6_BUDGET_S ?= 660
TABLE6_DIR ?= $(RESULTS_OF_SCALE)/table_6_gpu
TABLE6_OUTPUTS ?= $(ROOT_DIR)outputs/table_6_gpu
TABLE6_ARGS ?=
# e.g. https://download.pytorch.org/whl/cpu (CPU-only torch) or .../whl/cu126: where torch==2.13.0 comes from
TORCH_INDEX ?=
SCALE ?= paper
# the root folder the runs write under (CODA_EXP_ROOT, as train.py's paths.root_dir; else this checkout), and the
# results folder of a scale there: scale=fixture writes its records there (configs/scale/fixture.yaml), so smoke runs
# stay out of the tracked results/
ROOT_DIR := $(if $(filter-out $(CURDIR),$(abspath $(CODA_EXP_ROOT))),$(abspath $(CODA_EXP_ROOT))/)
results_of = $(ROOT_DIR)$(if $(filter fixture,$(1)),outputs/fixture_results,results)
RESULTS_OF_SCALE = $(call results_of,$(SCALE))

# make tables: which runs folder it reads (a results folder with runs/ inside is read from its runs/; SCALE=fixture:
# outputs/fixture_results/runs), where the tables go (default: tables/ beside the runs), which table ids (default:
# every table some record fills), where the paired tests' predictions are (default: predictions/ beside the runs)
RUNS ?= $(RESULTS_OF_SCALE)/runs
OUT ?=
TABLES ?=
PREDICTIONS ?=

# A variable given on the make command line that this Makefile does not know (RUN=..., runs=...) would be ignored
# without a word while the target goes on: an error instead. Environment for the commands goes before make
# (CUDA_VISIBLE_DEVICES=1 make run). Checked in the make a user called (MAKELEVEL 0), not in a make called by
# another make with that one's variables.
KNOWN_VARIABLES := $(shell sed -nE 's/^(export +)?([A-Za-z_][A-Za-z0-9_]*) *[?:+]?=.*/\2/p; s/^[^ \t:#]+: *([A-Za-z_][A-Za-z0-9_]*) *[?:+]?=.*/\1/p' $(firstword $(MAKEFILE_LIST)))
ifeq ($(MAKELEVEL),0)
UNKNOWN_VARIABLES := $(filter-out $(KNOWN_VARIABLES),$(foreach v,$(.VARIABLES),$(if $(filter command line,$(origin $(v))),$(v))))
ifneq ($(UNKNOWN_VARIABLES),)
UNKNOWN_HELP := not a variable of this Makefile, nothing would read it; its variables: $(sort $(filter-out SHELL PY STAMP PYPROJECT_SHA SCALES KNOWN_VARIABLES UNKNOWN_VARIABLES UNKNOWN_HELP results_of RESULTS_OF_SCALE ROOT_DIR,$(KNOWN_VARIABLES)))
UNKNOWN_HELP += (make help says which target takes which); an environment variable for the commands goes before make: $(firstword $(UNKNOWN_VARIABLES))=... make $(MAKECMDGOALS)
$(error $(foreach v,$(UNKNOWN_VARIABLES),$(v)=$($(v))): $(UNKNOWN_HELP))
endif
endif

.DEFAULT_GOAL := help
.PHONY: help setup run reproduce-table-6-gpu results-index mlu-gate-ablation mlu-gate-ablation-10k mlu-studies-gpu quickstart test test-full tables bench estimate fixtures lint clean

help: ## list the targets and the variables each takes (VENV=path, default .venv: the venv of every target)
	@grep -hE '^[a-zA-Z0-9_%-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; \
		{name[NR] = $$1; text[NR] = $$2; if (length($$1) > width) width = length($$1)}; \
		END {for (i = 1; i <= NR; i++) printf "  \033[36m%-" width "s\033[0m  %s\n", name[i], text[i]}'

# The stamp holds the sha256 of the pyproject.toml it was installed from: a venv shared by another checkout of the
# same version (make test VENV=../main/.venv from a fresh clone, whose files are all newer than the stamp) is only
# touched, its editable install left pointing where it points (each checkout's own code is imported first from its
# root either way); a changed pyproject.toml installs again, saying so where that re-points another checkout's venv.
PYPROJECT_SHA := $(shell python3 -c "import hashlib; print(hashlib.sha256(open('pyproject.toml', 'rb').read()).hexdigest())" 2>/dev/null)
$(STAMP): pyproject.toml
	@if [ -n "$(PYPROJECT_SHA)" ] && [ "$$(cat $(STAMP) 2>/dev/null)" = "$(PYPROJECT_SHA)" ]; then touch $(STAMP); else \
	  set -e; \
	  if [ -x $(PY) ]; then from=$$(cd / && $(PY) -c 'import coda_exp, os; print(os.path.dirname(os.path.dirname(os.path.abspath(coda_exp.__file__))))' 2>/dev/null || true); \
	    if [ -n "$$from" ] && [ "$$from" != "$(CURDIR)" ]; then echo "$(VENV): coda_exp installed from $$from, of another pyproject.toml: installing $(CURDIR)'s version re-points it here"; fi; fi; \
	  set -x; \
	  $(PYTHON) -m venv $(VENV); \
	  $(PY) -m pip install --quiet --upgrade pip; \
	  $(PY) -m pip install --quiet torch==2.13.0 $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)); \
	  $(PY) -m pip install --quiet -e '.[dev,launchers]'; \
	  $(PY) -m coda_exp.tools.warm_kernels --if-cold; \
	  echo $(PYPROJECT_SHA) > $(STAMP); \
	fi

setup: $(STAMP) ## create VENV with PYTHON (python3), install the package with dev and launcher extras (torch==2.13.0; TORCH_INDEX=URL picks its build), compile the numba kernels

# make run pins what its result depends on: one thread per run (threads=1 in configs/task_scale/mlu_cpu.yaml), the
# kernel choice of the config (CODA_KERNEL unset), the two runs side by side (joblib, 2 jobs)
run: $(STAMP) ## the main job: Table 6 (MLU, Transformer vs CoDA-Transformer) at CPU scale, seed 1 (~28 min on 2 cores: its records' 1493 s and 1670 s, side by side beside other work), then print it and plot its learning curves; RUN_ARGS=overrides
	CODA_KERNEL= $(PY) train.py -m experiment=table_6 scale=cpu seed=1 hydra/launcher=joblib hydra.launcher.n_jobs=2 $(RUN_ARGS)
	$(PY) scripts/make_tables.py --tables table_6 --print
	$(PY) scripts/plot_learning_curves.py --runs $(ROOT_DIR)results/runs --task mlu --table table_6 --out $(ROOT_DIR)results/figures/mlu_learning_curves.png
	$(PY) scripts/results_index.py

reproduce-table-6-gpu: $(STAMP) ## Table 6 at SCALE (paper: 100K steps) x seeds 1-3 on one GPU, side by side on the fast path within TABLE6_BUDGET_S; again = go on; TABLE6_DIR, TABLE6_OUTPUTS, TABLE6_ARGS
	$(PY) scripts/reproduce_table6_gpu.py --budget-s $(TABLE6_BUDGET_S) --scale $(SCALE) --results $(TABLE6_DIR) --outputs $(TABLE6_OUTPUTS) $(TABLE6_ARGS) || { status=$$?; [ $$status -eq 3 ] || exit $$status; echo "some runs are missing (the budget stopped them; make reproduce-table-6-gpu again goes on): $(TABLE6_OUTPUTS)/status.json"; }
	$(PY) scripts/make_tables.py --tables table_6 --runs $(TABLE6_DIR)/runs --out $(TABLE6_DIR)/tables --print
	$(PY) scripts/plot_learning_curves.py --runs $(TABLE6_DIR) --task mlu --table table_6 --out $(TABLE6_DIR)/figures/learning_curves.png
	$(PY) scripts/mlu_breakdown.py --runs $(TABLE6_DIR) --out $(TABLE6_DIR)/tables/by_operation.md
	$(PY) scripts/gate_ablation_table.py --runs $(TABLE6_DIR) --out $(TABLE6_DIR)/tables/gates.md
	$(PY) scripts/results_index.py

mlu-gate-ablation: $(STAMP) ## why CoDA lags on MLU: 5 gate variants x 3 seeds at the CPU recipe, gate statistics on, table + curves (hours); ABLATION_SCALE, ABLATION_DIR, ABLATION_ARGS, RUN_ARGS
	$(gate_ablation)

mlu-gate-ablation-10k: ABLATION_DIR := $(call results_of,$(ABLATION_SCALE))/mlu_gate_ablation_10k
mlu-gate-ablation-10k: ABLATION_ARGS := task.max_steps=10000 task.val_check_interval=500
mlu-gate-ablation-10k: $(STAMP) ## the same study at 10K steps (the CPU recipe, its cosine over 10K) into results/mlu_gate_ablation_10k; ~1 h per CoDA run on 2 CPU cores: RUN_ARGS=trainer=gpu; ABLATION_SCALE, ABLATION_DIR
	$(gate_ablation)

mlu-studies-gpu: ABLATION_DIR := $(ROOT_DIR)results/mlu_gate_ablation_10k
mlu-studies-gpu: $(STAMP) ## on one GPU, runs side by side: the 10K gate study, then the CoDA recipe probes, then their tables (~11 min on an H100; GPU_BUDGET_S, GPU_PROBE_BUDGET_S, MPS, PROBES_DIR, ABLATION_DIR: the 10K study's folder)
	PY=$(PY) LOGS=$(ROOT_DIR)outputs/side_by_side TRAINER=gpu BUDGET_S=$(GPU_BUDGET_S) PROBE_BUDGET_S=$(GPU_PROBE_BUDGET_S) MPS=$(MPS) RESULTS_10K=$(ABLATION_DIR) RESULTS_PROBES=$(PROBES_DIR) bash scripts/studies/mlu/gpu_mlu_studies.sh || echo "some runs did not finish: $(ROOT_DIR)outputs/side_by_side/summary.json"
	$(gate_at_init)
	$(gate_ablation_tables)
	$(PY) scripts/gate_ablation_table.py --runs $(PROBES_DIR) --runs $(ROOT_DIR)results/mlu_gate_ablation --out $(PROBES_DIR)/tables/probes.md
	$(PY) scripts/plot_learning_curves.py --runs $(PROBES_DIR) --task mlu --out $(PROBES_DIR)/figures/learning_curves.png

define gate_ablation
$(gate_at_init)
$(PY) train.py -m experiment=mlu_gate_ablation scale=$(ABLATION_SCALE) paths.results_dir=$(ABLATION_DIR) $(ABLATION_ARGS) $(RUN_ARGS)
$(gate_ablation_tables)
endef

define gate_at_init
$(PY) scripts/studies/mlu/gate_at_init.py --out $(ABLATION_DIR)/tables/gate_at_init.md task=mlu scale=$(ABLATION_SCALE)
endef

define gate_ablation_tables
$(PY) scripts/gate_ablation_table.py --runs $(ABLATION_DIR) --out $(ABLATION_DIR)/tables/gate_ablation.md
$(PY) scripts/mlu_breakdown.py --runs $(ABLATION_DIR) --out $(ABLATION_DIR)/tables/by_operation.md
$(PY) scripts/plot_learning_curves.py --runs $(ABLATION_DIR) --task mlu --out $(ABLATION_DIR)/figures/learning_curves.png
endef

quickstart: $(STAMP) ## a 1-minute smoke run: DecompAtt vs DecompAtt+CoDA on the WikiQA fixture, 3 seeds, Table 2 (into outputs/fixture_results/, not results/); RUN_ARGS=overrides
	$(PY) train.py -m experiment=quickstart $(RUN_ARGS)
	$(PY) scripts/make_tables.py --runs $(ROOT_DIR)outputs/fixture_results/runs --out $(ROOT_DIR)outputs/fixture_results/tables --tables table_2 --print

TEST_WORKERS ?= 2
test: $(STAMP) ## the fast test suite (what CI runs; ~5 min on 2 cores in TEST_WORKERS=2 processes; 1: one process)
	$(PY) -m pytest -q $(if $(filter-out 1,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist worksteal)

test-full: $(STAMP) ## every test, the slow ones included (TEST_WORKERS as for test)
	$(PY) -m pytest -q -m '' $(if $(filter-out 1,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist worksteal)

tables: $(STAMP) ## regenerate results/tables/* (markdown, LaTeX, CSV) from results/runs/*.json (SCALE=fixture: outputs/fixture_results/, the fixture runs): the tables that have runs, unchanged ones left as they are; RUNS=folder, OUT=folder, TABLES="id ...", PREDICTIONS=folder
	$(PY) scripts/make_tables.py --runs $(RUNS)$(if $(OUT), --out $(OUT))$(if $(TABLES), --tables $(TABLES))$(if $(PREDICTIONS), --predictions $(PREDICTIONS))

bench: $(STAMP) ## CoDA vs softmax attention: forward+backward time and peak memory, printed as ratios
	$(PY) scripts/bench_attention.py --omp-policy both

ARGS ?=
estimate: $(STAMP) ## how long a run takes here: make estimate ARGS="task=mlu model=coda_transformer [scale=cpu]"
	$(PY) scripts/estimate_runtime.py $(ARGS)

# One rule for every paper table: `make reproduce-table-2` runs configs/experiment/table_2*.yaml (Table 8: table_8
# and table_8_nmt), each as a sweep, then prints configs/tables/table_2.yaml. A new table joins by adding its
# experiment YAML (e.g. experiment/attconv_table_3.yaml: make reproduce-attconv-table-3). A sweep with failed jobs
# does not stop the rule: every experiment runs, the table is made from the runs that finished, then make exits with
# the worst sweep status (1: a job crashed, 2: only user errors); a sweep stopped by a signal stops it at once.
# Failed sweeps that wrote no run record (refused before their first job: a bad override) leave the tables as
# they were: there is nothing new to make them from.
# scale=fixture writes its records under outputs/fixture_results (RESULTS_OF_SCALE): smoke runs stay out of results/
SCALES = $(sort $(basename $(notdir $(wildcard configs/scale/*.yaml))))
reproduce-%: $(STAMP) ## a paper table at SCALE=paper|cpu|fixture: reproduce-table-N (N = 1..9), reproduce-attconv-table-N; RUN_ARGS=overrides of its sweeps
	@case " $(SCALES) " in *" $(SCALE) "*) ;; *) echo "error: SCALE=$(SCALE): expected one of: $(SCALES)" >&2; exit 2;; esac; \
	table=$(subst -,_,$*); \
	experiments="$(basename $(notdir $(wildcard configs/experiment/$(subst -,_,$*).yaml configs/experiment/$(subst -,_,$*)_*.yaml)))"; \
	if [ -z "$$experiments" ]; then echo "no configs/experiment/$$table.yaml: no such table to reproduce" >&2; exit 2; fi; \
	for experiment in $$experiments; do \
		$(PY) scripts/check_sweep_data.py experiment=$$experiment scale=$(SCALE) $(RUN_ARGS) || exit $$?; \
	done; \
	status=0; since=$$(mktemp); trap 'rm -f "$$since"' EXIT; \
	for experiment in $$experiments; do \
		echo "$(PY) train.py -m experiment=$$experiment scale=$(SCALE) $(RUN_ARGS)"; \
		$(PY) train.py -m experiment=$$experiment scale=$(SCALE) $(RUN_ARGS); code=$$?; \
		if [ $$code -gt 128 ]; then exit $$code; fi; \
		case "$$status:$$code" in 1:*|*:0) ;; *) status=$$code;; esac; \
	done; \
	if [ $$status -ne 0 ] && [ -z "$$(find $(RESULTS_OF_SCALE)/runs -maxdepth 1 -name '*.json' -newer "$$since" 2>/dev/null | head -n 1)" ]; then \
		echo "reproduce-$*: no sweep wrote a run record (exit status $$status: $$([ $$status -eq 2 ] && echo 'user errors' || echo 'a job crashed')); $(RESULTS_OF_SCALE)/tables was left as it was: fix what the messages above name, then make reproduce-$* again" >&2; \
		exit $$status; \
	fi; \
	$(PY) scripts/make_tables.py --runs $(RESULTS_OF_SCALE)/runs --out $(RESULTS_OF_SCALE)/tables --tables $$table --print || exit $$?; \
	if [ $$status -ne 0 ]; then \
		echo "reproduce-$*: some sweep jobs failed (exit status $$status: $$([ $$status -eq 2 ] && echo 'user errors' || echo 'a job crashed')); the table holds the runs that finished, each sweep's summary above lists its failed jobs and logs" >&2; \
		exit $$status; \
	fi

results-index: $(STAMP) ## rewrite results/README.md: each results folder, its question, command, status and records
	$(PY) scripts/results_index.py

fixtures: $(STAMP) ## rewrite the tiny benchmark fixtures under tests/fixtures/
	$(PY) scripts/make_fixtures.py

lint: $(STAMP) ## ruff
	$(PY) -m ruff check coda_exp scripts tests train.py

clean: ## remove outputs, caches and the virtual environment VENV (keeps results/)
	rm -rf outputs multirun cache .pytest_cache .ruff_cache $(VENV)
