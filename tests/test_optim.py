"""T2T learning-rate schedules, label-smoothed loss (coda_exp.optim) and checkpoint averaging
(coda_exp.checkpoint_avg), against hand-computed values."""

import itertools
import math
import shutil
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch

from coda_exp.checkpoint_avg import average_checkpoints, main, select_last
from coda_exp.optim import (
    label_smoothed_nll,
    linear_warmup_rsqrt_decay,
    linear_warmup_rsqrt_decay_lambda,
    noam_lambda,
    noam_schedule,
)


def test_noam_values():
    # 2.0 * min(1, s/8000) * rsqrt(max(s, 8000)) * rsqrt(128), s = step + 1, by hand:
    # s = 1:     2 * (1/8000) / 89.4427191 / 11.3137085 = 2.4705294e-07
    # s = 4000:  2 * 0.5 / 89.4427191 / 11.3137085      = 9.8821177e-04
    # s = 8000:  2 / 89.4427191 / 11.3137085            = 1.9764235e-03 (the peak)
    # s = 32000: 2 / 178.8854382 / 11.3137085           = 9.8821177e-04
    for step, value in [(0, 2.4705294e-07), (3999, 9.8821177e-04), (7999, 1.9764235e-03), (31999, 9.8821177e-04)]:
        assert noam_lambda(step, d_model=128, warmup=8000) == pytest.approx(value, rel=1e-7)
    # Vaswani et al. eq. 3 form: d^-0.5 * min(s^-0.5, s * warmup^-1.5)
    for s in (1, 100, 4000, 8000, 12345):
        assert noam_lambda(s - 1, 512, 4000, factor=1.0) == pytest.approx(512 ** -0.5 * min(s ** -0.5,
                                                                                            s * 4000 ** -1.5))


def test_linear_warmup_rsqrt_decay_is_t2t_single_gpu():
    # T2T transformer_base_single_gpu: 0.1 * min(1, s/16000) * rsqrt(max(s, 16000))
    peak = 0.1 / math.sqrt(16000)
    assert peak == pytest.approx(7.905694150420949e-4)
    for step in (0, 99, 15999, 16000, 63999, 200000):
        s = step + 1
        t2t = 0.1 * min(1.0, s / 16000) / math.sqrt(max(s, 16000))
        assert linear_warmup_rsqrt_decay_lambda(step, 16000, peak) == pytest.approx(t2t, rel=1e-12)
    assert linear_warmup_rsqrt_decay_lambda(63999, 16000, peak) == pytest.approx(peak / 2)  # s = 4w: half


@pytest.mark.parametrize("make", [lambda opt: noam_schedule(opt, d_model=64, warmup_steps=10),
                                  lambda opt: linear_warmup_rsqrt_decay(opt, warmup_steps=10, peak_lr=1e-3)])
def test_schedulers_set_the_learning_rate(make):
    param = torch.nn.Parameter(torch.zeros(2))
    opt = torch.optim.Adam([param], lr=1.0)
    sched = make(opt)
    fn = sched.lr_lambdas[0]
    for step in range(25):
        assert opt.param_groups[0]["lr"] == pytest.approx(fn(step), rel=1e-12)  # the lambda IS the rate
        param.grad = torch.ones(2)
        opt.step()
        sched.step()
    state = sched.state_dict()  # resumable (Lightning saves it)
    assert state["last_epoch"] == 25
    with pytest.raises(ValueError, match="lr must be 1.0"):
        make(torch.optim.Adam([param], lr=0.1))


def test_label_smoothing_by_hand():
    # V = 3, p = softmax([0, ln 2, 0]) = [1/4, 1/2, 1/4], gold 1, eps 0.1: q = [0.05, 0.9, 0.05]
    # loss = KL(q || p) = 2 * 0.05 ln(0.05 / 0.25) + 0.9 ln(0.9 / 0.5) = 0.36806421; nll = ln 2
    logits = torch.tensor([[[0.0, math.log(2.0), 0.0], [5.0, -3.0, 1.0]]], dtype=torch.float64)
    target = torch.tensor([[1, 0]])  # the second position is padding (pad_id 0): ignored
    loss, nll = label_smoothed_nll(logits, target, pad_id=0, epsilon=0.1)
    by_hand = 0.1 * math.log(0.2) + 0.9 * math.log(1.8)
    assert by_hand == pytest.approx(0.36806421, abs=1e-8)
    assert loss.item() == pytest.approx(by_hand, rel=1e-12)
    assert nll.item() == pytest.approx(math.log(2.0), rel=1e-12)


def test_label_smoothing_means_and_limits():
    torch.manual_seed(0)
    logits, target = torch.randn(4, 7, 11, dtype=torch.float64), torch.randint(0, 11, (4, 7))
    target[0, 3:] = 0
    loss, nll = label_smoothed_nll(logits, target, pad_id=0, epsilon=0.0)
    ref = torch.nn.functional.cross_entropy(logits.transpose(1, 2), target, ignore_index=0)
    assert loss.item() == pytest.approx(ref.item(), rel=1e-12) and nll.item() == pytest.approx(ref.item())
    # smoothed: mean over real tokens of the cross-entropy to q minus q's entropy
    loss, nll = label_smoothed_nll(logits, target, pad_id=0, epsilon=0.2)
    q = torch.full_like(logits, 0.2 / 10).scatter(-1, target[..., None], 0.8)
    per_token = (q * (q.log() - logits.log_softmax(-1))).sum(-1)
    real = target != 0
    assert loss.item() == pytest.approx(per_token[real].mean().item(), rel=1e-12)
    assert nll.item() == pytest.approx(ref.item(), rel=1e-12)
    # classification: no padding id
    loss, _ = label_smoothed_nll(logits[:, 0], target[:, 0], None, 0.2)
    assert loss.item() == pytest.approx(per_token[:, 0].mean().item(), rel=1e-12)


# --- checkpoint averaging ------------------------------------------------------------------------------------
def fake_ckpt(path, step, value):
    torch.save({"global_step": step, "epoch": step // 10, "pytorch-lightning_version": pl.__version__,
                "state_dict": {"model.w": torch.full((2, 3), float(value)),
                               "model.h": torch.full((4,), float(value), dtype=torch.float16),
                               "model.count": torch.tensor([step])},
                "optimizer_states": [{"marker": step}]}, path)


def test_average_is_exact(tmp_path):
    # file names sort opposite to global steps: "last" must follow the steps
    for name, step, value in [("c.ckpt", 100, 1.0), ("b.ckpt", 200, 2.0), ("a.ckpt", 300, 4.5), ("z.ckpt", 50, 9)]:
        fake_ckpt(tmp_path / name, step, value)
    chosen = select_last(tmp_path, 3)
    assert [p.name for p in chosen] == ["c.ckpt", "b.ckpt", "a.ckpt"]
    avg = average_checkpoints(chosen)
    assert torch.equal(avg["state_dict"]["model.w"], torch.full((2, 3), (1.0 + 2.0 + 4.5) / 3))
    assert avg["state_dict"]["model.h"].dtype == torch.float16
    assert torch.equal(avg["state_dict"]["model.h"], torch.full((4,), 2.5, dtype=torch.float16))
    assert avg["state_dict"]["model.count"].tolist() == [300]  # non-float: from the newest
    assert avg["global_step"] == 300 and avg["optimizer_states"] == [{"marker": 300}]  # other keys: newest


def test_a_checkpoint_of_the_older_torch_save_format_is_read_too(tmp_path):
    """torch < 1.6 wrote a bare pickle, which torch.load cannot memory-map: such a file is read without mmap (the
    step of a resume=auto candidate, an average's inputs) instead of refused with torch's advice to re-save it."""
    from coda_exp.checkpoint_avg import global_step, load_checkpoint

    old = tmp_path / "old.ckpt"
    torch.save({"state_dict": {"w": torch.ones(2)}, "global_step": 7}, old, _use_new_zipfile_serialization=False)
    assert global_step(old) == 7 and torch.equal(load_checkpoint(old, mmap=True)["state_dict"]["w"], torch.ones(2))


def test_cli(tmp_path):
    for name, step, value in [("epoch=0-step=10.ckpt", 10, 1.0), ("epoch=1-step=20.ckpt", 20, 3.0)]:
        fake_ckpt(tmp_path / name, step, value)
    fake_ckpt(tmp_path / "last.ckpt", 20, 3.0)  # Lightning's copy of the newest: counted once
    out = main(["--dir", str(tmp_path), "--last", "2", "--out", str(tmp_path / "avg.ckpt")])
    avg = torch.load(out, weights_only=False)
    assert torch.equal(avg["state_dict"]["model.w"], torch.full((2, 3), 2.0))
    assert len(avg["averaged_checkpoints"]) == 2
    # the output lies in the folder now, but is never averaged with the inputs
    main(["--dir", str(tmp_path), "--last", "2", "--out", str(tmp_path / "avg.ckpt")])
    assert torch.equal(torch.load(out, weights_only=False)["state_dict"]["model.w"], torch.full((2, 3), 2.0))
    main(["--ckpts", str(tmp_path / "epoch=0-step=10.ckpt"), "--out", str(tmp_path / "one.ckpt")])
    assert torch.equal(torch.load(tmp_path / "one.ckpt", weights_only=False)["state_dict"]["model.w"],
                       torch.full((2, 3), 1.0))
    assert not list(tmp_path.glob("*.tmp"))
    with pytest.raises(ValueError, match="fewer than"):
        select_last(tmp_path, 5, exclude=[tmp_path / "avg.ckpt", tmp_path / "one.ckpt"])
    # an earlier average lying in the folder (a run's averaged.ckpt) is never one of the checkpoints averaged
    assert [p.name for p in select_last(tmp_path, 2)] == ["epoch=0-step=10.ckpt", "epoch=1-step=20.ckpt"]


def test_a_runs_checkpoints_folder_is_averaged_from_its_periodic_checkpoints(tmp_path, capsys):
    """--dir RUN/checkpoints (the docstring's example) averaged the best checkpoint, last.ckpt and an earlier
    process's interrupted.ckpt; the last N are in checkpoints/periodic. Without them: one message naming them."""
    from coda_exp import commands

    run = tmp_path / "run"
    (run / "checkpoints" / "periodic").mkdir(parents=True)
    (run / "config_resolved.yaml").write_text("seed: 1\n")
    for name, step, value in [("epoch001-step50.ckpt", 50, 100.0), ("interrupted.ckpt", 173, 100.0),
                              ("last.ckpt", 200, 3.0)]:
        fake_ckpt(run / "checkpoints" / name, step, value)
    for step, value in [(100, 1.0), (150, 2.0), (200, 3.0)]:
        fake_ckpt(run / "checkpoints" / "periodic" / f"step{step}.ckpt", step, value)
    out = main(["--dir", str(run / "checkpoints"), "--last", "3", "--out", str(tmp_path / "avg.ckpt")])
    avg = torch.load(out, weights_only=False)
    assert [Path(p).name for p in avg["averaged_checkpoints"]] == ["step100.ckpt", "step150.ckpt", "step200.ckpt"]
    assert torch.equal(avg["state_dict"]["model.w"], torch.full((2, 3), 2.0))
    assert f"averaging its periodic checkpoints ({run / 'checkpoints' / 'periodic'})" in capsys.readouterr().out
    again = main(["--dir", str(run), "--last", "3", "--out", str(tmp_path / "from_run.ckpt")])  # "holds 0 checkpoints"
    assert torch.load(again, weights_only=False)["averaged_checkpoints"] == avg["averaged_checkpoints"]
    assert f"--dir {run}: a run folder; averaging its periodic checkpoints" in capsys.readouterr().out
    for p in (run / "checkpoints" / "periodic").iterdir():
        p.unlink()
    argv = ["--dir", str(run / "checkpoints"), "--last", "3", "--out", str(tmp_path / "again.ckpt")]
    assert commands.run_command("average-checkpoints", argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --dir {run / 'checkpoints'}: a run's checkpoints folder, holding "
                          "epoch001-step50.ckpt, interrupted.ckpt, last.ckpt: ") and "task.average_last=N" in err
    assert not (tmp_path / "again.ckpt").exists()
    argv[1] = str(run)
    assert commands.run_command("average-checkpoints", argv) == 2
    assert capsys.readouterr().err.startswith(f"error: --dir {run}: a run folder, whose checkpoints/ holds "
                                              "epoch001-step50.ckpt, interrupted.ckpt, last.ckpt: ")
    shutil.rmtree(run / "checkpoints")  # debug=fdr: no checkpoints/ at all
    assert commands.run_command("average-checkpoints", argv) == 2
    assert f"--dir {run}: a run folder without checkpoints/" in capsys.readouterr().err


@pytest.mark.parametrize("argv,message", [
    (["--dir", "{tmp}/missing"], "--dir {tmp}/missing: no such folder of checkpoints"),
    (["--dir", "{tmp}", "--last", "3"], "{tmp} holds 1 checkpoints with distinct global steps, fewer than --last 3"),
    (["--dir", "{tmp}", "--last", "0"], "--last must be >= 1, got 0"),
])
def test_the_command_s_mistakes_are_one_message_and_exit_2(tmp_path, capsys, argv, message):
    """They used to be a ValueError's traceback."""
    from coda_exp import commands

    fake_ckpt(tmp_path / "epoch=0-step=10.ckpt", 10, 1.0)
    given = [a.format(tmp=tmp_path) for a in argv]
    assert commands.run_command("average-checkpoints", [*given, "--out", str(tmp_path / "avg.ckpt")]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {message.format(tmp=tmp_path)}\n"
    assert not (tmp_path / "avg.ckpt").exists()


def test_averaging_refuses_repeats_another_run_and_writing_over_an_input(tmp_path, capsys):
    """Two runs' checkpoints of one shape were averaged silently, the result passing as the newest run's; a file
    given twice weighed double; --out naming an input replaced it."""
    from coda_exp import commands
    from coda_exp.tasks.base import CHECKPOINT_CONFIG

    def with_config(path, step, lr, seed=1):
        fake_ckpt(path, step, step)
        ckpt = torch.load(path, weights_only=False)
        ckpt[CHECKPOINT_CONFIG] = {"seed": seed, "optimizer": {"lr": lr}, "task": {"max_steps": step},
                                   "paths": {"output_dir": str(path.parent)}}
        torch.save(ckpt, path)

    a, b, c, d = (tmp_path / f"{n}.ckpt" for n in "abcd")
    with_config(a, 10, 0.1)
    with_config(b, 20, 0.1)  # the same run, trained further: its budget may differ
    with_config(c, 30, 0.5)
    with_config(d, 40, 0.1, seed=2)
    out = tmp_path / "avg.ckpt"
    assert commands.run_command("average-checkpoints", ["--ckpts", str(a), str(b), "--out", str(out)]) == 0
    for argv, message in [([a, c], f"{a} is of another run than {c} (they differ in optimizer.lr)"),
                          ([a, d], f"{a} is of another run than {d} (they differ in seed)"),
                          ([a, a], f"{a}: given more than once"),
                          ([a, b, "--out", b], f"--out {b} is one of the checkpoints averaged")]:
        given = [str(x) for x in argv] + ([] if "--out" in argv else ["--out", str(tmp_path / "x.ckpt")])
        capsys.readouterr()
        assert commands.run_command("average-checkpoints", ["--ckpts", *given]) == 2
        assert capsys.readouterr().err.startswith(f"error: {message}")
    assert not (tmp_path / "x.ckpt").exists() and torch.load(b, weights_only=False)["global_step"] == 20


def test_averaging_names_a_bad_out_and_a_full_disk(tmp_path, capsys, monkeypatch):
    """--out under a file (a FileExistsError traceback before), --out a checkpoint of --dir (left out of the inputs
    without a word, the count one short) and a full disk (torch's "unexpected pos" RuntimeError traceback) are one
    message each, exit 2, nothing replaced."""
    import errno

    from coda_exp import commands

    for name, step in (("a.ckpt", 25), ("b.ckpt", 40)):
        fake_ckpt(tmp_path / name, step, step)
    (tmp_path / "afile").write_text("x")

    def error(*argv):
        capsys.readouterr()
        assert commands.run_command("average-checkpoints", [str(a) for a in argv]) == 2
        return capsys.readouterr().err

    assert error("--dir", tmp_path, "--last", "2", "--out", tmp_path / "afile" / "x.ckpt").startswith(
        f"error: --out {tmp_path / 'afile' / 'x.ckpt'}: {tmp_path / 'afile'} is a file, not a folder")
    assert error("--dir", tmp_path, "--last", "2", "--out", tmp_path / "a.ckpt").startswith(
        f"error: --out {tmp_path / 'a.ckpt'} is one of the checkpoints of --dir {tmp_path} (step 25): writing there "
        "would replace it")

    def no_space(obj, f):
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 981312 vs 981232")

    monkeypatch.setattr(torch, "save", no_space)
    out = tmp_path / "out" / "avg.ckpt"
    assert error("--ckpts", tmp_path / "a.ckpt", tmp_path / "b.ckpt", "--out", out).startswith(
        f"error: --out {out}: cannot write the averaged checkpoint: No space left on device: free space on that disk")
    assert not list((tmp_path / "out").iterdir())
    assert torch.load(tmp_path / "a.ckpt", weights_only=False)["global_step"] == 25


class Tiny(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.model = torch.nn.Linear(3, 1)

    def training_step(self, batch, batch_idx):
        return self.model(batch[0]).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_lightning_loads_the_average(tmp_path):
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 3)), batch_size=2)
    ckpt_cb = pl.callbacks.ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=1, save_top_k=-1)
    trainer = pl.Trainer(max_steps=3, callbacks=[ckpt_cb], logger=False, enable_progress_bar=False,
                         enable_model_summary=False, accelerator="cpu")
    trainer.fit(Tiny(), data)
    paths = select_last(tmp_path, 3)
    weights = [torch.load(p, weights_only=False)["state_dict"]["model.weight"] for p in paths]
    out = main(["--dir", str(tmp_path), "--last", "3", "--out", str(tmp_path / "averaged.ckpt")])
    model = Tiny.load_from_checkpoint(out)
    assert torch.allclose(model.model.weight, sum(weights) / 3, atol=1e-7)
    trainer = pl.Trainer(max_steps=4, logger=False, enable_progress_bar=False, enable_checkpointing=False,
                         enable_model_summary=False, accelerator="cpu")
    trainer.fit(Tiny(), data, ckpt_path=out)  # resumes from it
    assert trainer.global_step == 4


def test_warmup_cosine_rises_linearly_then_falls_to_its_floor():
    from coda_exp.optim import warmup_cosine, warmup_cosine_lambda

    lr = [warmup_cosine_lambda(step, warmup=10, total=110, peak_lr=3e-3) for step in range(130)]
    assert lr[0] == pytest.approx(3e-4) and lr[9] == pytest.approx(3e-3)  # s = step + 1
    assert lr[59] == pytest.approx(1.5e-3)  # half-way through the cosine
    assert lr[109] == pytest.approx(0.0, abs=1e-18) and lr[129] == pytest.approx(0.0, abs=1e-18)
    assert all(a >= b for a, b in itertools.pairwise(lr[9:]))
    floor = warmup_cosine_lambda(200, warmup=10, total=110, peak_lr=1.0, final_fraction=0.1)
    assert floor == pytest.approx(0.1)
    def opt():
        return torch.optim.Adam([torch.zeros(1, requires_grad=True)], lr=1.0)

    assert warmup_cosine(opt(), 10, 110, 3e-3).get_last_lr() == [pytest.approx(3e-4)]
    with pytest.raises(ValueError, match="warmup_steps \\+ hold_steps <= total_steps"):
        warmup_cosine(opt(), 200, 110, 3e-3)
    with pytest.raises(ValueError, match="hold_steps=100"):
        warmup_cosine(opt(), 20, 110, 3e-3, hold_steps=100)
    with pytest.raises(ValueError, match="optimizer's lr must be 1.0"):
        warmup_cosine(torch.optim.Adam([torch.zeros(1, requires_grad=True)], lr=0.1), 10, 110, 3e-3)


def test_warmup_cosine_can_hold_its_peak_before_the_decay():
    from coda_exp.optim import warmup_cosine, warmup_cosine_lambda

    lr = [warmup_cosine_lambda(step, warmup=10, total=110, peak_lr=2.0, hold=50) for step in range(120)]
    assert lr[9] == lr[59] == pytest.approx(2.0)  # warm-up ends at s = 10, the peak is held through s = 60
    assert lr[60] < 2.0 and lr[84] == pytest.approx(1.0)  # the cosine runs over s = 60..110
    assert lr[109] == pytest.approx(0.0, abs=1e-18) and lr[119] == pytest.approx(0.0, abs=1e-18)
    adam = torch.optim.Adam([torch.zeros(1, requires_grad=True)], lr=1.0)
    sched = warmup_cosine(adam, 10, 110, 2.0, hold_steps=50)
    for _ in range(84):
        adam.step(), sched.step()
    assert sched.get_last_lr() == [pytest.approx(1.0)]


def test_a_schedule_s_changes_without_a_schedule_are_said_and_read_by_nothing(make_cfg, caplog):
    """``task=imdb model=attconv_light scale=fixture preset=none`` (docs/attconv.md's own advice) crashed once the data
    had loaded: the scale's ``scheduler.warmup_steps: 10`` was a node without ``_target_`` handed to the task as its
    scheduler factory ("'DictConfig' object is not callable")."""
    from coda_exp.optim import schedule_node

    cfg = make_cfg("task=imdb", "model=attconv_light", "scale=fixture", "preset=none")
    assert dict(cfg.scheduler) == {"warmup_steps": 10}
    with caplog.at_level("WARNING", logger="coda_exp.optim"):
        assert schedule_node(cfg) is None
    assert ("nothing reads scheduler.warmup_steps; the learning rate stays optimizer.lr = 0.0003"
            in caplog.text), caplog.text
    assert schedule_node(make_cfg("task=imdb", "model=attconv_light", "scale=fixture")).warmup_steps == 10
    assert schedule_node(make_cfg("task=snli")) is None
