"""Configuration fingerprints: what they hash, and tables that pool only the grid's configuration."""

from __future__ import annotations

import json
import os

import pytest
import yaml

from coda_exp.fingerprint import GRID_FINGERPRINT, configuration_overrides, fingerprint, scale_label
from coda_exp.table_render import render_latex, render_markdown
from coda_exp.tables import SupersededRunWarning, UnknownFingerprintWarning, build_table
from tests import ROOT
from tests.results.records import cell, md_row, rec


def run_with(*overrides, **kw):
    record = rec(model="decompatt", overrides=["task=snli", "model=decompatt", *overrides], **kw)
    record["fingerprint"] = fingerprint(record["overrides"])
    return record


def test_only_configuration_overrides_count():
    grid = ["task=snli", "model=decompatt_coda", "seed=3", "scale=cpu", "experiment=table_3", "task.epochs=2",
            "model.attention.center_e=true", "model/attention=coda", "centering=e", "paths.results_dir=/x",
            "hydra.run.dir=/y", "logger=none", "trainer=ddp", "trainer.devices=1", "data.dir=/d", "ckpt_path=/c",
            "+data.num_test=50", "debug=limit"]
    assert configuration_overrides(grid) == [] and fingerprint(grid) == GRID_FINGERPRINT
    assert configuration_overrides([*grid, "optimizer.lr=1e-3", "+trainer.gradient_clip_val=1"]) == [
        "optimizer.lr=0.001", "trainer.gradient_clip_val=1"]
    assert fingerprint(["optimizer.lr=1e-3"]) == fingerprint(["optimizer.lr=0.001"]) != GRID_FINGERPRINT
    assert fingerprint(["optimizer.lr=0.001"]) != fingerprint(["optimizer.lr=0.0001"])
    # the model's other hyper-parameters are a different configuration (tables match only its name and attention)
    assert configuration_overrides([*grid, "model.hidden_size=300", "model.scoring.n_fn=tanh"]) == [
        "model.hidden_size=300"]
    # a key under a grid group is a configuration change (task.* once hid every schedule change of a task)
    assert configuration_overrides([*grid, "task.cpu_scheduler.peak_lr=1e-3", "+task.gradient_clip_val=1.0",
                                    "task.module.label_smoothing=0", "experiment.x=1"]) == [
        "experiment.x=1", "task.cpu_scheduler.peak_lr=0.001", "task.gradient_clip_val=1.0",
        "task.module.label_smoothing=0"]
    # how often a run validates is part of its budget: its scale label says it, its fingerprint does not
    assert fingerprint([*grid, "task.val_check_interval=500"]) == GRID_FINGERPRINT
    assert scale_label("cpu", ["task.max_steps=10000", "task.val_check_interval=500"]) == (
        "cpu (task.max_steps=10000, task.val_check_interval=500)")


def test_several_processes_are_another_configuration_one_is_none(make_cfg, spec):
    """A 4-process DDP run (4 batches per step, a quarter of the steps) superseded the 1-process run of its seed."""
    from coda_exp.run_record import run_identity, world_size

    assert configuration_overrides(["trainer.devices=4"]) == ["world_size=4"]
    assert configuration_overrides(["trainer.devices=[0,1]", "trainer.num_nodes=2"]) == ["world_size=4"]
    assert fingerprint(["trainer.devices=1", "trainer.num_nodes=1", "trainer.devices=[3]"]) == GRID_FINGERPRINT
    assert fingerprint(["trainer=ddp"]) == GRID_FINGERPRINT  # every visible GPU: the run counts them (below)
    assert fingerprint(["trainer=ddp"], world_size=2) == fingerprint(["trainer.devices=2"]) != GRID_FINGERPRINT
    one = run_identity(make_cfg("task=snli", "scale=fixture"), ["task=snli"])
    assert (one["world_size"], one["fingerprint"], one["fingerprint_overrides"]) == (1, GRID_FINGERPRINT, [])
    four = run_identity(make_cfg("task=snli", "scale=fixture", "trainer.devices=4"), ["trainer.devices=4"])
    assert (four["world_size"], four["fingerprint_overrides"]) == (4, ["world_size=4"])
    ddp = {"accelerator": "cpu", "devices": -1, "num_nodes": 2}  # trainer=ddp on the CPU: every core, per node
    assert world_size(ddp) == 2 * (os.cpu_count() or 1) and world_size({**ddp, "devices": "auto"}) == 2
    assert world_size({"devices": "0,1"}) == world_size({"devices": [0, 1]}) == 2 == world_size({"devices": 2})
    single = run_with(seed=1, metrics={"test/acc": 0.80})
    parallel = rec(model="decompatt", seed=1, metrics={"test/acc": 0.70}, overrides=["trainer.devices=4"],
                   **{k: four[k] for k in ("fingerprint", "fingerprint_overrides", "fingerprint_rule")})
    c = cell(build_table(spec, [single, parallel]), "D-ATT", "SNLI")  # the later, parallel run replaces nothing
    assert c.run_ids == [single["run_id"]] and [(o["run_id"], o["overrides"]) for o in c.off_grid] == [
        (parallel["run_id"], ["world_size=4"])]


def test_the_committed_records_keep_their_fingerprints():
    """Every record under results/ ran in one process: adding the world size left each fingerprint as it was
    (tests/results/committed_fingerprints.json: each record's fingerprint before it)."""
    from coda_exp.experiments import record_configuration
    from coda_exp.results import read_record

    pinned = json.loads((ROOT / "tests" / "results" / "committed_fingerprints.json").read_text())
    assert len(pinned) >= 77
    for path, expected in pinned.items():
        if (ROOT / path).is_file():  # a record removed since is no concern
            assert record_configuration(read_record(ROOT / path))[0] == expected, path


def test_measuring_the_gate_is_no_other_configuration():
    # callbacks=gate_stats only measures (coda_exp.callbacks.GateStats): its runs stay in the table's cells
    measured = ["callbacks=gate_stats", "callbacks.gate_stats.every_n_steps=50", "+callbacks.gate_stats.max_examples=4"]
    assert configuration_overrides(measured) == [] and fingerprint(measured) == GRID_FINGERPRINT
    assert configuration_overrides(["callbacks=gate_stats", "callbacks.early_stopping.patience=3"]) == [
        "callbacks.early_stopping.patience=3"]


def test_every_experiment_sweep_is_on_its_tables_grid(shipped):
    """The runs of `-m experiment=table_N` all have their table's grid fingerprint (the plain grid's, for a table
    whose experiments set nothing beyond the axes, and for an experiment of no table): each sweep axis is a grid
    axis."""
    from coda_exp.experiments import grid_fingerprint, run_configuration

    for path in sorted((ROOT / "configs" / "experiment").glob("*.yaml")):
        params = yaml.safe_load(path.read_text())["hydra"]["sweeper"]["params"]
        table = next((t for t in shipped if path.stem == t or path.stem.startswith(t + "_")), None)
        for k in range(max(len(str(v).split(",")) for v in params.values())):
            job = [f"experiment={path.stem}"] + [f"{key}={str(v).split(',')[min(k, len(str(v).split(',')) - 1)]}"
                                                 for key, v in params.items()]
            run = run_configuration(job, None, None)
            assert run["fingerprint"] == (grid_fingerprint(table) if table else GRID_FINGERPRINT), (path.name, run)


def test_a_cell_pools_only_the_grid_configuration_and_lists_the_others(spec):
    records = [run_with(seed=1, metrics={"test/acc": 0.84}), run_with(seed=2, metrics={"test/acc": 0.86}),
               run_with("optimizer.lr=0.0001", seed=3, metrics={"test/acc": 0.50}),
               run_with("optimizer.lr=0.001", seed=1, metrics={"test/acc": 0.70})]
    table = build_table(spec, records)
    c = cell(table, "D-ATT", "SNLI")
    assert c.seeds == [1, 2] and c.mean == pytest.approx(85.0)
    assert [(o["seed"], o["overrides"]) for o in c.off_grid] == [(3, ["optimizer.lr=0.0001"]),
                                                                 (1, ["optimizer.lr=0.001"])]
    md = render_markdown(table)
    assert md_row(md, "D-ATT")[2] == "85.00 ± 1.41 (n=2, cpu)"
    for run in records[2:]:  # named under the table, never silently dropped
        assert run["run_id"] in md and run["run_id"] in render_latex(table)
    assert "D-ATT / SNLI: seed 1 (cpu) with optimizer.lr=0.001" in md


def test_a_superseded_duplicate_is_named(spec):
    old, new = run_with(seed=1, metrics={"test/acc": 0.80}), run_with(seed=1, metrics={"test/acc": 0.90})
    with pytest.warns(SupersededRunWarning, match=f"run {old['run_id']} is superseded by the later {new['run_id']}"):
        table = build_table(spec, [new, old])
    assert cell(table, "D-ATT", "SNLI").values == [pytest.approx(90.0)]


def test_records_without_a_fingerprint_load_with_a_warning(spec):
    old = [rec(model="decompatt", seed=1, overrides=["seed=1"]),
           rec(model="decompatt", seed=2, overrides=["seed=2", "optimizer.lr=0.1"])]
    with pytest.warns(UnknownFingerprintWarning, match="2 run record"):
        table = build_table(spec, old)
    c = cell(table, "D-ATT", "SNLI")
    assert c.seeds == [1] and [o["seed"] for o in c.off_grid] == [2]


def test_word_vectors_count_by_what_they_are_not_where_they_lie():
    """The README's example (data.embeddings.path=/data/glove.840B.300d.txt) is the paper's configuration from any
    folder; other vectors are another configuration, named by file and dimension."""
    paper = {"name": "glove.840B.300d", "dim": 300}
    for path in ("/data/glove.840B.300d.txt", "/elsewhere/glove.840B.300d.txt.gz"):
        assert fingerprint([f"data.embeddings.path={path}"]) == GRID_FINGERPRINT  # an older record: the name only
        assert fingerprint([f"data.embeddings.path={path}"], paper) == GRID_FINGERPRINT
    assert fingerprint(["data.embeddings.path=/x/GoogleNews-vectors-negative300.txt"]) == GRID_FINGERPRINT
    assert fingerprint(["data.embeddings.path=null"]) == GRID_FINGERPRINT
    small = {"name": "glove.6B.100d", "dim": 100}
    assert configuration_overrides(["data.embeddings.path=/d/glove.6B.100d.txt"], small) == [
        "data.embeddings=glove.6B.100d:100d"]
    assert fingerprint(["data.embeddings.path=/a/glove.6B.100d.txt"], small) == \
        fingerprint(["data.embeddings.path=/b/glove.6B.100d.txt"], small) != GRID_FINGERPRINT
    # a paper name with another dimension is not the paper's vectors; vectors set in a config file count too
    assert fingerprint([], {"name": "glove.840B.300d", "dim": 50}) != GRID_FINGERPRINT
    assert fingerprint([], small) == fingerprint(["data.embeddings.path=/c/glove.6B.100d.txt"], small)
    # extend_vocab still changes what a run computes
    assert fingerprint(["data.embeddings.extend_vocab=false"], paper) != GRID_FINGERPRINT


def test_a_run_with_the_papers_vectors_fills_the_papers_cell(make_cfg, tmp_path, spec):
    from coda_exp.run_record import run_identity

    vectors = tmp_path / "glove.840B.300d.txt"
    vectors.write_text("the " + " ".join(["0.1"] * 300) + "\n", encoding="utf-8")
    overrides = ["task=snli", "model=decompatt", f"data.embeddings.path={vectors}"]
    identity = run_identity(make_cfg(*overrides), overrides)
    assert identity["vectors"]["name"] == "glove.840B.300d" and identity["vectors"]["dim"] == 300
    assert identity["fingerprint"] == GRID_FINGERPRINT and identity["fingerprint_overrides"] == []
    record = rec(model="decompatt", overrides=overrides, fingerprint=identity["fingerprint"],
                 vectors=identity["vectors"])
    table = build_table(spec, [record])
    assert cell(table, "D-ATT", "SNLI").run_ids == [record["run_id"]]
    other = tmp_path / "my_vectors.txt"
    other.write_text("the 0.5 0.5\n", encoding="utf-8")
    mine = run_identity(make_cfg("task=snli", f"data.embeddings.path={other}"), [f"data.embeddings.path={other}"])
    assert mine["fingerprint_overrides"] == ["data.embeddings=my_vectors:2d"]
    apart = rec(model="decompatt", **{k: mine[k] for k in ("fingerprint", "fingerprint_overrides", "fingerprint_rule")})
    table = build_table(spec, [apart])
    assert cell(table, "D-ATT", "SNLI").status == "no run"
    assert "data.embeddings=my_vectors:2d" in render_markdown(table)


def _run_record(make_cfg, overrides: list[str], seed: int, acc: float, metric: str) -> dict:
    """A record as the pipeline writes it for ``overrides`` (its attention and configuration fingerprint)."""
    from coda_exp.run_record import attention_options, run_identity

    cfg = make_cfg(*overrides, f"seed={seed}")
    identity = run_identity(cfg, [*overrides, f"seed={seed}"])
    return rec(task=str(cfg.task.name), model=str(cfg.model.name), seed=seed, metrics={metric: acc},
               attention=attention_options(cfg), overrides=identity["overrides"],
               **{k: identity[k] for k in ("fingerprint", "fingerprint_overrides", "fingerprint_rule")})


@pytest.mark.parametrize("table, row, column, metric, grid, other", [
    # issue: a "no gate" CoDA Transformer with T2T's q scaling became seed 4 of Table 6's CoDA cell
    ("table_6", "CoDA Transformer", "accuracy", "test/acc_seq", ["experiment=table_6", "model=coda_transformer"],
     ["model.scoring.beta=0", "model.scoring.query_scale=true"]),
    # ... and a one-layer, 50-unit DecompAtt attention seed 4 of Table 2's D-ATT cell
    ("table_2", "D-ATT", "WikiQA MAP", "test/map", ["task=wikiqa", "model=decompatt"],
     ["model.attention.hidden=50", "model.attention.num_layers=1"]),
])
def test_attention_options_no_experiment_sweeps_are_another_configuration(make_cfg, shipped, table, row, column,
                                                                           metric, grid, other):
    records = [_run_record(make_cfg, grid, s, 0.5 + s / 100, metric) for s in (1, 2, 3)]
    apart = _run_record(make_cfg, [*grid, *other], 4, 0.0, metric)
    assert apart["fingerprint"] != GRID_FINGERPRINT and apart["fingerprint_overrides"] == sorted(other)
    built = build_table(shipped[table], [*records, apart])
    c = cell(built, row, column)
    assert c.seeds == [1, 2, 3] and [o["run_id"] for o in c.off_grid] == [apart["run_id"]]
    assert f"with {' '.join(sorted(other))} ({apart['run_id']})" in render_markdown(built)


def test_an_older_record_is_read_under_todays_rule(shipped):
    """Rule 1 gave an attention override the grid's fingerprint: such a record is derived again, with a warning."""
    old = rec(task="mlu", model="coda_transformer", seed=4, metrics={"test/acc_seq": 0.0},
              attention={"name": "coda", "e_fn": "tanh", "n_fn": "sigmoid", "center_e": False, "center_n": False,
                         "gate_scale": None, "beta": 0.0},
              overrides=["experiment=table_6", "model=coda_transformer", "seed=4", "model.scoring.beta=0.0"],
              fingerprint=GRID_FINGERPRINT, fingerprint_overrides=[])
    fine = rec(task="mlu", model="coda_transformer", seed=1, metrics={"test/acc_seq": 0.5},
               attention={**old["attention"], "beta": 1.0}, overrides=["experiment=table_6", "seed=1"],
               fingerprint=GRID_FINGERPRINT, fingerprint_overrides=[])
    with pytest.warns(UnknownFingerprintWarning, match=f"1 run record.*earlier fingerprint rule.*{old['run_id']}: "
                                                       "model.scoring.beta=0.0"):
        built = build_table(shipped["table_6"], [old, fine])
    c = cell(built, "CoDA Transformer", "accuracy")
    assert c.run_ids == [fine["run_id"]] and [o["overrides"] for o in c.off_grid] == [["model.scoring.beta=0.0"]]


def _swept_attention(experiment: dict) -> set[str]:
    """The attention keys an experiment sweeps: its sweep parameters, and the keys it sets from one (Table 8)."""
    params = experiment["hydra"]["sweeper"]["params"]
    swept = {k for k in params if k.startswith(("model.attention.", "model.scoring.", "model/attention",
                                                "model/scoring"))}
    for group in ("attention", "scoring"):
        for key, value in ((experiment.get("model") or {}).get(group) or {}).items():
            if any(f"${{{p}}}" in str(value) for p in params):
                swept.add(f"model.{group}.{key}")
    return swept


def test_the_grids_attention_axes_are_what_the_experiments_sweep():
    from coda_exp.fingerprint import SWEPT_ATTENTION

    swept = set().union(*(_swept_attention(yaml.safe_load(p.read_text()))
                          for p in (ROOT / "configs" / "experiment").glob("*.yaml")))
    assert swept == set(SWEPT_ATTENTION)


def test_every_row_a_coda_run_can_reach_pins_the_swept_options(shipped):
    """A swept attention option keeps the grid's fingerprint, so a row must tell its values apart."""
    from coda_exp.fingerprint import SWEPT_ATTENTION

    options = {key.rsplit(".", 1)[1] for key in SWEPT_ATTENTION if "." in key}
    for spec in shipped.values():
        for row in spec.rows:
            for col in spec.columns:
                match = {**(row.match or {}), **col.match}
                if row.match is None or match.get("attention.name") in ("softmax", "none"):
                    continue
                missing = sorted(o for o in options if f"attention.{o}" not in match)
                assert not missing, (spec.id, row.name, col.name, missing)
