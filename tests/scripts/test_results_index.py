"""results/README.md is the index scripts/results_index.py writes from the records: committed current."""


def test_the_committed_results_index_is_current(load_script):
    assert load_script("results_index").main(["--check"]) == 0, "run: python scripts/results_index.py"


def test_an_unknown_folder_is_listed_with_what_its_records_say(load_script, tmp_path):
    import json

    index = load_script("results_index")
    runs = tmp_path / "new_study" / "runs"
    runs.mkdir(parents=True)
    record = {"schema_version": 1, "run_id": "r1", "task": "mlu", "model": "transformer", "attention": {}, "seed": 1,
              "scale": "cpu", "metrics": {}, "steps": 1, "epochs": 0, "wall_time_s": 1.0, "device": "cpu",
              "git_commit": "abc1234-dirty", "overrides": [], "created": "2026-11-26T00:00:00Z"}
    (runs / "r1.json").write_text(json.dumps(record))
    text = index.render(tmp_path)
    assert "| `new_study/` | (not described yet) |" in text and "1 runs; commits abc1234-dirty (1 dirty)" in text
