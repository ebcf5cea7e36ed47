"""End to end: a fixture run with a default typed out (``optimizer.lr=3e-4``, Adam's lr) records the fingerprint of
the run without it, names it in ``fingerprint_defaults``, logs so, and a table pools both runs
(``coda_exp/default_overrides.py``)."""

from coda_exp import results
from coda_exp.evaluate import eval_main
from coda_exp.experiments import record_configuration
from coda_exp.fingerprint import GRID_FINGERPRINT
from coda_exp.pipeline import run
from coda_exp.run_record import run_identity
from coda_exp.table_render import render_markdown
from coda_exp.tables import build_table, load_table_spec
from tests.conftest import eval_paths
from tests.results.records import SPEC_YAML, cell, rec

RUN = ["task=snli", "model=decompatt", "scale=fixture", "logger=none", "task.epochs=1"]


def _record(compose, folder, *overrides) -> dict:
    run(compose([*RUN, *overrides], folder))
    (record,) = results.load_records(folder / "results" / "runs", strict=True)
    return record


def test_a_default_typed_out_pools_with_the_runs_without_it(compose, make_cfg, tmp_path, caplog):
    plain = _record(compose, tmp_path / "plain", "seed=1")
    with caplog.at_level("INFO", logger="coda_exp.run_record"):  # the log's note, at the run's start
        typed = _record(compose, tmp_path / "typed", "seed=2", "optimizer.lr=3e-4")
    assert "optimizer.lr=3e-4" in typed["overrides"]
    assert typed["fingerprint"] == plain["fingerprint"] == GRID_FINGERPRINT
    assert typed["fingerprint_overrides"] == plain["fingerprint_overrides"] == []
    assert (typed["fingerprint_defaults"], plain["fingerprint_defaults"]) == (["optimizer.lr=3e-4"], [])
    assert "optimizer.lr=3e-4 is this configuration's default: it does not change the fingerprint" in caplog.text
    # another value is another configuration (as the pipeline would record it), listed apart
    other = [*RUN, "seed=3", "optimizer.lr=0.001"]
    identity = run_identity(make_cfg(*other), other)
    apart = rec(model="decompatt", seed=3, scale=plain["scale"], overrides=other,
                **{k: identity[k] for k in ("fingerprint", "fingerprint_overrides", "fingerprint_rule",
                                            "fingerprint_defaults")})
    assert apart["fingerprint"] != GRID_FINGERPRINT and apart["fingerprint_defaults"] == []
    (tmp_path / "t_demo.yaml").write_text(SPEC_YAML, encoding="utf-8")  # the table tests' demo: D-ATT x SNLI
    table = build_table(load_table_spec(tmp_path / "t_demo.yaml"), [plain, typed, apart])
    c = cell(table, "D-ATT", "SNLI")
    assert c.seeds == [1, 2] and [o["run_id"] for o in c.off_grid] == [apart["run_id"]]
    assert "with optimizer.lr=0.001" in render_markdown(table)
    # an evaluation of the typed run's checkpoint is of its configuration, derived again from its record too
    assert eval_main([f"ckpt_path={typed['best_checkpoint']}", *eval_paths(tmp_path / "eval")]) == 0
    (evaluated,) = results.load_records(tmp_path / "eval" / "results" / "runs", strict=True)
    assert (evaluated["fingerprint"], evaluated["fingerprint_defaults"]) == (GRID_FINGERPRINT, ["optimizer.lr=3e-4"])
    for record in (typed, evaluated):  # as a later rule would derive it again from its overrides
        assert record_configuration({**record, "fingerprint_rule": None}) == (GRID_FINGERPRINT, [])
