"""End to end: two MLU runs on files of ``coda-exp make-mlu`` of two sizes, read at one scale, record two scale
labels (the size each read), their checkpoints say the same, and Table 6 pools one of them in a cell, listing the
other apart. Before commit 085a436 both records said ``fixture (task.max_steps=2, task.val_check_interval=2)`` with
one fingerprint, and the cell pooled them (n=2), though one run had twice the other's training data."""

import pytest
import torch

from coda_exp.data.seq2seq.mlu import write_mlu_files
from coda_exp.tables import build_table, load_table_spec
from coda_exp.tasks.base import CHECKPOINT_RUN
from tests import ROOT
from tests.conftest import train_fixture_model
from tests.results.records import cell

# ~3 s, two runs: make test checks the labels in tests/data/seq2seq/test_mlu.py and tests/test_evaluate.py
pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.slow]

RUN = ["task=mlu", "model=transformer", "data.num_validation=5", "data.num_test=6", "task.max_steps=1",
       "task.val_check_interval=1", "save_predictions=false"]


def test_mlu_files_of_two_sizes_are_two_scales_in_the_record_the_checkpoint_and_the_table(compose, tmp_path):
    records = []
    for seed, num_train in ((1, 40), (2, 80)):
        data = tmp_path / f"mlu_{num_train}"
        write_mlu_files(data, num_train=num_train, num_test=6, num_dev=5)  # make-mlu's files, data_seed 1234
        record, ckpt = train_fixture_model(compose, tmp_path / f"run_{num_train}", *RUN, f"seed={seed}",
                                           f"data.dir={data}")
        label = f"fixture (data.num_validation=5, data.num_test=6, task.max_steps=1, task.val_check_interval=1, " \
                f"data.num_train={num_train})"
        assert record["scale"] == label and record["data"]["train_examples"] == num_train
        assert sum(f"holds {num_train} examples, fewer than the configured 10909091" in w
                   for w in record["warnings"]) == 1  # one line for the training file, naming both sizes
        identity = torch.load(ckpt, map_location="cpu", weights_only=False)[CHECKPOINT_RUN]
        assert identity["scale"] == label and identity["fingerprint"] == record["fingerprint"]  # what eval reads
        records.append(record)
    assert records[0]["fingerprint"] == records[1]["fingerprint"]  # one configuration; the data size is the scale's
    table = build_table(load_table_spec(ROOT / "configs" / "tables" / "table_6.yaml"), records)
    pooled = cell(table, table.spec.rows[0].name, table.spec.columns[0].name)
    assert pooled.n == 1 and pooled.other_scales == {r["scale"]: 1 for r in records if r["scale"] != pooled.scale}
    assert [run["status"] for run in pooled.off_grid] == [f"another budget than the cell's ({pooled.scale})"]
