"""coda-exp eval missing a logger's package: one message naming the extra and exit status 2, as training, never a
traceback after the evaluation."""

from __future__ import annotations

import pytest

from coda_exp import extras
from coda_exp.errors import USER_ERROR_EXIT
from coda_exp.evaluate import eval_main
from tests.conftest import eval_paths

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("logger,module", [("wandb", "wandb"), ("tensorboard", "tensorboard")])
def test_eval_without_a_loggers_package_names_the_extra_before_any_data_loads(snli_model, tmp_path, monkeypatch,
                                                                               capsys, logger, module):
    """It evaluated, then failed with Lightning's ModuleNotFoundError traceback (exit 1), as training does not."""
    _, _, ckpt = snli_model
    monkeypatch.setattr(extras, "installed", lambda name: name not in (module, "tensorboardX"))
    paths = [a for a in eval_paths(tmp_path) if not a.startswith("logger=")]
    assert eval_main([f"ckpt_path={ckpt}", *paths, f"logger={logger}"]) == USER_ERROR_EXIT
    err = capsys.readouterr().err
    assert err.startswith(f"error: logger={module} (") and f"pip install 'coda-exp[{module}]'" in err, err
    assert not (tmp_path / "outputs" / "evals").exists()  # refused before its folder, before any data
