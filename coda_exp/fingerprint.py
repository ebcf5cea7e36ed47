"""A run's configuration fingerprint: which of its settings change what a table cell means.

Every run record carries ``fingerprint`` (12 hex digits), ``fingerprint_overrides`` (the overrides it hashes) and
``fingerprint_rule`` (:data:`FINGERPRINT_RULE`, the version of this rule it was computed under). The settings are
the run's experiment's own (``experiment=attconv_table_7``: what ``configs/experiment/attconv_table_7.yaml`` sets
outside ``hydra:`` and its sweep parameters, its ``override /optimizer: adagrad`` as ``optimizer=adagrad``;
:mod:`coda_exp.experiments`), then the Hydra task overrides of its command line, which replace an experiment's
setting of the same key (:func:`with_settings`). A setting counts the same from either place. The rule: of these,
drop

- the grid axes, which the record states in its own fields and tables select on: ``seed``; the group choices
  ``task=``, ``experiment=``, ``scale=`` and ``scale_name`` (the record's ``scale``; a key under them, such as
  ``task.cpu_scheduler.peak_lr``, is a configuration change like any other); the model's name (``model``); the
  attention options that an experiment of ``configs/experiment/`` sweeps (:data:`SWEPT_ATTENTION`: Table 8's
  centring, ``model.attention.{center_e,center_n,gate_scale}`` and ``model.scoring.{center_e,center_n}``; Table 9's
  ``model.scoring.{e_fn,n_fn}``; the AttConv + CoDA rows' ``model/attention`` choice), each recorded in the
  record's ``attention`` and pinned by every table row a run of that attention can reach, so a cell never pools
  across them (``tests/results/test_fingerprint.py`` checks both); every other attention option
  (``model.scoring.beta=0``, ``model.attention.hidden=50``, ``model/scoring=...``) is another configuration, as
  ``model.hidden_size`` is; the other sweep parameters of ``configs/experiment/*.yaml`` that are not model keys
  (:data:`GRID_KEYS`: ``centering``, with ``centering_rows``, the table Table 8's experiments look its options up
  in), and AttConv Table 9's two axes, ``model.contexts`` (wise | conc) and ``data.evidence`` (retrieved | gold):
  each is one of the paper table's own rows or columns, each is recorded in the record (``hparams.contexts``,
  ``data.evidence``, the FEVER data module's stats) and every Table 9 cell matches on both, so a cell never pools
  across them; outside FEVER neither changes what a run computes (``contexts`` only acts on several evidence
  sentences). Every other ``model.*`` override (``model.hidden_size=300``, ``model.dropout=0``) is a different
  configuration and counts;
- the budget keys (:data:`BUDGET_KEYS`: steps, epochs, data sizes, how often it validates), already part of the
  record's ``scale`` label ("fixture (task.epochs=2)"), which tables keep apart by scale; a size the data read
  departs from joins that label the same way (:func:`amend_scale`: MLU files of 100K training pairs at ``scale=cpu``
  say ``cpu (data.num_train=100000)``), so it leaves the fingerprint as it is;
- keys that change where or how a run is stored, logged or placed, not what it computes (:data:`OUTPUT_KEYS`:
  ``paths.*``, ``hydra.*``, ``logger``, ``ckpt_path``, ``data.dir``, ``data.embeddings.path``, ``trainer.strategy``,
  ...) or only measure it
  (the ``callbacks`` group choice, e.g. ``callbacks=gate_stats``, and ``callbacks.gate_stats.*``: a callbacks option
  must not change what a run computes; ``callbacks.early_stopping.patience`` and the like still count);

and hash what remains (``optimizer.lr=0.001``, ``data.batch_size=32``, ``preset=...``, ``task.patience=5`` ...),
sorted, with numbers normalised (``1e-3`` = ``0.001``).

Processes. A run of N > 1 processes side by side (DDP: ``trainer.devices`` x ``trainer.num_nodes``, however given:
``trainer.devices=4``, ``trainer=ddp``'s every visible GPU) takes N batches per optimizer step, N times the
effective batch and 1/N of the steps: it adds ``world_size=N`` (:data:`PARALLEL_KEYS`; the run's resolved count,
``coda_exp.run_record.world_size``; a record without one: what its overrides say, :func:`world_size_of`). One process
adds nothing, so every one-process run keeps the fingerprint it had (no new rule: records of rule 2 keep theirs; one
of several processes written before this entry read as the grid's). ``trainer.accumulate_grad_batches`` counts as
any setting does.

Pretrained word vectors count by what they are, not where they lie: the path is a location (above), and the
vectors' identity (:func:`vectors_name` of the file, and its dimension where known: the run record's ``vectors``,
``coda_exp.data.common.embeddings.vectors_identity``) enters as ``data.embeddings=<name>:<dim>d``, unless they are
the papers' own (:data:`PAPER_VECTORS`: GloVe 840B 300-d, CoDA and DecaProp; the 300-d GoogleNews word2vec,
AttConv), which keep the grid fingerprint: ``data.embeddings.path=/data/glove.840B.300d.txt`` (the README's WikiQA
example) fills the paper's cells from any folder, other vectors are another configuration. A record without an
identity (written before it was recorded) takes it from its ``data.embeddings.path`` override's file name.

Defaults typed out. An override that sets what the configuration has without it (``task=snli model=decompatt
optimizer.lr=0.0003``: Adam's 3e-4 is that lr anyway; ``optimizer=adam``, the default option) changes nothing, so it
does not enter the fingerprint: as the run starts, each override the rule would hash is compared with the config Hydra
composes without it (its value resolved, of the same type: ``3e-4`` = ``0.0003``, ``1`` is not ``1.0``; a group's
option), and those that leave it unchanged, together too, are left out (``coda_exp.default_overrides``). The record
names them in ``fingerprint_defaults`` (the overrides as typed; ``[]`` for none) and the run's log says so at its
start; a record's fingerprint derived again (:func:`record_overrides`) leaves them out too, so it is the one the run
recorded. Where a default cannot be told (the config does not compose there, a value does not resolve), the
override counts, as before. Only the command line's overrides are judged, not an experiment's own settings (a
table's grid is what its files set, read without composing: ``coda_exp.experiments.table_grid``); an override that
repeats an experiment's setting is a default, and the setting counts in its place. This is no new rule
(:data:`FINGERPRINT_RULE` stays 2): what a run's configuration is has not changed, only how its overrides are read,
and a record of rule 2 is read as recorded (a new rule would derive every record of rule 2 again, and an evaluation
of one of their checkpoints would take :func:`coda_exp.experiments.earlier_defaults`). A record without
``fingerprint_defaults`` (written before it) keeps its fingerprint, a typed-out default included: it stays listed
apart from the runs without it, as it was.

A run without such settings has :data:`GRID_FINGERPRINT`. A table's grid is the configuration its experiments set
(``coda_exp.experiments.grid_fingerprint``: ``GRID_FINGERPRINT`` where they set nothing beyond the axes above, as all
but the AttConv SciTail and SNLI tables), varied only along those axes. A table cell pools only runs with that
fingerprint; the others are listed apart in the table's notes (``coda_exp.tables``).

Older records. A record written under an earlier rule (no ``fingerprint_rule``, or another) has its fingerprint
derived again from its recorded ``overrides``, ``vectors`` and today's file of its experiment under today's rule
(``coda_exp.experiments.record_configuration``): rule 1 hashed only the command line and left every attention
option out, so a run with ``model.scoring.beta=0``, or a plain ``task=snli model=attconv_light`` (Adam, batch 16),
carried the grid's fingerprint and was pooled; read today each is another configuration (``coda_exp.tables`` warns,
naming the records whose fingerprint reads otherwise than they recorded). A record written before fingerprints
existed is derived the same way.
"""

from __future__ import annotations

import hashlib
import json

# Overrides that change a run's training or evaluation budget: a run with any of them is not at its scale group's
# setting, so its record's scale says so (``cpu (task.max_steps=10000)``) and tables never pool it with runs at the
# plain scale. An explicit ``scale_name=...`` override is taken as the user's own label.
BUDGET_KEYS = ("task.max_steps", "task.epochs", "task.max_epochs", "trainer.max_steps", "trainer.max_epochs",
               "task.val_check_interval", "task.check_val_every_n_epoch", "trainer.val_check_interval",
               "trainer.check_val_every_n_epoch", "data.max_train_examples", "data.max_eval_examples",
               "data.num_train", "data.num_validation", "data.num_test", "debug", "trainer.limit_train_batches",
               "trainer.limit_val_batches", "trainer.limit_test_batches")
#: the attention options some ``configs/experiment/*.yaml`` sweeps (Table 8's centring, Table 9's f_E x f_N, the
#: AttConv + CoDA rows' attention): grid axes, which every table row a run of that attention can reach pins; any other
#: ``model.attention.*`` / ``model.scoring.*`` override (``beta``, ``hidden``, ``num_layers``) is a configuration change
SWEPT_ATTENTION = ("model/attention", "model.attention.center_e", "model.attention.center_n",
                   "model.attention.gate_scale", "model.scoring.center_e", "model.scoring.center_n",
                   "model.scoring.e_fn", "model.scoring.n_fn")
#: grid axes: recorded in the record's own fields, selected by the tables (a key ``x`` also covers ``x.*``, ``x/*``)
GRID_KEYS = ("seed", "centering", "centering_rows", *SWEPT_ATTENTION, "model.contexts", "data.evidence")
#: the version of the rule a record's ``fingerprint`` was computed under: 1 (no ``fingerprint_rule``) left every
#: attention option out and hashed only the command line, not the experiment's settings; a record of another rule is
#: derived again (``coda_exp.experiments.record_configuration``); overrides left out as the configuration's defaults
#: (``fingerprint_defaults``) are no new rule: a record says which ones, and is read by them (module docstring)
FINGERPRINT_RULE = 2
#: grid axes matched exactly: the group choices ``task``, ``experiment``, ``scale`` (``task.cpu_scheduler.peak_lr``
#: or ``task.gradient_clip_val`` are configuration changes) and ``model`` = the model's name (``model.hidden_size``
#: is a configuration change)
GRID_EXACT = ("task", "experiment", "scale", "scale_name", "model", "model.name")
#: where and how a run is stored, logged, placed or measured (the ``trainer`` group itself: cpu, gpu, ddp; the
#: ``callbacks`` group itself: default, gate_stats); a key ``x`` also covers ``x.*`` and ``x/*`` except for ``trainer``
#: and ``callbacks``, whose other keys (precision, gradient clipping, early stopping) do count
OUTPUT_KEYS = ("paths", "hydra", "logger", "callbacks.progress_bar", "callbacks.lr_monitor", "callbacks.gate_stats",
               "ckpt_path", "resume", "threads", "verbose", "imports",
               "save_record", "save_predictions", "data.dir", "data.embeddings.path", "data.cache_dir",
               "data.num_workers",
               "data_dir_by_scale", "local", "trainer.accelerator",
               "trainer.strategy", "trainer.enable_progress_bar", "trainer.enable_model_summary",
               "trainer.log_every_n_steps", "trainer.default_root_dir", "trainer.sync_batchnorm")

#: how many processes train side by side (DDP): ``trainer.devices`` x ``trainer.num_nodes``, each its own batches, so
#: one optimizer step sees that many batches; it enters the fingerprint as ``world_size=N`` where N > 1 (never at 1,
#: so a one-process run keeps its fingerprint), whatever gave it (``trainer=ddp``'s ``devices: -1``, an override)
PARALLEL_KEYS = ("trainer.devices", "trainer.num_nodes")
WORLD_SIZE = "world_size"


#: config groups whose choice alone changes no result (their keys below are judged one by one)
GROUP_CHOICES = ("trainer", "callbacks")
#: the papers' word vectors (name -> dimension): runs with them keep the grid fingerprint, from any path
PAPER_VECTORS = {"glove.840B.300d": 300, "GoogleNews-vectors-negative300": 300}
VECTORS_PATH = "data.embeddings.path"
_VECTOR_SUFFIXES = (".gz", ".zip", ".bz2", ".xz", ".txt", ".vec", ".vectors", ".w2v")


def vectors_name(path: str) -> str:
    """A vectors file's name without its extensions: ``/data/glove.840B.300d.txt`` -> ``glove.840B.300d``."""
    name = str(path).replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
    while True:
        stem = next((name[: -len(s)] for s in _VECTOR_SUFFIXES if name.lower().endswith(s) and len(name) > len(s)),
                    None)
        if stem is None:
            return name
        name = stem


def vectors_override(vectors: dict | None) -> str | None:
    """The fingerprint's entry for a run's vectors (``{"name", "dim"}``): None without vectors or with the papers'."""
    if not vectors or not vectors.get("name"):
        return None
    name, dim = str(vectors["name"]), vectors.get("dim")
    if name in PAPER_VECTORS and dim in (None, PAPER_VECTORS[name]):
        return None
    return f"data.embeddings={name}" + (f":{int(dim)}d" if dim is not None else "")


def _vectors_of(overrides: list[str]) -> dict | None:
    """The identity an older record's ``data.embeddings.path`` override gives (the file name only)."""
    values = [o.split("=", 1)[1].strip() for o in overrides if "=" in o and override_key(o) == VECTORS_PATH]
    value = values[-1] if values else ""
    return None if value.strip("'\"").lower() in ("", "null", "none") else {"name": vectors_name(value)}


def override_key(override: str) -> str:
    """``+data.num_test=50`` -> ``data.num_test``; ``model/attention=coda`` -> ``model/attention``."""
    return override.lstrip("+~").split("=", 1)[0].strip()


def _covered(key: str, prefixes: tuple[str, ...]) -> bool:
    return any(key == p or key.startswith((p + ".", p + "/")) for p in prefixes)


def normalise(override: str) -> str:
    """``+optimizer.lr=1e-3`` -> ``optimizer.lr=0.001``: the ``+`` dropped, a number as Python writes it."""
    key, sep, value = override.lstrip("+").partition("=")
    value = value.strip()
    for kind in (int, float):
        try:
            value = repr(kind(value))
            break
        except ValueError:
            continue
    return f"{key.strip()}{sep}{value}"


#: Lightning's short spellings of ``trainer.precision`` and the name each stands for (what the Trainer runs)
PRECISION_ALIASES = {"32": "32-true", "16": "16-mixed", "bf16": "bf16-mixed", "64": "64-true"}
#: the precision of every ``configs/trainer`` option (and Lightning's own default)
DEFAULT_PRECISION = "32-true"
PRECISION_KEY = "trainer.precision"


def same_spelling(overrides: list[str]) -> list[str]:
    """The overrides with ``trainer.precision`` as Lightning names what it runs (``bf16`` -> ``bf16-mixed``, ``32`` ->
    ``32-true``) and left out where that is the default (``32-true``): runs computed bit for bit alike have one
    configuration, whatever the spelling."""
    kept = []
    for o in overrides:
        if override_key(o) == PRECISION_KEY and not o.startswith("~"):
            key, _, value = o.partition("=")
            value = value.strip().strip("'\"")
            value = PRECISION_ALIASES.get(value, value)
            if value == DEFAULT_PRECISION:
                continue
            o = f"{key}={value}"
        kept.append(o)
    return kept


def world_size_of(overrides: list[str]) -> int:
    """The world size the ``trainer.devices`` and ``trainer.num_nodes`` overrides give (``trainer.devices=4``: 4; a
    list of devices: its length); 1 without them or where they leave it to the machine (``-1``, ``auto``)."""
    size = 1
    for key in PARALLEL_KEYS:
        values = [o.split("=", 1)[1].strip().strip("'\"") for o in overrides if "=" in o and override_key(o) == key]
        value = values[-1] if values else "1"
        if value.startswith("["):
            size *= max(len([v for v in value.strip("[]").split(",") if v.strip()]), 1)
        elif value.isdigit() and int(value) > 0:
            size *= int(value)
    return size


def hashed(override: str) -> bool:
    """Whether the rule hashes an override's key (module docstring): not a grid axis, budget, output, processes or
    group-choice-only key (``optimizer.lr=0.001``, ``optimizer=adagrad``, ``model.hidden_size=300`` are)."""
    key = override_key(override)
    return (key not in BUDGET_KEYS + GRID_EXACT + GROUP_CHOICES
            and not _covered(key, GRID_KEYS + OUTPUT_KEYS + PARALLEL_KEYS))


def configuration_overrides(overrides: list[str], vectors: dict | None = None,
                            world_size: int | None = None) -> list[str]:
    """The overrides that define a run's configuration beyond the grid axes (see the module docstring), sorted, with
    the vectors' entry (:func:`vectors_override` of ``vectors``, else of the path override's file name) and the
    ``world_size=N`` entry where ``world_size`` (else :func:`world_size_of` the overrides) is above 1."""
    kept = [normalise(o) for o in same_spelling(overrides) if hashed(o)]
    entry = vectors_override(vectors if vectors is not None else _vectors_of(overrides))
    world = world_size_of(overrides) if world_size is None else int(world_size)
    return sorted(kept + ([entry] if entry else []) + ([f"{WORLD_SIZE}={world}"] if world > 1 else []))


def digest(configuration: list[str]) -> str:
    """12 hex digits of the SHA-256 of a run's configuration overrides (:func:`configuration_overrides`)."""
    return hashlib.sha256(json.dumps(list(configuration)).encode("utf-8")).hexdigest()[:12]


def fingerprint(overrides: list[str], vectors: dict | None = None, world_size: int | None = None) -> str:
    """12 hex digits of the SHA-256 of :func:`configuration_overrides`."""
    return digest(configuration_overrides(overrides, vectors, world_size))


def record_overrides(record: dict) -> list[str]:
    """The overrides a record's configuration is derived from: its ``overrides``; an evaluation's (``mode: eval``)
    follow its trained run's (``trained_overrides``); less those it recorded as its configuration's defaults
    (``fingerprint_defaults``, :func:`without_defaults`; a record without the field: none)."""
    own = [str(o) for o in record.get("overrides") or []]
    overrides = [str(o) for o in record.get("trained_overrides") or []] + own if record.get("mode") == "eval" else own
    defaults = record.get("fingerprint_defaults")
    return without_defaults(overrides, defaults if isinstance(defaults, list) else None)


def without_defaults(overrides: list[str], defaults: list[str] | None) -> list[str]:
    """``overrides`` less ``defaults``, the ones that set what the configuration has without them
    (``coda_exp.default_overrides``): neither enters the fingerprint (module docstring, "Defaults typed out")."""
    dropped = {str(d) for d in defaults or []}
    return [o for o in overrides if o not in dropped] if dropped else list(overrides)


def with_settings(settings: list[str], overrides: list[str]) -> list[str]:
    """An experiment's settings (as overrides: ``coda_exp.experiments.experiment_settings``) followed by a run's own
    overrides; a key the run sets replaces the experiment's (``optimizer=adam`` after the experiment's
    ``optimizer=adagrad``)."""
    own = {override_key(o) for o in overrides}
    return [s for s in settings if override_key(s) not in own] + list(overrides)


GRID_FINGERPRINT = fingerprint([])


def is_fixture_scale(scale) -> bool:
    """Whether a record's ``scale`` label is a smoke test's (``fixture``, ``fixture (task.epochs=1)``)."""
    return str(scale or "").split(" ", 1)[0] == "fixture"


def scale_label(scale_name: str, overrides: list[str]) -> str:
    """The record's ``scale``: the scale group's name, plus every budget-changing override (``BUDGET_KEYS``)."""
    parsed = [(override_key(o), o.lstrip("+~")) for o in overrides]
    if any(key == "scale_name" for key, _ in parsed):
        return str(scale_name)
    changed = [text for key, text in parsed if key in BUDGET_KEYS]
    return f"{scale_name} ({', '.join(changed)})" if changed else str(scale_name)


def amend_scale(label: str, notes: list[str]) -> str:
    """A ``scale`` label with what the data read says (``coda_exp.data.common.base.DataModule.scale_notes``:
    ``data.num_train=100000`` for MLU files of 100K training pairs), each replacing an entry of its key:
    ``cpu`` -> ``cpu (data.num_train=100000)``; ``paper (data.num_test=50)`` + ``data.num_test=20`` ->
    ``paper (data.num_test=20)``."""
    if not notes:
        return label
    name, sep, inside = label.partition(" (")
    entries = [e for e in inside[:-1].split(", ") if e] if sep and inside.endswith(")") else []
    if sep and not entries:  # not a label this module wrote: keep it whole
        name, entries = label, []
    keys = {override_key(n) for n in notes}
    entries = [e for e in entries if override_key(e) not in keys] + list(notes)
    return f"{name} ({', '.join(entries)})"


def configuration_items(overrides: list[str], experiment: str | None = None) -> list[str]:
    """The overrides of a command line that change a run's configuration, as typed (``model/attention=coda``,
    ``trainer.precision=bf16-mixed``), after its ``experiment=``: every override but the seed, the task, model and
    scale choices, the budget keys (the ``scale`` label says them: :func:`scale_label`) and where or how a run is stored
    or logged (:data:`OUTPUT_KEYS`). Unlike :func:`configuration_overrides`, the grid's attention axes
    (``model/attention=coda``, ``model.scoring.center_e=true``) and the processes (``trainer.devices=2``) are kept:
    two runs that differ in them differ, though a table may pool both. Empty for a run of its scale's plain
    configuration. :func:`configuration_label` joins them; ``coda_exp.run_tag`` names run folders by them."""
    shown = [o.lstrip("+") for o in same_spelling(overrides)
             if override_key(o) not in BUDGET_KEYS + GRID_EXACT + GROUP_CHOICES
             and not _covered(override_key(o), ("seed", *OUTPUT_KEYS))]
    return ([f"experiment={experiment}"] if experiment else []) + shown


def configuration_label(overrides: list[str], experiment: str | None = None) -> str:
    """:func:`configuration_items` compact, on one line: ``model/attention=coda trainer.precision=bf16-mixed``."""
    return " ".join(configuration_items(overrides, experiment))


def run_label(record: dict) -> str:
    """``task × model`` and its :func:`configuration_label` in brackets: ``scitail × attconv_light
    [model/attention=coda]`` (an evaluation: its trained run's overrides)."""
    overrides = record.get("trained_overrides") if record.get("mode") == "eval" else record.get("overrides")
    config = configuration_label([str(o) for o in overrides or []], record.get("experiment"))
    return f"{record['task']} × {record['model']}" + (f" [{config}]" if config else "")
