"""What every figure the project writes shares (``scripts/plot_learning_curves.py``, ``plot_attconv.py``,
``plot_coda.py``): human axis names for metric keys, rounded numbers in labels, distinct styles for many series and
a legend outside the axes.

- :func:`axis_label`: ``val/acc_seq`` -> "validation sequence accuracy (%)", ``val/loss`` -> "validation loss"; the
  one mapping from metric keys (:data:`SPLITS`, :data:`METRICS`); a key it does not know is shown as it is.
- :func:`format_number` / :func:`round_numbers`: numbers in labels to 3 significant digits
  (``beta=0.1767766952966369`` -> ``beta=0.177``); a number already that short is left as written.
- :func:`series_styles`: one colour per series from a qualitative colormap (``tab10``) and, past its ten colours,
  a line style and marker per round of colours, so no two series look alike.
- :func:`legend_outside`: the legend below the axes (``fig.legend(loc="outside lower center")`` of a
  constrained-layout figure, which makes room for it), the figure taller by one line per legend row: it never
  covers a curve however many series there are.
- :func:`clamp_percent_axis`: a percent axis stays within 0–100 %, where Matplotlib's margins ran past it for
  saturated values (96 %–104 % for runs at 100 %, −0.04 %–0.04 % at 0 %).
- :func:`scale_title`: a figure of fixture-scale runs says in its title that it is a smoke test.
- :func:`default_figure`: where a figure of runs goes without ``--out``: ``figures/`` of the records' results
  folder (``results/figures`` for ``results/runs``, ``outputs/fixture_results/figures`` for fixture runs), never
  beside the committed figures for fixture records.
Matplotlib is imported only inside the functions that draw.
"""

from __future__ import annotations

import re
from pathlib import Path

from coda_exp.fingerprint import is_fixture_scale

SPLITS = {"train": "training", "val": "validation", "test": "test"}
METRICS = {
    "loss": "loss", "train_loss": "training loss",
    "acc": "accuracy", "acc_seq": "sequence accuracy", "acc_exec": "execution accuracy",
    "acc_seq_tf": "sequence accuracy (teacher-forced)", "acc_tok_tf": "token accuracy (teacher-forced)",
    "acc_tok": "token accuracy",
    "bleu": "BLEU", "bleu_tok": "tokenized BLEU", "bleu_t2t": "BLEU (t2t-bleu)", "map": "MAP", "mrr": "MRR",
    "em": "exact match",
    "em_unigram": "exact match (one-word answers)", "f1": "F1", "fever_score": "FEVER score",
}
_RECALL = re.compile(r"r(\d+)@(\d+)")
_NUMBER = re.compile(r"(?<![\w.])-?\d+\.\d+(?:[eE][-+]?\d+)?(?![\w.])")
COLOURS = "tab10"  # a qualitative colormap: ten distinct colours
LINESTYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D")
LEGEND_LINE_IN = 0.19  # figure height per legend row, inches (fontsize 8)


def _metric_name(name: str) -> str:
    if name in METRICS:
        return METRICS[name]
    m = _RECALL.fullmatch(name)
    if m:
        return f"R{m.group(1)}@{m.group(2)}"
    base, _, test_set = name.rpartition("_")  # acc_matched: a named test set
    if base and (base in METRICS or _RECALL.fullmatch(base)):
        return f"{_metric_name(base)} ({test_set})"
    return name


def axis_label(metric: str, percent: bool = False) -> str:
    """A human name for a metric key (``val/acc_seq`` -> "validation sequence accuracy"), "(%)" appended when
    the values are shown in percent; an unknown key as it is."""
    split, _, name = metric.rpartition("/")
    words = _metric_name(name)
    if split:
        words = f"{SPLITS.get(split, split)} {words}"
    return words + (" (%)" if percent else "")


def format_number(x: float, digits: int = 3) -> str:
    """``x`` to ``digits`` significant digits, without an exponent where a plain number is as short:
    0.1767766952966369 -> "0.177", 2.0 -> "2", 1234.5 -> "1230", 1e-05 -> "1e-05"."""
    if x == 0:
        return "0"
    text = f"{x:.{digits}g}"
    if "e" in text and 1e-4 <= abs(x) < 10 ** (digits + 3):
        text = f"{float(text):f}".rstrip("0").rstrip(".")
    return text


def _significant(text: str) -> int:
    mantissa = text.lstrip("-").split("e")[0].split("E")[0].replace(".", "").lstrip("0")
    return len(mantissa)


def round_numbers(text: str, digits: int = 3) -> str:
    """Every decimal number in ``text`` with more than ``digits`` significant digits, rounded
    (:func:`format_number`): ``coda_transformer[beta=0.1767766952966369]`` -> ``coda_transformer[beta=0.177]``."""
    return _NUMBER.sub(lambda m: format_number(float(m.group()), digits) if _significant(m.group()) > digits
                       else m.group(), text)


def display_labels(labels: list[str], digits: int = 3) -> dict[str, str]:
    """{label: its rounded form}; labels that would round to the same text keep all their digits, so two series
    never share a legend entry."""
    rounded = {label: round_numbers(label, digits) for label in labels}
    counts: dict[str, int] = {}
    for text in rounded.values():
        counts[text] = counts.get(text, 0) + 1
    return {label: text if counts[text] == 1 else label for label, text in rounded.items()}


def series_styles(n: int) -> list[dict]:
    """``n`` distinct line styles (matplotlib keyword arguments): ``tab10`` colours, then the next line style and
    marker for each further round of ten."""
    import matplotlib

    colours = matplotlib.colormaps[COLOURS].colors
    return [{"color": colours[i % len(colours)], "linestyle": LINESTYLES[i // len(colours) % len(LINESTYLES)],
             "marker": MARKERS[i // len(colours) % len(MARKERS)]} for i in range(n)]


def legend_outside(fig, ax, title: str | None = None, fontsize: float = 8):
    """The legend of ``ax``'s labelled lines below the axes of ``fig`` (a figure made with
    ``layout="constrained"``), in two columns when the labels are short; the figure grows by one line per legend
    row. Returns the legend (None without labelled lines)."""
    handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return None
    ncols = 2 if len(labels) > 3 and max(map(len, labels)) <= 45 else 1
    rows = -(-len(labels) // ncols) + (1 if title else 0)
    fig.set_figheight(fig.get_figheight() + rows * LEGEND_LINE_IN * fontsize / 8)
    return fig.legend(handles, labels, loc="outside lower center", ncols=ncols, fontsize=fontsize, title=title,
                      title_fontsize=fontsize, frameon=False)


def default_figure(name: str, records_folder: Path | None = None, scales: list | None = None,
                   results_dir: Path | None = None) -> Path:
    """``figures/<name>`` of the records' results folder: the folder holding ``records_folder`` where that is a
    ``runs/`` (else that folder itself), else ``results_dir`` (a run's ``paths.results_dir``), else ``results/``
    under the project root. Records all of a fixture scale that lie in the tracked ``results/`` go to
    ``outputs/fixture_results/figures`` instead: a smoke figure never lands beside (or over) the committed ones."""
    from coda_exp.environment import root_dir

    root = root_dir()
    home = results_dir or root / "results"
    if records_folder is not None:
        home = records_folder.parent if records_folder.name == "runs" else records_folder
    if scales and all(is_fixture_scale(s) for s in scales) and Path(home).resolve() == (root / "results").resolve():
        home = root / "outputs" / "fixture_results"
    return Path(home) / "figures" / name


def scale_title(title: str, scales, fixture: bool | None = None) -> str:
    """``title`` with a second line saying the runs are a smoke test where they read the tiny fixture data (no
    result to compare with a paper's): ``fixture``, the runs' own word (``coda_exp.experiments.fixture_data``, as
    the tables decide), else every scale of ``scales`` (one, or a list) is a fixture scale."""
    scales = sorted({str(s) for s in scales}) if isinstance(scales, (list, tuple, set)) else [str(scales)]
    smoke = fixture if fixture is not None else bool(scales) and all(is_fixture_scale(s) for s in scales)
    if not smoke:
        return title
    return f"{title}\nsmoke test: {', '.join(scales)} runs on the tiny fixture data, not a result"


def clamp_percent_axis(ax, min_span: float = 1.0) -> tuple[float, float]:
    """The y limits of a percent axis (values in 0–100) clamped to 0–100, and at least ``min_span`` points apart
    within it (a flat series at 0 % gets 0–1 %, not −0.04–0.04 %); the lines are drawn unclipped, so a point on
    0 % or 100 % shows whole on the frame. Returns the limits."""
    lo, hi = ax.get_ylim()
    lo, hi = max(lo, 0.0), min(hi, 100.0)
    if hi - lo < min_span:
        lo = max(0.0, min(lo, hi - min_span))
        hi = min(100.0, max(hi, lo + min_span))
    ax.set_ylim(lo, hi)
    for line in ax.get_lines():  # every point lies within the limits: nothing is drawn past the frame's width
        line.set_clip_on(False)
    return lo, hi
