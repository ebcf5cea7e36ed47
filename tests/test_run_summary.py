"""The summary a run prints at its end (coda_exp.run_record.print_summary)."""

from __future__ import annotations

from coda_exp.run_record import print_summary


def _record(**changes):
    record = {"task": "snli", "model": "decompatt", "seed": 1, "scale": "fixture", "status": "finished", "steps": 1,
              "wall_time_s": 1.2, "metrics": {}, "output_dir": "/runs/x"}
    return {**record, **changes}


def test_one_step_is_singular_and_an_evaluation_says_its_steps_are_the_checkpoints(capsys):
    print_summary(_record())
    assert "finished, 1 step in 1 s" in capsys.readouterr().out
    print_summary(_record(steps=3))
    assert "finished, 3 steps in 1 s" in capsys.readouterr().out
    print_summary(_record(steps=3, mode="eval"))
    out = capsys.readouterr().out
    assert "evaluated in 1 s (checkpoint trained 3 steps)" in out and "finished" not in out
