#!/usr/bin/env python
"""Write the tiny test fixtures under tests/fixtures/ in each benchmark's official on-disk format.

The texts are synthetic (templates filled from small word lists, fixed seed), written by this project; they carry
a learnable signal so that an overfit run can reach high scores. Re-running the script rewrites identical files.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SUBJECTS = ["a man", "a woman", "a child", "two dogs", "an old man", "a girl", "a boy", "three people"]
ACTIONS = [("playing a guitar", "making music", "sleeping"), ("riding a bike", "outside", "watching television"),
           ("eating an apple", "eating", "swimming in a lake"), ("reading a book", "reading", "running a race"),
           ("cooking dinner", "in a kitchen", "climbing a mountain"), ("painting a wall", "working", "dancing")]
PLACES = ["in the park", "on the street", "at home", "near the beach", "in a city"]
NEUTRAL_EXTRAS = ["for money", "because they are happy", "with a friend", "on a sunny day"]


def _parse(sentence: str) -> tuple[str, str]:
    toks = sentence.split()
    binary = "( " + " ".join(toks) + " )"
    return binary, "(ROOT (S " + " ".join(f"(X {t})" for t in toks) + "))"


def snli_rows(n: int, rng: random.Random, start: int) -> list[dict]:
    rows = []
    for k in range(n):
        subj, (act, entail, contra), place = rng.choice(SUBJECTS), rng.choice(ACTIONS), rng.choice(PLACES)
        premise = f"{subj.capitalize()} is {act} {place} ."
        label = ["entailment", "neutral", "contradiction"][k % 3]
        hyp = {"entailment": f"{subj.capitalize()} is {entail} .",
               "neutral": f"{subj.capitalize()} is {act} {rng.choice(NEUTRAL_EXTRAS)} .",
               "contradiction": f"{subj.capitalize()} is {contra} ."}[label]
        gold = "-" if k % 17 == 16 else label  # SNLI marks pairs without annotator consensus with "-"
        b1, p1 = _parse(premise)
        b2, p2 = _parse(hyp)
        rows.append({"annotator_labels": [label] * 5 if gold != "-" else [label, "neutral", "contradiction"],
                     "captionID": f"{1000 + start + k}.jpg#{k % 5}", "gold_label": gold,
                     "pairID": f"{1000 + start + k}.jpg#{k % 5}r1{label[0]}", "sentence1": premise,
                     "sentence1_binary_parse": b1, "sentence1_parse": p1, "sentence2": hyp,
                     "sentence2_binary_parse": b2, "sentence2_parse": p2})
    return rows


TOPICS = [("python", "programming language"), ("paris", "capital of france"), ("mars", "planet"),
          ("oak", "tree"), ("violin", "string instrument"), ("salmon", "fish"), ("everest", "mountain"),
          ("amazon", "river"), ("bach", "composer"), ("tokyo", "city in japan"), ("copper", "metal"),
          ("tulip", "flower"), ("nile", "river in africa"), ("jupiter", "gas giant"), ("chess", "board game"),
          ("latin", "language"), ("zebra", "animal"), ("sahara", "desert"), ("hamlet", "play"), ("rome", "city")]
FILLERS = ["It was first described in an old book .", "Many people visit it every year .",
           "The name has several spellings .", "It appears in numerous stories .",
           "Its history is long and complex .", "Scholars have debated its origin ."]


def wikiqa_rows(topics: list[tuple[str, str]], rng: random.Random, qstart: int,
                unanswered: int = 0) -> list[list[str]]:
    rows = []
    for qi, (name, what) in enumerate(topics):
        qid, did = f"Q{qstart + qi}", f"D{qstart + qi}"
        title = name.capitalize()
        cands = [(f"{title} is a {what} .", "1")] if qi >= unanswered else []
        cands += [(f"{title} : {f}", "0") for f in rng.sample(FILLERS, rng.randint(2, 4))]
        rng.shuffle(cands)
        for si, (sent, label) in enumerate(cands):
            rows.append([qid, f"what is {name}", did, title, f"{did}-{si}", sent, label])
    return rows


def write(out: Path) -> list[Path]:
    rng = random.Random(20191208)
    written = []
    snli = out / "snli"
    snli.mkdir(parents=True, exist_ok=True)
    for split, n, start in (("train", 72, 0), ("dev", 24, 100), ("test", 24, 200)):
        path = snli / f"snli_1.0_{split}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in snli_rows(n, rng, start)), encoding="utf-8")
        written.append(path)
    wiki = out / "wikiqa"
    wiki.mkdir(parents=True, exist_ok=True)
    header = ["QuestionID", "Question", "DocumentID", "DocumentTitle", "SentenceID", "Sentence", "Label"]
    topics = list(TOPICS)
    rng.shuffle(topics)
    for split, (lo, hi), unanswered in (("train", (0, 12), 1), ("dev", (12, 16), 1), ("test", (16, 20), 1)):
        rows = wikiqa_rows(topics[lo:hi], rng, lo + 1, unanswered=unanswered)
        path = wiki / f"WikiQA-{split}.tsv"
        path.write_text("\n".join("\t".join(r) for r in [header, *rows]) + "\n", encoding="utf-8")
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=ROOT / "tests" / "fixtures")
    args = ap.parse_args(argv)
    for p in write(args.out):
        print(p)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
