"""coda_exp/figures.py: human axis names, rounded numbers in labels, distinct styles, the legend outside the axes."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pytest

from coda_exp.figures import (
    axis_label,
    clamp_percent_axis,
    display_labels,
    format_number,
    legend_outside,
    round_numbers,
    series_styles,
)


@pytest.mark.parametrize("metric, percent, label", [
    ("val/acc_seq", True, "validation sequence accuracy (%)"),
    ("val/loss", False, "validation loss"),
    ("val/acc", True, "validation accuracy (%)"),
    ("test/acc_matched", True, "test accuracy (matched) (%)"),
    ("test/r10@1", False, "test R10@1"),
    ("val/bleu_tok", False, "validation tokenized BLEU"),
    ("test/bleu_t2t", False, "test BLEU (t2t-bleu)"),
    ("train_loss", False, "training loss"),
    ("val/something_new", False, "validation something_new"),  # unknown: shown as it is
])
def test_axis_label_names_metric_keys_in_words(metric, percent, label):
    assert axis_label(metric, percent) == label


@pytest.mark.parametrize("x, text", [
    (0.1767766952966369, "0.177"), (2.0, "2"), (0.0, "0"), (1234.5, "1230"), (1e-05, "1e-05"), (-0.0015, "-0.0015"),
    (0.000123456, "0.000123"), (41.65000021, "41.7"),
])
def test_format_number(x, text):
    assert format_number(x) == text


def test_round_numbers_only_touches_long_numbers():
    assert round_numbers("coda_transformer_beta_dk[beta=0.1767766952966369]") == "coda_transformer_beta_dk[beta=0.177]"
    assert round_numbers("{task.cpu_scheduler.peak_lr=0.0015, optimizer.betas=[0.9,0.98]}") == (
        "{task.cpu_scheduler.peak_lr=0.0015, optimizer.betas=[0.9,0.98]}")
    assert round_numbers("torch 2.13.0, seed 1, x=-3.14159e-05") == "torch 2.13.0, seed 1, x=-3.14e-05"


def test_display_labels_never_merge_two_series():
    labels = ["m[beta=0.1767766952966369]", "m[beta=0.17677]", "m[beta=0.5]"]
    assert display_labels(labels) == {labels[0]: labels[0], labels[1]: labels[1], "m[beta=0.5]": "m[beta=0.5]"}
    assert display_labels(labels[:1]) == {labels[0]: "m[beta=0.177]"}


def test_series_styles_are_distinct_for_many_series():
    styles = series_styles(40)
    assert len({(s["color"], s["linestyle"], s["marker"]) for s in styles}) == 40
    assert len({s["color"] for s in styles[:10]}) == 10 and {s["linestyle"] for s in styles[:10]} == {"-"}
    assert styles[10]["color"] == styles[0]["color"] and styles[10]["linestyle"] != styles[0]["linestyle"]


@pytest.mark.parametrize("series, label", [(19, "a long label of a run @ cpu (task.max_steps=5000) (seed {i})"),
                                           (3, "s{i}")])
def test_the_legend_is_outside_the_axes(series, label):
    fig, ax = plt.subplots(figsize=(8, 4.5), layout="constrained")
    for i, style in enumerate(series_styles(series)):
        ax.plot(range(10), [i * x for x in range(10)], **style, label=label.format(i=i))
    height = fig.get_figheight()
    legend = legend_outside(fig, ax, title="thin lines: single seeds")
    fig.canvas.draw()
    assert len(legend.get_texts()) == series and fig.get_figheight() > height
    box, axes = legend.get_window_extent(), ax.get_window_extent()
    assert not box.overlaps(axes) and box.y1 <= axes.y0  # below the axes, covering nothing
    figure_box = fig.bbox
    assert box.x0 >= figure_box.x0 and box.x1 <= figure_box.x1 and box.y0 >= figure_box.y0  # and inside the image
    plt.close(fig)
    fig, ax = plt.subplots()
    assert legend_outside(fig, ax) is None  # nothing labelled: no legend
    plt.close(fig)


@pytest.mark.parametrize("values, limits", [([100.0] * 5, (94.5, 100.0)), ([0.0] * 5, (0.0, 1.0)),
                                            ([0.0, 50.0, 100.0], (0.0, 100.0)), ([40.0, 60.0], (39.0, 61.0))])
def test_a_percent_axis_stays_within_0_and_100(values, limits):
    """Saturated runs used to get an axis from 94.5 % to 105.5 % (or -0.055 % to 0.055 %): percentages past the
    range."""
    fig, ax = plt.subplots()
    ax.plot(range(len(values)), values, marker="o")
    lo, hi = clamp_percent_axis(ax)
    assert (lo, hi) == pytest.approx(limits) and ax.get_ylim() == pytest.approx(limits)
    assert 0.0 <= lo and hi <= 100.0 and hi - lo >= 1.0 and not ax.get_lines()[0].get_clip_on()
    plt.close(fig)
