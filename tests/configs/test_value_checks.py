"""coda_exp.config_checks on composed configs: what used to fail after training started (a monitor the task never
logs, a decoding strategy, a seed out of Lightning's range) or to be taken silently ("no" for a boolean) is one
ConfigError naming the key, and no default config is refused."""

from __future__ import annotations

import pytest

from coda_exp.config_checks import ConfigError, check_config
from coda_exp.run_checks import check_compatible
from tests import ROOT

TASKS = sorted(p.stem for p in (ROOT / "configs" / "task").glob("*.yaml"))


@pytest.mark.parametrize("task", TASKS)
def test_every_task_default_passes(make_cfg, task):
    check_config(make_cfg(f"task={task}"))


@pytest.mark.parametrize("overrides,message", [
    # Lightning's early stopping used to raise after the first epoch; the close name is suggested
    (["task=snli", "task.monitor=val/accc"],
     ("task.monitor = 'val/accc': expected a metric the task logs in validation: val/acc, val/loss; did you mean "
      "task.monitor=val/acc?")),
    (["task=udc", "task.monitor=val/r10@3"], "val/r10@1, val/r10@2, val/r10@5, val/r2@1"),  # the task's metrics
    (["task=snli", "task.monitor=train/loss"], "task.monitor = 'train/loss': expected a metric the task logs in"),
    (["task=snli", "task.monitor_mode=maximum"], "task.monitor_mode = 'maximum': expected min or max"),
    # the next two used to fail at the first validation, after the data had loaded
    (["task=mlu", "model=transformer", "task.module.decoding.strategy=beem"],
     "task.module.decoding.strategy = 'beem': expected greedy or beam"),
    # decoding options a strategy does not take used to be ignored under greedy (a TypeError under beam, at the
    # first decoding); iwslt15_envi's beam options under greedy are named with the two ways out
    (["task=mlu", "model=transformer", "+task.module.decoding.max_length=20"],
     ("task.module.decoding.max_length: not an option of task.module.decoding.strategy=greedy, which takes max_len, "
      "max_len_a, max_len_b, use_cache; did you mean task.module.decoding.max_len for "
      "task.module.decoding.max_length?")),
    (["task=mlu", "model=transformer", "+task.module.decoding.beam_size=8"],
     ("beam_size is beam search's: set task.module.decoding.strategy=beam, or remove it "
      "(~task.module.decoding.beam_size)")),
    (["task=iwslt15_envi", "model=transformer", "task.module.decoding.strategy=greedy"],
     "task.module.decoding.beam_size, task.module.decoding.length_penalty: not options of"),
    (["task=iwslt15_envi", "model=transformer", "+task.module.decoding.max_lenght=50"],
     "task.module.decoding.max_lenght: not an option of task.module.decoding.strategy=beam"),
    (["task=mlu", "model=transformer", "task.module.val_decoding={strategy: beam, beam_sizes: 2}"],
     "task.module.val_decoding.beam_sizes: not an option of task.module.val_decoding.strategy=beam"),
    (["task=iwslt15_envi", "model=transformer", "task.module.decoding.beam_size=0"],
     "task.module.decoding.beam_size = 0: expected an int >= 1"),
    (["task=mlu", "model=transformer", "+task.module.decoding.use_cache=no"],
     "task.module.decoding.use_cache = 'no': expected true or false"),
    (["task=mlu", "model=transformer", "task.module.label_smoothing=2"],
     "task.module.label_smoothing = 2: expected a probability in [0, 1)"),
    # Lightning's seed_everything used to raise its own traceback
    (["task=snli", "seed=-1"], "seed = -1: expected an int in [0, 4294967295] (2**32 - 1)"),
    (["task=snli", "seed=4294967296"], "seed = 4294967296: expected an int in [0, 4294967295]"),
    # "no" is a string, which Python takes for true: the record used to be written all the same
    (["task=snli", "save_record=no"], "save_record = 'no': expected true or false"),
    (["task=snli", "test_after_fit=maybe"], "test_after_fit = 'maybe': expected true or false"),
    (["task=snli", "save_predictions=1"], "save_predictions = 1: expected true or false"),
    # a step-bounded run validating less often than it trains never validated: the last weights were tested
    (["task=mlu", "model=transformer", "scale=fixture", "task.val_check_interval=1000"],
     "task.val_check_interval = 1000 batches, beyond the run's 20 steps: it would never validate"),
    # torch used to refuse the model once the data had loaded
    (["task=mlu", "model=transformer", "model.num_heads=3"],
     ("model.d_model = 128 is not divisible by model.num_heads = 3: each head takes d_model / num_heads dimensions; "
      "e.g. model.num_heads=2 or model.d_model=129")),
    (["task=mlu", "model=coda_transformer", "model.d_model=130"], "e.g. model.num_heads=5 or model.d_model=132"),
    (["task=imdb", "model=transformer_classifier", "model.num_heads=5"], "model.num_heads=4 or"),
    # refused only once the data module was built, after start-up
    (["task=fever", "data.retrieval.hash_bits=31"], "data.retrieval.hash_bits = 31: expected an int in [1, 30]"),
    # OmegaConf's MissingMandatoryValue traceback (a new task YAML without dataset:) once the run read the key
    (["task=snli", "data.dataset=???"], ("data.dataset = ???: a mandatory value that no config or override gives: give "
                                         "it (data.dataset=...) or set it in the task's YAML")),
    # the schedule's ValueError traceback once the data had loaded and the model was built
    (["task=mlu", "model=transformer", "optimizer.lr=0.001"],
     ("optimizer.lr = 0.001: expected 1.0 under the schedule noam_schedule (scheduler._target_), which gives the "
      "learning rate itself (the optimizer's lr multiplies it); set optimizer.lr=1.0 and change the peak with "
      "scheduler.factor=...")),
    (["task=mlu", "model=transformer", "scale=cpu", "optimizer.lr=0.5"],
     "under the schedule warmup_cosine (task.cpu_scheduler._target_)"),
    # the data module's DataError, without the key's section
    (["task=snli", "data.validation_from_train=1.5"], "data.validation_from_train = 1.5: expected a fraction in (0, 1)"),
    # CoDA options: the module's own ValueError, a traceback once the data had loaded; now named by key, each one
    (["task=snli", "model=decompatt_coda", "model.attention.e_fn=bogus", "model.attention.dropout=1.5"],
     ("model.attention.dropout = 1.5: CoDA option dropout must be a probability in [0, 1), got 1.5\n  "
      "model.attention.e_fn = 'bogus': CoDA option e_fn must be one of ['sigmoid', 'tanh'], got 'bogus'")),
    (["task=snli", "model=decompatt_coda", "model.attention.projection=bogus"],
     "model.attention.projection = 'bogus': CoDA option projection must be one of ['mlp', 'linear']"),
    (["task=snli", "model=decompatt_coda", "model.attention.center_over=bogus"],
     "model.attention.center_over = 'bogus': CoDA option center_over must be one of ['slice', 'row']"),
    (["task=snli", "model=decompatt_coda", "model.attention.gate_scale=0"],
     "model.attention.gate_scale = 0: CoDA option gate_scale must be null or a finite float > 0"),
    (["task=mlu", "model=coda_transformer", "model.scoring.n_fn=relu", "model.scoring.alpha=-1"],
     "model.scoring.n_fn = 'relu': CoDA option n_fn must be one of"),
    (["task=mlu", "model=coda_transformer", "model.scoring.alpha=-1"],
     "model.scoring.alpha = -1: CoDA option alpha must be a finite float >= 0"),
    # an empty path is the current folder: records and predictions landed in ./runs and ./predictions unseen
    (["task=snli", "paths.results_root="], "paths.results_root = '': expected a folder path; an empty one is the "),
    (["task=snli", "paths.cache_dir=' '"], "paths.cache_dir = ' ': expected a folder path"),
    (["task=snli", "data.dir="], "data.dir = '': expected a folder path; an empty one is the current folder, the data"),
])
def test_a_value_that_failed_late_or_silently_is_one_message(make_cfg, overrides, message):
    with pytest.raises(ConfigError) as err:
        check_config(make_cfg(*overrides))
    assert message in str(err.value)


def test_the_hash_bits_check_is_the_retrieval_options_own_range():
    """config_checks keeps its own copy of the bound (importing the data package would come before Hydra's logging)."""
    from coda_exp.config_checks import CHECKS
    from coda_exp.data.evidence.retrieval import RETRIEVAL_RANGES

    low, high = RETRIEVAL_RANGES["hash_bits"]
    ok, _ = CHECKS["data.retrieval.hash_bits"]
    assert [v for v in range(low - 2, high + 3) if ok(v)] == list(range(low, high + 1))


@pytest.mark.parametrize("overrides,message", [
    # a dot for the group's slash: the string "coda" was called as the attention, once the data had loaded
    (["task=snli", "model.attention=coda"], ("model.attention = 'coda': expected a config node, an option of the "
                                             "group model/attention: choose it with a slash, model/attention=coda")),
    (["task=snli", "model.attention=cod"], "model/attention=<coda or softmax>"),
])
def test_a_value_where_a_group_puts_a_node_says_to_choose_the_option(make_cfg, overrides, message):
    with pytest.raises(ConfigError) as err:
        check_config(make_cfg(*overrides))
    assert message in str(err.value)


@pytest.mark.parametrize("overrides,message", [
    (["task=snli", "~seed"], "seed is required and absent (~seed removes it): give it a value instead"),
    (["task=snli", "~task.monitor"], "task.monitor is required and absent (~task.monitor removes it)"),
])
def test_a_required_key_removed_is_one_message(make_cfg, overrides, message):
    """They used to be tracebacks where the run first read them (seed_everything, the callbacks)."""
    with pytest.raises(ConfigError) as err:
        check_config(make_cfg(*overrides))
    assert message in str(err.value) and str(err.value).count("\n") == 1


def test_another_models_group_names_this_models_own(make_cfg):
    """+model/attention=coda on a Transformer (Hydra's advice after model/attention=coda) used to say "add
    preset=none", which changes nothing."""
    with pytest.raises(ConfigError) as err:
        check_compatible(make_cfg("task=mlu", "model=transformer", "+model/attention=coda"))
    assert str(err.value).endswith("(model=transformer has no model/attention group; did you mean model/scoring=coda?)")
    assert "preset" not in str(err.value)


@pytest.mark.parametrize("overrides", [["task=udc", "task.monitor=val/r2@1", "task.monitor_mode=min"],
                                       ["task=iwslt15_envi", "task.monitor=val/bleu"],
                                       ["task=searchqa", "task.monitor=val/f1_ngram"],
                                       ["task=mlu", "task.module.decoding.strategy=beam", "seed=4294967295"],
                                       ["task=mlu", "task.module.decoding.strategy=beam",
                                        "+task.module.decoding.beam_size=2", "+task.module.decoding.use_cache=false"],
                                       ["task=iwslt15_envi", "task.module.val_decoding={strategy: beam, beam_size: 2}"],
                                       ["task=snli", "save_record=false", "test_after_fit=false", "seed=0"]])
def test_valid_values_pass(make_cfg, overrides):
    check_config(make_cfg(*overrides))


def test_missing_values_and_raw_interpolations_are_read_without_resolving_anything():
    """Through OmegaConf's public API; OmegaConf.missing_keys itself resolves every interpolation it passes, so it
    fails on the hydra section (``${hydra:...}`` outside a Hydra app) and on an interpolation of a missing value
    (``trainer.max_epochs: ${task.epochs}`` with ``task.epochs=???``), where each missing key is to be named."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from coda_exp.config_checks import missing_keys
    from coda_exp.config_keys import raw_interpolation

    cfg = OmegaConf.create({"hydra": {"run": {"dir": "${hydra:runtime.cwd}"}, "x": "???"}, "a": "???",
                            "task": {"epochs": "???"}, "trainer": {"max_epochs": "${task.epochs}"},
                            "c": {"d": "???", "e": [1, "???", {"f": "???"}], "g": None, "h": "${oc.env:NOT_SET_X}"},
                            "n": None, "s": "${oc.create:{}}"})
    assert missing_keys(cfg) == ["a", "task.epochs", "c.d", "c.e.1", "c.e.2.f"]  # in the config's order
    for without_hydra in (cfg, OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])):
        with pytest.raises(OmegaConfBaseException):
            OmegaConf.missing_keys(without_hydra)
    assert raw_interpolation(cfg.trainer, "max_epochs") == "${task.epochs}"
    assert raw_interpolation(cfg.c, "h") == "${oc.env:NOT_SET_X}" and raw_interpolation(cfg, "s") == "${oc.create:{}}"
    assert raw_interpolation(cfg.hydra.run, "dir") == "${hydra:runtime.cwd}"
    assert raw_interpolation(cfg, "a") is None and raw_interpolation(cfg.c, "g") is None


def test_an_absent_key_another_interpolates_is_one_message(make_cfg):
    """A new task's YAML without ``patience:`` (callbacks.early_stopping.patience: ${task.patience}) used to be an
    InterpolationKeyError with a traceback when the run folder's config was saved."""
    with pytest.raises(ConfigError) as err:
        check_config(make_cfg("task=snli", "~task.patience"))
    assert ("task.patience is absent, but callbacks.early_stopping.patience reads it (${task.patience}): give it a "
            "value (+task.patience=... on the command line, or in the task's YAML (configs/task/<task>.yaml))"
            in str(err.value))


def test_a_family_no_model_serves_names_the_families(make_cfg):
    from coda_exp.model_fit import family_problem

    cfg = make_cfg("task=snli", "model=decompatt", "task.family=pair_clasification")
    problem = family_problem(cfg, named=True)
    assert "no model serves task.family=pair_clasification (set in configs/task/snli.yaml)" in problem
    assert "pair_classification, ranking, seq2seq" in problem
    with pytest.raises(ConfigError) as err:  # the task's own module says which family it is
        check_compatible(cfg)
    assert ("task.module._target_ = coda_exp.tasks.PairClassificationTask serves task.family pair_classification, "
            "but the task's family is pair_clasification (task.family, configs/task/snli.yaml)") in str(err.value)
