"""Config behaviour: every task x model pair builds or fails clearly, command-line swaps, paper values, sweeps.
That every file under configs/ is instantiated is test_coverage.py's job."""

import functools
import os
import subprocess
from pathlib import Path

import pytest
import torch
import yaml
from hydra.utils import instantiate

from coda_exp import pipeline
from coda_exp.data.common.errors import DataError
from tests import FIXTURES, ROOT

CONFIGS = ROOT / "configs"


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONFIGS / group).glob("*.yaml"))


TASKS, MODELS = options("task"), options("model")


@functools.cache  # the YAML files do not change during the tests; test_coverage asks once per task and model file
def _families(model: str) -> tuple[str, ...]:
    """A model's task families as its YAML lists them, or as the model it extends (its first default) does."""
    node = yaml.safe_load((CONFIGS / "model" / f"{model}.yaml").read_text())
    if node.get("families"):
        return tuple(node["families"])
    return _families(next(d for d in node["defaults"] if isinstance(d, str) and d != "_self_"))


@functools.cache
def _task_node(task: str) -> dict:
    """A task's YAML file as PyYAML reads it (its ``task`` node, its defaults), once per process."""
    return yaml.safe_load((CONFIGS / "task" / f"{task}.yaml").read_text())


@functools.cache
def _task_model_pairs() -> tuple[tuple[str, str], ...]:
    """Every (task, model) a model serves; of those it does not, one task per family (the same refusal)."""
    family = {t: _task_node(t)["task"]["family"] for t in TASKS}
    pairs, refused = [], set()
    for model in MODELS:
        for task in TASKS:
            if family[task] in _families(model) or (model, family[task]) not in refused:
                refused.add((model, family[task]))
                pairs.append((task, model))
    return tuple(pairs)


@pytest.mark.parametrize("task,model", _task_model_pairs())
def test_task_model_builds(make_cfg, build, task, model):
    cfg = make_cfg(f"task={task}", f"model={model}", "scale=fixture")
    assert cfg.model.families, f"model/{model}.yaml must list the task families it serves"
    if cfg.task.family not in cfg.model.families:  # e.g. a seq2seq Transformer on SNLI: a clear error
        with pytest.raises(ValueError, match=f"model={model} does not fit task={task}"):
            pipeline.check_compatible(cfg)
        return
    if pipeline.unknown_model_keys(cfg):  # e.g. imdb's T2T preset sizes on AttConv: the error names the way out
        with pytest.raises(ValueError, match="preset=none"):
            pipeline.check_compatible(cfg)
        cfg = make_cfg(f"task={task}", f"model={model}", "scale=fixture", "preset=none", "scheduler=null")
    build(cfg)
    assert cfg.task.name == task and cfg.model.name == model
    assert cfg.task.monitor.startswith("val/")


@pytest.mark.parametrize("attention", options("model/attention"))
def test_attention_swaps_from_the_command_line(make_cfg, attention):
    cfg = make_cfg("task=snli", f"model/attention={attention}", "scale=fixture")
    dm = instantiate(cfg.data)
    dm.setup()
    net = pipeline.build_model(cfg, dm)
    assert pipeline.attention_options(cfg)["name"] == attention
    assert type(net.attention).__name__.lower().startswith(attention.split("_")[0])


def test_wandb_online_opt_in_beats_the_offline_environment(make_cfg, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")  # what `make` exports
    (lg,) = pipeline.build_loggers(make_cfg("logger=wandb", "logger.wandb.offline=false"))
    assert lg._wandb_init["mode"] == "online"  # passed to wandb.init, which prefers it to WANDB_MODE


@pytest.mark.parametrize("task", ["mlu", "algolisp", "iwslt15_envi"])
def test_cpu_scale_of_sequence_tasks_warms_up_early_to_the_presets_peak(make_cfg, task):
    """scale=cpu keeps each sequence task's step budget small and reaches the paper preset's peak learning rate
    early in it (the presets' 8000 / 16000 warm-up steps would never end in a CPU budget)."""
    import torch

    assert (CONFIGS / "task_scale" / f"{task}_cpu.yaml").is_file()
    paper, cpu = make_cfg(f"task={task}"), make_cfg(f"task={task}", "scale=cpu")

    def lr_curve(cfg, steps):
        opt = instantiate(cfg.optimizer)([torch.nn.Parameter(torch.zeros(1))])
        sched = instantiate(cfg.scheduler)(opt)
        return [sched.lr_lambdas[0](s) for s in steps]

    warmup, steps = cpu.scheduler.warmup_steps, cpu.task.max_steps
    assert steps <= 3000 and cpu.task.val_check_interval <= steps // 4 and warmup <= steps // 4
    peak = max(lr_curve(paper, [paper.scheduler.warmup_steps - 1]))  # the preset's peak, at its last warm-up step
    if task == "mlu":  # MLU's CPU recipe has its own peak and decays to 0 at its last step (mlu_cpu.yaml)
        assert cpu.scheduler.peak_lr > peak
        peak = cpu.scheduler.peak_lr
        assert lr_curve(cpu, [steps - 1])[0] == pytest.approx(0.0, abs=1e-12)
    assert lr_curve(cpu, [warmup - 1])[0] == pytest.approx(peak, rel=1e-3)
    if task != "mlu":  # (MLU's generated epoch is 12M examples long)
        assert cpu.task.epochs == paper.task.epochs  # not scale=cpu's 3 epochs: the step budget decides
        assert cpu.data.max_eval_examples <= 1000


def test_iwslt_is_one_joint_subword_vocabulary_and_one_embedding_as_t2t(make_cfg, build):
    """translate_envi_iwslt32k: one subword vocabulary of ~2**15 for both languages, so T2T's transformer_base shares
    the source embedding, the target embedding and the softmax; the release's word lists stay an option."""
    paper = make_cfg("task=iwslt15_envi", "model=coda_transformer")
    assert (paper.data.tokenizer, paper.data.shared_vocab, paper.data.bpe_vocab_size, paper.data.max_len) == (
        "bpe", True, 2**15, 256)
    assert paper.model.shared_embeddings is True and paper.model.tie_output and paper.task.monitor == "val/bleu_t2t"
    net = build(make_cfg("task=iwslt15_envi", "model=coda_transformer", "scale=fixture"))["model"]
    assert net.src_embed.embedding is net.tgt_embed.embedding and net.output is None  # one matrix, three uses
    words = build(make_cfg("task=iwslt15_envi", "model=transformer", "scale=fixture", "data.tokenizer=word",
                           "data.shared_vocab=false"))["model"]
    assert words.src_embed.embedding is not words.tgt_embed.embedding
    with pytest.raises(DataError, match=r"data\.shared_vocab=false"):  # one message, before any data loads
        pipeline.build_data(make_cfg("task=iwslt15_envi", "scale=fixture", "data.tokenizer=word"))


def test_every_table_experiment_sweeps_three_seeds(make_cfg):
    from hydra import compose, initialize_config_dir

    for name in options("experiment"):
        with initialize_config_dir(version_base="1.3", config_dir=str(CONFIGS)):
            cfg = compose("train", overrides=[f"experiment={name}"], return_hydra_config=True)
        assert str(cfg.hydra.sweeper.params.seed).split(",") == ["1", "2", "3"], name


def test_paper_hyperparameters_are_in_yaml(make_cfg):
    cfg = make_cfg("task=wikiqa")
    assert cfg.optimizer.lr == 0.0003 and cfg.data.batch_size == 64 and cfg.task.epochs == 20
    assert cfg.model.hidden_size == 200 and cfg.model.dropout == 0.2
    assert make_cfg("task=snli").task.epochs == 50


@pytest.mark.parametrize("task,default", [("wikiqa", "answered"), ("trecqa", "clean"), ("udc", "raw")])
def test_ranking_eval_protocol_is_a_command_line_option(make_cfg, task, default):
    assert instantiate(make_cfg(f"task={task}").data).eval_protocol == default
    assert instantiate(make_cfg(f"task={task}", "data.eval_protocol=raw").data).eval_protocol == "raw"


def test_one_mechanism_picks_the_data_folder(make_cfg, tmp_path):
    """data.dir: data/<task>/ (paths.data_dir) when it exists, else null (the hub, MLU's generator); the fixture
    scale reads tests/fixtures/<task>/, in an experiment too; data.dir=DIR wins over both."""
    assert make_cfg("task=snli").data.dir is None  # (tmp)/data/snli does not exist
    (tmp_path / "data" / "snli").mkdir(parents=True)
    assert make_cfg("task=snli").data.dir == str(tmp_path / "data" / "snli")
    assert make_cfg("task=snli", "data.dir=/elsewhere").data.dir == "/elsewhere"
    for overrides in (["task=trecqa", "scale=fixture"], ["experiment=table_2", "scale=fixture"]):
        assert make_cfg(*overrides).data.dir == str(FIXTURES / make_cfg(*overrides).task.name)


def test_command_line_overrides_reach_the_objects(make_cfg):
    cfg = make_cfg("task=snli", "data.batch_size=32", "optimizer.lr=1e-3", "task.epochs=5", "scale=fixture")
    assert instantiate(cfg.data).batch_size == 32 and cfg.trainer.max_epochs == 5
    opt = instantiate(cfg.optimizer)([torch.nn.Parameter(torch.zeros(1))])
    assert opt.defaults["lr"] == 1e-3 and cfg.scheduler is None
    mlu = make_cfg("task=mlu")  # a preset replaces the optimizer option and brings its schedule
    assert mlu.optimizer.betas == [0.9, 0.997] and mlu.scheduler._target_ == "coda_exp.optim.noam_schedule"


@pytest.mark.parametrize("table", sorted(p.stem for p in (CONFIGS / "tables").glob("*.yaml")))
def test_one_make_rule_reproduces_each_table(table):
    """`make reproduce-<table>` runs every configs/experiment/<table>[_*].yaml (Table 8: two) and prints it."""
    experiments = sorted(p.stem for p in (CONFIGS / "experiment").glob(f"{table}*.yaml")
                         if p.stem == table or p.stem.startswith(f"{table}_"))
    out = subprocess.run(["make", "-n", f"reproduce-{table.replace('_', '-')}", "SCALE=cpu",
                          "-o", ".venv/.installed"],
                         cwd=ROOT, capture_output=True, text=True, check=False)
    if not experiments:  # a table spec without its experiment yet (e.g. AttConv's): a clear refusal
        assert "experiments=\"\"" in out.stdout
        return
    assert out.returncode == 0, out.stderr
    assert f'experiments="{" ".join(experiments)}"' in out.stdout and f"table={table}" in out.stdout
    assert "train.py -m experiment=$experiment scale=cpu" in out.stdout
    assert "check_sweep_data.py experiment=$experiment scale=cpu" in out.stdout  # the data, before any job
    assert "make_tables.py --runs results/runs --out results/tables --tables $table" in out.stdout


def run_reproduce_table_8(tmp_path, codes, records=True) -> tuple[subprocess.CompletedProcess, list[str]]:
    """`make reproduce-table-8 SCALE=cpu` in a copy of the checkout's layout (configs/ linked, its own results/),
    a fake python whose sweeps exit with ``codes`` (table_8, table_8_nmt), each writing a run record if
    ``records``; returns make's outcome and the scripts called."""
    (tmp_path / "configs").symlink_to(CONFIGS)
    record = "mkdir -p results/runs; touch results/runs/$$.json; " if records else ""
    fake = tmp_path / "python"
    fake.write_text(f'#!/bin/sh\necho "$*" >> {tmp_path}/calls\ncase "$*" in\n'
                    f'  *train.py*experiment=table_8_nmt*) {record}exit {codes[1]};;\n'
                    f'  *train.py*experiment=table_8*) {record}exit {codes[0]};;\nesac\nexit 0\n')
    fake.chmod(0o755)
    out = subprocess.run(["make", "-s", "-f", str(ROOT / "Makefile"), "-o", ".venv/.installed", "reproduce-table-8",
                          "SCALE=cpu", f"PY={fake}"], cwd=tmp_path, capture_output=True, text=True, check=False,
                         env={**os.environ, "CODA_EXP_ROOT": str(tmp_path)})  # (the root its records go to)
    calls = [line.split()[0].rsplit("/", 1)[-1] for line in (tmp_path / "calls").read_text().splitlines()]
    return out, calls


@pytest.mark.parametrize("codes,status", [((2, 1), 1), ((1, 2), 1), ((2, 0), 2), ((0, 0), 0), ((130, 0), 130)])
def test_a_failed_sweep_still_runs_the_others_and_makes_the_table(codes, status, tmp_path):
    """Table 8's two sweeps, the first with failed jobs: the second still runs, the table is still made from the
    runs that finished, then the rule fails with the worst status (1: a job crashed, over 2: user errors; make names
    it, "Error 1"); a sweep stopped by a signal (130) stops it there. It used to stop at the first failed sweep,
    with no table."""
    out, calls = run_reproduce_table_8(tmp_path, codes)
    assert (out.returncode == 0) == (status == 0), out.stderr  # make's own status is 2 for any failed rule
    assert (f"reproduce-table-8] Error {status}" in out.stderr) == (status != 0), out.stderr  # the rule's, named
    if status > 128:
        assert calls == ["check_sweep_data.py"] * 2 + ["train.py"]
        return
    assert calls == ["check_sweep_data.py"] * 2 + ["train.py"] * 2 + ["make_tables.py"]
    said = [line for line in out.stderr.splitlines() if line.startswith("reproduce-table-8: some sweep jobs failed")]
    assert len(said) == (status != 0)
    if status:
        assert f"(exit status {status}: {'a job crashed' if status == 1 else 'user errors'})" in said[0]


def test_sweeps_refused_before_any_job_leave_the_tables_alone(tmp_path):
    """Both sweeps refused (exit 2: a bad override, say seed=abc), no record written: the tables are not rewritten
    from the records they were made from already, and the rule says so, with the sweeps' status. It used to write
    them anyway, then exit 2."""
    out, calls = run_reproduce_table_8(tmp_path, (2, 2), records=False)
    assert calls == ["check_sweep_data.py"] * 2 + ["train.py"] * 2  # no make_tables.py
    assert "reproduce-table-8] Error 2" in out.stderr
    assert ("reproduce-table-8: no sweep wrote a run record (exit status 2: user errors); results/tables was left "
            "as it was") in out.stderr


def test_fixture_runs_and_their_tables_stay_out_of_results():
    """scale=fixture (make quickstart, reproduce-* SCALE=fixture) writes records and tables under the git-ignored
    outputs/fixture_results/, not beside the committed results."""
    out = subprocess.run(["make", "-n", "reproduce-table-2", "SCALE=fixture", "-o", ".venv/.installed"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    assert "--runs outputs/fixture_results/runs --out outputs/fixture_results/tables" in out
    quick = subprocess.run(["make", "-n", "-o", ".venv/.installed", "quickstart"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout
    assert "--runs outputs/fixture_results/runs" in quick


@pytest.mark.parametrize("experiment", options("experiment"))
def test_scale_fixture_wins_over_an_experiments_results_folder(experiment, monkeypatch, tmp_path):
    """experiment=mlu_gate_ablation names its own results folder: under the scale's (results/mlu_gate_ablation at
    scale=cpu, outputs/fixture_results/mlu_gate_ablation at scale=fixture), so a smoke run never writes its records
    into the tracked results/; every other experiment keeps the scale's folder."""
    from hydra import compose, initialize_config_dir

    monkeypatch.setenv("CODA_EXP_ROOT", str(tmp_path))
    with initialize_config_dir(version_base="1.3", config_dir=str(CONFIGS)):
        for scale, root in (("fixture", tmp_path / "outputs" / "fixture_results"), ("cpu", tmp_path / "results")):
            cfg = compose("train", overrides=[f"experiment={experiment}", f"scale={scale}"])
            folder = Path(cfg.paths.results_dir)
            assert folder == root or folder.parent == root, (scale, folder)
            if experiment == "mlu_gate_ablation":
                assert folder == root / "mlu_gate_ablation"


def test_the_trainer_configs_say_val_check_interval_counts_batches():
    """Lightning's integer ``val_check_interval`` counts training batches, not optimizer steps: under
    ``+trainer.accumulate_grad_batches=2`` an interval of 2 validates after every step. The trainer config said
    "every N training steps"."""
    said = {p.name: line for p in (CONFIGS / "trainer").glob("*.yaml") for line in p.read_text().splitlines()
            if line.startswith("val_check_interval:")}
    assert said and all("batches" in line and "training steps" not in line for line in said.values()), said


@pytest.mark.parametrize("task", TASKS)
def test_the_fixture_scale_keeps_a_step_bounded_task_step_bounded(make_cfg, task):
    """scale=fixture's task.epochs=8 ended task=algolisp at step 16 of its task.max_steps=20 and task=sst at step 8,
    capped task=mlu task.max_steps=300 at 200 steps, and task=iwslt15_envi averaged 2 periodic checkpoints of its
    task.average_last=5: each with a warning. A task bounded by steps at the paper's scale is at the fixture's too,
    and averages no more checkpoints than its fixture budget keeps."""
    paper, fixture = make_cfg(f"task={task}"), make_cfg(f"task={task}", "scale=fixture")
    if paper.task.get("max_steps") is None:
        assert fixture.task.get("max_steps") is None
        return
    assert fixture.task.epochs == paper.task.epochs and fixture.task.max_steps < paper.task.max_steps
    if fixture.task.get("average_last"):
        assert fixture.task.average_last <= fixture.task.max_steps // fixture.task.val_check_interval
