"""Sequence-to-sequence (MLU, AlgoLisp, MT): label-smoothed training, free decoding, sequence/token/BLEU metrics."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from coda_exp.models.decoding import beam_search, decoding_problem, greedy_decode
from coda_exp.optim import label_smoothed_nll, label_smoothed_token_nll
from coda_exp.tasks.base import TaskModule
from coda_exp.tasks.seq2seq_eval import EVALUATION_METRICS, get_evaluation
from coda_exp.tokens import strip_special


class Seq2SeqTask(TaskModule):
    """Teacher-forced training with label smoothing; evaluation by free decoding.

    Decoding: the test uses ``decoding`` (beam where configured); validation *during training* uses
    ``val_decoding`` (greedy by default: cheap model selection). Once training is over the pipeline calls
    :meth:`prepare_final_evaluation`, after which validation decodes like the test, so the development scores
    of the tested checkpoint (Tables 8 and 9 report dev BLEU) come from the same decoder as its test scores.

    Logged per stage (``val``, ``test``):
    - ``acc_seq``: exact match of the *generated* output — the CoDA paper's "accuracy per sequence" for MLU and
      AlgoLisp, as we read it. A pair whose tokens include ``unk_id`` never counts: a reference holding the
      unknown token cannot truly be produced, so generating ``<unk>`` where it stands is not a match, and neither
      is an output cut at the decoding's length cap before its end-of-sequence token (the model had not stopped);
    - ``acc_seq_tf``: teacher-forced per-sequence accuracy (every argmax of one forward pass right) — what
      Tensor2Tensor's ``accuracy_per_sequence`` metric computes during evaluation;
    - ``acc_tok_tf``: teacher-forced per-token accuracy; ``loss``: label-smoothed loss; ``nll``;
    - each of ``evaluations`` (:mod:`coda_exp.tasks.seq2seq_eval`), scored against the *raw* examples:
      BLEU for MT (``bleu``: ``bleu_t2t``, the paper's, ``bleu_tok`` and ``bleu``), execution accuracy for
      AlgoLisp (``execution``: ``acc_exec``, and per example ``exec``, saved in the test predictions for paired
      significance tests).

    ``decode_text`` maps target ids to text (predictions and evaluations). ``targets(split)`` gives the raw
    examples of a split in index order (``tgt``: the target text as in the data files) where the data holds
    them (IWSLT, AlgoLisp): the saved ``reference`` is then the file's line (no ``<unk>``), from which BLEU can
    be recomputed; else (None) the reference ids are decoded. ``run_info``: a dict where evaluations record their
    settings (the data module's ``stats``, which go into the run record).
    """
    FAMILY = "seq2seq"

    @classmethod
    def validation_metrics(cls, options: dict) -> set[str]:
        evaluated = {name for names in EVALUATION_METRICS.values() for name in names}  # the data's evaluations
        return {"loss", "nll", "acc_tok_tf", "acc_seq_tf", "acc_seq", *evaluated}

    def __init__(self, model, optimizer, pad_id: int, bos_id: int, eos_id: int, unk_id: int | None,
                 decode_text: Callable[[list[int]], str], targets: Callable[[str], Sequence[dict]] | None = None,
                 evaluations: Sequence[str] = (), run_info: dict | None = None, label_smoothing: float = 0.1, decoding: dict | None = None, val_decoding: dict | None = None,
                 **kwargs):
        super().__init__(model, optimizer, **kwargs)
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = pad_id, bos_id, eos_id, unk_id
        self.decode_text, self.targets = decode_text, targets
        self.evaluations = {name: get_evaluation(name) for name in evaluations}
        if self.evaluations and targets is None:
            raise ValueError(f"evaluations {list(self.evaluations)} need the raw examples (targets)")
        self.run_info = run_info if run_info is not None else {}
        self.label_smoothing = label_smoothing
        self.decoding = dict(decoding or {"strategy": "greedy"})
        caps = {k: self.decoding[k] for k in ("max_len", "max_len_a", "max_len_b") if k in self.decoding}
        self.val_decoding = dict(val_decoding or {"strategy": "greedy", **caps})  # greedy: cheap model selection
        for name, options in (("decoding", self.decoding), ("val_decoding", self.val_decoding)):
            problem = decoding_problem(options, name)
            if problem is not None:
                raise ValueError(problem)
        self.final_evaluation = False  # set by prepare_final_evaluation: validation decodes like the test
        self._eval: dict[str, list] = {}
        self.add_means(*(f"{stage}/{name}" for stage in ("val", "test")
                         for name in ("loss", "nll", "acc_tok_tf", "acc_seq_tf")))

    def prepare_final_evaluation(self) -> None:
        """Training is over: validation now decodes with ``decoding`` (as the test), not ``val_decoding``."""
        self.final_evaluation = True

    def eval_decoding(self, stage: str) -> dict:
        """The decoding options of ``stage``: ``decoding`` for the test and the final validation."""
        return self.decoding if stage == "test" or self.final_evaluation else self.val_decoding

    def is_exact(self, hyp: list[int], ref: list[int], ended: bool = True) -> bool:
        """Exact sequence match, never through the unknown token nor of an output that did not end (cut at the
        length cap before its end-of-sequence token: ``ended`` False; see the class docstring)."""
        return ended and hyp == ref and (self.unk_id is None or self.unk_id not in ref)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.model(batch["src_ids"], batch["src_mask"], batch["tgt_in"], batch["tgt_mask"])

    def _loss(self, logits: torch.Tensor, batch: dict[str, torch.Tensor]):
        return label_smoothed_nll(logits, batch["tgt_out"], self.pad_id, self.label_smoothing)

    def train_loss(self, batch):
        loss, _ = self._loss(self(batch), batch)
        return loss, batch["tgt_mask"].sum()  # weighted by target tokens (a tensor: no host synchronisation)

    def generate(self, batch: dict[str, torch.Tensor], decoding: dict) -> torch.Tensor:
        """Free decoding: ``strategy`` greedy or beam; output length capped per example at
        ``min(max_len, max_len_a * source length + max_len_b)``; ``use_cache``; beam options (``beam_size``,
        ``length_penalty``). A key the strategy does not take is a ValueError naming it (``decoding_problem``)."""
        problem = decoding_problem(decoding)
        if problem is not None:
            raise ValueError(problem)
        opts = {"max_len": 512, **decoding}
        strategy = opts.pop("strategy", "greedy")
        decode = {"greedy": greedy_decode, "beam": beam_search}[strategy]
        return decode(self.model, batch["src_ids"], batch["src_mask"], **opts)

    # -- evaluation ---------------------------------------------------------------------------------------
    def _start(self, stage: str) -> None:
        self._eval[stage] = []

    def _eval_step(self, batch, stage: str) -> None:
        logits = self(batch)
        # per example (each once, every process's by its tokens: log_mean), so DDP changes none of them
        loss, nll, real = label_smoothed_token_nll(logits, batch["tgt_out"], self.pad_id, self.label_smoothing)
        index, tokens = batch["index"], real.sum(-1)
        self.log_mean(f"{stage}/loss", loss.sum(-1), tokens, index)
        self.log_mean(f"{stage}/nll", nll.sum(-1), tokens, index)
        mask = batch["tgt_mask"]
        correct = (logits.argmax(-1) == batch["tgt_out"]) & mask  # (B, T)
        self.log_mean(f"{stage}/acc_tok_tf", correct.sum(1), mask.sum(1), index)
        self.log_mean(f"{stage}/acc_seq_tf", (correct.sum(1) == mask.sum(1)).float(), 1.0, index)
        hyps = self.generate(batch, self.eval_decoding(stage))
        # one copy to the host per tensor, not one per row (a GPU would wait for each of 545K MLU test rows)
        ended = (hyps == self.eos_id).any(-1)  # False: cut at the length cap
        rows = zip(batch["index"].tolist(), hyps.tolist(), batch["tgt_out"].tolist(), ended.tolist())
        self._eval[stage].extend((i, strip_special(hyp, self.eos_id, self.pad_id, self.bos_id),
                                  strip_special(ref, self.eos_id, self.pad_id, self.bos_id), done)
                                 for i, hyp, ref, done in rows)

    def _finish(self, stage: str) -> None:
        # under DDP every process scores the whole evaluation set (corpus BLEU is not a mean of shard BLEUs)
        rows = self.gather_rows(self._eval.pop(stage, []), key=lambda r: r[0])
        if not rows:
            return
        exact = [self.is_exact(h, r, *ended) for _, h, r, *ended in rows]  # (index, hyp, ref[, ended])
        metrics = {f"{stage}/acc_seq": sum(exact) / len(rows)}
        hyp_text = [self.decode_text(row[1]) for row in rows]
        per_example: dict[str, list] = {}
        split = "validation" if stage == "val" else "test"
        examples = [self.targets(split)[row[0]] for row in rows] if self.targets is not None else None
        for name, evaluate in self.evaluations.items():
            for k, v in evaluate(hyp_text, examples, self.run_info).items():
                if isinstance(v, (list, tuple)):
                    if len(v) != len(rows):
                        raise ValueError(f"evaluation {name!r}: per-example {k!r} has {len(v)} values for "
                                         f"{len(rows)} hypotheses")
                    per_example[k] = list(v)
                else:
                    metrics[f"{stage}/{k}"] = v
        # the rows are the same on every process (gathered above), so are the metrics
        self.log_dict({k: float(v) for k, v in metrics.items()}, sync_dist=True, prog_bar=True)
        if stage == "test":
            # ``exact``: what acc_seq counts, kept (with the evaluations' per-example outcomes) for paired tests
            self.test_predictions = [
                {"index": i, "hypothesis": h, "exact": ok, **{k: v[j] for k, v in per_example.items()},
                 "reference": examples[j]["tgt"] if examples is not None else self.decode_text(ref)}
                for j, ((i, _, ref, *_), h, ok) in enumerate(zip(rows, hyp_text, exact))]

    def on_validation_epoch_start(self) -> None:
        self._start("val")

    def validation_step(self, batch, batch_idx):
        self._eval_step(batch, "val")

    def on_validation_epoch_end(self) -> None:
        self._finish("val")

    def on_test_epoch_start(self) -> None:
        self._start("test")

    def test_step(self, batch, batch_idx):
        self._eval_step(batch, "test")

    def on_test_epoch_end(self) -> None:
        self._finish("test")

    def predict_step(self, batch, batch_idx, dataloader_idx: int = 0) -> list[dict]:
        """``index`` and ``hypothesis`` (the text decoded with ``decoding``, as the test decodes) per example."""
        hyps = self.generate(batch, self.decoding).tolist()
        return [{"index": i, "hypothesis": self.decode_text(strip_special(h, self.eos_id, self.pad_id, self.bos_id))}
                for i, h in zip(batch["index"].tolist(), hyps)]
