"""Evaluations of decoded sequences against the data's raw examples, beside exact match (:class:`Seq2SeqTask`).

An evaluation is ``fn(hypotheses, examples, run_info) -> dict``: ``hypotheses`` the decoded texts, ``examples``
the raw examples they answer (``tgt``: the target text as in the data files; AlgoLisp's ``tests``), ``run_info``
a dict where it may record its settings for the run record. A float value is a metric; a list (one entry per
hypothesis) is a per-example outcome, saved with the test predictions.

- ``bleu`` (IWSLT, :mod:`coda_exp.metrics.bleu`): ``bleu_t2t``, Tensor2Tensor's ``t2t-bleu`` (cased) on the decoded
  text and the reference line as they are (the paper's metric); ``bleu_tok``, ``multi-bleu.perl`` on their
  whitespace tokens; ``bleu``, sacreBLEU on both sides detokenized (signature in ``run_info["sacrebleu_signature"]``);
- ``execution`` (AlgoLisp): ``acc_exec``, the fraction of generated programs that pass all of their problem's
  tests in our interpreter; per example ``exec``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from coda_exp.metrics.algolisp_exec import execution_outcomes
from coda_exp.metrics.bleu import detokenize, sacrebleu_score, t2t_bleu, tokenized_bleu


def bleu_evaluation(hypotheses: Sequence[str], examples: Sequence[dict], run_info: dict) -> dict[str, float]:
    refs = [ex["tgt"] for ex in examples]
    score, signature = sacrebleu_score([detokenize(h) for h in hypotheses], [detokenize(r) for r in refs])
    run_info["sacrebleu_signature"] = signature
    return {"bleu": score, "bleu_tok": tokenized_bleu(hypotheses, refs), "bleu_t2t": t2t_bleu(hypotheses, refs)}


def execution_evaluation(hypotheses: Sequence[str], examples: Sequence[dict], run_info: dict) -> dict:
    passed = execution_outcomes(hypotheses, examples)
    return {"acc_exec": sum(passed) / len(passed) if passed else 0.0, "exec": passed}


EVALUATIONS: dict[str, Callable[[Sequence[str], Sequence[dict], dict], dict]] = {
    "bleu": bleu_evaluation,
    "execution": execution_evaluation,
}

#: the metrics (floats) each evaluation returns, logged as ``{val,test}/<name>``
EVALUATION_METRICS: dict[str, tuple[str, ...]] = {"bleu": ("bleu", "bleu_tok", "bleu_t2t"),
                                                  "execution": ("acc_exec",)}


def get_evaluation(name: str) -> Callable[[Sequence[str], Sequence[dict], dict], dict]:
    if name not in EVALUATIONS:
        raise ValueError(f"unknown sequence evaluation {name!r}; available: {sorted(EVALUATIONS)}")
    return EVALUATIONS[name]
