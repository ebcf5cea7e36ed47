"""coda-exp eval's own folder (``outputs/evals/<task>-<model>/<time>``) as a training run's: kept with the error at
the end of its eval.log when the evaluation fails, gone when it is refused before it began."""

from __future__ import annotations

from coda_exp.errors import USER_ERROR_EXIT
from coda_exp.evaluate import eval_main
from tests.conftest import eval_paths as _paths


def test_a_failed_eval_keeps_its_folder_with_the_error_in_its_log(snli_model, tmp_path, capsys):
    """As a failed training run: an evaluation that fails once its folder is made (a malformed data line) keeps the
    folder, its eval.log ending with the error (it ended with the lines before, saying nothing of the failure)."""
    _, _, ckpt = snli_model
    bad = tmp_path / "bad_snli"
    bad.mkdir()
    (bad / "snli_1.0_test.jsonl").write_text('{"gold_label": "neutral", "sent\n', encoding="utf-8")
    out = tmp_path / "eval"
    capsys.readouterr()
    assert eval_main([f"ckpt_path={ckpt}", "split=test", f"data.dir={bad}", *_paths(out)]) == USER_ERROR_EXIT
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "snli_1.0_test.jsonl:1: malformed JSON" in err
    assert "evaluation failed" not in err  # the log's line: the console has the error once
    (log_file,) = (out / "outputs" / "evals").rglob("eval.log")
    last = log_file.read_text(encoding="utf-8").splitlines()[-1]
    assert f"[ERROR] - evaluation failed: {err.removeprefix('error: ').splitlines()[0]}" in last
    assert not list(out.rglob("*.json"))  # no record


def test_an_eval_refused_before_it_began_leaves_no_folder(snli_model, tmp_path, capsys):
    """As a refused training run's untouched folder: its results folder a file, the evaluation's folder, holding
    only its claim, goes (it stayed, empty to ls)."""
    _, _, ckpt = snli_model
    (tmp_path / "results").write_text("a file, not a folder", encoding="utf-8")
    refused = tmp_path / "refused"
    args = [f"ckpt_path={ckpt}", *_paths(refused), f"paths.results_dir={tmp_path / 'results'}"]
    assert eval_main(args) == USER_ERROR_EXIT
    assert "is a file, not a folder" in capsys.readouterr().err
    assert [p.name for p in (refused / "outputs").rglob("*")] == ["evals"]  # neither <task>-<model>/ nor <time>/
    missing = tmp_path / "missing"  # a data.dir that is not there: said before the folder (it left an empty one)
    assert eval_main([f"ckpt_path={ckpt}", f"data.dir={tmp_path / 'nowhere'}", *_paths(missing)]) == USER_ERROR_EXIT
    assert "nowhere" in capsys.readouterr().err and not (missing / "outputs").exists()


def test_an_eval_from_another_folder_writes_beside_the_training_s_own_records(tmp_path, compose, monkeypatch,
                                                                              capsys):
    """A run trained in a project folder of one's own, evaluated from another folder: the record went to that other
    folder's results/, where `coda-exp compare` in the project did not see it."""
    from coda_exp import environment
    from tests.conftest import train_fixture_model

    project = tmp_path / "lab"
    project.mkdir()
    _, ckpt = train_fixture_model(compose, tmp_path / "train", "task=snli", "task.epochs=1", f"paths.root_dir={project}")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setattr(environment, "ROOT_CHOSEN", False)  # as a user who set no CODA_EXP_ROOT
    assert eval_main([f"ckpt_path={ckpt}", "split=test", "logger=none"]) == 0
    assert len(list((project / "outputs" / "fixture_results" / "runs").glob("*.json"))) == 1
    assert list((project / "outputs" / "evals").rglob("eval.log")) and not list(elsewhere.iterdir())
