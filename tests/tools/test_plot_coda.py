"""coda-exp plot-coda (coda_exp/tools/plot_coda.py): Figure 2 panels are f_E(E), the unscaled f_N(N) and M, titled
after the model's options."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import torch

from coda_exp.attention import CoDACrossAttention, SoftmaxCrossAttention
from coda_exp.models import DecompAtt

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def plot_coda():
    from coda_exp.tools import plot_coda

    return plot_coda


def _batches(n=2):
    gen = torch.Generator().manual_seed(0)
    for _ in range(n):
        a, b = torch.randint(1, 30, (3, 6), generator=gen), torch.randint(1, 30, (3, 4), generator=gen)
        a[0, 4:], b[1, 2:] = 0, 0
        yield {"a_ids": a, "a_mask": a != 0, "b_ids": b, "b_mask": b != 0}


def _model(**options):
    torch.manual_seed(0)
    attention = functools.partial(CoDACrossAttention, hidden=8, dropout=0.0, **options)
    return DecompAtt(vocab_size=30, num_classes=3, attention=attention, hidden_size=8, embedding_dim=8,
                     dropout=0.0).eval()


@pytest.mark.parametrize("options,titles", [
    ({}, ["f_E(E) = tanh(E)", "f_N(N) = sigmoid(N)", "M = tanh(E) · 2·sigmoid(N)"]),
    ({"e_fn": "sigmoid", "n_fn": "arctan", "gate_scale": 1.0, "center_n": True},
     ["f_E(E) = sigmoid(E)", "f_N(N) = arctan(N′)", "M = sigmoid(E) · arctan(N′)"]),
    ({"gate_scale": 0.1767766952966369}, ["f_E(E) = tanh(E)", "f_N(N) = sigmoid(N)", "M = tanh(E) · 0.177·sigmoid(N)"]),
])
def test_panels_follow_the_model_and_f_n_is_unscaled(plot_coda, tmp_path, options, titles):
    net = _model(**options)
    found = plot_coda.coda_options(net)
    assert found is net.attention.options
    values = plot_coda.collect(net, _batches(), batches=2)
    assert set(values) == {"f_E", "f_N", "weights"}
    n_pairs = sum(int((bt["a_mask"].sum(1) * bt["b_mask"].sum(1)).sum()) for bt in _batches())
    assert all(len(v) == n_pairs for v in values.values())  # the real pairs of both batches only
    lo, hi = {"sigmoid": (0.0, 1.0), "arctan": (-torch.pi / 2, torch.pi / 2)}[found.n_fn]
    assert lo <= values["f_N"].min() and values["f_N"].max() <= hi  # f_N(N) itself, not gate_scale * f_N(N)
    first = plot_coda.collect(net, _batches(1), batches=1)
    maps = net.attention_maps(**next(_batches(1)))
    gate = maps.values("gate").detach().numpy()
    assert abs(first["f_N"] * found.gate - gate).max() < 1e-6  # the panel shows f_N = gate / gate_scale
    fig = plot_coda.figure(values, "test", found)
    assert [ax.get_title() for ax in fig.axes] == titles
    assert [ax.get_xlabel() for ax in fig.axes] == [f"value of {t.split(' = ', 1)[1]}" for t in titles]
    out = plot_coda.plot(values, tmp_path / "fig.png", "test", found)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_model_without_coda_is_refused(plot_coda):
    torch.manual_seed(0)
    net = DecompAtt(vocab_size=30, num_classes=3, hidden_size=8, embedding_dim=8,
                    attention=functools.partial(SoftmaxCrossAttention, hidden=8))
    with pytest.raises(ValueError, match="no CoDA attention"):
        plot_coda.coda_options(net)


# --- CoDA Transformer: every head of the chosen layers, valid (unmasked, causal) query-key pairs only ---------


def _classifier(**scoring):
    from coda_exp.attention import CoDAScoring
    from coda_exp.models.transformer import TransformerClassifier

    torch.manual_seed(0)
    return TransformerClassifier(vocab_size=30, num_classes=3, d_model=16, num_layers=2, num_heads=4, d_ff=32,
                                 scoring=functools.partial(CoDAScoring, **scoring)).eval()


def _text_batches():
    gen = torch.Generator().manual_seed(1)
    for lengths in ([7, 3, 5], [2, 6]):
        ids = torch.randint(1, 30, (len(lengths), max(lengths)), generator=gen)
        mask = torch.arange(max(lengths))[None] < torch.tensor(lengths)[:, None]
        yield {"ids": ids.masked_fill(~mask, 0), "mask": mask, "label": torch.zeros(len(lengths), dtype=torch.long)}


def test_classifier_layers_pool_the_real_pairs_of_every_head(plot_coda):
    net = _classifier(center_n=True, n_fn="tanh", center_over="slice")
    assert list(plot_coda.coda_layers(net)) == ["enc.0", "enc.1"]
    batches = list(_text_batches())
    with torch.no_grad():
        plain = [net(b["ids"], b["mask"]) for b in batches]
        with plot_coda.capture(plot_coda.coda_layers(net)):
            hooked = [plot_coda.run_batch(net, b) for b in batches]
    assert all(torch.equal(p, h) for p, h in zip(plain, hooked))  # capturing never changes the outputs
    assert not any(m._forward_hooks for m in net.modules())  # and the hooks are gone afterwards
    values = plot_coda.collect_layers(net, batches, batches=2, names=["enc.0", "enc.1"])
    real_pairs = sum(int((b["mask"].sum(1) ** 2).sum()) for b in batches)  # 49 + 9 + 25 + 4 + 36
    assert all(len(v) == 2 * 4 * real_pairs for v in values.values())  # 2 layers x 4 heads
    assert -1 <= values["f_E"].min() and values["f_E"].max() <= 1
    assert -1 <= values["f_N"].min() < 0 < values["f_N"].max() <= 1  # tanh(N′): centring gives both signs
    assert abs(values["gate"] - values["f_N"]).max() == 0  # gate_scale is 1 with center_n
    assert (abs(values["weights"]) <= abs(values["f_E"]) + 1e-7).all()


def test_layer_selection_and_its_errors(plot_coda):
    names = ["enc.0", "enc.1", "dec.0.self", "dec.0.cross"]
    assert plot_coda.select_layers(names, "all") == names
    assert plot_coda.select_layers(names, " dec.0.cross,enc.0,enc.0") == ["dec.0.cross", "enc.0"]
    with pytest.raises(ValueError, match=r"unknown layer\(s\) enc.7; available: all, enc.0, enc.1, dec.0.self"):
        plot_coda.select_layers(names, "enc.0,enc.7")
    assert plot_coda.layer_name("decoder_layers.3.cross_attn") == "dec.3.cross"
    assert plot_coda.layer_name("encoder.layers.2.self_attn") == "enc.2"


@pytest.fixture(scope="module")
def mlu_run(tmp_path_factory, compose):
    """A tiny CoDA Transformer trained through the pipeline on the MLU fixture: (tmp dir, its record path)."""
    from coda_exp.pipeline import run

    tmp = tmp_path_factory.mktemp("mlu_coda")
    run(compose(["task=mlu", "model=coda_transformer", "scale=fixture", "logger=none", "task.max_steps=4",
                     "task.val_check_interval=2"], tmp))
    return tmp, next((tmp / "results" / "runs").glob("*.json"))


def test_coda_transformer_figure_from_its_record(plot_coda, mlu_run, tmp_path, monkeypatch):
    _, record = mlu_run
    titles, plot = [], plot_coda.plot
    monkeypatch.setattr(plot_coda, "plot", lambda values, out, title, options: titles.append(title) or plot(
        values, out, title, options))
    for layers, out in (("all", tmp_path / "all.png"), ("enc.1,dec.0.cross", tmp_path / "two.png")):
        assert plot_coda.main(["--record", str(record), "--out", str(out), "--batches", "2", "--layers", layers]) == 0
        assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "coda_transformer on mlu, all 6 CoDA layers" in titles[0]
    assert "layers enc.1, dec.0.cross (" in titles[1]
    monkeypatch.setenv("CODA_EXP_ROOT", str(tmp_path / "root"))  # without --out: beside the record, not results/
    assert plot_coda.main(["--record", str(record), "--batches", "1", "--layers", "enc.0"]) == 0
    assert (record.parent.parent / "figures" / "figure_2.png").is_file()
    assert not (tmp_path / "root").exists()


def test_coda_transformer_values_exclude_padding_and_the_future(plot_coda, mlu_run):
    import json

    from coda_exp.offline import load_trained

    _, record = mlu_run
    cfg, dm, net = load_trained(json.loads(record.read_text())["best_checkpoint"])
    batch = next(iter(dm.val_dataloader()))
    src, tgt = batch["src_mask"].sum(1), batch["tgt_mask"].sum(1)  # real lengths; padding is at the end
    assert len(set(src.tolist())) > 1 and len(set(tgt.tolist())) > 1  # the batch does hold padded pairs
    heads = cfg.model.num_heads
    expected = {"enc.0": int((src * src).sum()), "dec.0.self": int((tgt * (tgt + 1) // 2).sum()),
                "dec.0.cross": int((tgt * src).sum())}  # causal: query i sees keys 0..i of its own target
    for name, pairs in expected.items():
        values = plot_coda.collect_layers(net, [batch], batches=1, names=[name])
        assert all(len(v) == heads * pairs for v in values.values()), name
        # the default composition (eq. 5): N <= 0 so sigmoid(N) in (0, 1/2], gate 2 sigmoid(N) in (0, 1]
        assert 0 < values["f_N"].min() and values["f_N"].max() <= 0.5  # no masked pair (exactly 0) slipped in
        assert abs(values["gate"] - 2 * values["f_N"]).max() < 1e-6
        assert -1 <= values["f_E"].min() < 0 < values["f_E"].max() <= 1
        assert (abs(values["weights"]) <= abs(values["f_E"]) + 1e-7).all()
    pooled = plot_coda.collect_layers(net, [batch], batches=1, names=list(plot_coda.coda_layers(net)))
    assert len(pooled["weights"]) == cfg.model.num_layers * heads * sum(expected.values())


def test_missing_checkpoint_layers_and_records_are_clear_errors(plot_coda, mlu_run, tmp_path, capsys):
    import json

    _, record = mlu_run
    with pytest.raises(SystemExit):
        plot_coda.main(["--record", str(record), "--layers", "enc.0,dec.5.cross", "--out", str(tmp_path / "x.png")])
    assert "available: all, enc.0, enc.1, dec.0.self, dec.0.cross, dec.1.self, dec.1.cross" in capsys.readouterr().err
    rec = json.loads(record.read_text())
    gone = tmp_path / "gone" / "best.ckpt"
    (tmp_path / "moved.json").write_text(json.dumps({**rec, "best_checkpoint": str(gone)}))
    (tmp_path / "none.json").write_text(json.dumps({**rec, "best_checkpoint": None}))
    for name, message in (("moved.json", f"best_checkpoint {gone} no longer exists"),
                          ("none.json", "the record has no best_checkpoint")):
        with pytest.raises(SystemExit):
            plot_coda.main(["--record", str(tmp_path / name)])
        assert message in capsys.readouterr().err
    with pytest.raises(SystemExit):
        plot_coda.main(["--ckpt", str(gone)])
    assert f"checkpoint {gone} does not exist" in capsys.readouterr().err


@pytest.mark.parametrize("args,message", [
    (["--record", "{dir}/notrec.json"], "--record {dir}/notrec.json: cannot read it as a run record (JSON): Expecting"),
    (["--record", "{dir}/list.json"], "--record {dir}/list.json: not a run record (a JSON list, expected an object)"),
    (["--ckpt", "{dir}/x.ckpt", "--batches", "0"], "--batches 0: expected at least 1 validation batch"),
    (["--ckpt", "{dir}/x.ckpt", "--config", "{dir}/none.yaml"],
     "--config {dir}/none.yaml: no such file; expected the run's config_resolved.yaml"),
])
def test_bad_arguments_are_one_message_before_the_model_loads(plot_coda, tmp_path, capsys, args, message):
    """They were a JSONDecodeError, a torch.cat ValueError and a FileNotFoundError saying the checkpoint had no run
    config (it had one; --config did not exist) traceback."""
    (tmp_path / "notrec.json").write_text("notjson\n")
    (tmp_path / "list.json").write_text("[]\n")
    with pytest.raises(SystemExit) as exit_:
        plot_coda.main([a.format(dir=tmp_path) for a in args])
    assert exit_.value.code == 2 and message.format(dir=tmp_path) in capsys.readouterr().err


def test_the_console_is_quiet_as_in_training(plot_coda, monkeypatch, tmp_path):
    """The data module's "tokenising" progress bars used to show while the checkpoint's data was read."""
    import importlib

    import datasets

    import coda_exp.offline

    bars = importlib.import_module("datasets.utils.tqdm")  # the module (datasets.utils.tqdm is also a class)

    monkeypatch.setattr(bars, "HF_DATASETS_DISABLE_PROGRESS_BARS", None)  # tests/conftest.py's setting, unset
    monkeypatch.setattr(bars, "_hf_datasets_progress_bars_disabled", False)  # restored after the test
    assert datasets.is_progress_bar_enabled()
    seen = []

    def load_trained(*_):
        seen.append(datasets.is_progress_bar_enabled())
        raise SystemExit(0)

    monkeypatch.setattr(coda_exp.offline, "load_trained", load_trained)
    ckpt = tmp_path / "x.ckpt"
    ckpt.write_bytes(b"")
    with pytest.raises(SystemExit):
        plot_coda.main(["--ckpt", str(ckpt)])
    assert seen == [False]
